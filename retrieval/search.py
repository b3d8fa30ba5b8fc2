"""The query pipeline, in the order the design requires: ids first, then BM25 candidates, then
embeddings rerank the top K of those candidates (never adding one BM25 did not find).

Strategies (the evaluator compares them): ``rerank`` (the default: ids + BM25 + rerank), ``bm25``
(ids + BM25), ``vector`` (embedding nearest neighbours only) and ``hybrid-rrf`` (BM25 and vector
lists fused by reciprocal rank)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from mem_retrieval.configs import Config
from mem_retrieval.indexers import store
from mem_retrieval.records.settings import INCOMPATIBLE, Ontology
from mem_retrieval.retrieval import engines
from mem_retrieval.retrieval.query import Filters, exact_lookup, ids_in_query
from mem_retrieval.text.tokenize import token_string

STRATEGIES = ("bm25", "rerank", "vector", "hybrid-rrf")
RRF_K = 60
ID_MAP_AFTER = 2  # id lookups (without filters) by one searcher before it builds its IdMap
STEP_COLUMNS = ["gid", "key", "run", "sid", "kind", "statement", "status", "grade", "setting",
                "in_library"]
EVENT_COLUMNS = ["gid", "run", "seq", "time", "actor", "kind", "ids", "text", "path", "body"]


@dataclass(frozen=True)
class IdMap:
    """Every step's gid, sid and row id, read once from the pinned steps table (a Searcher lives
    for one table version): about 0.1 s and 20 MB at 100,000 steps, so it is built on a searcher's
    second id lookup (a one-shot CLI call never pays for it; a long-lived API user does, once)."""

    row_ids: dict[str, int]          # gid -> the row's id in the pinned table version
    by_sid: dict[str, list[str]]     # sid -> gids, sorted

    @classmethod
    def scan(cls, table) -> "IdMap":
        data = (table.search().select(["gid", "sid"]).with_row_id(True)
                .limit(table.count_rows()).to_arrow())
        gids = data["gid"].to_pylist()
        by_sid: dict[str, list[str]] = {}
        for gid, sid in sorted(zip(gids, data["sid"].to_pylist())):
            by_sid.setdefault(sid, []).append(gid)
        return cls(dict(zip(gids, data["_rowid"].to_pylist())), by_sid)

    def rows(self, refs: list[str]) -> list[dict[str, Any]]:
        """Light rows (gid, row id) of the steps ``refs`` name, each once, in ``id_rows`` order:
        by the first ref naming the step, then by gid (a global id names its step, a bare id every
        step with that id, sorted by gid)."""
        named = dict.fromkeys(g for ref in refs
                              for g in ([ref] if "/" in ref else self.by_sid.get(ref, []))
                              if g in self.row_ids)
        return [{"gid": g, "_rowid": self.row_ids[g]} for g in named]


@dataclass(frozen=True)
class Ranked:
    """One entry of a final result list: the row, its score, and how it was found."""

    row: dict[str, Any]
    score: float
    via: str = "text"


@lru_cache(maxsize=1)
def _worker() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")


@lru_cache(maxsize=256)
def _query_vector(text: str, package: str, max_chars: int):
    from mem_retrieval.text.embed import embed_query, prepare

    return embed_query(prepare(text, max_chars), package)


class Searcher:
    """Ranks rows of one table (steps or events) for a query under filters."""

    def __init__(self, db, config: Config, ontology: Ontology, meta: dict[str, Any]):
        self.db = db
        self.config = config
        self.ontology = ontology
        self.settings = meta.get("settings", [])  # distinct step settings
        self.versions = meta.get("versions", {})  # the table versions the last index committed
        self._tables: dict[str, Any] = {}
        self._id_map: IdMap | None = None
        self._id_lookups = 0

    def table(self, name: str):
        """The table as the last completed `mem index` left it: its version is read from meta.json,
        so a search never sees a half-finished index (a crash or a concurrent reindex)."""
        if name not in self._tables:
            table = store.open_table(self.db, name)
            if table is None and self.versions.get(name):  # meta.json names it: it was deleted
                raise store.IndexDamaged(Path(self.db.uri).parent, f"table {name!r} is missing")
            if table is not None and self.versions.get(name):
                table.checkout(int(self.versions[name]))
            if table is not None and table.count_rows() == 0:
                table = None  # nothing to search (and no full-text index on an empty table)
            self._tables[name] = table
        return self._tables[name]

    # ---- the pieces
    def setting_exclusion(self, setting: str | None, any_setting: bool) -> list[str]:
        """Prefilter clauses leaving out steps whose setting is incompatible with ``setting``."""
        if not setting or any_setting:
            return []
        bad = [store.key(s) for s in self.settings if self.ontology.match(setting, s) == INCOMPATIBLE]
        return [f"NOT ({store.in_list('setting_key', bad)})"] if bad else []

    def id_rows(self, query: str, where: str | None) -> list[dict[str, Any]]:
        """Steps the query names by id, in the order it names them (ties by gid). Without filters,
        from the second lookup on, they come from an in-memory id map as light rows (gid and row
        id; ``complete`` reads the rest for the rows shown): a bare id such as ``A5-7`` can name
        hundreds of steps across runs, and reading all of them costs more than the page needs."""
        refs = ids_in_query(query)
        table = self.table("steps")
        if not refs or table is None:
            return []
        if where is None:
            self._id_lookups += 1
            if self._id_map is None and self._id_lookups >= ID_MAP_AFTER:
                self._id_map = IdMap.scan(table)
            if self._id_map is not None:
                return self._id_map.rows(refs)
        gid_keys = [store.key(r) for r in refs if "/" in r]
        sid_keys = [store.key(r) for r in refs if "/" not in r]
        clauses = [c for c in (store.in_list("key", gid_keys) if gid_keys else None,
                               store.in_list("sid_key", sid_keys) if sid_keys else None) if c]
        match = " OR ".join(f"({c})" for c in clauses)
        full = f"({match}) AND ({where})" if where else match
        rows = (table.search().where(full).select(STEP_COLUMNS).limit(table.count_rows())
                .to_arrow().to_pylist())
        order = {ref: i for i, ref in enumerate(refs)}
        rows.sort(key=lambda r: (min(order.get(r["gid"], 1 << 30), order.get(r["sid"], 1 << 30)),
                                 r["gid"]))
        return rows

    def complete(self, ranked: Sequence[Ranked]) -> list[Ranked]:
        """``ranked`` with every step column: the light rows the id map gave are taken by row id
        (the searcher's table version is pinned, so its row ids hold)."""
        light = [r.row["_rowid"] for r in ranked if "statement" not in r.row]
        if not light:
            return list(ranked)
        rows = {row["gid"]: row for row in self.table("steps").take_row_ids(light)
                .select(STEP_COLUMNS).to_arrow().to_pylist()}
        return [r if "statement" in r.row else Ranked(rows[r.row["gid"]], r.score, r.via)
                for r in ranked]

    def bm25(self, name: str, query: str, where: str | None, columns: list[str]) -> list[dict[str, Any]]:
        table = self.table(name)
        if table is None:
            return []
        tokens = token_string(query)
        if self.config.bm25_engine == "rank-bm25":
            return engines.rank_bm25_candidates(table, tokens, where, self.config.pool, columns,
                                                self.config.bm25_k1, self.config.bm25_b)
        return engines.lance_candidates(table, tokens, where, self.config.pool, columns)

    def query_vector(self, query: str):
        return _query_vector(query, self.config.model_package, self.config.max_chars)

    def query_vector_soon(self, query: str) -> Future:
        """Start embedding the query in a worker thread, so that the model (torch) and the BM25
        query (LanceDB, in Rust) run at the same time; both release the GIL."""
        return _worker().submit(self.query_vector, query)

    def rerank(self, candidates: list[dict[str, Any]], query: str,
               vector: Future | None = None) -> list[Ranked]:
        """Fuse BM25 and cosine over the top K candidates; the rest keep BM25 order below them."""
        import numpy as np

        if not candidates:
            return []
        k = min(self.config.rerank_k, len(candidates))
        top, rest = candidates[:k], candidates[k:]
        w = self.config.fusion_weight
        best = max(c["bm25"] for c in candidates) or 1.0
        if k:
            vectors = np.asarray([c["vector"] for c in top], dtype=np.float32)
            cosine = vectors @ (vector.result() if vector is not None else self.query_vector(query))
            fused = [w * float(cos) + (1 - w) * c["bm25"] / best for c, cos in zip(top, cosine)]
        else:
            fused = []
        ranked = sorted((Ranked(c, s) for c, s in zip(top, fused)),
                        key=lambda r: (-r.score, r.row["gid"]))
        floor = min(fused) if fused else 1.0
        edge = top[-1]["bm25"] if top else best
        ranked += [Ranked(c, floor * c["bm25"] / edge if edge else 0.0) for c in rest]
        return ranked

    # ---- strategies
    def rank(self, name: str, query: str, filters: Filters, setting: str | None = None,
             any_setting: bool = False, strategy: str = "rerank") -> list[Ranked]:
        """The whole result list for ``query`` on table ``name`` (steps or events)."""
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}")
        extra = self.setting_exclusion(setting, any_setting) if name == "steps" else []
        where = filters.where(name, extra)
        columns = (STEP_COLUMNS if name == "steps" else EVENT_COLUMNS) + ["vector"]
        ids: list[Ranked] = []
        if name == "steps" and strategy in ("rerank", "bm25"):
            ids = [Ranked(row, 1.0, "id") for row in self.id_rows(query, filters.where(name))]
            if ids and exact_lookup(query):
                return ids  # an exact id lookup: the steps it names, no text search, no model
        if strategy == "rerank":
            vector = self.query_vector_soon(query) if self.table(name) is not None else None
            ranked = self.rerank(self.bm25(name, query, where, columns), query, vector)
        elif strategy == "bm25":
            found = self.bm25(name, query, where, columns)
            best = max((c["bm25"] for c in found), default=1.0) or 1.0
            ranked = [Ranked(c, c["bm25"] / best) for c in found]
        else:
            table = self.table(name)
            if table is None:
                return []
            near = engines.vector_candidates(table, self.query_vector(query), where,
                                             self.config.pool, columns)
            if strategy == "vector":
                ranked = [Ranked(c, c["cosine"]) for c in near]
            else:
                ranked = rrf([self.bm25(name, query, where, columns), near], self.config.pool)
        seen = {r.row["gid"] for r in ids}
        out = ids + [r for r in ranked if r.row["gid"] not in seen]
        if name == "steps" and setting and not any_setting:
            out = [r for r in out if r.via == "id"
                   or self.ontology.match(setting, r.row["setting"]) != INCOMPATIBLE]
        return out[: max(self.config.pool, len(ids))]


def rrf(lists: list[list[dict[str, Any]]], limit: int) -> list[Ranked]:
    """Reciprocal rank fusion: score(d) = sum over lists of 1 / (60 + rank)."""
    scores: dict[str, float] = {}
    rows: dict[str, dict[str, Any]] = {}
    for ranking in lists:
        for rank, row in enumerate(ranking, start=1):
            scores[row["gid"]] = scores.get(row["gid"], 0.0) + 1.0 / (RRF_K + rank)
            rows.setdefault(row["gid"], row)
    order = sorted(scores, key=lambda gid: (-scores[gid], gid))[:limit]
    return [Ranked(rows[gid], scores[gid]) for gid in order]
