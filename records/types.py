"""Immutable record types, one per thing the SPEC names (§3–§6)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from mem_retrieval.records.ids import spellings, split_gid

KINDS = ("lemma", "dead_end", "error")
STATUSES = ("open", "proved", "refuted", "blocked", "stale")
FINAL_STATUSES = ("proved", "refuted", "blocked")
GRADES = ("pass", "minor", "major", "error")
PASSING_GRADES = ("pass", "minor")
EVENT_KINDS = (
    "source", "brief", "return", "registry", "redirect", "audit", "correction", "checkpoint", "evict",
)
CORE_FIELDS = ("phase", "portfolio", "open gaps", "next", "inputs")


@dataclass(frozen=True, slots=True)
class Audit:
    grade: str
    by: str = ""
    note: str = ""
    repaired: bool = False

    @property
    def passed(self) -> bool:
        """Passed the audit: grade pass or minor (SPEC §3)."""
        return self.grade in PASSING_GRADES


@dataclass(frozen=True, slots=True)
class Fix:
    problem: str = ""
    setting: str = ""
    criterion: str = ""
    checklist: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Source:
    run: str
    id: str
    origin: str = ""
    retrieved: str = ""
    hash: str = ""
    path: str = ""
    line: int | None = None

    @property
    def gid(self) -> str:
        return f"{self.run}/{self.id}"


@dataclass(frozen=True, slots=True)
class Step:
    """One proof step, rec(u): from a run's tree.json or, for a library without its run, the library."""

    run: str
    id: str
    kind: str
    statement: str
    status: str
    hyp: tuple[str, ...] = ()
    setting: str = ""
    parents: tuple[str, ...] = ()
    proof: str = ""
    audit: Audit | None = None
    agent: str = ""
    missing: str = ""
    failed_input: str = ""
    line: int | None = None

    @property
    def gid(self) -> str:
        return f"{self.run}/{self.id}"

    @property
    def grade(self) -> str | None:
        return self.audit.grade if self.audit else None

    @property
    def repaired(self) -> bool:
        return bool(self.audit and self.audit.repaired)

    @property
    def admissible(self) -> bool:
        """M2: final status, and passed the audit or was repaired."""
        return self.status in FINAL_STATUSES and self.audit is not None and (
            self.audit.passed or self.audit.repaired
        )

    def cited(self, sources: frozenset[str] = frozenset()) -> list[str]:
        """The global ids of the steps this step cites: its parents less the ``sources`` of its
        run (a bare id means a step of its own run)."""
        return [p if "/" in p else f"{self.run}/{p}" for p in self.parents if "/" in p or p not in sources]


@dataclass(frozen=True, slots=True)
class Tree:
    """A run record G (tree.json)."""

    run: str
    path: str
    date: str = ""
    fix: Fix = field(default_factory=Fix)
    sources: tuple[Source, ...] = ()
    steps: tuple[Step, ...] = ()
    repeated: frozenset[str] = frozenset()  # step ids used twice (`check` reads such a tree, the first kept)
    _by_id: dict[str, Step] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        for s in self.steps:  # a scan per lookup made `check` of a 40,000-step run take 22 s
            self._by_id.setdefault(s.id, s)

    def step(self, step_id: str) -> Step | None:
        """The step ``step_id`` names (the first, where a tree repeats an id)."""
        return self._by_id.get(step_id)

    def step_ids(self) -> list[str]:
        """Its step ids, each once, in order."""
        return list(self._by_id)

    def step_named(self, typed: str) -> Step | None:
        """The step an id as typed names: itself, else in another of its ``spellings`` (composed or
        decomposed, a non-breaking hyphen, fullwidth), as a lookup reads it."""
        return next((found for spelled in spellings(typed) if (found := self.step(spelled))), None)


@dataclass(frozen=True, slots=True)
class LibraryEntry:
    """One line of solve/library.jsonl (SPEC §5)."""

    run: str
    id: str
    kind: str
    statement: str
    status: str
    setting: str = ""
    hyp: tuple[str, ...] = ()
    grade: str | None = None
    repair: str | None = None
    inserted: str = ""
    missing: str = ""
    failed_input: str = ""
    line: int | None = None

    @property
    def gid(self) -> str:
        return f"{self.run}/{self.id}"

    @property
    def repaired(self) -> bool:
        return bool(self.repair)

    @property
    def admissible(self) -> bool:
        return self.status in FINAL_STATUSES and (self.grade in PASSING_GRADES or self.repaired)


@dataclass(frozen=True, slots=True)
class Event:
    """One line of memory/events.jsonl; ``seq`` is its line number (SPEC §4)."""

    run: str
    seq: int
    time: str
    timestamp: datetime
    actor: str
    kind: str
    ids: tuple[str, ...]
    text: str
    path: str | None = None  # the brief/return file the text points to, relative to the run

    @property
    def gid(self) -> str:
        return f"{self.run}#{self.seq}"

    @property
    def step_gids(self) -> list[str]:
        """The global ids of the steps it names: a bare id in ``ids`` is a step of its own run."""
        return [ref if "/" in ref else f"{self.run}/{ref}" for ref in self.ids]

    def names(self, ref: str) -> bool:
        """Whether it names the step ``ref``: a global id, or, bare, a step of any run with that id
        (as ``recall_search --id`` reads it, its look-alikes already read: ``Retriever._as_named``)."""
        refs = spellings(ref, lookalikes=False)
        if "/" in ref:
            return any(gid in refs for gid in self.step_gids)
        return any(split_gid(named)[1] in refs for named in self.ids)


@dataclass(frozen=True, slots=True)
class CoreMemory:
    """W: memory/core.md, five fields in order."""

    run: str
    path: str
    fields: tuple[tuple[str, str], ...]

    def get(self, name: str) -> str | None:
        for key, value in self.fields:
            if key == name:
                return value
        return None
