"""Choosing a graph strategy's fusion weights by cross-validation, folds by run.

The candidates of every judged query are read once, with their features (bm25, cosine, vote,
expanded, prior, context, affinity: ``Retriever.candidates``, leave-one-out as the evaluator asks).
Each weight vector of a grid on the simplex ranks them as the strategy would (the query's id hits
first, then the fused score, cut to ``search.pool``), and is scored per query (below).
Queries are split into folds by their run (a run's queries never straddle folds, so no weight is
chosen on the run it is scored on), or by their setting (how weights chosen on other corpora serve
one never seen); each fold is scored with the weights that did best on the other folds (queries of
one run, or one setting, allow no such split: the figures are then in sample only). The
objective is the mean of R@10, R@50 and nDCG@10; where several weight vectors tie for best, the
one nearest the configured weights is chosen, so weights move only where the queries say they
should. The weights chosen on every query are what the config's table should hold:
``[fusion.<strategy>_in_run]`` when the queries are asked from a run, ``[fusion.<strategy>]`` when
from none (each kind is chosen on its own queries); the cross-validated figures say how well that
choice generalises.

The grid is scored from where each query's relevant candidates fall under every weight vector at
once (``grid_metrics``, numpy): asking ir_measures for 8,008 ranked lists per query took 5 to 18
minutes on the development set, against 10 to 21 seconds. Those figures only choose; every figure
reported (cross-validated, in sample, the guard's) is ir_measures' on the chosen weights'
rankings, and the tests hold ``grid_metrics`` to ir_measures on every point of random grids."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mem_retrieval.configs import RUN_FEATURES, table_of
from mem_retrieval.eval.folds import FOLDS_BY, group_folds
from mem_retrieval.eval.judgments import Qrels, Query
from mem_retrieval.eval.judgments import judged
from mem_retrieval.eval.metrics import per_query
from mem_retrieval.eval.ranker import archive_query
from mem_retrieval.retrieval.retriever import Retriever
from mem_retrieval.retrieval.strategies import FEATURES as STRATEGY_FEATURES
from mem_retrieval.retrieval.strategies import MODEL_FEATURES, STRATEGIES, fused_score_grid, fused_scores

if TYPE_CHECKING:
    import numpy as np

OBJECTIVE = ("R@10", "R@50", "nDCG@10")
REPORTED = ("R@5", "R@10", "R@50", "nDCG@10", "RR@10", "AP")
FEATURES = {"graph": tuple(f for f in STRATEGY_FEATURES if f not in MODEL_FEATURES),  # no model
            "rerank-graph": STRATEGY_FEATURES}
TEXT_BASE = {name: STRATEGIES[name].extends for name in FEATURES}  # the text ranking each one extends


@dataclass(frozen=True)
class QueryFeatures:
    """One query's candidates: id hits (ranked first, in order), then feature columns."""

    qid: str
    run: str
    ids: tuple[str, ...]
    gids: tuple[str, ...]
    features: dict[str, list[float]]
    in_run: bool            # asked from a run (its ``run``): ranked by ``[fusion.<strategy>_in_run]``
    setting: str = ""       # the group of ``--folds-by setting`` (``setting_group``; "" without one)

    @property
    def named(self) -> list[str]:
        """The id hits as they are ranked: first, in order, each once."""
        return list(dict.fromkeys(self.ids))


def collect(retriever: Retriever, strategy: str, queries: Sequence[Query]) -> list[QueryFeatures]:
    """The candidates of each query with their raw features (leave-one-out: ``run`` excluded,
    ``step`` hidden)."""
    out, ontology = [], retriever.ontology()
    for query in queries:
        search = archive_query(retriever, query, strategy)
        ids, found = retriever.candidates(search) if search is not None else ([], [])
        out.append(QueryFeatures(query.qid, _run_of(query), tuple(c.gid for c in ids),
                                 tuple(c.gid for c in found),
                                 {name: [getattr(c, name) or 0.0 for c in found]
                                  for name in FEATURES[strategy]}, query.in_run,
                                 setting_group(ontology, query.setting)))
    return out


def setting_group(ontology, setting: str | None) -> str:
    """The group of ``--folds-by setting`` a query's setting falls in: its clauses as M3 reads them
    (``Ontology.reading``: an entry by its name or any alias, ``Fq((t))`` as ``F_q((t))``),
    sorted, so that one setting spelled two ways is never split across folds; "" without one."""
    return "; ".join(sorted(ontology.reading(setting))) if setting else ""


def _run_of(query: Query) -> str:
    return query.run or (query.step.split("/", 1)[0] if query.step else "")


def rank(features: QueryFeatures, weights: dict[str, float], depth: int) -> dict[str, float]:
    """One query's run ``{gid: score}`` under ``weights`` (features normalised as ``fuse`` does),
    its id hits first (each once), cut to ``depth``: what the strategy's ``fuse`` ranks, for the
    metrics."""
    ids = features.named
    fused = fused_scores(features.features, weights) if features.gids else []
    order = sorted(range(len(features.gids)), key=lambda i: (-fused[i], features.gids[i]))
    ranked = ids + [features.gids[i] for i in order if features.gids[i] not in ids]
    return {gid: float(len(ranked) - i) for i, gid in enumerate(ranked[:max(depth, len(ids))])}


def grid_metrics(features: Sequence[QueryFeatures], qrels: Qrels, grid: Sequence[Mapping[str, float]],
                 depth: int, metrics: Sequence[str] = OBJECTIVE, progress: bool = False) -> "np.ndarray":
    """``[point, query, metric]``: each ``R@k`` or ``nDCG@k`` of ``metrics`` for every query
    (``features``) ranked by every weight vector of ``grid`` as ``rank`` ranks it (id hits first,
    then the fused score, ties by id, cut to ``depth``), as trec_eval defines them: recall counts
    grades > 0 over all the query's judged ones; nDCG's gain is the grade, its discount
    log2(position + 1), its ideal the best grades in order. A query the qrels do not judge scores 0.
    From where each relevant candidate falls, for every point at once: no ranked list is built."""
    import numpy as np
    from tqdm import tqdm

    cuts = []
    for name in metrics:
        kind, _, cut = name.partition("@")
        if kind not in ("R", "nDCG") or not cut.isdigit():
            raise ValueError(f"{name}: grid_metrics computes R@k and nDCG@k only")
        cuts.append((kind, int(cut)))
    gold = judged(qrels)
    out = np.zeros((len(grid), len(features), len(metrics)))
    for q, f in enumerate(tqdm(features, desc="fusion grid", disable=None if progress else True,
                               leave=False)):
        grades = {doc: grade for doc, grade in gold.get(f.qid, {}).items() if grade > 0}
        if not grades:
            continue
        positions, gains = _relevant_positions(f, grades, grid, depth)
        ideal = sorted(grades.values(), reverse=True)
        for m, (kind, cut) in enumerate(cuts):
            within = positions < cut
            if kind == "R":
                out[:, q, m] = within.sum(axis=1) / len(grades)
            else:
                discount = np.log2(np.minimum(positions, cut) + 2.0)
                best = sum(g / np.log2(i + 2.0) for i, g in enumerate(ideal[:cut]))
                out[:, q, m] = (within * gains / discount).sum(axis=1) / best
    return out


def _relevant_positions(f: QueryFeatures, grades: Mapping[str, int], grid: Sequence[Mapping[str, float]],
                        depth: int) -> tuple["np.ndarray", "np.ndarray"]:
    """``[point, relevant hit]`` positions (from 0; inf past the list's cut) of the query's
    relevant candidates under each weight vector, and their grades."""
    import numpy as np

    ids = f.named
    cut = max(depth, len(ids))
    named = set(ids)
    rest = [i for i, gid in enumerate(f.gids) if gid not in named]
    named_relevant = [position for position, gid in enumerate(ids) if gid in grades]
    gains = [grades[ids[position]] for position in named_relevant]
    positions = np.tile(np.array(named_relevant, dtype=np.float64), (len(grid), 1))
    relevant = [k for k, i in enumerate(rest) if f.gids[i] in grades]
    if relevant:
        # every point's fused scores, each row exactly its fused_scores (so ties break by id as in
        # ``rank``)
        total = fused_score_grid(f.features, grid)[:, rest]
        order = np.argsort(np.array([f.gids[i] for i in rest], dtype=object), kind="stable")
        by_id = np.empty(len(rest), dtype=np.int64)
        by_id[order] = np.arange(len(rest))
        ahead = [(total > total[:, [k]]).sum(axis=1)
                 + ((total == total[:, [k]]) & (by_id < by_id[k])).sum(axis=1) for k in relevant]
        positions = np.concatenate([positions, len(ids) + np.array(ahead, dtype=np.float64).T], axis=1)
        gains += [grades[f.gids[rest[k]]] for k in relevant]
    positions[positions >= cut] = np.inf
    return positions, np.array(gains, dtype=np.float64)


MAX_GRID = 250_000  # weight vectors: step 0.05 over 7 features (230,230) takes about 6 minutes


def grid_size(strategy: str, step: float) -> int:
    """How many weight vectors ``simplex`` makes for ``strategy``'s features at ``step``."""
    return math.comb(round(1 / step) + len(FEATURES[strategy]) - 1, len(FEATURES[strategy]) - 1)


def simplex(names: Sequence[str], step: float) -> list[dict[str, float]]:
    """Every weight vector over ``names`` with entries in multiples of ``step`` summing to 1."""
    units = round(1 / step)
    grid = []
    for cut in itertools.combinations(range(units + len(names) - 1), len(names) - 1):
        parts = [b - a - 1 for a, b in zip((-1, *cut), (*cut, units + len(names) - 1))]
        grid.append({name: round(part * step, 10) for name, part in zip(names, parts)})
    return grid


def _read(point: Mapping[str, float], in_run: bool) -> dict[str, float]:
    """``point`` as a query of this kind reads it: from no run, context and affinity are 0 for
    every candidate, so their weights tie whatever they are, and are given as 0."""
    return {k: 0.0 if k in RUN_FEATURES and not in_run else v for k, v in point.items()}


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
    guard_floor: float | None = None        # what the guard set must keep under ``chosen``
    guard_fold_floor: float | None = None   # what it must keep under each fold's weights

    def toml(self) -> str:
        return f"[fusion.{table_of(self.strategy, self.in_run)}]\n" + "".join(
            f"{name} = {self.chosen.get(name, 0.0):g}\n" for name in STRATEGY_FEATURES)

    def as_dict(self) -> dict:
        return {"strategy": self.strategy, "in_run": self.in_run, "queries": self.queries,
                "folds": self.folds, "folds_by": self.by, "grid": self.grid, "chosen": self.chosen,
                "fold_weights": self.fold_weights,
                "cross_validated": self.cross_validated, "in_sample": self.in_sample, "tied": self.tied,
                "admissible": self.admissible, "guard_ndcg": self.guard_ndcg,
                "guard_floor": self.guard_floor, "guard_fold_floor": self.guard_fold_floor}


@dataclass(frozen=True)
class Guard:
    """A second query set the chosen weights must not make worse: its nDCG@10 must stay at or
    above ``floor`` (what the current default scores on it). Its queries may come from another
    workspace; they only constrain the choice, they never score it.

    ``fold_floor`` is what each fold's choice must keep instead. It must not come from weights
    chosen on the queries being cross-validated: through it, a held-out fold picks its own weights,
    and the cross-validated figures are in-sample ones (README, ``mem eval fusion``). So it has no
    default: ``mem eval fusion`` takes the text strategy's nDCG@10 there (``TEXT_BASE``): the fusion
    must not lose to the ranking it extends."""

    features: Sequence[QueryFeatures]
    qrels: Qrels
    floor: float
    fold_floor: float


def choose_weights(features: Sequence[QueryFeatures], qrels: Qrels, strategy: str, *, folds: int = 5,
                   step: float = 0.1, depth: int = 100, guard: Guard | None = None,
                   configured: Mapping[str, float] | None = None, by: str = "run",
                   progress: bool = False) -> FusionChoice:
    """The grid's best weights on every query, and the cross-validated figures of that choice
    (None when the queries form one group, or ``folds`` is 1: no fold can then be held out). Folds
    hold whole runs, or with ``by="setting"`` whole settings (how weights chosen on other corpora
    serve one never seen; the queries without a setting form a group of their own). With
    ``guard``, only the weights that keep the guard set at its floor are eligible (when none does,
    those that come closest: ``admissible`` is then 0). Of weight vectors tying for best on every
    query, the one nearest (L1) the ``configured`` weights is chosen (without them, the first of the
    grid). A fold's choice keeps the guard at ``Guard.fold_floor``, not at a floor measured with the
    configured weights, which may have been chosen on the very queries the fold holds out. The
    queries are all asked from a run or all from none, and so are the guard's: each kind has a
    weight table of its own (``FusionChoice.in_run``)."""
    import numpy as np

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
    # per grid point and query: the objective's sum (what chooses); the guard's mean nDCG@10
    objective = grid_metrics(features, gold, grid, depth, OBJECTIVE, progress=progress).sum(axis=2)
    if guard:  # the mean over the guard's judged queries, as guarded_ndcg's
        guard_gold = judged(guard.qrels)
        kept = (grid_metrics(guard.features, guard_gold, grid, depth, ("nDCG@10",))[:, :, 0]
                .sum(axis=1) / max(len(guard_gold), 1))
    else:
        kept = np.ones(len(grid))

    def keeping(floor: float | None) -> "np.ndarray":
        """The points keeping the guard at ``floor`` (every point without a guard)."""
        return np.flatnonzero(kept >= floor - 1e-9) if floor is not None else np.arange(len(grid))

    def eligible(floor: float | None) -> "np.ndarray":
        """The points keeping the guard at ``floor`` or, when none does, those coming closest."""
        kept_at = keeping(floor)
        return kept_at if len(kept_at) else np.flatnonzero(kept >= kept.max() - 1e-9)

    floor, fold_floor = (guard.floor, guard.fold_floor) if guard else (None, None)
    distance = (np.abs([[point[n] - configured.get(n, 0.0) for n in point] for point in grid])
                .sum(axis=1).round(9) if configured else np.zeros(len(grid)))

    def best(chosen_queries: "np.ndarray", candidates: "np.ndarray") -> tuple[int, int]:
        """The best of ``candidates`` on ``chosen_queries`` (a mask), and how many points score as
        well."""
        value = objective[candidates][:, chosen_queries].sum(axis=1).round(9)
        tied = candidates[value == value.max()]
        return int(tied[np.lexsort((tied, distance[tied]))[0]]), len(tied)

    def figures(point: int, queries: Sequence[QueryFeatures]) -> dict[str, dict[str, float]]:
        """ir_measures' figures of ``queries`` ranked by ``grid[point]``."""
        run = {f.qid: rank(f, grid[point], depth) for f in queries}
        return per_query(run, {f.qid: gold[f.qid] for f in queries if f.qid in gold}, REPORTED)

    fold = np.array(fold)
    held: dict[str, dict[str, float]] = {}
    fold_weights = []
    # a fold's guard floor is not measured with the configured weights (``Guard.fold_floor``)
    in_folds = eligible(fold_floor)
    for k in range(folds if folds > 1 else 0):
        point, _ = best(fold != k, in_folds)
        fold_weights.append(_read(grid[point], in_run))
        held.update(figures(point, [f for f, g in zip(features, fold) if g == k]))
    chosen, tied = best(np.ones(len(features), dtype=bool), eligible(floor))
    qids = [f.qid for f in features]
    mean = lambda per: {m: sum(per.get(q, {}).get(m, 0.0) for q in qids) / max(len(qids), 1)
                        for m in REPORTED}
    return FusionChoice(strategy, in_run, len(qids), folds, len(grid), _read(grid[chosen], in_run),
                        fold_weights,
                        mean(held) if folds > 1 else None, mean(figures(chosen, features)), tied, by,
                        len(keeping(floor)) if guard else None,
                        guarded_ndcg(guard, grid[chosen], depth) if guard else None,
                        guard.floor if guard else None, fold_floor)


def guarded_ndcg(guard: Guard, weights: dict[str, float], depth: int) -> float:
    """The guard set's mean nDCG@10 under ``weights``."""
    from mem_retrieval.eval.metrics import mean_metrics

    run = {f.qid: rank(f, weights, depth) for f in guard.features}
    return mean_metrics(run, judged(guard.qrels), ["nDCG@10"])["nDCG@10"]
