"""Judged queries a workspace holds already: every step that cites library steps of other runs is a
query (its statement, in its setting) whose relevant results are those library steps (a run cannot
reuse itself: its own steps are never candidates, so never judged). This is the reuse
test at the grain where an agent searches (each new step looks for its inputs), and it needs no
hand-written judgments.

Each query names its ``step`` (leave-one-out, SPEC §10: the search answers as memory stood before
the step was written, without it, its library copy, its links and the work written after it) and
its ``run`` (a run cannot reuse itself: its own steps are no candidates). With ``runs_before``,
only library entries inserted before the run started count as reusable, the way a real run meets
the library; with ``until``, only entries inserted by then, and only steps written by then
(``records.workspace.first_written``) are asked."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from mem_retrieval.eval.judgments import Qrels, Query
from mem_retrieval.records.parse import instant_end, parse_time
from mem_retrieval.records.workspace import Workspace, by_run
from mem_retrieval.retrieval.query import searched_part


@dataclass(frozen=True)
class Derived:
    """Queries and their judgments, and how many steps were looked at."""

    queries: list[Query]
    qrels: Qrels
    steps: int                      # steps of the chosen runs (written by ``until``)
    starts: dict[str, datetime | None] = field(default_factory=dict)  # runs_before: each run's start


def run_start(workspace: Workspace, run: str) -> datetime | None:
    """When a run started, as the time a library entry must be inserted before to count as there
    when it began: the end of the instant its first event's time is written to (None without
    events). Written to the second, as the SPEC writes times, a run's start covers that second: an
    entry a Record inserted in it (to the millisecond) counts as before it, as it most often is;
    their order within it is not written."""
    for event in workspace.events(run):
        return instant_end(event.timestamp, event.time)
    return None


def derive(workspace: Workspace, runs: Sequence[str], *, runs_before: bool = False,
           until: datetime | None = None) -> Derived:
    """One query per step of ``runs`` citing at least one (counting) library step."""
    entries = workspace.library()
    library, of_run = {entry.gid: entry for entry in entries}, by_run(entries)
    queries: list[Query] = []
    qrels: Qrels = {}
    steps = 0
    starts: dict[str, datetime | None] = {}
    for run in runs:
        tree = workspace.tree(run)
        start = run_start(workspace, run) if runs_before else None
        if runs_before:
            starts[run] = start
        written = _written_by(workspace, run, of_run.get(run, []), until) if until is not None else None
        sources = frozenset(source.id for source in tree.sources)
        for step in tree.steps:
            if written is not None and step.id not in written:
                continue
            steps += 1
            parents = step.cited(sources)
            gold = [gid for gid in dict.fromkeys(parents) if gid in library
                    and library[gid].run != run  # a run cannot reuse itself
                    and inserted_before(library[gid].inserted, start, until)]
            if not gold:
                continue
            qid = f"q-{step.gid}"
            text = without_links(step.statement, step_links(workspace, step, sources))
            queries.append(Query(qid, searched_part(text),
                                 step.setting or tree.fix.setting or None, run, step.gid))
            qrels[qid] = {gid: 1 for gid in gold}
    return Derived(queries, qrels, steps, starts)


def step_links(workspace: Workspace, step, sources: frozenset[str]) -> list[str]:
    """The global ids of the steps ``step`` links to (SPEC §10: its parents and its proof): its
    parents less its run's ``sources``, then the steps its proof names (``records.writes.
    named_ids``, as a checkpoint names them)."""
    from mem_retrieval.records.writes import named_ids

    named = named_ids(workspace, step.run, step.proof) if step.proof else []
    proof = [ref if "/" in ref else f"{step.run}/{ref}" for ref in named]
    sources_named = {f"{step.run}/{source}" for source in sources}  # a source is no step, however named
    return list(dict.fromkeys([*step.cited(sources), *(gid for gid in proof if gid not in sources_named)]))


def without_links(statement: str, parents: Sequence[str]) -> str:
    """The statement less the words the id lookup would read as its own parents (global ids
    ``parents``), globally or by their step id alone (``by satake/A2-4, A4-3``, ``\\Cref{A2-4}``;
    ``retrieval.query.without_ids``): written once the inputs were found, they are the step's
    links, which leave-one-out hides; the lookup would answer the query with its own judgments."""
    from mem_retrieval.records.ids import split_gid
    from mem_retrieval.retrieval.query import without_ids

    return without_ids(statement, set(parents) | {split_gid(gid)[1] for gid in parents})


def inserted_before(inserted: str, start: datetime | None, until: datetime | None) -> bool:
    """Whether a library entry inserted at ``inserted`` counts: before the run's start and the
    cut, when they are given (an entry without a time counts only when neither is)."""
    if start is None and until is None:
        return True
    if not inserted:
        return False
    stamp = parse_time(inserted, "solve/library.jsonl", None, "inserted")
    return (start is None or stamp < start) and (until is None or stamp <= until)


def _written_by(workspace: Workspace, run: str, library: list, until: datetime) -> set[str]:
    """The step ids of ``run`` written by ``until`` (``first_written``: first named, or inserted
    in ``library`` when no event names it, at or before it)."""
    from mem_retrieval.records.workspace import first_written

    return {step for step, (_, stamp) in first_written(workspace.events(run), run, library).items()
            if stamp <= until}


def written_files(folder, name: str = "reuse") -> list:
    """The two files ``write`` writes in ``folder``."""
    from pathlib import Path

    return [Path(folder) / f"{name}.queries.jsonl", Path(folder) / f"{name}.qrels"]


def write(derived: Derived, folder, name: str = "reuse") -> list:
    """``FOLDER/NAME.queries.jsonl`` and ``FOLDER/NAME.qrels``: ordinary SPEC §10 files."""
    import json
    from pathlib import Path

    from mem_retrieval.records.files import write_atomic

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    queries, qrels = written_files(folder, name)
    write_atomic(queries, "".join(json.dumps({k: v for k, v in (("qid", q.qid), ("query", q.query),
                                                                 ("setting", q.setting), ("run", q.run),
                                                                 ("step", q.step)) if v is not None},
                                             ensure_ascii=False) + "\n" for q in derived.queries))
    write_atomic(qrels, "".join(f"{qid} 0 {gid} {grade}\n" for qid, docs in derived.qrels.items()
                                for gid, grade in docs.items()))
    return [queries, qrels]
