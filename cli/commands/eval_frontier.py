"""`mem eval frontier`: the utility–capacity frontier of a memory problem (coverage and precision),
and how far a given memory (ids, a run's W, the library) sits below it."""

from __future__ import annotations

import argparse
from pathlib import Path

from mem_retrieval.cli.outputs import named
from mem_retrieval.records.errors import BadInput

ORDER = 30


def register(subparsers, common) -> None:
    parser = subparsers.add_parser(
        "frontier", parents=[common], help="memory quality against the best memory of each size",
        description="U*(S), the largest weighted share of queries a memory of S events answers, for "
        "coverage (every event) and precision (true events only); exact by exhaustive search when "
        "small enough, else lazy greedy. With a memory: its coverage, precision, water inflation "
        "(coverage − precision) and loss (precision frontier at its size − its precision).")
    parser.add_argument("file", nargs="?", metavar="FILE",
                        help="JSON with queries, events and spans (or use --queries/--qrels)")
    parser.add_argument("--queries", type=named,
                        metavar="Q", help="queries JSONL: the workspace's library steps "
                        "are the events, true when admissible (M2)")
    parser.add_argument("--qrels", type=named,
                        metavar="R", help="TREC qrels: a step judged > 0 answers its query")
    parser.add_argument("--max-size", type=_count, metavar="N",
                        help="largest memory size on the frontier (default: every event)")
    parser.add_argument("--exact-limit", type=_count, metavar="N",
                        help="search exhaustively when the 2^n memories of the n events in some span "
                        "are at most N (default 2^20; never beyond n = 24)")
    given = parser.add_mutually_exclusive_group()
    given.add_argument("--memory", metavar="IDS", help="a memory to score: event ids, comma-separated")
    given.add_argument("--memory-from", type=named,
                       metavar="RUN", help="score the events RUN's core.md names, "
                       "or 'library' for the library's steps")
    parser.add_argument("--plot", type=named, metavar="FILE.png", help="draw both frontiers and the memory")
    parser.set_defaults(handler=run_frontier)


def _count(text: str) -> int:
    from mem_retrieval.cli.outputs import integer

    value = integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def run_frontier(args: argparse.Namespace, ctx) -> int:
    """Build the problem, compute the frontier, score the memory, then draw and print."""
    from mem_retrieval.cli.outputs import check_apart, check_file, writing
    from mem_retrieval.eval.frontier import frontier, score_memory
    from mem_retrieval.eval.frontier_input import (memory_from, parse_memory, problem_from_workspace,
                                                   read_problem)
    from mem_retrieval.eval.frontier_report import PLOT_SUFFIXES, as_json, as_table, plot

    if args.plot and Path(args.plot).suffix.lower() not in PLOT_SUFFIXES:
        raise BadInput(f"{args.plot} should end in {', '.join(PLOT_SUFFIXES)}", param="plot")
    check_apart({"plot": (args.plot, [args.plot])},  # first: nothing probed in the records
                {"file": args.file, "queries": args.queries, "qrels": args.qrels},
                ctx.workspace() if args.queries else None)
    check_file(args.plot, "plot")
    if args.file and (args.queries or args.qrels):
        raise BadInput("give FILE or --queries and --qrels, not both")
    if ctx.config_path is not None:  # it reads no setting, but a --config given is read (and a bad
        ctx.config(ctx.workspace() if args.queries or args.memory_from else None)  # one refused)
    if args.file:
        problem = read_problem(Path(args.file))
    elif args.queries and args.qrels:
        problem, outside = problem_from_workspace(ctx.workspace(), Path(args.queries), Path(args.qrels))
        ctx.warn_if_outside_library(outside, args.qrels)
    else:
        raise BadInput("give FILE, or --queries Q and --qrels R (with --workspace W)")
    memory = None
    if args.memory is not None:
        memory = parse_memory(args.memory, problem)
    elif args.memory_from:
        memory = memory_from(args.memory_from, ctx.workspace(), problem)
        if not memory:
            ctx.note(f"mem: --memory-from {args.memory_from}: names no event of this problem (empty memory)")
    front = frontier(problem, args.max_size, args.exact_limit, reach=len(memory or ()))
    score = score_memory(front, memory) if memory is not None else None
    if args.plot:
        with writing(args.plot, "plot"):
            plot(front, score, Path(args.plot))
    ctx.emit(as_json(front, score), as_table(front, score))
    return 0
