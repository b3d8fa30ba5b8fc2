"""BM25 candidate engines over the pre-tokenised ``tokens`` column.

``lance`` (default): LanceDB's native full-text index; it persists with the table and applies the
prefilter inside the index query. ``rank-bm25``: the rank_bm25 package, rebuilt in each process over
the prefiltered rows (a second engine, to compare against). Both return (gid, score) pairs, best
first, ties broken by gid so that pages are stable from call to call (lance #9132: FTS limit/offset
can repeat or skip tied rows, so one fixed pool is taken and sliced here, never paged in the index)."""

from __future__ import annotations

from typing import Any


def lance_candidates(table, tokens: str, where: str | None, limit: int,
                     columns: list[str]) -> list[dict[str, Any]]:
    from lancedb.query import MatchQuery

    if not tokens:
        return []
    query = table.search(MatchQuery(tokens, "tokens"), query_type="fts")
    if where:
        query = query.where(where, prefilter=True)
    rows = query.select(columns + ["_score"]).limit(limit).to_arrow().to_pylist()
    for row in rows:
        row["bm25"] = float(row.pop("_score"))
    rows.sort(key=lambda row: (-row["bm25"], row["gid"]))
    return rows


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


def rank_bm25_candidates(table, tokens: str, where: str | None, limit: int, columns: list[str],
                         k1: float, b: float) -> list[dict[str, Any]]:
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
    chosen = sorted(((gids[i], float(scores[i])) for i in hits), key=lambda p: (-p[1], p[0]))
    if not chosen:
        return []
    from mem_retrieval.indexers.store import in_list, key

    rows = {row["gid"]: row for row in table.search().where(in_list("key", [key(g) for g, _ in chosen]))
            .select(columns).limit(len(chosen)).to_arrow().to_pylist()}
    out = []
    for gid, score in chosen:
        row = rows[gid]
        row["bm25"] = score
        out.append(row)
    return out


def vector_candidates(table, vector, where: str | None, limit: int,
                      columns: list[str]) -> list[dict[str, Any]]:
    """Nearest neighbours by cosine over all (prefiltered) rows: the `vector` strategy."""
    query = table.search(vector, vector_column_name="vector").distance_type("cosine")
    if where:
        query = query.where(where, prefilter=True)
    rows = query.select(columns + ["_distance"]).limit(limit).to_arrow().to_pylist()
    for row in rows:
        row["cosine"] = 1.0 - float(row.pop("_distance"))
    rows.sort(key=lambda row: (-row["cosine"], row["gid"]))
    return rows
