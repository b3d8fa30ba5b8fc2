"""The two memory functions that write: ``core_set`` (W) and ``archive_insert`` (L).

Both are safe against crashes and concurrent writers: appends are one ``os.write`` of a whole line on
an O_APPEND descriptor, fsynced, under a file lock; core.md is replaced atomically
(records.files.write_atomic): its new text is written to a temporary file and synced, then its
``checkpoint`` event is appended (write-ahead), then the file is renamed over core.md. A crash
leaves the old core.md, with the event that carries the new text if it came after the append; a
write the machine refuses (a full disk) leaves neither, in one line (``files.writing``), and an
append it cut short is taken back."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from mem_retrieval.records.core import clean_field, field_name, id_candidates, mentions, with_field
from mem_retrieval.records.errors import InputError, Refused, BadInput
from mem_retrieval.records.files import fsync_dir, replace_atomic, sweep_temporaries, write_atomic, writing
from mem_retrieval.records.invariants import (INPUT, LIBRARY_FIX, Catalog, admission_problem,
                                               integrity_problem, m3_excluded, read_catalog)
from mem_retrieval.records.ids import (given_run, nearest_ids, owner_run, ref_problem, slug_run, spellings,
                                       split_gid, typed_ref, typed_run)
from mem_retrieval.records.parse import (BEGUN, decode_utf8, iter_library, parse_core_text, parse_json,
                                         parse_library_entry, parse_time, present, read_regular, read_text,
                                         whole_json)
from mem_retrieval.records.tokens import CORE_TOKEN_LIMIT, count_tokens
from mem_retrieval.records.types import Event, LibraryEntry, Step
from mem_retrieval.records.workspace import Workspace

LOCK_TIMEOUT_S = 60.0
LOCK_POLL_S = 0.05  # how often a writer waiting for a lock tries it again
# How long an event's append waits for a line another writer has begun to end (a harness appending
# in pieces; it takes no lock), looking every LINE_POLL_S.
LINE_WAIT_S = 2.0
LINE_POLL_S = 0.01


# ------------------------------------------------------------------------------- durable file writes

@contextlib.contextmanager
def locked(lock_path: Path, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_path``, as ``flock(1)`` takes it: the file is created
    if needed (mode 0666 less the umask) and never removed, and one another user made (0644
    under umask 022) is locked through a descriptor opened for reading, which ``flock`` needs no
    more than: the lock file of a workspace a group shares stops no member whom its data files
    let write (filelock opened it for writing, and refused them)."""
    import fcntl

    where = f"lock {lock_path}"  # (a folder, a dead link or a loop of links in the lock's place)
    try:
        try:  # (no open of it waits, whatever is put there: a FIFO)
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK, 0o666)
        except PermissionError:
            if not os.path.lexists(lock_path):  # it cannot be made: nothing can be written in the folder
                raise
            fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)  # another user's
    except OSError as error:
        if error.errno == errno.EROFS or not os.path.lexists(lock_path) or not lock_path.parent.is_dir():
            where = f"write in {lock_path.parent}"  # a read-only file system or folder
        raise BadInput(f"cannot {where}: {error.strerror or error}") from None
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise Refused(f"{lock_path} is held by another process (waited {timeout:g} s)") from None
                time.sleep(LOCK_POLL_S)
            except OSError as error:  # (a network file system's flock, on a descriptor for reading)
                raise BadInput(f"cannot lock {lock_path}: {error.strerror or error}") from None
        yield
    finally:
        os.close(fd)  # (the lock goes with it)


class _LineBegun(Exception):
    """Another writer (it takes no lock) has begun a line of the file and not ended it: wait, and
    look again."""


def append_line(path: Path, record: dict) -> int:
    """Append ``record`` as one JSON line with one ``os.write`` (O_APPEND), fsynced; the caller holds
    the file's lock. Returns the new line's number. A last line without its line break that is
    whole JSON (written by hand) gets one first; one that is not is another writer's line begun
    (a harness takes no lock): ``_LineBegun``, for the caller to wait and look again. Another
    writer's bytes are never cut: a line it began between this look and this write holds this one
    inside it, which nothing can take back, and is bad input, named. A write the machine refuses
    (a full disk, a file size limit) takes back what of it was written, when nothing followed it,
    and the refusal is one line (``files.writing``)."""
    line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
    created = not path.exists()
    with writing(str(path)):
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            last = _last_line(fd, size) if size and os.pread(fd, 1, size - 1) != b"\n" else None
            if last is not None and not whole_json(last[1]):
                raise _LineBegun()
            data = line if last is None else b"\n" + line
            written = 0
            try:
                while written < len(data):
                    written += os.write(fd, data[written:])
                os.fsync(fd)
            except OSError:
                end = os.lseek(fd, 0, os.SEEK_CUR)  # O_APPEND: just past what this wrote
                if written and os.fstat(fd).st_size == end:  # never half a line: every reader
                    os.ftruncate(fd, end - written)  # would stop at it (another writer's, kept)
                raise
            start = os.lseek(fd, 0, os.SEEK_CUR) - len(data)
            if start > size and os.pread(fd, 1, start - 1) != b"\n":  # inside a line begun meanwhile
                raise InputError(str(path), _count_lines(fd, start) + 1, None, "another writer began "
                                 "this line as mem wrote an event into it: the line is broken (a "
                                 "writer that takes no lock must write each line whole, in one write: "
                                 "README)")
            number = _count_lines(fd, start) + 1 + (last is not None)
        finally:
            os.close(fd)
        if created:
            fsync_dir(path.parent)
    return number


def append_whole(path: Path, records: list[dict]) -> int:
    """Append ``records`` as JSON lines by replacing ``path`` with its bytes and them (``files.
    replace_atomic``): a reader, which takes no lock, sees the file before or after, never a line
    part written (an ``os.write`` of a long line reached readers in pieces, and `check` called a
    valid library bad input); a kill leaves one or the other. The caller holds the file's lock.
    Returns the first new line's number."""
    there = present(path)
    old = read_regular(path) if there else b""
    if old and not old.endswith(b"\n"):
        old += b"\n"
    new = b"".join((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8") for record in records)
    with writing(str(path)):
        if there and not os.access(path, os.W_OK):  # a file made read-only stays unwritten, as an
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))  # append in place left it
        replace_atomic(path, lambda tmp: tmp.write_bytes(old + new))
    return old.count(b"\n") + 1


def _count_lines(fd: int, size: int) -> int:
    count, offset = 0, 0
    while offset < size:
        chunk = os.pread(fd, min(1 << 20, size - offset), offset)
        count += chunk.count(b"\n")
        offset += len(chunk)
    return count


def utc_iso(stamp: datetime) -> str:
    """``2026-10-17T07:00:00Z``, with the fraction of a second a ``stamp`` has (``.250``: to the
    millisecond where it is whole milliseconds, as ``now`` gives)."""
    micro = stamp.microsecond
    spec = "seconds" if not micro else "milliseconds" if micro % 1000 == 0 else "microseconds"
    return stamp.astimezone(UTC).isoformat(timespec=spec).replace("+00:00", "Z")


def now() -> datetime:
    """The time a library entry's ``inserted`` is stamped with: UTC to the millisecond. Events are
    stamped to the second (``append_event``), as the SPEC writes them and as a harness writing the
    next event by hand does: to the millisecond, a hand-written event in the same second read as
    earlier than ours, and the log was refused."""
    stamp = datetime.now(UTC)
    return stamp.replace(microsecond=stamp.microsecond // 1000 * 1000)


def _lock_of(path: Path) -> Path:
    return path.with_name(f".{path.name}.lock")


# ------------------------------------------------------------------------------------------- events

def _last_time(path: Path, waiting: bool = False) -> datetime | None:
    """The time of the last event in events.jsonl (None when there is none), read from the file's
    end: a long log is not read whole for one append. A last line without its line break that is
    not whole JSON is another writer's line begun: ``_LineBegun`` while ``waiting``, else bad
    input saying so."""
    if not path.is_file():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        found = _last_line(fd, size)
        if found is None:
            return None
        start, raw = found
        number = _count_lines(fd, start) + 1
        begun = os.pread(fd, 1, size - 1) != b"\n" and not whole_json(raw)
    finally:
        os.close(fd)
    file = str(path)
    if begun and waiting:
        raise _LineBegun()
    if begun:
        raise InputError(file, number, None, f"{BEGUN} (waited {LINE_WAIT_S:g} s for it to end)")
    line = decode_utf8(raw, file, number - 1)
    obj = parse_json(line, file, number)  # as every reader of the log parses it
    written = obj.get("time") if isinstance(obj, dict) else None
    if not isinstance(written, str):
        raise InputError(file, number, "time", "missing")
    return parse_time(written, file, number, "time")


def _last_line(fd: int, size: int, block: int = 1 << 16) -> tuple[int, bytes] | None:
    """(offset, bytes) of the last line holding more than white space (its ending white space
    left out), read backwards a block at a time; None when there is none. Each block is looked
    at once: joining the blocks read at every step cost the square of a long line (a 40 MB last
    event made `core-set` take 23 s)."""
    blocks: list[bytes] = []  # the line's blocks, last first
    offset = size
    while offset > 0:
        step = min(block, offset)
        offset -= step
        chunk = os.pread(fd, step, offset)
        if not blocks:  # nothing but white space read yet: the line's end is in this block, or before
            chunk = chunk.rstrip()
            if not chunk:
                continue
        cut = chunk.rfind(b"\n")
        blocks.append(chunk[cut + 1:])
        if cut >= 0:
            return offset + cut + 1, b"".join(reversed(blocks))
    return (0, b"".join(reversed(blocks))) if blocks else None


def append_event(ws: Workspace, run: str, kind: str, ids: list[str], text: str,
                 actor: str = "root") -> Event:
    """Append one event to RUN/memory/events.jsonl, timed now (UTC) but never before the last one."""
    path = ws.events_path(run)
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(_lock_of(path)):
        deadline = time.monotonic() + LINE_WAIT_S
        while True:  # a line another writer has begun (a harness takes no lock) is let end first
            stamp_now = datetime.now(UTC).replace(microsecond=0)
            present(path)  # a folder or dead link is no log to append to (O_CREAT made its target)
            try:
                with writing(str(path), tried="cannot read it: "):  # its own name, not the caller's
                    last = _last_time(path, waiting=time.monotonic() < deadline)
                stamp = max(stamp_now, last) if last else stamp_now
                record = {"time": utc_iso(stamp), "actor": actor, "kind": kind, "ids": ids, "text": text}
                seq = append_line(path, record)
                break
            except _LineBegun:
                if time.monotonic() >= deadline:
                    with writing(str(path), tried="cannot read it: "):  # the line still begun: bad
                        _last_time(path, waiting=False)  # input, named
                    raise Refused(f"{path}: another writer keeps beginning lines as mem appends "
                                  f"(waited {LINE_WAIT_S:g} s)") from None
                time.sleep(LINE_POLL_S)
    return Event(run=run, seq=seq, time=record["time"], timestamp=stamp, actor=actor, kind=kind,
                 ids=tuple(ids), text=text)


# ------------------------------------------------------------------------------------------ core_set

@dataclass(frozen=True)
class CoreSet:
    """What a core_set did: the field written, W's size after it, and its checkpoint event."""

    run: str
    field: str
    tokens: int
    event: Event


def named_ids(ws: Workspace, run: str, text: str) -> list[str]:
    """The ids a text names that exist: steps and sources of ``run`` (bare or global), steps of other
    runs and library entries (global), in order of first mention."""
    forms = [id_candidates(word) for word in mentions(text)]
    others = {split_gid(form)[0] for candidates in forms for form in candidates if "/" in form}
    trees = {run: ws.tree(run), **ws.readable_trees(others - {run})}  # an unreadable one names nothing
    library: dict[str, LibraryEntry] = {}
    with contextlib.suppress(InputError):
        library = ws.library_index()  # cached: a checkpoint or an evaluation's step names few ids
    catalog = Catalog(trees, library)
    found: list[str] = []
    for candidates in forms:  # the id as its record writes it: `A5‑7` (U+2011) typed, `A5-7` logged
        spelled = next((spelled for form in candidates for spelled in spellings(form)
                        if catalog.resolve(spelled, run) is not None), None)
        if spelled is not None and spelled not in found:
            found.append(spelled)
    return found


def core_set(ws: Workspace, run: str, field: str, text: str,
             package: str) -> CoreSet:
    """Rewrite one field of RUN/memory/core.md; refused when W would pass 2,000 tokens (M4)."""
    name = field_name(field)
    text = clean_field(text)
    run = typed_run(run)  # a look-alike dash, as archive-insert and the searches read it
    ws.check_runs([run], param="run")  # BadInput: not a slug; Refused: no such run
    ws.tree(run)
    path = ws.core_path(run)

    def judged(written: str | None) -> tuple[str, int]:  # W with this field, and its tokens (M4)
        if written is not None:
            parse_core_text(written, run, str(path))  # bad input: refused, named by file and line
        new_text = with_field(written, name, text)
        tokens = count_tokens(new_text, package)
        _check_bound(path, name, tokens)
        return new_text, tokens

    # bad input, and W past its bound as it stands, refuse it before a folder or a lock file is made
    before = read_text(path) if present(path) else None
    new_text, tokens = judged(before)
    path.parent.mkdir(parents=True, exist_ok=True)
    log = ws.events_path(run)
    if present(log):  # a line another writer has begun is for the append to wait for
        with writing(str(log), tried="cannot read it: "), contextlib.suppress(_LineBegun):
            _last_time(log, waiting=True)
    with locked(_lock_of(path)):
        sweep_temporaries(path)  # left by a killed core-set
        now = read_text(path) if present(path) else None
        if now != before:  # another writer came first: judged again as it left W
            new_text, tokens = judged(now)
        events: list[Event] = []
        logged: list[tuple[int, int]] = []  # the log's size before the event and after it

        def write_ahead() -> None:
            start = log.stat().st_size if present(log) else 0
            events.append(append_event(ws, run, "checkpoint", named_ids(ws, run, text),
                                       f"core-set {name}: {text}"))
            logged.append((start, log.stat().st_size))

        try:
            with writing(str(path)):  # the event once the new W is written whole, before it replaces W
                if now is not None and not _may_replace(path):
                    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
                write_atomic(path, new_text, write_ahead)
        except BaseException:  # the rename refused (an immutable core.md, a mount point): the log
            if logged and not _holds(path, new_text):  # said a change W never had; taken back when
                _take_back(log, *logged[0])  # nothing followed it
            raise
    return CoreSet(run=run, field=name, tokens=tokens, event=events[0])


def _may_replace(path: Path) -> bool:
    """Whether this user may replace ``path`` whole (by a rename in its folder): where the file
    lets them write it, or it is theirs (a core.md its owner made read-only stays read-only, and
    is rewritten). Another user's they may not write was replaced through the folder's
    permission, and became theirs."""
    return os.access(path, os.W_OK) or not hasattr(os, "geteuid") or os.stat(path).st_uid == os.geteuid()


def _holds(path: Path, text: str) -> bool:
    try:
        return read_text(path) == text
    except (OSError, InputError):
        return False


def _take_back(path: Path, start: int, end: int) -> None:
    """Cut ``path`` back to ``start`` bytes where it still ends at ``end`` (what this process
    appended from ``start``, nothing another writer appended after it)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDWR)
        try:
            if os.fstat(fd).st_size == end:
                os.ftruncate(fd, start)
                os.fsync(fd)
        finally:
            os.close(fd)


def _check_bound(path: Path, name: str, tokens: int) -> None:
    """Refuse a W of ``tokens`` past M4's bound, naming the field that set it."""
    if tokens > CORE_TOKEN_LIMIT:
        raise Refused(f"{path}: W would be {tokens:,} tokens with this {name!r} "
                      f"(limit {CORE_TOKEN_LIMIT:,}); shorten it or another field")


# ------------------------------------------------------------------------------------ archive_insert

def library_record(step: Step, inserted: str) -> dict:
    """The SPEC §5 line for ``step``."""
    audit = step.audit
    repair = (audit.note or "repaired") if audit is not None and audit.repaired else None
    record = {"run": step.run, "id": step.id, "kind": step.kind, "statement": step.statement,
              "setting": step.setting, "hyp": list(step.hyp), "status": step.status,
              "grade": audit.grade if audit else None, "repair": repair, "inserted": inserted}
    if step.kind == "dead_end":
        record["missing"] = step.missing
    if step.kind == "error":
        record["failed_input"] = step.failed_input
    return record


def archive_insert(ws: Workspace, ref: str, run: str | None = None) -> LibraryEntry:
    """Copy an audited step from its tree.json to solve/library.jsonl; refused when M2 fails, when
    M3 would leave it out of `record` (``m3_excluded``), when its record does not hold together
    (``integrity_problem``), or when the id is already there."""
    ref, run = typed_ref(ref), given_run(run)  # a run typed with a look-alike dash; blank: none
    given = run  # ``--run`` (else the run is the id's own)
    if (problem := ref_problem(ref)) is not None:  # "", a NUL, `/A5-7`: as archive-get says it
        raise BadInput(problem, param="id")
    run, step_id = owner_run(ref, run), split_gid(ref)[1]
    if run is None:
        holders = [step.gid for tree in ws.readable_trees(ws.runs()).values()
                   if (step := tree.step_named(step_id)) is not None]
        named = (holders[0] if len(holders) == 1 else f"one of {', '.join(holders)}" if holders
                 else f"RUN/{ref}")
        raise BadInput(f"{ref!r} is a bare step id: name its run too ({named})", param="id")
    run = slug_run(run, "id" if given is None or split_gid(ref)[0] else "run")
    tree = ws.tree(run)
    step = tree.step_named(step_id)
    if step is None:
        near = nearest_ids(step_id, [s.gid for s in tree.steps], n=3)
        raise Refused(f"no step {step_id!r} in run {run!r} ({ws.tree_path(run)})"
                      + (f"; nearest: {', '.join(split_gid(gid)[1] for gid in near)}" if near else ""))
    problem = admission_problem(step.status, step.grade, step.repaired)
    if problem:
        # admitted before its status or audit changed: "may not enter" read as though it were not
        # there (a malformed line is bad input, as below: read whole before any answer)
        if (entry := ws.library_index().get(step.gid)) is not None:
            raise Refused(f"{step.gid} is already in the library ({ws.library_path}:{entry.line}), admitted "
                          f"before {ws.tree_path(run)}:{step.line} said {problem} ({LIBRARY_FIX})")
        raise Refused(f"{step.gid} may not enter the library (M2): {problem}")
    catalog = read_catalog(ws)  # every run's steps, as check reads them: for M3 and integrity
    _, excluded, undecided = m3_excluded(ws, tree, catalog.library, catalog)  # (a malformed line: input)
    if step.id in excluded:  # as `record` leaves it out: nothing removes an entry once written
        raise Refused(f"{step.gid} may not enter the library (M3): {excluded[step.id]}")
    if found := integrity_problem(catalog, step):  # as `record` refuses its run
        code, problem = found
        raise (BadInput if code == INPUT else Refused)(f"{step.gid} may not enter the library ({code}): "
                                                       f"{problem}")
    if step.id in undecided:  # resting on it through other runs' steps: as `record` is refused
        raise BadInput(f"{step.gid} may not enter the library (input): {undecided[step.id]}")
    path = ws.library_path
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path.parent / ".library.lock"):
        # read whole before any answer: a malformed line anywhere is bad input, not "already there"
        for entry in list(iter_library(path)) if present(path) else ():
            if entry.gid == step.gid:
                raise Refused(f"{step.gid} is already in the library ({path}:{entry.line})")
        sweep_temporaries(path)  # left by a killed writer
        record = library_record(step, utc_iso(now()))
        line = append_whole(path, [record])
    return parse_library_entry(record, str(path), line)
