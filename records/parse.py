"""Parsers for the workspace files. Each returns typed records or raises InputError naming the file,
the line and the field. Valid input is never rejected; unknown fields are (they are usually typos)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
import tomllib
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, BinaryIO

from mem_retrieval.records.errors import InputError, Problem, plural, type_name
from mem_retrieval.records.ids import NOT_A_SLUG, canonical, is_run_slug, ref_problem, step_id_problem
from mem_retrieval.records.validate import Fields
from mem_retrieval.records.types import (
    CORE_FIELDS, EVENT_KINDS, GRADES, KINDS, STATUSES, Audit, CoreMemory, Event, Fix, LibraryEntry,
    Source, Step, Tree,
)

STEP_FIELDS = {
    "id", "kind", "agent", "statement", "hyp", "setting", "parents", "proof", "status", "audit",
    "missing", "failed_input",
}
LIBRARY_FIELDS = {
    "run", "id", "kind", "statement", "setting", "hyp", "status", "grade", "repair", "inserted",
    "missing", "failed_input", "agent", "parents", "proof", "audit",
}
EVENT_FIELDS = {"time", "actor", "kind", "ids", "text"}
TREE_FIELDS = {"run", "date", "fix", "sources", "steps"}
DEAD_END_NEEDS = "a dead_end names the statement that would unblock it"  # (SPEC §3)
ERROR_NEEDS = "an error step names the input that fails"
PATH_PREFIXES = ("briefs/", "returns/", "sources/")


def decode_utf8(data: bytes, file: str, line_offset: int = 0) -> str:
    """``data`` as UTF-8; a byte that is not is an InputError naming ``file``, its line and column.
    A byte order mark opening the file (``line_offset`` 0: its first line), which editors on
    Windows write, is not text and is left out."""
    try:
        text = data.decode("utf-8")
        return text[1:] if line_offset == 0 and text.startswith("\ufeff") else text
    except UnicodeDecodeError as err:
        line = line_offset + data.count(b"\n", 0, err.start) + 1
        start = data.rfind(b"\n", 0, err.start) + 1
        before = data[start:err.start].decode("utf-8")  # what precedes it on its line is UTF-8
        if start == 0 and line_offset == 0:
            before = before.removeprefix("\ufeff")  # no character an editor shows
        column = len(before) + 1  # in characters, as an editor counts (`ℤ` is one, of 3 bytes)
        raise InputError(file, line, None,
                         f"not UTF-8 (byte 0x{data[err.start]:02x} at column {column})") from None


class _DuplicateKey(ValueError):
    def __init__(self, key: str, line: int | None = None):
        super().__init__(key)
        self.key, self.line = key, line


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's pairs as a dict; ``_DuplicateKey`` when a key comes twice (json keeps the last,
    so `"status": "open", "status": "proved"` would read as proved, silently)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        keys = [k for k, _ in pairs]
        raise _DuplicateKey(next(k for at, k in enumerate(keys) if k in keys[:at]))
    return obj


def _duplicate_line(text: str) -> int | None:
    """The line where the first object holding a key twice starts: read again by json's own
    pure-Python scanner, which says where each object starts (only when a key came twice)."""
    from json.decoder import JSONObject
    from json.scanner import py_make_scanner

    decoder = json.JSONDecoder()

    def parse_object(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo=None):
        pairs, end = JSONObject(s_and_end, strict, scan_once, None, list, memo)
        try:
            return _unique(pairs), end
        except _DuplicateKey as duplicate:
            raise _DuplicateKey(duplicate.key, s_and_end[0].count("\n", 0, s_and_end[1]) + 1) from None

    decoder.parse_object = parse_object
    decoder.scan_once = py_make_scanner(decoder)
    try:
        decoder.decode(text)
    except _DuplicateKey as duplicate:
        return duplicate.line
    except RecursionError:  # the pure-Python scanner nests deeper per object than json's own
        return None
    return None


def parse_json(text: str, file: str, line: int | None = None) -> Any:
    """Decoded JSON, or one InputError naming the file and line (json's own message; a key written
    twice in one object: the line where the object starts, and the key). ``line``: ``text`` is that
    line of a JSON-lines file; one that ends before its object does, or holds no object's start, is
    said to be a piece of one (an object written over several lines, as a pretty-printer writes)."""
    try:
        return json.loads(text, object_pairs_hook=_unique)
    except _DuplicateKey as duplicate:
        at = line if line is not None else _duplicate_line(text)
        raise InputError(file, at, duplicate.key, "written twice in one object (which one counts? JSON "
                         "would keep the last)") from None
    except json.JSONDecodeError as err:
        at = err.lineno if line is None else line
        piece = line is not None and _a_piece(text, err)
        raise InputError(file, at, None, f"invalid JSON: {err.msg} (column {err.colno})" + (
            ": a line holds one whole JSON object (one written over several lines is read a line at a "
            "time)" if piece else "")) from None
    except RecursionError:
        at = line if line is not None else _line_of(text, _DEEP)
        raise InputError(file, at, None, "invalid JSON: nested too deeply") from None
    except ValueError as err:  # an integer of more than 4300 digits
        at = line if line is not None else _line_of(text, _LONG_NUMBER)
        raise InputError(file, at, None, f"invalid JSON: {str(err).split(';')[0]}") from None


_DEEP = re.compile(r"(?:[\[{]\s*){500,}")
_LONG_NUMBER = re.compile(r"\d{4300,}")


def _invisible(character: str) -> bool:
    """Whether a character draws nothing: white space, a format or control character (a BOM, a
    zero-width space, a direction mark), a combining mark alone, a Hangul filler."""
    return character.isspace() or unicodedata.category(character) in _DRAWS_NOTHING \
        or character in "\u115f\u1160\u2800\u3164\uffa0"


_DRAWS_NOTHING = frozenset({"Cc", "Cf", "Mn", "Me", "Zs", "Zl", "Zp"})


def _a_piece(line: str, err: json.JSONDecodeError) -> bool:
    """Whether a line of a JSON-lines file that is no JSON holds a piece of an object (one written
    over several lines): it ends before its object does, or starts none. Characters that draw
    nothing before the object are judged apart: a whole object after them is no piece, and a line
    of them alone holds none."""
    start = line.find("{")
    lead = line if start < 0 else line[:start]
    if lead and all(_invisible(character) for character in lead):
        if start < 0:
            return False
        try:
            json.loads(line[start:])
            return False
        except json.JSONDecodeError as inner:
            line, err = line[start:], inner
        except ValueError:  # too deep, or a number too long: a whole line's fault
            return False
    ends = err.pos >= len(line.rstrip(_BLANK)) or err.msg.startswith("Unterminated string")
    return ends or not line.startswith("{")


def _line_of(text: str, pattern: re.Pattern[str]) -> int | None:
    """The line where ``pattern`` first matches in ``text`` (to place an error json gives no line)."""
    match = pattern.search(text)
    return text.count("\n", 0, match.start()) + 1 if match else None


def _record(problems: list[Problem] | None, error: InputError) -> None:
    """Raise ``error``, or, when the caller collects ``problems`` (``mem check``), record it there."""
    if problems is None:
        raise error
    problems.append(error.problem)


def text_lines(text: str) -> list[str]:
    """The lines of a text file as editors, the records' readers and the line numbers in messages
    count them: split at line feeds alone (a CR before one dropped). ``str.splitlines`` also splits
    at form feeds, U+0085, U+2028 and others, which the tokenizer reads as none: M4 counted those
    lines apart, and named line 997 of a five-line core.md."""
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    return lines[:-1] if lines and not lines[-1] else lines


def present(path: Path) -> bool:
    """Whether a record file is there to read: False when nothing stands at ``path`` (no file is no
    record), True for a file. Anything else (a folder, a link to nothing or a loop of links, a
    pipe, a socket or a device, or a link to one) is an InputError: read as absent, it silently
    dropped a run's events or the library from the index. A name too long for the system names
    nothing (a run name of 300 characters, typed); a path the system will not look at is an
    InputError saying why."""
    try:
        if path.is_file():
            return True
    except OSError as err:
        if err.errno == errno.ENAMETOOLONG:
            return False
        raise InputError(str(path), None, None, f"cannot be looked at: {err.strerror or err}") from None
    if not os.path.lexists(path):
        return False
    what = "is a folder" if path.is_dir() else "is a link to nothing (or a loop of links)" \
        if not path.exists() else "is a link to a pipe, a socket or a device" if path.is_symlink() \
        else "is a pipe, a socket or a device"
    raise InputError(str(path), None, None, f"{what}, not a file")


def standing(path: Path | str) -> str:
    """What stands at ``path``, read as a record file: "file" (a regular one, or a link to one),
    "none", "unfiled" (no file: a folder, a pipe, a socket, a device, a link to nothing or a loop)
    or "unreadable" (this user may not read it, or look at it). Never waits on a pipe
    (``open_regular``)."""
    try:
        with open_regular(path):
            return "file"
    except FileNotFoundError:
        return "unfiled" if os.path.lexists(path) else "none"
    except PermissionError:
        return "unreadable"
    except OSError:
        return "unfiled"


class NotAFile(OSError):
    """What stands at a path read as a file is a pipe, a socket or a device."""


def open_regular(path: Path | str, named: bool = False) -> BinaryIO:
    """The regular file at ``path`` (a link to one is followed), open for reading; anything else
    is an OSError found before a byte is read (IsADirectoryError for a folder, NotAFile for a pipe,
    a socket or a device): a pipe there blocked the read for good (searches hung), a device such as
    /dev/zero read until memory ran out. Opened without blocking (a pipe with no writer) and looked
    at through its descriptor: what is read is what was looked at. ``named``: a file the caller
    named on the command line (`--qrels <(grep … qrels)`, `--queries /dev/stdin`), where a pipe is
    read too, waiting for its writer as any reader of a pipe does (a device or a socket is not)."""
    waits = 0 if named else getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, os.O_RDONLY | waits | getattr(os, "O_CLOEXEC", 0))
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISREG(mode) or named and stat.S_ISFIFO(mode)):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        raise NotAFile(errno.EINVAL, "is not a regular file (a pipe, a socket or a device)" if not named
                       else "is not a regular file or a pipe (a socket or a device)", str(path))
    return os.fdopen(fd, "rb")


def unreadable(path: Path | str, err: OSError, line: int | None = None) -> InputError:
    """The InputError saying why ``path`` could not be read (``open_regular``'s errors too)."""
    said = err.strerror if isinstance(err, NotAFile) else f"cannot read: {err.strerror or err}"
    return InputError(str(path), line, None, said)


def sha256_head(path: Path, size: int) -> str | None:
    """SHA-256 of the first ``size`` bytes of the regular file at ``path`` (``open_regular``: a
    pipe there is no file, never waited on), in hex, as a file of ``size`` bytes hashes; None: it
    cannot be read, is no regular file, or holds fewer. What an append-only file (a run's log)
    read at that size is checked by: bytes appended since leave it as it was."""
    digest, left = hashlib.sha256(), size
    try:
        with open_regular(path) as handle:
            while left > 0 and (block := handle.read(min(left, 1 << 20))):
                digest.update(block)
                left -= len(block)
    except OSError:
        return None
    return None if left > 0 else digest.hexdigest()


def read_regular(path: Path | str) -> bytes:
    """The bytes of the regular file at ``path`` (``open_regular``); an InputError if none."""
    try:
        with open_regular(path) as handle:
            return handle.read()
    except OSError as err:
        raise unreadable(path, err) from None


NAMED_LINE_BYTES = 1 << 20  # a line of a queries or qrels file, at most (a query is 16,384 characters)


def named_lines(path: Path | str) -> Iterator[tuple[int, str]]:
    """Each line of a file the caller named (``open_regular(named=True)``: a pipe too), with its
    number, read one at a time: a pipe that never ends (`--qrels <(yes)`) is refused at its first
    bad line, where it was read whole until memory ran out, and a line past ``NAMED_LINE_BYTES`` is
    an InputError naming it. Lines as ``text_lines`` splits them; UTF-8 (``decode_utf8``)."""
    file = str(path)
    try:
        handle = open_regular(path, named=True)
    except OSError as err:
        raise unreadable(path, err) from None
    with handle:
        number = 0
        while True:
            try:
                raw = handle.readline(NAMED_LINE_BYTES + 2)  # the line, and its end: CR LF at most
            except OSError as err:
                raise unreadable(path, err, number + 1) from None
            if not raw:
                return
            number += 1
            line = raw.removesuffix(b"\n").removesuffix(b"\r")
            if len(line) > NAMED_LINE_BYTES:
                raise InputError(file, number, None, f"is longer than {NAMED_LINE_BYTES:,} bytes, which no "
                                                     "line of it is (a pipe that never ends?)")
            yield number, decode_utf8(line, file, number - 1)


def same_pipe(first: Path | str, second: Path | str) -> bool:
    """Whether two paths name one pipe (`--queries /dev/stdin --qrels /dev/stdin`), which can be
    read once only."""
    try:
        one, other = os.stat(first), os.stat(second)
    except OSError:
        return False
    return stat.S_ISFIFO(one.st_mode) and (one.st_dev, one.st_ino) == (other.st_dev, other.st_ino)


def read_text(path: Path) -> str:
    """A whole UTF-8 file; a non-UTF-8 byte is an InputError naming its line."""
    return decode_utf8(read_regular(path), str(path))


NAMED_TOML_BYTES = 16 << 20  # what a file named on the command line may hold (the defaults: 10 kB)


def read_at_most(handle: BinaryIO, limit: int) -> bytes:
    """Up to ``limit + 1`` bytes of ``handle`` (one more than ``limit`` says it holds more), read a
    part at a time: ``read(limit + 1)`` reserved all of it first, so a 150-byte file under a 64 MB
    limit failed with MemoryError in a process allowed less (`ulimit -v`)."""
    parts, size = [], 0
    while size <= limit:
        part = handle.read(min(1 << 20, limit + 1 - size))
        if not part:
            break
        parts.append(part)
        size += len(part)
    return b"".join(parts)


def read_toml(path: Path, named: bool = False) -> tuple[dict[str, Any], str]:
    """A TOML file's tables and its text; bad bytes or syntax are an InputError naming the line.
    ``named``: a file the caller named (`--config /dev/stdin`, `--config <(…)`), read as it is,
    a pipe too; a file found where it is looked for (a workspace's) is read only as a regular one."""
    file = str(path)
    if named:
        try:
            with open(path, "rb") as handle:
                raw = read_at_most(handle, NAMED_TOML_BYTES)
        except OSError as err:
            raise unreadable(path, err) from None
        if len(raw) > NAMED_TOML_BYTES:  # /dev/zero, `<(yes)`: read until memory ran out
            raise InputError(file, None, None, f"holds more than {NAMED_TOML_BYTES:,} bytes, which no "
                                               "configuration does (a device, or a pipe that never ends?)")
    else:
        raw = read_regular(path)
    text = decode_utf8(raw, file)
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as err:
        at = re.search(r"at line (\d+)", str(err))
        end = "end of document" in str(err)  # no line given: the last one
        line = int(at.group(1)) if at else (len(text_lines(text)) or 1) if end else None
        twice = _toml_key_at(text, line) if line and str(err).startswith("Cannot overwrite") else None
        said = f"invalid TOML: {err}" + (f": {twice}, or a key holding it, was set before" if twice else "")
        raise InputError(file, line, None, said) from None
    except RecursionError:  # arrays or inline tables nested some 500 deep
        raise InputError(file, _line_of(text, _DEEP), None, "invalid TOML: nested too deeply") from None


_TOML_NAME = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""  # bare, basic or literal
_TOML_DOTTED = rf"{_TOML_NAME}(?:\s*\.\s*{_TOML_NAME})*"
_TOML_TABLE = re.compile(rf"\s*\[\[?\s*({_TOML_DOTTED})\s*\]\]?\s*(?:#.*)?$")  # [t], [[array]]
_TOML_KEY = re.compile(rf"\s*({_TOML_DOTTED})\s*=")
_TOML_PART = re.compile(_TOML_NAME)


def _toml_path(dotted: str) -> list[str]:
    return [part.strip("\"'") for part in _TOML_PART.findall(dotted)]


def _toml_key_at(text: str, line: int) -> str | None:
    """The dotted name of the key line ``line`` of a TOML document sets (``search.pool``), its
    table's name before it, or of the table it opens (``[search]``); None when it does neither."""
    return next((".".join(path) for number, path, _ in _toml_lines(text) if number == line), None)


def toml_key_line(text: str, dotted: str) -> int | None:
    """The line of a TOML document setting ``dotted`` (``search.pool``): its ``key =`` line under
    its ``[table]`` (or a dotted key setting a key inside it), or the line setting the nearest
    table holding it (an inline table, a header); None when no line does. To place a value found
    bad after tomllib read it (tomllib keeps no lines). A quoted key's escapes are compared as
    written."""
    wanted = _toml_path(dotted)
    best, best_depth = None, 0
    for number, found, _ in _toml_lines(text):
        shared = len(wanted) if found[:len(wanted)] == wanted else len(found) \
            if wanted[:len(found)] == found else 0
        if shared > best_depth:
            best, best_depth = number, shared
    return best


def _toml_lines(text: str) -> Iterator[tuple[int, list[str], bool]]:
    """(line number, the dotted path it names, whether it is a ``[table]`` header) of each line of
    a TOML document that sets a key or opens a table; the lines of a value spanning several (a
    multi-line string or array) are neither."""
    table: list[str] = []
    inside: tuple[str | None, int] = (None, 0)  # a value spanning lines: its open string, brackets
    for number, line in enumerate(text_lines(text.removeprefix("\ufeff")), start=1):
        if inside != (None, 0):  # a line of a multi-line string or array: no key, no header
            inside = _toml_value_end(line, *inside)
            continue
        if header := _TOML_TABLE.match(line):
            table = _toml_path(header.group(1))
            yield number, table, True
        elif key := _TOML_KEY.match(line):
            inside = _toml_value_end(line[key.end():], None, 0)
            yield number, table + _toml_path(key.group(1)), False


def _toml_value_end(text: str, string: str | None, depth: int) -> tuple[str | None, int]:
    """After reading ``text`` (part of a value), the multi-line string still open (its quotes)
    and how many brackets are: a value ends where both are none."""
    at = 0
    while at < len(text):
        if string is not None:  # inside a string: find its end (a basic one's escapes skipped)
            if string[0] == '"' and text[at] == "\\":
                at += 2
                continue
            if text.startswith(string, at):
                at, string = at + len(string), None
                continue
            at += 1
            if len(string) == 1 and at >= len(text):
                string = None  # a one-line string the line ends: not TOML; stop it here
            continue
        char = text[at]
        if char == "#":
            break
        if char in "\"'":
            string = char * 3 if text.startswith(char * 3, at) else char
            at += len(string)
            continue
        depth += (char in "[{") - (char in "]}")
        at += 1
    return string if string and len(string) == 3 else None, max(depth, 0)


# the two ISO 8601 forms datetime.fromisoformat refuses: an ordinal date (2026-334, 2026334) and
# 24:00, the end of a day (the next one's 00:00)
_ORDINAL = re.compile(r"(\d{4})-?(\d{3})(?=[T ]|$)")
_END_OF_DAY = re.compile(r"(?<=[T ])24(?::?00(?::?00(?:[.,]0+)?)?)?(?=[Zz+-]|$)")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# a date alone, perhaps with a zone: calendar (extended, basic), week (with or without its day) or
# ordinal; a zone of hours, minutes and seconds
_DATE_ALONE = re.compile(r"(\d{4}(?:-\d\d-\d\d|\d{4}|-?W\d\d(?:-?\d)?|-?\d{3}))"
                         r"(Z|z|[+-]\d\d(?::?\d\d(?::?\d\d(?:[.,]\d+)?)?)?)?")


def iso_time(value: str) -> datetime:
    """``value`` as datetime.fromisoformat reads it, with the ordinal date and 24:00 too; a date
    with a zone and no time is refused (fromisoformat reads ``2026-10-17+05:30`` as 05:30 that
    day, without a zone)."""
    alone = _DATE_ALONE.fullmatch(value)
    if alone and alone[2]:
        raise ValueError(f"{value!r} is a date with a zone and no time")
    day_time = _TIME_OF_DAY.search(value)
    if day_time and not day_time[3] and value[day_time.end():][:1] in (".", ","):
        raise ValueError("a fraction of a minute or an hour (which Python reads as of a second): write "
                         "the seconds")
    ordinal = _ORDINAL.match(value)
    if ordinal:
        day = datetime.strptime(f"{ordinal[1]}-{ordinal[2]}", "%Y-%j").date()
        if day.year != int(ordinal[1]):  # strptime takes day 366 of a common year for the next's 1st
            raise ValueError(f"{ordinal[1]} has 365 days")
        value = day.isoformat() + value[ordinal.end():]
    end = _END_OF_DAY.search(value)
    if end is None:
        return datetime.fromisoformat(value)
    stamp = datetime.fromisoformat(value[:end.start()] + "00:00" + value[end.end():])
    try:
        return stamp + timedelta(days=1)
    except OverflowError:
        raise ValueError(f"{value!r} is past the last day datetime holds") from None


def micros(stamp: datetime) -> int:
    """``stamp`` in epoch microseconds, the index's time columns (``ts``, ``named_ts``…), exactly:
    through a float (``timestamp() * 1e6``) two instants a microsecond apart read as one in some
    years (2004–05, 2038–39). A time without a zone is local, as ``timestamp()`` takes it."""
    if stamp.tzinfo is None:
        stamp = stamp.astimezone()
    return (stamp - _EPOCH) // timedelta(microseconds=1)


_TIME_OF_DAY = re.compile(r"[T t](\d\d)(?::?(\d\d)(?::?(\d\d)(?:[.,](\d+))?)?)?")


def time_resolution(value: str) -> timedelta:
    """How long an instant the ISO time ``value`` names: its last written unit (``03:42:00Z`` a
    second, ``03:42Z`` a minute, ``03:42:00.717Z`` a millisecond, at least a microsecond)."""
    found = _TIME_OF_DAY.search(value)
    if found is None:
        return timedelta(days=1)
    if found[4]:
        return timedelta(microseconds=max(1, 10 ** (6 - min(len(found[4]), 6))))
    return timedelta(seconds=1 if found[3] else 60 if found[2] else 3600)


def instant_last(stamp: datetime, value: str) -> datetime:
    """The last microsecond of the instant the ISO time ``value`` (read as ``stamp``) names: of its
    second for ``03:42:00Z``, of its minute for ``03:42Z`` (``time_resolution``). What a cut as of
    that time reaches: `mem` stamps an event to the second and a library entry to the millisecond,
    so an entry inserted within the second of the event a cut names is memory by then."""
    if _END_OF_DAY.search(value):  # `24:00`, the day's end: the instant itself (the next day's 00:00)
        return stamp
    return stamp + (time_resolution(value) - timedelta(microseconds=1))


def event_last(event: Event) -> datetime:
    """The last instant ``event`` covers: the end of the instant its ``time`` names, or the time
    the log's order dates it (``in_log_order``: moved up to the event before it) when later. A
    line written to the minute after one written to the second in that minute covers the minute,
    not a minute past the line before it."""
    return max(event.timestamp, instant_last(iso_time(event.time), event.time))


def instant_end(stamp: datetime, value: str) -> datetime:
    """Where the instant ``value`` names ends (``instant_last``'s next microsecond), or datetime's
    last instant when that lies past year 9999."""
    last = instant_last(stamp, value)
    try:
        return last + timedelta(microseconds=1)
    except OverflowError:
        return last


def date_alone(value: str) -> str | None:
    """The time to write for ``value`` when it is a date alone, with or without a zone (its
    midnight, e.g. ``2026-10-17T00:00Z``), else None: a time here needs its time of day and zone."""
    alone = _DATE_ALONE.fullmatch(value)
    if alone is None:
        return None
    time = f"{alone[1]}T00:00{alone[2] or 'Z'}"
    try:
        iso_time(time)
    except ValueError:  # no such day (2026-02-30): nothing to suggest
        return None
    return time


def time_fault(value: str, fault: str) -> str:
    """What is wrong with the time ``value`` (``fault``), or, when it is a date alone, what to write."""
    time = date_alone(value)
    if time is None:
        return fault
    return f"{value!r} is a date without a time of day (write a time with its zone: {time})"


def parse_time(value: str, file: str, line: int | None, field: str) -> datetime:
    try:
        stamp = iso_time(value)
    except ValueError:
        raise InputError(file, line, field, time_fault(value, f"{value!r} is not an ISO 8601 time")) from None
    if stamp.tzinfo is None:
        raise InputError(file, line, field,
                         time_fault(value, f"{value!r} has no time zone (write Z or +hh:mm)"))
    try:
        stamp.astimezone(timezone.utc)
    except OverflowError:
        raise InputError(file, line, field, f"{value!r} is out of range in UTC") from None
    return stamp


# ---------------------------------------------------------------------------------------- tree.json

_STEPS_KEY = re.compile(r'(?<!\\)"steps"\s*:\s*\[')
_SOURCES_KEY = re.compile(r'(?<!\\)"sources"\s*:\s*\[')


def _elements(text: str, key: re.Pattern[str], count: int) -> list[tuple[int, int] | None]:
    """Where each element of the top-level array ``key`` starts: (offset, line), best effort."""
    match = key.search(text)
    if not match:
        return [None] * count
    decoder, pos, found = json.JSONDecoder(), match.end(), []
    line, counted = text.count("\n", 0, pos) + 1, pos  # counted up to ``counted``: linear, not steps × size
    try:
        for _ in range(count):
            while text[pos] in " \t\r\n,":
                pos += 1
            line += text.count("\n", counted, pos)
            counted = pos
            found.append((pos, line))
            _, pos = decoder.raw_decode(text, pos)
    except (ValueError, IndexError):
        return [None] * count
    return found


def _lines(elements: list[tuple[int, int] | None]) -> list[int | None]:
    """The line of each of ``_elements``' elements."""
    return [None if at is None else at[1] for at in elements]


def parse_step(obj: Any, run: str, file: str, line: int | None, prefix: str) -> Step:
    f = Fields(obj, file, line, prefix, STEP_FIELDS)
    step_id = canonical(f.str("id", required=True))
    problem = step_id_problem(step_id)
    if problem:
        f.fail("id", problem)
    kind = f.enum("kind", KINDS)
    missing = f.str("missing", required=kind == "dead_end", why=DEAD_END_NEEDS)
    failed_input = f.str("failed_input", required=kind == "error", why=ERROR_NEEDS)
    parents = tuple(canonical(parent) for parent in f.str_list("parents"))
    for i, parent in enumerate(parents):
        problem = ref_problem(parent)
        if problem:
            f.fail(f"parents[{i}]", problem)
    audit = None
    if obj.get("audit") is not None:
        a = Fields(obj["audit"], file, line, f"{prefix}audit.", {"grade", "by", "note", "repaired"})
        audit = Audit(grade=a.enum("grade", GRADES), by=a.str("by"), note=a.str("note"),
                      repaired=a.bool("repaired"))
    return Step(
        run=run, id=step_id, kind=kind, statement=f.str("statement", required=True),
        status=f.enum("status", STATUSES), hyp=f.str_list("hyp"), setting=f.str("setting"),
        parents=parents, proof=f.str("proof"), audit=audit, agent=f.str("agent"),
        missing=missing, failed_input=failed_input, line=line,
    )


def _other_form(written: str, canonical_id: str) -> str:
    """What a duplicate id's message adds when the id was written in another Unicode form (one
    that looks the same): ``canonical``."""
    return "; written here decomposed, the same letters" if written != canonical_id else ""


def parse_tree(path: Path, run: str | None = None, problems: list[Problem] | None = None) -> Tree:
    """Parse and validate a run's tree.json; ``run`` is the folder name it must match.

    With ``problems``, a step id used twice is recorded there (and the later step dropped) instead of
    raised; malformed input still raises."""
    file = str(path)
    text = read_text(path)
    obj = parse_json(text, file)
    try:
        return _parse_tree(obj, text, file, run, problems)
    except InputError as error:
        raise _with_line(error, text) from None


def _with_line(error: InputError, text: str) -> InputError:
    """A tree.json error outside ``steps`` gets the line of its field (or of the object's start)."""
    p = error.problem
    if p.line is not None:
        return error
    line = field_line(text, p.field or "")
    if line is None:
        line = text.count("\n", 0, len(text) - len(text.lstrip())) + 1
    return InputError(p.file, line, p.field, p.message)


_KEY_PART = re.compile(r"[^.\[\]]*")
_INDEX_PART = re.compile(r"\[(\d+)\]")
_BLANK = " \t\r\n"


def field_line(text: str, field: str, at: int = 0, line: int = 1) -> int | None:
    """The line where ``field`` (``steps[3].audit.grade``, ``fix.setting``, ``steps[1].hyp[0]``)
    stands in the JSON document ``text``, or in its value starting at offset ``at`` on line ``line``:
    its key's line in an object, its element's in an array. A key that holds the rest of the path
    whole (an unknown field named ``audit.grade`` or ``hyp[0]``) is that key. A field that is not
    there (a missing one) gets the line where the innermost object or array holding it starts;
    None when ``text`` cannot be walked. A pretty-printed tree.json spreads a step over dozens of
    lines: an error names the line of the field at fault, not of its step."""
    decoder = json.JSONDecoder()

    def blank(pos: int) -> int:
        while pos < len(text) and text[pos] in _BLANK:
            pos += 1
        return pos

    def line_of(pos: int) -> int:
        return line + text.count("\n", at, pos)

    rest, pos = field, blank(at)
    try:
        while rest:
            start, found, inner = pos, None, None
            if text[pos] == "{":
                part = None if rest.startswith("[") else _KEY_PART.match(rest).group()  # (a key `[0]`)
                pos = blank(pos + 1)
                while text[pos] != "}":  # every member: the whole rest as one key comes first
                    key_at = pos
                    key, pos = decoder.raw_decode(text, pos)
                    pos = blank(blank(pos) + 1)  # past the colon
                    if key == rest:
                        return line_of(key_at)
                    if key == part and found is None:
                        found, inner = key_at, pos
                    pos = blank(decoder.raw_decode(text, pos)[1])
                    pos = blank(pos + 1) if text[pos] == "," else pos
                rest = rest[len(part or ""):].removeprefix(".")
            elif text[pos] == "[" and (index := _INDEX_PART.match(rest)):
                pos, count = blank(pos + 1), 0
                while text[pos] != "]":
                    if count == int(index.group(1)):
                        found = inner = pos
                        break
                    pos = blank(decoder.raw_decode(text, pos)[1])
                    pos, count = (blank(pos + 1) if text[pos] == "," else pos), count + 1
                rest = rest[index.end():].removeprefix(".")
            if found is None:
                return line_of(start)
            if not rest:
                return line_of(found)
            pos = inner
    except (ValueError, IndexError):
        return None
    return line_of(pos)


def _line_within(text: str, at: tuple[int, int] | None, field: str) -> int | None:
    """``field_line`` of ``field`` in the element of an array starting at ``at`` (offset, line):
    only that element is walked, not the document before it."""
    return None if at is None else field_line(text, field, *at)


def _parse_tree(obj: Any, text: str, file: str, run: str | None,
                problems: list[Problem] | None) -> Tree:
    f = Fields(obj, file, None, "", TREE_FIELDS)
    name = f.str("run", required=True)
    if not is_run_slug(name):
        f.fail("run", f"{name!r} {NOT_A_SLUG}")
    if run is not None and name != run:
        f.fail("run", f"{name!r} does not match its folder {run!r}")
    fix = Fix()
    if obj.get("fix") is not None:
        x = Fields(obj["fix"], file, None, "fix.", {"problem", "setting", "criterion", "checklist"})
        fix = Fix(problem=x.str("problem"), setting=x.str("setting"), criterion=x.str("criterion"),
                  checklist=x.str_list("checklist"))
    sources = []
    raw_sources = obj.get("sources")
    raw_sources = [] if raw_sources is None else raw_sources
    if not isinstance(raw_sources, list):
        f.fail("sources", f"must be a list, not {type_name(raw_sources)}")
    source_at, source_ids = _elements(text, _SOURCES_KEY, len(raw_sources)), set()
    source_lines = _lines(source_at)
    for i, raw in enumerate(raw_sources):
        s = Fields(raw, file, None, f"sources[{i}].", {"id", "origin", "retrieved", "hash", "path"})
        source_id = canonical(s.str("id", required=True))
        problem = step_id_problem(source_id)
        if problem:
            s.fail("id", problem)
        if source_id in source_ids:
            s.fail("id", f"duplicate id {source_id!r} (already a source of this run"
                         f"{_other_form(raw['id'], source_id)})")
        source_ids.add(source_id)
        if retrieved := s.str("retrieved"):  # a time, as an event's (it was read as any text)
            parse_time(retrieved, file, _line_within(text, source_at[i], "retrieved") or source_lines[i],
                       f"sources[{i}].retrieved")
        sources.append(Source(run=name, id=source_id, origin=s.str("origin"), retrieved=retrieved,
                              hash=s.str("hash"), path=s.str("path"), line=source_lines[i]))
    raw_steps = obj.get("steps")
    raw_steps = [] if raw_steps is None else raw_steps  # a run at its Fix: no step yet, as no source
    if not isinstance(raw_steps, list):
        f.fail("steps", f"must be a list, not {type_name(raw_steps)}")
    steps_at = _elements(text, _STEPS_KEY, len(raw_steps))
    lines = _lines(steps_at)
    steps: list[Step] = []
    seen: dict[str, int | None] = {s.id: None for s in sources}
    bad: list[Problem] = []  # every malformed step, reported together
    repeated: set[str] = set()
    for i, raw in enumerate(raw_steps):
        try:
            step = parse_step(raw, name, file, lines[i], f"steps[{i}].")
        except InputError as error:  # named on its field's line (the step's when it is missing)
            p = error.problem
            rest = (p.field or "").removeprefix(f"steps[{i}]").removeprefix(".")
            bad.append(Problem(p.file, _line_within(text, steps_at[i], rest) or p.line, p.field, p.message))
            if len(bad) == InputError.MAX_PROBLEMS:
                break
            continue
        if step.id in seen:
            what = "a source" if seen[step.id] is None and step.id in {s.id for s in sources} else "a step"
            duplicate = InputError(file, _line_within(text, steps_at[i], "id") or lines[i], f"steps[{i}].id",
                                   f"duplicate id {step.id!r} (already {what} of this run"
                                   f"{_other_form(raw['id'], step.id)})")
            if problems is None:
                bad.append(duplicate.problem)
            else:
                problems.append(duplicate.problem)
                repeated.add(step.id)
            continue
        seen[step.id] = lines[i]
        steps.append(step)
    if bad:
        raise InputError.many(bad)
    return Tree(run=name, path=file, date=_tree_date(f, text), fix=fix, sources=tuple(sources),
                steps=tuple(steps), repeated=frozenset(repeated))


_DATE_KEY = re.compile(r'"date"\s*:')


def _tree_date(f: Fields, text: str) -> str:
    """A tree.json's ``date``: an ISO 8601 date (``2026-10-17``), or absent."""
    value = f.str("date")
    try:
        if value:
            date.fromisoformat(value)
    except ValueError:
        raise InputError(f.file, _line_of(text, _DATE_KEY), "date",
                         f"{value!r} is not an ISO 8601 date (YYYY-MM-DD)") from None
    return value


# ------------------------------------------------------------------------------------- events.jsonl

def _iter_lines(path: Path, seen: Callable[[bytes], None] | None = None
                ) -> Iterator[tuple[int, "str | InputError", bool]]:
    """(line number, decoded line without its line break, whether it has one) for every non-blank
    line, streamed (a JSON error's column is then within the line: a line cut short is reported at
    its end). Only the last line may have none. A line that is not UTF-8 comes as its InputError,
    for the reader to raise, or to pass over and read on (`mem check`). ``seen``: given each line's
    bytes as read, blank or not, line break included (the file's bytes, in order)."""
    file = str(path)
    try:
        handle = open_regular(path)
    except OSError as err:
        raise unreadable(path, err) from None
    with handle:
        lines, number = enumerate(handle, start=1), 0
        while True:
            try:
                number, raw = next(lines)
            except StopIteration:
                return
            except OSError as err:  # a read the machine refused part way (an I/O error)
                raise unreadable(file, err, number + 1) from None
            if seen is not None:
                seen(raw)
            ended = raw.endswith(b"\n")
            try:
                line = decode_utf8(raw, file, number - 1)
            except InputError as error:
                if ended:
                    yield number, error, ended
                    continue
                line = raw.decode("utf-8", "replace")  # a line being written, cut inside a character
            if line.strip():
                yield number, line.rstrip("\r\n"), ended


def whole_json(text: str | bytes) -> bool:
    """Whether ``text`` parses as JSON (deeper than Python reads: no)."""
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


# A last line with no line break that is not whole JSON: a writer (a harness takes no lock) is still
# appending it, and every reader passes it over until it ends; or a crash cut it short.
BEGUN = ("no line break, and not whole JSON: a line another writer is still appending (readers pass "
         "it over until it ends), or one a crash cut short (end it, or remove it)")


def _raw_lines_after(path: Path, number: int) -> list[tuple[int, bytes]]:
    """(line number, bytes without the line feed) of each line of ``path`` after line ``number``,
    numbered as ``_iter_lines`` numbers them; none when there is no file or no such line (the
    usual answer, found by counting line feeds in C)."""
    try:
        data = read_regular(path)
    except InputError:  # none, or no file (a pipe, a device): `mem index` says so
        return []
    if data.count(b"\n") + (not data.endswith(b"\n")) <= number:
        return []
    return list(enumerate(data.split(b"\n", number)[number].split(b"\n"), start=number + 1))


def lines_after(path: Path, number: int) -> int:
    """How many non-blank lines ``path`` holds after line ``number`` (an event's sequence number is
    its line number: the events logged after that one), unparsed but for a last line without its
    line break, which counts once it is whole JSON (a writer may be half-way through it); 0 when
    there is no file."""
    lines = [raw.decode("utf-8", "replace").strip() for _, raw in _raw_lines_after(path, number)]
    if lines and lines[-1] and not whole_json(lines[-1]):  # no line break: it may be still being written
        lines.pop()
    return sum(1 for line in lines if line)


_FILE_NAME = re.compile(r"[^/.][^/]*\.[A-Za-z0-9]{1,8}")  # a file name with an extension


def events_after(path: Path, number: int, run: str, run_dir: Path | None,
                 after: int | None = None) -> Iterator[Event]:
    """The events ``path`` holds after line ``number`` (those ``lines_after`` counts), parsed; a
    line that is not a whole event (malformed, or still being written) is passed over, as no
    search could find it either. ``run_dir`` None: a brief's or return's path is not checked (an
    event naming a missing file is still an event written since the index, which ``mem index``
    will refuse). ``after``: the time (epoch microseconds) event ``number`` is dated by (the
    index's ``ts``): an event stamped earlier than the one before it is dated as that one, as
    ``iter_events`` dates it."""
    file = str(path)
    last = None if after is None else _EPOCH + timedelta(microseconds=after)
    for offset, raw in _raw_lines_after(path, number):
        try:
            line = decode_utf8(raw, file, offset - 1)
            if not line.strip():
                continue
            event = _parse_event(line.rstrip("\r"), file, offset, run, run_dir)
        except InputError:
            continue
        event = in_log_order(event, last)
        last = event.timestamp
        yield event


def event_path(kind: str, text: str) -> bool:
    """Whether an event's text is a path to a file of the event (SPEC §4: "free text, or a path
    relative to the run") rather than free text: one word that starts in ``briefs/``,
    ``returns/``, ``sources/``, ``../`` or ``/``, or, for a brief or a return, holds a ``/`` and
    ends in a file name with an extension (``notes/A5.md``). A word such as ``GL₄/Sp₄`` or ``n/a``
    is free text."""
    if not text or any(c.isspace() for c in text):
        return False
    return text.startswith(PATH_PREFIXES) or text.startswith(("../", "/")) or (
        kind in ("brief", "return") and "/" in text
        and _FILE_NAME.fullmatch(text.rsplit("/", 1)[1]) is not None)


def check_event_path(text: str, run_dir: Path, file: str, line: int) -> str:
    """The path of a brief/return, checked to stay inside the run folder (symlinks resolved)."""
    try:
        root = run_dir.resolve()
        target = (run_dir / text).resolve()
        if text.startswith("/") or not target.is_relative_to(root):
            raise InputError(file, line, "text", f"path {text!r} leaves the run folder")
        if not target.is_file():
            raise InputError(file, line, "text", f"file {text!r} does not exist in the run folder")
    except (OSError, RuntimeError) as err:  # a name too long, a symlink loop (RuntimeError)
        raise InputError(file, line, "text", f"path {text!r} cannot be resolved: "
                                             f"{getattr(err, 'strerror', None) or err}") from None
    return text


class Malformed:
    """The malformed lines a lenient reader of one file passed over (`mem check`): the first
    ``InputError.MAX_PROBLEMS`` listed, the rest counted, so that a file of garbage stays a short
    report and the lines that can be read after it are all read."""

    WORDS = 100_000  # the strings kept of the lines passed over (``words``), at most

    def __init__(self, words: bool = False) -> None:
        self.listed: list[Problem] = []
        self.more = 0
        self._first_more: Problem | None = None
        # the strings the lines passed over hold, a set for each run of consecutive lines (an entry
        # written over several lines is one run); None: not known
        self.words: list[set[str]] | None = [] if words else None
        self._kept, self._last_line = 0, None

    def add(self, problem: Problem, line: str | None = None) -> None:
        if self.words is not None:
            if line is None or self._kept >= self.WORDS:
                self.words = None  # what the lines passed over hold is not known
            else:
                if not self.words or problem.line is None or self._last_line != problem.line - 1:
                    self.words.append(set())
                found = set(_strings(line))
                self.words[-1].update(found)
                self._kept += len(found)
                self._last_line = problem.line
        if len(self.listed) < InputError.MAX_PROBLEMS:
            self.listed.append(problem)
            return
        self.more += 1
        self._first_more = self._first_more or problem

    def problems(self) -> list[Problem]:
        """What to report: each listed line, then one saying how many more there are, where the
        first of them is."""
        if not self.more:
            return list(self.listed)
        first = self._first_more
        return [*self.listed, Problem(first.file, first.line, None,
                                      f"{plural(self.more, 'more malformed line')} from here on, not "
                                      f"listed (the first {len(self.listed)} are; the lines that can be "
                                      "read are checked)")]


def _strings(line: str) -> Iterator[str]:
    """The JSON strings a line that is no JSON holds, as far as its text shows them (the ids a
    library entry written there names): its quotes paired from its first, and, for a line cut
    inside a string or missing a quote, from its second."""
    first = line.find('"')
    for text in (line, line[first + 1:] if first >= 0 else ""):
        for quoted in _quoted(text):
            try:
                yield json.loads(quoted)
            except ValueError:
                yield quoted[1:-1]


def _quoted(text: str) -> Iterator[str]:
    """Each double-quoted piece of ``text`` (a backslash escaping the character after it), left to
    right, as the pattern ``"((?:[^"\\]|\\.)*)"`` finds them in a line (which holds no line break),
    in one pass: once a quote is never closed, no later one is (its scan reads the same text), where
    the pattern tried again from each, and a line cut after a run of escaped quotes (``\\"`` in a
    statement) cost their number times its length: 128 KB took minutes."""
    start, size = text.find('"'), len(text)
    while start >= 0:
        at = start + 1
        while at < size and text[at] != '"':
            at += 2 if text[at] == "\\" else 1
        if at >= size:
            return
        yield text[start:at + 1]
        start = text.find('"', at + 1)


def iter_events(path: Path, run: str, run_dir: Path | None = None,
                problems: list[Problem] | None = None,
                malformed: Malformed | None = None,
                begun: list[Problem] | None = None,
                seen: Callable[[bytes], None] | None = None) -> Iterator[Event]:
    """Stream a run's events; paths must stay in the run folder. A last line without its line break
    that is not whole JSON is no event yet (``BEGUN``): passed over, and recorded in ``begun`` when
    given. ``seen``: given the log's bytes as they are read (``_iter_lines``).

    Times should never decrease down the log (SPEC §4). An event stamped earlier than the one before
    it (a writer's clock set back) keeps its ``time`` as written and is dated, ``timestamp``, as
    the one before it: it was appended after it, and a log is never edited, so refusing it would
    refuse the run for good. Every reader (``--until``, the index) sees times that never decrease;
    with ``problems`` (`mem check`) each such event is recorded there. With ``malformed``, a
    malformed line is recorded there and skipped, so that `mem check` lists them and reads every
    other line; without, it raises."""
    file = str(path)
    run_dir = run_dir or path.parent.parent
    last: datetime | None = None
    for number, line, ended in _iter_lines(path, seen):
        if isinstance(line, InputError):  # not UTF-8
            if malformed is None:
                raise line
            malformed.add(line.problem)
            continue
        if not ended and not whole_json(line):
            if begun is not None:
                begun.append(Problem(file, number, None, BEGUN))
            continue
        try:
            event = _parse_event(line, file, number, run, run_dir)
        except InputError as error:
            if malformed is None:
                raise
            malformed.add(error.problem, line)
            continue
        if last is not None and instant_last(event.timestamp, event.time) < last and problems is not None:
            problems.append(Problem(file, number, "time", f"{event.time} is earlier than the event "
                                                          f"before it ({last.isoformat()}): read as "
                                                          "that time, the log's order"))
        event = in_log_order(event, last)
        last = event.timestamp
        yield event


def in_log_order(event: Event, last: datetime | None) -> Event:
    """``event`` dated as the log's order dates it: stamped earlier than the event before it (its
    time ``last``; a writer's clock set back, or a time written to the minute in the minute of the
    event before it), it is dated as that one, its ``time`` kept as written (``iter_events``)."""
    return replace(event, timestamp=last) if last is not None and event.timestamp < last else event


def _parse_event(line: str, file: str, number: int, run: str, run_dir: Path | None) -> Event:
    """One event; ``run_dir`` None: its path is not checked, nor kept (``path`` None)."""
    f = Fields(parse_json(line, file, number), file, number, "", EVENT_FIELDS)
    time = f.str("time", required=True)
    stamp = parse_time(time, file, number, "time")
    kind = f.enum("kind", EVENT_KINDS)
    ids = tuple(canonical(ref) for ref in f.str_list("ids"))
    for i, ref in enumerate(ids):
        problem = ref_problem(ref)
        if problem:
            f.fail(f"ids[{i}]", problem)
    text = f.str("text")
    rel = check_event_path(text, run_dir, file, number) if run_dir and event_path(kind, text) else None
    return Event(run=run, seq=number, time=time, timestamp=stamp, actor=f.str("actor"),
                 kind=kind, ids=ids, text=text, path=rel)


# ------------------------------------------------------------------------------------ library.jsonl

def parse_library_entry(obj: Any, file: str, line: int) -> LibraryEntry:
    f = Fields(obj, file, line, "", LIBRARY_FIELDS)
    run = f.str("run", required=True)
    if not is_run_slug(run):
        f.fail("run", f"{run!r} {NOT_A_SLUG}")
    step_id = canonical(f.str("id", required=True))
    problem = step_id_problem(step_id)
    if problem:
        f.fail("id", problem)
    kind = f.enum("kind", KINDS)
    grade = f.opt_str("grade")
    if grade is not None and grade not in GRADES:
        f.fail("grade", f"{grade!r} is not one of {', '.join(GRADES)}")
    inserted = f.str("inserted")
    if inserted:
        parse_time(inserted, file, line, "inserted")
    return LibraryEntry(
        run=run, id=step_id, kind=kind, statement=f.str("statement", required=True),
        status=f.enum("status", STATUSES), setting=f.str("setting"), hyp=f.str_list("hyp"),
        grade=grade, repair=f.opt_str("repair"), inserted=inserted,
        missing=f.str("missing", required=kind == "dead_end", why=DEAD_END_NEEDS),
        failed_input=f.str("failed_input", required=kind == "error", why=ERROR_NEEDS), line=line,
    )


def iter_library(path: Path, problems: list[Problem] | None = None,
                 malformed: Malformed | None = None) -> Iterator[LibraryEntry]:
    """Stream solve/library.jsonl; a global id appearing twice is an error.

    With ``problems``, a repeated global id is recorded there (and the later entry dropped) instead
    of raised. With ``malformed``, a malformed line is recorded there and skipped, as
    ``iter_events`` does (`mem check` lists them all and checks the entries after them); without,
    it raises."""
    file = str(path)
    seen: dict[str, int] = {}
    for number, line, _ in _iter_lines(path):
        try:
            if isinstance(line, InputError):  # not UTF-8
                raise line
            entry = parse_library_entry(parse_json(line, file, number), file, number)
        except InputError as error:
            if malformed is None:
                raise
            malformed.add(error.problem, None if isinstance(line, InputError) else line)
            continue
        if entry.gid in seen:
            _record(problems, InputError(file, number, "id", f"duplicate library entry {entry.gid!r} "
                                                             f"(first on line {seen[entry.gid]})"))
            continue
        seen[entry.gid] = number
        yield entry


# ---------------------------------------------------------------------------------------- core.md

def core_heading(line: str) -> str | None:
    """What follows ``## `` on a heading line of core.md, its white space around cut (None: no
    heading). The regex ``^## +(.*?)\\s*$`` it replaces backtracked at each space of a long run
    of spaces: 5 s for one line of 40,000, which M4's token count lets through."""
    if not line.startswith("## "):
        return None
    return line[3:].lstrip(" ").rstrip()


_LONGEST_FIRST = sorted(CORE_FIELDS, key=len, reverse=True)  # a field's name, not a prefix of it


def misspelt_core_heading(line: str) -> str | None:
    """The field a line that is no heading was meant to head (None: none): '#' signs at its start,
    then a field's name, whatever its case, as ``##inputs``, ``### inputs``, ``# Inputs`` or
    ``＃＃ inputs`` (NFKC: a fullwidth '#') are written. Read as the text of the field above, it
    was lost at that field's next ``core-set``, and ``check`` said nothing. An indented line is
    text (the way to begin a line of a field with ``## ``)."""
    text = unicodedata.normalize("NFKC", line[:64])
    if not text.startswith("#"):
        return None
    rest = " ".join(text.lstrip("#").split()).casefold()
    for name in _LONGEST_FIRST:
        if rest.startswith(name) and not rest[len(name):len(name) + 1].isalnum():
            return name
    return None


def split_core_heading(rest: str) -> tuple[str, str] | None:
    """``'open gaps   E6/F4 …'`` -> ('open gaps', 'E6/F4 …'), matching the longest field name."""
    for name in _LONGEST_FIRST:
        if rest == name or rest.startswith(name + " ") or rest.startswith(name + "\t"):
            return name, rest[len(name):].strip()
    return None


def parse_core_text(text: str, run: str, file: str) -> CoreMemory:
    """W's fields; InputError listing every bad heading and stray line, so all are mended at once
    (a bad heading's text is read as no field's)."""
    fields: list[tuple[str, list[str]]] = []
    bad: list[Problem] = []
    current: list[str] | None = None  # the lines of the field being read (None: before any, or a bad one)
    for number, line in enumerate(text_lines(text), start=1):
        heading = core_heading(line)
        if heading is not None:
            split = split_core_heading(heading)
            current = None
            if split is None:
                bad.append(Problem(file, number, "heading",
                                   f"unknown field {heading!r} (fields: {', '.join(CORE_FIELDS)})"))
            elif any(split[0] == seen for seen, _ in fields):
                bad.append(Problem(file, number, split[0], "field appears twice"))
            else:
                current = [split[1]] if split[1] else []
                fields.append((split[0], current))
        elif (meant := misspelt_core_heading(line)) is not None:
            current = None
            bad.append(Problem(file, number, "heading", f"{line.rstrip()[:40]!r} is no heading: a field's "
                               f"heading is '## ' then its name, as in '## {meant}'"))
        elif line.strip():
            if not fields and not bad:
                bad.append(Problem(file, number, None, "text before the first '## field' heading"))
            elif current is not None:
                current.append(line.rstrip())
    if bad:
        raise InputError.many(bad)
    return CoreMemory(run=run, path=file,
                      fields=tuple((name, "\n".join(lines)) for name, lines in fields))


def parse_core(path: Path, run: str) -> CoreMemory:
    return parse_core_text(read_text(path), run, str(path))


def source_file(run_dir: Path, source: Source) -> Path | None:
    """The snapshot file of a source, when it exists inside the run folder."""
    if not source.path:
        return None
    try:
        target = (run_dir / source.path).resolve()
        if not target.is_relative_to(run_dir.resolve()) or not target.is_file():
            return None
    except (OSError, RuntimeError):  # a name too long, a symlink loop
        return None
    return target
