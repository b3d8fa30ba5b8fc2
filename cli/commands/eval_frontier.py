"""`mem eval frontier`: the utility–capacity frontier of a memory problem (coverage and precision),
and how far a given memory (ids, a run's W, the library) sits below it."""

from __future__ import annotations

import argparse
from pathlib import Path

from mem_retrieval.records.errors import BadInput
from mem_retrieval.records.files import replace_atomic

ORDER = 30
PLOT_SUFFIXES = (".png", ".svg", ".pdf")
TABLE_ROWS = 30  # more sizes than this: the table keeps only the sizes where something changed


def register(subparsers, common) -> None:
    parser = subparsers.add_parser(
        "frontier", parents=[common], help="memory quality against the best memory of each size",
        description="U*(S), the largest weighted share of queries a memory of S events answers, for "
        "coverage (every event) and precision (true events only); exact by exhaustive search when "
        "small enough, else lazy greedy. With a memory: its coverage, precision, water inflation "
        "(coverage − precision) and loss (precision frontier at its size − its precision).")
    parser.add_argument("file", nargs="?", metavar="FILE",
                        help="JSON with queries, events and spans (or use --queries/--qrels)")
    parser.add_argument("--queries", metavar="Q", help="queries JSONL: the workspace's library steps "
                        "are the events, true when admissible (M2)")
    parser.add_argument("--qrels", metavar="R", help="TREC qrels: a step judged > 0 answers its query")
    parser.add_argument("--max-size", type=_count, metavar="N",
                        help="largest memory size on the frontier (default: every event)")
    parser.add_argument("--exact-limit", type=_count, metavar="N",
                        help="search exhaustively when the 2^n memories of the n events in some span "
                        "are at most N (default 2^20; never beyond n = 24)")
    given = parser.add_mutually_exclusive_group()
    given.add_argument("--memory", metavar="IDS", help="a memory to score: event ids, comma-separated")
    given.add_argument("--memory-from", metavar="RUN", help="score the events RUN's core.md names, "
                       "or 'library' for the library's steps")
    parser.add_argument("--plot", metavar="FILE.png", help="draw both frontiers and the memory")
    parser.set_defaults(handler=run_frontier)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def run_frontier(args: argparse.Namespace, ctx) -> int:
    """Build the problem, compute the frontier, score the memory, then draw and print."""
    from mem_retrieval.eval.frontier import frontier, score_memory
    from mem_retrieval.eval.frontier_input import memory_from, parse_memory, problem_from_workspace, read_problem

    if args.plot and Path(args.plot).suffix.lower() not in PLOT_SUFFIXES:
        raise BadInput(f"--plot: {args.plot} should end in {', '.join(PLOT_SUFFIXES)}")
    if args.file and (args.queries or args.qrels):
        raise BadInput("frontier: give FILE or --queries and --qrels, not both")
    if args.file:
        problem = read_problem(Path(args.file))
    elif args.queries and args.qrels:
        problem = problem_from_workspace(ctx.workspace(), Path(args.queries), Path(args.qrels))
    else:
        raise BadInput("frontier: give FILE, or --queries Q and --qrels R (with --workspace W)")
    memory = None
    if args.memory is not None:
        memory = parse_memory(args.memory, problem)
    elif args.memory_from:
        memory = memory_from(args.memory_from, ctx.workspace(), problem)
        if not memory:
            ctx.note(f"--memory-from {args.memory_from}: names no event of this problem (empty memory)")
    front = frontier(problem, args.max_size, args.exact_limit, reach=len(memory or ()))
    score = score_memory(front, memory) if memory is not None else None
    if args.plot:
        plot(front, score, Path(args.plot))
    ctx.emit(as_json(front, score), as_table(front, score))
    return 0


def _r(value: float) -> float:
    return round(value, 6) + 0.0  # no -0.0


def as_json(front, score) -> dict:
    """The shape other tools read (issue 5), plus greedy beside each size and the notes."""
    problem = front.problem
    ids = problem.event_ids
    rows = [{"size": size,
             "coverage": _r(front.coverage.value(size)),
             "precision": _r(front.precision.value(size)),
             "method": front.method,
             "coverage_memory": [ids[e] for e in front.coverage.memory(size)],
             "precision_memory": [ids[e] for e in front.precision.memory(size)],
             "greedy_coverage": _r(front.greedy_coverage.value(size)),
             "greedy_precision": _r(front.greedy_precision.value(size))}
            for size in range(front.max_size + 1)]
    memory = None
    if score is not None:
        memory = {"ids": list(score.ids), "size": score.size, "coverage": _r(score.coverage),
                  "precision": _r(score.precision), "water_inflation": _r(score.water_inflation),
                  "loss": _r(score.loss)}
    return {"events": len(ids), "queries": len(problem.query_ids), "frontier": rows, "memory": memory,
            "notes": front.notes()}


def as_table(front, score) -> str:
    """Sizes with both frontiers (greedy beside exact), the notes, and the memory's line."""
    problem = front.problem
    exact = front.method == "exact"
    true_events = sum(problem.truth)
    lines = [f"{len(problem.event_ids)} events ({true_events} true), {len(problem.query_ids)} queries, "
             f"{len(problem.spans)} spans ({problem.synergy} of several events); "
             f"computed in {front.seconds:.2f} s", *front.notes(), ""]
    header = f"{'size':>5}  {'coverage':>8}  {'precision':>9}"
    if exact:
        header += f"  {'greedy cov':>10}  {'greedy prec':>11}"
    lines.append(header + ("  precision memory" if exact else "  precision: greedy adds"))
    shown, previous = 0, None
    for size in range(front.max_size + 1):
        values = (front.coverage.value(size), front.precision.value(size),
                  front.greedy_coverage.value(size), front.greedy_precision.value(size))
        last = size == front.max_size
        if front.max_size + 1 > TABLE_ROWS and values == previous and not last:
            continue
        previous = values
        shown += 1
        row = f"{size:>5}  {values[0]:>8.3f}  {values[1]:>9.3f}"
        if exact:
            row += f"  {values[2]:>10.3f}  {values[3]:>11.3f}"
        memory = front.precision.memory(size)
        if not exact:  # a chain: name the event this size adds
            memory = memory[-1:] if len(memory) == size else ()
        lines.append(row + "  " + _ids(problem, memory))
    if shown < front.max_size + 1:
        lines.append(f"({front.max_size + 1 - shown} sizes where nothing changed left out; "
                     f"--json lists every size)")
    if score is not None:
        shown_ids = " ".join(score.ids) or "—"
        lines += ["", f"memory {shown_ids if len(shown_ids) <= 60 else shown_ids[:59] + '…'}",
                  f"  size {score.size}  coverage {score.coverage:.3f}  precision {score.precision:.3f}  "
                  f"water inflation {score.water_inflation:.3f}  loss {score.loss:.3f}"
                  + ("" if score.method == "exact" else "  (against greedy: a lower bound of U*, "
                     "so the true loss is at least this)")]
    return "\n".join(lines)


def _ids(problem, memory, width: int = 60) -> str:
    text = " ".join(problem.event_ids[e] for e in memory) or "—"
    return text if len(text) <= width else text[:width - 1] + "…"


def plot(front, score, path: Path) -> None:
    """Both frontiers as steps, greedy dashed beside exact, the memory as two points (coverage above
    precision: the gap is its water inflation). Written whole or not at all."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.ticker import MaxNLocator

    sizes = list(range(max(front.max_size, score.size if score else 0) + 1))  # reach the memory
    marker = "o" if len(sizes) <= 50 else None  # U*(S) lives on whole sizes
    figure, axes = plt.subplots(figsize=(7, 4.5))
    axes.step(sizes, [front.coverage.value(s) for s in sizes], where="post", marker=marker,
              markersize=5, linewidth=2.5, label=f"coverage U*(S) ({front.method})")
    axes.step(sizes, [front.precision.value(s) for s in sizes], where="post", marker=marker,
              markersize=4, label=f"precision U*(S) ({front.method})")
    if front.method == "exact":
        axes.step(sizes, [front.greedy_coverage.value(s) for s in sizes], where="post",
                  linestyle="--", alpha=0.6, label="coverage, greedy")
        axes.step(sizes, [front.greedy_precision.value(s) for s in sizes], where="post",
                  linestyle="--", alpha=0.6, label="precision, greedy")
    if score is not None:
        axes.plot([score.size, score.size], [score.precision, score.coverage], color="black", lw=1)
        axes.scatter([score.size], [score.coverage], marker="o", color="black", zorder=3,
                     label=f"memory coverage {score.coverage:.2f}")
        axes.scatter([score.size], [score.precision], marker="x", color="red", zorder=3,
                     label=f"memory precision {score.precision:.2f} (loss {score.loss:.2f})")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("memory size S (events)")
    axes.set_ylabel("weighted share of queries answered")
    axes.set_ylim(0, 1.05)
    axes.set_title("utility–capacity frontier")
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    try:
        replace_atomic(path, lambda tmp: figure.savefig(tmp, format=path.suffix.lstrip(".") or "png"))
    except OSError as err:
        raise BadInput(f"--plot: cannot write {path}: {err.strerror}") from None
    finally:
        plt.close(figure)
