"""Token counts for W's bound (M4): word pieces of the embedding model's own tokenizer.

The tokenizer.json shipped offline with the model package is loaded by the light `tokenizers`
library (no torch, no sentence-transformers), without truncation or padding, and counted without
the special tokens [CLS]/[SEP]: an exact count of what the model would read, never an estimate."""

from __future__ import annotations

import importlib
from functools import lru_cache
from pathlib import Path
from typing import Any

from mem_retrieval.records.errors import BadInput

CORE_TOKEN_LIMIT = 2000


@lru_cache(maxsize=4)
def tokenizer(package: str) -> Any:
    """The package's word-piece tokenizer, loaded once per process."""
    from tokenizers import Tokenizer

    try:
        path = Path(importlib.import_module(package).get_model_path()) / "tokenizer.json"
    except (ImportError, AttributeError) as err:
        raise BadInput(f"model package {package!r} cannot give its tokenizer: {err}") from None
    if not path.is_file():
        raise BadInput(f"model package {package!r} ships no tokenizer.json ({path})")
    loaded = Tokenizer.from_file(str(path))
    loaded.no_truncation()
    loaded.no_padding()
    return loaded


def count_tokens(text: str, package: str) -> int:
    """Word pieces in ``text`` (no special tokens, no truncation)."""
    return len(tokenizer(package).encode(text, add_special_tokens=False).ids)


def count_line_tokens(lines: list[str], package: str) -> list[int]:
    """Word pieces in each line. The tokenizer splits on white space first, so the counts of a
    text's lines add up to the count of the text."""
    if not lines:
        return []
    encodings = tokenizer(package).encode_batch(lines, add_special_tokens=False)
    return [len(encoding.ids) for encoding in encodings]
