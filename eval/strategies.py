"""The retrieval strategies the paging evaluator compares, and the one interface it needs from search.

A *ranker* turns one evaluation query into a ranked list of global ids with scores, for a named
strategy. The search layer provides it (``retrieval.evaluation.make_ranker``); everything in eval/
works on its output alone, so the evaluation is pure over (ranked lists, qrels)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from mem_retrieval.eval.judgments import Query

from mem_retrieval.retrieval.search import STRATEGIES  # noqa: F401  (bm25, rerank, vector, hybrid-rrf)


@dataclass(frozen=True)
class RankedHit:
    """One hit of a ranked list: a global id (``<run>/<step id>``) and the strategy's score."""

    gid: str
    score: float


class Ranker(Protocol):
    """``ranker(strategy, query, depth)`` → at most ``depth`` hits, already in final order (best
    first), each global id once.

    The ranker must honour the query: ``query.setting`` is passed to the search as its setting, and
    when ``query.run`` is set no step of that run is a candidate (a run cannot reuse itself). Scores
    only need to be comparable within one list (they feed the ``score-drop`` pager and the hint)."""

    def __call__(self, strategy: str, query: Query, depth: int) -> list[RankedHit]: ...
