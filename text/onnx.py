"""The embedding model on ONNX Runtime: a search embeds its query without importing torch.

``export(model_dir, out)`` turns a sentence-transformers folder (the packaged all-MiniLM-L6-v2, or a
tuned copy) into ``model.onnx`` — the BERT encoder, mean pooling over the attention mask and L2
normalisation in one graph, onnxruntime's BERT fusions applied — and, with ``quantize``,
``model_int8.onnx`` (dynamic int8 weights, per channel, stored as uint8 around 128 so that every
CPU computes the same vectors: ``_quantize``) beside ``model_int8_signed.onnx``, the same numbers
as int8, which a CPU whose int8 kernel is exact runs faster (``signed_products_exact``). It runs
locally and offline, imports torch (only here), and is byte-deterministic for given versions, so
its files' hashes key a cache.

``OnnxEmbedder(folder, quantized, threads)`` embeds with onnxruntime and the model's own
``tokenizer.json`` (the ``tokenizers`` package): no torch, transformers or sentence_transformers.
fp32 vectors equal sentence-transformers' to ~1e-6 (tests compare), so an index built with either
is searched with the other; int8 vectors are a model of their own (an index records which).

Pitfalls handled (measured here): the shipped tokenizer.json truncates and pads to a fixed 128,
while sentence-transformers truncates at max_seq_length (256) (a text runs alone here, so nothing
is padded); with transformers 5 the legacy TorchScript exporter bakes BertModel's padding mask in
as a constant, so the wrapper below builds the additive mask itself. onnxruntime's offline BERT
fusions measured no faster on top of its own session optimisation, so none are applied."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mem_retrieval.records.files import (new_file_mode, new_folder_mode, private, replace_folder, seal,
                                         sha256_file, sha256_unchanged)
from mem_retrieval.records.errors import InputError, one_line
from mem_retrieval.records.parse import open_regular

if TYPE_CHECKING:
    import numpy as np

# onnxruntime (1.29 on) sends usage telemetry from Linux as well, keeping a device id under
# ~/.cache/Microsoft/DeveloperTools, and warns on stderr where it cannot write it (a read-only
# home): off, unless the user's environment says otherwise. It is read when onnxruntime is first
# imported, which in this package happens only in this module, after this line.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

EXPORT_VERSION = "onnx-v4"  # bump whenever the exported graph changes (v4: the signed copy)
PORTABLE_SINCE = 3  # from onnx-v3 on, int8 weights are stored as uint8: the same vectors on every CPU
WEIGHT_ZERO = 128  # the int8 weights w are stored as the uint8 w + 128, zero point 128 (_quantize)
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OPSET = 17
FP32, INT8 = "model.onnx", "model_int8.onnx"
SIGNED, PROBE = "model_int8_signed.onnx", "probe_int8_signed.onnx"  # INT8's signed copy; its test
MANIFEST = "export.json"


def source_key(model_dir: Path) -> str:
    """What an export depends on: the model's weights and this module's export version."""
    weights = sorted(model_dir.glob("*.safetensors")) or sorted(model_dir.glob("*.bin"))
    digest = hashlib.sha256(EXPORT_VERSION.encode())
    for path in weights:
        digest.update(sha256_unchanged(path).encode())
    return digest.hexdigest()[:16]


CACHE_ENV = "MEM_CACHE_DIR"  # the per-user export cache; set to "" or "off" for none


def cache_dir() -> Path | None:
    """The per-user cache of exports shared by every index on this machine: ``$MEM_CACHE_DIR``,
    else ``$XDG_CACHE_HOME/mem_retrieval`` (an absolute path), else ``~/.cache/mem_retrieval``; None when
    ``MEM_CACHE_DIR`` is empty or ``off``, or when there is no home folder for it: ``HOME`` empty or
    relative (read as ``/``, or against the caller's folder), or naming a folder that does not exist
    (a service account's ``/nonexistent``: the cache created the folder meant never to be)."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "off", "0") else Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # unset, or relative: the XDG specification has it ignored (relative,
        home = os.path.expanduser("~")  # it wrote a cache into the caller's folder)
        if not os.path.isabs(os.environ.get("HOME", home)) or not os.path.isdir(home):
            return None
        base = os.path.join(home, ".cache")
    return Path(base) / "mem_retrieval"


def _versions_key() -> str:
    """The exporting packages' versions, read without importing them: a cached export is only
    reused by the same torch, transformers, onnx and onnxruntime (the export is byte-deterministic
    for given versions)."""
    from importlib import metadata

    found = []
    for name in ("torch", "transformers", "onnx", "onnxruntime"):
        try:
            found.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name}=-")
    return hashlib.sha256(";".join(found).encode()).hexdigest()[:8]


def place_export(model_dir: Path, out: Path, quantize: bool,
                 problem: Callable[[Path], str | None], shared: bool = True) -> str:
    """Make ``out`` a whole export of ``model_dir`` (``problem(out)`` is None afterwards): linked
    from the per-user cache when it holds one, else exported (seconds of torch) and then shared
    through the cache. Files are hard-linked (copied across file systems): an export is never
    written in place, only replaced whole, so sharing its files is safe. Not ``shared`` (a tuned
    copy's export, which serves its own index alone), the cache is neither read nor written: each
    `mem tune` left 131 MB there for good. A cache another user can write (``records.files.private``:
    a ``MEM_CACHE_DIR`` in a shared place) is neither read nor written: its sizes-only manifest let
    a planted model be linked and loaded. Returns "cache" or "exported"."""
    root = cache_dir() if shared else None
    try:
        if root is not None and root.exists():
            root = root.resolve()  # a link of the user's own to a folder elsewhere is that folder
            if not private(root):  # another user may write there
                root = None
    except OSError:  # a name too long, a folder not ours: no cache
        root = None
    cached = root / "models" / f"{out.name}-{_versions_key()}" if root is not None else None
    try:
        if cached is not None and cached.is_dir() and private(cached, root) and problem(cached) is None \
                and all(private(path) for path in cached.rglob("*")):  # (a file of it linked elsewhere)
            _link_tree(cached, out)
            if problem(out) is None:
                return "cache"
    except OSError:
        pass  # an unreadable cache (a name too long, a folder not ours): export instead
    export(model_dir, out, quantize=quantize)
    if cached is not None:
        try:
            _link_tree(out, cached)
            seal(cached, root)  # under a umask of 002 it was group-writable: not read again
        except OSError:
            pass  # a cache that cannot be written costs only the next export
    return "exported"


def _link_tree(source: Path, target: Path) -> None:
    """Replace ``target`` with hard links to (or copies of) the files of ``source``, whole: built
    in a scratch folder and renamed into place. A file is linked only where no one else may change
    it in place (``private``: this user's, writable by no one else): a hard link is one file, and
    a workspace's export, group-writable under umask 002, linked into the per-user cache let
    another user of the workspace change the model every private workspace of this user then
    linked and loaded; nor where it grants fewer reads than a file made here would (a cache
    written under umask 077, linked into a group's workspace, was its owner's alone to read).
    Others are copied, with the mode a file made here gets, writable by this user alone."""
    mode = new_file_mode() & ~0o022

    def link(src: str, dst: str) -> None:
        if private(Path(src)) and not mode & 0o444 & ~os.stat(src).st_mode:  # (and readable as a
            try:  # file made here would be: one made under umask 077 linked into a group's workspace
                os.link(src, dst)  # was the owner's alone to read)
                return
            except OSError:
                pass
        shutil.copy2(src, dst)
        os.chmod(dst, mode)

    def fill(scratch: Path) -> None:
        shutil.copytree(source, scratch, copy_function=link, ignore=shutil.ignore_patterns(".*"))
        for folder in (scratch, *(p for p in scratch.rglob("*") if p.is_dir() and not p.is_symlink())):
            os.chmod(folder, new_folder_mode())  # (copytree gave it the source's: a cache made
            # under umask 077 gave a group's workspace a model folder its members could not open)

    replace_folder(target, fill, tag="link")


def _max_seq_length(model_dir: Path) -> int:
    try:
        return int(json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"])
    except (OSError, KeyError, ValueError):
        return 256


def export(model_dir: Path, out: Path, quantize: bool = True) -> dict[str, Any]:
    """Export ``model_dir`` into ``out`` (written whole: a scratch folder renamed at the end);
    returns the manifest (files with sha256 and size, max_seq_length, dim, versions)."""
    from mem_retrieval.text.embed import offline

    offline()
    manifest: dict[str, Any] = {}

    def fill(scratch: Path) -> None:
        scratch.mkdir(parents=True)
        started = time.perf_counter()
        dim = _trace(model_dir, scratch / FP32)
        if quantize:
            _quantize(scratch / FP32, scratch / INT8, scratch / SIGNED)
            write_probe(scratch / PROBE)
        shutil.copyfile(model_dir / "tokenizer.json", scratch / "tokenizer.json")
        manifest.update({
            "export": EXPORT_VERSION, "dim": dim, "max_seq_length": _max_seq_length(model_dir),
            "seconds": round(time.perf_counter() - started, 2), "versions": _versions(),
            "files": {p.name: {"sha256": sha256_file(p), "size": p.stat().st_size}
                      for p in sorted(scratch.iterdir()) if p.is_file()}})
        (scratch / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")

    replace_folder(out, fill)
    return manifest


def _trace(model_dir: Path, path: Path) -> int:
    """Trace the encoder with pooling and normalisation into ``path``; returns its dimension."""
    import warnings

    import torch
    import transformers

    bert = transformers.AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()

    class Encoder(torch.nn.Module):
        """BertModel's embeddings and encoder with the padding mask built here, mean-pooled and
        normalised (sentence-transformers' Pooling and Normalize)."""

        def __init__(self, model):
            super().__init__()
            self.embeddings, self.encoder = model.embeddings, model.encoder

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden = self.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
            mask = attention_mask[:, None, None, :].to(hidden.dtype)
            hidden = self.encoder(hidden, attention_mask=(1.0 - mask) * torch.finfo(hidden.dtype).min
                                  ).last_hidden_state
            weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
            return mean / mean.norm(p=2, dim=1, keepdim=True).clamp(min=1e-12)

    ids = torch.tensor([[101, 7592, 2088, 102, 0], [101, 7592, 2088, 2003, 102]], dtype=torch.long)
    axes = {name: {0: "batch", 1: "sequence"} for name in INPUTS} | {"sentence_embedding": {0: "batch"}}
    # The legacy exporter's deprecation notices, and only them: catch_warnings() would silence
    # every warning of the process (a host's other threads too) and put back the filters as they
    # were, undoing whatever the host set meanwhile.
    warnings.filterwarnings("ignore", category=DeprecationWarning,
                            module=r"mem_retrieval\.text\.onnx$|torch\.onnx(\.|$)")
    with torch.no_grad():
        torch.onnx.export(Encoder(bert).eval(), (ids, (ids != 0).long(), torch.zeros_like(ids)),
                          str(path), dynamo=False, opset_version=OPSET, input_names=list(INPUTS),
                          output_names=["sentence_embedding"], dynamic_axes=axes,
                          do_constant_folding=True)
    return int(bert.config.hidden_size)


def _quantize(fp32: Path, int8: Path, signed: Path) -> None:
    """Dynamic int8 weights, per channel (per tensor measured far worse: 1 − cos up to 0.17):
    as ONNX Runtime writes them into ``signed``, and stored as uint8 (``_unsigned_weights``) into
    ``int8``, which every CPU computes exactly."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    import onnxruntime.quantization

    quantizer = str(Path(onnxruntime.quantization.__file__).parent)

    def not_quantizer(record: logging.LogRecord) -> bool:  # its advice on pre-processing, logged
        return not record.pathname.startswith(quantizer)  # on the root logger, and only that

    root = logging.getLogger()
    root.addFilter(not_quantizer)  # (the root's level is the host's: a host thread logging
    try:                           # meanwhile is heard)
        quantize_dynamic(str(fp32), str(signed), weight_type=QuantType.QInt8, per_channel=True)
    finally:
        root.removeFilter(not_quantizer)
    shutil.copyfile(signed, int8)
    _unsigned_weights(int8)


def _unsigned_weights(path: Path) -> None:
    """Rewrite each ``MatMulInteger``'s int8 weights w (zero point 0) as the uint8 w + 128 with
    zero point 128: the same numbers, so the same exact products, by another kernel.

    With int8 weights the vectors depended on the CPU. ONNX Runtime multiplies the uint8
    activations by int8 weights with VPMADDUBSW wherever the CPU lacks VNNI (AVX2, AVX-512 without
    VNNI), which adds each pair of products in 16 bits and saturates (255 · 127 · 2 > 32,767): on
    such a CPU (AMD EPYC, AVX2) nearly every cell of a 64 × 384 · 384 × 384 product differed from
    the exact one, and an index there ranked otherwise than the same index on a CPU with VNNI
    (development set nDCG@10 .421 against .428); searched on another CPU than the one that
    embedded it, an index mixed two models. Its uint8 × uint8 kernel widens to 16 bits before it
    multiplies and is exact everywhere, so the products are a CPU with VNNI's on every CPU (on AVX2
    the skill files' scores to the digit; the float operations between them may still round
    otherwise), at 1.35–1.41× fp32's texts/s on AVX2 against the saturating 1.49–1.53×. No CPU
    runs that kernel on VNNI (ONNX Runtime's int8 kernels for VNNI and AMX take int8 weights), so
    the export keeps the int8 weights too (``SIGNED``), which a CPU that multiplies them exactly
    runs instead (``signed_products_exact``). 7-bit weights (``reduce_range``) are exact too and
    keep VNNI, but they move the vectors further from those the fused score's weights were chosen
    with: measured on AVX2, `mem eval fusion` then chose other tables for both kinds of query
    (cross-validated R@10 .584 against .662 for run queries), where with these it chooses the
    shipped ones again."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    weights = {init.name: init for init in model.graph.initializer}
    uses: dict[str, list[tuple[str, int]]] = {}
    for node in model.graph.node:
        for place, name in enumerate(node.input):
            uses.setdefault(name, []).append((node.op_type, place))
    products = [node for node in model.graph.node if node.op_type == "MatMulInteger"]
    if any(len(node.input) < 4 or not node.input[3] for node in products):
        raise ValueError(f"{path}: a MatMulInteger without its weights' zero point")
    for name in sorted({node.input[place] for node in products for place in (1, 3)}):
        values = numpy_helper.to_array(weights[name]) if name in weights else None
        if values is None or values.dtype != np.int8 or any(
                use[0] != "MatMulInteger" or use[1] not in (1, 3) for use in uses[name]):
            raise ValueError(f"{path}: {name} is not an int8 weight of MatMulInteger alone")
        weights[name].CopyFrom(numpy_helper.from_array(
            (values.astype(np.int16) + WEIGHT_ZERO).astype(np.uint8), name))
    onnx.save(model, str(path))


PROBE_DEPTH, PROBE_WIDTH = 384, 32  # the model's own inner dimension


def _probe_weights() -> "np.ndarray":
    """The probe's int8 weights: a column of 127s, one of -127s (255 · ±127 in every product: a
    16-bit pair sum cannot hold two), and the rest spread over -127 … 127 by a fixed formula (no
    random generator, whose stream could change between the export and the run)."""
    import numpy as np

    k, n = np.meshgrid(np.arange(PROBE_DEPTH), np.arange(PROBE_WIDTH), indexing="ij")
    weights = (k * 37 + n * 11) % 255 - 127
    weights[:, 0], weights[:, 1] = 127, -127
    return weights.astype(np.int8)


def write_probe(path: Path) -> None:
    """A one-product graph as the model's: uint8 activations (any rows, a zero point as
    ``DynamicQuantizeLinear`` gives) times the constant int8 ``_probe_weights``, zero point 0."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B", "a_zero", "b_zero"], ["Y"])], "probe",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [None, PROBE_DEPTH]),
         helper.make_tensor_value_info("a_zero", TensorProto.UINT8, [])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, [None, PROBE_WIDTH])],
        initializer=[numpy_helper.from_array(_probe_weights(), "B"),
                     numpy_helper.from_array(np.zeros(PROBE_WIDTH, dtype=np.int8), "b_zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))


_EXACT: dict[str, bool] = {}


def _readable(path: Path) -> None:
    """Raise the machine's refusal when this process may not read ``path``: a file out of reach
    is no damage, and `mem index --full`, which the damage's line advises, is refused as well."""
    if not os.access(path, os.R_OK, effective_ids=True):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))


def signed_products_exact(probe: Path) -> bool:
    """Whether ONNX Runtime on this CPU multiplies uint8 activations by int8 weights exactly: the
    ``write_probe`` graph against integer arithmetic, on one row (its matrix-vector kernel) and
    on 64 (its matrix kernel), activations at 255 and spread, zero points 0 and 117. Where it is,
    the signed copy computes the uint8 model's very products, by the kernel ONNX Runtime keeps for
    VNNI and AMX; where it is not (AVX2, AVX-512 without VNNI: pair sums saturate), only the
    uint8 model is exact. Measured once per probe file and process (a few ms); any failure answers
    False."""
    import numpy as np

    if str(probe) in _EXACT:
        return _EXACT[str(probe)]
    exact = False
    try:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 3
        session = ort.InferenceSession(str(probe), sess_options=options,
                                       providers=["CPUExecutionProvider"])
        weights = _probe_weights().astype(np.int64)
        rows = np.arange(64)[:, None] * 53 + np.arange(PROBE_DEPTH)[None, :] * 29
        spread = (rows % 256).astype(np.uint8)
        spread[0] = 255
        exact = True
        for activations in (spread[:1], spread):
            for zero in (0, 117):
                found = session.run(None, {"A": activations, "a_zero": np.array(zero, dtype=np.uint8)})[0]
                exact &= bool(np.array_equal(found, (activations.astype(np.int64) - zero) @ weights))
    except Exception:  # noqa: BLE001 - a probe that cannot run says: not known to be exact
        exact = False
    _EXACT[str(probe)] = exact
    return exact


def _versions() -> dict[str, str]:
    import onnx
    import onnxruntime
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The export manifest in ``folder`` (None: none, or not a JSON object); one the machine
    refuses to let this process read is raised (PermissionError: no damage, nothing to rebuild)."""
    try:
        with open_regular(folder / MANIFEST) as handle:  # a pipe there hung a new index
            return parse_manifest(handle.read())
    except PermissionError:
        raise
    except OSError:
        return None


def parse_manifest(data: bytes | None) -> dict[str, Any] | None:
    """An export manifest from its bytes (None: no bytes, or not a JSON object)."""
    try:
        manifest = json.loads(data) if data is not None else None
    except ValueError:
        return None
    return manifest if isinstance(manifest, dict) else None


def manifest_problem(folder: Path, hashes: bool = False) -> str | None:
    """Why ``folder`` is not a whole export (files missing or of another size), or None: a cheap
    check a query can afford (sizes, not hashes); ``hashes``: their sha256 too (a download)."""
    manifest = read_manifest(folder)
    if manifest is None:
        return f"{folder} holds no export manifest"
    for name, entry in manifest.get("files", {}).items():
        path = folder / name
        if not path.is_file() or path.stat().st_size != entry["size"] \
                or (hashes and sha256_file(path) != entry.get("sha256")):
            return f"{path} is missing or changed"
    return None


def downloaded_problem(folder: Path) -> str | None:
    """``manifest_problem`` with hashes: a download from an object store is checked whole once."""
    return manifest_problem(folder, hashes=True)


class OnnxEmbedder:
    """Unit float32 vectors from an export folder, without torch.

    Each text runs alone (a batch of one): no padding, and a vector that does not depend on the
    texts beside it (int8 weights quantise activations per call, so in a batch a text's vector
    moved by up to 0.025 with its neighbours; alone it equals the query path's, bit for bit). A
    bulk ``embed`` runs ``workers`` single-threaded sessions side by side (onnxruntime and the
    tokenizer release the GIL): on 2 busy cores 2×1 measured about twice 1×2. With int8 weights it
    runs the signed copy where this CPU multiplies it exactly (``signed_products_exact``), else the
    uint8 model: the same products either way, so one model (``model`` says which file runs)."""

    def __init__(self, folder: Path, quantized: bool, workers: int = 1, signed: bool | None = None):
        manifest = read_manifest(folder)
        if manifest is None:
            raise ValueError(f"{folder} holds no export manifest ({MANIFEST})")
        self.dim = int(manifest["dim"])
        self.model = folder / (INT8 if quantized else FP32)
        if quantized and signed is None:  # True or False: that int8 file whatever the CPU (benchmarks)
            signed = all((folder / name).is_file() for name in (SIGNED, PROBE)) \
                and signed_products_exact(folder / PROBE)
        if quantized and signed:
            self.model = folder / SIGNED  # the same products, by the faster kernel (VNNI, AMX)
        self.max_seq_length = int(manifest["max_seq_length"])
        self.tokenizer_file = folder / "tokenizer.json"
        try:
            self.sessions = [self._session() for _ in range(max(1, workers))]
        except Exception as error:  # (onnxruntime's: a file of the right size and other bytes)
            if not type(error).__module__.startswith("onnxruntime"):
                raise
            _readable(self.model)
            why = one_line(str(error))[:200]
            raise InputError(str(self.model), None, None, "the index's ONNX model is damaged (onnxruntime "
                             f"cannot load it: {why}): run `mem index --full`") from None
        try:
            self.tokenizers = [self._tokenizer() for _ in self.sessions]  # one per worker thread
        except Exception as error:  # (the tokenizers library raises a bare Exception)
            _readable(self.tokenizer_file)
            why = one_line(str(error))[:200]
            raise InputError(str(self.tokenizer_file), None, None, "the index's ONNX model is damaged (its "
                             f"tokenizer cannot be read: {why}): run `mem index --full`") from None

    def _tokenizer(self):
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(self.tokenizer_file))
        tokenizer.enable_truncation(max_length=self.max_seq_length)
        tokenizer.no_padding()
        return tokenizer

    def _session(self):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        return ort.InferenceSession(str(self.model), sess_options=options,
                                    providers=["CPUExecutionProvider"])

    def _run(self, text: str, session, tokenizer) -> "np.ndarray":
        import numpy as np

        encoding = tokenizer.encode(text)
        feed = {"input_ids": np.array([encoding.ids], dtype=np.int64),
                "attention_mask": np.array([encoding.attention_mask], dtype=np.int64),
                "token_type_ids": np.array([encoding.type_ids], dtype=np.int64)}
        return session.run(["sentence_embedding"], feed)[0][0].astype(np.float32, copy=False)

    def embed(self, texts: list[str], progress=None) -> "np.ndarray":
        """One unit row per text, in the order given, longest first across the workers;
        ``progress(texts, chars)`` after each text. Interrupted (Ctrl-C), or a worker failing, the
        workers stop after the text each is on, and the error is raised here: they ran on through
        every text left (minutes), and a worker's error was lost, its rows left unwritten."""
        import threading

        import numpy as np

        out = np.empty((len(texts), self.dim), dtype=np.float32)
        order = iter(sorted(range(len(texts)), key=lambda i: -len(texts[i])))
        lock = threading.Lock()
        stop = threading.Event()
        failed: list[BaseException] = []

        def work(session, tokenizer, finished=None) -> None:
            try:
                while not stop.is_set():
                    with lock:
                        i = next(order, None)
                    if i is None:
                        return
                    out[i] = self._run(texts[i], session, tokenizer)
                    if progress is not None:
                        with lock:
                            progress(1, len(texts[i]))
            except BaseException as error:
                failed.append(error)
                stop.set()
            finally:
                if finished is not None:
                    finished.set()

        if len(self.sessions) == 1 or len(texts) < 2:
            work(self.sessions[0], self.tokenizers[0])
        else:
            finished = [threading.Event() for _ in self.sessions]  # not join(): interrupted, it
            for args in zip(self.sessions, self.tokenizers, finished):  # may say a thread ended early
                threading.Thread(target=work, args=args, daemon=True).start()
            try:
                _wait_for(finished)
            except BaseException:  # Ctrl-C in this thread: the workers end their current text
                stop.set()
                _wait_for(finished)
                raise
        if failed:
            raise failed[0]
        return out

    def embed_query(self, text: str) -> "np.ndarray":
        return self._run(text, self.sessions[0], self.tokenizers[0])


WAIT_SLICE_S = 0.1  # how long the main thread waits for the workers between two looks at its signals


def _wait_for(events) -> None:
    """Wait until every event is set, in slices: a signal the kernel gave another thread (a worker,
    LanceDB's) runs its handler only when the main thread runs Python, and a wait with no timeout
    held a Ctrl-C until every text of the batch was embedded (30 s), a SIGTERM until its grace."""
    for event in events:
        while not event.wait(WAIT_SLICE_S):
            pass
