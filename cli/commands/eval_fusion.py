"""`mem eval fusion --queries Q --qrels R [--strategy S] [--asked run|none] [--folds N]
[--folds-by run|setting] [--step X] [--guard WORKSPACE QUERIES QRELS]`: the fusion weights of a
graph strategy for queries asked from a run or from none, chosen by cross-validation with folds by
run or by setting (eval/fusion.py)."""

from __future__ import annotations

from mem_retrieval.cli.commands.evaluate import QRELS_HELP, QUERIES_HELP
from mem_retrieval.cli.outputs import integer, named, number

ORDER = 20
GRAPH_STRATEGIES = ("rerank-graph", "graph")
ASKED = {"run": True, "none": False}     # --asked: the queries asked from a run, or from none


def register(subparsers, common) -> None:
    parser = subparsers.add_parser(
        "fusion", parents=[common], help="choose a graph strategy's fusion weights by cross-validation",
        description="Read each judged query's candidates with their features once (leave-one-out), "
                    "score every weight vector of a grid on the simplex, and choose the weights "
                    "that maximise mean R@10 + R@50 + nDCG@10: on every query (what [fusion.<S>] "
                    "should hold, or [fusion.<S>_in_run] for queries asked from a run) and, for "
                    "each fold of runs (or of settings), on the other folds only (the "
                    "cross-validated figures: how well the choice generalises).")
    parser.add_argument("--queries", type=named,
                        required=True, metavar="FILE", help=QUERIES_HELP)
    parser.add_argument("--qrels", type=named, required=True, metavar="FILE", help=QRELS_HELP)
    parser.add_argument("--strategy", default=GRAPH_STRATEGIES[0], choices=GRAPH_STRATEGIES,
                        metavar="S", help=f"{' or '.join(GRAPH_STRATEGIES)} (default {GRAPH_STRATEGIES[0]})")
    parser.add_argument("--asked", choices=tuple(ASKED), metavar="run|none",
                        help="tune the weights of the queries asked from a run ([fusion.<S>_in_run]) "
                             "or from none ([fusion.<S>]); only those queries count, of the guard "
                             "set too (default: the kind of the queries, when they are of one)")
    parser.add_argument("--folds", type=integer, default=5, metavar="N",
                        help="folds of whole runs, or settings (default 5; at most one per group)")
    parser.add_argument("--folds-by", default="run", metavar="run|setting",
                        help="what a fold holds whole: runs (default), or settings, to see how "
                             "weights chosen on other corpora serve one never seen")
    parser.add_argument("--step", type=number, default=0.1, metavar="X",
                        help="the grid's step on each weight (default 0.1)")
    parser.add_argument("--guard", nargs=3, metavar=("WORKSPACE", "QUERIES", "QRELS"),
                        help="a second judged set (its own workspace) whose nDCG@10 the chosen "
                             "weights must keep at least at what the strategy scores on it with "
                             "the configured weights, and each fold's weights at what its text "
                             "ranking (rerank, or bm25 for graph) scores (e.g. the example set)")
    parser.set_defaults(handler=run_fusion)


def run_fusion(args, ctx) -> int:
    from dataclasses import asdict

    from mem_retrieval.eval.folds import FOLDS_BY
    from mem_retrieval.eval.fusion import MAX_GRID, TEXT_BASE, choose_weights, collect, grid_size
    from mem_retrieval.eval.paging_eval import read_judged
    from mem_retrieval.records.errors import BadInput

    if args.folds_by not in FOLDS_BY:  # checked here, not by argparse: no import at every start-up
        raise BadInput(f"{args.folds_by!r} is not one of {', '.join(FOLDS_BY)}", param="folds_by")
    if args.folds < 1:
        raise BadInput(f"{args.folds} is not a number of folds (at least 1)", param="folds")
    if not 0 < args.step <= 0.5 or abs(round(1 / args.step) * args.step - 1) > 1e-9:
        raise BadInput(f"{args.step:.6g} is not 1/n for a whole n of at least 2 (0.5, 0.25, 0.1, 0.05, …)",
                       param="step")
    if (size := grid_size(args.strategy, args.step)) > MAX_GRID:
        said = f"{size:,}" if size < 10**15 else f"a {len(str(size))}-digit number of"  # (1e-300)
        raise BadInput(f"{args.step} makes a grid of {said} weight vectors for {args.strategy}; at most "
                       f"{MAX_GRID:,} (0.05: {grid_size(args.strategy, 0.05):,})", param="step")
    queries, judgments, _ = read_judged(args.queries, args.qrels)
    qrels = judgments.qrels
    memory = ctx.memory()
    queries = _as_asked(ctx, memory, queries, args.queries)
    in_run = _asked(args, queries)
    queries = [q for q in queries if q.in_run == in_run]
    ctx.warn_if_unknown_steps(memory, [q.step for q in queries if q.step], args.queries)
    ctx.warn_if_unknown_settings(memory, [q.setting for q in queries if q.setting], args.queries)
    ctx.warn_if_unknown_judged(memory, qrels, queries, args.qrels)
    ctx.warn_if_tuned_on(memory, [q.step for q in queries if q.step])
    features = collect(memory.retriever, args.strategy, queries)
    guard = _guard(args, ctx, memory.config, in_run) if args.guard else None
    kind = _kind(in_run)
    if guard:
        ctx.note(f"guard: nDCG@10 at least {guard.floor:.3f} ({args.strategy}'s with the configured "
                 f"weights) on the {len(guard.features)} queries {kind} of {args.guard[1]}; in the "
                 f"folds at least {guard.fold_floor:.3f} ({TEXT_BASE[args.strategy]}'s: the configured "
                 f"weights may have been chosen on the queries a fold holds out)")
    elif args.guard:
        ctx.note(f"guard: {args.guard[1]} has no judged query {kind}: nothing to keep")
    configured = asdict(memory.config.fusion.weights(args.strategy, in_run=in_run))
    choice = choose_weights(features, qrels, args.strategy, folds=args.folds, step=args.step,
                            depth=memory.config.search.pool, guard=guard, configured=configured,
                            by=args.folds_by, progress=True)
    ctx.emit(choice.as_dict(), _text(choice, args.folds))
    return 0


def _one_group(by: str) -> str:
    if by == "run":
        return ("the queries are all of one run (their run, else their step's; queries with neither "
                "are one group), and folds by run need two")
    return "the queries are all of one setting, and folds by setting need two"


def _kind(in_run: bool) -> str:
    return "asked from a run" if in_run else "asked from no run"


def _asked(args, queries) -> bool:
    """Whether the weights tuned are those of queries asked from a run: ``--asked``, else the
    kind of every judged query (both kinds: bad usage, as each has a weight table of its own)."""
    from mem_retrieval.records.errors import BadInput

    if args.asked:
        if not any(q.in_run == ASKED[args.asked] for q in queries):
            raise BadInput(f"{args.asked}: no judged query of {args.queries} is "
                           f"{_kind(ASKED[args.asked])}", param="asked")
        return ASKED[args.asked]
    in_run = sum(q.in_run for q in queries)
    if 0 < in_run < len(queries):
        raise BadInput(f"run|none is needed: {args.queries} has {in_run} judged queries asked from "
                       f"a run and {len(queries) - in_run} from none, which have weights of their own",
                       param="asked")
    return in_run > 0


def _as_asked(ctx, memory, queries, source):
    """``queries`` as the search ranks them: one whose run is none here is asked from no run
    (``Retriever.asks_from``), said in a warning naming those runs."""
    from dataclasses import replace

    ctx.warn_if_unknown_runs(memory, [q.run for q in queries if q.run], source)
    none = {run for run in {q.run for q in queries} if memory.retriever.asks_from(run) != run}  # once a run
    return [replace(q, run=None) if q.run in none else q for q in queries]


def _guard(args, ctx, config, in_run: bool):
    """The guard set's features under the strategy being tuned, and its floors, over its queries of
    the kind tuned (``in_run``: the others are ranked by the other table): that strategy's nDCG@10
    there with the weights configured now (the chosen table must not make it worse), and the text
    strategy's it extends (``TEXT_BASE``: what each fold's choice must keep, as the configured
    weights may have been chosen on the queries a fold holds out). None when it has none."""

    from mem_retrieval.eval.fusion import TEXT_BASE, Guard, collect
    from mem_retrieval.eval.metrics import strategy_metrics
    from mem_retrieval.eval.paging_eval import read_judged
    from mem_retrieval.eval.ranker import make_ranker
    from mem_retrieval.memory import Memory

    root, queries_file, qrels_file = args.guard
    guard_memory = Memory.open(root, ctx.config_path)
    queries, judgments, _ = read_judged(queries_file, qrels_file)
    queries = [q for q in _as_asked(ctx, guard_memory, queries, queries_file) if q.in_run == in_run]
    if not queries:
        return None
    qrels = {q.qid: judgments.qrels[q.qid] for q in queries if q.qid in judgments.qrels}
    ranker = make_ranker(guard_memory.retriever)

    def ndcg(strategy: str) -> float:
        return strategy_metrics(ranker, strategy, queries, qrels, config.search.pool, ["nDCG@10"])["nDCG@10"]

    return Guard(collect(guard_memory.retriever, args.strategy, queries), qrels, ndcg(args.strategy),
                 ndcg(TEXT_BASE[args.strategy]))


def _text(choice, asked_folds: int) -> str:
    metrics = list(choice.in_sample)
    width = max(max(len(m) for m in metrics), 7)
    kind = _kind(choice.in_run)
    row = lambda label, values: "  ".join([label.ljust(15)] + [f"{values[m]:.3f}".ljust(width)
                                                               for m in metrics])
    lines = [f"fusion of {choice.strategy}: {choice.queries} judged queries {kind}, "
             + (f"{choice.folds} folds by {choice.by}, " if choice.cross_validated else "")
             + f"{choice.grid} weight vectors",
             "  ".join(["".ljust(15)] + [m.ljust(width) for m in metrics])]
    if choice.cross_validated:
        lines += [row("cross-validated", choice.cross_validated), row("in sample", choice.in_sample),
                  "weights chosen without each fold:"]
        lines += [f"  fold {k + 1}: " + ", ".join(f"{n} {w:g}" for n, w in weights.items())
                  for k, weights in enumerate(choice.fold_weights)]
    else:
        lines += [row("in sample", choice.in_sample),
                  "no cross-validation: " + ("--folds 1" if asked_folds == 1 else
                                             _one_group(choice.by))
                  + " (these figures are the chosen weights' own, optimistic)"]
    if choice.tied > 1:
        lines.append(f"{choice.tied} of {choice.grid} weight vectors do equally well on these queries: "
                     f"the nearest to the configured weights is chosen")
    if choice.admissible:
        lines.append(f"{choice.admissible} of {choice.grid} weight vectors keep the guard set; its "
                     f"nDCG@10 under the chosen weights: {choice.guard_ndcg:.3f}")
    elif choice.admissible == 0:
        lines.append(f"no weight vector keeps the guard set at {choice.guard_floor:.3f}: chosen among "
                     f"those coming closest (nDCG@10 {choice.guard_ndcg:.3f})")
    lines += ["chosen on every query (put in the workspace's solve/mem.toml, or a file for --config):", "",
              choice.toml().rstrip()]
    return "\n".join(lines)
