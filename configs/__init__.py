"""Configuration: configs/default.toml, overridden by WORKSPACE/solve/mem.toml and --config FILE."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mem_retrieval.records.errors import InputError

DEFAULT = Path(__file__).resolve().parent / "default.toml"


@dataclass(frozen=True)
class Config:
    page_size: int
    pool: int
    rerank_k: int
    fusion_weight: float
    hint_window: int
    bm25_engine: str
    bm25_k1: float
    bm25_b: float
    model_name: str
    model_package: str
    model_dim: int
    batch_size: int
    max_chars: int
    event_body_chars: int
    source_chars: int


_KEYS = {
    ("search", "page_size"): ("page_size", int), ("search", "pool"): ("pool", int),
    ("search", "rerank_k"): ("rerank_k", int), ("search", "fusion_weight"): ("fusion_weight", float),
    ("search", "hint_window"): ("hint_window", int),
    ("bm25", "engine"): ("bm25_engine", str), ("bm25", "k1"): ("bm25_k1", float),
    ("bm25", "b"): ("bm25_b", float),
    ("model", "name"): ("model_name", str), ("model", "package"): ("model_package", str),
    ("model", "dim"): ("model_dim", int), ("model", "batch_size"): ("batch_size", int),
    ("model", "max_chars"): ("max_chars", int),
    ("index", "event_body_chars"): ("event_body_chars", int),
    ("index", "source_chars"): ("source_chars", int),
}
ENGINES = ("lance", "rank-bm25")


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(str(path), None, None, f"cannot read: {err}") from None
    except tomllib.TOMLDecodeError as err:
        raise InputError(str(path), None, None, f"invalid TOML: {err}") from None


def load_config(workspace: Path | None = None, override: Path | None = None) -> Config:
    values: dict[str, Any] = {}
    files = [DEFAULT]
    if workspace is not None and (workspace / "solve" / "mem.toml").is_file():
        files.append(workspace / "solve" / "mem.toml")
    if override is not None:
        files.append(Path(override))
    for path in files:
        for section, table in _read(path).items():
            if not isinstance(table, dict):
                raise InputError(str(path), None, section, "must be a [table]")
            for key, value in table.items():
                if (section, key) not in _KEYS:
                    raise InputError(str(path), None, f"{section}.{key}", "unknown setting")
                name, kind = _KEYS[(section, key)]
                if kind is float and isinstance(value, int) and not isinstance(value, bool):
                    value = float(value)
                if not isinstance(value, kind) or isinstance(value, bool):
                    raise InputError(str(path), None, f"{section}.{key}",
                                     f"must be {kind.__name__}, not {type(value).__name__}")
                values[name] = value
    config = Config(**values)
    if config.bm25_engine not in ENGINES:
        raise InputError(str(files[-1]), None, "bm25.engine",
                         f"{config.bm25_engine!r} is not one of {', '.join(ENGINES)}")
    if config.page_size < 1 or config.pool < 1 or config.rerank_k < 0:
        raise InputError(str(files[-1]), None, "search", "page_size and pool must be >= 1, rerank_k >= 0")
    if not 0.0 <= config.fusion_weight <= 1.0:
        raise InputError(str(files[-1]), None, "search.fusion_weight", "must be between 0 and 1")
    return config
