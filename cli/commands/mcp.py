"""`mem mcp [--http PORT] [--lazy]`: the workspace's memory functions as MCP tools (cli/mcp.py)."""

from __future__ import annotations

ORDER = 82


def register(subparsers, common) -> None:
    parser = subparsers.add_parser(
        "mcp", parents=[common], help="serve the memory functions as MCP tools (stdio, or HTTP on loopback)",
        description="A Model Context Protocol server for this workspace: the tools core_set, "
                    "recall_search, archive_search, archive_get, archive_insert, check and record, "
                    "with the same arguments, answers and messages as the commands. Over stdio by "
                    "default; --http PORT serves streamable HTTP at http://127.0.0.1:PORT/mcp "
                    "(port 0: a free one) and prints where. Needs the MCP SDK: the extra [mcp].")
    parser.add_argument("--http", type=_port, metavar="PORT",
                        help="streamable HTTP on 127.0.0.1:PORT instead of stdio")
    parser.add_argument("--lazy", action="store_true",
                        help="load the embedding model on the first search instead of at start")
    parser.set_defaults(handler=serve)


def _port(text: str) -> int:
    import argparse

    from mem_retrieval.cli.outputs import integer

    number = integer(text)
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number (0–65535): {text!r}")
    return number


def _regular(path) -> bool:
    import os
    import stat

    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:  # missing: the configuration's own check names it
        return True


def serve(args, ctx) -> int:
    import os

    from mem_retrieval.records.errors import BadInput, install_hint

    try:
        import mcp.server  # noqa: F401  (an optional dependency: the extra [mcp])
    except ImportError:
        raise BadInput(f"the MCP server needs the MCP SDK: {install_hint('mcp')}") from None  # as Ray
    from mem_retrieval.cli.mcp import Tools, serve_http, serve_stdio

    workspace = ctx.workspace()
    config_file = ctx.config_path.resolve() if ctx.config_path else None
    if config_file is not None and not _regular(ctx.config_path):  # every call failed: "cannot read"
        raise BadInput(f"--config {str(ctx.config_path)!r} is not a regular file (a pipe?): mem mcp "
                       "reads its configuration again on every call, to follow edits; give a file")
    ctx.config(workspace)  # a bad configuration: refused now, in one line, rather than per call
    tools = Tools(workspace, config_file)
    os.environ.setdefault("LANCEDB_LOG", "error")
    if args.http is None:
        serve_stdio(tools, lazy=args.lazy)
        return 0

    def ready(url: str, token: str) -> None:
        ctx.emit({"url": url, "pid": os.getpid(), "token": token},
                 f"mem mcp: ready on {url} (pid {os.getpid()}); clients send Authorization: Bearer {token}")
        ctx.out.flush()

    return serve_http(tools, args.http, ready, lazy=args.lazy)
