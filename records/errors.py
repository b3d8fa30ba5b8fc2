"""The errors this package raises on purpose: one base carrying its exit status, two meanings.

- ``Refused`` (exit 1): the request is well formed but refused or finds nothing (an unknown id, a
  write that would break an invariant, a page past the last).
- ``BadInput`` (exit 2): bad usage (an argument value that can never work) or bad input in a file;
  ``InputError``, its located form, names the file, the line and the field.

Messages are one line and speak of the API's own parameters (``param``: ``kind``, ``until``); the
command line rewords those as its flags (``--kind``). Anything else escaping is a bug, and shows as
one."""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Problem:
    """Something wrong in a file: where (file, line, field) and what."""

    file: str
    line: int | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        what = f"{self.field}: {self.message}" if self.field else self.message
        return one_line(f"{where}: {what}")


def one_line(text: str) -> str:
    """``text`` with control characters (newlines included) and unpaired surrogates escaped, so
    that a message quoting bad input stays one printable line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def quoted(value: Any, limit: int = 200) -> str:
    """``repr(value)`` for a message, cut to about ``limit`` characters (escapes counted as
    written), with the length it had: a message quoting a record's field (a 50 MB statement,
    100,000 hypotheses) stays a line one reads."""
    shown = repr(value)
    if len(shown) <= limit + 40:
        return shown
    if isinstance(value, str):
        kept = limit
        while kept > 8 and len(repr(value[:kept])) > limit + 2:  # escapes make a character longer
            kept = kept * 2 // 3
        cut = repr(value[:kept])
        return f"{cut[:-1]}…{cut[-1]} ({plural(len(value), 'character')})"
    items = list(value)
    kept = 0
    while kept < len(items) and len(repr(items[: kept + 1])) <= limit:
        kept += 1
    first = repr(items[:kept])[1:-1] if kept else quoted(items[0], limit)
    return f"[{first}, …] ({plural(len(items), 'item')})"


# The machine refusing memory or a thread, as Python and LanceDB's Rust code say it, matched whole
# (a path in a message, a folder named "os error 11", must not read as one): Rust's thread spawn
# and allocation (os error 11, 12), a shared library that cannot be mapped.
_RESOURCE_SAID = re.compile(r"can't spawn worker thread: [^/\n]{0,80}\(os error 1[12]\)"
                            r"|Failed to launch worker thread: Resource temporarily unavailable$"
                            r"|Cannot allocate memory \(os error 12\)")


def resource_refusal(error: BaseException, text: str | None = None) -> str | None:
    """The machine refusing this process memory or a thread (an address-space limit, `ulimit -v`;
    a thread limit), as ``error`` reports it (``text``: its message, a path in it taken out), or
    None: the machine's refusal, not a bug nor a damaged file, said in one line."""
    text = str(error) if text is None else text
    if isinstance(error, MemoryError) or (isinstance(error, OSError) and error.errno == errno.ENOMEM):
        return "Cannot allocate memory"  # (pyarrow's ArrowMemoryError is a MemoryError)
    if isinstance(error, RuntimeError) and text == "can't start new thread":
        return "Cannot start a thread"
    if isinstance(error, (ImportError, OSError)) and text.endswith("failed to map segment from shared "
                                                                   "object"):
        return "Cannot allocate memory"
    if found := _RESOURCE_SAID.search(text):
        return "Cannot allocate memory" if "memory" in found.group() else "Cannot start a thread"
    return None


_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str) -> str:
    """``text`` for a terminal: line feeds and tabs kept, the other control characters (ESC, which
    clears a screen, writes a clipboard or hides text; a CR, a backspace) and the bidirectional
    overrides (a line shown reversed) escaped as ``one_line`` escapes them. Records are a model's
    output: what they hold must not reach the terminal as commands."""
    return _UNSAFE.sub(lambda match: ascii(match.group())[1:-1], text)


def unescape(text: str) -> str:
    """``text`` with the escapes ``one_line`` writes (``\\xNN``, ``\\uNNNN``, ``\\UNNNNNNNN``,
    ``\\n``…) read back as their characters, and those an output in ASCII writes (``\\u00dc``;
    past U+FFFF a surrogate pair, ``\\ud83d\\ude42``, read as its one character): an id a message
    showed escaped, typed or pasted as shown. An escape of a lone surrogate stays as typed: it is
    no character, and nothing could be looked up by it."""
    if "\\" not in text:
        return text

    def character(match: re.Match[str]) -> str:
        if match.group(1):
            return _CONTROL[match.group(1)]
        if match.group(2):  # a surrogate pair
            high, low = int(match.group(2), 16), int(match.group(3), 16)
            return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
        code = int(match.group(4) or match.group(5) or match.group(6), 16)
        if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            return match.group()
        return chr(code)

    return _ESCAPE.sub(character, text)


_ESCAPE = re.compile(r"\\([ntr])|\\u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})"
                     r"|\\x([0-9a-fA-F]{2})|\\u([0-9a-fA-F]{4})|\\U([0-9a-fA-F]{8})")
_CONTROL = {"n": "\n", "t": "\t", "r": "\r"}


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 violation``, ``2 violations``, ``1,000 hits`` (``many``: an irregular plural)."""
    return f"{count:,} {word if count == 1 else many or word + 's'}"


def listed(names, limit: int = 10) -> str:
    """``names`` for a message: the first ``limit`` joined by commas, then how many there are in
    all when some are left out (``a, b, … (26 in all)``); "none" for none."""
    names = list(names)
    shown = ", ".join(names[:limit]) or "none"
    return f"{shown}, … ({len(names):,} in all)" if len(names) > limit else shown


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, found without importing it (Ray's import takes
    seconds): a command needing an optional extra says so before any work."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that fails, or ``sys.modules[m] = None``
        return False


def install_hint(extra: str, only: tuple[str, ...] = ()) -> str:
    """How to install what the project's optional ``extra`` brings, as its metadata names it
    (``pip install 'ray[data]<2.61,>=2.60'``): it works however the project was installed (from a
    checkout, a path or a wheel), where ``pip install -e ".[extra]"`` needs the checkout. ``only``:
    the extra's packages to name (by project name), where a command needs just those."""
    import re
    from importlib import metadata

    try:
        wanted = [r.split(";")[0].strip() for r in metadata.requires("mem-retrieval") or ()
                  if r.replace(" ", "").endswith(f'extra=="{extra}"')]
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        wanted = []
    if only:
        wanted = [w for w in wanted if re.split(r"[\[<>=!~ ]", w, maxsplit=1)[0] in only]
    packages = " ".join(f"'{w}'" for w in wanted) if wanted else f"'mem-retrieval[{extra}]'"
    return f"pip install {packages} ({'in ' if only and wanted else ''}the extra [{extra}])"


class MemError(Exception):
    """Base of every error raised on purpose. ``message`` says what is wrong; ``param``, when set,
    names the parameter at fault (the message then starts with its value, so that
    ``f"{param} {message}"`` reads as one sentence: ``kind 'x' is not one of …``)."""

    exit_status = 1

    def __init__(self, message: str, *, param: str | None = None):
        self.message = message
        self.param = param
        super().__init__(f"{param} {message}" if param else message)


class Refused(MemError):
    """Refused, or not found: exit status 1."""

    exit_status = 1


class BadInput(MemError):
    """Bad usage or bad input: exit status 2."""

    exit_status = 2


class InputError(BadInput):
    """Bad input in a file: ``str(err)`` is the one line ``FILE:LINE: FIELD: what`` of its first
    problem; ``problems`` holds every problem found in that file (up to ``MAX_PROBLEMS``), so a
    user can mend them all in one go."""

    MAX_PROBLEMS = 20

    def __init__(self, file: str, line: int | None, field: str | None, message: str):
        self.problem = Problem(str(file), line, field, message)
        self.problems: tuple[Problem, ...] = (self.problem,)
        super().__init__(str(self.problem))

    @classmethod
    def of(cls, problem: Problem) -> "InputError":
        return cls(problem.file, problem.line, problem.field, problem.message)

    @classmethod
    def many(cls, problems: list[Problem]) -> "InputError":
        """One error for several problems (the first is its message)."""
        error = cls.of(problems[0])
        error.problems = tuple(problems[: cls.MAX_PROBLEMS])
        return error


def type_name(value: Any) -> str:
    """How a decoded value's type is named in a message: ``an object``, ``a list``, ``null``…"""
    kind = type(value)
    named = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(kind, named)  # numpy.bool: no "bool" that is no bool
