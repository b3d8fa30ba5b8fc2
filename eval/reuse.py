"""The reuse test: put NEW_RUN's Fix to the library, as the design's Recall step does
(``archive_search(statement, setting)`` over the library, before the portfolio), and check that every
library step NEW_RUN went on to cite comes back, each with its setting.

The probes: the Fix problem, and the Fix criterion (it names the cases to decide), each an
archive-search over the library only, NEW_RUN's own steps left out, setting = the Fix setting (so
steps of an incompatible setting are left out, M3). The checklist is not used: it is written at Fix,
after Recall, and in practice names the very ids Recall found. What NEW_RUN cites: the global ids of
other runs' steps among its tree.json parents, and in its briefs/ (inputs and dead ends; a line
saying "not an input" or "left out" cites nothing)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from mem_retrieval.eval.derived import inserted_before, run_start
from mem_retrieval.eval.paging import check_pages
from mem_retrieval.eval.tests_before_use import ARCHIVE, PAGES, Probe, Target, best, locate, step_of
from mem_retrieval.indexers.store import key
from mem_retrieval.records.core import id_candidates, mentions
from mem_retrieval.records.errors import InputError, plural
from mem_retrieval.records.ids import split_gid
from mem_retrieval.records.settings import INCOMPATIBLE
from mem_retrieval.retrieval.hint import Hint
from mem_retrieval.retrieval.query import ArchiveQuery, Until, asks_something, searched_part
from mem_retrieval.retrieval.retriever import Retriever

_NOT_CITED = re.compile(r"\bnot (an? )?inputs?\b|\bleft out\b", re.I)
_DEAD_END = re.compile(r"\bdead ends?\b|\bdo not retry\b", re.I)
_INPUT = re.compile(r"\binputs?\b", re.I)
_BRACKETED = re.compile(r"\([^()]*\)")
NO_START = ("--runs-before: {run} has no events, so nothing says when it started: every library entry "
            "it cites is required, whenever inserted")


@dataclass(frozen=True)
class Reuse:
    run: str
    setting: str
    probes: tuple[Probe, ...]
    cited: tuple[Target, ...]
    not_cited: tuple[str, ...] = ()      # ids a brief names as not an input
    unresolved: tuple[str, ...] = ()     # global ids in a brief that name no step
    pages: int = PAGES
    threshold: float = 1.0               # the share of cited steps that must come back
    later: tuple[str, ...] = ()          # cited library steps inserted after the cut (not required)
    cut: str = ""                        # what the library is taken as of ("" : as it stands)
    no_start: bool = False               # runs_before asked, but the run has no event to start it
    after: tuple[str, ...] = ()          # cited steps that cite the run (written after it began)
    undated: tuple[str, ...] = ()        # cited library steps with no insertion time, asked as of a cut
    notes: tuple[str, ...] = ()          # what the index lacks (the library written since it read it)

    @property
    def recall(self) -> float | None:
        """The share of the cited steps found; None with nothing to test: none cited, or a Fix
        asking nothing (no problem or criterion: no query was asked, so none could find them)."""
        if not self.cited or not self.probes:
            return None
        return sum(t.found for t in self.cited) / len(self.cited)

    @property
    def passed(self) -> bool:
        return self.recall is not None and self.recall >= self.threshold - 1e-12

    @property
    def verdict(self) -> str:
        return "nothing to test" if self.recall is None else "PASS" if self.passed else "FAIL"

    @property
    def missed(self) -> list[str]:
        return [t.id for t in self.cited if not t.found] if self.probes else []  # (none was looked for)

    def as_dict(self) -> dict[str, Any]:
        return {"test": "reuse", "pass": self.passed, "verdict": self.verdict, "run": self.run,
                "setting": self.setting, "pages": self.pages, "threshold": self.threshold,
                "recall": self.recall,
                "queries": [p.as_dict() for p in self.probes],
                "cited": [t.as_dict() for t in self.cited], "missed": self.missed,
                "not_cited": list(self.not_cited), "unresolved": list(self.unresolved),
                "later": list(self.later), "undated": list(self.undated), "cut": self.cut or None,
                "start_unknown": self.no_start, "after_run": list(self.after), "notes": list(self.notes)}

    def text(self) -> str:
        lines = [f"reuse {self.run}: the library (its own steps left out) queried with its Fix, "
                 f"setting {self.setting.strip() or '—'}, {self.pages} pages a query"
                 + (f", as of {self.cut}" if self.cut else ""),
                 *([NO_START.format(run=self.run)] if self.no_start else []),
                 *[f"note: {note}" for note in self.notes],
                 *[f"query: {probe}" for probe in self.probes],
                 f"library steps it cites: {len(self.cited)}"
                 + ("" if self.probes or not self.cited else f" ({', '.join(t.id for t in self.cited)})")]
        for target in self.cited if self.probes else ():
            lines += target.lines()
        if self.not_cited:
            lines.append(f"named in a brief as not an input (not required): {', '.join(self.not_cited)}")
        if self.unresolved:
            lines.append(f"global ids in briefs naming no step (not required): {', '.join(self.unresolved)}")
        if self.later:
            lines.append(f"inserted in the library after that (not required): {', '.join(self.later)}")
        if self.undated:
            lines.append("in the library with no insertion time, so not dated before that (not required): "
                         + ", ".join(self.undated))
        if self.after:
            lines.append("citing the run's own steps, so written after it began (not required): "
                         + ", ".join(self.after))
        by = (" inserted by then" if self.later or self.undated
              else " written before it began" if self.after else "")
        if self.cited and not self.probes:
            lines.append("reuse: nothing to test: its Fix asks nothing (no problem or criterion holding a "
                         "word a search reads)")
            return "\n".join(lines)
        recall = f"n/a (it cites no library step{by})" if self.recall is None else f"{self.recall:.2f}"
        found = len(self.cited) - len(self.missed)
        lines.append(f"reuse: {self.verdict}: recall {found}/{len(self.cited)} = {recall} within "
                     f"{self.pages} pages (threshold {self.threshold:.2f})"
                     + (f"; missed: {', '.join(self.missed)}" if self.missed else ""))
        return "\n".join(lines)


@dataclass
class Citations:
    """Other runs' steps a run cites, each with how (``parent of A3-2``, ``A3.md:6 input``)."""

    cited: dict[str, list[str]] = field(default_factory=dict)
    not_cited: dict[str, None] = field(default_factory=dict)   # in order: a set, read in constant time
    unresolved: dict[str, None] = field(default_factory=dict)

    def add(self, gid: str, how: str) -> None:
        self.cited.setdefault(gid, []).append(how)


def citations(memory: Retriever, run: str) -> Citations:
    """The other runs' steps ``run`` cites: parents in tree.json, and global ids in its briefs, each
    line read with its label (``Inputs …``, ``Dead ends …``/``Do not retry …``; ``not an input`` or
    ``left out`` cites nothing). A list item (``- …``), or a line after one ending in ``,`` ``;`` or
    ``:``, keeps the label before it."""
    ws = memory.workspace
    out = Citations()
    for step in ws.tree(run).steps:
        for parent in step.parents:
            if "/" in parent and split_gid(parent)[0] != run and not _names_source(ws, parent):
                out.add(parent, f"parent of {step.id}")
    library = ws.library_runs()

    def known(other: str | None) -> bool:  # (asked of each id a brief names: not every run listed each time)
        return bool(other) and other != run and (other in library or ws.holds(other))

    folder = ws.run_dir(run) / "briefs"
    for path in sorted(folder.iterdir()) if folder.is_dir() else ():
        if path.is_file():
            _read_brief(memory, path, known, out)
    out.not_cited = {gid: None for gid in out.not_cited if gid not in out.cited}
    return out


def _names_source(ws, gid: str) -> bool:
    """Whether ``gid`` names a source of its run (a paper or a page: never a library step, so
    never a miss of the reuse test), as `mem check` reads a parent."""
    other, local = split_gid(gid)
    if not ws.holds(other):
        return False
    try:
        return any(source.id == local for source in ws.tree(other).sources)
    except InputError:  # an unreadable run: `mem check` says why; its steps are misses as before
        return False


def _outside_brackets(line: str) -> str:
    """``line`` without what it says in parentheses, nested ones too: a remark there ("the case
    m = 1 is left out") qualifies a statement, and says nothing of whether an id is an input."""
    while (shorter := _BRACKETED.sub(" ", line)) != line:
        line = shorter
    return line


def _read_brief(memory: Retriever, path: Path, known: Callable[[str], bool], out: Citations) -> None:
    label, previous = "", ""
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        stripped = line.strip()
        said = _outside_brackets(line)  # "(the case m = 1 is left out)" says nothing of the ids
        if not (stripped.startswith(("-", "*", "•")) or previous.endswith((",", ";", ":"))):
            label = ("not" if _NOT_CITED.search(said) else "dead end" if _DEAD_END.search(line)
                     else "input" if _INPUT.search(line) else "")
        here = "not" if _NOT_CITED.search(said) else label  # an item under a heading saying so itself
        previous = stripped
        for word in mentions(line):
            forms = [form for form in id_candidates(word) if known(split_gid(form)[0])]
            ref = next((form for form in forms if step_of(memory, form) is not None), None)
            if ref is None:
                if forms:
                    out.unresolved.setdefault(forms[-1])
            elif here == "not":
                out.not_cited.setdefault(ref)
            else:
                out.add(ref, f"{path.name}:{number} {here or 'named'}")


def reuse(memory: Retriever, run: str, pages: int = PAGES, threshold: float = 1.0, *,
          runs_before: bool = False, until: datetime | None = None, cut: Until | None = None) -> Reuse:
    """The reuse test for ``run``: the library steps it cites come back for its Fix within ``pages``.

    The Fix is asked as memory stood before the run began (``ArchiveQuery.hide_run``): its own
    steps, and what cites them, neither vote nor count. With ``runs_before``, only the library
    entries inserted before the run started are required (``derived.inserted_before``, as the
    per-step test counts them), and only they are candidates; with ``until`` (and ``cut``, the
    search's form of it), only those inserted by then, and the search answers as memory stood
    then. Cited entries inserted later are listed, not required, as are those with no insertion
    time when a cut is asked (nothing dates them before it)."""
    check_pages(pages)
    ws = memory.workspace
    start = run_start(ws, run) if runs_before else None
    fix = ws.tree(run).fix
    setting = fix.setting.strip() or None
    asked = [(origin, searched_part(text.strip())) for origin, text in (("problem", fix.problem),
                                                                        ("criterion", fix.criterion))]
    probes = [Probe(ARCHIVE, text, f"Fix {origin}") for origin, text in asked if asks_something(text)]
    size = memory.config.search.page_size
    found = citations(memory, run)
    results = [(probe, memory.archive_hits(ArchiveQuery(probe.text, setting, library=True, exclude_run=run,
                                                         hide_run=run, until=cut, library_before=start)))
               for probe in probes] if found.cited else []  # (a run citing nothing: nothing to look for)
    library = ws.library_index()
    written_after = memory.written_after(run)  # what the Fix cannot see: not required of it
    targets, later, after, undated = [], [], [], []
    for gid, how in found.cited.items():
        entry = library.get(gid)
        if entry is not None and not inserted_before(entry.inserted, start, until):
            (later if entry.inserted else undated).append(gid)
            continue
        if key(gid) in written_after:
            after.append(gid)
            continue
        step = step_of(memory, gid) or entry  # as its tree has it, as M3 and the search judge it
        match = ws.ontology.match(setting, step.setting) if setting and step is not None else None
        why = ""
        if entry is None:
            why = "not in the library (solve/library.jsonl)" + ("" if step else "; no such step")
        elif step is not None:
            why = left_out(ws.ontology, setting, step, "the Fix setting")
        finding = best([locate(hits, lambda hit: hit.id == gid, probe, size)
                        for probe, hits in results])
        targets.append(Target(gid, step.kind if step else "?", step.status if step else "?",
                              step.setting if step else "", tuple(how), finding, pages, why, match,
                              unfound="returned by no query: neither the Fix problem nor its criterion "
                                      "finds it"))
    when = ([f"the run's start (before {start.isoformat()}, the end of the instant its first event is "
             "written to)"] if start else [])
    when += [until.isoformat()] if until else []
    return Reuse(run, fix.setting, tuple(probes), tuple(targets), tuple(found.not_cited),
                 tuple(found.unresolved), pages, threshold, tuple(later), " and ".join(when),
                 runs_before and start is None, tuple(after), tuple(undated),
                 tuple(note.message for note in memory.library_written()))


def left_out(ontology, setting: str | None, step, whose: str, rule: str = "M3") -> str:
    """Why the search leaves ``step`` out for a query in ``setting`` (its setting or one of its
    hypotheses is incompatible: ``rule`` names the rule that says so), or "" when it does not."""
    if not setting:
        return ""
    match, unmet = ontology.match(setting, step.setting), ontology.unmet_hypotheses(setting, step.hyp)
    if match != INCOMPATIBLE and not unmet:
        return ""
    what = f"setting {step.setting!r}" if match == INCOMPATIBLE else f"hypothesis {unmet[0]!r}"
    return f"its {what} is incompatible with {whose} {setting!r} ({rule}): the search leaves it out"


def per_step_left_out(ws, step, query_step: str, setting: str | None) -> str:
    """Why a step's own search (in its ``setting``) leaves the library ``step`` it cites out: M3,
    which `mem check` reports, where its run's Fix setting leaves it out too; else the citing step
    claims a wider setting than this input gives, which M3 (judged by the Fix setting) allows. It
    said M3 either way, so `eval reuse` and `check` disagreed on one citation."""
    why = left_out(ws.ontology, setting, step, "the step's setting")
    if not why:
        return ""
    fix = ws.tree(split_gid(query_step)[0]).fix.setting.strip() or None
    if left_out(ws.ontology, fix, step, "the Fix setting"):
        return why
    return left_out(ws.ontology, setting, step, "the step's setting", f"not M3: its run's Fix setting "
                    f"{fix!r} allows it; the step claims more than this input gives")


def overall(fixes: Sequence[Reuse]) -> tuple[str, str]:
    """The verdict of the Fix tests of several runs, and its line: FAIL when one fails; PASS when
    the others pass and one at least had something to test (a run citing no library step, such as
    the one the library came from, fails none of the others); else nothing to test."""
    counts = {name: sum(f.verdict == name for f in fixes) for name in ("PASS", "FAIL", "nothing to test")}
    verdict = "FAIL" if counts["FAIL"] else "PASS" if counts["PASS"] else "nothing to test"
    listed = ", ".join(f"{count} {name}" for name, count in counts.items() if count)
    return verdict, f"reuse: {verdict}: {plural(len(fixes), 'run')} ({listed})"


# ------------------------------------------------------------------------------------- per step

@dataclass(frozen=True)
class Missed:
    """A library step a query step cites that its search did not put within the pages read."""

    query_step: str
    gid: str
    rank: int | None            # its rank in the whole result list (None: not in it)
    why: str = ""               # why the search leaves it out (M3), when it does


@dataclass(frozen=True)
class StepReuse:
    """The reuse test at the grain of steps: the paging evaluation of the derived queries (library
    only, leave-one-out), and its verdict on the default strategy."""

    runs: tuple[str, ...]
    evaluation: Any                 # eval.paging_eval.PagingEvaluation (None: nothing to test)
    strategy: str                   # the strategy the verdict reads
    pages: int
    threshold: float
    steps: int                      # steps of the runs
    queries: int                    # of them, steps citing a (counting) library step
    judgments: int
    missed: tuple[Missed, ...] = ()
    no_start: tuple[str, ...] = ()  # runs_before: runs without events (all their citations required)

    @property
    def recall(self) -> float | None:
        """Mean recall after ``pages`` pages, over the queries (None: nothing to test)."""
        if self.evaluation is None:
            return None
        return self.evaluation.strategies[self.strategy].recall_by_page[self.pages - 1]

    @property
    def verdict(self) -> str:
        if self.recall is None:
            return "nothing to test"
        return "PASS" if self.recall >= self.threshold - 1e-12 else "FAIL"

    def as_dict(self) -> dict[str, Any]:
        return {"test": "reuse-per-step", "runs": list(self.runs), "verdict": self.verdict,
                "pass": self.verdict == "PASS", "strategy": self.strategy, "pages": self.pages,
                "threshold": self.threshold, "recall": self.recall, "steps": self.steps,
                "queries": self.queries, "judgments": self.judgments,
                "missed": [{"step": m.query_step, "id": m.gid, "rank": m.rank, "why": m.why or None}
                           for m in self.missed],
                "start_unknown": list(self.no_start),
                "evaluation": self.evaluation.to_json() if self.evaluation else None}

    def text(self, limit: int = 20) -> str:
        lines = []
        if self.evaluation is not None:
            from mem_retrieval.eval.paging_report import table_text

            lines += [table_text(self.evaluation), ""]
            if self.missed:
                lines.append(f"not within {self.pages} pages ({self.strategy}; rank in the whole list):")
                lines += [f"  {m.query_step} -> {m.gid}: " + (f"rank {m.rank}" if m.rank else "not found")
                          + (f" ({m.why})" if m.why else "") for m in self.missed[:limit]]
                if len(self.missed) > limit:
                    lines.append(f"  … and {len(self.missed) - limit} more (--json lists all)")
        lines += [NO_START.format(run=run) for run in self.no_start]
        recall = "n/a" if self.recall is None else f"{self.recall:.3f}"
        lines.append(f"reuse per step: {self.verdict}: {self.queries} of {self.steps} steps cite the "
                     f"library ({self.judgments} citations); mean recall within {self.pages} pages "
                     f"= {recall} ({self.strategy}; threshold {self.threshold:.2f})")
        return "\n".join(lines)


def reuse_per_step(retriever: Retriever, derived, runs: Sequence[str], strategies: Sequence[str],
                   default: str, pages: int, threshold: float, max_pages: int = 10,
                   until=None, progress: bool = False) -> StepReuse:
    """Every derived query (``eval.derived``) through the paging evaluator, over the library only."""
    from mem_retrieval.eval.paging_eval import evaluate_paging, search_depth
    from mem_retrieval.eval.ranker import make_ranker

    check_pages(pages)
    judgments = sum(len(docs) for docs in derived.qrels.values())
    no_start = tuple(run for run, start in derived.starts.items() if start is None)
    if not derived.queries:
        return StepReuse(tuple(runs), None, default, pages, threshold, derived.steps, 0, 0, (), no_start)
    config = retriever.config.search
    ranker = make_ranker(retriever, library=True, until=until, starts=derived.starts)
    names = list(dict.fromkeys([default, *strategies]))
    evaluation = evaluate_paging(ranker, derived.queries, derived.qrels, strategies=names,
                                 max_pages=max(max_pages, pages), page_size=config.page_size,
                                 hint=Hint.of(config), default=default, progress=progress,
                                 depth=search_depth(config.pool, max(max_pages, pages), config.page_size))
    missed = []
    ranked_runs = evaluation.runs[default]
    for query in derived.queries:
        ranked = list(ranked_runs.get(query.qid, {}))
        for gid in derived.qrels[query.qid]:
            rank = ranked.index(gid) + 1 if gid in ranked else None
            if rank is None or rank > pages * config.page_size:
                step = None if rank else step_of(retriever, gid)
                why = per_step_left_out(retriever.workspace, step, query.step, query.setting) if step else ""
                missed.append(Missed(query.step, gid, rank, why))
    return StepReuse(tuple(runs), evaluation, default, pages, threshold, derived.steps,
                     len(derived.queries), judgments, tuple(missed), no_start)
