"""`mem mcp`: the memory functions as MCP tools, driven by the official SDK's own clients against
the real server: in memory (``mcp.Client(server)``, fast) for each tool's answers and errors, and,
in the slow part, `mem mcp` as a subprocess over stdio (``stdio_client``) and over streamable HTTP,
with 8 clients × 50 mixed calls at once and clients leaving mid-call.

A tool answers as its command does: its structured content is the command's ``--json`` output, its
text the command's text (a 'more' line names ``page=N`` rather than ``--page N``), its error the
API's one line (the argument named as the tool has it, ``kind`` where the command says ``--kind``)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import select
import threading
import time
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mem_retrieval.cli.main import run as run_cli
from mem_retrieval.functions import BY_NAME, FUNCTIONS, output_schema
from mem_retrieval.memory import Memory

mcp = pytest.importorskip("mcp")
anyio = pytest.importorskip("anyio")
jsonschema = pytest.importorskip("jsonschema")

from mcp import Client, ClientSession, StdioServerParameters, stdio_client  # noqa: E402

from mem_retrieval.cli.mcp import Tools, build_server  # noqa: E402
from mem_retrieval.records.errors import BadInput, Refused  # noqa: E402
from mem_retrieval.records.workspace import Workspace  # noqa: E402
from conftest import build_workspace  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

# (tool, arguments, the same call on the command line) on the example workspace
READS = [
    ("archive_search", {"query": "GL2m/Sp2m generation", "setting": "F_q((t))"},
     ["archive-search", "GL2m/Sp2m generation", "--setting", "F_q((t))"]),
    ("archive_search", {"query": "Satake transform generation", "page": 2, "strategy": "bm25"},
     ["archive-search", "Satake transform generation", "--page", "2", "--strategy", "bm25"]),
    ("archive_search", {"query": "E6/F4 at function level", "library": True, "setting": "F_q((t))"},
     ["archive-search", "E6/F4 at function level", "--library", "--setting", "F_q((t))"]),
    ("archive_search", {"query": "A5-7 A2-4"}, ["archive-search", "A5-7 A2-4"]),
    ("archive_search", {"query": "restriction map", "kind": "lemma", "status": "proved", "run": "satake-two-levels"},
     ["archive-search", "restriction map", "--kind", "lemma", "--status", "proved", "--run", "satake-two-levels"]),
    ("archive_search", {"query": "zorbification"}, ["archive-search", "zorbification"]),
    ("archive_get", {"id": "satake-two-levels/A5-7"}, ["archive-get", "satake-two-levels/A5-7"]),
    ("archive_get", {"id": "A3-2", "run": "iwahori-two-levels"}, ["archive-get", "A3-2", "--run", "iwahori-two-levels"]),
    ("archive_get", {"id": "satake-two-levels/d2"}, ["archive-get", "satake-two-levels/d2"]),
    ("recall_search", {"query": "audit of the pair model"}, ["recall-search", "audit of the pair model"]),
    ("recall_search", {"id": "A5-8", "run": "satake-two-levels", "page": 2},
     ["recall-search", "--id", "A5-8", "--run", "satake-two-levels", "--page", "2"]),
    ("recall_search", {"query": "registry", "run": "satake-two-levels", "until": "R-1"},
     ["recall-search", "registry", "--run", "satake-two-levels", "--until", "R-1"]),
    ("check", {}, ["check"]),
    ("check", {"runs": ["satake-two-levels"]}, ["check", "satake-two-levels"]),
    ("record", {"run": "iwahori-two-levels", "dry_run": True}, ["record", "iwahori-two-levels", "--dry-run"]),
]

# bad values: the API's message, as the command line shows it but with the argument's own name
REFUSED = [
    ("archive_search", {"query": "GL2m", "kind": "theorem"}, ["archive-search", "GL2m", "--kind", "theorem"]),
    ("archive_search", {"query": "GL2m", "page": 0}, ["archive-search", "GL2m", "--page", "0"]),
    ("archive_search", {"query": "GL2m", "page": 99}, ["archive-search", "GL2m", "--page", "99"]),
    ("archive_search", {"query": "   "}, ["archive-search", "   "]),
    ("archive_search", {"query": "GL2m", "strategy": "magic"}, ["archive-search", "GL2m", "--strategy", "magic"]),
    ("archive_get", {"id": "Z9-9"}, ["archive-get", "Z9-9"]),
    ("archive_get", {"id": "a b"}, ["archive-get", "a b"]),
    ("recall_search", {"query": "x", "id": "A5-8"}, ["recall-search", "x", "--id", "A5-8"]),
    ("recall_search", {"query": "audit", "until": "R-1"}, ["recall-search", "audit", "--until", "R-1"]),
    ("archive_insert", {"id": "satake-two-levels/A5-10"}, ["archive-insert", "satake-two-levels/A5-10"]),
    ("core_set", {"run": "satake-two-levels", "field": "colour", "text": "x"},
     ["core-set", "satake-two-levels", "colour", "x"]),
    ("record", {"run": "no-such-run"}, ["record", "no-such-run"]),
]

# bad JSON types, unknown or missing arguments: checked before the API, one line each
BAD_ARGUMENTS = [
    ("archive_search", {"query": 3}, "query must be a string, not a number"),
    ("archive_search", {}, "query is missing"),
    ("archive_search", {"query": "x", "page": "2"}, "page must be a whole number, not a string"),
    ("archive_search", {"query": "x", "page": True}, "page must be a whole number, not a boolean"),
    ("archive_search", {"query": "x", "page": 1.5}, "page must be a whole number, not 1.5"),
    ("archive_search", {"query": "x", "page": 1e300}, "page must be a whole number, not 1e+300"),
    ("archive_search", {"query": "x", "any_setting": "yes"}, "any_setting must be true or false, not a string"),
    ("archive_search", {"query": "x", "bogus": 1},
     "unknown argument 'bogus' (archive_search takes query, setting, any_setting, run, kind, status, "
     "library, context_run, until, page, list_id, strategy)"),
    ("check", {"runs": "satake-two-levels"}, "runs must be a list of strings, not a string"),
    ("check", {"runs": [1]}, "runs must be a list of strings, not a list holding a number"),
    ("archive_get", {"id": None}, "id is missing"),
    ("no_such_tool", {}, "unknown tool 'no_such_tool' (tools: archive_search, archive_get, recall_search, "
                         "core_set, archive_insert, check, record)"),
]


@pytest.fixture
def anyio_backend():
    return "asyncio"


def cli(root: Path, argv: list[str], json_mode: bool) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_cli(["--workspace", str(root), *(["--json"] if json_mode else []), *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def text_of(result) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


def as_tool_text(cli_text: str) -> str:
    """The command's text as a tool shows it: 'more: --page 2 --list-id X' reads 'more: page=2
    list_id=X'; a long brief is 'whole as body in the structured content' (a tool has no --json)."""
    text = re.sub(r"^more: --page (\d+) --list-id ([0-9a-f]+)", r"more: page=\1 list_id=\2",
                  cli_text.rstrip("\n"), flags=re.M)
    return text.replace("whole as body in the --json output)", "whole as body in the structured content)")


def as_tool_message(cli_line: str) -> str:
    """The command's error line as a tool says it: no 'mem: ', arguments by their names."""
    line = cli_line.removeprefix("mem: ")
    for function in FUNCTIONS:
        for param in function.params:
            if line.startswith(param.flag + " "):
                return param.name + line[len(param.flag):]
    return line


# --------------------------------------------------------------------------------- in memory (fast)

def test_the_tools_are_the_functions_with_their_schemas():
    listed = {d["name"]: d for d in Tools.definitions()}
    assert list(listed) == [f.name for f in FUNCTIONS] == list(BY_NAME)
    search = listed["archive_search"]["input_schema"]
    assert search["required"] == ["query"] and search["additionalProperties"] is False
    assert search["properties"]["kind"] == {"type": "string", "description": "only steps of this kind",
                                            "enum": ["lemma", "dead_end", "error"]}
    assert search["properties"]["page"]["minimum"] == 1 and search["properties"]["page"]["default"] == 1
    assert listed["check"]["input_schema"]["properties"]["runs"]["type"] == "array"
    for function in FUNCTIONS:
        assert listed[function.name]["output_schema"] == output_schema(function.command)
        assert listed[function.name]["output_schema"]["type"] == "object"  # MCP requires an object


def test_one_definition_feeds_the_parser_and_the_schema():
    """A parameter's help, choices and default are the parser's and the schema's alike."""
    from mem_retrieval.cli.main import build_parser

    commands = {name: sub for action in build_parser()._actions if hasattr(action, "choices")
                and isinstance(action.choices, dict) for name, sub in action.choices.items()}
    for function in FUNCTIONS:
        parser = commands[function.command]
        actions = {a.dest: a for a in parser._actions}
        schema = function.input_schema()["properties"]
        assert set(schema) <= set(actions), function.name
        for name, prop in schema.items():
            assert actions[name].help.startswith(prop["description"]), (function.name, name)
            assert bool(actions[name].option_strings) != (function.param(name).positional), name


@pytest.mark.anyio
async def test_each_read_tool_answers_as_its_command(example):
    root = example.workspace.root
    async with Client(build_server(Tools(Workspace.open(root)))) as client:
        tools = (await client.list_tools()).tools
        assert [t.name for t in tools] == list(BY_NAME)
        for name, arguments, argv in READS:
            result = await client.call_tool(name, arguments)
            code, out, err = cli(root, argv, json_mode=True)
            assert not result.is_error, (name, arguments, text_of(result))
            assert result.structured_content == json.loads(out), (name, arguments)
            _, text, _ = cli(root, argv, json_mode=False)
            assert text_of(result) == as_tool_text(text), (name, arguments)
            jsonschema.validate(result.structured_content, output_schema(BY_NAME[name].command))
            assert code in (0, 1), (name, arguments)


@pytest.mark.anyio
async def test_a_refused_call_is_a_tool_error_with_the_commands_message(example):
    root = example.workspace.root
    async with Client(build_server(Tools(Workspace.open(root)))) as client:
        for name, arguments, argv in REFUSED:
            result = await client.call_tool(name, arguments)
            code, _, err = cli(root, argv, json_mode=False)
            assert code in (1, 2) and result.is_error and result.structured_content is None
            assert text_of(result) == as_tool_message(err.rstrip("\n")), (name, arguments)
            assert "\n" not in text_of(result) and "Traceback" not in text_of(result)


@pytest.mark.anyio
async def test_a_bad_argument_is_a_tool_error_of_one_line(example):
    async with Client(build_server(Tools(Workspace.open(example.workspace.root)))) as client:
        for name, arguments, message in BAD_ARGUMENTS:
            result = await client.call_tool(name, arguments)
            assert (result.is_error, text_of(result)) == (True, message), (name, arguments)
        whole = await client.call_tool("archive_get", {"id": "satake-two-levels/A5-7"})
        as_float = await client.call_tool("archive_search", {"query": "A5-7", "page": 1.0})
        assert not as_float.is_error and as_float.structured_content["hits"][0]["id"] == whole.structured_content["id"]


@pytest.mark.anyio
async def test_the_write_tools_and_a_reindex_seen_by_the_next_call(workspace):
    root = workspace.root
    Memory.open(root).index(progress=False)
    async with Client(build_server(Tools(Workspace.open(root)))) as client:
        result = await client.call_tool("core_set", {"run": "alpha", "field": "next", "text": "audit a4"})
        assert not result.is_error and result.structured_content["field"] == "next"
        assert "## next        audit a4" in workspace.core_path("alpha").read_text()
        result = await client.call_tool("archive_insert", {"id": "a2", "run": "alpha"})
        assert result.structured_content["inserted"] == "alpha/a2" and result.structured_content["line"] == 2
        result = await client.call_tool("record", {"run": "alpha"})
        data = result.structured_content
        assert [a["id"] for a in data["admitted"]] == ["alpha/a3", "alpha/a5"]
        assert data["already"] == ["alpha/a1", "alpha/a2"] and data["index"]["updated"] >= 2
        again = (await client.call_tool("record", {"run": "alpha"})).structured_content
        assert again["admitted"] == []
        # the record call reindexed: a search sees a3 as a library step now
        hits = (await client.call_tool("archive_search", {"query": "statement of a3", "library": True,
                                                          "strategy": "bm25"})).structured_content
        assert "alpha/a3" in [h["id"] for h in hits["hits"]]
        # a reindex by another process is seen by the next call
        query = {"query": "zorbification", "strategy": "bm25"}
        assert (await client.call_tool("archive_search", query)).structured_content["total"] == 0
        workspace.edit_step("beta", "b1", statement="zorbification of b1")
        Memory.open(root).index(progress=False)
        found = (await client.call_tool("archive_search", query)).structured_content
        assert [h["id"] for h in found["hits"]] == ["beta/b1"]
        workspace.write_core("alpha", "## inputs      a4 proved\n")       # M1: record is refused
        refused = await client.call_tool("record", {"run": "alpha"})
        lines = text_of(refused).splitlines()
        assert refused.is_error and lines[0].startswith("record alpha refused: 1 violation (M1: 1)")
        assert len(lines) == 2 and "M1: W says a4 proved" in lines[1]


# -------------------------------------------------------------------- the README agrees (fast)

def readme_tools() -> dict[str, tuple[list[str], str]]:
    """The README's MCP tool list: tool -> (its arguments, its output schema's file)."""
    section = README.read_text(encoding="utf-8").split("### MCP tools", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`") and not cells[0].startswith("`tool"):
            rows[cells[0].strip("`")] = (re.findall(r"`(\w+)`", cells[2]), cells[3].strip("`"))
    return rows


def test_the_readme_command_table_tool_list_and_schemas_agree():
    from mem_retrieval.functions import schema_names

    readme = README.read_text(encoding="utf-8")
    tools = readme_tools()
    assert list(tools) == list(BY_NAME)
    table = re.findall(r"^\| `mem ([a-z-]+(?: [a-z]+)?)[ `]", readme, re.M)
    for name, (arguments, schema) in tools.items():
        function = BY_NAME[name]
        assert arguments == [p.name for p in function.params], name
        assert schema == f"schemas/{function.command}.json" and function.command in schema_names()
        assert function.command in table, f"{function.command} is not in the README's command table"
    for command in table:
        if command.split()[0] != "eval":
            assert command.replace(" ", "-") in schema_names(), command


# ------------------------------------------------------------------- real processes (slow)

MIXED = [(name, arguments) for name, arguments, _ in READS if name != "record"] + \
        [(name, arguments) for name, arguments, _ in REFUSED if name not in ("archive_insert", "core_set", "record")]


def server_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("MEM_WORKSPACE",)}


def stdio_params(root: Path, *flags: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "mem_retrieval.cli", "-w", str(root), "mcp", *flags],
                                 env=server_env(), cwd=str(ROOT))


def outcome(result) -> tuple:
    return (bool(result.is_error), text_of(result), json.dumps(result.structured_content, sort_keys=True))


async def load(call, plans) -> list[list[tuple[int, tuple]]]:
    """Each plan's calls in order, all plans at once."""
    results: list[list] = [[] for _ in plans]

    async def client(n: int) -> None:
        for i in plans[n]:
            results[n].append((i, outcome(await call(n, *MIXED[i]))))

    async with anyio.create_task_group() as group:
        for n in range(len(plans)):
            group.start_soon(client, n)
    return results


PLANS = [[random.Random(100 + n).randrange(len(MIXED)) for _ in range(50)] for n in range(8)]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A copy of the example workspace, indexed."""
    from conftest import EXAMPLE

    root = tmp_path_factory.mktemp("mcp") / "ws"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".mem"))
    Memory.open(root).index(progress=False)
    return root


@pytest.mark.slow
@pytest.mark.anyio
async def test_mem_mcp_over_stdio_lists_calls_each_tool_and_gets_the_clis_hits(served, tmp_path):
    errlog = open(tmp_path / "server.err", "w")
    async with stdio_client(stdio_params(served), errlog=errlog) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = (await session.list_tools()).tools
            assert [t.name for t in tools] == list(BY_NAME)
            assert {t.name: t.input_schema for t in tools} == {f.name: f.input_schema() for f in FUNCTIONS}
            called = set()
            for name, arguments, argv in READS:
                result = await session.call_tool(name, arguments)
                assert not result.is_error
                assert result.structured_content == json.loads(cli(served, argv, json_mode=True)[1])
                called.add(name)
            for name, arguments, argv in REFUSED:
                result = await session.call_tool(name, arguments)
                assert result.is_error and text_of(result) == as_tool_message(
                    cli(served, argv, json_mode=False)[2].rstrip("\n"))
                called.add(name)
            assert called == set(BY_NAME)
            result = await session.call_tool("archive_search", {"query": "GL2m", "page": "1"})
            assert result.is_error and text_of(result) == "page must be a whole number, not a string"
            # 8 callers at once in this session: the same answers as one at a time
            alone = [outcome(await session.call_tool(*call)) for call in MIXED]
            results = await load(lambda n, name, args: session.call_tool(name, args), PLANS)
            wrong = [(MIXED[i], got) for plan in results for i, got in plan if got != alone[i]]
            assert sum(map(len, results)) == 400 and not wrong, wrong[:2]
            # a call cancelled mid-way (the client gives up on it) does not stop the server
            with anyio.move_on_after(0.05):
                await session.call_tool("archive_search", {"query": "E6/F4 sheaves and functions"})
            assert outcome(await session.call_tool(*MIXED[0])) == alone[0]
    errlog.close()
    assert "Traceback" not in (tmp_path / "server.err").read_text()


@contextlib.contextmanager
def http_server(root: Path, log_path: Path, **env: str):
    """`mem mcp --http 0` on ``root`` as a subprocess (``env`` added to its environment), its stderr
    in ``log_path``: yields the process and the line it prints when it listens; stops it after."""
    log = open(log_path, "w")
    proc = subprocess.Popen([sys.executable, "-m", "mem_retrieval.cli", "-w", str(root), "--json", "mcp",
                             "--http", "0"], cwd=ROOT, env=server_env() | env, stdout=subprocess.PIPE,
                            stderr=log, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        yield proc, json.loads(proc.stdout.readline() if ready else "")
    finally:
        proc.terminate()
        proc.wait(30)
        proc.stdout.close()
        log.close()


async def walk_away(session) -> None:
    """Await ``session``, a client that gives up mid-call. The SDK's HTTP client (mcp 2.3) may fail on
    its own way out: an answer still in flight is sent into the stream it has just closed
    (``anyio.BrokenResourceError`` or ``ClosedResourceError`` in its transport, after the server
    answered well: 34 of 400 such clients, the server unharmed). That is the client's race, not the
    server's, whose survival the callers assert; any other error still fails the test."""
    try:
        await session
    except* (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_answer_past_a_megabyte_reaches_an_http_client_as_a_stdio_one(served, tmp_path):
    """A page holding a return of 2.6 MB whole reached a stdio client, while the SDK's HTTP client
    failed: an answer was one server-sent event, which it reads up to 1 MB. Answers are JSON bodies;
    ten clients leaving mid-call leave no traceback on the server's stderr."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    root = tmp_path / "ws"
    shutil.copytree(served, root, ignore=shutil.ignore_patterns("serve.sock", "index.lock"))
    returned = root / "satake-two-levels" / "returns" / "A2.md"
    returned.write_text(returned.read_text() + "long text " * 260_000)  # read at each call: no reindex
    arguments = {"id": "satake-two-levels/A2-4"}
    async with stdio_client(stdio_params(root), errlog=open(tmp_path / "stdio.err", "w")) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            by_stdio = (await session.call_tool("recall_search", arguments)).structured_content
    bodies = [hit["body"] for hit in by_stdio["hits"] if hit["body"] and len(hit["body"]) > 2_000_000]
    assert bodies == [returned.read_text()]
    with http_server(root, tmp_path / "server.err") as (proc, data):
        async def session_of(calls, leave_after=None):
            client = create_mcp_http_client(headers={"Authorization": f"Bearer {data['token']}"})
            async with client, streamable_http_client(data["url"], http_client=client) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    if leave_after is None:
                        return [await session.call_tool(*call) for call in calls]
                    with anyio.move_on_after(leave_after):
                        for call in calls:
                            await session.call_tool(*call)

        (result,) = await session_of([("recall_search", arguments)])
        assert not result.is_error and result.structured_content == by_stdio
        async with anyio.create_task_group() as group:
            for _ in range(10):
                group.start_soon(walk_away, session_of([("check", {}), ("recall_search", arguments)], 0.05))
        assert proc.poll() is None
        assert (await session_of([("recall_search", arguments)]))[0].structured_content == by_stdio
    assert "Traceback" not in (tmp_path / "server.err").read_text()


def test_asyncios_refused_accepts_are_logged_once_a_minute_with_their_count():
    """With every descriptor held (connections that never finish a request), asyncio logged each
    refused accept with its traceback: 26 MB of stderr in 5 s. Once a minute, counted; the rest of
    asyncio's log as it is."""
    import logging

    from mem_retrieval.cli.mcp import AcceptErrorsSaidOnce

    now = [0.0]
    said = AcceptErrorsSaidOnce(every=60, clock=lambda: now[0])

    def record(message: str) -> logging.LogRecord:
        return logging.LogRecord("asyncio", logging.ERROR, __file__, 1, message, None, None)

    refused = "socket.accept() out of system resource\nsocket: <socket>\nOSError: [Errno 24]"
    assert said.filter(record(refused))
    for second in range(1, 60):
        now[0] = float(second)
        assert not said.filter(record(refused))
        assert said.filter(record("Task was destroyed but it is pending!"))
    now[0] = 61.0
    again = record(refused)
    assert said.filter(again)
    assert again.getMessage() == ("socket.accept() out of system resource (59 more in the last 61 s)\n"
                                  "socket: <socket>\nOSError: [Errno 24]")


@pytest.mark.parametrize("token, said", [("abc\ndef", "'\\n'"), ("caf\u00e9", "'\u00e9'"), ("a\tb", "'\\t'")])
def test_a_token_no_http_header_can_carry_is_one_line_before_anything_starts(tmp_path, monkeypatch, token,
                                                                             said):
    """A line feed in ``MEM_MCP_TOKEN`` was taken, printed, and then every request was refused."""
    from mem_retrieval.cli.mcp import serve_http

    monkeypatch.setenv("MEM_MCP_TOKEN", token)
    tools = Tools(Workspace.open(build_workspace(tmp_path / "ws").root))
    with pytest.raises(BadInput) as refused:
        serve_http(tools, 0, on_ready=lambda url, token: pytest.fail(f"listening at {url}"))
    assert str(refused.value) == (f"MEM_MCP_TOKEN holds {said}, which an HTTP header cannot carry: "
                                  "use printable ASCII characters")


def test_mem_mcp_over_http_says_a_port_in_use_before_loading_the_model(served):
    """A port in use is one line at once: it was said only after the model's load (10 s here)."""
    import signal
    import socket

    from mem_retrieval.cli.mcp import serve_http

    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    tools = Tools(Workspace.open(served))
    threads = threading.active_count()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        try:
            with pytest.raises(Refused, match=rf"^cannot listen on 127\.0\.0\.1:{port}: "):
                serve_http(tools, port, on_ready=lambda url, token: pytest.fail(f"listening at {url}"))
            # the caller's handlers are back (its next Ctrl-C killed it at once), and no thread is left
            assert {number: signal.getsignal(number) for number in handlers} == handlers
            time.sleep(0.2)
            assert threading.active_count() == threads
        finally:
            for number, handler in handlers.items():
                signal.signal(number, handler)
    assert tools.memories.built == 0  # no index opened, no model loaded


@pytest.mark.slow
def test_two_http_servers_started_at_once_on_one_port_one_serves_the_other_says_so(served, tmp_path):
    """Both bound the port (SO_REUSEADDR lets two sockets bind while neither listens) and listened
    only after the model's warm-up: the second to listen ended in a traceback and printed no JSON.
    Listening at once, the second is refused in its one line, as a port in use is."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [sys.executable, "-m", "mem_retrieval.cli", "-w", str(served), "--json", "mcp", "--http",
            str(port)]
    procs = [subprocess.Popen(argv, cwd=ROOT, env=server_env(), stdout=subprocess.PIPE,
                              stderr=open(tmp_path / f"{n}.err", "w"), text=True) for n in range(2)]
    try:
        lines = []
        for proc in procs:
            ready, _, _ = select.select([proc.stdout], [], [], 120)
            lines.append(json.loads(proc.stdout.readline() if ready else ""))
        refused = [n for n, line in enumerate(lines) if "error" in line]
        assert len(refused) == 1, lines
        (loser,) = refused
        assert lines[loser] == {"error": f"cannot listen on 127.0.0.1:{port}: Address already in use"}
        assert procs[loser].wait(30) == 1
        assert "Traceback" not in (tmp_path / f"{loser}.err").read_text()
        assert lines[1 - loser]["url"] == f"http://127.0.0.1:{port}/mcp"
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(30)
            proc.stdout.close()


@pytest.mark.slow
def test_the_http_server_raises_its_open_file_limit_to_the_hard_one(served, tmp_path):
    """Started under the usual soft limit of 1,024 open files, the server raises it to the hard
    one: at 1,024, connections a local user without the token opened and never finished held
    every descriptor, and the token's holder was locked out."""
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 1024:
        pytest.skip(f"the hard limit here is {hard}: nothing to raise")
    argv = [sys.executable, "-m", "mem_retrieval.cli", "-w", str(served), "--json", "mcp", "--http", "0"]
    proc = subprocess.Popen(argv, cwd=ROOT, env=server_env(), stdout=subprocess.PIPE, text=True,
                            stderr=open(tmp_path / "server.err", "w"),
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard)))
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        assert "url" in json.loads(proc.stdout.readline() if ready else "")
        soft, _ = resource.prlimit(proc.pid, resource.RLIMIT_NOFILE)
        assert soft == (1 << 20 if hard == resource.RLIM_INFINITY else min(hard, 1 << 20))
    finally:
        proc.terminate()
        proc.wait(30)
        proc.stdout.close()


@pytest.mark.slow
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_mem_mcp_over_http_exits_on_a_signal_with_its_status(served, tmp_path, signame):
    """128 + the signal's number, as over stdio: uvicorn's shutdown returned, and the exit was 0."""
    import signal

    with http_server(served, tmp_path / "server.err") as (proc, _):
        proc.send_signal(getattr(signal, signame))
        assert proc.wait(30) == 128 + getattr(signal, signame)


@pytest.mark.slow
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_a_second_signal_stops_the_http_server_at_once_while_a_call_runs_on(tmp_path, signame):
    """The first signal waits for the calls running (at most 60 s); the second exits at once, as
    over stdio. A second SIGTERM (an agent's timeout sends two) waited the 60 s: uvicorn forces its
    exit on a second SIGINT only. Here a call never ends (``wait_idle`` never sees the server idle)."""
    import signal
    import urllib.error
    import urllib.request

    script = ("import sys, time\n"
              "from mem_retrieval.cli.mcp import Tools, serve_http\n"
              "tools = Tools(sys.argv[1])\n"
              "tools.wait_idle = lambda timeout: time.sleep(timeout) or False  # a call runs on\n"
              "serve_http(tools, 0, lambda url, token: print(url, flush=True), lazy=True)\n")
    number = getattr(signal, signame)
    with open(tmp_path / "server.err", "w") as err:
        proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE,
                                stderr=err, text=True)
    try:
        url = proc.stdout.readline().strip()
        with pytest.raises(urllib.error.HTTPError) as refused:  # uvicorn serves (no token: 401)
            urllib.request.urlopen(url, timeout=60)
        assert refused.value.code == 401
        proc.send_signal(number)
        time.sleep(1)
        assert proc.poll() is None  # waiting for the call
        proc.send_signal(number)
        assert proc.wait(20) == 128 + number
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert "Traceback" not in (tmp_path / "server.err").read_text()


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
async def test_a_call_running_at_a_signal_over_http_is_answered_before_the_exit(served, tmp_path, signame):
    """As over stdio: the server exits (128 + the signal) once the call has ended and its answer
    is written. sse-starlette ended every event stream at the signal, so the client of a call in
    flight saw its stream end without an answer (and, for a write, could not tell if it was made)."""
    import signal

    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    long_text = "word " * 800_000  # tokenised before M4 refuses it: a call of a few seconds
    with http_server(served, tmp_path / "server.err") as (proc, data):
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {data['token']}"})
        async with client, streamable_http_client(data["url"], http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                async with anyio.create_task_group() as group:
                    answers = []

                    async def call() -> None:
                        answers.append(await session.call_tool(
                            "core_set", {"run": "satake-two-levels", "field": "next", "text": long_text}))

                    group.start_soon(call)
                    await anyio.sleep(0.5)  # the call is running
                    proc.send_signal(getattr(signal, signame))
        (answer,) = answers
        assert answer.is_error and "(limit 2,000)" in answer.content[0].text, answer.content[0].text[:300]
        assert proc.wait(60) == 128 + getattr(signal, signame)


@pytest.mark.slow
@pytest.mark.anyio
async def test_mem_mcp_over_http_serves_8_clients_at_once_and_outlives_one_that_leaves(served, tmp_path):
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    with http_server(served, tmp_path / "server.err") as (proc, data):
        jsonschema.validate(data, output_schema("mcp"))
        url = data["url"]
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/mcp", url) and data["pid"] == proc.pid

        async def one_session(calls):
            client = create_mcp_http_client(headers={"Authorization": f"Bearer {data['token']}"})
            async with client, streamable_http_client(url, http_client=client) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return [outcome(await session.call_tool(*call)) for call in calls]

        alone = await one_session(MIXED)
        results: list[list] = [None] * 8

        async def client(n: int) -> None:
            results[n] = await one_session([MIXED[i] for i in PLANS[n]])

        async def leaver() -> None:  # opens a session, starts a search, and goes away mid-call
            with anyio.move_on_after(0.3):
                await walk_away(one_session([("archive_search", {"query": "Hecke operators spanning"})] * 5))

        async with anyio.create_task_group() as group:
            for n in range(8):
                group.start_soon(client, n)
            group.start_soon(leaver)
        wrong = [(MIXED[i], got) for n in range(8) for i, got in zip(PLANS[n], results[n]) if got != alone[i]]
        assert sum(map(len, results)) == 400 and not wrong, wrong[:2]
        assert proc.poll() is None
        assert await one_session(MIXED[:3]) == alone[:3]
    assert "Traceback" not in (tmp_path / "server.err").read_text()


@pytest.mark.slow
def test_mem_mcp_over_http_answers_only_requests_carrying_its_token(served, tmp_path):
    """Loopback is every local user's: without a token, any of them called the tools of the
    workspace of the user who started the server, `core_set` included. A request without the
    token printed at start, or with another, gets 401 and reaches no tool; $MEM_MCP_TOKEN sets it."""
    import urllib.error
    import urllib.request

    call = {"name": "core_set", "arguments": {"run": "satake-two-levels", "field": "next", "text": "x"}}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}).encode()
    core = (served / "satake-two-levels" / "memory" / "core.md").read_text()
    with http_server(served, tmp_path / "server.err", MEM_MCP_TOKEN="s3cret-token") as (proc, data):
        assert data["token"] == "s3cret-token"
        for header in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-token"}):
            request = urllib.request.Request(data["url"], body, method="POST", headers={
                "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                **header})
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=30)
            assert refused.value.code == 401, header
        assert (served / "satake-two-levels" / "memory" / "core.md").read_text() == core
        request = urllib.request.Request(data["url"], body, method="POST", headers={
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            "Authorization": "bearer s3cret-token"})  # the scheme is case-insensitive (RFC 9110)
        try:
            urllib.request.urlopen(request, timeout=30).close()
        except urllib.error.HTTPError as answered:
            assert answered.code != 401


@pytest.mark.slow
def test_a_client_leaving_mid_request_is_not_logged_as_a_server_error(served, tmp_path):
    """A client that goes away while the server reads its request (what the leaver above can do): the
    SDK logged starlette's ClientDisconnect with a traceback, as if the server had failed."""
    import socket
    import time

    with http_server(served, tmp_path / "server.err") as (proc, data):
        port = int(data["url"].rsplit(":", 1)[1].split("/")[0])
        with socket.create_connection(("127.0.0.1", port)) as sock:   # 10 of the 1000 bytes it announces
            sock.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                         f"Authorization: Bearer {data['token']}\r\n"
                         "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
                         'Content-Length: 1000\r\n\r\n{"jsonrpc"'.encode())
            time.sleep(0.5)
        time.sleep(1.0)
        assert proc.poll() is None
    assert "Traceback" not in (tmp_path / "server.err").read_text()


@pytest.mark.slow
def test_mem_mcp_without_the_sdk_says_how_to_install_it(tmp_path):
    """The default install leaves the SDK out: `mem mcp` then says what to install, in one line."""
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\nclass _Block:\n    def find_spec(self, name, *a, **k):\n"
        "        if name == 'mcp' or name.startswith('mcp.'):\n"
        "            raise ImportError(name)\nsys.meta_path.insert(0, _Block())\n")
    env = server_env() | {"PYTHONPATH": str(blocker)}
    done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "-w", str(tmp_path), "mcp"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2  # as `mem index --engine ray` without Ray: one status for a missing extra
    assert done.stderr == ("mem: the MCP server needs the MCP SDK: pip install 'mcp<3,>=2.3' "
                           "(the extra [mcp])\n")


class RawStdio:
    """``mem mcp`` over stdio spoken to as raw JSON-RPC lines (a client the SDK cannot be: one
    that signals the server), initialized; killed at the end if still running."""

    def __init__(self, root: Path, *flags: str):
        argv = [sys.executable, "-m", "mem_retrieval.cli", "-w", str(root), "mcp", *flags]
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=server_env(), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def send(self, message: dict) -> None:
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
        self.proc.stdin.flush()

    def __enter__(self) -> "RawStdio":
        self.send({"id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}})
        ready, _, _ = select.select([self.proc.stdout], [], [], 120)
        assert ready and json.loads(self.proc.stdout.readline())["id"] == 0
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            stream.close()


def test_a_line_the_sdk_cannot_read_is_answered_and_the_server_goes_on(tmp_path):
    """JSON-RPC 2.0 §5.1 for the lines the SDK's stdio transport dropped in silence (a client
    waited for ever on its request): a lone surrogate escape (JSON that Python reads, the SDK's
    parser refuses) is invalid params naming the field, to the request's id, or to a null id when
    the id holds it (echoing it crashed the server's writer); JSON that is no message MCP reads is
    an invalid request to its own id (not to an id a string inside it spells); a batch, or a line
    of no JSON, a null id; a blank line and a notification, nothing. The server goes on."""
    lines = [('{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "archive_search", '
              '"arguments": {"query": "GL2m \\ud800"}}}'),
             '{"jsonrpc": "2.0", "id": "q\\udc00", "method": "ping"}',
             ('{"jsonrpc": "2.0", "id": 3, "method": "tools/call", '
              '"params": "{\\"id\\": 99, \\"method\\": \\"x\\"}"}'),
             '[{"jsonrpc": "2.0", "id": 4, "method": "ping"}]',
             ('{"jsonrpc": "2.0", "id": 6, "method": "ping", "params": {"x": '
              + "[" * 5000 + "]" * 5000 + "}}"),
             ('{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "result": {}, "params": {"name": "check", '
              '"arguments": {"x": "\\ud800"}}}'),  # a method makes it a request
             "not json", "", "  ",
             '{"jsonrpc": "2.0", "method": "notifications/x", "params": {"q": "\\ud800"}}',
             '{"jsonrpc": "2.0", "id": 5, "method": "tools/list"}']
    with RawStdio(tmp_path, "--lazy") as server:
        server.send({"method": "notifications/initialized"})
        server.proc.stdin.write("".join(line + "\n" for line in lines).encode())
        server.proc.stdin.flush()
        replies = []
        while len(replies) < 8 and select.select([server.proc.stdout], [], [], 60)[0]:
            replies.append(json.loads(server.proc.stdout.readline()))
        server.proc.stdin.close()
        assert server.proc.wait(60) == 0 and b"Traceback" not in server.proc.stderr.read()
    errors = [(r["id"], r["error"]["code"], r["error"]["message"]) for r in replies[:7]]
    assert errors == [
        (1, -32602, "params.arguments.query is not valid Unicode text (it holds an unpaired surrogate)"),
        (None, -32602, "id is not valid Unicode text (it holds an unpaired surrogate)"),
        (3, -32600, "invalid request: params: Input should be an object"),
        (None, -32600, "invalid request: a batch (MCP reads one message a line)"),
        (None, -32600, "invalid request: nested too deeply"),
        (7, -32602, "params.arguments.x is not valid Unicode text (it holds an unpaired surrogate)"),
        (None, -32700, "parse error: a line that is no JSON")]
    assert replies[7]["id"] == 5
    assert "archive_search" in {tool["name"] for tool in replies[7]["result"]["tools"]}


def test_bytes_that_are_not_utf8_in_a_stdio_request_are_refused_naming_the_field(tmp_path):
    """The SDK's stdio transport reads standard input with errors="replace": a `core_set` of
    Latin-1 text (`caf\\xe9`) wrote `caf\ufffd` into core.md and the log and said it succeeded,
    where the command line refuses those bytes. It is invalid params naming the field and the byte;
    nothing is written, and the server goes on."""
    from conftest import build_workspace

    workspace = build_workspace(tmp_path / "ws")
    before = workspace.core_path("alpha").read_bytes(), workspace.events_path("alpha").read_bytes()
    call = {"jsonrpc": "2.0", "method": "tools/call",
            "params": {"name": "core_set", "arguments": {"run": "alpha", "field": "next", "text": "TEXT"}}}
    with RawStdio(workspace.root, "--lazy") as server:
        server.send({"method": "notifications/initialized"})
        for number, text in ((1, b"caf\xe9 latin-1"), (2, "caf\u00e9 \u03c6".encode())):
            line = json.dumps(call | {"id": number}, ensure_ascii=False).encode().replace(b"TEXT", text)
            server.proc.stdin.write(line + b"\n")
            server.proc.stdin.flush()
            assert select.select([server.proc.stdout], [], [], 60)[0]
            reply = json.loads(server.proc.stdout.readline())
            if number == 1:
                assert reply == {"jsonrpc": "2.0", "id": 1, "error": {
                    "code": -32602, "message": "params.arguments.text holds a byte that is not UTF-8 (0xe9)"}}
                assert (workspace.core_path("alpha").read_bytes(),
                        workspace.events_path("alpha").read_bytes()) == before
            else:
                assert reply["id"] == 2 and reply["result"]["isError"] is False
        server.proc.stdin.close()
        assert server.proc.wait(60) == 0
    assert "## next        caf\u00e9 \u03c6\n" in workspace.core_path("alpha").read_text(encoding="utf-8")


@pytest.mark.slow
@pytest.mark.parametrize("lazy, signame", [([], "SIGINT"), (["--lazy"], "SIGINT"), ([], "SIGTERM")],
                         ids=["warming", "lazy", "sigterm"])
def test_ctrl_c_stops_mem_mcp_over_stdio_while_its_client_stays(served, lazy, signame):
    """SIGINT stops the stdio server (exit 130) though its client keeps standard input open: the
    event loop's own handler cancelled a task that then waited on a read no cancel ends, and the
    server ran on until the client left."""
    import signal

    with RawStdio(served, *lazy) as server:
        server.proc.send_signal(getattr(signal, signame))
        assert server.proc.wait(30) == 128 + getattr(signal, signame)
        assert b"Traceback" not in server.proc.stderr.read()


@pytest.mark.slow
@pytest.mark.parametrize("lazy", [[], ["--lazy"]], ids=["warming", "lazy"])
def test_a_signal_then_the_client_leaving_exits_with_the_signals_status(served, lazy):
    """SIGTERM, then the client closing standard input 50 ms later: the end of input ended the
    server first, with status 0, so a supervisor saw a clean exit after it had sent a signal."""
    import signal

    with RawStdio(served, *lazy) as server:
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.05)
        server.proc.stdin.close()
        assert server.proc.wait(30) == 128 + signal.SIGTERM
        assert b"Traceback" not in server.proc.stderr.read()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="a device that is always full")
def test_standard_output_on_a_full_device_is_one_line_exit_2(served):
    """An answer standard output cannot take (a full disk): a 65-line traceback of the SDK's task
    group and exit 1, where every other command says it in one line, exit 2."""
    initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}
    with open("/dev/full", "wb") as full:
        done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "-w", str(served), "mcp", "--lazy"],
                              input=(json.dumps(initialize) + "\n").encode(), stdout=full,
                              stderr=subprocess.PIPE, cwd=ROOT, env=server_env(), timeout=120)
    assert (done.returncode, done.stderr) == (2, b"mem: cannot write the output: No space left on device\n")


@pytest.mark.slow
def test_a_client_that_dies_during_a_call_leaves_no_traceback(served):
    """The client gone with both pipes (killed) while a call runs: writing its answer met a broken
    pipe, and the server exited 1 with a 64-line traceback on stderr, which MCP hosts log as a
    server failure. It exits 0, silent, as when standard input alone closes."""
    with RawStdio(served, "--lazy") as server:
        server.send({"method": "notifications/initialized"})
        server.send({"id": 1, "method": "tools/call", "params": {"name": "core_set", "arguments": {
            "run": "satake-two-levels", "field": "next", "text": "word " * 800_000}}})  # seconds: M4
        time.sleep(0.5)
        server.proc.stdin.close()
        server.proc.stdout.close()
        assert server.proc.wait(60) == 0 and server.proc.stderr.read() == b""


@pytest.mark.slow  # a real server process and a model load (3 s)
def test_a_call_running_when_the_client_closes_standard_input_is_answered_with_its_result(workspace):
    """A client piping its requests in, then closing standard input: the SDK's session answered the
    call still running `-32000 Connection closed`, not with its result. The end of input now waits
    for every request read to be answered (a cancelled one is not waited for)."""
    lines = [{"id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                                          "clientInfo": {"name": "test", "version": "1"}}},
             {"method": "notifications/initialized"},
             {"id": 1, "method": "tools/call", "params": {"name": "core_set", "arguments": {
                 "run": "alpha", "field": "next", "text": "word " * 800_000}}},  # seconds: M4 refuses it
             {"id": 2, "method": "tools/call", "params": {"name": "archive_get",
                                                          "arguments": {"id": "alpha/a1"}}},
             {"method": "notifications/cancelled", "params": {"requestId": 2}}]
    piped = "".join(json.dumps({"jsonrpc": "2.0", **line}) + "\n" for line in lines).encode()
    argv = [sys.executable, "-m", "mem_retrieval.cli", "-w", str(workspace.root), "mcp", "--lazy"]
    done = subprocess.run(argv, input=piped, capture_output=True, cwd=ROOT, env=server_env(), timeout=120)
    answers = {m["id"]: m for m in map(json.loads, done.stdout.splitlines())}
    assert done.returncode == 0 and done.stderr == b"" and "error" not in answers[1]
    result = answers[1]["result"]
    assert result["isError"] and "W would be 800,0" in result["content"][0]["text"]


def test_a_signal_during_the_http_servers_warm_up_never_says_it_is_ready(tmp_path):
    """`mem mcp --http`, signalled while it loads the model, printed its ready line (a client
    waiting for it connected to a server already exiting), then exited; here the warm-up itself
    sends the signal."""
    script = ("import os, signal, sys\n"
              "from mem_retrieval.cli.mcp import Tools, serve_http\n"
              "tools = Tools(sys.argv[1])\n"
              "tools.warm = lambda: os.kill(os.getpid(), signal.SIGTERM)\n"
              "serve_http(tools, 0, lambda url, token: print('ready', url, flush=True))\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (143, b"", b"")


def test_a_signal_that_comes_while_a_thread_is_starting_still_stops_the_server(tmp_path):
    """The stdio server's event loop starts a worker thread to write each answer; a SIGINT that came
    while the main thread held the lock a thread's start takes made the handler, which started the
    stopping thread itself, wait for that lock for ever: the server never exited (a CI run saw it
    once). Here the main thread holds that lock when the signal comes."""
    script = ("import signal, sys, threading, time\n"
              "from mem_retrieval.cli.mcp import Tools, StopOnSignal\n"
              "StopOnSignal(Tools(sys.argv[1]))\n"
              "with threading._active_limbo_lock:\n"
              "    signal.raise_signal(signal.SIGINT)\n"
              "    time.sleep(60)\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, timeout=60)
    assert done.returncode == 130 and done.stderr == b""


SIGNALLED_AT = ("import signal, sys, time\n"
                "from mem_retrieval.cli.mcp import Tools, StopOnSignal\n"
                "stopper = StopOnSignal(Tools(sys.argv[1]))\n"
                "number, at = getattr(signal, sys.argv[2]), int(sys.argv[3])\n"
                "calls = []\n"
                "def after_each(real):\n"
                "    def call(*args, **kwargs):\n"
                "        result = real(*args, **kwargs)\n"
                "        calls.append(real.__name__)\n"
                "        if len(calls) == at:\n"
                "            signal.raise_signal(number)  # its handler runs here, as it returns\n"
                "        return result\n"
                "    return call\n"
                "signal.signal = after_each(signal.signal)\n"
                "signal.set_wakeup_fd = after_each(signal.set_wakeup_fd)\n"
                "getattr(stopper, sys.argv[4])()\n"
                "print(calls, flush=True)\n"
                "time.sleep(30)  # serving (uvicorn), or refused: the signal was lost if this runs on\n")


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("at", [1, 2, 3])
def test_a_signal_while_the_http_server_hands_its_signals_to_uvicorn_still_stops_it(tmp_path, signame, at):
    """`mem mcp --http` sent SIGTERM as it said it was ready (CI) ran on for ever, refusing every
    call: the signal came as the stopper gave the interpreter's pipe back, before its handler: that
    handler marked the calls refused, and its pipe, which wakes the thread that exits, was no longer
    the one written. Here the signal comes after each of the three calls handing them over."""
    import signal

    done = subprocess.run([sys.executable, "-c", SIGNALLED_AT, str(tmp_path), signame, str(at), "release"],
                          capture_output=True, timeout=60)
    assert (done.returncode, done.stderr) == (128 + getattr(signal, signame), b""), done


@pytest.mark.parametrize("at", [1, 2, 3])
def test_a_signal_while_a_server_that_could_not_listen_gives_its_signals_back_is_not_lost(tmp_path, at):
    """The same race where `mem mcp --http` could not listen (a port in use) and gave back the
    handlers there were before (here the default: SIGTERM ends the process, 143 where the stopping
    thread had heard of it first); and, where the signal came before the pipe was given back, the
    stopping thread was told to end before it heard of it."""
    import signal

    argv = [sys.executable, "-c", SIGNALLED_AT, str(tmp_path), "SIGTERM", str(at), "give_back"]
    done = subprocess.run(argv, capture_output=True, timeout=60)
    assert done.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM) and done.stderr == b"", done


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_a_signal_another_thread_takes_still_stops_the_server(tmp_path, signame):
    """A signal sent to the process is taken by one of its threads, the main one mostly, not
    always; the handler then waited for the main thread to run Python, and the event loop, asleep
    until the client's next line, never did: the server ran on for ever. Here the signal goes to
    another thread while the main thread sleeps in a system call nothing else ends."""
    import signal

    script = ("import os, select, signal, sys, threading, time\n"
              "from mem_retrieval.cli.mcp import Tools, StopOnSignal\n"
              "StopOnSignal(Tools(sys.argv[1]))\n"
              "def later():\n"
              "    time.sleep(0.5)  # the main thread asleep by then\n"
              f"    signal.pthread_kill(threading.get_ident(), signal.{signame})\n"
              "threading.Thread(target=later, daemon=True).start()\n"
              "select.select([os.pipe()[0]], [], [])\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, timeout=60)
    assert (done.returncode, done.stderr) == (128 + getattr(signal, signame), b"")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="threads listed in /proc (Linux)")
@pytest.mark.parametrize("lazy, signame", [([], "SIGTERM"), (["--lazy"], "SIGINT")], ids=["warming", "lazy"])
def test_a_signal_sent_to_a_thread_of_mem_mcp_other_than_the_main_one_stops_it(served, lazy, signame):
    """``mem mcp`` itself, its client keeping standard input open, and the signal delivered to
    whichever of its other threads does not block it (``tgkill``)."""
    import ctypes
    import signal

    number = getattr(signal, signame)
    with RawStdio(served, *lazy) as server:
        time.sleep(1)  # the main thread asleep in the event loop by then
        pid = server.proc.pid
        tasks = Path(f"/proc/{pid}/task")
        blocked = {int(t.name): int(next(line.split()[1] for line in (t / "status").read_text().splitlines()
                                         if line.startswith("SigBlk:")), 16) for t in tasks.iterdir()}
        thread = min(t for t, mask in blocked.items() if t != pid and not mask & 1 << (number - 1))
        assert ctypes.CDLL(None, use_errno=True).tgkill(pid, thread, number) == 0
        assert server.proc.wait(30) == 128 + number
        assert b"Traceback" not in server.proc.stderr.read()


@pytest.mark.slow
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_a_signal_during_a_call_sends_its_answer_before_the_exit(served, signame):
    """The call running when the signal comes (a search loading the model) is answered, and a
    call sent after it is refused in one line; then the exit (128 + the signal). The handler
    waited holding the event loop, so the answers were never written."""
    import signal

    with RawStdio(served, "--lazy") as server:
        server.send({"method": "notifications/initialized"})
        server.send({"id": 1, "method": "tools/call", "params": {"name": "archive_search", "arguments": {
            "query": "GL2m/Sp2m generation", "strategy": "rerank-graph"}}})  # loads the model: seconds
        time.sleep(0.3)
        server.proc.send_signal(getattr(signal, signame))
        time.sleep(0.1)
        server.send({"id": 2, "method": "tools/call", "params": {"name": "archive_get", "arguments": {
            "id": "satake-two-levels/A5-7"}}})
        assert server.proc.wait(60) == 128 + getattr(signal, signame)
        answers = {m["id"]: m["result"] for m in map(json.loads, server.proc.stdout.read().splitlines())
                   if "id" in m}
        assert not answers[1]["isError"] and "satake-two-levels/A5-7" in answers[1]["content"][0]["text"]
        assert answers[2]["isError"] and answers[2]["content"][0]["text"] == (
            "the server is stopping (SIGINT or SIGTERM): call again once it is restarted")
        assert b"Traceback" not in server.proc.stderr.read()


def test_a_config_from_a_pipe_is_refused_at_start_not_by_every_call(tmp_path):
    """`mem mcp --config <(…)` started, then every call failed ("cannot read": the server reads its
    configuration again on every call, and the pipe was read)."""
    read, write = os.pipe()
    os.write(write, b"[search]\npage_size = 2\n")
    os.close(write)
    try:
        code, out, err = cli(tmp_path, ["--config", f"/dev/fd/{read}", "mcp"], False)
    finally:
        os.close(read)
    assert (code, out) == (2, "") and err == (
        f"mem: --config '/dev/fd/{read}' is not a regular file (a pipe?): mem mcp reads its configuration "
        "again on every call, to follow edits; give a file\n")
