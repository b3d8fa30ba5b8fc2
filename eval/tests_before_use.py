"""The design's tests before use, what they share: the queries issued (``Probe``), where a step that
must be found was found (``Finding``), and the verdict on each such step (``Target``).

- resume (``eval/resume.py``): as of an event of RUN, every blocked route known by then is found from
  the W of then.
- reuse (``eval/reuse.py``): every library step NEW_RUN cites comes back for its Fix.
- status: M1–M2 on the library (``records.invariants.check_library``, `mem eval status`).

A step counts as found when its best page over the queries issued is at most ``pages`` (each query
read for ``pages`` pages). Statuses and kinds are those of tree.json now: the records keep no earlier
status, so a route "known by then" is a step named by then whose final status or kind marks a route."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mem_retrieval.records.errors import Refused
from mem_retrieval.records.types import LibraryEntry, Step
from mem_retrieval.retrieval.retriever import Retriever

PAGES = 2
ARCHIVE, RECALL = "archive-search", "recall-search"


@dataclass(frozen=True)
class Probe:
    """One query a root agent would issue: ``mem TOOL TEXT`` (``recall-search --id`` when by_id)."""

    tool: str
    text: str
    origin: str                 # where it came from: "W next", "W id", "Fix problem", …
    by_id: bool = False

    def __str__(self) -> str:
        return f'{self.tool} {"--id " if self.by_id else ""}"{short(self.text, 70)}" ({self.origin})'

    def as_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "query": self.text, "by_id": self.by_id, "origin": self.origin}


@dataclass(frozen=True)
class Finding:
    """Where one probe found a step: its rank in the result list, and the page that puts it on."""

    rank: int
    page: int
    probe: Probe


@dataclass(frozen=True)
class Target:
    """A step that must be found: where it was found best (None: by no probe), and why it counts."""

    id: str
    kind: str
    status: str
    setting: str
    cited: tuple[str, ...]      # why it must be found: how it was named or cited
    best: Finding | None
    pages: int
    missed_because: str = ""    # a reason it cannot be found at all (not in the library, M3)
    setting_match: str | None = None
    unfound: str = "returned by no query"  # what a miss by every query says, and what to do

    @property
    def found(self) -> bool:
        return self.best is not None and self.best.page <= self.pages and not self.missed_because

    def why_missed(self) -> str:
        if self.missed_because:
            return self.missed_because
        if self.best is None:
            return self.unfound
        return f"best rank {self.best.rank} (page {self.best.page}), on {self.best.probe}"

    def as_dict(self) -> dict[str, Any]:
        best = self.best
        return {"id": self.id, "kind": self.kind, "status": self.status, "setting": self.setting,
                "setting_match": self.setting_match, "cited": list(self.cited), "found": self.found,
                "page": best.page if best else None, "rank": best.rank if best else None,
                "query": best.probe.as_dict() if best else None,
                "missed": None if self.found else self.why_missed()}

    def lines(self) -> list[str]:
        match = f" ({self.setting_match})" if self.setting_match else ""
        head = f"{self.id}  {self.kind} · {self.status} · setting {self.setting or '—'}{match}"
        if self.found:
            where = f"page {self.best.page} (rank {self.best.rank}) · {self.best.probe}"
            return [f"  found   {head}", f"          {where}", f"          {'; '.join(self.cited)}"]
        return [f"  MISSED  {head}", f"          {self.why_missed()}",
                f"          {'; '.join(self.cited)}"]


def locate(hits: Sequence[Any], is_target: Callable[[Any], bool], probe: Probe,
           page_size: int) -> Finding | None:
    """The first hit that is (or names) the target, as a Finding; None when no hit is."""
    for rank, hit in enumerate(hits, start=1):
        if is_target(hit):
            return Finding(rank, (rank - 1) // page_size + 1, probe)
    return None


def best(findings: list[Finding | None]) -> Finding | None:
    """The best rank; on a tie the step's own hit (archive-search) before an event naming it, then
    the earlier probe."""
    ranked = [(f.rank, f.probe.tool != ARCHIVE, i, f) for i, f in enumerate(findings) if f]
    return min(ranked)[3] if ranked else None


def step_of(memory: Retriever, gid: str) -> Step | LibraryEntry | None:
    """The step (or library entry) a global id names; None when none. A run whose tree.json cannot
    be read is bad input (InputError, as `--all` and `mem check` say it): a test counting its ids as
    naming no step dropped what the run needs, and passed on what it could not read."""
    try:
        return memory.workspace.step(gid)
    except Refused:
        return None


def short(text: str, width: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
