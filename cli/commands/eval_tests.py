"""`mem eval resume` and `mem eval reuse`: two of the design's three tests before use (the third is
`mem eval status`). Each prints what it found, then a PASS/FAIL line, and exits 1 on failure
(`reuse --per-step`: on the per-step verdict; its Fix queries are reported apart)."""

from __future__ import annotations

from mem_retrieval.cli.outputs import integer, named

ORDER = 60


def register(subparsers, common) -> None:
    from mem_retrieval.configs import STRATEGY_NAMES

    parser = subparsers.add_parser(
        "resume", parents=[common],
        help="as of an event of RUN, every blocked route known then is found from the W of then",
        description="Memory as of --until (an event id such as R-1, a sequence number, or an ISO "
                    "time; default: now). W is rebuilt from the core-set checkpoints up to then "
                    "(else the current core.md, said in the output); each W line and each id W "
                    "names is put to archive-search and recall-search as of then. Every step with "
                    "status blocked, or of kind dead_end or error, that an event of RUN had named "
                    "by then must be found within --pages pages, and W's next must name whom the "
                    "run briefed or redirected first after then (where it could know: see the "
                    "README). Exit 1 naming what was missed, or when there is neither a route nor a "
                    "next action to test (nothing to test).")
    parser.add_argument("run")
    parser.add_argument("--until", metavar="EVENT|SEQ|TIME")
    parser.add_argument("--pages", type=integer, default=2, help="pages read per query (default 2)")
    parser.set_defaults(handler=resume)

    parser = subparsers.add_parser(
        "reuse", parents=[common],
        help="the library steps a run cites come back: for its Fix, and (--per-step) for each step",
        description="For each RUN (or --all): archive-search over the library (the run's own steps "
                    "left out) with the Fix problem and criterion, setting = the Fix setting; every "
                    "library step the run cites (a parent in tree.json, or a global id in a brief, "
                    "except on a line saying 'not an input' or 'left out') must come back within "
                    "--pages pages. "
                    "With --per-step, every step citing library steps is also a query (its "
                    "statement, its setting; leave-one-out) judged by those citations, run through "
                    "the paging evaluator. PASS/FAIL against the threshold in [reuse]; 'nothing to "
                    "test' (exit 1) when nothing is cited.")
    parser.add_argument("runs", metavar="RUN", nargs="*", help="the runs to test (or --all)")
    parser.add_argument("--all", action="store_true", help="every run of the workspace")
    parser.add_argument("--per-step", action="store_true",
                        help="every step citing the library is a query, through the paging evaluator")
    parser.add_argument("--pages", type=integer, metavar="N",
                        help="pages read per query (default: the config's reuse.pages)")
    parser.add_argument("--until", metavar="TIME",
                        help="memory as it stood then: the search, the library entries required "
                             "(inserted by then) and, --per-step, the steps asked (written by then: "
                             "named, or inserted)")
    parser.add_argument("--runs-before", action="store_true",
                        help="only library entries inserted before the run started are required")
    parser.add_argument("--strategy", action="append", choices=STRATEGY_NAMES, metavar="S",
                        help="--per-step: strategies to compare beside the default (repeatable; "
                        f"{', '.join(STRATEGY_NAMES)})")
    parser.add_argument("--max-pages", type=integer, default=None, metavar="N",
                        help="--per-step: recall by page up to N pages, and loss against N (default 10, "
                        "or --pages when more; at least --pages)")
    parser.add_argument("--trec-out", type=named,
                        metavar="FILE", help="--per-step: every ranking as a TREC run")
    parser.add_argument("--report", type=named, metavar="DIR", help="--per-step: DIR/report.md and the plot")
    parser.add_argument("--write-queries", type=named, metavar="DIR",
                        help="--per-step: write the derived queries and qrels as SPEC §10 files")
    parser.set_defaults(handler=reuse)


def resume(args, ctx) -> int:
    from mem_retrieval.eval.resume import resume as run_resume

    report = run_resume(ctx.memory().retriever, args.run, args.until, args.pages)
    ctx.emit(report.as_dict(), report.text())
    return 0 if report.passed else 1


def reuse(args, ctx) -> int:
    from mem_retrieval.eval.paging import check_pages
    from mem_retrieval.eval.reuse import overall, reuse as run_reuse
    from mem_retrieval.records.errors import BadInput
    from mem_retrieval.records.parse import instant_last
    from mem_retrieval.retrieval.query import parse_time_arg

    if args.all == bool(args.runs):
        raise BadInput("give RUN… or --all, not both" if args.all else "give RUN… or --all")
    given = [f"--{name.replace('_', '-')}" for name in PER_STEP_ONLY if getattr(args, name) is not None]
    if given and not args.per_step:
        raise BadInput(f"{', '.join(given)}: only with --per-step")
    asked_max = args.max_pages
    if args.per_step:
        args.max_pages = MAX_PAGES if args.max_pages is None else args.max_pages
        check_pages(args.max_pages, "max_pages")
    until = parse_time_arg(args.until.strip()) if args.until is not None else None  # '' too: not "now"
    if args.until is not None and until is None:
        raise BadInput(f"{args.until!r} is not an ISO time with a zone", param="until")
    if until is not None:  # as of the end of the instant it names, as every --until (Retriever.until)
        until = instant_last(until, args.until.strip())
    memory = ctx.memory()
    config = memory.config.reuse
    runs = memory.workspace.check_runs(None if args.all else args.runs)
    if not runs and not args.per_step:  # --all of a workspace without runs: never PASS
        ctx.emit({"fix": [], "verdict": "nothing to test", "pass": False},
                 "reuse: nothing to test (the workspace has no runs)")
        return 1
    pages = args.pages if args.pages is not None else config.pages
    check_pages(pages)
    if args.per_step and asked_max is not None and asked_max < pages:  # it was raised to pages, unsaid
        raise BadInput(f"{asked_max} is fewer than the {pages} pages an agent reads (--pages, "
                       "reuse.pages): the evaluation reads at least those", param="max_pages")
    cut = memory.retriever.resolve_until(args.until, None) if until is not None else None
    per_step = _per_step(args, ctx, memory, runs, pages, until, cut) if args.per_step else None
    fixes = [run_reuse(memory.retriever, run, pages, config.fix_recall, runs_before=args.runs_before,
                       until=until, cut=cut) for run in runs]
    if per_step:  # its own verdict; the Fix queries reported apart, every run's (a run with nothing
        verdict = per_step.verdict  # to test was left out in silence)
        apart = ([f"Fix queries, apart from the verdict: {overall(fixes)[1].removeprefix('reuse: ')}"]
                 if len(fixes) > 1 else [])
        text = "\n\n".join([f.text() for f in fixes] + apart + [per_step.text()])
        data = {"fix": [f.as_dict() for f in fixes], "per_step": per_step.as_dict()}
    elif len(fixes) == 1:
        verdict, text, data = fixes[0].verdict, fixes[0].text(), fixes[0].as_dict()
    else:
        verdict, line = overall(fixes)
        text = "\n\n".join([f.text() for f in fixes] + [line])
        data = {"fix": [f.as_dict() for f in fixes], "verdict": verdict, "pass": verdict == "PASS"}
    ctx.emit(data, text)
    return 0 if verdict == "PASS" else 1


PER_STEP_ONLY = ("strategy", "trec_out", "report", "write_queries", "max_pages")
MAX_PAGES = 10  # --per-step's default --max-pages


def _per_step(args, ctx, memory, runs, pages, until, cut):
    from pathlib import Path

    from mem_retrieval.cli.outputs import check_apart, check_file, check_folder, write_all, writing
    from mem_retrieval.eval.derived import derive, write, written_files
    from mem_retrieval.eval.paging_report import output_files, report_files
    from mem_retrieval.eval.reuse import reuse_per_step

    check_apart({"trec_out": (args.trec_out, [args.trec_out]),  # first: nothing probed in the records
                 "report": (args.report, report_files(args.report) if args.report else []),
                 "write_queries": (args.write_queries,
                                   written_files(args.write_queries) if args.write_queries else [])}, {},
                memory.workspace)
    check_file(args.trec_out, "trec_out")
    check_folder(args.report, "report")
    check_folder(args.write_queries, "write_queries")
    derived = derive(memory.workspace, runs, runs_before=args.runs_before, until=until)
    ctx.warn_if_tuned_on(memory, [q.step for q in derived.queries if q.step])
    if args.write_queries:
        with writing(args.write_queries, "write_queries"):
            written = write(derived, Path(args.write_queries))
        for path in written:
            ctx.note(f"wrote {path}")
    result = reuse_per_step(memory.retriever, derived, runs, args.strategy or [],
                            memory.config.search.strategy, pages, memory.config.reuse.step_recall,
                            args.max_pages, cut, progress=True)
    if result.evaluation is not None:
        write_all(ctx, output_files(result.evaluation, args.trec_out and Path(args.trec_out),
                                    args.report and Path(args.report)))
    return result
