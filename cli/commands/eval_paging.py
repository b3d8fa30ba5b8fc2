"""`mem eval paging --queries Q --qrels R [--strategy S]… [--max-pages N] [--trec-out F] [--report DIR]`:
recall per page, simulated pagers' early-stop loss and the standard metrics, strategy by strategy."""

from __future__ import annotations

from pathlib import Path

from mem_retrieval.cli.commands.evaluate import QRELS_HELP, QUERIES_HELP
from mem_retrieval.cli.outputs import integer, named
from mem_retrieval.records.errors import plural
from mem_retrieval.retrieval.strategies import STRATEGIES

ORDER = 10


def register(subparsers, common) -> None:
    parser = subparsers.add_parser(
        "paging", parents=[common], help="recall per page, early stopping, strategies side by side",
        description="Run each retrieval strategy over the judged queries: R@5, R@10, R@50, RR@10, "
                    "nDCG@10, AP (ir_measures), recall after each page (search.page_size, 5), and the "
                    "early-stop loss of simulated pagers (first-page, fixed-2, patience-1, score-drop, "
                    "hint).")
    parser.add_argument("--queries", type=named,
                        required=True, metavar="FILE", help=QUERIES_HELP)
    parser.add_argument("--qrels", type=named, required=True, metavar="FILE", help=QRELS_HELP)
    parser.add_argument("--strategy", action="append", choices=STRATEGIES, metavar="S",
                        help=f"one of {', '.join(STRATEGIES)}; repeatable (default: all)")
    parser.add_argument("--max-pages", type=integer, default=10, metavar="N",
                        help="the most pages read: recall by page up to N, loss against N (default 10)")
    parser.add_argument("--trec-out", type=named,
                        metavar="FILE", help="write every strategy's ranking as a TREC run")
    parser.add_argument("--report", type=named,
                        metavar="DIR", help="write DIR/report.md and DIR/recall_by_page.png")
    parser.set_defaults(handler=run_paging)


def _check_outputs(args, workspace) -> None:
    """Refuse unusable output paths before the (long) evaluation runs."""
    from mem_retrieval.cli.outputs import check_apart, check_file, check_folder
    from mem_retrieval.eval.paging import check_pages
    from mem_retrieval.eval.paging_report import report_files

    check_pages(args.max_pages, "max_pages")
    check_apart({"trec_out": (args.trec_out, [args.trec_out]),  # first: nothing probed in the records
                 "report": (args.report, report_files(args.report) if args.report else [])},
                {"queries": args.queries, "qrels": args.qrels}, workspace)
    check_file(args.trec_out, "trec_out")
    check_folder(args.report, "report")


def run_paging(args, ctx) -> int:
    from mem_retrieval.cli.outputs import write_all
    from mem_retrieval.eval.paging_eval import evaluate_paging, read_judged, search_depth
    from mem_retrieval.eval.paging_report import output_files, table_text

    _check_outputs(args, ctx.workspace())
    chosen, judgments, unjudged = read_judged(args.queries, args.qrels)
    qrels = judgments.qrels
    if unjudged:
        ctx.note(f"{unjudged} of {len(chosen) + unjudged} queries have no relevant judgment: not scored")
    if args.trec_out and (loose := judgments.loose):
        ctx.note(f"{len(loose)} judged ids of {args.qrels} are not written composed (NFC), as "
                 f"{loose[0]!r}: this evaluation reads them composed, as the records hold them, and "
                 "--trec-out writes them so; trec_eval compares bytes, so give it the qrels composed")
    from mem_retrieval.eval.ranker import make_ranker
    from mem_retrieval.retrieval.hint import Hint

    memory = ctx.memory()
    config = memory.config
    ctx.warn_if_unknown_steps(memory, [q.step for q in chosen if q.step], args.queries)
    ctx.warn_if_unknown_runs(memory, [q.run for q in chosen if q.run], args.queries)
    ctx.warn_if_unknown_settings(memory, [q.setting for q in chosen if q.setting], args.queries)
    ctx.warn_if_unknown_judged(memory, qrels, chosen, args.qrels)
    ctx.warn_if_tuned_on(memory, [q.step for q in chosen if q.step])
    pool, size = config.search.pool, config.search.page_size
    if (args.max_pages - 1) * size >= pool:  # "loss against N" read as N pages of hits (20 were all)
        ctx.note(f"mem: warning: --max-pages {args.max_pages} reads past the longest list a search gives "
                 f"(search.pool {pool}: {plural(-(-pool // size), 'page')} of {size}): the pages after it "
                 "find nothing, as an agent's would; set search.pool (--config) to read deeper")
    ranker = make_ranker(memory.retriever)
    evaluation = evaluate_paging(
        ranker, chosen, qrels, strategies=args.strategy or STRATEGIES, max_pages=args.max_pages,
        page_size=config.search.page_size, hint=Hint.of(config.search),
        depth=search_depth(config.search.pool, args.max_pages, config.search.page_size),
        progress=True, qrels_file=args.qrels, default=config.search.strategy)
    write_all(ctx, output_files(evaluation, args.trec_out and Path(args.trec_out),
                                args.report and Path(args.report)))
    ctx.emit(evaluation.to_json(), table_text(evaluation))
    return 0

