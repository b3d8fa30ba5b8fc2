"""The resume test: stop a run at an event, restart from the W checkpointed then, and find every
blocked route known by then (a step with status blocked, or of kind dead_end or error, that an event
of the run had named by then).

W of then is rebuilt from the ``core-set FIELD: TEXT`` checkpoints (records.writes.core_set) up to the
cut; when none carries field text, the current core.md stands in, and the report says so. The probes
are what a resumed root would issue from W: each W line, and each id W names, to archive-search (all
runs and the library) and recall-search (the run's log; ``--id`` for ids), all as of the cut. An
event hit finds a route when it names it (in its ids, or its global id in its text)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from mem_retrieval.eval.paging import check_pages
from mem_retrieval.eval.tests_before_use import (ARCHIVE, PAGES, RECALL, Probe, Target, best, locate,
                                   short, step_of)
from mem_retrieval.records.core import id_candidates, render
from mem_retrieval.records.ids import spellings, split_gid
from mem_retrieval.records.types import CORE_FIELDS, Event, LibraryEntry, Step
from mem_retrieval.records.writes import named_ids
from mem_retrieval.retrieval.query import ArchiveQuery, RecallQuery
from mem_retrieval.retrieval.retriever import Retriever

# the text of the checkpoint event records.writes.core_set appends before it rewrites core.md
_CHECKPOINT = re.compile(r"core-set (" + "|".join(CORE_FIELDS) + r"): ?(.*)\Z", re.S)
Route = tuple[Step | LibraryEntry, Event]  # the step, and the first event naming it


@dataclass(frozen=True)
class Resume:
    run: str
    until: str | None
    event: Event | None         # the last event kept (None: the cut is before the first)
    w_source: str               # "checkpoints" or "core.md"
    w: dict[str, str]
    notes: tuple[str, ...]
    probes: tuple[Probe, ...]
    routes: tuple[Target, ...]
    pages: int

    @property
    def passed(self) -> bool:
        """Every blocked route found; never with none to find (as ``eval reuse``: a test that finds
        nothing to test has not passed)."""
        return bool(self.routes) and all(route.found for route in self.routes)

    @property
    def verdict(self) -> str:
        return "nothing to test" if not self.routes else "PASS" if self.passed else "FAIL"

    @property
    def missed(self) -> list[str]:
        return [route.id for route in self.routes if not route.found]

    def as_dict(self) -> dict[str, Any]:
        e = self.event
        return {"test": "resume", "pass": self.passed, "verdict": self.verdict, "run": self.run,
                "until": self.until,
                "event": None if e is None else {"seq": e.seq, "time": e.time, "kind": e.kind,
                                                 "text": e.text},
                "w_source": self.w_source, "w": self.w, "notes": list(self.notes), "pages": self.pages,
                "queries": [p.as_dict() for p in self.probes],
                "routes": [r.as_dict() for r in self.routes], "missed": self.missed}

    def text(self) -> str:
        e = self.event
        at = "now" if self.until is None else (
            f"as of {self.until!r}: event #{e.seq} ({e.time}, {e.kind}: {short(e.text)})" if e
            else f"as of {self.until!r}: before the first event")
        source = "the core-set checkpoints up to then" if self.w_source == "checkpoints" else "core.md"
        archive = sum(p.tool == ARCHIVE for p in self.probes)
        lines = [f"resume {self.run} {at}",
                 f"W from {source} · next: {short(self.w.get('next') or '—')}",
                 *[f"note: {note}" for note in self.notes],
                 f"queries: {archive} archive-search, {len(self.probes) - archive} recall-search "
                 f"(each W line, each id W names), as of then, {self.pages} pages each",
                 f"blocked routes known by then: {len(self.routes)}"]
        for route in self.routes:
            lines += route.lines()
        found = len(self.routes) - len(self.missed)
        if not self.routes:
            lines.append("resume: nothing to test: no blocked route was known by then")
        else:
            missed = f"; missed: {', '.join(self.missed)}" if self.missed else ""
            lines.append(f"resume: {self.verdict}: {found} of {len(self.routes)} blocked routes found "
                         f"within {self.pages} pages{missed}")
        return "\n".join(lines)


def w_as_of(memory: Retriever, run: str, events: list[Event]) -> tuple[dict[str, str], str, list[str]]:
    """W after ``events``: (fields, source, notes). The fields the core-set checkpoints among them
    wrote (the others empty), or the current core.md when none carries field text."""
    fields: dict[str, str] = {}
    for event in events:
        match = _CHECKPOINT.match(event.text) if event.kind == "checkpoint" else None
        if match:
            fields[match.group(1)] = match.group(2)
    if fields:
        unset = [name for name in CORE_FIELDS if name not in fields]
        notes = [f"fields no checkpoint had set by then are empty: {', '.join(unset)}"] if unset else []
        return {name: fields.get(name, "") for name in CORE_FIELDS}, "checkpoints", notes
    note = ("no checkpoint up to then carries W's text (core-set writes 'core-set FIELD: TEXT'); "
            "the queries come from the current core.md, a later W than the one checkpointed then")
    core = memory.workspace.core(run)
    if core is None:
        return {name: "" for name in CORE_FIELDS}, "core.md", [note, "there is no core.md"]
    return {name: core.get(name) or "" for name in CORE_FIELDS}, "core.md", [note]


def blocked_routes(memory: Retriever, run: str, events: list[Event]) -> dict[str, Route]:
    """Steps with status blocked or kind dead_end/error that ``events`` name, by global id: in their
    ids (a bare id is a step of ``run``) or, for another run's step, as a global id in their text."""
    routes: dict[str, Route] = {}
    for event in events:
        refs = [ref if "/" in ref else f"{run}/{ref}" for ref in event.ids]
        if "/" in event.text:
            refs += [ref for ref in named_ids(memory.workspace, run, event.text)
                     if "/" in ref and split_gid(ref)[0] != run]
        for ref in refs:
            step = None if ref in routes else step_of(memory, ref)
            if step is not None and (step.status == "blocked" or step.kind in ("dead_end", "error")):
                routes[ref] = (step, event)
    return routes


def _names(hit, gid: str) -> bool:
    """Whether an event hit names the step ``gid``: in its ids, or in its text as ``named_ids``
    reads a text (a word, punctuation around it removed: ``run/A5-8;``; a bare id is of its run)."""
    def forms(ref: str) -> str:
        return ref if "/" in ref else f"{hit.run}/{ref}"
    return (gid in {forms(ref) for ref in hit.ids}
            or any(forms(spelled) == gid for word in hit.text.split() for form in id_candidates(word)
                   for spelled in spellings(form)))


def probes_from(memory: Retriever, run: str, w: dict[str, str]) -> list[Probe]:
    """What a root resuming from W asks: each W line and each id W names, to both searches."""
    probes: list[Probe] = []
    for name in CORE_FIELDS:
        for line in (line.strip() for line in w[name].splitlines()):
            if line:
                probes += [Probe(ARCHIVE, line, f"W {name}"), Probe(RECALL, line, f"W {name}")]
    for ref in named_ids(memory.workspace, run, render(w)):
        probes += [Probe(ARCHIVE, ref, "W id"), Probe(RECALL, ref, "W id", by_id=True)]
    return probes


def resume(memory: Retriever, run: str, until: str | None = None, pages: int = PAGES) -> Resume:
    """The resume test on ``run`` as of ``until`` (an event id, a sequence number or an ISO time;
    None: now)."""
    check_pages(pages)
    memory.workspace.check_runs([run])  # BadInput: not a slug; Refused: no such run
    cut = memory.resolve(until, run)
    events = [e for e in memory.workspace.events(run) if cut is None or cut.admits(e)]
    w, source, notes = w_as_of(memory, run, events)
    probes = probes_from(memory, run, w)
    routes = blocked_routes(memory, run, events)
    size = memory.config.search.page_size
    findings: dict[str, list] = {gid: [] for gid in routes}
    for probe in probes if routes else ():
        if probe.tool == ARCHIVE:
            hits = memory.archive_hits(ArchiveQuery(probe.text, until=cut))
            for gid in routes:
                findings[gid].append(locate(hits, lambda hit, g=gid: hit.id == g, probe, size))
        else:
            hits = memory.recall_hits(RecallQuery(None if probe.by_id else probe.text,
                                                  probe.text if probe.by_id else None, run, cut),
                                      whole=False)  # which events, not their briefs
            for gid in routes:
                findings[gid].append(locate(hits, lambda hit, g=gid: _names(hit, g), probe, size))
    targets = tuple(Target(gid, step.kind, step.status, step.setting,
                           (f"first named by #{event.seq} ({event.kind}, {event.time})",),
                           best(findings[gid]), pages) for gid, (step, event) in routes.items())
    return Resume(run, until, events[-1] if events else None, source, w, tuple(notes), tuple(probes),
                  targets, pages)
