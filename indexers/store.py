"""The on-disk index: a LanceDB database in WORKSPACE/.mem, its tables, and what it was built with.

``meta.json`` records the tokenizer version, BM25 parameters and model name/dimension; an index
built with other values is refused with one line asking for ``mem index --full``. Filters are built
only from integer keys computed here (``key``), never from user text."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mem_retrieval.configs import Config
from mem_retrieval.records.errors import InputError
from mem_retrieval.records.files import write_atomic
from mem_retrieval.text.tokenize import VERSION as TOKENIZER_VERSION

FORMAT = 3  # 2: steps carry parent_keys (the citation graph); 3: rows say whether they are embedded
STEPS, EVENTS, SOURCES = "steps", "events", "sources"
META = "meta.json"
LOCK = "index.lock"


class IndexMismatch(InputError):
    """The index was built with other parameters (or is missing or corrupt)."""

    def __init__(self, message: str):
        super().__init__(".mem/meta.json", None, None, message)


def key(text: str) -> int:
    """A stable signed 64-bit key for an id, run, or setting text (the only values put in filters)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big",
                          signed=True)


def in_list(column: str, keys: list[int] | set[int]) -> str:
    """``column IN (k1, k2, …)`` from integer keys (never from user text)."""
    values = sorted({int(k) for k in keys})
    return f"{column} IN ({', '.join(str(v) for v in values)})" if values else "FALSE"


def build_params(config: Config, tuned: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the index depends on: a difference means vectors or tokens would be mixed. ``tuned``:
    the provenance of a tuned copy of the configured model (`mem tune`) that embedded it."""
    model = {"name": config.model.name, "package": config.model.package, "dim": config.model.dim,
             "quantized": config.model.quantize}
    return {
        "format": FORMAT,
        "tokenizer": TOKENIZER_VERSION,
        "bm25": {"engine": config.bm25.engine, "k1": config.bm25.k1, "b": config.bm25.b},
        "model": model | ({"tuned": tuned} if tuned else {}),
    }


def tuned_of(meta: dict[str, Any] | None) -> dict[str, Any] | None:
    """The tuned model's provenance an index records (None: the configured model itself)."""
    model = (meta or {}).get("model")
    return model.get("tuned") if isinstance(model, dict) else None


def model_spec(index_dir: Path, meta: dict[str, Any] | None, config: Config):
    """How a search embeds its query for the index ``meta`` describes: the index's model (a tuned
    copy or the configured one), on the ONNX export the index recorded when the config's backend
    is onnx (checked to be whole), else on torch — only for fp32 weights, whose vectors the two
    backends share."""
    from mem_retrieval.text.embed import ModelSpec

    model = model_ref(index_dir, meta, config)
    export = (meta or {}).get("export") or {}
    quantized = bool(((meta or {}).get("model") or {}).get("quantized"))
    if config.model.backend == "onnx" and export.get("path"):
        from mem_retrieval.text.onnx import manifest_problem

        folder = index_dir / export["path"]
        problem = manifest_problem(folder)
        if problem is None:
            return ModelSpec(model, str(folder), quantized)
        if quantized:
            raise IndexMismatch(f"the index's ONNX model is damaged ({problem}): run `mem index --full`")
    if quantized:
        raise IndexMismatch("the index was embedded with int8 weights, which only the onnx backend "
                            "runs: set model.backend = \"onnx\", or run `mem index --full`")
    return ModelSpec(model)


def model_ref(index_dir: Path, meta: dict[str, Any] | None, config: Config) -> str:
    """The model that embedded the index, for the texts and queries still to embed: the tuned
    copy it records (checked to be there, file for file as it was saved: an index never mixes two
    models), else the configured one."""
    tuned = tuned_of(meta)
    if not tuned:
        return config.model.package
    folder = index_dir / tuned["path"]
    sizes = tuned.get("sizes", {})
    found = {f.name: f.stat().st_size for f in folder.iterdir() if f.is_file()} if folder.is_dir() else {}
    if not sizes or any(found.get(name) != size for name, size in sizes.items()):
        raise IndexMismatch(f"the index was embedded by the tuned model {tuned['path']}, whose files "
                            "are missing or changed: run `mem tune` again, or `mem tune --reset`")
    return str(folder)


def read_meta(index_dir: Path) -> dict[str, Any] | None:
    path = index_dir / META
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise IndexMismatch(f"the index in {index_dir} is corrupt (unreadable meta.json): "
                            "run `mem index --full`") from None
    versions = meta.get("versions", {}) if isinstance(meta, dict) else None
    settings = meta.get("settings", []) if isinstance(meta, dict) else None
    if (not isinstance(versions, dict) or not isinstance(settings, list)
            or not all(type(v) is int and v > 0 for v in versions.values())
            or not all(isinstance(s, str) for s in settings)):
        raise IndexMismatch(f"the index in {index_dir} is corrupt: run `mem index --full`")
    return meta


def mismatch(meta: dict[str, Any], config: Config) -> str | None:
    """Why an index built with ``meta`` cannot serve ``config``, or None."""
    want = build_params(config, tuned_of(meta))  # a tuned copy of the configured model is that model
    for name, label in (("format", "index format"), ("tokenizer", "tokenizer"), ("model", "model")):
        if meta.get(name) != want[name]:
            return f"{label} differs: index has {meta.get(name)!r}, config wants {want[name]!r}"
    have_bm25 = meta.get("bm25") or {}
    if (have_bm25.get("k1"), have_bm25.get("b")) != (want["bm25"]["k1"], want["bm25"]["b"]):
        return f"BM25 parameters differ: index has {have_bm25!r}, config wants {want['bm25']!r}"
    return None


def check_meta(index_dir: Path, config: Config) -> dict[str, Any]:
    """The meta of a usable index, or IndexMismatch naming the fix."""
    meta = read_meta(index_dir)
    if meta is None:
        raise IndexMismatch(f"no index in {index_dir}: run `mem index`")
    why = mismatch(meta, config)
    if why:
        raise IndexMismatch(f"the index was built with other parameters ({why}): run `mem index --full`")
    return meta


def write_meta(index_dir: Path, meta: dict[str, Any]) -> None:
    write_atomic(index_dir / META, json.dumps(meta, indent=1, sort_keys=True) + "\n")


class IndexDamaged(InputError):
    """A LanceDB file or table of the index is missing, truncated or garbled."""

    def __init__(self, index_dir: Path, detail: str):
        super().__init__(str(index_dir), None, None,
                         f"the index is damaged ({detail}): run `mem index --full`")


_DAMAGE_WORDS = ("LanceError(IO)", "Not found", "no longer exists", "corrupt", "does not exist")


def is_damage(error: BaseException) -> bool:
    """Whether ``error`` was raised inside lancedb/lance/pyarrow because a file of the index is
    missing, truncated or garbled (rather than by a bug: those are not hidden)."""
    frames, tb = [], error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_globals.get("__name__", ""))
        tb = tb.tb_next
    if not any(name.split(".")[0] in ("lancedb", "lance", "pyarrow") for name in frames):
        return False
    if isinstance(error, (OSError, RuntimeError)) or type(error).__name__ == "PanicException":
        return True
    return isinstance(error, ValueError) and any(w in str(error) for w in _DAMAGE_WORDS)


@contextlib.contextmanager
def guard(index_dir: Path) -> Iterator[None]:
    """Report an error from a damaged index as one line naming the fix (IndexDamaged)."""
    try:
        yield
    except BaseException as error:  # lance reports a Rust panic as a BaseException
        if isinstance(error, InputError) or not is_damage(error):
            raise
        detail = str(error).split("\n")[0].split(", /")[0][:200]  # without lance's Rust source path
        raise IndexDamaged(index_dir, f"{type(error).__name__}: {detail}") from None


def drop_table_files(index_dir: Path, name: str) -> None:
    """Delete a damaged table's folder (``mem index --full`` then builds it afresh)."""
    import shutil

    shutil.rmtree(index_dir / "lance" / f"{name}.lance", ignore_errors=True)


def connect(index_dir: Path):
    """The LanceDB connection (lancedb imported here, on first use)."""
    import os

    os.environ.setdefault("LANCEDB_LOG", "error")
    import lancedb

    return lancedb.connect(str(index_dir / "lance"))


def open_table(db, name: str):
    """A table, or None when it does not exist yet."""
    try:
        return db.open_table(name)
    except (FileNotFoundError, ValueError):
        return None
