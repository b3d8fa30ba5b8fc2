"""The read side of memory over one workspace: archive_search, recall_search (pages of hits, or
the whole result list for the evaluators) and archive_get (one full step, from the files).

Searches read the LanceDB index (lancedb is imported by the first search; torch only when a rerank
needs the model). ``archive_get`` reads the workspace files directly, so it imports neither."""

from __future__ import annotations

import difflib
import functools
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mem_retrieval.configs import Config
from mem_retrieval.indexers.store import key
from mem_retrieval.records.core import EDGE, id_candidates, mentions
from mem_retrieval.records.errors import BadInput, InputError, MemError, Refused, listed, plural, quoted
from mem_retrieval.records.files import stamp as file_stamp
from mem_retrieval.records.ids import (canonical, given_run, nearest_ids, owner_run, plain, ref_problem,
                                       spellings, split_gid, typed_ref, typed_run)
from mem_retrieval.records.parse import (check_event_path, date_alone, event_last, instant_last, micros,
                                         present, read_text, standing)
from mem_retrieval.records.types import Event, LibraryEntry, Source, Step
from mem_retrieval.records.settings import clauses
from mem_retrieval.records.workspace import TREE, Workspace, library_as_step
from mem_retrieval.retrieval.hint import Hint
from mem_retrieval.retrieval.paging import list_changed, list_id, page_count, page_slice, shown_score
from mem_retrieval.retrieval.query import (ArchiveQuery, Filters, RecallQuery, Until, exact_lookup,
                                           id_words, parse_time_arg)
from mem_retrieval.retrieval.types import EXCERPT_CHARS, EventHit, Hit, Note, Page

# The advice of a note on what the index lacks, when the one the search read is no longer the
# newest (``Retriever.index_replaced``: a long-lived ``Memory`` reads its own version until reopened)
STORE_ASKED_EVERY = 2.0  # seconds: how often a search's notes ask a store whether a newer index is there
NEWER_INDEX = ("a newer index has been written since this session (or this call) opened its own, and "
               "may answer otherwise: `reopen()` reads it; a new call of the CLI, `mem serve` or `mem mcp` "
               "reads the newest")


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


def _reads_index(method):
    """A search reading a damaged index fails with one line naming the fix (indexers.store.guard).
    One that failed because another run replaced the index meanwhile (`mem tune`, `mem index
    --full`: the model or export the meta.json it read named is deleted once the new one is
    published) is run once more on the index as it is now: on a searcher of this thread's own
    until the outermost search returns (a warm server's threads share this retriever: none sees
    its searcher change mid-search), which then serves the searches after it. The settings
    ontology a search reads first is the one it reads to the end (``Retriever.ontology``)."""

    @functools.wraps(method)
    def guarded(self: "Retriever", *args, **kwargs):
        from mem_retrieval.indexers import store

        local = self._local
        outermost = not getattr(local, "depth", 0)
        local.depth = getattr(local, "depth", 0) + 1
        try:
            try:
                with store.guard(self.location, reading=True):
                    if outermost:  # one searcher for the whole search, whatever another thread's
                        local.pinned = self.searcher  # reopen() does meanwhile (row ids are its own)
                    return method(self, *args, **kwargs)
            except (store.IndexMismatch, store.IndexDamaged):
                if not self.workspace.root.is_dir():  # the index went with it: no `mem index` to run
                    raise BadInput(self.workspace.gone()) from None
                if getattr(local, "searcher", None) is not None or not self.index_replaced():
                    raise
            local.failed, local.searcher = self.searcher, self._open_searcher()
            with store.guard(self.location, reading=True):
                return method(self, *args, **kwargs)
        finally:
            local.depth -= 1
            if outermost:
                local.pinned = local.ontology = local.runs = None
            if outermost and getattr(local, "searcher", None) is not None:
                if self._searcher is local.failed:  # not reopened meanwhile: the retried one serves on
                    self._searcher = local.searcher
                local.searcher = local.failed = None

    return guarded


class Retriever:
    """Searches and reads one workspace's memory."""

    def __init__(self, workspace: Workspace, config: Config):
        self.workspace = workspace
        self.config = config
        self._searcher = None
        self._location = None
        self._local = threading.local()  # a search's own searcher while it is retried
        self._newer: tuple[Any, Any, bool] | None = None  # newer_index's memo

    @property
    def location(self):
        """Where the index lives (``indexers.location.Location``: index.uri, else .mem)."""
        if self._location is None:
            from mem_retrieval.indexers.location import Location

            self._location = Location.of(self.workspace, self.config)
        return self._location

    @property
    def searcher(self):
        """The searcher of the index as the last `mem index` left it (opened on first use); within a
        search, the one it began with, and a search retried on a replaced index uses one of its
        own (``_reads_index``)."""
        retried = getattr(self._local, "searcher", None) or getattr(self._local, "pinned", None)
        if retried is not None:
            return retried
        if self._searcher is None:
            self._searcher = self._open_searcher()
        return self._searcher

    def _open_searcher(self):
        from mem_retrieval.indexers import store
        from mem_retrieval.retrieval.search import Searcher

        meta = store.check_meta(self.location, self.config)
        method, workspace = weakref.WeakMethod(self.ontology), self.workspace

        def ontology():  # not the bound method: a searcher holding its retriever is a cycle, and a
            # superseded index version (its tables, its steps in memory) stayed until a full collection
            bound = method()
            return bound() if bound is not None else workspace.ontology

        return Searcher(self.location.connect(), self.config, ontology, meta, self.location)

    def ontology(self):
        """The settings ontology as ``solve/settings.toml`` stands (``Workspace.ontology``), read
        once a search: the setting rule that cuts its list, the labels of its hits and its notes
        judge by one file, whatever an edit does meanwhile (a search read it up to three times,
        and a file replaced between two reads listed hits its own labels called incompatible)."""
        local = self._local
        if not getattr(local, "depth", 0):
            return self.workspace.ontology
        if getattr(local, "ontology", None) is None:
            local.ontology = self.workspace.ontology
        return local.ontology

    def runs(self) -> list[str]:
        """The workspace's runs (``Workspace.runs``), listed once a search: its notes ask for them
        up to three times (the events and the trees written since the last `mem index`, a run
        named), each listing a folder scan and a look at every run's tree.json."""
        return list(self.run_trees())

    def run_trees(self) -> dict[str, tuple[int, int, int, int]]:
        """``Workspace.run_trees``, read once a search (``runs``)."""
        local = self._local
        if not getattr(local, "depth", 0):
            return self.workspace.run_trees()
        if getattr(local, "runs", None) is None:
            local.runs = self.workspace.run_trees()
        return local.runs

    def reopen(self) -> None:
        """Read the index afresh on the next search (after an index run)."""
        self._searcher = None

    def index_replaced(self) -> bool:
        """Whether meta.json is no longer the one the open searcher read (another run published
        since)."""
        from mem_retrieval.indexers import store

        if self._searcher is None:
            return False
        try:
            return store.read_meta(self.location) != self.searcher.meta
        except MemError:
            return False

    def newer_index(self) -> bool:
        """``index_replaced`` as every note on what a search's index lacks asks it (each search
        asks): a folder index's meta.json is read again only once its stat changed, a store's at
        most every ``STORE_ASKED_EVERY`` seconds (a request each: a search of steps held in memory
        made none). A meta.json gone (the index deleted) is no newer index: IndexMismatch naming the
        fix, as the one-shot call and a search reading the deleted files say (a search of the steps
        held in memory read none, and answered as if nothing had happened)."""
        from mem_retrieval.indexers import store

        if self._searcher is None:
            return False
        searcher = self.searcher
        token = (int(time.monotonic() // STORE_ASKED_EVERY) if self.location.remote
                 else file_stamp(self.location.meta_name))  # before the read: a later write is seen next
        memo = self._newer
        if memo is not None and memo[0] is searcher and memo[1] == token:
            return memo[2]
        try:
            meta = store.read_meta(self.location)
        except MemError:
            meta = searcher.meta  # unreadable now: nothing newer is known
        if meta is None:
            store.check_meta(self.location, self.config)  # (raises: no index)
        replaced = meta != searcher.meta
        self._newer = (searcher, token, replaced)
        return replaced

    @_reads_index
    def hidden_of(self, step: str, gids: Sequence[str]) -> list[str]:
        """The ``gids`` a search hiding ``step`` (leave-one-out, ``ArchiveQuery.hide``) cannot see:
        the step and its library copy, what cites it, and its run-mates written after it
        (``Searcher.before``); a gid the index does not hold is not among them."""

        from mem_retrieval.retrieval.query import Filters

        hidden, graph = self.searcher.before(step), self.searcher.graph()
        if graph is None:
            keys = set(hidden.keys)
            return [gid for gid in gids if key(gid) in keys]
        seen = graph.visible(Filters(hide=hidden))
        return [gid for gid, row in zip(gids, graph.rows_of(gids).tolist())
                if row >= 0 and seen is not None and not seen[row]]

    @_reads_index
    def unknown_steps(self, steps: Sequence[str]) -> list[str]:
        """The ``steps`` (global ids) the index holds no row for: a leave-one-out query naming one
        hides only that id (``Hidden.only``), so a misspelt ``step`` would leave the step it
        meant, and its links, visible."""
        graph = self.searcher.graph()
        if graph is None:
            return list(steps)
        return [step for step, row in zip(steps, graph.rows_of(steps).tolist()) if row < 0]

    @_reads_index
    def written_after(self, run: str) -> frozenset[int]:
        """The keys of the other runs' steps written after ``run`` began, as their links date
        them: each cites one of its steps, directly or through others (``CitationGraph.before_run``,
        what ``ArchiveQuery.hide_run`` hides)."""
        return frozenset(self.searcher.before_run(run).keys)

    # ---- archive_search
    @_reads_index
    def ranked(self, query: ArchiveQuery, also_hidden: frozenset[int] = frozenset()) -> list:
        """The whole result list of ``query`` as candidates (``retrieval.candidates.Candidate``),
        before paging; light id candidates are not read in full. The steps keyed ``also_hidden``
        are hidden as ``query.hide`` hides (``Searcher.hidden``)."""
        until = self.resolve(query.until, query.run)  # first: a bad value opens no index
        return self.searcher.rank_steps(self._as_ranked(query), until, also_hidden)

    def _as_ranked(self, query: ArchiveQuery) -> ArchiveQuery:
        """``query`` as it is ranked (``asks_from``); its note says so (``notes``)."""
        if query.context_run is not None and self.asks_from(query.context_run) is None:
            return replace(query, context_run=None)
        return query

    def asks_from(self, run: str | None) -> str | None:
        """The run a query with context ``run`` is ranked as asked from: ``run``, or None when it
        names no run of the workspace or the library (a typo), which cites nothing the index
        knows: such a query is asked from no run, with that table's weights
        (``[fusion.<strategy>]``), and `eval fusion` counts it so."""
        return None if run is None or self.unknown_run("context_run", run) else run

    @_reads_index
    def candidates(self, query: ArchiveQuery) -> tuple[list, list]:
        """The steps ``query`` names by id, and its strategy's candidates with their features
        before the strategy scores and cuts them (``Searcher.steps_found``)."""
        until = self.resolve(query.until, query.run)
        return self.searcher.steps_found(self._as_ranked(query), until, scored=False)

    @_reads_index
    def archive_search(self, query: ArchiveQuery, page: int = 1, given: str | None = None) -> Page[Hit]:
        """Page ``page`` of the steps of the runs and the library for ``query`` (SPEC §9);
        ``given``: the ``list_id`` of a page read before (``_slice``)."""
        query = replace(query, until=self.resolve(query.until, query.run))
        ranked = self.ranked(query)
        cut, current, changed = self._slice(ranked, [c.gid for c in ranked], page, given)
        shown = self.searcher.complete(cut)
        ontology = self.ontology() if query.setting else None
        found = self._page(tuple(self._hit(c, query, ontology) for c in shown), len(ranked),
                           [shown_score(c.score) for c in ranked], page, query.text, query.setting)
        return replace(found, notes=tuple(changed + self.notes(query, ranked)), list_id=current,
                       pending=self.searcher.pending_in("steps"))

    def _slice(self, items: Sequence, ids: list[str], page: int, given: str | None,
               noun: str = "hit") -> tuple[tuple, str, list[Note]]:
        """Page ``page`` of the result list ``items`` (their ids ``ids``), the list's ``list_id``,
        and, when ``given`` (the list_id of a page read before) names another list, the note that
        says so: pages cut from two lists repeat or skip hits (past the last page, the refusal
        says it)."""
        current = list_id(ids)
        changed = list_changed(given, current, page)
        try:
            shown = page_slice(items, page, self.config.search.page_size, noun)
        except Refused as err:
            if changed is None:
                raise
            raise Refused(f"{changed}; {err}", param="list_id") from None  # spelled as the caller does
        return shown, current, [Note("list_id", changed)] if changed else []

    def notes(self, query: ArchiveQuery, ranked: Sequence) -> list[Note]:
        """What to tell the caller about ``query``'s result list ``ranked``: ids of an exact
        lookup that name no step it may return; a setting the ontology does not know (its nearest
        entries); for an empty list, why (a run that names no run, hits the setting left out)."""
        notes = self.unnamed_ids(query, ranked) + self._without_vectors(query.strategy, "steps")
        total = len(ranked)
        if query.setting:
            unknown = self.unknown_clauses(query.setting)
            if unknown:
                near = self.ontology().nearest(unknown[0])
                notes.append(Note("setting", f"{query.setting!r}: {unknown[0]!r} is not in the settings "
                                  "ontology, so a step matches it only by the same text"
                                  + (f"; nearest entries: {', '.join(near)}" if near else "")))
        context = (self.unknown_run("context_run", query.context_run,  # (_as_ranked)
                                    ", so the search is ranked as asked from no run")
                   or self._run_unindexed(query.context_run, "context_run"))
        notes += context
        if query.until is not None:  # the index dates a step by the first event naming it that it read
            ahead = self._events_ahead(query.run, query.until, self._names_undated())
            notes += self._ahead_note(ahead, "read, and a step first named there is not in memory as of "
                                      "this cut", "")
        written = (self._trees_written(query.run, said={query.context_run} if context else set())
                   + self.library_written())
        if total:
            notes += written
        else:
            if self.searcher.strategy(query.strategy).by_words:  # (vector finds hits for any text)
                notes += self.unsearchable(query.text)
            notes += self.unknown_run("run", query.run) or self._run_unindexed(query.run, "run") or written
            if query.setting and not query.any_setting:
                left_out = len(self.ranked(replace(query, any_setting=True)))
                if left_out:
                    notes.append(Note("setting", f"{query.setting!r} left out {plural(left_out, 'hit')} "
                                      "whose setting or a hypothesis it does not imply (M3)",
                                      see="any_setting"))
        if self.newer_index() and not any(NEWER_INDEX in n.message for n in notes):
            notes.append(Note("", NEWER_INDEX))  # what the session's own version lacks is unknown
        return notes

    def _without_vectors(self, strategy: str | None, table: str, param: str = "strategy") -> list[Note]:
        """A note (on ``param``: "" where the caller chose no strategy) when the strategy called
        ``strategy`` answers as another over ``table``, whose texts' vectors are not all computed
        yet (``Searcher.degraded``)."""
        degraded = self.searcher.degraded(strategy, table)
        if not degraded:
            return []
        asked, answered = degraded
        return [Note(param, f"{asked!r} answered as {answered!r}: the vectors of "
                     f"{plural(self.searcher.pending_in(table), 'text')} are not computed yet (BM25 "
                     "order until then): " + (NEWER_INDEX if self.newer_index() else
                                             "`mem index` computes them, the one running or, "
                                             "if it was stopped, the next"))]

    def unnamed_ids(self, query: ArchiveQuery, ranked: Sequence) -> list[Note]:
        """A note for each id of a query made only of ids (an exact lookup) that names no step the
        search may return: without it a typo, or a step added since the last `mem index`, gave
        text hits as if they were the step asked for. A word that is a symbol (``Searcher.
        unnamed_words``: ``E6``, ``SL2`` among ids such as ``A5-7``) gets no note."""
        if not exact_lookup(query.text):
            return []
        named = [c for c in ranked if c.via == "id"]
        unnamed, symbols = self.searcher.unnamed_words(query.text, named)
        if not unnamed:
            return []
        listed = ", ".join(repr(ref) for ref in unnamed[:5]) + (", …" if len(unnamed) > 5 else "")
        found = ("the hits are a text search" if not named else "the hits are those the others name"
                 + (", then a text search" if symbols else ""))
        near, left_out = "", []
        if len(unnamed) == 1:  # the nearest ids, as archive-get and recall-search give them
            try:
                # the steps the id lookup finds without the filters (its spellings, look-alikes)
                left_out = sorted({c.gid for c in self.searcher.id_hits(unnamed[0], None)})
                cut = self._cut(query.until, query.run, self.searcher.hidden(query))
                near = _nearest_said(unnamed[0], [gid for gid in self.searcher.known_gids()
                                                  if gid not in left_out], cut, query.run)
            except InputError:  # a library that cannot be read: no advice (`check` names it)
                near = ""
        newer = f"; {NEWER_INDEX}" if self.newer_index() else ""
        if left_out:  # the index holds it: the filters (run, kind, library, until…) left it out, no typo
            listed_out = ", ".join(left_out[:3]) + (", …" if len(left_out) > 3 else "")
            return [Note("query", f"{listed}: the filters of this search leave out the step with this id "
                         f"({listed_out}); {found}{near if query.run is not None else ''}{newer}")]
        return [Note("query", f"{listed}: no step this search may return has "
                     f"{'this id' if len(unnamed) == 1 else 'these ids'} (a typo, a step added since "
                     f"the last `mem index`, or one the filters leave out); {found}{near}{newer}")]

    def unknown_clauses(self, setting: str) -> list[str]:
        """The clauses of ``setting`` the settings ontology does not know (a step matches such a
        clause only by the same text), as matched: case kept."""
        ontology = self.ontology()
        return [c for c in clauses(setting, fold=False) if ontology.entry(c) is None]

    def unknown_run(self, param: str, run: str | None, effect: str = "") -> list[Note]:
        """A note when ``run`` (given for ``param``) names no run of the workspace or library,
        with what follows (``effect``) and the nearest names (a typo is the usual cause)."""
        folders = self.runs() if run is not None else []
        if run is None or run in folders:  # the usual answer, from the folder names alone
            return []
        try:  # a run present only in the library; the note is advice: a bad library is check's
            runs = sorted(set(folders) | {e.run for e in self.workspace.library()})
        except InputError:
            runs = folders
        if run in runs or self._gone(run):  # (one removed since `mem index`: a note says so)
            return []
        near = difflib.get_close_matches(run, runs, n=3, cutoff=0.5)
        return [Note(param, f"{run!r} names no run of this workspace{effect}"
                     + (f"; nearest: {', '.join(near)}" if near else f" (runs: {listed(runs)})"))]

    def _trees_written(self, run: str | None, said: set[str | None]) -> list[Note]:
        """A note naming the runs (``run``, or every run) whose tree.json was written since the
        last `mem index` read it (``Location.trees_read``): the steps it added or changed are not
        searched, as recall-search names the events written since. None for a run the record may
        lack while indexed; runs another note ``said`` is not indexed are left out. The record is
        the newest index's: a session reading an older version lacks these and maybe more (its
        search adds ``NEWER_INDEX``)."""
        if (record := self.location.trees_read()) is None:
            return []
        read, complete = record
        root = str(self.workspace.root)  # (plain strings: every search asks, of every run)
        written = [name for name, now in self.run_trees().items() if run in (None, name) and name not in said
                   and self.location.written_since(os.path.join(root, name, TREE), now, read.get(name))
                   and (name in read or (complete and self._holds_steps(name)))]
        notes = self._removed_note(run, "steps", unfiled=True)
        unreadable = [name for name in written if standing(os.path.join(root, name, TREE)) == "unreadable"]
        if unreadable:  # (its mode changed, not its bytes: `mem index` refuses it until mended)
            written = [name for name in written if name not in unreadable]
            notes.append(_runs_note(unreadable, "tree.json", "became unreadable",
                                    "{its} steps are still searched; " + _MEND))
        if not written:
            return notes
        command = " ".join(["mem index", *written] if len(written) <= 5 else ["mem index"])
        listed = ", ".join(written[:5]) + (", …" if len(written) > 5 else "")
        which = (f"{written[0]}/tree.json was written after the last `mem index` read it" if len(written) == 1
                 else f"the tree.json of {len(written)} runs was written after the last `mem index` read it "
                      f"({listed})")
        return notes + [Note("", f"{which}: steps added or changed since are not searched; run `{command}`")]

    def _gone(self, run: str | None) -> dict[str, str]:
        """The runs (``run``, or every run) the last `mem index` read whose tree.json is no file now
        (``Location.trees_read``), with what stands there (``parse.standing``): "none" (removed),
        "unfiled" (a folder, a link to nothing: no run either, ``Workspace.holds``), "unreadable"
        (this user may not look at it). The index still holds what they held, until the next;
        `mem index` refuses the last two until they are mended."""
        if (record := self.location.trees_read()) is None:
            return {}
        read, root = record[0], str(self.workspace.root)
        return {name: standing(os.path.join(root, name, TREE))
                for name in sorted(set(read).difference(self.runs())) if run in (None, name)
                and read[name] is not None}

    def _removed(self, run: str | None) -> list[str]:
        """Those of ``_gone`` whose tree.json was removed."""
        return [name for name, stands in self._gone(run).items() if stands == "none"]

    def _removed_note(self, run: str | None, what: str, unfiled: bool = False) -> list[Note]:
        """A note naming the runs ``_gone`` whose ``what`` (steps, events) a search still finds, by
        what became of their tree.json (``_HAPPENED``); those whose tree.json stopped being a file
        only with ``unfiled`` (their steps are found, but `archive-get` refuses them; of their log,
        ``_logs_rewritten`` says what is to say). Where `mem index` refuses the run folder as it is
        now (``Workspace.record_lost``), it is to be mended first."""
        gone = self._gone(run)
        notes = []
        for stands, happened in _HAPPENED.items():
            names = [name for name, there in gone.items()
                     if there == stands and (unfiled or stands != "unfiled")]
            lost = [name for name in names if self.workspace.record_lost(name)]
            for group, then in (([n for n in names if n not in lost], "run `mem index`"), (lost, _MEND)):
                if group:
                    notes.append(_runs_note(group, "tree.json", happened, f"{{its}} {what} are still "
                                            f"searched; {then}"))
        return notes

    def library_written(self) -> list[Note]:
        """A note when solve/library.jsonl was written after the last `mem index` read it
        (``Location.library_read``): the entries it added or changed are not searched as library
        entries (an `archive-insert` writes the library, not the index); by the newest index's
        record, as ``_trees_written``."""
        known, was = self.location.library_read()
        path = self.workspace.library_path
        if not known or not self.location.written_since(str(path), file_stamp(path), was):
            return []
        stands = standing(path)
        if was is not None and stands != "file":  # (what `mem index` refuses is to be mended first)
            then = "run `mem index`" if stands == "none" else _MEND
            return [_runs_note(["solve"], "library.jsonl", _HAPPENED[stands], "its entries are still "
                               "searched as library entries; " + then)]
        return [Note("", "solve/library.jsonl was written after the last `mem index` read it: entries "
                     "added or changed since are not searched as library entries; run `mem index`")]

    def _holds_steps(self, run: str) -> bool:
        """Whether ``run``'s tree.json holds a step (or cannot be read: `mem index` says why)."""
        try:
            return bool(self.workspace.tree(run).steps)
        except InputError:
            return True

    def _run_unindexed(self, run: str | None, param: str) -> list[Note]:
        """A note (on ``param``) when ``run``, a run of the workspace whose tree.json holds steps,
        has none in the index: one begun since the last `mem index` (a run whose tree cannot be
        read: the index names what is wrong)."""
        if run is None or run not in self.runs() or self.searcher.holds_run(run) \
                or not present(self.workspace.tree_path(run)):
            return []
        try:
            if not self.workspace.tree(run).steps:
                return []
        except InputError:
            pass
        if self.newer_index():
            return [Note(param, f"{run!r} has no step in the index this search read: {NEWER_INDEX}")]
        return [Note(param, f"{run!r} has no step in the index (a run begun since the last `mem index`): "
                     f"run `mem index {run}`")]

    @_reads_index
    def archive_hits(self, query: ArchiveQuery, also_hidden: frozenset[int] = frozenset()) -> list[Hit]:
        """The whole result list of ``archive_search``, before paging (``ranked``)."""
        query = replace(query, until=self.resolve(query.until, query.run))
        ontology = self.ontology() if query.setting else None
        ranked = self.searcher.complete(self.ranked(query, also_hidden))
        return [self._hit(c, query, ontology) for c in ranked]

    @staticmethod
    def _hit(candidate, query: ArchiveQuery, ontology) -> Hit:
        """``candidate`` as a hit of ``query`` (its ``until`` resolved): in the library only when
        its entry was inserted by then, its ``setting_match`` judged by ``ontology`` (read once a
        search)."""
        row, setting, until = candidate.row, query.setting, query.until
        return Hit(id=row.gid, run=row.run, kind=row.kind, statement=row.statement,
                   status=row.status, grade=row.grade, setting=row.setting,
                   setting_match=ontology.match(setting, row.setting) if setting else None,
                   score=shown_score(candidate.score), via=candidate.via,
                   in_library=row.in_library and (until is None or until.inserted(row.inserted_ts)),
                   unmet_hyp=tuple(ontology.unmet_hypotheses(setting, row.hyp)) if setting else ())

    # ---- recall_search
    @_reads_index
    def recall_search(self, query: RecallQuery, page: int = 1, given: str | None = None) -> Page[EventHit]:
        """Events with their briefs and returns: by id in time order, or by text, a page;
        ``given``: the ``list_id`` of a page read before (``_slice``)."""
        query = replace(query, until=self.resolve(query.until, query.run))
        if query.id is not None:  # the notes count what the hits name
            query = replace(query, id=self._as_named(query.id, query.run))
        hits = self._recall_hits(query, whole=False)
        self.newer_index()  # (an index deleted since: "no index", as an archive search says)
        cut, current, changed = self._slice(hits, [h.id for h in hits], page, given, "event")
        shown = self._with_bodies(cut)
        found = self._page(shown, len(hits), [h.score for h in hits], page,
                           query.text if query.id is None else query.id, None)
        by_text = query.id is None  # an id's events are listed in time order, with no vectors
        notes = (changed + self._unindexed(query) + self._logs_rewritten(query.run)
                 + self._removed_note(query.run, "events")
                 + self._id_as_words(query)
                 + (self._without_vectors("rerank", "events", "") if by_text else [])
                 + ([] if hits else self.unsearchable(query.text) + self._recall_notes(query)))
        return replace(found, notes=tuple(notes), list_id=current,
                       pending=self.searcher.pending_in("events") if by_text else 0)

    def _id_as_words(self, query: RecallQuery) -> list[Note]:
        """A note when a text query is one step's id (``A5-8``, of ``run`` when bare) and ``id``
        would list events naming it: its words are searched (events saying ``A5`` or ``8`` match),
        while an agent typing the id as text most often wants those events. None where ``id`` would
        refuse it (a bare id of several runs) or list nothing."""
        if query.id is not None or not exact_lookup(query.text):
            return []
        words = id_words(query.text)
        if len(words) != 1:
            return []
        typed = words[0][0]
        try:
            listed = self._recall_hits(RecallQuery(id=self._as_named(typed, query.run), run=query.run,
                                                   until=query.until), whole=False)
        except MemError:
            return []
        if not listed:
            return []
        return [Note("query", f"{typed!r} names a step and is searched as words; the events naming that "
                     "step, in time order", see="id")]

    def _unindexed(self, query: RecallQuery) -> list[Note]:
        """A note naming the events the search cannot see: those written to the logs it reads
        (``run``'s, or every run's) after the last `mem index` read them, and, when the query
        narrows by ``until`` or ``id``, that it would have kept (``until`` resolved)."""
        ref = query.ref
        keep = None if ref is None else (lambda _, event: event.names(ref))
        return self._ahead_note(self._events_ahead(query.run, query.until, keep), "searched", "")

    def index_behind(self, run: str, until: Until | None) -> list[Note]:
        """What the index lacks of ``run``, for a test that searches it as of ``until`` (eval
        resume): the events of its log written since the last `mem index` that ``until`` keeps (or
        the log changed otherwise than by appending), and its steps when it has none indexed, or
        its tree.json written since the last `mem index` read it, and the library written since. A
        test that failed on them blamed W."""
        ahead = self._events_ahead(run, until, None)
        return self._ahead_note(ahead, "searched", "") + self._logs_rewritten(run) + (
            self._run_unindexed(run, "run") or self._trees_written(run, set())) + self.library_written()

    def _names_undated(self) -> Callable[[str, Event], bool]:
        """Whether an event of a run's log names (in its ``ids``, as ``records.ids.first_naming``
        reads them) a step of that run the index has not dated: one no event it read names, or one
        it does not hold. Only such an event, not read yet, can change which steps a cut keeps (an
        event naming nothing, as `core-set`'s checkpoints often do, cannot)."""
        import numpy as np

        def undated(run: str, event: Event) -> bool:  # the graph read only when such an event is
            gids = [f"{run}/{step_id}" for ref_run, step_id in map(split_gid, event.ids)
                    if ref_run in (None, run)]
            if not gids:
                return False
            graph = self.searcher.graph()  # read once a searcher
            if graph is None:
                return True
            rows = graph.rows_of(gids)
            return bool(np.any((rows < 0) | (graph.named_seq[np.maximum(rows, 0)] < 0)))
        return undated

    def _events_ahead(self, run: str | None, until: Until | None,
                      keep: Callable[[str, Event], bool] | None) -> dict[str, int]:
        """Per run (``run``, or every run), how many events its log holds past the last `mem index`,
        of those ``until`` keeps and ``keep(run, event)`` (when given); runs with none left out."""
        logged = self.searcher.logged_events()
        runs = [run] if run is not None else self.runs()
        ahead = {run: count for run in runs  # (a run with no folder has no log: none)
                 if (count := self.workspace.logged_after(run, logged.get(run, 0))) > 0}
        if ahead and (until is not None or keep is not None):  # rare: those lines are read
            def kept(run: str) -> int:  # dated as the index dates them (a clock set back)
                events = list(self.workspace.events_after(run, logged.get(run, 0),
                                                          self.searcher.logged_time(run)))
                # lines no event is read from: no time cut can date them, so they count, as without a
                # cut (`mem index` names them); they name no step, so ``keep`` (ids) never keeps them
                unread = max(ahead[run] - len(events), 0) if keep is None else 0
                return unread + sum(
                    1 for event in events
                    if (until is None or until.admits(event)) and (keep is None or keep(run, event)))
            ahead = {run: count for run in ahead if (count := kept(run)) > 0}
        return ahead

    def _logs_rewritten(self, run: str | None) -> list[Note]:
        """Notes naming the runs (``run``, or every run) whose events.jsonl was changed since the
        last `mem index` read it otherwise than by appending (``Location.logs_read``,
        ``Workspace.logs_rewritten``): a log is appended only (SPEC §4), so the events the index
        holds may be ones no longer logged; one removed, or no longer a file, is said as such.
        Asked after ``_events_ahead`` of the same runs, whose look at each log it reuses. A run
        folder removed whole is ``_removed_note``'s to name. Where `mem index` refuses the run as it
        is now (its log no file, or its tree.json none: ``Workspace.record_lost``), it is to be
        mended first."""
        if not (logs := self.location.logs_read()):
            return []
        runs, root = self.run_trees(), str(self.workspace.root)
        asked = [name for name in logs if run in (None, name) and (name in runs or os.path.isdir(
            os.path.join(root, name)))]  # (not runs now: rare, and no look at them yet)
        changed = (self.workspace.logs_rewritten(logs, [name for name in asked if name in runs], looked=True)
                   + self.workspace.logs_rewritten(logs, [name for name in asked if name not in runs],
                                                   looked=False))
        said = {"file": ("was changed (not only appended to)", "the events searched are as `mem index` "
                                                               "read them; ")}
        said |= {stands: (happened, "{its} events are still searched; ")
                 for stands, happened in _HAPPENED.items()}
        groups: dict[tuple[str, bool], list[str]] = {}
        for name in changed:
            stands = standing(self.workspace.events_path(name))  # (a log that changed: rare)
            lost = stands in ("unfiled", "unreadable") or (
                name not in runs and self.workspace.record_lost(name))
            groups.setdefault((stands, lost), []).append(name)
        return [_runs_note(groups[stands, lost], "memory/events.jsonl", said[stands][0],
                           said[stands][1] + (_MEND if lost else "run `mem index`"))
                for stands in said for lost in (False, True) if (stands, lost) in groups]

    def _ahead_note(self, ahead: dict[str, int], unseen: str, param: str) -> list[Note]:
        """The note of ``_events_ahead``'s events: not ``unseen`` here, and the command indexing
        them (none when there are none)."""
        if not ahead:
            return []
        total = sum(ahead.values())
        listed = list(ahead.items())[:5]
        where = ", ".join(f"{run}: {count}" for run, count in listed) + (", …" if len(ahead) > 5 else "")
        command = " ".join(["mem index", *ahead] if len(ahead) <= 5 else ["mem index"])
        verb = "is" if total == 1 else "are"
        if self.newer_index():  # a session's own index version: the newer one may hold them
            return [Note(param, f"{plural(total, 'event')} {verb} not in the index this search read "
                         f"({where}): {NEWER_INDEX}")]
        return [Note(param, f"{plural(total, 'event')} written since the last `mem index` {verb} not "
                     f"{unseen} ({where}): run `{command}`")]

    @staticmethod
    def unsearchable(text: str | None) -> list[Note]:
        """A note when ``text`` holds no word a search reads (punctuation, function words, LaTeX
        that draws nothing): "no hits" alone read as nothing being on the subject. For a strategy
        whose candidates its words find (``Strategy.by_words``; recall's always are)."""
        from mem_retrieval.text.tokenize import tokenize

        if text is None or tokenize(text):
            return []
        return [Note("query", f"{quoted(text)} holds no word a search reads (punctuation, function words "
                              "and LaTeX that draws nothing are not searched)")]

    def _recall_notes(self, query: RecallQuery) -> list[Note]:
        """Why a recall search found nothing, when a run it names is none (``run``'s, or the run
        of a global ``id``), or its ``id`` names no step (with the nearest ids: "no events" alone
        read as a step nothing was said about), or ``run`` is not the run of a global ``id`` (its
        log may name another run's step, but here none does)."""
        id_run = split_gid(query.id)[0] if query.id is not None else None
        wrong_id = [Note("id", f"{query.id!r}: run {note.message}")
                    for note in self.unknown_run("id", id_run)]
        wrong_run = self.unknown_run("run", query.run)
        if not (wrong_id or wrong_run) and (logless := self._logless(query.run or id_run)):
            named = query.run is None and id_run is not None
            return [Note("id" if named else "run" if query.run else "",
                         f"{query.id!r}: run {logless}" if named else logless)]
        if query.id is None or wrong_id or wrong_run:
            return wrong_run + wrong_id
        library = self._readable_library()  # advice: a tree.json or library that cannot be read is left out
        if self._names_a_step(query.ref, library):
            if id_run is None or query.run in (None, id_run):
                return []
            return [Note("run", f"{query.run!r} logs no event naming {query.id!r}, a step of run "
                                f"{id_run!r}: without the run, every run's events naming it are listed")]
        where = f" of run {query.run!r}" if query.run is not None and "/" not in query.id else ""
        return [Note("id", f"{query.id!r} names no step{where}"  # nearest by step id in every run
                     + self._suggest(query.id, library, self._cut(query.until, query.run), query.run))]

    def _logless(self, run: str | None) -> str | None:
        """Why a recall search reads no log, or None: ``run`` is one the library alone holds, or
        (no ``run``) the workspace holds no run ("no events" alone read as nothing said)."""
        folders = self.runs()
        if run is not None:
            return None if run in folders or self._gone(run) else \
                f"{run!r} has no log here (only library entries of it)"
        if folders or self._gone(None):
            return None
        only = " (only solve/library.jsonl)" if self.workspace.library_path.is_file() else ""
        return f"the workspace holds no run, so no event log to search{only}"

    def _names_a_step(self, ref: str, library: dict[str, LibraryEntry], trees: dict | None = None) -> bool:
        """Whether ``ref`` (a global id, or a bare id of any run), as typed or in the other Unicode
        spelling, names a step or a source of a run's readable tree (of ``trees`` when given: every
        run's), or an entry of ``library``."""
        ref_run, step_id = split_gid(ref)
        ids = spellings(step_id, lookalikes=False)
        if trees is None:
            trees = self.workspace.readable_trees([ref_run] if ref_run else self.workspace.runs())
        for name, tree in trees.items():
            if ref_run not in (None, name):
                continue
            if any(tree.step(i) is not None for i in ids) or any(s.id in ids for s in tree.sources):
                return True
        return any(e.id in ids and ref_run in (None, e.run) for e in library.values())

    def _as_named(self, ref: str, run: str | None = None) -> str:
        """``ref`` (of ``run`` when bare) as a lookup of one step reads it: as typed when it names a
        step or source, in any Unicode normal form; else its ``plain`` form when that does (``A5‑7``
        with U+2011 for ``A5-7``), so that a look-alike never adds a second step to the one an id
        names as typed (nor its events); else, with the escapes a message shows for an invisible
        character read back (``q\\u200b1``, copied from a note, for ``q`` U+200B ``1``), when that
        does."""
        others = [form for form in spellings(ref)[1:] if form != ref]  # (its look-alike readings)
        if not others:
            return ref
        library = self._readable_library()  # the lookup then says what is wrong with it
        trees = self.workspace.readable_trees(self.workspace.runs())  # read once for every question
        for form in [ref, *others]:
            if self._names_a_step(form if "/" in form or run is None else f"{run}/{form}", library, trees):
                return form
        return ref

    @_reads_index
    def recall_hits(self, query: RecallQuery, whole: bool = True) -> list[EventHit]:
        """The whole result list of ``recall_search``, before paging; ``whole``: each hit with its
        brief or return read whole (else ``body`` is None: a page reads only those it shows)."""
        if query.id is not None:
            query = replace(query, id=self._as_named(query.id, query.run))
        return self._recall_hits(query, whole)

    def _recall_hits(self, query: RecallQuery, whole: bool) -> list[EventHit]:
        """``recall_hits`` of a query whose id is read already (``_as_named``)."""
        from mem_retrieval.retrieval.query import Filters

        filters = Filters(run=query.run, until=self.resolve(query.until, query.run))
        if query.id is not None:
            found = self.searcher.events_naming(query.ref, filters)
            if "/" not in query.id and query.run is None:  # a bare id: the events must name one step
                found = self._naming_one_step(query.id, found)
        else:
            found = self.searcher.rank_events(query.text, filters)
        hits = [EventHit(id=e.gid, run=e.run, seq=e.seq, time=e.time, actor=e.actor, kind=e.kind,
                         ids=e.ids, text=e.text, path=e.path,
                         excerpt=_excerpt(e.body), body=None,
                         score=shown_score(c.score))
                for c in found for e in (c.row,)]
        return list(self._with_bodies(hits)) if whole else hits

    def _naming_one_step(self, ref: str, found: list) -> list:
        """The events of ``found`` (naming the bare id ``ref``) when they name one step: those that
        name it, where the others' global ids name no step or source (a typo in a log,
        ``beta/A1-1`` where beta has none, which `check` reports); refused when they name
        several."""
        ref = canonical(ref)  # as the records' ids are read: typed decomposed, it matched none of them
        def named(candidate) -> set[str]:
            return {r if "/" in r else f"{candidate.row.run}/{r}" for r in candidate.row.ids
                    if r == ref or r.endswith("/" + ref)}

        every = set().union(*map(named, found)) if found else set()
        if len(every) <= 1:
            return found
        library = self._readable_library()
        trees = self.workspace.readable_trees(self.workspace.runs())
        steps = {gid for gid in every if self._names_a_step(gid, library, trees)}
        if len(steps) != 1:
            raise _several_runs(ref, steps or every)
        return [c for c in found if steps & named(c)]

    def _with_bodies(self, hits: Sequence[EventHit]) -> tuple[EventHit, ...]:
        """``hits`` with the brief or return each points to, whole, as the file stands now (None:
        it points to none, or the file cannot be read now: swapped since `mem index` for a link
        out of the run folder, a folder, a pipe or a device, which `mem index` would refuse), and
        its excerpt the start of that (empty when it cannot be read)."""
        def whole(hit: EventHit) -> str | None:
            if not hit.path:
                return None
            run_dir = self.workspace.run_dir(hit.run)
            try:
                check_event_path(hit.path, run_dir, "", 0)
                return read_text(run_dir / hit.path)
            except InputError:
                return None

        def now(hit: EventHit) -> EventHit:  # the excerpt is the start of the body shown, not the indexed
            body = whole(hit)
            return replace(hit, body=body, excerpt=hit.excerpt if not hit.path else _excerpt(body or ""))

        return tuple(map(now, hits))

    def _page(self, shown: tuple, total: int, scores: list[float], page: int, query: str | None,
              setting: str | None) -> Page:
        size = self.config.search.page_size
        return Page(hits=shown, page=page, pages=page_count(total, size), total=total, page_size=size,
                    query=query, setting=setting,
                    remaining=Hint.of(self.config.search).remaining(scores, page, size))

    # ---- as of an event
    def resolve(self, value: str | Until | None, run: str | None) -> Until | None:
        """An ``until`` value as an ``Until`` (None and an ``Until`` pass through)."""
        if value is None or isinstance(value, Until):
            return value
        if not value.strip():  # an unset variable in a script: not "now", which no value means
            raise BadInput("is empty (leave it out for memory as it is now)", param="until")
        return self.resolve_until(value, run)

    def resolve_until(self, value: str, run: str | None) -> Until:
        """``until``: a sequence number or an event's id (needs the run, which a global id
        gives), an event as a recall hit names it (``RUN#SEQ``), or an ISO time. An event's id is an
        id in its ``ids`` (bare or global) or the first word of its text (``R-1: …``, ``R-4 (verdict
        draft): …``); the first such event counts."""
        value = asked = value.strip()
        head, sep, tail = value.rpartition("#")  # its run typed with a look-alike dash, as --run reads it
        if (hit := _EVENT_GID.fullmatch(f"{typed_run(head)}#{tail}" if sep else value)) is not None:
            if run is not None and run != hit[1]:
                raise BadInput(f"{value!r} is an event of run {hit[1]!r}, not of {run!r}", param="until")
            run, value = hit[1], hit[2]
        # a sequence number (ASCII digits: int() would read '³' too); past 18 digits, past any log
        number = (int(value) if len(value.lstrip("0")) <= 18 else 10 ** 18) \
            if value.isascii() and value.isdigit() and not date_alone(value) else None  # `20261017`: a date
        stamp = parse_time_arg(value) if number is None else None
        if stamp is not None:
            return Until(micros=micros(instant_last(stamp, value)))
        ref_run, local = split_gid(value)
        ref_run = typed_run(ref_run)
        run = run or ref_run
        if run is None:
            if sep and (head := typed_run(head)) in self.workspace.runs():  # RUN#SEQ, no number after '#'
                raise BadInput(f"{asked!r}: {tail!r} after run {head!r} is no sequence number (RUN#SEQ: the "
                               "event's number in its run's log, as recall-search names it)", param="until")
            raise BadInput(f"{value!r}: a sequence number or event id needs the run", param="until")
        if run not in (runs := self.workspace.runs()):  # no log to look in: not "no such event"
            if any(entry.run == run for entry in self._readable_library().values()):
                raise Refused(f"{asked!r}: run {run!r} has no log here (only library entries of it)",
                              param="until")
            raise Refused(f"{asked!r}: {self.workspace.no_run(run, runs)}", param="until")
        forms = {value} | ({local, f"{run}/{local}"} if ref_run in (None, run) else set())
        forms |= {spelled for form in forms for spelled in spellings(form)}  # as --id reads an id: `Ü-1`
        # decomposed (the log's ids are read composed), `A5‑7` (U+2011), `\u00dc-1` as ASCII shows it
        last, others = None, {}  # the other runs' steps its log names, by then: memory too
        known, memo = self._run_known(), {}
        reached = None  # the latest instant the log reaches by each event (never less than before it)
        for event in self.workspace.events(run):
            others.update((key(ref), None) for ref in _other_runs_named(event, run, known, memo))
            covers = event_last(event)
            reached = covers if reached is None else max(reached, covers)
            words = event.text.split(maxsplit=1)
            named = bool(forms & set(event.ids)) or bool(words and words[0].rstrip(":;,.") in forms)
            if event.seq == number or (number is None and named):
                return Until(micros=micros(reached), run=run, seq=event.seq, named=tuple(others))
            last = event
        if number is not None and last is not None and number > last.seq:  # as of the log's end
            return Until(micros=micros(reached), run=run, seq=last.seq, named=tuple(others))
        raise Refused(f"{asked!r}: no such event in run {run!r}", param="until")

    def _run_known(self):
        """Whether a run is one of the workspace's, or of a library entry's (read once, when a run
        the workspace lacks is asked of it; any, when the library cannot be read): a word such as
        ``doc/3`` in an event's text names none."""
        runs, library = set(self.workspace.runs()), None

        def known(name: str) -> bool:
            nonlocal library
            if name in runs:
                return True
            if library is None:
                try:
                    library = {entry.run for entry in self.workspace.library()}
                except InputError:  # a malformed library: any run may be one of its entries'
                    library = True
            return library is True or name in library
        return known

    def event_cut(self, run: str, until: Until | None) -> Until | None:
        """``until`` as the event of ``run`` it reaches: a time, as the run's last event by then
        (memory as the run knew it then, ``Until.named``, as a sequence number gives it); as it
        is when it is an event cut already, or no event of the run is that early."""
        if until is None or until.run is not None:
            return until
        last = None
        for event in self.workspace.events(run):
            if micros(event.timestamp) > until.micros:
                break
            last = event
        return until if last is None else self.resolve_until(f"{run}#{last.seq}", run)

    # ---- archive_get
    def archive_get(self, ref: str, run: str | None = None) -> StepView | SourceView:
        """One full step (or source), read from the workspace files: no index, no model."""
        ref = typed_ref(ref)
        problem = ref_problem(ref)
        if problem:
            raise BadInput(problem, param="id")
        run = given_run(run)
        ref = self._as_named(ref, run)
        ref_run, step_id = split_gid(ref)
        owner = owner_run(ref, run)
        step_ids = spellings(step_id, lookalikes=False)  # typed composed or decomposed, one step
        library: dict[str, LibraryEntry] | None = None
        found: dict[str, StepView | SourceView] = {}  # by global id: a bare id may name one per run
        for name in [owner] if owner else self.workspace.runs():
            if not present(self.workspace.tree_path(name)):  # a folder there: bad input, not "no run"
                continue
            try:
                tree = self.workspace.tree(name)
            except InputError as error:  # any run may hold a bare id: none is answered for it
                if owner:
                    raise
                problem = error.problem
                raise InputError(problem.file, problem.line, problem.field,
                                 f"{problem.message} (a bare id reads every run; a global id, "
                                 f"RUN/{step_id}, reads its run alone)") from None
            step = next(filter(None, map(tree.step, step_ids)), None)
            if step is not None:
                library = library if library is not None else self._library()
                entry = library.get(step.gid)
                found[step.gid] = StepView(step, entry is not None, entry.inserted if entry else "")
                continue
            source = next((s for s in tree.sources if s.id in step_ids), None)
            if source is not None:
                found[source.gid] = SourceView(source)
        library = library if library is not None else self._library()
        for entry in library.values():
            if entry.id in step_ids and (entry.run == owner or not owner) and entry.gid not in found:
                found[entry.gid] = StepView(library_as_step(entry), True, entry.inserted)
        if len(found) == 1 or (found and owner):
            return next(iter(found.values()))
        if found:
            raise _several_runs(ref, found)
        wrong_run = self.unknown_run("run", owner) if owner else []  # the run is wrong, not the step
        if wrong_run:
            message = wrong_run[0].message
            raise Refused(f"{ref!r}: run {message}") if ref_run else Refused(message, param="run")
        try:  # a run removed since `mem index`: searches still find its steps (advice: a record
            removed = bool(owner) and bool(self._removed(owner))  # that cannot be read says nothing)
        except MemError:
            removed = False
        raise Refused(f"no step {ref!r}" + (f" in run {run!r}" if ref_run is None and run else "")
                      + (f" (the folder of run {owner!r} was removed after the last `mem index` read it, "
                         "so searches still find its steps: run `mem index`)" if removed else "")
                      + self._suggest(ref, library, run=owner))

    def _library(self) -> dict[str, LibraryEntry]:
        return {entry.gid: entry for entry in self.workspace.library()}

    def _readable_library(self) -> dict[str, LibraryEntry]:
        """``_library``, or none when it cannot be read (what names a step is then judged by the
        trees; `check` and a lookup say what is wrong with it)."""
        try:
            return self._library()
        except InputError:
            return {}

    def _cut(self, until: str | Until | None, run: str | None, hide=None) -> frozenset[int] | None:
        """The keys of the steps in memory as of a search's cut (``until``, the steps it hides),
        which alone a note may name; None without a cut (every id may be named)."""
        if until is None and hide is None:
            return None
        return self.searcher.keys_in_memory(Filters(hide=hide, until=self.resolve(until, run)))

    def _suggest(self, ref: str, library: dict[str, LibraryEntry], cut: frozenset[int] | None = None,
                 run: str | None = None) -> str:
        """``; nearest: …`` naming up to five known ids close to ``ref`` (those in ``cut`` alone,
        when given: a search as of an earlier point names no id written after it; those of ``run``
        alone for a bare ``ref``, ``_nearest_said``)."""
        known: list[str] = []
        for tree in self.workspace.readable_trees(self.workspace.runs()).values():  # a bad one: none
            known += [s.gid for s in tree.steps] + [s.gid for s in tree.sources]
        return _nearest_said(ref, known + list(library), cut, run)


_MEND = "mend {it} (`mem check` says what is wrong), then run `mem index`"
_HAPPENED = {"none": "was removed", "unfiled": "stopped being a file",  # a record file that is no file
             "unreadable": "became unreadable"}                          # now, by ``parse.standing``


def _runs_note(names: list[str], file: str, happened: str, rest: str) -> Note:
    """The note that the ``file`` (tree.json, memory/events.jsonl; library.jsonl of ["solve"]) in
    the folders ``names`` ``happened`` after the last `mem index` read it, then ``rest``, whose
    ``{its}`` and ``{it}`` say it of one file or of several."""
    if len(names) == 1:
        return Note("", f"{names[0]}/{file} {happened} after the last `mem index` read it: "
                        + rest.format(its="its", it="it"))
    listed = ", ".join(names[:5]) + (", …" if len(names) > 5 else "")
    plural = rest.format(its="their", it="them")
    return Note("", f"the {file.rsplit('/', 1)[-1]} of {len(names)} runs {happened} after the last "
                    f"`mem index` read it ({listed}): {plural}")


def _nearest_said(ref: str, known: Sequence[str], cut: frozenset[int] | None = None,
                  run: str | None = None) -> str:
    """``; nearest: …`` naming up to five of the ``known`` ids closest to ``ref`` (those in ``cut``
    alone, when given), or nothing. A bare ``ref`` asked of one ``run`` (``--run``): the nearest
    among that run's ids, then the same id in other runs apart (it came first and cut off the run's
    own ids, which a typo meant; a wrong run means it)."""
    known = [gid for gid in dict.fromkeys(known) if cut is None or key(gid) in cut]
    elsewhere: list[str] = []
    if run is not None and "/" not in ref:
        same = plain(ref).casefold()
        elsewhere = [gid for gid in known if split_gid(gid)[0] != run
                     and plain(split_gid(gid)[1]).casefold() == same]
        known = [gid for gid in known if split_gid(gid)[0] == run]
    close = nearest_ids(ref, known)
    return ((f"; nearest: {', '.join(close)}" if close else "")
            + (f"; the same id in other runs: {', '.join(elsewhere[:5])}" if elsewhere else ""))


_EVENT_GID = re.compile(r"([a-z0-9][a-z0-9-]*)#([0-9]+)")  # an event as recall_search names it (Event.gid)


def _excerpt(body: str) -> str:
    """An event hit's excerpt: its brief's or return's first ``EXCERPT_CHARS`` characters, spaced."""
    return " ".join(body[:EXCERPT_CHARS].split())


def _several_runs(ref: str, gids) -> Refused:
    """A bare id that names a step (or source) in several runs, answered with none of them."""
    return Refused(f"{ref!r} is an id in several runs: {', '.join(sorted(gids))}; name one "
                   f"(run/{ref}) or give its run")


def _other_runs_named(event, run: str, known, memo: dict[str, frozenset[str]]) -> set[str]:
    """The global ids of other runs' steps ``event`` (of ``run``) names: in its ids, or written in
    its text (``R-1: beta/b9 is a dead end``), each in the spellings a lookup reads
    (``records.ids.spellings``), of a run ``known`` knows (a path such as ``returns/A6.json`` is no
    step: on a log of 20,000 events, such words made 180,000 keys and `--until` 4 s)."""
    refs = {ref for ref in event.ids if split_gid(ref)[0] not in (None, run)}
    if "/" in event.text:
        for word in mentions(event.text):
            if "/" in word:
                if word not in memo:  # a log repeats its words
                    memo[word] = _word_names(word, run, known)
                refs |= memo[word]
    return refs


def _word_names(word: str, run: str, known) -> frozenset[str]:
    """The global ids of other runs' steps one word of an event's text can be (``_other_runs_named``)."""
    if not known(plain(word.split("/", 1)[0].lstrip(EDGE))):  # no run's name before the /
        return frozenset()
    return frozenset(spelled for form in id_candidates(word) if "/" in form for spelled in spellings(form)
                     if (other := split_gid(spelled)[0]) not in (None, run) and known(other))

