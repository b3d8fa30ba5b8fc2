"""Standard ranking metrics, computed by ir_measures (not re-implemented), over every judged query.

A *judged* query is one the qrels give at least one relevant document (grade > 0); recall is not
defined for the others. Every judged query counts in every mean: one the run lacks, or for which it
holds no hits, scores 0 (ir_measures and trec_eval leave such queries out; here they are filled in).
Metric names are spelled as ir_measures parses them, everywhere: ``R@5``, ``nDCG@10``, ``RR@10``…"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from mem_retrieval.eval.judgments import Qrels, Query, Run, judged
from mem_retrieval.eval.ranker import RankedHit, Ranker

METRICS = ("R@5", "R@10", "R@50", "RR@10", "nDCG@10", "AP")
_RESOLUTION = 1_000_000  # scores in runs are kept to 6 decimals, as write_trec_run writes them


def run_scores(hits: Sequence[RankedHit]) -> dict[str, float]:
    """A ranked list as one query's run ``{doc: score}`` whose score order *is* the list's order.

    trec_eval orders by score and breaks ties by document id, which would silently reorder tied
    hits; so each score is rounded to 6 decimals and, where it would not fall below the previous
    one, set 1e-6 below it. A repeated id keeps its first (best) place."""
    scores: dict[str, float] = {}
    previous: int | None = None
    for hit in hits:
        if hit.gid in scores:
            continue
        micro = round(hit.score * _RESOLUTION)
        if previous is not None and micro >= previous:
            micro = previous - 1
        scores[hit.gid] = micro / _RESOLUTION
        previous = micro
    return scores


def per_query(run: Run, qrels: Qrels, metrics: Iterable[str] = METRICS) -> dict[str, dict[str, float]]:
    """``{qid: {metric: value}}`` for every judged query; 0 where the run has no hits for it."""
    import ir_measures

    names = list(metrics)
    measures = [ir_measures.parse_measure(name) for name in names]
    gold = judged(qrels)
    values = {qid: dict.fromkeys(names, 0.0) for qid in gold}
    ranked = {qid: docs for qid, docs in run.items() if qid in gold and docs}
    if ranked:
        by_measure = dict(zip(measures, names))
        for metric in ir_measures.iter_calc(measures, gold, ranked):
            values[metric.query_id][by_measure[metric.measure]] = float(metric.value)
    return values


def mean_metrics(run: Run, qrels: Qrels, metrics: Iterable[str] = METRICS) -> dict[str, float]:
    """Each metric's mean over every judged query (0 for a query without hits); 0 when none is judged."""
    names = list(metrics)
    values = per_query(run, qrels, names)
    if not values:
        return dict.fromkeys(names, 0.0)
    return {name: sum(query[name] for query in values.values()) / len(values) for name in names}


def strategy_metrics(ranker: Ranker, strategy: str, queries: Iterable[Query], qrels: Qrels, depth: int,
                     metrics: Iterable[str] = METRICS) -> dict[str, float]:
    """``mean_metrics`` of ``strategy``'s lists (``ranker``, cut to ``depth``) for ``queries``."""
    run = {query.qid: run_scores(ranker(strategy, query, depth)) for query in queries}
    return mean_metrics(run, qrels, metrics)
