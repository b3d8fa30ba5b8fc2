"""Crash-safe file writes shared by every writer (core.md, meta.json, reports, plots): write a
temporary file in the same folder, fsync, rename over the target, fsync the folder. A crash leaves
the old file or the new one, whole; never a mix. The file keeps its permissions (a new one gets the
umask's), not mkstemp's 0600, and its group where the writer may give it (a file a group shares).
A folder (a model export, a download) is written whole the same way: built in a scratch folder
beside it and renamed into place (``replace_folder``)."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from functools import lru_cache
from pathlib import Path

from mem_retrieval.records.errors import BadInput


def sha256_file(path: Path) -> str:
    """SHA-256 of the file's bytes, in hex, read a MiB at a time (an OSError if it cannot be read)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def content_hash(path: Path) -> str | None:
    """``sha256_file`` (None: it cannot be read): what a stamp kept across copies of a folder (new
    inodes and change times) is checked by when it no longer matches."""
    try:
        return sha256_file(path)
    except OSError:
        return None


def sha256_unchanged(path: Path) -> str:
    """``sha256_file``, read once a process while the file's ``stamp`` stays the same: the model's
    weights (~90 MB, ~70 ms) were hashed again at every index run of a process that indexes again
    and again (the Python API, a test suite). A file changed since is read again."""
    was = stamp(path)
    return sha256_file(path) if was is None else _sha256_stamped(os.path.realpath(path), was)


@lru_cache(maxsize=64)
def _sha256_stamped(path: str, was: tuple[int, int, int, int]) -> str:
    return sha256_file(Path(path))


def stamp(path: Path) -> tuple[int, int, int, int] | None:
    """Identity of a file's content as the file system tells it, for a cache to notice a change:
    modification and change times, size, inode (None: no such file). The change time catches an
    edit that put its modification time back (``cp -p``, ``touch -r``) and kept its size."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return stamp_of(info)


def stamp_of(info: os.stat_result) -> tuple[int, int, int, int]:
    """``stamp`` of a file from its ``os.stat``, for a caller that stats it for another reason too."""
    return (info.st_mtime_ns, info.st_ctime_ns, info.st_size, info.st_ino)


@contextmanager
def writing(name: str, param: str | None = None, tried: str = "cannot write it: ") -> Iterator[None]:
    """The machine refusing a write (a full disk, a file size limit, a folder or a read-only file
    where a file is written): one line, ``NAME: cannot write it: why`` (BadInput, exit 2), not a
    traceback. ``tried`` "" for a look at a path rather than a write."""
    try:
        yield
    except OSError as err:
        raise BadInput(f"{name}: {tried}{err.strerror or err}", param=param) from None


def replace_atomic(path: Path, write: Callable[[Path], None],
                   before_replace: Callable[[], None] | None = None, follow: bool = True) -> None:
    """Replace ``path`` by what ``write(temporary_path)`` writes; a symbolic link's target is
    replaced, and the link stays (``follow`` false: the link itself is replaced, where a file
    must stay in its folder, as the index's meta.json in ``.mem/``). ``before_replace`` runs once
    the new content is written and synced, just before the rename: a write-ahead record of it
    (core-set's event) is then never left behind by a write the machine refused."""
    path = Path(os.path.realpath(path)) if follow else Path(os.path.abspath(path))
    folder = path.parent if str(path.parent) else Path(".")
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        try:  # the file's mode and group, kept; a link replaced itself (``follow`` false: one to a
            # device, a folder or nowhere, or a loop) is no file to keep a mode of
            info = path.stat() if follow else path.lstat()
            mode = info.st_mode & 0o777 if stat.S_ISREG(info.st_mode) else new_file_mode()
            group = info.st_gid if stat.S_ISREG(info.st_mode) else -1
        except FileNotFoundError:
            mode, group = new_file_mode(), -1
        write(tmp)
        with tmp.open("rb+") as handle:
            os.fsync(handle.fileno())
            if group not in (-1, os.fstat(handle.fileno()).st_gid):  # a file a group shares stays
                with contextlib.suppress(PermissionError):  # theirs where the writer may say so
                    os.fchown(handle.fileno(), -1, group)
            os.fchmod(handle.fileno(), mode)  # after the writing: a read-only file's mode would stop it
        if before_replace is not None:
            before_replace()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(folder)


def replace_all(files: list[tuple[Path, Callable[[Path], None]]]) -> None:
    """Replace each path by what its ``write(temporary_path)`` writes, all of them or none: each is
    written to a temporary file beside its place (``replace_atomic``'s, the folders it needs made)
    and synced, and only when all are, renamed into place in turn. A write the machine refuses (a
    read-only folder, a full disk, a file size limit) removes the temporary files and the folders
    made, and is raised with the path it was for (``filename``: a folder, or a file, never a
    temporary name) and its place in ``files`` (``index``); a rename refused then (rare: nothing
    is written by one) is raised with the paths already in place (``placed``)."""
    made: list[Path] = []
    staged: list[tuple[Path, Path]] = []
    placed: list[Path] = []
    where, at = Path("."), 0
    try:
        for at, (path, write) in enumerate(files):
            path = Path(os.path.realpath(path) if os.path.islink(path) else os.path.abspath(path))  # a
            # link's target is replaced, the link stays; a folder is made only where none stands
            for folder in reversed([path.parent, *path.parent.parents]):
                if not folder.is_dir():
                    where = folder
                    folder.mkdir()
                    made.append(folder)
            where = path
            _sweep_dead(path, files=True)  # what writers killed before they were done left there
            fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp")
            os.close(fd)
            staged.append((Path(name), path))
            write(Path(name))
            with open(name, "rb+") as handle:
                os.fsync(handle.fileno())
                kept = path.stat().st_mode & 0o777 if path.is_file() else new_file_mode()
                os.fchmod(handle.fileno(), kept)
        for at, (tmp, where) in enumerate(staged):
            os.replace(tmp, where)
            placed.append(where)
        for folder in dict.fromkeys(path.parent for _, path in staged):
            fsync_dir(folder)
    except OSError as error:
        for tmp, _ in staged[len(placed):]:
            tmp.unlink(missing_ok=True)
        if not placed:
            for folder in reversed(made):
                with suppress(OSError):
                    folder.rmdir()
        refused = OSError(error.errno, error.strerror or str(error), str(where))
        refused.index, refused.placed = at, placed
        raise refused from None
    except BaseException:
        for tmp, _ in staged[len(placed):]:
            tmp.unlink(missing_ok=True)
        raise


def fsync_dir(folder: Path) -> None:
    """Make a rename or a new file in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def private(path: Path, below: Path | None = None) -> bool:
    """Whether ``path``, and each folder above it up to ``below`` (itself included), is this user's
    own: no symbolic link, owned by this user, writable by no one else, its group included (where
    users share a group, a group-writable folder is theirs too). A folder another local user can
    write (a cache in a shared place, a folder in /tmp made first by someone else) may hold their
    files: an export they planted was linked and loaded. ``seal`` makes a folder of one's own so.
    True where the system has no users (no ``os.getuid``)."""
    if not hasattr(os, "getuid"):
        return True
    uid = os.getuid()
    try:
        for part in _up_to(path, below):
            found = os.lstat(part)
            if stat.S_ISLNK(found.st_mode) or found.st_uid != uid or found.st_mode & 0o022:
                return False
    except OSError:
        return False
    return True


def _up_to(path: Path, below: Path | None) -> list[Path]:
    """``path`` and each folder above it up to ``below`` (itself included; None: ``path`` alone)."""
    path = Path(path)
    below = Path(below) if below is not None else path
    return [path, *[parent for parent in path.parents if parent.is_relative_to(below)]]


def seal(path: Path, below: Path | None = None) -> None:
    """Take the group's and others' write permission off ``path`` and each folder above it up to
    ``below`` (a umask of 002 leaves them group-writable), where this user owns them: what
    ``private`` asks of a folder it trusts."""
    for part in _up_to(path, below):
        try:
            found = os.lstat(part)
            if hasattr(os, "getuid") and found.st_uid == os.getuid() and found.st_mode & 0o022:
                os.chmod(part, found.st_mode & 0o7755)
        except OSError:
            pass


def umask_modes(folder: Path) -> None:
    """Give every file under ``folder`` the mode a new file gets here (the umask's): a library
    saving through a temporary file leaves it 0600 (safetensors' weights), which another user
    reading the index could not open."""
    mode = new_file_mode()
    for path in Path(folder).rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.chmod(path, mode)


def sweep_temporaries(path: Path) -> None:
    """Delete the temporary files of ``path`` (``replace_atomic``'s) that killed writers left. Only
    while holding the lock every writer of ``path`` takes: no other writer's is then in progress."""
    real = Path(os.path.realpath(path))  # where replace_atomic writes them: beside a link's target
    for stale in real.parent.glob(f".{glob.escape(real.name)}.*.tmp"):
        stale.unlink(missing_ok=True)


def write_atomic(path: Path, text: str, before_replace: Callable[[], None] | None = None,
                 follow: bool = True) -> None:
    """Replace ``path`` by ``text`` (UTF-8) (``replace_atomic``)."""
    replace_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), before_replace, follow)


def replace_folder(target: Path, fill: Callable[[Path], None], tag: str = "tmp",
                   keep_existing: bool = False) -> bool:
    """Put the folder ``fill(scratch)`` writes at ``target``, whole: ``scratch`` is a fresh path
    beside ``target`` (same file system; ``fill`` creates it) renamed into place at the end, and
    removed whatever happens. Returns whether ``target`` was (re)placed: not when ``fill`` wrote
    nothing, nor, with ``keep_existing``, when ``target`` already exists or another process put it
    there first (a folder named by its content is never rewritten)."""
    target = Path(target)
    if tag not in SCRATCH_TAGS:  # the sweep knows these alone
        raise ValueError(f"tag {tag!r} is not one of {SCRATCH_TAGS}")
    target.parent.mkdir(parents=True, exist_ok=True)
    _sweep_dead(target, files=False)
    scratch = target.parent / f".{target.name}.{os.getpid()}.{tag}"
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        fill(scratch)
        if not scratch.is_dir() or (keep_existing and target.is_dir()):
            return False
        if not keep_existing:
            shutil.rmtree(target, ignore_errors=True)
        try:
            scratch.rename(target)
        except OSError:
            if keep_existing and target.is_dir():
                return False
            raise
        return True
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


STALE_SECONDS = 600  # a killed writer's leftover untouched this long is swept (see ``_sweep_dead``)
SCRATCH_TAGS = ("tmp", "download", "link")  # ``replace_folder``'s tags (``text.onnx`` links an export)


def _sweep_dead(target: Path, files: bool) -> None:
    """Delete what writers killed meanwhile left beside ``target``: ``files``, the temporary files of
    ``replace_all``, ``.NAME.PID.XXXXXXXX.tmp`` (a killed `eval paging --trec-out` left one for good,
    as large as its run file); else the scratch folders of ``replace_folder``, ``.NAME.PID.TAG`` (a
    model's download or export: up to ~130 MB each). Only names of exactly that form (a user's
    ``.run.trec.2024.backup`` is no scratch, nor ``run.trec.77777``'s temporary file beside
    ``run.trec``), of a process that is gone, untouched for ``STALE_SECONDS`` (a writer in another
    PID namespace sharing the folder is no process here, and these writers take no lock)."""
    name = re.escape(target.name)
    pid = "([1-9][0-9]{0,9})"  # a process id, as written (no process has 4294967296: no such name is ours)
    form = re.compile(rf"\.{name}\.{pid}\.[a-z0-9_]{{8}}\.tmp" if files
                      else rf"\.{name}\.{pid}\.(?:{'|'.join(SCRATCH_TAGS)})")
    for left in target.parent.glob(f".{glob.escape(target.name)}.*"):
        found = form.fullmatch(left.name)
        if not found or int(found.group(1)) == os.getpid() or _alive(int(found.group(1))):
            continue
        try:
            info = left.lstat()
        except OSError:
            continue
        if time.time() - info.st_mtime < STALE_SECONDS:
            continue
        if not files and stat.S_ISDIR(info.st_mode):
            shutil.rmtree(left, ignore_errors=True)
        elif files and stat.S_ISREG(info.st_mode):
            left.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs: a killed one its parent has not reaped yet (a zombie,
    state Z in /proc where there is one) will never finish its scratch folder."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # another user's: alive; past what a pid can be: not known
        return True
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (macOS), or it ended meanwhile: trust the signal
        return True
    return status.rpartition(")")[2].split()[:1] != ["Z"]  # the name, in parentheses, may hold spaces


def new_file_mode() -> int:
    """The mode a new file gets here: read and write for all, less the umask."""
    return 0o666 & ~_umask()


def new_folder_mode() -> int:
    """The mode a new folder gets here: all permissions, less the umask."""
    return 0o777 & ~_umask()


def _umask() -> int:
    """The process's umask, read where the system shows it (Linux): setting it to read it back
    changes it for the whole process meanwhile, and a host's thread creating a file then made it
    world-writable."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0)  # elsewhere: the only way there is
    os.umask(mask)
    return mask
