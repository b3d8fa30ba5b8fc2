"""The paging evaluation: every strategy over every judged query, standard metrics, recall by page,
and the pagers' early-stop loss, side by side.

Only judged queries (at least one relevant document in the qrels) are searched and scored; each
counts in every mean, with 0 when its list is empty. A judged query missing from the queries file is
bad input (its denominator would silently vanish)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mem_retrieval.eval.judgments import (Judgments, Qrels, Query, Run, apart, judged, judged_queries,
                                          read_judgments, read_queries)
from mem_retrieval.eval.metrics import mean_metrics, run_scores
from mem_retrieval.eval.paging import (FIXED_K, MAX_PAGES, SCORE_DROP, PagerSummary, RankedPages,
                         standard_pagers, summarize)
from mem_retrieval.eval.ranker import Ranker
from mem_retrieval.retrieval.hint import Hint
from mem_retrieval.retrieval.strategies import STRATEGIES
from mem_retrieval.records.errors import InputError

METRIC_DEPTH = 50  # R@50 needs the first 50 hits


@dataclass(frozen=True)
class StrategyResult:
    metrics: dict[str, float]
    recall_by_page: list[float]
    pagers: dict[str, PagerSummary]
    bound: PagerSummary     # eval.paging.fewest_pages: the best stopping rule's pages at loss ≤ 0.02
    fixed_pages: list[float]  # eval.paging.fixed_pages: the mean pages fixed-k reads (the `vs fixed` curve)


@dataclass(frozen=True)
class PagingEvaluation:
    """The result of one evaluation, plus each strategy's run (for ``--trec-out``)."""

    queries: int
    page_size: int
    max_pages: int
    strategies: dict[str, StrategyResult]
    runs: dict[str, Run]
    default: str | None = None      # the strategy a plain search uses (search.strategy)

    def to_json(self) -> dict:
        """The shape other tools read: ``{"queries", "page_size", "max_pages", "default",
        "strategies": {name: {"metrics", "recall_by_page", "fixed_pages", "pagers": {pager:
        {"pages", "recall", "loss"}}, "bound": {"pages", "recall", "loss"}}}}`` (``bound``: the
        fewest pages any stopping rule reads at a loss of at most ``STOP_LOSS``; ``fixed_pages``:
        the mean pages fixed-k reads, k = 1 … max_pages, fewer than k where lists end sooner)."""
        return {"queries": self.queries, "page_size": self.page_size, "max_pages": self.max_pages,
                "default": self.default, "strategies": {
            name: {"metrics": {metric: _round(value) for metric, value in result.metrics.items()},
                   "recall_by_page": [_round(value) for value in result.recall_by_page],
                   "fixed_pages": [_round(value) for value in result.fixed_pages],
                   "pagers": {pager: _summary(summary) for pager, summary in result.pagers.items()},
                   "bound": _summary(result.bound)}
            for name, result in self.strategies.items()}}


def _round(value: float) -> float:
    return round(value, 6)


def _summary(summary: PagerSummary) -> dict[str, float]:
    return {"pages": _round(summary.pages), "recall": _round(summary.recall), "loss": _round(summary.loss)}


def read_judged(queries_file: str | Path, qrels_file: str | Path) -> tuple[list[Query], Judgments, int]:
    """The judged queries of a queries file and its qrels (SPEC §10), the qrels as read, and how
    many queries had no relevant judgment; InputError when none has one. Each file is read once."""
    apart(queries_file, qrels_file)
    queries = read_queries(Path(queries_file))
    judgments = read_judgments(Path(qrels_file))
    chosen = judged_queries(queries, judgments.qrels, qrels_file, judgments.lines)
    if not chosen:
        raise InputError(str(qrels_file), None, None, "no query of the queries file has a relevant judgment")
    return chosen, judgments, len(queries) - len(chosen)


def search_depth(pool: int, max_pages: int, page_size: int) -> int:
    """Hits asked of the ranker: the search's own pool (the hint is computed on it), and at least
    enough for R@50 and for ``max_pages`` pages."""
    return max(pool, METRIC_DEPTH, max_pages * page_size)


def evaluate_paging(ranker: Ranker, queries: Sequence[Query], qrels: Qrels, *,
                    page_size: int, hint: Hint, strategies: Iterable[str] = STRATEGIES,
                    max_pages: int = MAX_PAGES, depth: int = 100, progress: bool = False,
                    qrels_file: str | Path = "qrels",
                    default: str | None = None) -> PagingEvaluation:
    """Run each strategy over each judged query and score the lists."""
    from tqdm import tqdm

    names = list(dict.fromkeys(strategies))
    unknown = [name for name in names if name not in STRATEGIES]
    if unknown:
        raise ValueError(f"unknown strategy {unknown[0]!r} (known: {', '.join(STRATEGIES)})")
    chosen = judged_queries(queries, qrels, qrels_file)
    gold = judged(qrels)
    pagers = standard_pagers(hint, FIXED_K, SCORE_DROP)
    results: dict[str, StrategyResult] = {}
    runs: dict[str, Run] = {}
    # disable=None: a bar on a terminal, nothing in a log file.
    with tqdm(total=len(names) * len(chosen), desc="paging", unit="query",
              disable=None if progress else True, leave=False) as bar:
        for name in names:
            run: Run = {}
            lists = []
            for query in chosen:
                bar.set_postfix_str(name, refresh=False)
                hits = ranker(name, query, depth)[:depth]
                run[query.qid] = run_scores(hits)
                relevant = frozenset(doc for doc, grade in gold[query.qid].items() if grade > 0)
                lists.append(RankedPages.shown(hits, relevant, page_size))
                bar.update(1)
            paging = summarize(lists, pagers, max_pages)
            results[name] = StrategyResult(mean_metrics(run, gold), paging.recall_by_page, paging.pagers,
                                           paging.bound, paging.fixed_pages)
            runs[name] = run
    return PagingEvaluation(len(chosen), page_size, max_pages, results, runs, default)

