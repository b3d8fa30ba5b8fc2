"""Candidate engines over one LanceDB table: BM25 over the pre-tokenised ``tokens`` column, and
nearest neighbours over the ``vector`` column.

BM25: ``lance`` (default) is LanceDB's native full-text index; it persists with the table and
applies the prefilter inside the index query. ``rank-bm25`` is the rank_bm25 package, rebuilt in
each process over the prefiltered rows (a second engine, to compare against). Both return
candidates best first, ties broken by gid, so that pages are stable from call to call (lance #9132:
FTS limit/offset can repeat or skip tied rows, so one fixed pool is taken and sliced here, never
paged in the index)."""

from __future__ import annotations

from mem_retrieval.indexers.store import in_list, key
from mem_retrieval.retrieval.candidates import ROW_TYPES, Candidate, from_arrow


def _columns(table_name: str, vectors: bool) -> list[str]:
    return list(ROW_TYPES[table_name].COLUMNS) + (["vector"] if vectors else [])


def _best_first(candidates: list[Candidate], score: str) -> list[Candidate]:
    return sorted(candidates, key=lambda c: (-getattr(c, score), c.gid))


def lance_candidates(table, table_name: str, tokens: str, where: str | None, limit: int,
                     vectors: bool = True) -> list[Candidate]:
    from lancedb.query import MatchQuery

    if not tokens:
        return []
    query = table.search(MatchQuery(tokens, "tokens"), query_type="fts")
    if where:
        query = query.where(where, prefilter=True)
    data = query.select(_columns(table_name, vectors) + ["_score"]).limit(limit).to_arrow()
    return _best_first(from_arrow(data, table_name, "_score"), "bm25")


_MODELS: dict[tuple, tuple] = {}


def _rank_bm25_model(table, where: str | None, k1: float, b: float):
    """The BM25Okapi model over the prefiltered rows, built once per table version and filter."""
    from rank_bm25 import BM25Okapi

    cache_key = (table.uri, table.version, where, k1, b)
    if cache_key in _MODELS:
        return _MODELS[cache_key]
    if len(_MODELS) > 4:
        _MODELS.clear()

    scan = table.search()
    if where:
        scan = scan.where(where)
    data = scan.select(["gid", "tokens"]).limit(max(table.count_rows(), 1)).to_arrow()
    gids = data["gid"].to_pylist()
    corpus = [t.split() for t in data["tokens"].to_pylist()]
    _MODELS[cache_key] = (BM25Okapi(corpus, k1=k1, b=b) if corpus else None), gids
    return _MODELS[cache_key]


def rank_bm25_candidates(table, table_name: str, tokens: str, where: str | None, limit: int,
                         k1: float, b: float, vectors: bool = True) -> list[Candidate]:
    import numpy as np

    if not tokens:
        return []
    model, gids = _rank_bm25_model(table, where, k1, b)
    if model is None:
        return []
    scores = model.get_scores(tokens.split())
    hits = np.flatnonzero(scores > 0)
    if hits.size > limit:
        hits = hits[np.argpartition(-scores[hits], limit - 1)[:limit]]
    chosen = {gids[i]: float(scores[i]) for i in hits}
    if not chosen:
        return []
    data = (table.search().where(in_list("key", [key(g) for g in chosen]))
            .select(_columns(table_name, vectors)).limit(len(chosen)).to_arrow())
    found = [c.scored(0.0, bm25=chosen[c.gid]) for c in from_arrow(data, table_name)]
    return _best_first(found, "bm25")


def vector_candidates(table, table_name: str, vector, where: str | None,
                      limit: int) -> list[Candidate]:
    """Nearest neighbours by cosine over all (prefiltered) rows: the `vector` strategy."""
    query = table.search(vector, vector_column_name="vector").distance_type("cosine")
    if where:
        query = query.where(where, prefilter=True)
    data = query.select(_columns(table_name, True) + ["_distance"]).limit(limit).to_arrow()
    distances = data["_distance"].to_pylist()
    found = [c.scored(0.0, cosine=1.0 - float(d)) for c, d in zip(from_arrow(data, table_name), distances)]
    return _best_first(found, "cosine")
