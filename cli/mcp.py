"""`mem mcp`: the memory functions of one workspace as Model Context Protocol tools, over stdio (or
streamable HTTP on loopback), with the official SDK's low-level server (``mcp`` 2.x).

The tools are ``mem_retrieval.functions``: their names, descriptions and input schemas come from
the same definitions as the command line's parsers, and their output schemas are the shipped
``--json`` schemas. A call runs the same code as the command (``cli.calls``), so its structured
content is the command's ``--json`` output and its text the command's text. Arguments are checked
here for their JSON types (and unknown or missing ones); their values by the API, so a bad value
gets the API's one-line message (naming the argument as the tool has it). Every failure is a tool
error of that one line (several lines when a file holds several problems, or when record lists
the violations that refused it), never a traceback; an unexpected exception is logged to stderr
and reported as one line.

Each call runs in a worker thread (the event loop keeps answering other calls meanwhile) on a
``Memory`` cached per index version (cli.warm.WarmMemories): the model is loaded once, and a
reindex is seen by the next call."""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from mem_retrieval.cli.calls import Answer, call
from mem_retrieval.cli.warm import WarmMemories
from mem_retrieval.functions import BY_NAME, FUNCTIONS, Function, output_schema
from mem_retrieval.records.errors import BadInput, MemError, Refused, one_line, type_name
from mem_retrieval.records.validate import surrogate_problem

SERVER_NAME = "mem"
SHUTDOWN_WAIT_S = 60  # the longest wait, each, for the model's load and the calls running at exit
ANSWER_GRACE_S = 0.5  # after a signal, for the event loop to write the answers of the calls just ended
INSTRUCTIONS = ("Memory of a maths research workspace (MemGPT tiers): W = RUN/memory/core.md "
                "(core_set), Recall = the event log (recall_search), the Archive = steps and the "
                "library (archive_search, archive_get, archive_insert); check verifies M1–M4; record "
                "is the Record step. Searches return a page of hits (search.page_size, 5 by default).")


class Tools:
    """The tools of one workspace: their definitions, and calls answered as ``Answer``s."""

    def __init__(self, workspace, config_file: Path | None = None):
        self.workspace = workspace
        self.config_file = config_file
        self.memories = WarmMemories()
        self.stopping = False  # after SIGINT/SIGTERM: the calls running end, no other starts
        self._running = 0
        self._idle = threading.Condition()

    @staticmethod
    def definitions() -> list[dict[str, Any]]:
        """Each tool as MCP lists it: name, description, input and output schema."""
        return [{"name": f.name, "description": f.tool_description(), "input_schema": f.input_schema(),
                 "output_schema": output_schema(f.schema_name)} for f in FUNCTIONS]

    def run(self, name: str, arguments: Any) -> Answer:
        """Call tool ``name``; MemError (the one-line message) when refused or given bad input."""
        function = BY_NAME.get(name)
        if function is None:
            raise BadInput(f"unknown tool {name!r} (tools: {', '.join(BY_NAME)})")
        given = checked_arguments(function, arguments)
        memories = self.memories.fresh if function.writes else self.memories.get
        with self._idle:
            if self.stopping:
                raise Refused("the server is stopping (SIGINT or SIGTERM): call again once it is restarted")
            self._running += 1
        try:
            return call(memories(self.workspace, self.config_file), name, given)
        finally:
            with self._idle:
                self._running -= 1
                self._idle.notify_all()

    def begin_stop(self) -> bool:
        """Refuse every call from now on (the running ones end); whether this was asked before."""
        with self._idle:
            again, self.stopping = self.stopping, True
        return again

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no call is running (at most ``timeout`` seconds); whether none is."""
        with self._idle:
            return self._idle.wait_for(lambda: self._running == 0, timeout=timeout)

    def warm(self) -> None:
        """Open the index and load the embedding model it is searched with (a first search would)."""
        from mem_retrieval.cli.warm import warm_model

        try:
            warm_model(self.memories.get(self.workspace, self.config_file))
        except Exception:  # no index yet, a bad config or model: each call will say so itself
            pass


def checked_arguments(function: Function, arguments: Any) -> dict[str, Any]:
    """``arguments`` with their JSON types checked: an object naming only the tool's parameters,
    each of its type (null = not given), the required ones present."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise BadInput(f"the arguments must be an object, not {type_name(arguments)}")
    names = [p.name for p in function.params]
    unknown = sorted(set(arguments) - set(names))
    if unknown:
        raise BadInput(f"unknown argument {unknown[0]!r} ({function.name} takes {', '.join(names)})")
    given = {}
    for param in function.params:
        value = arguments.get(param.name)
        whole = isinstance(value, float) and value.is_integer() and abs(value) <= 2 ** 53
        if param.type == "integer" and whole:
            value = int(value)  # 2.0: JSON has one number type, and some clients write it so
        given[param.name] = value
    function.check_types(given)
    return {name: value for name, value in given.items() if value is not None}


def error_text(error: MemError) -> str:
    """The error's line (and further problems, one a line), the argument named as the tool has it."""
    lines = [str(error), *[str(p) for p in getattr(error, "problems", ())[1:]]]
    return "\n".join(one_line(line) for line in lines)


def build_server(tools: Tools):
    """The SDK's low-level server over ``tools``."""
    import anyio
    from mcp.server import Server
    from mcp.types import CallToolResult, ListToolsResult, TextContent, Tool

    listed = [Tool(**definition) for definition in tools.definitions()]

    def fail(text: str) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)

    def answer(name: str, arguments: Any) -> CallToolResult:
        try:
            done = tools.run(name, arguments)
        except MemError as error:
            return fail(error_text(error))
        except Exception as error:  # a bug: logged here, one line to the client
            sys.stderr.write(f"mem mcp: {name}: {traceback.format_exc()}")
            return fail(one_line(f"{name} failed: {type(error).__name__}: {error}"))
        notes = [one_line(f"note: {note}") for note in done.notes]  # printed (the structured ones raw)
        text = "\n".join([done.text, *notes])
        return CallToolResult(content=[TextContent(type="text", text=text)],
                              structured_content=done.data)

    async def list_tools(ctx, params) -> ListToolsResult:
        return ListToolsResult(tools=listed)

    async def call_tool(ctx, params) -> CallToolResult:
        return await anyio.to_thread.run_sync(functools.partial(answer, params.name, params.arguments),
                                              abandon_on_cancel=True)

    return Server(SERVER_NAME, version=_version(), instructions=INSTRUCTIONS, on_list_tools=list_tools,
                  on_call_tool=call_tool)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mem-retrieval")
    except PackageNotFoundError:
        return "0"


def _standard_input():
    """Standard input as the SDK's transport reads it, lines of UTF-8 text, but with bytes that are
    not UTF-8 kept as lone surrogates (the SDK's own reads them as U+FFFD, so a `core_set` of
    Latin-1 text wrote `caf�` into core.md and the log, where the command line refuses the bytes):
    the request is then refused naming its field. Descriptor 0 then reads the null device, as the
    SDK's own claim leaves it: a handler or a child reading standard input takes no byte of the wire."""
    import anyio

    wire = os.dup(0)
    nothing = os.open(os.devnull, os.O_RDONLY)
    os.dup2(nothing, 0)
    os.close(nothing)
    return anyio.wrap_file(open(wire, encoding="utf-8", errors="surrogateescape", closefd=True))


def serve_stdio(tools: Tools, lazy: bool = False) -> None:
    """Answer one client on standard input and output until it closes them."""
    import anyio
    from mcp.server.stdio import stdio_server

    server = build_server(tools)
    stopper = StopOnSignal(tools)
    warming = threading.Thread(target=tools.warm, name="mem-mcp-warm", daemon=True)
    if not lazy:
        warming.start()

    async def main() -> None:
        async with stdio_server(_standard_input()) as (read, write):
            reading = AnsweringUnread(read, write)
            await server.run(reading, reading.answered(write), server.create_initialization_options())

    try:
        anyio.run(main)
    except BaseExceptionGroup as group:  # the client went away with standard output: its answer had
        _, other = group.split((BrokenPipeError, ConnectionResetError))  # no reader, and a 64-line
        if other is not None:  # traceback went to stderr (exit 1), as though the server had failed
            _, unexpected = other.split(OSError)
            if unexpected is not None:
                raise
            _drop_standard_output()
            raise BadInput(_transport_failure(other.exceptions[0])) from None
        _drop_standard_output()
    finally:
        # The client has gone. Let the model load and the calls still running (their threads are
        # abandoned, not stopped) end before the interpreter does: a thread inside the ONNX or
        # torch runtime at finalization aborted the process ("terminate called without an active
        # exception"), and a write is better finished than cut.
        if tools.stopping:
            stopper.join()  # it exits with the signal's status once the answers are written
        if warming.is_alive():
            warming.join(timeout=SHUTDOWN_WAIT_S)
        tools.wait_idle(timeout=SHUTDOWN_WAIT_S)


def _transport_failure(error: BaseException) -> str:
    """The line for a read of standard input or a write of standard output that failed otherwise
    than by the client leaving (a full disk, an I/O error): a 65-line traceback, exit 1, where every
    other command says it in one line (exit 2). The SDK's writer is told apart by its name."""
    from mem_retrieval.cli.forward import unwritten

    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    frames = traceback.extract_tb(error.__traceback__)
    if any(frame.name == "stdout_writer" for frame in frames):
        return unwritten(error)
    return f"cannot read standard input: {error.strerror or error}"


def _drop_standard_output() -> None:
    """Point standard output at /dev/null: nobody reads it any more, and the interpreter's last
    flush would report the broken pipe on stderr."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def unread_reply(problem: Exception):
    """The JSON-RPC error answering a line the SDK's stdio transport could not read (it passes the
    line's exception on, and its session drops it: the client would wait for ever), JSON-RPC 2.0
    §5.1: a line that is no JSON, a parse error (-32700); JSON that Python reads and the SDK's
    parser refuses (a lone ``\\ud800`` escape, or bytes that are not UTF-8), invalid params (-32602)
    naming the field; JSON that
    is no message MCP reads (params not an object, no method, a batch), an invalid request
    (-32600). Each to its request's id, or a null id where none can be read (or it holds no text);
    None where the line was blank, a notification or a response."""
    import json

    from mcp_types import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR

    errors = problem.errors() if callable(getattr(problem, "errors", None)) else []
    line = next((e["input"] for e in errors if e.get("type") in ("json_invalid", "string_unicode")
                 and isinstance(e.get("input"), str)), None)  # string_unicode: bytes not UTF-8 (stdin)
    if line is not None:
        if not line.strip():
            return None  # a blank line: no message, nothing to answer
        try:
            message = json.loads(line)
            where, why = next(_string_problems(message), ("the request", "could not be read"))
            if raw := next((c for c in line if "\udc80" <= c <= "\udcff"), None):  # not an escape
                why = f"holds a byte that is not UTF-8 (0x{ord(raw) - 0xDC00:02x})"
        except ValueError:
            return _error(None, PARSE_ERROR, "parse error: a line that is no JSON")
        except RecursionError:  # deeper than Python reads (the SDK gave up at some 200 levels)
            return _error(None, INVALID_REQUEST, "invalid request: nested too deeply")
        code, text = INVALID_PARAMS, f"{where} {why}"
    else:  # JSON, but no message: the parsed line is the input of the error at its root
        whole = [e["input"] for e in errors if len(e.get("loc", ())) <= 1]  # no object at all
        message = whole[0] if whole else next((e["input"] for e in errors if len(e.get("loc", ())) == 2
                                               and isinstance(e.get("input"), dict)), None)
        request = next((e for e in errors if e.get("loc", ())[:1] == ("JSONRPCRequest",)), None)
        code, text = INVALID_REQUEST, (f"invalid request: {'.'.join(map(str, request['loc'][1:]))}: "
                                       f"{request['msg']}" if request else "invalid request")
    if not isinstance(message, dict):
        return _error(None, INVALID_REQUEST, "invalid request: a batch (MCP reads one message a line)"
                      if isinstance(message, list) else "invalid request: not a JSON object")
    if "method" in message and "id" not in message or "method" not in message and (
            "result" in message or "error" in message):
        return None  # a notification, a response: nothing to answer (a method makes a request)
    request_id = message.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int)) \
            or (isinstance(request_id, str) and surrogate_problem(request_id)):
        request_id = None  # an id that cannot be written back
    return _error(request_id, code, text)


def _error(request_id, code: int, text: str):
    from mcp_types import ErrorData, JSONRPCError

    text = text.encode("utf-8", "backslashreplace").decode("utf-8")  # a reply must be text
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=text))


def _string_problems(value: Any, where: str = ""):
    """(path, problem) for each string in a decoded JSON value, or key, that is no Unicode text."""
    if isinstance(value, str):
        if problem := surrogate_problem(value):
            yield where or "the request", problem
    elif isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            if problem := surrogate_problem(str(key)):
                yield f"a key in {where or 'the request'}", problem
            yield from _string_problems(item, path)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _string_problems(item, f"{where}[{index}]")


class AnsweringUnread:
    """The stdio transport's read stream, less the lines it could not read, each answered on
    ``write`` (``unread_reply``); everything else, ``last_context`` included, is the stream's. Its
    end comes once every request read has been answered (``answered``, the write stream the server
    answers on) or cancelled, at most ``SHUTDOWN_WAIT_S`` later: at the end of standard input the
    SDK's session answered the calls still running "Connection closed", not with their results
    (a client piping its requests in, then closing)."""

    def __init__(self, read, write):
        self._read, self._write = read, write
        self.pending: set = set()  # the ids of the requests read and not yet answered

    def __getattr__(self, name: str):
        return getattr(self._read, name)

    async def receive(self):
        import anyio
        from mcp.shared.message import SessionMessage
        from mcp.types import JSONRPCNotification, JSONRPCRequest

        try:
            while isinstance(item := await self._read.receive(), Exception):
                try:
                    reply = unread_reply(item)
                except Exception:  # an answer is a courtesy: never the end of the server
                    logging.getLogger(__name__).exception("mem mcp: a line that could not be read")
                    continue
                if reply is not None:
                    await self._write.send(SessionMessage(reply))
        except anyio.EndOfStream:
            with anyio.move_on_after(SHUTDOWN_WAIT_S):
                while self.pending:
                    await anyio.sleep(0.02)
            raise
        message = item.message
        if isinstance(message, JSONRPCRequest):
            self.pending.add(message.id)
        elif isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
            self.pending.discard((message.params or {}).get("requestId"))
        return item

    def answered(self, write) -> "_Answering":
        """``write`` as the server answers on it: each answer sent clears its request's id."""
        return _Answering(write, self.pending)

    def __aiter__(self) -> "AnsweringUnread":
        return self

    async def __anext__(self):
        import anyio

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._read.aclose()

    async def __aenter__(self) -> "AnsweringUnread":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


class _Answering:
    """A write stream whose answers (results and errors) clear their ids from ``pending``."""

    def __init__(self, write, pending: set):
        self._write, self._pending = write, pending

    def __getattr__(self, name: str):
        return getattr(self._write, name)

    async def send(self, item) -> None:
        from mcp.types import JSONRPCError, JSONRPCResponse

        try:
            await self._write.send(item)
        finally:
            if isinstance(item.message, (JSONRPCResponse, JSONRPCError)):
                self._pending.discard(item.message.id)

    async def __aenter__(self) -> "_Answering":
        return self

    async def __aexit__(self, *exc) -> None:
        await self._write.aclose()


class StopOnSignal:
    """SIGINT (Ctrl-C) or SIGTERM stops the server once the calls running have ended and their
    answers are written (exit status 130 or 143); a call arriving meanwhile is refused, and a
    second signal exits at once.

    The signal is read by a thread of its own, from the pipe the interpreter writes each signal's
    number to (``signal.set_wakeup_fd``), not by the Python handler: that handler runs only when
    the main thread runs Python, and a signal the kernel gave another thread (a thread starting, or
    the model's load, may take it: a CI run saw it) never woke the event loop, asleep until the
    client's next line: the server ran on for ever. The handler only marks the calls refused (what
    a line read after the signal meets). The event loop's own handler only cancelled its task, which
    then waited for a read of standard input that no cancel ends. Waiting in a handler held the
    event loop, so the answers it was waiting for were never written; and a handler that started a
    thread, come while the main thread was starting one (the event loop starts a worker to write
    each answer), waited for the lock the main thread held, for ever: so both threads start here.
    The exit skips interpreter finalization, so no thread still loading the model can abort it.
    Once a signal came, the caller joins the stopping thread rather than end otherwise (a client
    closing standard input right after the signal made the exit status 0; a signal during the HTTP
    server's warm-up still printed it ready)."""

    def __init__(self, tools: Tools):
        import queue
        import signal

        self.tools = tools
        self._signalled, self._woken = os.pipe()
        os.set_blocking(self._woken, False)
        self._previous = signal.set_wakeup_fd(self._woken, warn_on_full_buffer=False)
        self._first: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._stopping = threading.Thread(target=self._finish, name="mem-mcp-stop", daemon=True)
        self._stopping.start()
        threading.Thread(target=self._read, name="mem-mcp-signals", daemon=True).start()
        self._handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
        for number in self._handlers:
            signal.signal(number, lambda signum, frame: tools.begin_stop())

    def _read(self) -> None:
        import signal

        first = None
        while number := os.read(self._signalled, 1):  # none once given back
            if number[0] not in (signal.SIGINT, signal.SIGTERM):
                continue  # another signal with a Python handler (none of mem's)
            if first is not None:
                os._exit(128 + number[0])
            first = number[0]
            self.tools.begin_stop()
            self._first.put(first)
        os.close(self._signalled)
        self._first.put(None)  # given back: after any signal read before, which the stop acts on

    def _finish(self) -> None:
        import time

        signum = self._first.get()
        if signum is None:  # given back
            return
        self.tools.wait_idle(timeout=SHUTDOWN_WAIT_S)
        time.sleep(ANSWER_GRACE_S)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, RuntimeError, ValueError):  # closed, or being written by a call
                pass
        os._exit(128 + signum)

    def join(self) -> None:
        """Wait for the exit a signal began (the process ends in it)."""
        self._stopping.join()

    def give_back(self) -> None:
        """Put back the handlers and the interpreter's pipe there were before, and end both threads:
        the server did not start (a port in use), and a program that called it in-process was then
        ended at its next Ctrl-C, its own handler gone. The handlers first, the pipe last: see
        ``release``."""
        import signal

        for number, handler in self._handlers.items():
            if handler is not None:  # (one set outside Python cannot be set again)
                signal.signal(number, handler)
        signal.set_wakeup_fd(self._previous, warn_on_full_buffer=False)
        os.close(self._woken)  # the reading thread reads what was written, then ends the stopping one

    def release(self) -> None:
        """Give the signals back before another server takes them over (uvicorn, which sets its own
        handlers and, once it has stopped, raises the signal again): the interpreter's pipe is the
        one before, and a signal exits at once (no call is running outside that server).

        The handlers first, the pipe last: a signal that came once the pipe was given back, while
        this handler was still set, only marked the calls refused, and the thread that exits, which
        that pipe wakes, never heard of it: the server then ran on for ever, refusing every call (a
        CI run saw it, the signal sent as the server said it was ready). In this order, a signal
        before the pipe is given back wakes that thread, and one after meets a handler that exits."""
        import signal

        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, lambda signum, frame: os._exit(128 + signum))
        signal.set_wakeup_fd(self._previous, warn_on_full_buffer=False)


TOKEN_ENV = "MEM_MCP_TOKEN"  # the bearer token `mem mcp --http` asks of clients (default: a new one)


def _token() -> str:
    """``$MEM_MCP_TOKEN`` (its ends stripped), else a new random token. One a header cannot carry
    (a line feed, a character past ASCII) was taken, and then no client could be let in."""
    import secrets

    token = os.environ.get(TOKEN_ENV, "").strip()
    unsendable = next((c for c in token if not " " <= c <= "~"), None)
    if unsendable is not None:
        raise BadInput(f"{TOKEN_ENV} holds {unsendable!r}, which an HTTP header cannot carry: "
                       "use printable ASCII characters")
    return token or secrets.token_urlsafe(24)


def guarded(app, token: str):
    """``app`` (ASGI) answering only requests that carry ``Authorization: Bearer TOKEN``; others get
    401. Loopback is every local user's: without it any of them read and wrote this workspace's
    memory (`core_set`, `archive_insert`, `record`) as the user who started the server."""
    import hmac

    expected = token.encode()

    async def answer(scope, receive, send):
        if scope["type"] == "http":
            scheme, _, given = dict(scope.get("headers") or []).get(b"authorization", b"").partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), expected):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body",
                            "body": b"mem mcp: send Authorization: Bearer <the token it printed at start>\n"})
                return
            await _unless_its_session_closed(app, scope, receive, send)
            return
        await app(scope, receive, send)

    return answer


async def _unless_its_session_closed(app, scope, receive, send) -> None:
    """``app`` answering an HTTP request, where one reaching a session its client closed meanwhile
    (a client leaving mid-call among others: anyio's ClosedResourceError, which the SDK logs,
    ``_not_a_client_leaving``, then raises again from its handler, after its answer was sent) ends
    quietly: uvicorn logged it as "Exception in ASGI application", two tracebacks a client. Whatever
    is sent after the response ended is dropped (the SDK's 500 for it)."""
    import anyio

    state = {"started": False, "ended": False}

    async def sending(message) -> None:
        if state["ended"]:
            return
        state["started"] = state["started"] or message["type"] == "http.response.start"
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            state["ended"] = True
        await send(message)

    try:
        await app(scope, receive, sending)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        if not state["started"]:  # nothing said yet: the session is gone
            await send({"type": "http.response.start", "status": 404,
                        "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"mem mcp: the session was closed\n"})


def serve_http(tools: Tools, port: int, on_ready, lazy: bool = False) -> int:
    """Answer clients over streamable HTTP at ``http://127.0.0.1:PORT/mcp`` (loopback only; port 0
    picks a free one) until SIGTERM/SIGINT; the exit status, 128 + the signal's number (as over
    stdio: uvicorn's own shutdown returned, and the process exited 0). Each request carries the
    bearer token (``$MEM_MCP_TOKEN``, else a new random one: ``guarded``). ``on_ready(url, token)``
    is called once it listens."""
    import socket

    import uvicorn
    from sse_starlette.sse import AppStatus

    # sse-starlette (the SDK's event streams) ended every stream at the signal, the stream of a call
    # still running too, whose answer was then lost; ``shutdown`` below ends them once it is written
    AppStatus.disable_automatic_graceful_drain()
    token = _token()
    server = build_server(tools)
    stopper = StopOnSignal(tools)  # until uvicorn, serving, takes them over
    _more_open_files()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:  # a port in use is said at once, not after the model's load; listening at once too, as
        listener.bind(("127.0.0.1", port))  # two binds on one port both succeed (SO_REUSEADDR):
        listener.listen(128)  # the second to listen lost, with a traceback, after its warm-up
    except OSError as error:
        listener.close()
        stopper.give_back()
        raise Refused(f"cannot listen on 127.0.0.1:{port}: {error.strerror or error}") from None
    if not lazy:
        tools.warm()
    if tools.stopping:  # a signal during the warm-up: never said ready
        stopper.join()
    # json_response: each answer is one JSON body, not an event stream, whose events the SDK's
    # client reads up to 1 MB (a page holding a long return whole failed there, read over stdio)
    app = guarded(server.streamable_http_app(host="127.0.0.1", json_response=True), token)
    on_ready(f"http://127.0.0.1:{listener.getsockname()[1]}/mcp", token)
    logging.getLogger("mcp.server.streamable_http").addFilter(_not_a_client_leaving)
    logging.getLogger("asyncio").addFilter(AcceptErrorsSaidOnce())
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    signals: list[int] = []

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:  # uvicorn's handler while it serves
            if signals:  # a second signal exits at once, as over stdio (uvicorn's force_exit, for a
                os._exit(128 + sig)  # second SIGINT only, waited on: a second SIGTERM, up to 60 s)
            signals.append(sig)
            super().handle_exit(sig, frame)

        async def shutdown(self, sockets=None) -> None:
            """The calls still running end and their answers are written (at most
            ``SHUTDOWN_WAIT_S``; a call arriving meanwhile is refused) before uvicorn's own
            shutdown, whose application shutdown cancels the SDK's sessions: a call in flight
            at the signal lost its answer (the client saw its stream end without one)."""
            import asyncio
            import time

            tools.begin_stop()
            deadline = time.monotonic() + SHUTDOWN_WAIT_S
            while not self.force_exit and time.monotonic() < deadline \
                    and not await asyncio.to_thread(tools.wait_idle, 0.1):
                pass
            if not self.force_exit:
                await asyncio.sleep(ANSWER_GRACE_S)
            AppStatus.should_exit = True  # now the event streams still open end (a client's GET)
            await super().shutdown(sockets)

    stopper.release()
    Server(config).run(sockets=[listener])
    return 128 + signals[0] if signals else 0


def _more_open_files(wanted: int = 1 << 20) -> None:
    """The soft limit on open files raised to the hard one (at most ``wanted``): each
    connection holds a descriptor from its first byte, token or not, and at the usual soft limit
    of 1,024 a local user without the token held them all with connections sending one byte
    (uvicorn reads a request for as long as it takes), locking out the token's holder while
    asyncio logged each refused accept (4 MB/s). Where the limit cannot be raised, it stays."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ImportError, ValueError, OSError):  # no such limit here, or the system refused it
        pass


class AcceptErrorsSaidOnce:
    """A logging filter letting asyncio's "socket.accept() out of system resource" (every
    descriptor held: connections that never finish a request, token or not) through once every
    ``every`` seconds, with how many were passed over: it logged each refused accept with its
    traceback, 4 MB/s, until the connections closed (26 MB in 5 s here)."""

    def __init__(self, every: float = 60.0, clock=None):
        import time

        self.every, self.clock = every, clock or time.monotonic
        self.last: float | None = None
        self.passed_over = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("socket.accept() out of system resource"):
            return True
        now = self.clock()
        if self.last is not None and now - self.last < self.every:
            self.passed_over += 1
            return False
        if self.passed_over:
            first, newline, rest = str(record.msg).partition("\n")
            count = f"({self.passed_over} more in the last {now - self.last:.0f} s)"
            record.msg = f"{first} {count}{newline}{rest}"
        self.last, self.passed_over = now, 0
        return True


def _not_a_client_leaving(record: logging.LogRecord) -> bool:
    """False for the SDK's report of a client that went away while its request was read (starlette's
    ``ClientDisconnect``), or whose session closed before its call's answer was handed on (anyio's
    ``ClosedResourceError``), each logged with its traceback as an error: nothing failed on this
    side, and the other clients are served on."""
    import anyio
    from starlette.requests import ClientDisconnect

    leaving = (ClientDisconnect, anyio.ClosedResourceError, anyio.BrokenResourceError)
    return not (record.exc_info and isinstance(record.exc_info[1], leaving))
