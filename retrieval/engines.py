"""Candidate engines over one LanceDB table: BM25 over the pre-tokenised ``tokens`` column, and
nearest neighbours over the ``vector`` column.

BM25: ``lance`` (default) is LanceDB's native full-text index; it persists with the table and
applies the prefilter inside the index query. ``rank-bm25`` is the rank_bm25 package, rebuilt in
each process over the rows in memory and chosen among by the prefilter (a second engine, to
compare against). Both return candidates best first, ties broken by gid, so that pages are stable
from call to call (lance #9132: FTS limit/offset can repeat or skip tied rows, so one fixed pool
is taken and sliced here, never paged in the index). A search that cuts memory (``until``,
``hide``) scores with Lance's formula over only the rows in memory (``memory_bm25_candidates``):
the index's statistics count them all."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from mem_retrieval.indexers import store
from mem_retrieval.indexers.store import in_list, key
from mem_retrieval.retrieval.candidates import ROW_TYPES, Candidate, from_arrow, in_gid_order


def _columns(table_name: str, vectors: bool) -> list[str]:
    return list(ROW_TYPES[table_name].COLUMNS) + (["vector"] if vectors else [])


def _best_first(candidates: list[Candidate], score: str) -> list[Candidate]:
    return sorted(candidates, key=lambda c: (-getattr(c, score), c.gid))


def lance_candidates(table, table_name: str, tokens: str, where: str | None, limit: int,
                     vectors: bool = True) -> list[Candidate]:
    """The ``limit`` best BM25 matches by LanceDB's full-text index, ties broken by gid
    (``_cut_by_gid``: the index cuts a tie at its limit as it happens to hold the rows, and a warm
    searcher's resident index cut by gid, so the two answered a query differently)."""
    from lancedb.query import MatchQuery

    if not tokens:
        return []

    def ranked(fetch: int, columns: list[str]):
        query = table.search(MatchQuery(tokens, "tokens"), query_type="fts")
        if where:
            query = query.where(where, prefilter=True)
        return query.select(columns + ["_score"]).limit(fetch).to_arrow()

    return _cut_by_gid(ranked, lambda data: data["_score"].to_pylist(), limit, table, table_name,
                       _columns(table_name, vectors), lambda c, score: replace(c, bm25=score))


def _cut_by_gid(ranked: Callable[[int, list[str]], Any], score_of: Callable[[Any], list[float]],
                limit: int, table, table_name: str, columns: list[str],
                scored: Callable[[Candidate, float], Candidate]) -> list[Candidate]:
    """The ``limit`` best rows of the table's own query ``ranked(fetch, columns)`` (its ``fetch``
    best rows; ``score_of`` its scores, higher better), ties broken by gid: the table cuts a tie by
    where it holds the rows, which differs between indexes of the same rows. One row more than
    ``limit`` is asked for; while the row past the cut ties with the last, twice as many, reading
    only their gids and scores (a word every event of a 200,000-line log shares read them all with
    their vectors: 1.7 GB), then the rows cut so, whole (``scored`` sets a row's score)."""
    if limit < 1:
        return []

    def order(data) -> list[tuple[float, str]]:
        return sorted(zip((-score for score in score_of(data)), data["gid"].to_pylist()))

    data = ranked(limit + 1, columns)
    best, fetch = order(data), limit + 1
    while len(best) >= fetch and best[limit][0] == best[limit - 1][0]:  # a tie across the cut
        fetch *= 2
        best = order(ranked(fetch, ["gid"]))
    best = best[:limit]
    rows = {c.gid: c for c in from_arrow(data, table_name)}
    missing = [gid for _, gid in best if gid not in rows]
    if missing:
        more = (table.search().where(in_list("key", [key(gid) for gid in missing])).select(columns)
                .limit(len(missing)).to_arrow())
        rows.update((c.gid, c) for c in from_arrow(more, table_name))
    return [scored(rows[gid], -negative) for negative, gid in best]


def _memory_rows(table, memory: str | None):
    """The gid and tokens of every row in memory (all rows, or those the SQL ``memory`` keeps)."""
    scan = table.search()
    if memory:
        scan = scan.where(memory)
    return scan.select(["gid", "tokens"]).limit(max(table.count_rows(), 1)).to_arrow()


_MEMORIES: dict[tuple, tuple] = {}
FETCH_AT_LEAST = 256  # rows asked of the table at a time for the best BM25 hits of a cut memory


def _build_of(table) -> tuple:
    """What names one table version's rows for the process-wide caches: its path, its creation
    (``store.lineage_of``) and its version. A table made anew at the same path (``.mem`` deleted
    and indexed again, or a damaged table rebuilt) counts its versions from 1 again: keyed on path
    and version alone, a long-lived process answered from the old rows."""
    return table.uri, store.lineage_of(table), table.version


def _memory_index(table, memory: str):
    """BM25 over the rows ``memory`` keeps, with their gids and each gid's place in gid order,
    built once per table version and cut."""
    from mem_retrieval.retrieval.bm25 import Bm25Index

    cache_key = (*_build_of(table), memory)
    held = _MEMORIES.get(cache_key)
    if held is None:  # (a warm server's threads may build the same one twice: both are right)
        data = _memory_rows(table, memory)
        held = (Bm25Index.build(data["tokens"]), *in_gid_order(data))
        if len(_MEMORIES) > 4:
            _MEMORIES.clear()
        _MEMORIES[cache_key] = held
    return held


def memory_bm25_candidates(table, table_name: str, tokens: str, memory: str, where: str, limit: int,
                           vectors: bool = True) -> list[Candidate]:
    """The ``limit`` best BM25 candidates of a search that cuts memory (``memory``: the SQL of
    ``Filters.memory``, as of a time or before a hidden step), scored as over a table holding only
    the rows in memory (LanceDB's index counts its statistics over all rows, later and hidden ones
    too); ``where`` (the whole prefilter, the cut included) chooses among them."""
    if not tokens:
        return []
    index, gids, rank = _memory_index(table, memory)
    return _best_passing(table, table_name, index.scores(tokens), gids, rank,
                         None if where == memory else where, limit, vectors)


def _best_passing(table, table_name: str, scores, gids, rank, where: str | None, limit: int,
                  vectors: bool) -> list[Candidate]:
    """The ``limit`` best rows by ``scores`` (one per row of ``gids``; ``rank``: each gid's place in
    gid order, to break ties) among those that score above zero and pass ``where``: the rows are
    read from the table best first, a chunk at a time, until ``limit`` pass."""
    import numpy as np

    hits = np.flatnonzero(scores > 0)
    hits = hits[np.lexsort((rank[hits], -scores[hits]))]
    found: list[Candidate] = []
    step = max(4 * limit, FETCH_AT_LEAST)  # other filters (run, kind, the setting rule) drop some
    for start in range(0, len(hits), step):
        chunk = {gids[i]: float(scores[i]) for i in hits[start:start + step]}
        match = in_list("key", [key(g) for g in chunk])
        data = (table.search().where(f"({match}) AND ({where})" if where else match)
                .select(_columns(table_name, vectors)).limit(len(chunk)).to_arrow())
        found += [c.scored(0.0, bm25=chunk[c.gid]) for c in from_arrow(data, table_name)]
        if len(found) >= limit:
            break
    return _best_first(found, "bm25")[:limit]


_MODELS: dict[tuple, tuple] = {}


def _rank_bm25_model(table, memory: str | None, k1: float, b: float):
    """The BM25Okapi model over the rows in memory (all rows, or those ``memory`` keeps), with
    their gids and each gid's place in gid order, built once per table version and cut."""
    from rank_bm25 import BM25Okapi

    cache_key = (*_build_of(table), memory, k1, b)
    if cache_key in _MODELS:
        return _MODELS[cache_key]
    if len(_MODELS) > 4:
        _MODELS.clear()

    data = _memory_rows(table, memory)
    gids, rank = in_gid_order(data)
    corpus = [t.split() for t in data["tokens"].to_pylist()]
    _MODELS[cache_key] = (BM25Okapi(corpus, k1=k1, b=b) if corpus else None), gids, rank
    return _MODELS[cache_key]


def rank_bm25_candidates(table, table_name: str, tokens: str, memory: str | None, where: str | None,
                         limit: int, k1: float, b: float, vectors: bool = True) -> list[Candidate]:
    """The ``limit`` best BM25 candidates by the rank_bm25 package, its statistics over the rows in
    memory (``memory``: the SQL of ``Filters.memory``, None for all rows), chosen among by
    ``where`` as the native engine chooses: a run, kind or library filter does not change how
    rare a word is."""
    if not tokens:
        return []
    model, gids, rank = _rank_bm25_model(table, memory, k1, b)
    if model is None:
        return []
    return _best_passing(table, table_name, model.get_scores(tokens.split()), gids, rank,
                         None if where == memory else where, limit, vectors)


def vector_candidates(table, table_name: str, vector, where: str | None,
                      limit: int) -> list[Candidate]:
    """The ``limit`` nearest rows by cosine over all (prefiltered) rows, ties broken by gid: the
    `vector` strategy. As for BM25 (``lance_candidates``), a tie at the cut (steps with the same
    text, so the same vector) is cut by gid, not by where the rows happen to lie in the table,
    which an incremental index and a full one lay out differently."""
    def ranked(fetch: int, columns: list[str]):
        query = table.search(vector, vector_column_name="vector").distance_type("cosine")
        if where:
            query = query.where(where, prefilter=True)
        return query.select(columns + ["_distance"]).limit(fetch).to_arrow()

    return _cut_by_gid(ranked, lambda data: [1.0 - float(d) for d in data["_distance"].to_pylist()],
                       limit, table, table_name, _columns(table_name, True),
                       lambda c, cosine: c.scored(0.0, cosine=cosine))
