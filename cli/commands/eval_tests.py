"""`mem eval resume` and `mem eval reuse`: two of the design's three tests before use (the third is
`mem eval status`). Each prints what it found, then a PASS/FAIL line, and exits 1 on failure."""

from __future__ import annotations

ORDER = 60


def register(subparsers, common) -> None:
    parser = subparsers.add_parser(
        "resume", parents=[common],
        help="as of an event of RUN, every blocked route known then is found from the W of then",
        description="Memory as of --until (an event id such as R-1, a sequence number, or an ISO "
                    "time; default: now). W is rebuilt from the core-set checkpoints up to then "
                    "(else the current core.md, said in the output); each W line and each id W "
                    "names is put to archive-search and recall-search as of then. Every step with "
                    "status blocked, or of kind dead_end or error, that an event of RUN had named "
                    "by then must be found within --pages pages. Exit 1 naming what was missed.")
    parser.add_argument("run")
    parser.add_argument("--until", metavar="EVENT|SEQ|TIME")
    parser.add_argument("--pages", type=int, default=2, help="pages read per query (default 2)")
    parser.set_defaults(handler=resume)

    parser = subparsers.add_parser(
        "reuse", parents=[common],
        help="the library steps NEW_RUN cites are returned for its Fix",
        description="archive-search over the library (NEW_RUN's own steps left out) with NEW_RUN's "
                    "Fix problem and criterion, setting = its Fix setting. Every library step it "
                    "cites (a parent in tree.json, or a global id in a brief, except on a line "
                    "saying 'not an input') must be returned within --pages pages. Exit 1 when "
                    "recall < 1, naming what was missed and why.")
    parser.add_argument("new_run", metavar="NEW_RUN")
    parser.add_argument("--pages", type=int, default=2, help="pages read per query (default 2)")
    parser.set_defaults(handler=reuse)




def resume(args, ctx) -> int:
    from mem_retrieval.eval.resume import resume as run_resume

    report = run_resume(ctx.memory().retriever, args.run, args.until, args.pages)
    ctx.emit(report.as_dict(), report.text())
    return 0 if report.passed else 1


def reuse(args, ctx) -> int:
    from mem_retrieval.eval.reuse import reuse as run_reuse

    report = run_reuse(ctx.memory().retriever, args.new_run, args.pages)
    ctx.emit(report.as_dict(), report.text())
    return 0 if report.passed else 1
