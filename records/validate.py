"""The one validator every reader of a user's file goes through (tree.json, events.jsonl,
library.jsonl, the settings ontology, configs, evaluation queries, the frontier's problem file).

``Fields(obj, file, line, prefix, allowed)`` gives typed access to one decoded JSON or TOML object;
every failure is an ``InputError`` naming the file, the line (when the format has one) and the field
(``prefix`` + name, e.g. ``steps[3].audit.grade``). Unknown fields are refused: they are usually
typos, and silently ignoring one loses what the user meant."""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from typing import Any, NoReturn

from mem_retrieval.records.errors import InputError, type_name

_SURROGATE = re.compile("[\ud800-\udfff]")


def text_problem(value: str) -> str | None:
    """Why a string cannot be stored as text (a NUL byte, an unpaired surrogate), or None."""
    if "\x00" in value:
        return "contains a NUL byte"
    bad = _SURROGATE.search(value)
    if bad:
        return f"contains an unpaired surrogate \\u{ord(bad.group()):04x} (not Unicode text)"
    return None


MAX_ARGUMENT_CHARS = 16_384  # a function's text argument (an id, a run, a time, a query): a
# refusal repeats the value, and a 1 MB one overflowed an MCP client's event


def surrogate_problem(value: str) -> str | None:
    """An unpaired surrogate (bytes that were not UTF-8, decoded with surrogateescape, or a lone
    ``\\ud800`` escape) makes a string no Unicode text: nothing can encode, store or search it."""
    return "is not valid Unicode text (it holds an unpaired surrogate)" if _SURROGATE.search(value) else None


def said_not_whole(value: Any) -> str:
    """``value``, not a whole number, as a message names it: a fraction by its value (``2.0``,
    ``1.5``, ``nan``: "a number" read as if numbers were refused), else by its type."""
    return repr(value) if isinstance(value, float) else type_name(value)


class Fields:
    """Typed access to one object, raising InputError at (file, line, prefix + field)."""

    def __init__(self, obj: Any, file: str, line: int | None, prefix: str,
                 allowed: Collection[str] | None, kind: str = "a JSON object"):
        if not isinstance(obj, dict):
            raise InputError(file, line, prefix.rstrip(".") or None,
                             f"must be {kind}, not {type_name(obj)}")
        self.obj, self.file, self.line, self.prefix = obj, file, line, prefix
        if allowed is not None:
            unknown = sorted(set(obj) - set(allowed))
            if unknown:
                self.fail(unknown[0], f"unknown field (known: {', '.join(sorted(allowed))})")

    def fail(self, name: str, message: str) -> NoReturn:
        raise InputError(self.file, self.line, f"{self.prefix}{name}", message)

    def has(self, name: str) -> bool:
        return name in self.obj

    def str(self, name: str, *, required: bool = False, default: str = "",
            nonempty: bool = False, why: str = "") -> str:
        """``why``: why the field is required, said when it is missing (``missing: missing`` read
        as a stutter)."""
        if name not in self.obj:
            if required:
                self.fail(name, f"missing ({why})" if why else "missing")
            return default
        value = self.obj[name]
        if not isinstance(value, str):
            self.fail(name, f"must be a string, not {type_name(value)}")
        problem = text_problem(value)
        if problem:
            self.fail(name, problem)
        if nonempty and not value.strip():
            self.fail(name, "must not be empty")
        return value

    def opt_str(self, name: str) -> str | None:
        """A string, or None when the field is absent or null."""
        if self.obj.get(name) is None:
            return None
        return self.str(name)

    def enum(self, name: str, choices: Collection[str], *, required: bool = True) -> str:
        value = self.str(name, required=required)
        if value not in choices and (required or value):
            self.fail(name, f"{value!r} is not one of {', '.join(choices)}")
        return value

    def str_list(self, name: str) -> tuple[str, ...]:
        value = self.obj.get(name, [])
        if value is None:
            return ()
        if not isinstance(value, list):
            self.fail(name, f"must be a list of strings, not {type_name(value)}")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                self.fail(f"{name}[{i}]", f"must be a string, not {type_name(item)}")
            problem = text_problem(item)
            if problem:
                self.fail(f"{name}[{i}]", problem)
        return tuple(value)

    def bool(self, name: str, default: bool = False) -> bool:
        value = self.obj.get(name, default)
        if not isinstance(value, bool):
            self.fail(name, f"must be true or false, not {type_name(value)}")
        return value

    def int(self, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
        value = self.obj.get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(name, f"must be a whole number, not {said_not_whole(value)}")
        self._in_range(name, value, minimum, maximum)
        return value

    def number(self, name: str, *, minimum: float | None = None, maximum: float | None = None,
               default: float | None = None) -> float:
        """A finite number (an integer is accepted as a float)."""
        value = self.obj.get(name, default)
        if isinstance(value, int) and not isinstance(value, bool):
            try:
                float(value)
            except OverflowError:  # JSON and TOML take whole numbers of any size
                self.fail(name, f"must be a number a float holds, not a whole number of "
                          f"{len(str(abs(value)))} digits")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.fail(name, f"must be a number, not {value!r}" if isinstance(value, float)
                      else f"must be a number, not {type_name(value)}")
        self._in_range(name, value, minimum, maximum)
        return float(value)

    def _in_range(self, name: str, value: float, minimum: float | None, maximum: float | None) -> None:
        if minimum is not None and maximum is not None and not minimum <= value <= maximum:
            self.fail(name, f"must be between {minimum:g} and {maximum:g}, not {value!r}")
        if minimum is not None and value < minimum:
            self.fail(name, f"must be at least {minimum:g}, not {value!r}")
        if maximum is not None and value > maximum:
            self.fail(name, f"must be at most {maximum:g}, not {value!r}")
