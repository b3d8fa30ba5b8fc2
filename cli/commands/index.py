"""`mem index [RUN…] [--full]`."""

from __future__ import annotations

ORDER = 10


def register(subparsers, common) -> None:
    parser = subparsers.add_parser(
        "index", parents=[common], help="bring the index up to date with the files",
        description="Index the workspace: steps of every run and of the library, events with their "
                    "briefs and returns, sources. Only what changed is re-embedded.")
    parser.add_argument("runs", nargs="*", metavar="RUN", help="only these runs (default: all)")
    parser.add_argument("--full", action="store_true",
                        help="rebuild from the files alone (needed after a tokenizer/model change)")
    parser.add_argument("--progress", dest="progress", action="store_true", default=None,
                        help="show a progress bar even when stderr is not a terminal")
    parser.add_argument("--no-progress", dest="progress", action="store_false")
    parser.set_defaults(handler=run)


def run(args, ctx) -> int:
    memory = ctx.memory()
    ctx.warn_if_no_runs(memory.workspace)
    report = memory.index(args.runs or None, full=args.full, progress=args.progress,
                          on_message=ctx.note)
    ctx.emit(report.as_dict(), report.summary())
    return 0
