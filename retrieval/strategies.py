"""Ranking strategies: each turns a query text into candidates in final order, over one table.

A strategy implements ``Strategy``; ``STRATEGIES`` holds them by name. The searcher runs what they
share around them: the ids a query names come first (every strategy: a lookup by id is no
ranking), the setting rule (M3) and the pool cut. The paging evaluator, the CLI's ``--strategy``
and the API all take a strategy by its name from here.

- ``rerank`` (the default before the graph features): BM25 candidates; embeddings rerank the top K
  of them, never adding one.
- ``bm25``: BM25 candidates in BM25 order.
- ``vector``: embedding nearest neighbours only (for comparison).
- ``hybrid-rrf``: BM25 and vector lists fused by reciprocal rank (for comparison).
- ``graph``: BM25 candidates and the steps the query's nearest steps cite (k-NN dependency votes),
  with a citation prior, fused; no model.
- ``rerank-graph`` (the default, ``search.strategy``): ``graph``, with the embedding's cosine among
  the fused features."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

from mem_retrieval.indexers.store import in_list
from mem_retrieval.records.errors import BadInput
from mem_retrieval.retrieval.candidates import Candidate
from mem_retrieval.retrieval.query import Filters

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

    from mem_retrieval.retrieval.search import Searcher

RRF_K = 60


@dataclass(frozen=True)
class Request:
    """What a strategy ranks: ``text`` over ``table``, under ``filters`` (what the query may see)
    and the setting rule (``excluded``: the keys of the settings it leaves out), which ``where``
    says as SQL (the prefilter) and ``mask`` as a numpy mask over a table held in memory."""

    table: str
    text: str
    filters: Filters
    excluded: tuple[int, ...] = ()
    context: str | None = None      # the run the query is asked from (ArchiveQuery.context_run)
    named: frozenset[str] = frozenset()  # the steps the query names by id: they lead the list, and
    # are no text candidates (a feature's best among the candidates is taken without them)

    def unnamed(self, candidates: list[Candidate]) -> list[Candidate]:
        """``candidates`` without the steps the query names by id."""
        return [c for c in candidates if c.gid not in self.named] if self.named else candidates

    @cached_property
    def where(self) -> str | None:
        """The prefilter as SQL (integer keys and closed enums only)."""
        clause = [f"NOT ({in_list('setting_key', self.excluded)})"] if self.excluded else []
        return self.filters.where(self.table, clause)

    def memory(self) -> "Request":
        """The same text over all that the query may see: without the filters that only choose
        candidates (run, kind, status, library, the setting rule), keeping ``hide`` and ``until``."""
        return Request(self.table, self.text, self.filters.memory())

    def mask(self, columns: "dict[str, np.ndarray]") -> "np.ndarray | None":
        """The prefilter over in-memory ``columns`` (``Filters.mask``; for the setting rule,
        ``settings``: the distinct setting keys, and ``setting_of``: each row's place among them):
        True where ``where`` keeps the row, None for every row."""
        import numpy as np

        keep = self.filters.mask(columns)
        if self.excluded:
            left_out = np.isin(columns["settings"], np.asarray(self.excluded, dtype=np.int64))
            allowed = ~left_out[columns["setting_of"]]
            keep = allowed if keep is None else keep & allowed
        return keep


class Strategy(Protocol):
    """``rank(search, request)``: the text candidates for the request, best first, each gid once,
    each with its ``score`` and the features it was scored by. ``candidates(search, request)``:
    the same candidates with their features, before they are scored and cut (what ``rank``
    orders; the fusion tuner and an explain mode read it)."""

    name: str
    without_vectors: str | None  # the strategy answering while vectors are being computed
    by_words: bool  # every candidate found by the query's words (BM25): none for a query of none

    def rank(self, search: "Searcher", request: Request) -> list[Candidate]: ...

    def candidates(self, search: "Searcher", request: Request) -> list[Candidate]: ...


class _Ranked:
    """A strategy whose ranked list is also its candidate list."""

    def candidates(self, search: "Searcher", request: Request) -> list[Candidate]:
        return self.rank(search, request)


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
class Bm25(_Ranked):
    name: str = "bm25"
    without_vectors: str | None = None
    by_words: bool = True

    def rank(self, search: "Searcher", request: Request) -> list[Candidate]:
        found = request.unnamed(search.bm25(request, vectors=False))
        best = max((c.bm25 for c in found), default=1.0) or 1.0
        return [c.scored(c.bm25 / best) for c in found]


@dataclass(frozen=True)
class Rerank(_Ranked):
    name: str = "rerank"
    without_vectors: str | None = "bm25"
    by_words: bool = True

    def rank(self, search: "Searcher", request: Request) -> list[Candidate]:
        vector: Future | None = (search.query_vector_soon(request.text)
                                 if search.table(request.table) is not None else None)
        found = request.unnamed(search.bm25(request))
        if not found:
            return []
        config = search.config.search
        return rerank(found, vector.result(), config.rerank_k, config.fusion_weight)


@dataclass(frozen=True)
class Vector(_Ranked):
    name: str = "vector"
    without_vectors: str | None = "bm25"
    by_words: bool = False

    def rank(self, search: "Searcher", request: Request) -> list[Candidate]:
        return [c.scored(c.cosine) for c in request.unnamed(search.nearest(request))]


@dataclass(frozen=True)
class HybridRrf(_Ranked):
    name: str = "hybrid-rrf"
    without_vectors: str | None = "bm25"
    by_words: bool = False

    def rank(self, search: "Searcher", request: Request) -> list[Candidate]:
        return rrf([request.unnamed(search.bm25(request)), request.unnamed(search.nearest(request))],
                   search.config.search.pool)


@dataclass(frozen=True)
class GraphFusion:
    """BM25 candidates and the steps that the query's nearest citing steps vote for
    (``graph.graph_candidates``), scored by one weighted sum: bm25 / max, cosine (``cosine``: the
    embedding scores every candidate and weighs the voters; it never adds a candidate), the vote,
    expanded (the best cosine of the candidate and of the voters citing it), the citation prior
    log(1 + cited) / max, and for a query asked from a run, what that run cites: the candidate
    itself (context) and the candidate's run (affinity), each / max. Weights: ``[fusion.<name>]``
    in the config for a query asked from no run, ``[fusion.<name>_in_run]`` for one asked from a
    run (``FusionConfig.weights``)."""

    name: str
    cosine: bool
    by_words = True  # the voters too are found by the query's words

    @property
    def without_vectors(self) -> str | None:
        return "graph" if self.cosine else None

    @property
    def extends(self) -> str:
        """The text ranking this one adds the graph to: rerank with the embedding, bm25 without."""
        return "rerank" if self.cosine else "bm25"

    def candidates(self, search: "Searcher", request: Request) -> list[Candidate]:
        from mem_retrieval.retrieval.graph import graph_candidates

        vector = search.query_vector_soon(request.text) if self.cosine else None
        return request.unnamed(graph_candidates(search, request, vector))

    def rank(self, search: "Searcher", request: Request) -> list[Candidate]:
        weights = search.config.fusion.weights(self.name, in_run=request.context is not None)
        return fuse(self.candidates(search, request), weights)


FEATURES = ("bm25", "cosine", "vote", "expanded", "prior", "context", "affinity")  # a graph candidate's
MODEL_FEATURES = ("cosine", "expanded")  # what only the embedding gives: graph, without it, has neither
NORMALISED = ("bm25", "prior", "context", "affinity")  # divided by their best among the candidates; cosine,
                                # vote and expanded are absolute already (a vote sums cosines), so
                                # weak evidence stays weak


def fused_scores(columns: dict[str, "np.ndarray"], weights: dict[str, float]) -> "np.ndarray":
    """``Σ weight · feature`` of each candidate (a row of the feature ``columns``), the
    ``NORMALISED`` features divided by their best: the fused score of the graph strategies."""
    return fused_score_grid(columns, (weights,))[0]


def fused_score_grid(columns: dict[str, "np.ndarray"], grid: Sequence[dict[str, float]]) -> "np.ndarray":
    """``[point, candidate]``: ``fused_scores`` under every weight vector of ``grid`` at once, with
    the same operations in the same order (so a point's row is exactly its ``fused_scores``, ties
    included): what the search ranks by, and what its tuning (eval/fusion.py) scores."""
    import numpy as np

    total = np.zeros((len(grid), len(next(iter(columns.values()))) if columns else 0), dtype=np.float64)
    for name, column in columns.items():
        column = np.asarray(column, dtype=np.float64)
        scale = (column.max(initial=0.0) or 1.0) if name in NORMALISED else 1.0
        weights = np.array([point.get(name, 0.0) for point in grid], dtype=np.float64)
        total += weights[:, None] * column[None, :] / scale
    return total


def fuse(candidates: list[Candidate], weights) -> list[Candidate]:
    """The candidates scored by ``fused_scores`` under ``weights`` (``[fusion.<name>]``), best first."""
    if not candidates:
        return []
    columns = {name: [getattr(c, name) or 0.0 for c in candidates] for name in FEATURES}
    scores = fused_scores(columns, {name: getattr(weights, name) for name in FEATURES})
    return by_score([c.scored(float(score)) for c, score in zip(candidates, scores)])


STRATEGIES: dict[str, Strategy] = {s.name: s for s in (
    Bm25(), Rerank(), Vector(), HybridRrf(), GraphFusion("graph", cosine=False),
    GraphFusion("rerank-graph", cosine=True))}


def check_strategy(name: str) -> str:
    """``name`` when it names a strategy, else BadInput listing them: checked before a search
    opens the index (a bad value costs no lancedb import)."""
    if name not in STRATEGIES:
        raise BadInput(f"{name!r} is not one of {', '.join(STRATEGIES)}", param="strategy")
    return name
