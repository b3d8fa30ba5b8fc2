"""The query pipeline, in the order the design requires: ids first, then the strategy's text
candidates (by default, ``rerank-graph``: BM25's and the steps the query's nearest citing steps vote
for, scored with the embedding, which never adds a candidate), then the pool cut. The setting rule
(M3) and the other filters are the prefilter of every step read (``Request.where``).

A ``Searcher`` reads the table versions the last completed `mem index` pinned in meta.json, so a
search never sees a half-finished index (a crash or a concurrent reindex)."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from mem_retrieval.configs import Config
from mem_retrieval.indexers import store
from mem_retrieval.records.ids import id_shape, spellings, split_gid
from mem_retrieval.records.settings import Ontology, remembered
from mem_retrieval.retrieval import engines
from mem_retrieval.retrieval.candidates import Candidate, EventRow, StepRow, from_arrow
from mem_retrieval.retrieval.query import (ArchiveQuery, Filters, Hidden, Until, exact_lookup, id_word_forms,
                                            id_words, ids_in_query)
from mem_retrieval.retrieval.graph import CitationGraph
from mem_retrieval.retrieval.strategies import STRATEGIES, Request, Strategy, check_strategy
from mem_retrieval.text.tokenize import token_string

ID_MAP_AFTER = 2  # id lookups (without filters) by one searcher before it builds its IdMap
RESIDENT_AFTER = 3  # text searches of the steps by one searcher before it holds them in memory:
                    # one CLI call searches at most twice (the second finds what a setting left out)


def _typed_first(text: str, found: list[Candidate]) -> list[Candidate]:
    """The id hits ``found`` (of every form of the query's id words) less those only a word's
    look-alike form names when the word as typed names a step itself (``query.id_word_forms``):
    where `A5-7` and `A5‑7` are both ids, `A5‑7` lists its own step alone, as archive-get reads it."""
    words = id_word_forms(text)
    if not any(extra for _, extra in words):
        return found

    gids = {c.gid for c in found}
    sids = {split_gid(gid)[1] for gid in gids}

    def names(ref: str) -> bool:  # a global id names its step, a bare one every run's
        return ref in gids if "/" in ref else ref in sids

    read: set[str] = set()
    for typed, extra in words:
        read |= typed if any(map(names, typed)) else typed | extra
    return [c for c in found if c.gid in read or split_gid(c.gid)[1] in read]


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

    def candidates(self, refs: list[str]) -> list[Candidate]:
        """Light candidates (gid, row id) of the steps ``refs`` name, each once, in ``id_hits``
        order: by the first ref naming the step, then by gid (a global id names its step, a bare
        id every step with that id, sorted by gid)."""
        named = dict.fromkeys(g for ref in refs
                              for g in ([ref] if "/" in ref else self.by_sid.get(ref, []))
                              if g in self.row_ids)
        return [Candidate(g, row_id=self.row_ids[g], score=1.0, via="id") for g in named]


@lru_cache(maxsize=1)
def _builder() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="resident")


@lru_cache(maxsize=1)
def _worker() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")


_SEARCHERS: "weakref.WeakSet[Searcher]" = weakref.WeakSet()


def _forked() -> None:
    """In a child forked from a process that searched (multiprocessing's fork, a pre-forking
    server): the parent's threads are not there, so the pools are made afresh (the old ones would
    queue work no thread runs, and every search would wait for ever), and each searcher's lock and
    unfinished in-memory table are dropped (the table is built again when asked)."""
    _builder.cache_clear()
    _worker.cache_clear()
    for searcher in list(_SEARCHERS):
        searcher._lock = threading.Lock()
        if searcher._resident is not None and not searcher._resident.done():
            searcher._resident = None


os.register_at_fork(after_in_child=_forked)


@lru_cache(maxsize=256)
def _query_vector(text: str, spec, max_chars: int):
    from mem_retrieval.text.embed import embed_query, prepare

    return embed_query(prepare(text, max_chars), spec)


def forget_query_vectors() -> None:
    """Drop the query vectors kept for texts asked again (``_query_vector``): a benchmark that
    times the same texts twice (as of a cut, after as they stand) pays each embedding each time,
    as a new query does."""
    _query_vector.cache_clear()


@dataclass(frozen=True, eq=False)
class Judged:
    """One settings ontology and what a searcher judged by it (the setting rule, M3)."""

    ontology: Ontology
    exclusions: dict[str, tuple[int, ...]] = field(default_factory=dict)  # setting -> excluded keys
    matches: dict[tuple, bool] = field(default_factory=dict)  # (setting, other, hyps) -> refused

    def refused(self, setting: str, other: str, hyps: Sequence[str]) -> bool:
        """Whether a step of setting ``other`` with ``hyps`` may not be reused where ``setting``
        holds (M3; remembered)."""
        return remembered(self.matches, (setting, other, tuple(hyps)), 65536,
                           lambda: not self.ontology.reusable(setting, other, hyps))


class Searcher:
    """Ranks rows of one table (steps or events) for a query under filters."""

    def __init__(self, db, config: Config, ontology: Callable[[], Ontology], meta: dict[str, Any],
                 location: store.Location | None = None):
        self.db = db
        self.location = location or store.at(Path(db.uri).parent)  # a folder index by default
        self.config = config
        self._ontology = ontology  # the settings ontology as the files stand now (``judging``)
        self._judged: Judged | None = None
        self.settings = meta.get("settings", [])  # distinct [setting, hypotheses] of the steps
        self.pending = int(meta.get("pending") or 0)  # texts whose vectors `mem index` still computes
        self.meta = meta  # meta.json as this searcher read it
        self.versions = meta.get("versions", {})  # the table versions the last index committed
        self._tables: dict[str, Any] = {}
        self._id_map: IdMap | None = None
        self._id_lookups = 0
        self._graph: CitationGraph | None = None
        self._before_runs: dict[str, Hidden] = {}  # run -> before_run(run), of this table version
        self._logged: dict[str, int] | None = None
        self._logged_ts: dict[str, int] = {}
        self._shapes: frozenset[str] | None = None
        self._lock = threading.Lock()
        self._searches = 0
        self._resident: Future | None = None  # the steps table in memory (ResidentSteps), once asked
        self._pending_in: dict[str, int] = {}
        _SEARCHERS.add(self)

    def table(self, name: str):
        """The table as the last completed `mem index` left it (None when it holds nothing)."""
        if name not in self._tables:
            table = store.open_table(self.db, name)
            if table is None and self.versions.get(name):  # meta.json names it: it was deleted
                raise store.IndexDamaged(self.location, f"table {name!r} is missing")
            if table is not None and self.versions.get(name):
                table.checkout(int(self.versions[name]))
            if table is not None and table.count_rows() == 0:
                table = None  # nothing to search (and no full-text index on an empty table)
            self._tables[name] = table
        return self._tables[name]

    @cached_property
    def model(self):
        """The model that embeds the queries (resolved on the first search that needs a vector:
        id lookups and BM25 never touch the model files)."""
        return store.model_spec(self.location, self.meta, self.config)

    def strategy(self, name: str | None, table: str = "steps") -> Strategy:
        """The strategy called ``name`` (None: the configured default) over ``table``; while the
        vectors of its texts are still being computed, the one answering without them
        (``degraded``)."""
        chosen = self._chosen(name)
        fallback = self.degraded(chosen, table)
        return STRATEGIES[fallback[1] if fallback else chosen]

    def degraded(self, name: str | None, table: str = "steps") -> tuple[str, str] | None:
        """``(asked, answered)`` when the strategy called ``name`` is answered by another because
        vectors of ``table``'s texts are still being computed (``pending_in``), else None (derived
        per call: requests on other threads share this searcher)."""
        chosen = self._chosen(name)
        strategy = STRATEGIES[chosen]
        waiting = strategy.without_vectors and self.pending_in(table)
        return (chosen, strategy.without_vectors) if waiting else None

    def pending_in(self, name: str) -> int:
        """How many texts of table ``name`` have no vector yet (rows not ``embedded``): 0 when
        meta.json pends none, else counted once per searcher (its tables are pinned). Per table:
        a backfill of steps left recall-search answering in BM25 order, every event embedded."""
        if not self.pending:
            return 0
        if name not in self._pending_in:
            table = self.table(name)
            waiting = set() if table is None else set(
                table.search().where("embedded = false").select(["text_hash"])
                .limit(max(table.count_rows(), 1)).to_arrow()["text_hash"].to_pylist())
            self._pending_in[name] = len(waiting)
        return self._pending_in[name]

    def _chosen(self, name: str | None) -> str:
        return self.config.search.strategy if name is None else check_strategy(name)  # the config's: as read

    # ---- the steps table held in memory (retrieval/resident.py)
    def resident(self):
        """The pinned steps table in memory when it is ready, else None (the index answers)."""
        future = self._resident
        if future is None or not future.done() or future.exception() is not None:
            return None
        return future.result()

    def warm_soon(self) -> None:
        """Start reading the steps table into memory on a worker thread (once per searcher)."""
        with self._lock:
            if (self._resident is None and self.config.bm25.engine == "lance"  # (rank-bm25: a comparison)
                    and self.table("steps") is not None):
                from mem_retrieval.retrieval.resident import ResidentSteps

                table, vectors = self.table("steps"), not self.pending_in("steps")
                self._resident = _builder().submit(ResidentSteps.scan, table, vectors)

    def warm(self) -> None:
        """Read the steps table into memory now (what a long-lived caller may do up front)."""
        self.warm_soon()
        if self._resident is not None:
            self._resident.result()

    def _searched(self) -> None:
        """Count a text search; from the ``RESIDENT_AFTER``-th on, the table goes into memory."""
        self._searches += 1
        if self._searches >= RESIDENT_AFTER and self._resident is None:
            self.warm_soon()

    # ---- the pieces strategies use
    def bm25(self, request: Request, vectors: bool = True) -> list[Candidate]:
        """The ``search.pool`` best BM25 candidates of the request's table under its prefilter,
        best first (ties by gid)."""
        table = self.table(request.table)
        if table is None:
            return []
        tokens, pool, bm25 = token_string(request.text), self.config.search.pool, self.config.bm25
        resident = self.resident() if request.table == "steps" else None
        if resident is not None:
            return resident.text(tokens, request, pool, vectors)
        memory = request.filters.memory().where(request.table)
        if bm25.engine == "rank-bm25":
            return engines.rank_bm25_candidates(table, request.table, tokens, memory, request.where,
                                                pool, bm25.k1, bm25.b, vectors)
        if memory is not None:  # as of a time, or before a hidden step: statistics over that memory
            return engines.memory_bm25_candidates(table, request.table, tokens, memory, request.where,
                                                  pool, vectors)
        return engines.lance_candidates(table, request.table, tokens, request.where, pool, vectors)

    def nearest(self, request: Request) -> list[Candidate]:
        """The ``search.pool`` nearest rows by cosine (the comparison strategies only)."""
        table = self.table(request.table)
        if table is None:
            return []
        return engines.vector_candidates(table, request.table, self.query_vector(request.text),
                                         request.where, self.config.search.pool)

    def steps_by_key(self, keys: list[int], request: Request) -> list[Candidate]:
        """The steps with these keys that pass the request's prefilter, with their vectors (votes
        bring them; the caller orders them)."""
        table = self.table("steps")
        if table is None or not keys:
            return []
        resident = self.resident()
        if resident is not None:
            return resident.by_key(keys, request)
        match = store.in_list("key", keys)
        where = request.where
        data = (table.search().where(f"({match}) AND ({where})" if where else match)
                .select(list(StepRow.COLUMNS) + ["vector"]).limit(len(keys)).to_arrow())
        return from_arrow(data, "steps")

    def before(self, gid: str) -> Hidden:
        """What hiding the step ``gid`` hides: memory as it stood before it was written, read
        from the citation graph (``CitationGraph.before``; the step alone without a graph)."""
        graph = self.graph()
        return graph.before(gid) if graph is not None else Hidden.only(gid)

    def hidden(self, query: ArchiveQuery, also: frozenset[int] = frozenset()) -> Hidden | None:
        """What ``query`` hides of memory: a step (``before``) or a run (``CitationGraph.before_run``;
        without a graph, the run's steps alone); and the steps keyed ``also`` (what tuning for
        held-out queries may not see: not counted in BM25's statistics either)."""
        if query.hide is not None:
            found = self.before(query.hide)
        else:
            found = None if query.hide_run is None else self.before_run(query.hide_run)
        if not also:
            return found
        found = found or Hidden(())
        return replace(found, keys=tuple(sorted(set(found.keys) | also)))

    def before_run(self, run: str) -> Hidden:
        """What hiding ``run`` hides (``CitationGraph.before_run``; the run's steps alone without a
        graph), worked out once a searcher: the reuse test asks it of each Fix probe and of the
        steps it requires."""
        if run not in self._before_runs:
            graph = self.graph()
            self._before_runs[run] = (graph.before_run(run) if graph is not None
                                      else Hidden((), store.key(run), -1))
        return self._before_runs[run]

    def graph(self) -> CitationGraph | None:
        """The citation graph of the pinned steps table (read on first use)."""
        resident = self.resident()
        if resident is not None:
            self._graph = None  # the resident table's graph replaces the one read before it
            return resident.graph
        if self._graph is None and self.table("steps") is not None:
            self._graph = CitationGraph.scan(self.table("steps"))
        return self._graph

    def query_vector(self, text: str):
        return _query_vector(text, self.model, self.config.model.max_chars)

    def query_vector_soon(self, text: str) -> Future:
        """Start embedding the query in a worker thread, so that the model (torch) and the BM25
        query (LanceDB, in Rust) run at the same time; both release the GIL."""
        return _worker().submit(self.query_vector, text)

    # ---- ids and settings
    def judging(self) -> "Judged":
        """The settings ontology as the workspace's files stand (read again only when
        ``solve/settings.toml`` changed), with what was judged by it: a searcher kept open (a
        ``Memory``, `mem serve`, `mem mcp`) judges by an edited file at its next search. Swapped
        whole, so a search still using an older one fills that one's memos, never the new one's."""
        current = self._ontology()
        judged = self._judged
        if judged is None or judged.ontology is not current:
            judged = self._judged = Judged(current)
        return judged

    def setting_exclusion(self, setting: str | None, any_setting: bool) -> tuple[int, ...]:
        """The keys of the steps' settings and hypotheses that ``setting`` does not imply (the
        setting rule, M3: the prefilter of every engine), worked out once per searcher, ontology
        and setting (hundreds of distinct settings cost ~7 ms)."""
        if not setting or any_setting:
            return ()
        judged = self.judging()
        return remembered(judged.exclusions, setting, 1024, lambda: tuple(
            store.reuse_key(s, h) for s, h in self.settings if judged.refused(setting, s, h)))

    def id_hits(self, text: str, where: str | None) -> list[Candidate]:
        """Steps the query names by id, in the order it names them (ties by gid). Without filters,
        from the second lookup on, they come from an in-memory id map as light candidates
        (``complete`` reads the rest for the rows shown): a bare id such as ``A5-7`` can name
        hundreds of steps across runs, and reading all of them costs more than the page needs."""
        refs = ids_in_query(text)
        table = self.table("steps")
        if not refs or table is None:
            return []
        if where is None:
            self._id_lookups += 1
            if self._id_map is None and self._id_lookups >= ID_MAP_AFTER:
                self._id_map = IdMap.scan(table)
            if self._id_map is not None:
                return _typed_first(text, self._id_map.candidates(refs))
        gid_keys = [store.key(r) for r in refs if "/" in r]
        sid_keys = [store.key(r) for r in refs if "/" not in r]
        clauses = [c for c in (store.in_list("key", gid_keys) if gid_keys else None,
                               store.in_list("sid_key", sid_keys) if sid_keys else None) if c]
        match = " OR ".join(f"({c})" for c in clauses)
        full = f"({match}) AND ({where})" if where else match
        data = (table.search().where(full).select(list(StepRow.COLUMNS)).limit(table.count_rows())
                .to_arrow())
        order = {ref: i for i, ref in enumerate(refs)}
        found = from_arrow(data, "steps")
        found.sort(key=lambda c: (min(order.get(c.gid, 1 << 30), order.get(c.row.sid, 1 << 30)), c.gid))
        return _typed_first(text, [replace(c, score=1.0, via="id") for c in found])

    def complete(self, ranked: Sequence[Candidate]) -> list[Candidate]:
        """``ranked`` with every row read: the light candidates the id map gave are taken by row id
        (the searcher's table version is pinned, so its row ids hold)."""
        light = [c.row_id for c in ranked if c.row is None]
        if not light:
            return list(ranked)
        resident = self.resident()
        if resident is not None:
            found = resident.candidates(resident.positions(light), vectors=False)
        else:
            found = from_arrow(self.table("steps").take_row_ids(light).select(list(StepRow.COLUMNS))
                               .to_arrow(), "steps")
        rows = {c.gid: c.row for c in found}
        return [c if c.row is not None else replace(c, row=rows[c.gid]) for c in ranked]

    # ---- the pipeline
    def rank_steps(self, query: ArchiveQuery, until: Until | None,
                   also_hidden: frozenset[int] = frozenset()) -> list[Candidate]:
        """The whole result list of an archive query (``until`` its as-of point, resolved; the
        steps keyed ``also_hidden`` hidden too, ``hidden``)."""
        ids, found = self.steps_found(query, until, also_hidden=also_hidden)
        return (ids + found)[: max(self.config.search.pool, len(ids))]

    def steps_found(self, query: ArchiveQuery, until: Until | None, scored: bool = True,
                    also_hidden: frozenset[int] = frozenset()) -> tuple[list[Candidate], list[Candidate]]:
        """The steps the query names by id, and its strategy's text candidates after the setting
        rule: ranked (``scored``), or as the strategy found them, with their features, before it
        scores and cuts them (what a fusion is tuned on)."""
        strategy = self.strategy(query.strategy)
        filters = query.filters(until, self.hidden(query, also_hidden))
        self._searched()
        ids = self.id_hits(query.text, filters.where("steps"))
        if ids and exact_lookup(query.text) and not self.unnamed_words(query.text, ids)[1]:
            return ids, []  # an exact id lookup: the steps it names, no text search, no model
        excluded = self.setting_exclusion(query.setting, query.any_setting)
        request = Request("steps", query.text, filters, excluded, query.context_run,
                          frozenset(c.gid for c in ids))
        found = strategy.rank(self, request) if scored else strategy.candidates(self, request)
        return ids, found  # the setting rule is the prefilter's (``setting_key``, every engine's)

    def rank_events(self, text: str, filters: Filters) -> list[Candidate]:
        """The result list of a recall query: events by the default rerank over their text."""
        ranked = self.strategy("rerank", "events").rank(self, Request("events", text, filters))
        return ranked[: self.config.search.pool]

    def keys_in_memory(self, filters: Filters) -> frozenset[int]:
        """The keys of the steps in memory under ``filters``'s cut (``Filters.memory``: its
        ``until`` and hidden steps), as the graph features see it (``CitationGraph.visible``)."""
        graph = self.graph()
        if graph is None:
            return frozenset()
        seen = graph.visible(filters)
        return frozenset((graph.keys if seen is None else graph.keys[seen]).tolist())

    def holds_run(self, run: str) -> bool:
        """Whether the index holds a step of ``run`` (read from the citation graph)."""
        graph = self.graph()
        return graph is not None and bool((graph.run_keys == store.key(run)).any())

    def known_gids(self) -> list[str]:
        """Every global id the index holds: its steps (the library's among them) and sources, read
        from the pinned tables' gid column (at 80,000 steps, reading every tree.json and the library
        for them took 3.5 s of a cold call)."""
        known: list[str] = []
        for name in ("steps", "sources"):
            table = self.table(name)
            if table is not None:
                gids = table.search().select(["gid"]).limit(table.count_rows()).to_arrow()["gid"]
                known += gids.to_pylist()
        return known

    def unnamed_words(self, text: str, named: Sequence[Candidate]) -> tuple[list[str], list[str]]:
        """The id-like words of ``text`` that name none of the steps ``named`` (id hits), as
        written: (those of the shape of a step id the index holds, or global: a typo, a step not
        indexed yet, one the filters leave out; the others: symbols, ``E6`` or ``SL2`` where ids
        look like ``A5-7``, asked for as words). A query of ids with a symbol among them is no
        exact lookup: its text is searched too (``E6 A5-9`` listed A5-9 alone, as the last page)."""
        names = {part for c in named for part in (c.gid, c.gid.split("/", 1)[1])}
        words = [forms for forms in id_words(text) if not names.intersection(forms)]
        shapes = self.id_shapes() if any("/" not in forms[0] for forms in words) else frozenset()
        typos = [forms[0] for forms in words if "/" in forms[0] or any(id_shape(f) in shapes for f in forms)]
        return typos, [forms[0] for forms in words if forms[0] not in typos]

    def id_shapes(self) -> frozenset[str]:
        """The shapes (``records.ids.id_shape``) of the step ids the index holds: meta.json's
        (`mem index` lists them), else read once a searcher (about 0.4 s at 100,000 steps)."""
        if self._shapes is None:
            stored = self.meta.get("id_shapes")
            if isinstance(stored, list) and all(isinstance(shape, str) for shape in stored):
                self._shapes = frozenset(stored)
                return self._shapes
            if self._id_map is not None:
                sids = list(self._id_map.by_sid)
            else:
                table = self.table("steps")
                sids = ([] if table is None else
                        table.search().select(["sid"]).limit(max(table.count_rows(), 1)).to_arrow()["sid"]
                        .to_pylist())
            self._shapes = frozenset(map(id_shape, sids))
        return self._shapes

    def logged_events(self) -> dict[str, int]:
        """Per run, the last sequence number of its events the index holds (its log as the last
        `mem index` read it); read once a searcher (its tables are pinned)."""
        if self._logged is None:
            table = self.table("events")
            logged: dict[str, int] = {}
            if table is not None:
                last = (table.search().select(["run", "seq", "ts"]).limit(max(table.count_rows(), 1))
                        .to_arrow().group_by("run").aggregate([("seq", "max"), ("ts", "max")]))
                logged = dict(zip(last["run"].to_pylist(), last["seq_max"].to_pylist()))
                self._logged_ts = dict(zip(last["run"].to_pylist(), last["ts_max"].to_pylist()))
            self._logged = logged
        return self._logged

    def logged_time(self, run: str) -> int | None:
        """The time (``ts``, as the index dates it) of the last of ``run``'s events the index holds
        (``logged_events``): a run's times never decrease as the index dates them."""
        self.logged_events()
        return self._logged_ts.get(run)

    def events_naming(self, ref: str, filters: Filters) -> list[Candidate]:
        """Every event naming the step ``ref`` (in its ids: a global id, or, bare, a step of any
        run with that id), in time order; a run's events in its log order (its times never
        decrease; ties by run, then sequence number)."""
        table = self.table("events")
        if table is None:
            return []
        column = "id_keys" if "/" in ref else "sid_keys"
        where = filters.where("events", [" OR ".join(f"array_has({column}, {store.key(spelled)})"
                                                     for spelled in spellings(ref, lookalikes=False))])
        data = (table.search().where(where).select(list(EventRow.COLUMNS) + ["ts"])
                .limit(max(table.count_rows(), 1)).to_arrow())
        found = zip(data["ts"].to_pylist(), from_arrow(data, "events"))
        ordered = sorted(found, key=lambda t: (t[0], t[1].row.run, t[1].row.seq))
        return [replace(c, score=1.0) for _, c in ordered]

