"""The warm server behind `mem serve`: one process that keeps lancedb, the command modules and the
embedding model loaded, and runs the read commands sent to ``WORKSPACE/.mem/serve.sock``.

Protocol: one JSON request per connection, the client closing its side when done:
``{"argv": [...], "cwd": DIR, "env": {"MEM_WORKSPACE": str|null, "vars": {NAME: VALUE}}, "build": B}``
→ ``{"code": int, "stdout": str, "stderr": str}``, or ``{"error": why}`` when the server
cannot answer (the client then runs the command in-process), each with the server's ``build``:
``vars`` (cli.forward.environment: HOME, XDG_CACHE_HOME, MEM_CACHE_DIR, and AWS_* for an index on an
object store) must be the server's own, and ``build`` (cli.forward.code_version) its code's, else
the client stops it (a server left running by an upgrade); ``{"ping": true}`` → ``{"pid",
"requests", "workspace", "peak", "build"}`` (``peak``: the most requests at work at once, pings
and callers queued for a worker aside; one the server sends back to run in-process counts while it
reads it). A request
runs through ``mem_retrieval.cli.main.run`` for the caller (``Caller``: its folder and
``$MEM_WORKSPACE``, without changing this process's), so its answer is the in-process output byte
for byte.

Requests are answered at once, each in a worker thread (``WORKERS``): the main thread only accepts
connections. A request's output goes to its own buffers (what a library prints meanwhile too:
cli.warm.PerThreadStream). Its ``Memory`` comes from a cache kept per index version
(cli.warm.WarmMemories): a reindex done meanwhile rewrites ``.mem/meta.json``, and the next
request opens the new versions. A client that leaves before its answer costs nothing but the work."""

from __future__ import annotations

import io
import json
import os
import queue
import signal
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from mem_retrieval.records.errors import Refused
from mem_retrieval.cli.forward import (INDEX_DIR, MAX_MESSAGE, SOCKET_NAME, address, answers, foreign,
                                      code_version, read_command)
from mem_retrieval.cli.warm import WarmMemories, per_thread_output

POLL_SECONDS = 1.0     # how often an idle server checks its idle time and that its socket is still its own
READ_TIMEOUT = 5.0     # seconds a client has to send its request
BACKLOG = 64
WORKERS = 8            # requests answered at once


class Stop(BaseException):
    """SIGTERM or SIGINT: leave the serve loop and remove the socket."""


def socket_path(root: Path) -> Path:
    return root / INDEX_DIR / SOCKET_NAME


class Server:
    """A listening socket in ``root/.mem`` and the loop answering it."""

    def __init__(self, root: Path, listener: socket.socket, idle_timeout: float | None):
        self.root = root
        self.path = socket_path(root)
        self.listener = listener
        self.idle_timeout = idle_timeout
        self.requests = 0
        self.build = code_version()          # the code it runs: clients of other code are not answered
        self.memories = WarmMemories()
        self._lock = threading.Lock()
        self._working = 0                    # requests (not pings) at work: the idle clock waits for them
        self.peak = 0                        # the most requests at work at once (pings aside)
        self._last = time.monotonic()        # when the last one was answered
        self._jobs: queue.Queue[socket.socket | None] = queue.Queue()
        self._streams = None
        stat = self.path.stat()
        self._identity = (stat.st_dev, stat.st_ino)

    @classmethod
    def bind(cls, root: Path, idle_timeout: float | None = None) -> "Server":
        """Listen on ``root/.mem/serve.sock``; a stale socket is replaced, a live one refused."""
        path = socket_path(root)
        try:
            path.parent.mkdir(exist_ok=True)
            if path.exists() or path.is_symlink():
                if answers(str(path)):
                    raise Refused(foreign(str(path))
                                  or f"a server already answers on {path} (`mem serve --stop` stops it)")
                path.unlink(missing_ok=True)  # stale: its server died without cleaning up
        except OSError as error:  # .mem a file, the socket's name a folder
            raise Refused(f"cannot listen on {path}: {error.strerror or error}") from None
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        mask = os.umask(0o177)  # only this user may connect: the socket runs commands as us
        try:
            with address(str(path)) as reached:  # a long path: through its folder's descriptor
                listener.bind(reached)
        except OSError as error:
            listener.close()
            raise Refused(f"cannot listen on {path}: {error.strerror or error}") from None
        finally:
            os.umask(mask)
        listener.listen(BACKLOG)
        return cls(root, listener, idle_timeout)

    def warm(self, model: bool = True) -> None:
        """Import what a search needs (a first search does it) and, with ``model``, load and run the
        embedding model the index is searched with, so the first real request is already warm;
        then start reading the steps table into memory (retrieval/resident.py: requests are
        answered from the index until it is there)."""
        from mem_retrieval.cli.main import Caller, run
        from mem_retrieval.cli.warm import warm_model
        from mem_retrieval.records.workspace import Workspace

        sink = io.StringIO()
        with redirect_stdout(sink), redirect_stderr(sink), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                run(["--workspace", str(self.root), "archive-search", "warm up", "--strategy", "bm25"],
                    out=sink, err=sink, caller=Caller(self.root, None, self.memories))
                memory = self.memories.get(Workspace(self.root))
                if model:
                    warm_model(memory)
                memory.retriever.searcher.warm_soon()  # the steps table into memory, meanwhile
            except Exception:  # no index yet, a bad config or model: each request will say so itself
                pass

    def serve(self, model: bool = True, on_ready: Callable[[], None] | None = None) -> str:
        """Warm up, call ``on_ready``, then answer requests until SIGTERM/SIGINT, the idle timeout,
        or the socket being removed or replaced; returns why it stopped. The socket is removed on
        the way out, whatever the way; requests still running are abandoned (their clients, left
        without an answer, run the command in-process). A second signal as it stops raises ``Stop``
        (the command says it as any command's stop)."""
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        woken = None
        try:  # a signal as the handlers are set is a stop too (it was a traceback, the socket left)
            # no wakeup pipe while its own handlers are set (the loop polls): `mem`'s SIGTERM watcher
            # (cli/main.py) read a signal ``_stop`` had taken as the command's, once the handler was
            # put back, and at a second one exited at once (an agent's two SIGTERMs, 1 ms apart),
            # before the socket was removed
            woken = signal.set_wakeup_fd(-1)
            for sig in handlers:
                signal.signal(sig, _stop)
            self.warm(model)
            with per_thread_output() as self._streams:
                self._last = time.monotonic()  # the idle clock starts when the server is ready
                self._start_workers()
                if on_ready is not None:
                    on_ready()
                return self._loop()
        except Stop as stop:
            return str(stop)
        finally:
            try:  # the handlers first: a second signal meets the ones before, not ``_stop``
                for sig, handler in handlers.items():
                    if handler is not None:  # (one set outside Python cannot be set again)
                        signal.signal(sig, handler)
                if woken is not None:  # then the pipe: a signal from now on is theirs
                    signal.set_wakeup_fd(woken, warn_on_full_buffer=False)
                for _ in range(WORKERS):
                    self._jobs.put(None)
            finally:
                self.close()

    def _start_workers(self) -> None:
        for n in range(WORKERS):
            threading.Thread(target=self._work, name=f"mem-serve-{n}", daemon=True).start()

    def _work(self) -> None:
        while (conn := self._jobs.get()) is not None:
            try:
                with conn:
                    self.handle(conn)
            except Exception as error:  # a bug: say so, and keep serving
                sys.stderr.write(f"mem serve: {type(error).__name__}: {error}\n")

    def _loop(self) -> str:
        self.listener.settimeout(POLL_SECONDS)
        while True:
            with self._lock:  # idle: no request at work, none finished for idle_timeout (pings aside)
                idle = self._working == 0 and time.monotonic() - self._last
            if self.idle_timeout is not None and idle and idle >= self.idle_timeout:
                return f"idle for {self.idle_timeout:g} s"
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                if not self._owns_socket():
                    return f"{self.path} was removed or replaced"
                continue
            self._jobs.put(conn)

    def handle(self, conn: socket.socket) -> None:
        """Read one request, answer it; a bad request gets ``{"error": …}``, never a crash. A status
        ping does not count as work: it neither keeps an idle server alive nor delays its stop; nor
        does a request sent back to run in-process (a caller of another environment, a bug)."""
        working, answer = False, {}
        try:
            request = _receive(conn, time.monotonic() + READ_TIMEOUT)
            if request.get("ping") is not True:
                working = True
                with self._lock:
                    self._working += 1
                    self.peak = max(self.peak, self._working)  # a ping, or a caller queued, is none
            answer = self.answer(request)
        except (OSError, ValueError) as error:
            answer = {"error": f"bad request: {error}"}
        finally:
            if working:
                with self._lock:
                    self._working -= 1
                    if "code" in answer:  # answered: a call sent back to run in-process keeps it not alive
                        self._last = time.monotonic()
        answer["build"] = self.build  # every answer, pings too: the client retires a server of other code
        try:
            conn.sendall(json.dumps(answer, ensure_ascii=False).encode("utf-8"))
        except OSError:
            pass  # the client left; it runs the command itself

    def answer(self, request: dict) -> dict:
        """The response to one decoded request."""
        if request.get("ping") is True:
            return {"pid": os.getpid(), "requests": self.requests, "workspace": str(self.root),
                    "peak": self.peak}
        if request.get("build") != self.build:  # an upgrade since it started: the client retires it
            return {"error": "the server runs other code than the client: it runs in-process"}
        argv, cwd, env = request.get("argv"), request.get("cwd"), request.get("env") or {}
        if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
            return {"error": "bad request: argv must be a list of strings"}
        if not isinstance(cwd, str) or not isinstance(env, dict) \
                or not isinstance(env.get("MEM_WORKSPACE"), (str, type(None))):
            return {"error": "bad request: cwd must be a string, env.MEM_WORKSPACE a string or null"}
        if read_command(argv) is None:
            return {"error": "not a read command: it runs in-process"}
        found = env.get("vars")
        if not isinstance(found, dict) or not all(isinstance(v, str) for v in found.values()):
            return {"error": "bad request: env.vars must map names to strings"}
        if not os.path.isdir(cwd):
            return {"error": f"no folder {cwd}"}
        from mem_retrieval.cli.main import Caller, InProcessOnly, run

        out, err = io.StringIO(), io.StringIO()
        caller = Caller(Path(cwd), env.get("MEM_WORKSPACE"), self.memories, found)
        try:
            with self._output(out, err):
                code = run(argv, out=out, err=err, caller=caller)
        except InProcessOnly as why:
            return {"error": str(why)}
        except (Exception, SystemExit) as error:  # a bug: the client reruns it in-process and shows it
            sys.stderr.write(f"mem serve: {' '.join(argv)}: {type(error).__name__}: {error}\n")
            return {"error": f"{type(error).__name__}: {error}"}
        with self._lock:
            self.requests += 1
        return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}

    def _output(self, out, err):
        """This thread's sys.stdout and sys.stderr go to the request's buffers while it runs."""
        from contextlib import ExitStack

        stack = ExitStack()
        if self._streams is not None:
            stack.enter_context(self._streams[0].to(out))
            stack.enter_context(self._streams[1].to(err))
        return stack

    def _owns_socket(self) -> bool:
        try:
            stat = self.path.stat()
        except OSError:
            return False
        return (stat.st_dev, stat.st_ino) == self._identity

    def close(self) -> None:
        """Stop listening and remove the socket (unless another server has replaced it)."""
        if self._owns_socket():
            self.path.unlink(missing_ok=True)
        self.listener.close()


def _stop(signum: int, frame) -> None:
    raise Stop(signal.Signals(signum).name)




def _receive(conn: socket.socket, deadline: float) -> dict:
    """The request, whole by ``deadline`` (a clock per ``recv`` let a client sending a byte every
    few seconds hold a worker for good: eight such held every worker, and each caller waited 30 s)."""
    chunks, size = [], 0
    while True:
        try:
            conn.settimeout(max(deadline - time.monotonic(), 1e-6))
            chunk = conn.recv(1 << 16)
        except TimeoutError:
            raise TimeoutError(f"not sent whole within {READ_TIMEOUT:g} s") from None
        if not chunk:
            break
        size += len(chunk)
        if size > MAX_MESSAGE:
            raise ValueError(f"request over {MAX_MESSAGE} bytes")
        chunks.append(chunk)
    try:
        request = json.loads(b"".join(chunks))
    except RecursionError:  # `[[[[…`: json's decoder recurses per level
        raise ValueError("a request nested too deeply") from None
    if not isinstance(request, dict):
        raise ValueError("a request is a JSON object")
    return request
