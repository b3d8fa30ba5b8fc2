"""The Python API: ``Memory.open(workspace).archive_search(query, setting=None, page=1) -> Page``.

The CLI is a thin shell over this class. Searches read the LanceDB index (lancedb is imported when
the first search runs; torch only when a rerank needs the model). ``archive_get`` reads the
workspace files directly, so an id lookup imports neither."""

from __future__ import annotations

import difflib
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mem_retrieval.configs import Config, load_config
from mem_retrieval.records.errors import NotFound, UsageError
from mem_retrieval.records.ids import ref_problem, split_gid
from mem_retrieval.records.types import LibraryEntry, Source, Step
from mem_retrieval.records.workspace import Workspace, library_as_step
from mem_retrieval.retrieval.paging import page_count, page_slice
from mem_retrieval.retrieval.query import Filters, Until, parse_time_arg
from mem_retrieval.retrieval.types import EventHit, Hit, Page

EXCERPT_CHARS = 300


@dataclass(frozen=True)
class StepView:
    """One full step for archive_get: the record, and where it lives."""

    step: Step
    in_library: bool
    inserted: str = ""

    def as_dict(self) -> dict[str, Any]:
        s = self.step
        return {
            "id": s.gid, "run": s.run, "kind": s.kind, "statement": s.statement, "hyp": list(s.hyp),
            "setting": s.setting, "parents": list(s.parents), "proof": s.proof, "status": s.status,
            "audit": None if s.audit is None else {"grade": s.audit.grade, "by": s.audit.by,
                                                   "note": s.audit.note, "repaired": s.audit.repaired},
            "missing": s.missing or None, "failed_input": s.failed_input or None, "agent": s.agent,
            "in_library": self.in_library, "inserted": self.inserted or None,
        }


@dataclass(frozen=True)
class SourceView:
    source: Source

    def as_dict(self) -> dict[str, Any]:
        s = self.source
        return {"id": s.gid, "run": s.run, "kind": "source", "origin": s.origin,
                "retrieved": s.retrieved, "hash": s.hash, "path": s.path}


def _check_text(query: str) -> None:
    """A query must be Unicode text: an unpaired surrogate (bytes that were not UTF-8) is refused."""
    if any("\ud800" <= c <= "\udfff" for c in query):
        raise UsageError("the query is not valid Unicode text (it holds an unpaired surrogate)")


def _score(ranked) -> float:
    """The score a hit shows (and the paging hint reads): four decimals."""
    return round(ranked.score, 4)


def _reads_index(method):
    """A search reading a damaged index fails with one line naming the fix (indexers.store.guard)."""

    @functools.wraps(method)
    def guarded(self: "Memory", *args, **kwargs):
        from mem_retrieval.indexers import store

        with store.guard(self.workspace.index_dir):
            return method(self, *args, **kwargs)

    return guarded


class Memory:
    """Memory of one workspace: index it, search its steps and events, get one step."""

    def __init__(self, workspace: Workspace, config: Config):
        self.workspace = workspace
        self.config = config
        self._searcher = None

    @classmethod
    def open(cls, workspace: str | os.PathLike[str] | Workspace | None = None,
             config: Config | str | os.PathLike[str] | None = None) -> "Memory":
        ws = workspace if isinstance(workspace, Workspace) else Workspace.open(workspace)
        if not isinstance(config, Config):
            config = load_config(ws.root, Path(config) if config else None)
        return cls(ws, config)

    # ---- indexing
    def index(self, runs: list[str] | None = None, full: bool = False, progress: bool | None = None,
              on_message=None):
        from mem_retrieval.indexers.build import build_index

        self._searcher = None
        return build_index(self.workspace, self.config, runs, full, progress, on_message)

    # ---- searching
    @property
    def searcher(self):
        if self._searcher is None:
            from mem_retrieval.indexers import store
            from mem_retrieval.retrieval.search import Searcher

            meta = store.check_meta(self.workspace.index_dir, self.config)
            self._searcher = Searcher(store.connect(self.workspace.index_dir), self.config,
                                      self.workspace.ontology, meta)
        return self._searcher

    @_reads_index
    def ranked_steps(self, query: str, filters: Filters, setting: str | None = None,
                     any_setting: bool = False, strategy: str = "rerank"):
        """The whole ordered result list (``retrieval.search.Ranked``), before paging."""
        return self.searcher.rank("steps", query, filters, setting, any_setting, strategy)

    @_reads_index
    def archive_search(self, query: str, setting: str | None = None, *, run: str | None = None,
                       kind: str | None = None, status: str | None = None, page: int = 1,
                       any_setting: bool = False, until: str | Until | None = None,
                       strategy: str = "rerank", library: bool = False,
                       exclude_run: str | None = None) -> Page[Hit]:
        """Steps of the runs and the library for ``query``, 5 a page (SPEC §9)."""
        ranked = self._ranked(query, setting, run, kind, status, any_setting, until, strategy,
                              library, exclude_run)
        size = self.config.page_size
        shown = self.searcher.complete(page_slice(ranked, page, size))
        return Page(hits=tuple(self._hit(r, setting) for r in shown), page=page,
                    pages=page_count(len(ranked), size), total=len(ranked), query=query,
                    setting=setting, remaining=self._remaining([_score(r) for r in ranked], page))

    @_reads_index
    def archive_hits(self, query: str, setting: str | None = None, *, run: str | None = None,
                     kind: str | None = None, status: str | None = None, any_setting: bool = False,
                     until: str | Until | None = None, strategy: str = "rerank",
                     library: bool = False, exclude_run: str | None = None) -> list[Hit]:
        """The whole result list of ``archive_search``, before paging. ``until`` is a ``--until``
        value or a resolved ``Until``; ``library`` keeps only library steps."""
        ranked = self._ranked(query, setting, run, kind, status, any_setting, until, strategy,
                              library, exclude_run)
        return [self._hit(r, setting) for r in self.searcher.complete(ranked)]

    def _ranked(self, query: str, setting: str | None, run: str | None, kind: str | None,
                status: str | None, any_setting: bool, until: str | Until | None, strategy: str,
                library: bool, exclude_run: str | None):
        if not query or not query.strip():
            raise UsageError("the query is empty")
        _check_text(query)
        filters = Filters(run=run, kind=kind, status=status, exclude_run=exclude_run,
                          until=self._until(until, run), library=library)
        return self.ranked_steps(query, filters, setting, any_setting, strategy)

    def _hit(self, r, setting: str | None) -> Hit:
        """The Hit of one completed ``retrieval.search.Ranked`` entry."""
        row = r.row
        return Hit(id=row["gid"], run=row["run"], kind=row["kind"], statement=row["statement"],
                   status=row["status"], grade=row["grade"], setting=row["setting"],
                   setting_match=self.workspace.ontology.match(setting, row["setting"])
                   if setting else None,
                   score=_score(r), in_library=bool(row["in_library"]), via=r.via)

    @_reads_index
    def recall_search(self, query: str | None = None, *, id: str | None = None,
                      run: str | None = None, page: int = 1,
                      until: str | Until | None = None) -> Page[EventHit]:
        """Events with their briefs and returns: by id in log order, or by query, 5 a page."""
        hits = self.recall_hits(query, id=id, run=run, until=until)
        return self._page(hits, page, query if id is None else id, None)

    def recall_hits(self, query: str | None = None, *, id: str | None = None,
                    run: str | None = None, until: str | Until | None = None) -> list[EventHit]:
        """The whole result list of ``recall_search``, before paging."""
        if (query is None or not query.strip()) == (id is None):
            raise UsageError("give a query or --id, not both")
        _check_text(query or "")
        filters = Filters(run=run, until=self._until(until, run))
        if id is not None:
            rows = self._events_naming(id, filters)
            scored = [(row, 1.0) for row in rows]
        else:
            scored = [(r.row, r.score) for r in self.searcher.rank("events", query, filters)]
        return [EventHit(id=row["gid"], run=row["run"], seq=row["seq"], time=row["time"],
                         actor=row["actor"], kind=row["kind"], ids=tuple(row["ids"]),
                         text=row["text"], path=row["path"],
                         excerpt=" ".join(row["body"][:EXCERPT_CHARS].split()),
                         score=round(score, 4)) for row, score in scored]

    def _events_naming(self, ref: str, filters: Filters) -> list[dict[str, Any]]:
        from mem_retrieval.indexers.store import key
        from mem_retrieval.retrieval.search import EVENT_COLUMNS

        problem = ref_problem(ref)
        if problem:
            raise UsageError(f"--id {problem}")
        table = self.searcher.table("events")
        if table is None:
            return []
        column = "id_keys" if "/" in ref else "sid_keys"
        match = f"array_has({column}, {key(ref)})"
        where = filters.where("events", [match])
        rows = table.search().where(where).select(EVENT_COLUMNS).limit(
            max(table.count_rows(), 1)).to_arrow().to_pylist()
        return sorted(rows, key=lambda row: (row["run"], row["seq"]))

    def _page(self, hits: list, page: int, query: str | None, setting: str | None) -> Page:
        size = self.config.page_size
        return Page(hits=page_slice(hits, page, size), page=page, pages=page_count(len(hits), size),
                    total=len(hits), query=query, setting=setting,
                    remaining=self._remaining([h.score for h in hits], page))

    def _remaining(self, scores: list[float], page: int) -> float | None:
        from mem_retrieval.retrieval.hint import estimate_remaining

        return estimate_remaining(scores, page, self.config.page_size,
                                  self.config.hint_window)

    # ---- as of an event
    def _until(self, value: str | Until | None, run: str | None) -> Until | None:
        if value is None or isinstance(value, Until):
            return value
        return self.resolve_until(value, run) if value else None

    def resolve_until(self, value: str, run: str | None) -> Until:
        """``--until``: a sequence number or an event's id (needs the run, which a global id
        gives), or an ISO time. An event's id is an id in its ``ids`` (bare or global) or the first
        word of its text (``R-1: …``, ``R-4 (verdict draft): …``); the first such event counts."""
        value = value.strip()
        stamp = parse_time_arg(value) if not value.isdigit() else None
        if stamp is not None:
            return Until(micros=int(stamp.timestamp() * 1_000_000))
        ref_run, local = split_gid(value)
        run = run or ref_run
        if run is None:
            raise UsageError(f"--until {value!r}: a sequence number or event id needs --run")
        forms = {value} | ({local, f"{run}/{local}"} if ref_run in (None, run) else set())
        last = None
        for event in self.workspace.events(run):
            words = event.text.split(maxsplit=1)
            named = bool(forms & set(event.ids)) or bool(words and words[0].rstrip(":;,.") == value)
            if (value.isdigit() and event.seq == int(value)) or (not value.isdigit() and named):
                return Until(micros=int(event.timestamp.timestamp() * 1_000_000), run=run, seq=event.seq)
            last = event
        if value.isdigit() and last is not None and int(value) > last.seq:
            return Until(micros=int(last.timestamp.timestamp() * 1_000_000), run=run, seq=int(value))
        raise NotFound(f"--until {value!r}: no such event in run {run!r}")

    # ---- one step
    def archive_get(self, ref: str, run: str | None = None) -> StepView | SourceView:
        """One full step (or source), read from the workspace files: no index, no model."""
        problem = ref_problem(ref)
        if problem:
            raise UsageError(f"id {problem}")
        ref_run, step_id = split_gid(ref)
        runs = [ref_run or run] if (ref_run or run) else self.workspace.runs()
        library = None
        for name in runs:
            if name and self.workspace.tree_path(name).is_file():
                tree = self.workspace.tree(name)
                step = tree.step(step_id)
                if step is not None:
                    library = library if library is not None else self._library()
                    entry = library.get(step.gid)
                    return StepView(step, entry is not None, entry.inserted if entry else "")
                for source in tree.sources:
                    if source.id == step_id:
                        return SourceView(source)
        library = library if library is not None else self._library()
        matches = [e for e in library.values()
                   if e.id == step_id and (e.run == (ref_run or run) or not (ref_run or run))]
        if len(matches) == 1 or (matches and (ref_run or run)):
            return StepView(library_as_step(matches[0]), True, matches[0].inserted)
        if len(matches) > 1:
            raise NotFound(f"{ref!r} names steps of several runs: "
                           + ", ".join(sorted(e.gid for e in matches)))
        raise NotFound(f"no step {ref!r}" + self._suggest(ref))

    def _library(self) -> dict[str, LibraryEntry]:
        return {entry.gid: entry for entry in self.workspace.library()}

    def _suggest(self, ref: str) -> str:
        known: list[str] = []
        for name in self.workspace.runs():
            tree = self.workspace.tree(name)
            known += [s.gid for s in tree.steps] + [s.gid for s in tree.sources]
        known += [gid for gid in self._library() if gid not in set(known)]
        target = ref if "/" in ref else None
        pool = known if target else [g.split("/", 1)[1] for g in known]
        close = difflib.get_close_matches(ref, pool, n=5, cutoff=0.5)
        if not target:
            close = [g for sid in close for g in known if g.split("/", 1)[1] == sid][:5]
        return f"; nearest: {', '.join(close)}" if close else ""
