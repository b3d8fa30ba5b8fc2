"""What memory may not do (M1–M4) and the record's own integrity, checked over a workspace.

``check`` collects every violation instead of stopping at the first: the parsers record duplicate ids
and times going backwards in a ``problems`` list, and a file that cannot be read at all is one
``input`` violation, after which the other files are still checked."""

from __future__ import annotations

import os
import re
from functools import cached_property
from collections import Counter, deque
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mem_retrieval.records.core import EDGE, claims, id_candidates
from mem_retrieval.records.errors import InputError, Problem, one_line, plural, quoted
from mem_retrieval.records.ids import NearestIds, id_shape, looks_like_id, ref_problem, spellings, split_gid
from mem_retrieval.records.parse import (Malformed, iter_events, iter_library, parse_core_text, present,
                                         read_text, source_file, standing, text_lines)
from mem_retrieval.records.settings import INCOMPATIBLE, UNKNOWN, Ontology
from mem_retrieval.records.tokens import CORE_TOKEN_LIMIT, count_line_tokens
from mem_retrieval.records.types import FINAL_STATUSES, PASSING_GRADES, LibraryEntry, Source, Step, Tree
from mem_retrieval.records.workspace import Workspace

ERROR, WARNING = "error", "warning"
_DIGIT = re.compile(r"[0-9]")  # an id-shaped word naming no step is warned of when it has one
INTEGRITY, INPUT = "integrity", "input"
DANGLING = "parent {!r} resolves to nothing (no step or source of its run, and no library entry)"
CIRCULAR = "its parents lead back to it ({}): a circular proof"
# a library line whose step's status changed after it was admitted: no command rewrites the library
LIBRARY_FIX = ("mem never rewrites a library line: restore the step as it was admitted, or remove "
               "the line by hand")
CODES = ("M1", "M2", "M3", "M4", INTEGRITY, INPUT)


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken invariant, where it is written: ``file:line: code: message``."""

    file: str
    line: int | None
    code: str
    message: str
    severity: str = ERROR

    def __str__(self) -> str:
        """The line `mem check` prints: one printable line (an id holding a zero-width space, as a
        step id may, shows it escaped, or a nearest id would look like the one typed)."""
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return one_line(f"{where}: {self.code}: {'warning: ' if self.severity == WARNING else ''}"
                        f"{self.message}")


def admission_problem(status: str, grade: str | None, repaired: bool) -> str | None:
    """Why a step may not be in the library (M2), or None: its status must be final, and it must
    have passed the audit (grade pass or minor) or been repaired."""
    if status not in FINAL_STATUSES:
        return f"status {status!r} is not final ({', '.join(FINAL_STATUSES)})"
    if repaired or grade in PASSING_GRADES:
        return None
    if grade is None:
        return "not audited (no audit grade) and not repaired"
    return f"audit grade {grade!r} did not pass ({' or '.join(PASSING_GRADES)}) and it was not repaired"


@dataclass(frozen=True, slots=True)
class ReuseProblem:
    """M3: ``step`` cites ``cited``, a step of another run (a library entry, or a step of a run of
    the workspace that is not in the library), and the run's Fix setting does not imply its setting
    or one of its hypotheses (an error), or the ontology cannot tell whether it implies its setting,
    or ``cited`` is not in the library (warnings)."""

    step: Step
    cited: LibraryEntry | Step
    severity: str
    message: str
    absent: bool = False  # the warning that ``cited`` is not in the library


def m3_excluded(ws: Workspace, tree: Tree, library: Mapping[str, LibraryEntry],
                catalog: "Catalog | None" = None, graph: "M3Graph | None" = None
                ) -> tuple[list[ReuseProblem], dict[str, str], dict[str, str]]:
    """The M3 problems of ``tree``'s steps, the steps of its run that may not enter the library for
    them (step id -> why: ``m3_graph``), and those whose admission M3 cannot judge (step id -> why:
    they rest, through steps of other runs, on a citation M3 cannot judge; a step citing one itself
    is named where it is read). `record` leaves the first out and is refused on the second, and
    `archive-insert` refuses both, by this one rule. ``catalog``: the workspace as read already;
    else the runs cited, and those they cite, are read here, as check reads them. ``graph``: the
    verdicts of every step of ``catalog``, worked out before (`check` works them out once)."""
    catalog = catalog if catalog is not None else _cited_catalog(ws, tree)
    read = catalog.trees.get(tree.run) is tree  # (check: every run's, read once)
    trees = catalog.trees if read else {**catalog.trees, tree.run: tree}
    steps = catalog.steps if read else {step.gid: step for other in trees.values() for step in other.steps}
    excluded, undecided = graph if graph is not None else m3_graph(ws, trees, steps, library, catalog)
    elsewhere = {parent: excluded[cited.gid] for step in tree.steps for parent in step.parents
                 if (cited := steps.get(parent)) is not None and cited.run != tree.run
                 and library.get(parent) is None and cited.gid in excluded}
    unjudged = {parent for step in tree.steps for parent, _, _ in catalog.unjudged(step)}
    problems = list(reuse_problems(tree, library, ws.ontology, steps, unjudged, elsewhere))
    return (problems, {step.id: excluded[step.gid] for step in tree.steps if step.gid in excluded},
            {step.id: undecided[step.gid] for step in tree.steps if step.gid in undecided})


M3Graph = tuple[dict[str, str], dict[str, str]]  # (left out, not judged): global id -> why


def m3_graph(ws: Workspace, trees: Mapping[str, Tree], steps: Mapping[str, Step],
             library: Mapping[str, LibraryEntry], catalog: "Catalog") -> M3Graph:
    """Which steps of ``trees`` may not enter the library under M3, and why (global id -> why): each
    citing a reuse its run's setting does not allow (``reuse_problems``), and each citing one of
    those, directly or through others: a step of its own run, or a step of another run that is not
    in the library (its proof rests on the refused reuse, however many runs away; a library step is
    judged by itself). Then, of the rest, those resting so on a citation M3 cannot judge
    (``Catalog.unjudged``: into a run whose tree.json cannot be read). One pass over the citations
    backwards from the refused steps, so runs citing each other in circles, and chains of any
    length, are judged whole. ``steps``: every step of ``trees`` by global id."""
    cited_by: dict[str, list[tuple[Step, str]]] = {}  # a step -> the steps resting on it, as each cites it
    excluded: dict[str, str] = {}
    judged_not: dict[str, str] = {}
    for tree in trees.values():
        unjudged: set[str] = set()
        for step in tree.steps:
            for parent, _, why in catalog.unjudged(step):
                unjudged.add(parent)
                judged_not.setdefault(step.gid, f"it cites {parent}, {why}")
            for parent in step.parents:
                local = parent.removeprefix(f"{tree.run}/")
                target = (f"{tree.run}/{local}" if "/" not in local
                          else None if library.get(parent) is not None else parent)
                if target in steps and target != step.gid:
                    cited_by.setdefault(steps[target].gid, []).append((step, parent))
        for problem in reuse_problems(tree, library, ws.ontology, steps, unjudged):
            if problem.severity == ERROR:
                excluded.setdefault(problem.step.gid, problem.message)

    def spread(found: dict[str, str], why) -> dict[str, str]:
        """``found`` with every step resting on one of them (``why``); each one's first (its root)."""
        roots, todo = {gid: gid for gid in found}, list(found)
        while todo:
            left = steps[todo.pop()]
            for step, parent in cited_by.get(left.gid, ()):
                if step.gid not in found and step.gid not in excluded:
                    roots[step.gid] = roots[left.gid]
                    found[step.gid] = why(step, parent, left, roots[left.gid])
                    todo.append(step.gid)
        return found

    spread(excluded, lambda step, parent, left, root: (
        f"step {step.id} cites {left.id}, left out under M3" if left.run == step.run
        else f"step {step.id} cites {parent}, which run {left.run} leaves out under M3"))
    undecided = spread({gid: why for gid, why in judged_not.items() if gid not in excluded},
                       lambda step, parent, left, root: f"step {step.id} cites {parent}, which rests on a "
                                                        f"citation M3 cannot judge ({judged_not[root]})")
    return excluded, undecided


def _cited_catalog(ws: Workspace, tree: Tree) -> "Catalog":
    """The runs ``tree``'s steps cite, and those their steps cite in turn, read as check reads them
    (a run whose tree.json cannot be read: ``Catalog.unreadable``)."""
    present, read, todo = set(ws.runs()), {}, [tree]
    while todo:
        cited = {split_gid(parent)[0] for step in todo.pop().steps for parent in step.parents}
        for run in sorted(cited & present - set(read) - {tree.run}):
            read[run] = ws.read_tree(run)[0]
            if read[run] is not None:
                todo.append(read[run])
    return Catalog({run: other for run, other in read.items() if other is not None}, [],
                   {run for run, other in read.items() if other is None})


def reuse_problems(tree: Tree, library: Mapping[str, LibraryEntry], ontology: Ontology,
                   steps: Mapping[str, Step] | None = None, unjudged: Collection[str] = (),
                   left_out: Mapping[str, str] | None = None) -> Iterator[ReuseProblem]:
    """Every M3 problem of ``tree``'s steps, in step order (``library``: entries by global id;
    ``steps``: the steps of other runs by global id). A step of another run is reused, in the
    library or not (a run may cite another run's step): this run's setting must imply its setting,
    and each of its hypotheses that the ontology knows (SPEC §7: "has hypotheses that r's setting
    satisfies"; a hypothesis outside the ontology, such as ``n ≥ 1``, is not a setting). One that is
    not in the library was never admitted to it (M2): a warning saying why. A library step is judged
    as its tree has it (what the search's setting rule judges, from the index), by its entry only
    when its run is not in the workspace (a step whose entry says otherwise is `check`'s warning).
    A citation in ``unjudged`` (``Catalog.unjudged``: into a run whose tree.json cannot be read,
    or of an id it uses twice) is not judged: that is bad input, named where it is read.
    ``left_out``: the cited steps of other runs that their runs leave out under M3 (``m3_excluded``),
    and why: the warning says so rather than "not recorded yet"."""
    run, setting = tree.run, tree.fix.setting
    for step in tree.steps:
        for parent in step.parents:
            entry = library.get(parent)
            cited = (steps or {}).get(parent) or entry
            if cited is None or cited.run == run or parent in unjudged:
                continue
            what = f"{'library ' if entry is not None else ''}step {cited.gid}"
            match = ontology.match(setting, cited.setting)
            if match == INCOMPATIBLE:
                yield ReuseProblem(step, cited, ERROR,
                                   f"step {step.id} cites {what} (setting {quoted(cited.setting)}), which "
                                   f"this run's setting {quoted(setting)} does not imply")
            elif match == UNKNOWN:
                yield ReuseProblem(step, cited, WARNING,
                                   f"step {step.id} cites {what}: whether this run's setting "
                                   f"{quoted(setting)} implies its setting {quoted(cited.setting)} is "
                                   "unknown to the ontology (an auditor must look)")
            unmet, unsure = ontology.hypotheses(setting, cited.hyp) if match != INCOMPATIBLE else ([], [])
            for hypothesis in unmet:
                yield ReuseProblem(step, cited, ERROR,
                                   f"step {step.id} cites {what}, whose hypothesis {quoted(hypothesis)} "
                                   f"this run's setting {quoted(setting)} does not imply")
            for hypothesis in unsure:  # (not ``unjudged``: that names the citations not judged)
                yield ReuseProblem(step, cited, WARNING,
                                   f"step {step.id} cites {what}: whether this run's setting "
                                   f"{quoted(setting)} implies its hypothesis {quoted(hypothesis)} is "
                                   "unknown to the ontology (an auditor must look)")
            if entry is None:
                why = admission_problem(cited.status, cited.grade, cited.repaired) or (
                    f"M3 in run {cited.run}: {left_out[parent]}" if parent in (left_out or {}) else None)
                yield ReuseProblem(step, cited, WARNING,
                                   f"step {step.id} cites {what}, which is not in the library ("
                                   + (f"it may not be: {why})" if why else "not recorded yet)"), absent=True)


class Catalog:
    """Every id the workspace knows: the steps and sources of the runs read, and the library."""

    def __init__(self, trees: dict[str, Tree], library: list[LibraryEntry] | dict[str, LibraryEntry],
                 unreadable: set[str] | None = None, library_whole: bool = True,
                 library_unread: tuple[frozenset[str], ...] | None = None):
        self.trees = trees
        self.library = library if isinstance(library, dict) else {entry.gid: entry for entry in library}
        self.unreadable = unreadable or set()
        self.library_whole = library_whole  # False: some of its lines cannot be read, and
        self.library_unread = library_unread  # the strings each run of them holds (None: not known)
        self._sources = {run: {s.id: s for s in tree.sources} for run, tree in trees.items()}
        self._shapes: dict[str, frozenset[str]] = {}
        self._nearest: dict[str, NearestIds] = {}

    @cached_property
    def _runs(self) -> set[str]:
        """The runs known: those read, the library's, the unreadable."""
        return set(self.trees) | {entry.run for entry in self.library.values()} | self.unreadable

    @cached_property
    def steps(self) -> dict[str, Step]:
        """Every step of the runs read, by global id, runs in order (made when first asked: a
        lookup of a few ids, once per step of an evaluation, need not pay for it)."""
        return {s.gid: s for tree in self.trees.values() for s in tree.steps}

    def resolve(self, ref: str, run: str) -> Step | Source | LibraryEntry | None:
        """What ``ref`` names in the context of ``run``: a step or source of its run, else a library
        entry; None when nothing."""
        ref_run, local = split_gid(ref)
        target = ref_run or run
        tree = self.trees.get(target)
        found = (tree.step(local) if tree is not None else None) or self._sources.get(target, {}).get(local)
        return found or self.library.get(f"{target}/{local}")

    def unverifiable(self, ref: str, run: str) -> bool:
        """Whether ``ref`` points into a run whose tree.json could not be read, or into a run the
        workspace does not hold at an entry a library line that cannot be read may hold."""
        target = split_gid(ref)[0] or run
        if target in self.unreadable:
            return True
        return target not in self.trees and self.maybe_unread(f"{target}/{split_gid(ref)[1]}")

    def maybe_unread(self, gid: str) -> bool:
        """Whether a library line that cannot be read may hold the entry ``gid``: its text names
        the run and the id (``Malformed.words``), or what those lines hold is not known."""
        if self.library_whole or ref_problem(gid) is not None:
            return False
        run, step_id = split_gid(gid)
        blocks = self.library_unread
        return blocks is None or any(run in words and step_id in words for words in blocks)

    def dangling(self, step: Step) -> list[str]:
        """The parents of ``step`` that resolve to nothing (where their run could be read)."""
        return [parent for parent in step.parents
                if self.resolve(parent, step.run) is None and not self.unverifiable(parent, step.run)]

    def unjudged(self, step: Step) -> list[tuple[str, str, str]]:
        """The parents of ``step`` in another run that M3 cannot judge, each with its code and why:
        the run's tree.json could not be read (input), or it uses the id for two steps, which
        `check` names (integrity): which one is cited?"""
        found = []
        for parent in step.parents:
            cited_run, cited_id = split_gid(parent)
            if cited_run in (None, step.run):
                continue
            if cited_run in self.unreadable:
                found.append((parent, INPUT, f"whose run's {cited_run}/tree.json cannot be read"))
            elif cited_run in self.trees and cited_id in self.trees[cited_run].repeated:
                found.append((parent, INTEGRITY, f"an id {cited_run}/tree.json uses for two steps"))
        return found

    def parent_steps(self, step: Step) -> list[Step]:
        """The steps ``step``'s parents name (not sources, nor library entries alone)."""
        own = self.trees.get(step.run)  # a bare id naming a step of its run: resolve's first
        found = ((own.step(parent) if own is not None else None) or self.resolve(parent, step.run)
                 for parent in step.parents)
        return [target for target in found if isinstance(target, Step)]

    def circle_through(self, step: Step) -> list[str] | None:
        """The shortest circle of parents from ``step`` back to it (global ids, ``step`` at both
        ends), or None when its parents never lead back to it."""
        edges: dict[str, list[str]] = {}
        todo = [step]
        while todo:
            current = todo.pop()
            if current.gid not in edges:  # pushed once for each step citing it: read once
                edges[current.gid] = [p.gid for p in self.parent_steps(current)]
                todo += [self.steps[gid] for gid in edges[current.gid] if gid not in edges]
        if not any(step.gid in targets for targets in edges.values()):
            return None
        return _shortest_circle(step.gid, set(edges), edges)

    def circle_names(self, circle: list[str], run: str) -> str:
        """A circle as a message shows it: ids of ``run`` bare, a long one by its ends."""
        names = [s.id if s.run == run else s.gid for s in (self.steps[gid] for gid in circle)]
        if len(names) > 9:  # a long circle: its ends, and how many between
            names = [*names[:4], f"… {len(names) - 7:,} more …", *names[-3:]]
        return " → ".join(names)

    def step_ids(self, run: str) -> list[str]:
        """The ids of ``run``'s steps (none when its tree.json was not read)."""
        tree = self.trees.get(run)
        return tree.step_ids() if tree is not None else []

    def nearest(self, run: str) -> NearestIds:
        """``run``'s step ids, ready to name the nearest to an id naming none (built once a run)."""
        if run not in self._nearest:
            self._nearest[run] = NearestIds(f"{run}/{step_id}" for step_id in self.step_ids(run))
        return self._nearest[run]

    def id_shapes(self, run: str) -> frozenset[str]:
        """The shapes (``records.ids.id_shape``) of ``run``'s step ids, computed once a run."""
        if run not in self._shapes:
            self._shapes[run] = frozenset(map(id_shape, self.step_ids(run)))
        return self._shapes[run]

    def names_known_run(self, ref: str) -> bool:
        ref_run = split_gid(ref)[0]
        return ref_run is not None and ref_run in self._runs


COUNTS = ("runs", "steps", "events", "cores", "claims", "entries", "unchecked", "elsewhere")  # a check's


@dataclass
class Report:
    """Every violation found, and how much was checked."""

    violations: list[Violation] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)

    @property
    def errors(self) -> list[Violation]:
        return [v for v in self.violations if v.severity == ERROR]

    @property
    def warnings(self) -> list[Violation]:
        return [v for v in self.violations if v.severity == WARNING]

    @property
    def unreadable(self) -> bool:
        return any(v.code == INPUT for v in self.errors)

    def by_code(self) -> dict[str, int]:
        found = Counter(v.code for v in self.errors)
        return {code: found[code] for code in CODES if found[code]}

    def counted(self) -> dict[str, int]:
        """Every count, 0 where nothing was found (`--json` gives each key every time)."""
        return {name: self.counts[name] for name in COUNTS}

    def summary(self) -> str:
        c = self.counts
        checked = (f"{plural(c['runs'], 'run')}, {plural(c['steps'], 'step')}, "
                   f"{plural(c['events'], 'event')}, {c['cores']:,} core.md "
                   f"({plural(c['claims'], 'status claim')}), {plural(c['entries'], 'library entry', 'library entries')}")
        warned = f", {plural(len(self.warnings), 'warning')}" if self.warnings else ""
        if not self.errors:
            return f"OK: {checked}; 0 violations{warned}"
        codes = ", ".join(f"{code}: {n}" for code, n in self.by_code().items())
        return f"{plural(len(self.errors), 'violation')} ({codes}){warned} in {checked}"


class _Checker:
    def __init__(self, ws: Workspace, runs: list[str] | None, package: str | None):
        self.ws, self.package = ws, package
        self.selected = set(ws.check_runs(runs)) if runs else None
        self.report = Report()
        self.found: dict[str | None, list[tuple[Problem, str]]] = {None: []}  # None: workspace
        self.consequences: list[Violation] = []  # of a file that cannot be read: listed after it
        self.entries: list[LibraryEntry] = []
        self.catalog = self._load()
        self.m3: M3Graph | None = None  # every step's M3 verdict, worked out once (``m3_graph``)

    # ---- recording
    def _rel(self, file: str) -> str:
        try:  # as named (a link's own path, not its target's)
            return str(Path(os.path.abspath(file)).relative_to(self.ws.root))
        except ValueError:
            return file

    def wants(self, run: str | None) -> bool:
        return run is None or self.selected is None or run in self.selected

    def add(self, run: str | None, file: str, line: int | None, code: str, message: str,
            severity: str = ERROR) -> Violation | None:
        if self.wants(run):
            self.report.violations.append(Violation(self._rel(file), line, code, message, severity))
            return self.report.violations[-1]
        return None

    def in_order(self) -> None:
        """The violations by file and line, those that follow from a file that cannot be read after
        every other: the first line names what to mend."""
        later = {id(v) for v in self.consequences}
        self.report.violations.sort(key=lambda v: (id(v) in later, v.file, v.line or 0))

    def at(self, file: str, line: int | None) -> str:
        return self._rel(file) if line is None else f"{self._rel(file)}:{line}"

    def add_problem(self, run: str | None, problem: Problem, code: str) -> None:
        message = f"{problem.field}: {problem.message}" if problem.field else problem.message
        self.add(run, problem.file, problem.line, code, message)

    def _present(self, run: str | None, path: Path) -> bool:
        """Whether the record file ``path`` is there to read (``parse.present``); what stands there
        instead of a file is an input problem (the library's kept with its others, for library())."""
        try:
            return present(path)
        except InputError as error:
            if run is None:
                self.found[None].append((error.problem, INPUT))
            else:
                self.add_problem(run, error.problem, INPUT)
            return False

    # ---- loading
    def _load(self) -> Catalog:
        """Every run's tree and the library; what is wrong with them is kept for run() and
        library() to report."""
        trees: dict[str, Tree] = {}
        unreadable: set[str] = set()
        for run in self.ws.runs():
            tree, problems = self.ws.read_tree(run)
            if tree is None:
                unreadable.add(run)
            else:
                trees[run] = tree
            self.found[run] = [(p, INPUT if run in unreadable else INTEGRITY) for p in problems]
        self.found[None].extend((problem, INPUT) for problem in self.ws.misnamed_runs())
        for run, problem in self.ws.lost_records().items():  # no index reads the workspace while
            unreadable.add(run)  # one is lost, so every check names it, as every misnamed run
            self.found[None].append((problem, INPUT))
        path, whole, words = self.ws.library_path, True, None
        there = self._present(None, path)
        if not there and standing(path) != "none":  # (pathlib's look raised where it may not look)
            whole = False  # a folder, a dangling link, one unreadable where the library goes: nothing known
        elif there:
            problems, malformed = [], Malformed(words=True)
            try:
                for entry in iter_library(path, problems, malformed):
                    self.entries.append(entry)
            except InputError as error:  # the file itself cannot be read
                malformed.add(error.problem)
            self.found[None].extend((p, INPUT) for p in malformed.problems())
            self.found[None].extend((p, INTEGRITY) for p in problems)
            whole = not malformed.listed
            words = None if malformed.words is None else tuple(map(frozenset, malformed.words))
        return Catalog(trees, self.entries, unreadable, library_whole=whole,
                       library_unread=None if whole else words)

    # ---- the library: M1, M2
    def library(self) -> None:
        file = str(self.ws.library_path)
        for problem, code in self.found[None]:
            self.add_problem(None, problem, code)
        for entry in self.entries:
            if not self.wants(entry.run):
                continue
            self.report.counts["entries"] += 1
            problem = admission_problem(entry.status, entry.grade, entry.repaired)
            tree = self.catalog.trees.get(entry.run)
            step = tree.step(entry.id) if tree is not None else None
            if problem:
                self.add(entry.run, file, entry.line, "M2",
                         f"{entry.gid}: {problem}" + self._stale(entry, tree, step))
            if tree is None:  # a library shipped without its run, or a run that cannot be read
                self.report.counts["unchecked" if entry.run in self.catalog.unreadable else "elsewhere"] += 1
                continue
            if step is None:
                self.add(entry.run, file, entry.line, INTEGRITY,
                         f"{entry.gid} is not a step of {self._rel(tree.path)}")
            else:
                if step.status != entry.status:
                    self.add(entry.run, file, entry.line, "M1",
                             f"{entry.gid}: the library says {entry.status}, "
                             f"{self.at(tree.path, step.line)} says {step.status} ({LIBRARY_FIX})")
                self.agrees(file, entry, tree, step, problem)  # whatever the statuses: every violation

    def _stale(self, entry: LibraryEntry, tree: Tree | None, step: Step | None) -> str:
        """When the entry fails M2 on its own fields but its step's audit admits it: what the step
        says (the entry's copy of the audit is stale, or was written by hand)."""
        if step is None or admission_problem(entry.status, step.grade, step.repaired):
            return ""
        said = ([f"grade {step.grade!r}"] if step.grade != entry.grade else []) + (
            ["repaired"] if step.repaired and not entry.repaired else [])
        return f" ({self.at(tree.path, step.line)} says {' and '.join(said)}: the entry's copy differs)"

    def agrees(self, file: str, entry: LibraryEntry, tree: Tree, step: Step, problem: str | None) -> None:
        """The library entry and its step are one record: the step's own audit must admit it (an
        audit redone after admission may not), and both must be the same kind of step."""
        where = self.at(tree.path, step.line)
        status = step.status if step.status == entry.status else entry.status  # a status that differs
        # is M1's: here only the step's own audit is weighed
        own = admission_problem(status, step.grade, step.repaired)
        if own and not problem:
            self.add(entry.run, file, entry.line, "M2",
                     f"{entry.gid}: {where} says {own} (the library says grade {entry.grade!r})")
        if step.kind != entry.kind:
            self.add(entry.run, file, entry.line, INTEGRITY,
                     f"{entry.gid}: the library says kind {entry.kind}, {where} says {step.kind}")
        differs = [f"{name} {quoted(ours)}, {where} says {quoted(theirs)}" for name, ours, theirs in (
            ("statement", entry.statement, step.statement), ("grade", entry.grade, step.grade))
            if ours != theirs and not (name == "grade" and (own or problem))]  # a failing one is M2's
        for difference in differs:  # an edit after admission, or a hand-written entry
            self.add(entry.run, file, entry.line, INTEGRITY,
                     f"{entry.gid}: the library says {difference}; the search and archive-get show "
                     "the step's", WARNING)
        read = self.ws.ontology.reading  # as M3 reads them: a spelling or a space apart is no difference
        if (read(step.setting), {read(h) for h in step.hyp}) != (read(entry.setting),
                                                                  {read(h) for h in entry.hyp}):
            self.add(entry.run, file, entry.line, INTEGRITY,
                     f"{entry.gid}: the library says setting {quoted(entry.setting)} with hyp "
                     f"{quoted(list(entry.hyp))}, {where} says {quoted(step.setting)} with "
                     f"{quoted(list(step.hyp))}; M3 and the search judge the step's", WARNING)

    # ---- one run: parents and M3, events, core.md (M1, M4)
    def run(self, run: str) -> None:
        self.report.counts["runs"] += 1
        for problem, code in self.found.get(run, []):
            self.add_problem(run, problem, code)
        tree = self.catalog.trees.get(run)
        if tree is not None:
            self.steps(tree)
        self.events(run)
        self.core(run)

    def steps(self, tree: Tree) -> None:
        run = tree.run
        for source in tree.sources:
            if source.path and source_file(self.ws.run_dir(run), source) is None:
                self.add(run, tree.path, source.line, INTEGRITY,
                         f"source {source.id}: its snapshot {source.path!r} is not a file in the run "
                         "folder (the source's text as it was fetched is missing)", WARNING)
        for step in tree.steps:
            self.report.counts["steps"] += 1
            for parent in self.catalog.dangling(step):
                self.add(run, tree.path, step.line, INTEGRITY, f"step {step.id}: {DANGLING.format(parent)}")
            for parent, code, why in self.catalog.unjudged(step):  # not by its entry: it may differ
                if code == INPUT:  # (an id used twice is named where it is written)
                    said = self.add(run, tree.path, step.line, code, f"step {step.id} cites {parent}, "
                                    f"{why}: M3 cannot judge it")
                    self.consequences += [said] if said else []
        if self.m3 is None:
            self.m3 = m3_graph(self.ws, self.catalog.trees, self.catalog.steps, self.catalog.library,
                               self.catalog)
        problems, _, undecided = m3_excluded(self.ws, tree, self.catalog.library, self.catalog, self.m3)
        for step in tree.steps:  # resting on a citation M3 cannot judge, through another run's steps
            if step.id in undecided and not self.catalog.unjudged(step):  # (its own: named above)
                said = self.add(run, tree.path, step.line, INPUT, undecided[step.id])
                self.consequences += [said] if said else []
        for problem in problems:  # (m3_excluded leaves out the citations ``unjudged`` as here)
            unsure = problem.absent and self.catalog.maybe_unread(problem.cited.gid)  # on a line not read?
            said = self.add(run, tree.path, problem.step.line, "M3", problem.message + (
                f"; {self._rel(str(self.ws.library_path))} has lines that cannot be read: it may be one of "
                "them" if unsure else ""), problem.severity)
            self.consequences += [said] if said and unsure else []

    def cycles(self) -> None:
        """Integrity: steps whose parents lead back to them are a circular proof. Each set of steps
        that cite each other in circles (a strongly connected component) is reported once, at its
        first step of a run being checked, with the shortest circle through it: linear in steps
        and parents, however many circles the set holds."""
        steps = self.catalog.steps
        position = {gid: n for n, gid in enumerate(steps)}  # runs in order, steps in file order
        parents = {gid: list(dict.fromkeys(p.gid for p in self.catalog.parent_steps(step)))
                   for gid, step in steps.items()}
        for component in _strongly_connected(list(steps), parents):
            if len(component) == 1 and component[0] not in parents[component[0]]:
                continue  # a step alone, not its own parent
            first = min((steps[gid] for gid in component if self.wants(steps[gid].run)),
                        key=lambda step: position[step.gid], default=None)
            if first is None:
                continue
            circle = _shortest_circle(first.gid, set(component), parents)
            among = (f", one of {len(component):,} steps citing each other in circles"
                     if len(circle) - 1 < len(component) else "")
            self.add(first.run, self.catalog.trees[first.run].path, first.line, INTEGRITY,
                     f"step {first.id}: {CIRCULAR.format(self.catalog.circle_names(circle, first.run))}"
                     f"{among}")

    def events(self, run: str) -> None:
        path = self.ws.events_path(run)
        if not self._present(run, path):
            return
        problems: list[Problem] = []
        malformed = Malformed()
        begun: list[Problem] = []
        try:
            for event in iter_events(path, run, self.ws.run_dir(run), problems, malformed, begun):
                self.report.counts["events"] += 1
                if event.path:  # the index reads a brief or return whole: it must be UTF-8
                    try:
                        read_text(self.ws.run_dir(run) / event.path)
                    except InputError as error:
                        self.add_problem(run, error.problem, INPUT)
                for ref in event.ids:
                    if self.catalog.resolve(ref, run) is None and not self.catalog.unverifiable(ref, run):
                        self.add(run, str(path), event.seq, INTEGRITY,
                                 f"event names unknown id {ref!r}")
        except InputError as error:  # the file itself cannot be read
            malformed.add(error.problem)
        for problem in malformed.problems():
            self.add_problem(run, problem, INPUT)
        for problem in problems:  # a clock set back: the log cannot be mended, the order dates it
            self.add(run, problem.file, problem.line, INTEGRITY, f"{problem.field}: {problem.message}",
                     WARNING)
        for problem in begun:  # an append in progress is no violation; one a crash left, mended by hand
            self.add(run, problem.file, problem.line, INPUT, problem.message, WARNING)

    def core(self, run: str) -> None:
        path = self.ws.core_path(run)
        if not self._present(run, path):
            return
        self.report.counts["cores"] += 1
        try:
            text = read_text(path)
        except InputError as error:
            self.add_problem(run, error.problem, INPUT)
            return
        try:
            parse_core_text(text, run, str(path))
        except InputError as error:  # malformed headings; the tokens and claims are still checked
            for problem in error.problems:
                self.add_problem(run, problem, INPUT)
        self.bound(run, path, text)
        for claim in claims(text):
            self.claim(run, path, claim.line, claim.word, claim.status)

    def bound(self, run: str, path: Path, text: str) -> None:
        """M4: W at most 2,000 tokens; the violation points at the line that passes the limit."""
        counts = count_line_tokens(text_lines(text), self.package)
        total, crossing, running = sum(counts), None, 0
        for number, n in enumerate(counts, start=1):
            running += n
            if running > CORE_TOKEN_LIMIT:
                crossing = number
                break
        if crossing is not None:
            self.add(run, str(path), crossing, "M4",
                     f"W is {total:,} tokens (limit {CORE_TOKEN_LIMIT:,}); this line passes the limit")

    def claim(self, run: str, path: Path, line: int, word: str, status: str) -> None:
        """M1: a status W states for a step equals the step's status (tree.json, else library). The
        word may name it in any of its ``spellings`` (decomposed, a non-breaking hyphen, fullwidth);
        a bare word with a digit, of the shape of the run's step ids (``A1-33`` beside ``A1-3``), that
        names none is a warning with the nearest ids, as a global id of a known run naming none is an
        error (a word without one is prose: ``the sub-lemma is open`` beside ids such as ``chain-rule``)."""
        forms = list(dict.fromkeys(spelled for form in id_candidates(word) for spelled in spellings(form)))
        for form in forms:  # as written first, then trimmed, then look-alikes (as a lookup reads it)
            unread = (split_gid(form)[0] or run) in self.catalog.unreadable  # its tree is the authority
            target = None if unread else self.catalog.resolve(form, run)
            if target is None and self.catalog.unverifiable(form, run):
                return  # it may name a step that could not be read: no weaker form decides for it
            if isinstance(target, Source):
                return
            if target is not None:
                self.report.counts["claims"] += 1
                if target.status != status:
                    where = self.at(self.catalog.trees[target.run].path if isinstance(target, Step)
                                    else str(self.ws.library_path), target.line)
                    self.add(run, str(path), line, "M1",
                             f"W says {form} {status}, {where} says {target.status}")
                return
        if any(self.catalog.names_known_run(form) for form in forms):
            self.add(run, str(path), line, INTEGRITY,
                     f"W states a status ({status}) for {quoted(word)}, which names no step")
            return
        typed = [form for form in forms if "/" not in form and _DIGIT.search(form) and looks_like_id(form)]
        if typed and any(id_shape(form) in self.catalog.id_shapes(run) for form in typed):
            near = self.catalog.nearest(run).near(word.strip(EDGE), n=3)
            self.add(run, str(path), line, INTEGRITY,
                     f"W states a status ({status}) for {quoted(word.strip(EDGE))}, which names no step of "
                     f"{run}" + (f"; nearest: {', '.join(split_gid(gid)[1] for gid in near)}" if near
                                 else ""), WARNING)


def _strongly_connected(nodes: list[str], edges: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of the graph ``edges``, iteratively (a chain of
    parents may be far deeper than Python's recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in nodes:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(edges[root]))]
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)
    return components


def _shortest_circle(start: str, members: set[str], edges: dict[str, list[str]]) -> list[str]:
    """The shortest path from ``start`` back to itself inside ``members`` (breadth first), with
    ``start`` at both ends."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in edges[node]:
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if child in members and child not in came_from:
                came_from[child] = node
                queue.append(child)
    raise AssertionError(f"{start} is on no circle of its component")


def read_catalog(ws: Workspace) -> Catalog:
    """Every id of the workspace as `check` reads it (``_Checker``); InputError for the library's
    first line that cannot be read or repeats an entry, as a strict read of it says it (the library
    is then read once, not once more to raise)."""
    checker = _Checker(ws, None, None)
    library = str(ws.library_path)
    if unread := sorted((p for p, _ in checker.found[None] if p.file == library), key=lambda p: p.line or 0):
        raise InputError.of(unread[0])
    return checker.catalog


def integrity_problem(catalog: Catalog, step: Step) -> tuple[str, str] | None:
    """Why ``step``'s record does not hold together, (code, message) as `check` says it over the
    workspace's ``catalog`` (``read_catalog``): a parent resolving to nothing, parents leading back
    to it (integrity), a parent M3 cannot judge (input: ``Catalog.unjudged``); else None.
    `archive-insert` refuses it then, as `record` refuses its run (nothing removes an entry once
    written)."""
    if dangling := catalog.dangling(step):
        return INTEGRITY, DANGLING.format(dangling[0])
    if circle := catalog.circle_through(step):
        return INTEGRITY, CIRCULAR.format(catalog.circle_names(circle, step.run))
    if unjudged := catalog.unjudged(step):
        parent, code, why = unjudged[0]
        return code, f"it cites {parent}, {why}: M3 cannot judge it"
    return None


def check(ws: Workspace, runs: list[str] | None, package: str) -> Report:
    """M1–M4 and integrity over the runs (all when none given) and their library entries."""
    checker = _Checker(ws, runs, package)
    checker.library()
    for run in sorted(checker.selected or {*checker.catalog.trees, *checker.catalog.unreadable}):
        checker.run(run)
    checker.cycles()
    checker.in_order()
    return checker.report


def check_library(ws: Workspace) -> Report:
    """M1–M2 on the library alone (``mem eval status``), with why a run its entries name cannot be
    read (its entries are then unchecked: ``counts["unchecked"]``)."""
    checker = _Checker(ws, None, None)
    checker.library()
    for run in sorted(checker.catalog.unreadable & {entry.run for entry in checker.entries}):
        for problem, code in checker.found.get(run, ()):
            checker.add_problem(run, problem, code)
    checker.report.violations.sort(key=lambda v: v.line or 0)
    return checker.report


__all__ = ["Catalog", "Report", "ReuseProblem", "Violation", "admission_problem", "check", "check_library",
           "reuse_problems"]
