"""`mem index [RUN…] [--full] [--progress | --no-progress] [--engine local|ray] [--workers N]`."""

from __future__ import annotations

ORDER = 10


def register(subparsers, common) -> None:
    from mem_retrieval.configs import ENGINES

    parser = subparsers.add_parser(
        "index", parents=[common], help="bring the index up to date with the files",
        description="Index the workspace: steps of every run and of the library, events with their "
                    "briefs and returns, sources. Only what changed is re-embedded.")
    parser.add_argument("runs", nargs="*", metavar="RUN", help="only these runs (default: all)")
    parser.add_argument("--full", action="store_true",
                        help="rebuild from the files alone (needed after a tokenizer/model change)")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--progress", dest="progress", action="store_true", default=None,
                       help="show a progress bar even when stderr is not a terminal")
    shown.add_argument("--no-progress", dest="progress", action="store_false",
                       help="show none even on a terminal (default: a bar where stderr is one)")
    parser.add_argument("--engine", choices=ENGINES, default=None,
                        help="embed in this process (local) or on a Ray actor pool (ray; needs "
                             "Ray: the extra [distributed]); default: index.engine")
    parser.add_argument("--workers", type=_count, default=None, metavar="N",
                        help="Ray actors embedding (default: ray.workers; 0 = one per CPU Ray has)")
    parser.set_defaults(handler=run)


def _count(text: str) -> int:
    import argparse

    from mem_retrieval.cli.outputs import integer

    if integer(text) < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (0: one per CPU)")
    return int(text)


def run(args, ctx) -> int:
    memory = ctx.memory()
    ctx.warn_if_no_runs(memory.workspace)
    report = memory.index(args.runs or None, full=args.full, progress=args.progress,
                          on_message=ctx.note, engine=args.engine, workers=args.workers)
    ctx.emit(report.as_dict(), report.summary())
    return 0
