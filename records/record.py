"""The design's Record step for one run, as one operation: check the run, then admit to the library
every step that satisfies M2 and is not there yet, except steps with an M3 problem (they cite a
library step the run's setting does not imply) and those citing them through the run's own steps,
all in one locked write.

Refused, listing them, when the run has M1, M4, integrity or unreadable-input violations: a status
that W or L promotes must never be copied into the library. The write is all or nothing: the
library's bytes plus the new lines are written to a temporary file, fsynced and renamed over it
(records.files), under the library's lock, so a kill leaves the old library or the new one, never a
partial line; the steps already there are skipped, so a rerun completes the work and a second run
admits nothing. Indexing afterwards is the caller's (``Memory.record``): this layer does not know
the index."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mem_retrieval.records.errors import BadInput, Refused, plural
from mem_retrieval.records.files import sweep_temporaries
from mem_retrieval.records.invariants import (ERROR, INPUT, INTEGRITY, Violation, admission_problem, check,
                                              m3_excluded)
from mem_retrieval.records.parse import iter_library, parse_library_entry, present
from mem_retrieval.records.types import LibraryEntry, Step
from mem_retrieval.records.workspace import Workspace
from mem_retrieval.records.writes import append_whole, library_record, locked, now, utc_iso

BLOCKING = ("M1", "M4", INTEGRITY, INPUT)  # violations that refuse the whole Record step


@dataclass(frozen=True, slots=True)
class LeftOut:
    """A step of the run that stays out of the library, and why (``code`` M2 or M3)."""

    id: str
    code: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"id": self.id, "code": self.code, "reason": self.reason}


@dataclass(frozen=True)
class Record:
    """What the Record step of ``run`` did (or, with ``dry_run``, would do): the steps ``admitted``
    (library entries; with ``dry_run``, the steps planned), those left out and why, those already in
    the library, warnings (M2: an entry of the run already in the library whose step fails M2 now;
    M3: admitted, the ontology cannot judge them, an auditor must), and the index run that followed
    (an ``IndexReport``, None for a dry run)."""

    run: str
    dry_run: bool
    admitted: tuple[LibraryEntry | Step, ...]
    left_out: tuple[LeftOut, ...]
    already: tuple[str, ...]
    warnings: tuple[Violation, ...] = ()
    index: Any = field(default=None, compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run, "dry_run": self.dry_run,
            "admitted": [_admitted_dict(item) for item in self.admitted],
            "left_out": [item.as_dict() for item in self.left_out],
            "already": list(self.already),
            "warnings": [str(w) for w in self.warnings],
            "index": None if self.index is None else self.index.as_dict(),
        }

    def summary(self) -> str:
        verb = "would admit" if self.dry_run else "admitted"
        return (f"record {self.run}{' (dry run)' if self.dry_run else ''}: {verb} "
                f"{plural(len(self.admitted), 'step')}, left out {len(self.left_out):,}, "
                f"{len(self.already):,} already in the library")


def _admitted_dict(item: LibraryEntry | Step) -> dict[str, Any]:
    line = item.line if isinstance(item, LibraryEntry) else None
    return {"id": item.gid, "status": item.status, "grade": item.grade, "line": line}


_WHY = ((INPUT, "a file it needs cannot be read, so it cannot be checked"),
        ("M1", "W or the library states a status its tree.json does not: they must agree first"),
        ("M4", "W is over its bound"),
        (INTEGRITY, "its record does not hold together"))


class RecordRefused(Refused):
    """The run breaks M1, M4 or the record's integrity, or a file it needs cannot be read (then
    bad input: exit status 2): nothing is admitted. ``problems``: the headline, then each violation
    (one line each, as `mem check` prints them)."""

    def __init__(self, run: str, violations: list[Violation]):
        counts: dict[str, int] = {}
        for violation in violations:
            counts[violation.code] = counts.get(violation.code, 0) + 1
        codes = ", ".join(f"{code}: {n}" for code, n in counts.items())
        why = "; ".join(reason for code, reason in _WHY if code in counts)
        headline = (f"record {run} refused: {plural(len(violations), 'violation')} ({codes}); "
                    f"nothing was admitted ({why})")
        super().__init__(headline)
        if INPUT in counts:
            self.exit_status = BadInput.exit_status
        self.run = run
        self.violations = tuple(violations)
        self.problems = (headline, *(str(v) for v in violations))


def plan_record(ws: Workspace, run: str, package: str) -> Record:
    """Check ``run`` and sort its steps: to admit, left out (M2, M3), already in the library.
    Raises ``RecordRefused`` on a blocking violation (``BLOCKING``)."""
    ws.check_runs([run], param="run")  # BadInput: not a slug; Refused: no such run
    report = check(ws, [run], package)
    blocking = [v for v in report.violations if v.severity == ERROR and v.code in BLOCKING]
    if blocking:
        raise RecordRefused(run, blocking)
    tree = ws.tree(run)
    library = {entry.gid: entry for entry in ws.library()}
    problems, excluded, _ = m3_excluded(ws, tree, library)  # (what M3 cannot judge: check refused it)
    admit, left_out, already = [], [], []
    for step in tree.steps:
        if step.gid in library:
            already.append(step.gid)
            continue
        problem = admission_problem(step.status, step.grade, step.repaired)
        if problem:
            left_out.append(LeftOut(step.gid, "M2", problem))
        elif step.id in excluded:
            left_out.append(LeftOut(step.gid, "M3", excluded[step.id]))
        else:
            admit.append(step)
    chosen = {step.id for step in admit}
    tree_file = str(ws.tree_path(run).relative_to(ws.root))
    warnings = tuple(Violation(tree_file, p.step.line, "M3", p.message, p.severity)
                     for p in problems if p.severity != ERROR and p.step.id in chosen)
    # an entry admitted before whose step fails M2 now (its audit redone, and failed): said, as
    # nothing removes a library line but a hand
    failed = tuple(v for v in report.violations if v.code == "M2")
    return Record(run, True, tuple(admit), tuple(left_out), tuple(already), failed + warnings)


def admit(ws: Workspace, plan: Record) -> Record:
    """Append the planned steps to the library in one all-or-nothing write under its lock; steps
    another writer added meanwhile are counted as already there."""
    path = ws.library_path
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path.parent / ".library.lock"):
        sweep_temporaries(path)  # left by a killed writer
        there = present(path)
        held = {entry.gid for entry in iter_library(path)} if there else set()
        todo = [step for step in plan.admitted if step.gid not in held]
        already = plan.already + tuple(step.gid for step in plan.admitted if step.gid in held)
        entries: list[LibraryEntry] = []
        if todo:
            stamp = utc_iso(now())
            records = [library_record(step, stamp) for step in todo]
            first = append_whole(path, records)
            entries = [parse_library_entry(r, str(path), first + i) for i, r in enumerate(records)]
    return Record(plan.run, False, tuple(entries), plan.left_out, already, plan.warnings)


__all__ = ["BLOCKING", "LeftOut", "Record", "RecordRefused", "admit", "plan_record"]
