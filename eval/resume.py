"""The resume test: stop a run at an event, restart from the W checkpointed then, and find every
blocked route known by then (a step with status blocked, or of kind dead_end or error, that an event
of the run had named by then), and take the same next action: W's ``next`` names the agents the run
went on to brief or redirect (``next_action``: its first ``brief``/``redirect`` events after the cut,
those logged at one time; an agent is named by its brief file's name or that name up to its first
``-`` or ``.``: ``briefs/A7-continued.md`` by A7-continued or A7, as ids are compared, case aside).
The run is held to it only where the resumed root could know it: on a W the checkpoints give (the
current core.md is a later W), whose next was checkpointed after the last news the run had by then
(``_planned_before_news``), and with no news and no new next between the stop and the launch.

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
from mem_retrieval.records.core import EDGE, id_candidates, render
from mem_retrieval.records.ids import plain, spellings, split_gid
from mem_retrieval.records.types import CORE_FIELDS, Event, LibraryEntry, Step
from mem_retrieval.records.writes import named_ids
from mem_retrieval.retrieval.query import ArchiveQuery, RecallQuery, asks_something, searched_part
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
    next_action: "NextAction | None" = None  # whom the run briefed or redirected next (None: untested)
    next_untested: str = ""     # why it is not (``next_action``)

    @property
    def tested(self) -> bool:
        return bool(self.routes) or self.next_action is not None

    @property
    def passed(self) -> bool:
        """Every blocked route found and W's next naming whom the run launched next; never with
        neither to test (as ``eval reuse``: a test that finds nothing to test has not passed)."""
        return (self.tested and all(route.found for route in self.routes)
                and (self.next_action is None or not self.next_action.missing))

    @property
    def verdict(self) -> str:
        return "nothing to test" if not self.tested else "PASS" if self.passed else "FAIL"

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
                "routes": [r.as_dict() for r in self.routes], "missed": self.missed,
                "next_action": None if self.next_action is None else self.next_action.as_dict(),
                "next_untested": None if self.next_action is not None else self.next_untested}

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
        lines.append(self.next_action.line() if self.next_action else f"next action: {self.next_untested}")
        found = len(self.routes) - len(self.missed)
        if not self.tested:
            lines.append("resume: nothing to test: no blocked route was known by then, nor a next action "
                         "to compare")
        else:
            missed = [*self.missed, *(self.next_action.missing if self.next_action else ())]
            parts = [f"{found} of {len(self.routes)} blocked routes found within {self.pages} pages"
                     if self.routes else "no blocked route was known by then"]
            if self.next_action:
                parts.append("next action not in W" if self.next_action.missing else "next action as W says")
            lines.append(f"resume: {self.verdict}: {', '.join(parts)}"
                         + (f"; missed: {', '.join(missed)}" if missed else ""))
        return "\n".join(lines)


@dataclass(frozen=True)
class NextAction:
    """What the run did next after the cut: its first ``brief``/``redirect`` events (those logged at
    one time), each by its brief file's name (``briefs``), and which of them W's ``next`` does not
    name (``missing``)."""

    briefs: tuple[str, ...]
    events: tuple[Event, ...]
    missing: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"briefs": list(self.briefs), "events": [e.seq for e in self.events],
                "missing": list(self.missing), "found": not self.missing}

    def line(self) -> str:
        said = ", ".join(f"#{e.seq} {e.kind} {short(e.text)}" for e in self.events)
        if not self.missing:
            return (f"next action: W's next names {', '.join(self.briefs)}, whom the run went on to brief "
                    f"or redirect ({said})")
        return (f"next action: MISSED: the run went on to brief or redirect {', '.join(self.briefs)} "
                f"({said}); W's next does not name {', '.join(self.missing)}: checkpoint `next` "
                "(core-set next) before the stop names whom to launch or redirect")


def next_action(w: dict[str, str], later: list[Event]) -> "NextAction | str":
    """The run's next action after the cut (``later``: its events after it), as W should name it:
    its first ``brief``/``redirect`` events, those logged at one time (up to news logged among
    them), when no news came between (only checkpoints that leave W's next as it was, registry
    entries, fetched sources and evictions: a return, an audit or a correction first is news the
    launch was decided on, and a new ``next`` a plan made after the stop; a resumed root cannot be
    held to either). Else why it is not tested (a string)."""
    first = next((i for i, e in enumerate(later) if e.kind in _LAUNCHES), None)
    if first is None:
        return "not tested: the run briefed or redirected no agent after then"
    said = w.get("next") or ""

    def news(event: Event) -> bool:  # a return, an audit, a correction; or a new plan
        planned = _next_checkpoint(event)
        return event.kind not in _NO_NEWS or (planned is not None and planned.strip() != said.strip())

    for event in later[:first]:
        if event.kind not in _NO_NEWS:
            return (f"not tested: #{event.seq} ({event.kind}) came before the run's next brief or "
                    "redirect, which was decided on it")
        if news(event):
            return (f"not tested: #{event.seq} checkpointed a new next before the run's next brief or "
                    "redirect: a plan made after the stop")
    group = [e for e in later[first:] if e.timestamp == later[first].timestamp]
    end = next((i for i, e in enumerate(group) if e.kind not in _LAUNCHES and news(e)), len(group))
    launches = [e for e in group[:end] if e.kind in _LAUNCHES]  # no news among them: one launch
    unnamed = [e for e in launches if not _brief_name(e)]
    if unnamed:
        return (f"not tested: #{unnamed[0].seq} ({unnamed[0].kind}) names no brief file, so no agent "
                "to look for in W")
    folded = plain(said).casefold()
    briefs = tuple(dict.fromkeys(_brief_name(e) for e in launches))
    missing = tuple(brief for brief in briefs if not _named_in(folded, _agent_names(brief)))
    return NextAction(briefs, tuple(launches), missing)


def _named_in(text: str, names: tuple[str, ...]) -> bool:
    """Whether ``text`` (folded) names one of ``names`` (a launch's head and brief name, last) as a
    word: not inside a longer one (``lit`` of ``lit-search`` names no ``lit-review``; ``A7-24``, a
    step id, names no A7), but as one end of a range of numbered agents (``A7-A8`` names both)."""
    for name in names:
        for found in re.finditer(rf"(?<!\w){re.escape(name)}", text):
            word = name + re.match(r"[\w-]*", text[found.end():])[0]
            if word in (name, names[-1]) or (re.fullmatch(rf"{re.escape(name)}-[a-z]+\d+", word)
                                             and re.search(r"\d", name)):
                return True
    return False


def _next_checkpoint(event: Event) -> str | None:
    """The text a ``core-set next`` checkpoint gave W's next, or None for any other event."""
    match = _CHECKPOINT.match(event.text) if event.kind == "checkpoint" else None
    return match.group(2) if match and match.group(1) == "next" else None


def _planned_before_news(events: list[Event]) -> str:
    """Why W's next of then cannot be held to the run's next action: none was checkpointed yet (the
    root had not planned), or it was checkpointed before the last news the run had by then (a
    return, an audit, a correction), which the root had not planned on yet; "" when it can."""
    news = next((e for e in reversed(events) if e.kind not in _NO_NEWS + _LAUNCHES), None)
    planned = next((e for e in reversed(events) if _next_checkpoint(e) is not None), None)
    if planned is None:
        return "not tested: no next action was checkpointed by then (core-set next)"
    if news is None or planned.seq > news.seq:
        return ""
    return (f"not tested: W's next was checkpointed at #{planned.seq}, before #{news.seq} ({news.kind}), "
            "the last news before the stop, which the root had not planned on yet")


_LAUNCHES = ("brief", "redirect")
_NO_NEWS = ("checkpoint", "registry", "source", "evict")  # writing, fetching, a lost context: no news
UNFOUND = ("returned by no query: W names nothing that leads to it (name it in W, by its id or its words, "
           "with core-set before the stop: `open gaps` or `inputs`)")


def _brief_name(event: Event) -> str:
    """The name of the brief file a brief or redirect points to (``briefs/A7-continued.md``:
    A7-continued), punctuation around it aside; "" when its text is no file's path."""
    if not event.path:
        return ""
    return event.path.rsplit("/", 1)[-1].split(".", 1)[0].strip(EDGE) or event.path


def _agent_names(brief: str) -> tuple[str, ...]:
    """What names the agent of a brief, as W is compared (``plain``, which reads look-alike hyphens
    as ``-``, case-folded): the name up to its first ``-`` or ``.`` (the agent, A7), then the
    brief's whole name (A7-continued)."""
    name = plain(brief).casefold()
    return tuple(dict.fromkeys(part for part in (re.split(r"[-.]", name, maxsplit=1)[0], name) if part))


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
    """What a root resuming from W asks: each W line (what a search reads of it: a checkpoint's
    text has no length limit, ``searched_part``; a part that asks nothing, as one of characters
    that draw nothing, is left out) and each id W names, to both searches."""
    probes: list[Probe] = []
    for name in CORE_FIELDS:
        for line in (searched_part(line.strip()) for line in w[name].splitlines()):
            if asks_something(line):
                probes += [Probe(ARCHIVE, line, f"W {name}"), Probe(RECALL, line, f"W {name}")]
    for ref in named_ids(memory.workspace, run, render(w)):
        probes += [Probe(ARCHIVE, ref, "W id"), Probe(RECALL, ref, "W id", by_id=True)]
    return probes


def resume(memory: Retriever, run: str, until: str | None = None, pages: int = PAGES) -> Resume:
    """The resume test on ``run`` as of ``until`` (an event id, a sequence number or an ISO time;
    None: now)."""
    check_pages(pages)
    run = memory.workspace.check_runs([run])[0]  # BadInput: not a slug; Refused: no such run
    cut = memory.event_cut(run, memory.resolve(until, run))  # a time: the run's last event by then
    log = list(memory.workspace.events(run))
    events = [e for e in log if cut is None or cut.admits(e)]
    w, source, notes = w_as_of(memory, run, events)
    notes += [note.message for note in memory.index_behind(run, cut)]  # not W's fault: said
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
                           best(findings[gid]), pages, unfound=UNFOUND)
                    for gid, (step, event) in routes.items())
    action = (_planned_before_news(events) or next_action(w, log[len(events):]) if source == "checkpoints"
              else "not tested: no checkpoint gives W's next of then")
    return Resume(run, until, events[-1] if events else None, source, w, tuple(notes), tuple(probes),
                  targets, pages, *((action, "") if isinstance(action, NextAction) else (None, action)))
