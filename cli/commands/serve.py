"""`mem serve [--idle-timeout SECONDS] [--lazy]`: a warm process answering the read commands of
its workspace over ``WORKSPACE/.mem/serve.sock`` (mem/server.py; the client side is mem/forward.py)."""

from __future__ import annotations

ORDER = 80


def register(subparsers, common) -> None:
    parser = subparsers.add_parser(
        "serve", parents=[common], help="keep the index and model loaded; `mem` forwards searches here",
        description="Keep lancedb and the embedding model loaded and answer archive-search, "
                    "archive-get and recall-search sent by `mem` over WORKSPACE/.mem/serve.sock, "
                    "with output identical to running them in-process. Stops on SIGTERM/SIGINT "
                    "(removing the socket) or after --idle-timeout.")
    parser.add_argument("--idle-timeout", type=_seconds, metavar="SECONDS",
                        help="stop after this long without a request (default: never)")
    parser.add_argument("--lazy", action="store_true",
                        help="load the embedding model on the first search instead of at start")
    parser.set_defaults(handler=serve)


def _seconds(text: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"not a positive number of seconds: {text!r}")
    return value


def serve(args, ctx) -> int:
    import os

    from mem_retrieval.cli.server import Server

    workspace = ctx.workspace()
    server = Server.bind(workspace.root, args.idle_timeout)
    os.chdir(workspace.root)

    def ready() -> None:
        ctx.emit({"socket": str(server.path), "pid": os.getpid()},
                 f"mem serve: ready on {server.path} (pid {os.getpid()})")
        ctx.out.flush()

    reason = server.serve(model=not args.lazy, on_ready=ready)
    ctx.note(f"mem serve: stopped ({reason}) after {server.requests} requests")
    return 0
