"""A server that starts itself: a read command that found no `mem serve` for its workspace, once it
has answered, starts one in the background (detached, with the config's ``serve.idle_timeout``),
so the agent's next call is answered warm.

Off with ``serve.auto = false``, ``MEM_NO_SERVER=1`` (no forwarding either) or
``MEM_NO_AUTOSTART=1`` (the test suite's: forwarding stays); only for a workspace with an index
(in ``.mem/``, the folder ``index.uri`` names, or on an object store). Never
two servers: ``.mem/serve.starting`` (created exclusively) marks a start in progress, so calls
arriving while the first server warms up start no other; a server binding a socket another answers
on refuses to run (``cli/server.py``). Nothing here may delay or change the answer: any failure is
silent, and the command's output is already written."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

from mem_retrieval.cli.forward import INDEX_DIR, answers, read_call, socket_path, switched_on

STARTING = "serve.starting"
LOG = "serve.log"
START_GRACE = 60.0  # seconds a start in progress holds off another


def wanted(argv: list[str]) -> tuple[Path, str | None] | None:
    """``(workspace, --config value)`` whose server ``argv`` (a read command just answered
    in-process) should start, or None: none when a live server answers on the socket (it declined
    this call, e.g. a relative ``--config``; another would only fail to bind)."""
    if switched_on("MEM_NO_SERVER") or switched_on("MEM_NO_AUTOSTART"):
        return None
    found = read_call(argv)
    path = socket_path(found[1]) if found else None
    if path is None or (os.path.exists(path) and answers(path)):
        return None
    return Path(path).parent.parent, found[2]


def start_if_wanted(argv: list[str]) -> int | None:
    """Start the workspace's server in the background when it should run; its pid, or None."""
    try:
        found = wanted(argv)
        if found is None:
            return None
        root, config_file = found
        if config_file and not stat.S_ISREG(os.stat(config_file).st_mode):  # a pipe (`--config <(…)`)
            return None  # the call read it: its [serve] keys cannot be read again (a terminal waited)
        from mem_retrieval.configs import load_config

        config = load_config(root, Path(config_file) if config_file else None)
        if not config.serve.auto or not _indexed(root, config) or not _made(root / INDEX_DIR) \
                or not _own(root / INDEX_DIR) or not _claim(root / INDEX_DIR / STARTING):
            return None
        try:  # claimed: a start that fails here frees the claim (a full disk kept the marker, and
            # no call tried again for a minute)
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
            log = os.fdopen(os.open(root / INDEX_DIR / LOG, flags | getattr(os, "O_NONBLOCK", 0),  # a pipe
                                    0o600), "ab")
            if not stat.S_ISREG(os.fstat(log.fileno()).st_mode):  # there held the answered call for good
                log.close()
                started(root)
                return None
            try:
                process = subprocess.Popen(  # -P: the workspace, its cwd, is not on its module path
                    [sys.executable, "-P", "-m", "mem_retrieval.cli", "--workspace", str(root), "serve",
                     "--idle-timeout", f"{config.serve.idle_timeout:g}", "--started"],
                    cwd=root, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                    env=server_environment(), close_fds=True)
            finally:
                log.close()
        except BaseException:
            started(root)
            raise
        return process.pid
    except Exception:  # never let starting a helper spoil an answer already given
        return None


def _made(folder: Path) -> bool:
    """Whether the workspace's ``.mem`` is there for the server's socket, marker and log: an index
    ``index.uri`` puts in another folder leaves none, and no server was ever started."""
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        return True
    except OSError:
        return False


def _own(folder: Path) -> bool:
    """Whether ``folder`` (the workspace's ``.mem``) is this user's: a server is started only in
    one. In another user's, it ran as this caller from their folder, its log a link of theirs to
    a file of the caller's (appended to), its modules theirs (a ``queue.py`` in the workspace was
    imported: the server's working folder was on its path, which ``-P`` now keeps off)."""
    try:
        return not hasattr(os, "getuid") or os.stat(folder).st_uid == os.getuid()
    except OSError:
        return False


def server_environment() -> dict[str, str]:
    """The caller's environment for the server it starts in the workspace's folder, with the
    caller's module path: PYTHONPATH's relative entries made absolute against the caller's folder
    (an empty entry is the current folder, as `export PYTHONPATH=$PYTHONPATH:/x` leaves it when it
    was unset). Against the workspace's folder they put its files on the server's module path,
    which ``-P`` keeps off it: a ``selectors.py`` an agent wrote there ran in the server."""
    env = {k: v for k, v in os.environ.items() if k != "MEM_WORKSPACE"}
    if env.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join(map(os.path.abspath, env["PYTHONPATH"].split(os.pathsep)))
    return env


def _indexed(root: Path, config) -> bool:
    """Whether the workspace has an index to serve: meta.json in its index folder (``.mem/`` or the
    folder ``index.uri`` names), of this code's format and parameters (an index an upgrade left
    refuses every call until `mem index --full`: a server would load the model to say so); an
    index on an object store is taken as there (asking the store would delay the caller, and a
    server without an index stops when idle)."""
    from mem_retrieval.indexers import store
    from mem_retrieval.indexers.location import META, Location
    from mem_retrieval.records.errors import MemError
    from mem_retrieval.records.workspace import Workspace

    location = Location.of(Workspace(root), config)
    if location.remote:
        return True
    if not (Path(location.uri) / META).is_file():
        return False
    try:
        return store.full_needed(location, config) is None
    except MemError:  # a meta.json no `mem index` wrote, and the like: every call says so
        return False


def _claim(marker: Path) -> bool:
    """Whether this process may start the server: it created ``marker`` (or found a stale one)."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        try:
            if time.time() - marker.stat().st_mtime < START_GRACE:
                return False
            marker.unlink()
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except OSError:
            return False
    except OSError:
        return False
    try:
        os.write(fd, str(os.getpid()).encode())
    except OSError:  # a full disk: no claim, and no marker keeping the next calls from one
        marker.unlink(missing_ok=True)
        return False
    finally:
        os.close(fd)
    return True


def started(root: Path) -> None:
    """The server is up (or gave up): the next start may be claimed."""
    (root / INDEX_DIR / STARTING).unlink(missing_ok=True)
