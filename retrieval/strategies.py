"""Ranking strategies: each turns a query text into candidates in final order, over one table.

A strategy implements ``Strategy``; ``STRATEGIES`` holds them by name. The searcher runs what they
share around them: the ids a query names come first (for strategies with ``ids_first``), the
setting rule (M3) and the pool cut. The paging evaluator, the CLI's ``--strategy`` and the API all
take a strategy by its name from here.

- ``rerank`` (the default): BM25 candidates; embeddings rerank the top K of them, never adding one.
- ``bm25``: BM25 candidates in BM25 order.
- ``vector``: embedding nearest neighbours only (for comparison).
- ``hybrid-rrf``: BM25 and vector lists fused by reciprocal rank (for comparison)."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from mem_retrieval.retrieval.candidates import Candidate

if TYPE_CHECKING:
    from mem_retrieval.retrieval.search import Searcher

RRF_K = 60


class Strategy(Protocol):
    """``rank(search, table, text, where)``: the text candidates of ``table`` for ``text`` under
    the prefilter ``where``, best first, each gid once, each with its ``score`` and features."""

    name: str
    ids_first: bool     # the steps the query names by id lead the list

    def rank(self, search: "Searcher", table: str, text: str, where: str | None) -> list[Candidate]: ...


def by_score(candidates: list[Candidate]) -> list[Candidate]:
    """Best score first, ties by gid (a stable order, so pages are stable)."""
    return sorted(candidates, key=lambda c: (-c.score, c.gid))


def rerank(candidates: list[Candidate], query_vector, k: int, weight: float) -> list[Candidate]:
    """``weight·cosine + (1 − weight)·bm25/max bm25`` over the top ``k`` BM25 candidates; the rest
    keep BM25 order below them, scaled under the lowest fused score."""
    import numpy as np

    if not candidates:
        return []
    k = min(k, len(candidates))
    top, rest = candidates[:k], candidates[k:]
    best = max(c.bm25 for c in candidates) or 1.0
    fused: list[Candidate] = []
    if k:
        cosine = np.asarray([c.vector for c in top], dtype=np.float32) @ query_vector
        fused = [c.scored(weight * float(cos) + (1 - weight) * c.bm25 / best, cosine=float(cos))
                 for c, cos in zip(top, cosine)]
    ranked = by_score(fused)
    floor = min((c.score for c in fused), default=1.0)
    edge = top[-1].bm25 if top else best
    return ranked + [c.scored(floor * c.bm25 / edge if edge else 0.0) for c in rest]


def rrf(lists: list[list[Candidate]], limit: int) -> list[Candidate]:
    """Reciprocal rank fusion: score(d) = sum over lists of 1 / (60 + rank)."""
    scores: dict[str, float] = {}
    first: dict[str, Candidate] = {}
    for ranking in lists:
        for rank, candidate in enumerate(ranking, start=1):
            scores[candidate.gid] = scores.get(candidate.gid, 0.0) + 1.0 / (RRF_K + rank)
            first.setdefault(candidate.gid, candidate)
    order = sorted(scores, key=lambda gid: (-scores[gid], gid))[:limit]
    return [first[gid].scored(scores[gid]) for gid in order]


@dataclass(frozen=True)
class Bm25:
    name: str = "bm25"
    ids_first: bool = True

    def rank(self, search: "Searcher", table: str, text: str, where: str | None) -> list[Candidate]:
        found = search.bm25(table, text, where, vectors=False)
        best = max((c.bm25 for c in found), default=1.0) or 1.0
        return [c.scored(c.bm25 / best) for c in found]


@dataclass(frozen=True)
class Rerank:
    name: str = "rerank"
    ids_first: bool = True

    def rank(self, search: "Searcher", table: str, text: str, where: str | None) -> list[Candidate]:
        vector: Future | None = search.query_vector_soon(text) if search.table(table) is not None else None
        found = search.bm25(table, text, where)
        if not found:
            return []
        config = search.config.search
        return rerank(found, vector.result(), config.rerank_k, config.fusion_weight)


@dataclass(frozen=True)
class Vector:
    name: str = "vector"
    ids_first: bool = False

    def rank(self, search: "Searcher", table: str, text: str, where: str | None) -> list[Candidate]:
        return [c.scored(c.cosine) for c in search.nearest(table, text, where)]


@dataclass(frozen=True)
class HybridRrf:
    name: str = "hybrid-rrf"
    ids_first: bool = False

    def rank(self, search: "Searcher", table: str, text: str, where: str | None) -> list[Candidate]:
        return rrf([search.bm25(table, text, where), search.nearest(table, text, where)],
                   search.config.search.pool)


STRATEGIES: dict[str, Strategy] = {s.name: s for s in (Bm25(), Rerank(), Vector(), HybridRrf())}
