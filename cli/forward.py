"""The client side of `mem serve`: a read command is sent to the workspace's warm server, if one
answers on ``WORKSPACE/.mem/serve.sock``, instead of being run in this process.

Only the read commands (``READ_COMMANDS``) are forwarded; writes (index, core-set, archive-insert)
and everything else always run in-process. Anything short of a well-formed answer (no socket, a
stale one, a refused or timed-out connection, a server that cannot answer) returns None, and the
caller runs the command in-process: forwarding may make a call faster, never different.
``MEM_NO_SERVER=1`` turns forwarding off.

This module is imported on every `mem` call, before anything else: standard library only."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import struct
import sys

SOCKET_NAME = "serve.sock"
INDEX_DIR = ".mem"  # records.workspace.INDEX_DIR (not imported: this path stays light)
READ_COMMANDS = frozenset({"archive-search", "archive-get", "recall-search"})
MAX_MESSAGE = 1 << 20          # bytes in one request (and the size a client accepts back: 64×)
CONNECT_TIMEOUT = 1.0          # seconds to reach the server
ANSWER_TIMEOUT = 30.0          # seconds for its answer (a server still warming up may take a while)
_GLOBAL_WITH_VALUE = ("--workspace", "-w", "--config")
_ENV_NAMES = frozenset({"HOME", "XDG_CACHE_HOME", "MEM_CACHE_DIR"})  # `~` in index.uri; the model cache
_STORE_PREFIX = "AWS_"  # an s3:// index's credentials, endpoint, region, profile (read by the store)


_LAYERS = ("api", "cli", "configs", "eval", "indexers", "records", "retrieval", "text")  # the package's


def code_version() -> str:
    """An identity of this installation's code: where it is and the stats of its files (1 ms):
    the modules, and the data the layers read (configs/default.toml, the schemas, the skill). A
    server answers only a client of its own code: one left running by an upgrade, or by an edit of
    an editable install, answers as the code it loaded does (an index format it no longer reads).
    A file's inode and change time are in it: the system sets them whenever the file is written,
    where a build that fixes every file's modification time (SOURCE_DATE_EPOCH, Nix) made a file
    of another text and the same size look the same."""
    root = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # the layers' folder, its links
    # followed: one installation imported through two paths (a linked home) stopped each other's server
    digest = hashlib.sha256(root.encode())
    walks = [(root, [], sorted(n for n in os.listdir(root) if n.endswith(".py")))]  # installed: api's
    for layer in (*_LAYERS, "schemas", "skills"):  # installed, api/'s data folders are at the top too
        walks += sorted(os.walk(os.path.join(root, layer)))
    for folder, _, names in walks:
        if os.path.basename(folder) == "__pycache__":
            continue
        for name in sorted(n for n in names if not n.endswith((".pyc", ".pyo"))):
            stat = os.stat(os.path.join(folder, name))
            digest.update(f"{folder[len(root):]}/{name}:{stat.st_ino}:{stat.st_ctime_ns}:"
                          f"{stat.st_mtime_ns}:{stat.st_size};".encode())
    return digest.hexdigest()[:16]


def retire(path: str, build: str) -> None:
    """Stop the server on ``path`` when it runs other code than ``build`` (SIGTERM, as `mem serve
    --stop` sends): the next call that finds none starts one of this code."""
    answer = exchange(path, {"ping": True}, timeout=5.0)
    if answer and isinstance(answer.get("pid"), int) and answer.get("build") != build:
        try:
            os.kill(answer["pid"], signal.SIGTERM)
        except OSError:
            pass


def environment() -> dict[str, str]:
    """The variables of this process a read command's answer may depend on, sent with each
    request: a server (which runs with the environment of the call that started it) answers a
    caller only when they are its own (``environment_differs``); ``$MEM_WORKSPACE`` is sent
    apart, as it names the workspace."""
    return {name: _as_used(value) if name in _ENV_NAMES else value for name, value in os.environ.items()
            if name in _ENV_NAMES or name.startswith(_STORE_PREFIX)}


def _as_used(path: str) -> str:
    """A folder variable as a process reads it: a relative one from its own folder (two callers
    in two folders giving `MEM_CACHE_DIR=cache` name two caches, not the server's)."""
    if path.strip().lower() in ("", "off", "0") or path.startswith("~") or os.path.isabs(path):
        return path
    return os.path.abspath(path)


def environment_differs(theirs: dict[str, str], remote: bool) -> list[str]:
    """The names of ``environment()`` whose values ``theirs`` (a caller's) does not share with
    this process; the AWS_* ones only when the index is on an object store (``remote``)."""
    ours = environment()
    names = {n for n in set(ours) | set(theirs) if remote or not n.startswith(_STORE_PREFIX)}
    return sorted(name for name in names if ours.get(name) != theirs.get(name))


def read_command(argv: list[str]) -> tuple[str, str | None] | None:
    """``(command, --workspace value or None)`` when ``argv`` is a read command that can be
    forwarded, else None (``read_call``: with its ``--config``)."""
    found = read_call(argv)
    return found[:2] if found else None


def read_call(argv: list[str]) -> tuple[str, str | None, str | None] | None:
    """``(command, --workspace value or None, --config value or None)`` when ``argv`` is a read
    command that can be forwarded, else None. Global options are read as the CLI parser reads them;
    anything unusual before the command (an abbreviated or unknown option, help) gives None: it
    runs in-process."""
    command, workspace, config, i = None, None, None, 0
    while i < len(argv):
        token = argv[i]
        if token == "-h" or (len(token) > 2 and "--help".startswith(token)):  # --he: argparse's abbreviation
            return None
        if token in _GLOBAL_WITH_VALUE:
            if i + 1 >= len(argv):
                return None
            if token == "--config":
                config = argv[i + 1]
            else:
                workspace = argv[i + 1]
            i += 2
            continue
        if token.startswith("--workspace="):
            workspace = token.split("=", 1)[1]
        elif token.startswith("--config="):
            config = token.split("=", 1)[1]
        elif token.startswith("-w") and not token.startswith("--"):
            workspace = token[2:]
        elif command is None:
            if token.startswith("-"):
                if token != "--json":
                    return None
            else:
                command = token
        i += 1
    return (command, workspace, config) if command in READ_COMMANDS else None


def socket_path(workspace: str | None) -> str | None:
    """Where the server of the workspace named by ``--workspace``, ``$MEM_WORKSPACE`` or the
    current folder (as records.workspace.resolve_workspace chooses) listens; None if no folder."""
    chosen = workspace or os.environ.get("MEM_WORKSPACE") or "."
    if not os.path.isdir(chosen):
        return None
    try:
        return os.path.join(os.path.realpath(chosen), INDEX_DIR, SOCKET_NAME)
    except OSError:  # relative, and the current folder is gone: in-process, which says so in a line
        return None


SUN_PATH = 108  # bytes a Unix socket's name may take (Linux's sockaddr_un), its final NUL included


@contextlib.contextmanager
def address(path: str):
    """``path`` as a socket is bound or reached at: itself, or, when longer than a socket's name
    may be, the same file through a descriptor of its folder (``/proc/self/fd/N/serve.sock``, on
    Linux). A workspace 92 characters deep got no server ("AF_UNIX path too long"), and every call
    ran cold, starting a server that failed so again."""
    if len(os.fsencode(path)) < SUN_PATH or not os.path.isdir("/proc/self/fd"):
        yield path
        return
    folder = os.open(os.path.dirname(path), getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{folder}/{os.path.basename(path)}"
    finally:
        os.close(folder)


def answers(path: str) -> bool:
    """Whether a live server accepts connections on ``path`` (a stale socket refuses them). One
    this user may not reach (another user's, 0600) is taken as live, where a server of theirs was
    taken for stale and replaced by this user's (`mem serve`, or a start), and on a workspace they
    share each user's replaced the other's; one of this user's own, its mode changed, is stale."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(CONNECT_TIMEOUT)
        try:
            with address(path) as reached:
                probe.connect(reached)
        except TimeoutError:
            return True  # there, but too busy to accept: alive
        except PermissionError:  # (this user's own refuses it only where its mode was changed:
            return foreign(path) is not None  # no server of ours makes one so, and it is stale)
        except OSError:
            return False
    return True


def foreign(path: str) -> str | None:
    """A line saying ``path`` is another user's socket, which this user may not reach, or None."""
    try:
        owner = os.lstat(path).st_uid
    except OSError:
        return None
    if not hasattr(os, "getuid") or owner == os.getuid():
        return None
    return (f"{path} is the socket of another user's server (uid {owner}), which this user may not reach: "
            "that user's `mem serve --stop` stops it (or remove the file, if their server is gone)")


def _peer(conn: socket.socket, path: str) -> tuple[bool, int | None]:
    """Whether the server on the other end of ``conn`` runs as this user, and its pid where the
    system says (``SO_PEERCRED``): the socket file must be this user's, and so must the peer. A
    server another local user runs on a workspace's socket was sent this caller's request and
    environment (``AWS_*`` credentials), had its answer printed as the search's, and named a pid
    that `--stop` and a retirement killed."""
    if not hasattr(os, "getuid"):
        return True, None
    try:
        if os.lstat(path).st_uid != os.getuid():
            return False, None
        if hasattr(socket, "SO_PEERCRED"):
            pid, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                              struct.calcsize("3i")))
            return uid == os.getuid(), pid
    except OSError:
        return False, None
    return True, None


def exchange(path: str, request: dict, timeout: float = ANSWER_TIMEOUT) -> dict | None:
    """Send one request to the server at ``path`` and return its answer, or None when there is
    no server there, it does not answer in time, or it is not this user's (``_peer``; nor when it
    names a pid other than its own)."""
    return ask(path, request, timeout)[0]


def ask(path: str, request: dict, timeout: float) -> tuple[dict | None, int | None]:
    """``exchange``'s answer, and, where none came, the pid of a server that took the request
    and sent nothing back within ``timeout`` (stopped by a signal, or stuck: the system still
    queues connections to it), where it is this user's; else None."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(CONNECT_TIMEOUT)
            with address(path) as reached:
                conn.connect(reached)
            ours, pid = _peer(conn, path)
            if not ours:
                return None, None
            conn.settimeout(timeout)
            conn.sendall(json.dumps(request).encode("utf-8"))
            conn.shutdown(socket.SHUT_WR)
            chunks, size = [], 0
            try:
                while chunk := conn.recv(1 << 16):
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > 64 * MAX_MESSAGE:
                        return None, None
            except TimeoutError:  # a pid of 0: the server's pid namespace is not the caller's
                return None, pid if not chunks and pid is not None and pid > 0 else None
        answer = json.loads(b"".join(chunks))
    except (OSError, ValueError):
        return None, None
    if not isinstance(answer, dict) or (pid is not None and "pid" in answer and answer["pid"] != pid):
        return None, None
    return answer, None


OFF_WORDS = ("", "0", "false", "no", "off")  # a switch variable set to one of these is off


def switched_on(name: str) -> bool:
    """Whether the environment variable ``name`` (``MEM_NO_SERVER``, ``MEM_NO_AUTOSTART``) is set on:
    any value but empty, 0, false, no or off (any case). ``MEM_NO_SERVER=false`` turned the server off."""
    return os.environ.get(name, "").strip().lower() not in OFF_WORDS


def forward(argv: list[str]) -> int | None:
    """Run ``argv`` on the warm server and print its answer exactly; the exit status, or None
    when it must run in-process."""
    if switched_on("MEM_NO_SERVER"):
        return None
    found = read_command(argv)
    path = socket_path(found[1]) if found else None
    if path is None or not os.path.exists(path):
        return None
    try:
        cwd = os.getcwd()
    except OSError:
        return None
    env = {"MEM_WORKSPACE": os.environ.get("MEM_WORKSPACE"), "vars": environment()}
    build = code_version()
    answer = exchange(path, {"argv": list(argv), "cwd": cwd, "env": env, "build": build})
    if answer is not None and answer.get("build") != build:  # a server of other code (an old one has
        retire(path, build)                                    # no build): never its answer
        return None
    if answer is None or not isinstance(answer.get("code"), int) \
            or not isinstance(answer.get("stdout"), str) or not isinstance(answer.get("stderr"), str):
        return None
    with contextlib.suppress(OSError):  # the notes first, as in-process (written before the answer,
        sys.stderr.write(answer["stderr"])  # which a buffered stdout holds to the end): `2>&1` reads
        sys.stderr.flush()  # alike; a stderr that cannot take them loses them, not the answer
    try:  # (a stream started closed is the null device: cli.main)
        sys.stdout.write(answer["stdout"])
        sys.stdout.flush()
    except BrokenPipeError:  # as the in-process path: a closed reader is not an error
        stdout_gone()
        return 0
    except OSError as error:  # as the in-process path (``cli.main._fail`` and ``_flushed``)
        stdout_gone()
        error_lines = _json_error(answer["stdout"]) if answer["code"] else None
        with contextlib.suppress(OSError):
            sys.stderr.write("".join(f"mem: {line}\n" for line in error_lines or [unwritten(error)]))
        return answer["code"] if error_lines else 2
    return answer["code"]


def _json_error(stdout: str) -> list[str] | None:
    """The lines of a --json error document (``{"error": …, "problems"?: […]}``), else None."""
    try:
        data = json.loads(stdout)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("error"), str):
        return None
    problems = data.get("problems")
    return problems if isinstance(problems, list) and problems and all(
        isinstance(p, str) for p in problems) else [data["error"]]


def unwritten(error: OSError) -> str:
    """The error of an answer standard output could not take (``/dev/full``: a full disk)."""
    return f"cannot write the output: {error.strerror or error}"


def stdout_gone(stream=None) -> None:
    """Point standard output (``stream``'s file) at the null device once a write or flush to it
    failed (a full disk, a reader that closed): what its buffer still holds drains there. Else the
    interpreter's last flush at exit failed again: "Exception ignored", exit 120. A stream that is
    no file (the server's StringIO) is left as it is."""
    try:
        fd = (sys.stdout if stream is None else stream).fileno()
    except (AttributeError, OSError, ValueError):
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)
