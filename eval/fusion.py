"""Choosing a graph strategy's fusion weights by cross-validation, folds by run.

The candidates of every judged query are read once, with their features (bm25, cosine, vote,
expanded, prior, context, affinity: ``Retriever.candidates``, leave-one-out as the evaluator asks).
Each weight vector of a grid on the simplex ranks them as the strategy would (the query's id hits
first, then the fused score, cut to ``search.pool``), and is scored per query by ir_measures.
Queries are split into folds by their run (a run's queries never straddle folds, so no weight is
chosen on the run it is scored on), or by their setting (how weights chosen on other corpora serve
one never seen); each fold is scored with the weights that did best on the other folds (queries of
one run, or one setting, allow no such split: the figures are then in sample only). The objective is the mean of
R@10, R@50 and nDCG@10; where several weight vectors tie for best, the one nearest the configured
weights is chosen, so weights move only where the queries say they should. The weights chosen on
every query are what the config's table should hold: ``[fusion.<strategy>_in_run]`` when the
queries are asked from a run, ``[fusion.<strategy>]`` when from none (each kind is chosen on its
own queries); the cross-validated figures say how well that choice generalises."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mem_retrieval.configs import table_of
from mem_retrieval.eval.folds import FOLDS_BY, group_folds
from mem_retrieval.eval.judgments import Qrels, Query
from mem_retrieval.eval.metrics import judged, per_query
from mem_retrieval.eval.ranker import archive_query
from mem_retrieval.retrieval.retriever import Retriever
from mem_retrieval.retrieval.strategies import FEATURES as STRATEGY_FEATURES
from mem_retrieval.retrieval.strategies import MODEL_FEATURES, fused_scores

OBJECTIVE = ("R@10", "R@50", "nDCG@10")
REPORTED = ("R@5", "R@10", "R@50", "nDCG@10", "RR@10", "AP")
FEATURES = {"graph": tuple(f for f in STRATEGY_FEATURES if f not in MODEL_FEATURES),  # no model
            "rerank-graph": STRATEGY_FEATURES}


@dataclass(frozen=True)
class QueryFeatures:
    """One query's candidates: id hits (ranked first, in order), then feature columns."""

    qid: str
    run: str
    ids: tuple[str, ...]
    gids: tuple[str, ...]
    features: dict[str, list[float]]
    in_run: bool            # asked from a run (its ``run``): ranked by ``[fusion.<strategy>_in_run]``
    setting: str = ""       # the query's setting ("" without one): the group of ``--folds-by setting``


def collect(retriever: Retriever, strategy: str, queries: Sequence[Query]) -> list[QueryFeatures]:
    """The candidates of each query with their raw features (leave-one-out: ``run`` excluded,
    ``step`` hidden)."""
    out = []
    for query in queries:
        ids, found = retriever.candidates(archive_query(query, strategy))
        out.append(QueryFeatures(query.qid, _run_of(query), tuple(c.gid for c in ids),
                                 tuple(c.gid for c in found),
                                 {name: [getattr(c, name) or 0.0 for c in found]
                                  for name in FEATURES[strategy]}, query.in_run, query.setting or ""))
    return out


def _run_of(query: Query) -> str:
    return query.run or (query.step.split("/", 1)[0] if query.step else "")


def rank(features: QueryFeatures, weights: dict[str, float], depth: int) -> dict[str, float]:
    """One query's run ``{gid: score}`` under ``weights`` (features normalised as ``fuse`` does),
    its id hits first, cut to ``depth``: what the strategy's ``fuse`` ranks, for the metrics."""
    fused = fused_scores(features.features, weights) if features.gids else []
    order = sorted(range(len(features.gids)), key=lambda i: (-fused[i], features.gids[i]))
    ranked = list(features.ids) + [features.gids[i] for i in order if features.gids[i] not in features.ids]
    return {gid: float(len(ranked) - i) for i, gid in enumerate(ranked[:max(depth, len(features.ids))])}


def simplex(names: Sequence[str], step: float) -> list[dict[str, float]]:
    """Every weight vector over ``names`` with entries in multiples of ``step`` summing to 1."""
    units = round(1 / step)
    grid = []
    for cut in itertools.combinations(range(units + len(names) - 1), len(names) - 1):
        parts = [b - a - 1 for a, b in zip((-1, *cut), (*cut, units + len(names) - 1))]
        grid.append({name: round(part * step, 10) for name, part in zip(names, parts)})
    return grid


@dataclass(frozen=True)
class FusionChoice:
    strategy: str
    in_run: bool                            # the weights of queries asked from a run, or from none
    queries: int
    folds: int
    grid: int
    chosen: dict[str, float]                # on every query: the config's weights
    fold_weights: list[dict[str, float]]    # chosen without each fold (none with one fold)
    cross_validated: dict[str, float] | None  # each fold scored with weights chosen without it
    in_sample: dict[str, float]             # every query scored with ``chosen`` (optimistic)
    tied: int = 1                           # grid points as good as ``chosen`` on every query
    by: str = "run"                         # what a fold holds whole: "run" or "setting"
    admissible: int | None = None           # grid points keeping the guard set at its floor
    guard_ndcg: float | None = None         # the guard set's nDCG@10 under ``chosen``
    guard_floor: float | None = None        # what the guard set must keep

    def toml(self) -> str:
        return f"[fusion.{table_of(self.strategy, self.in_run)}]\n" + "".join(
            f"{name} = {self.chosen.get(name, 0.0):g}\n" for name in STRATEGY_FEATURES)

    def as_dict(self) -> dict:
        return {"strategy": self.strategy, "in_run": self.in_run, "queries": self.queries,
                "folds": self.folds, "folds_by": self.by, "grid": self.grid, "chosen": self.chosen,
                "fold_weights": self.fold_weights,
                "cross_validated": self.cross_validated, "in_sample": self.in_sample, "tied": self.tied,
                "admissible": self.admissible, "guard_ndcg": self.guard_ndcg,
                "guard_floor": self.guard_floor}


@dataclass(frozen=True)
class Guard:
    """A second query set the chosen weights must not make worse: its nDCG@10 must stay at or
    above ``floor`` (what the current default scores on it). Its queries may come from another
    workspace; they only constrain the choice, they never score it."""

    features: Sequence[QueryFeatures]
    qrels: Qrels
    floor: float


def choose_weights(features: Sequence[QueryFeatures], qrels: Qrels, strategy: str, *, folds: int = 5,
                   step: float = 0.1, depth: int = 100, guard: Guard | None = None,
                   configured: Mapping[str, float] | None = None, by: str = "run",
                   progress: bool = False) -> FusionChoice:
    """The grid's best weights on every query, and the cross-validated figures of that choice
    (None when the queries form one group, or ``folds`` is 1: no fold can then be held out). Folds
    hold whole runs, or with ``by="setting"`` whole settings (how weights chosen on other corpora
    serve one never seen; the queries without a setting form a group of their own). With
    ``guard``, only the weights that keep the guard set at its floor are eligible (when none does,
    those that come closest: ``admissible`` is then 0). Of weight vectors tying for best, the one
    nearest (L1) the ``configured`` weights is chosen (without them, the first of the grid). The
    queries are all asked from a run or all from none, and so are the guard's: each kind has a
    weight table of its own (``FusionChoice.in_run``)."""
    from tqdm import tqdm

    kinds = {f.in_run for f in features} | ({f.in_run for f in guard.features} if guard else set())
    if len(kinds) > 1:
        raise ValueError("queries asked from a run and from none have weights of their own: "
                         "choose each on its own")
    in_run = kinds == {True}
    gold = judged(qrels)
    grid = simplex(FEATURES[strategy], step)
    if by not in FOLDS_BY:
        raise ValueError(f"folds by {by!r}: not one of {', '.join(FOLDS_BY)}")
    groups = [f.run if by == "run" else f.setting for f in features]
    folds = max(1, min(folds, len(set(groups))))
    fold = group_folds(groups, folds)
    scores = []  # per grid point: {qid: {metric: value}}
    kept = []    # per grid point: the guard set's nDCG@10 (1 without a guard)
    for weights in tqdm(grid, desc="fusion grid", disable=None if progress else True, leave=False):
        run = {f.qid: rank(f, weights, depth) for f in features}
        scores.append(per_query(run, gold, REPORTED))
        kept.append(guarded_ndcg(guard, weights, depth) if guard else 1.0)
    admissible = [p for p in range(len(grid)) if guard is None or kept[p] >= guard.floor - 1e-9]
    candidates = admissible or [p for p in range(len(grid)) if kept[p] >= max(kept) - 1e-9]

    def distance(point: int) -> float:
        return sum(abs(grid[point][n] - configured.get(n, 0.0)) for n in grid[point]) if configured else 0.0

    def objective(point: int, chosen_queries: list[str]) -> float:
        return round(sum(scores[point][q][m] for q in chosen_queries for m in OBJECTIVE), 9)

    def best(chosen_queries: list[str]) -> tuple[int, int]:
        """The best point on ``chosen_queries``, and how many points score as well."""
        value = {p: objective(p, chosen_queries) for p in candidates}
        top = max(value.values())
        tied = [p for p in candidates if value[p] == top]
        return min(tied, key=lambda p: (round(distance(p), 9), p)), len(tied)

    qids = [f.qid for f in features]
    held: dict[str, dict[str, float]] = {}
    fold_weights = []
    for k in range(folds if folds > 1 else 0):
        point, _ = best([q for q, f in zip(qids, fold) if f != k])
        fold_weights.append(grid[point])
        held.update({q: scores[point][q] for q, f in zip(qids, fold) if f == k})
    chosen, tied = best(qids)
    mean = lambda per: {m: sum(per[q][m] for q in qids) / max(len(qids), 1) for m in REPORTED}
    return FusionChoice(strategy, in_run, len(qids), folds, len(grid), grid[chosen], fold_weights,
                        mean(held) if folds > 1 else None, mean(scores[chosen]), tied, by,
                        len(admissible) if guard else None, kept[chosen] if guard else None,
                        guard.floor if guard else None)


def guarded_ndcg(guard: Guard, weights: dict[str, float], depth: int) -> float:
    """The guard set's mean nDCG@10 under ``weights``."""
    from mem_retrieval.eval.metrics import mean_metrics

    run = {f.qid: rank(f, weights, depth) for f in guard.features}
    return mean_metrics(run, judged(guard.qrels), ["nDCG@10"])["nDCG@10"]
