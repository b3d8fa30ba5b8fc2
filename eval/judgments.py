"""Evaluation files in the community's formats (SPEC §10): queries JSONL, TREC qrels, TREC runs.

A run is ``{qid: {doc_id: score}}`` and qrels ``{qid: {doc_id: grade}}``, as BEIR, ranx and
ir_measures take them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mem_retrieval.records.errors import BadInput, InputError
from mem_retrieval.records.ids import canonical, plain, ref_problem, slug_run, typed_ref
from mem_retrieval.records.parse import named_lines, parse_json, same_pipe
from mem_retrieval.records.validate import Fields
from mem_retrieval.retrieval.query import check_setting, check_text

Run = dict[str, dict[str, float]]
Qrels = dict[str, dict[str, int]]


@dataclass(frozen=True)
class Query:
    qid: str
    query: str
    setting: str | None = None
    run: str | None = None
    step: str | None = None     # the step the query is (SPEC §10): hidden, leave-one-out

    @property
    def in_run(self) -> bool:
        """Asked from a run: its ``run`` is the search's context (``ranker.archive_query``), so
        the graph strategies rank it by ``[fusion.<strategy>_in_run]``."""
        return self.run is not None


QUERY_FIELDS = ("qid", "query", "setting", "run", "step")


def read_queries(path: Path) -> list[Query]:
    """Queries JSONL: ``{"qid", "query", "setting"?, "run"?, "step"?}`` a line; qids unique; ``step``
    is a global id. Read once: the caller names the file, which may be a pipe (`<(…)`)."""
    file = str(path)
    queries: list[Query] = []
    seen: set[str] = set()
    for number, line in named_lines(path):  # at line feeds alone: a JSON string holds U+2028 raw
        if not line.strip():
            continue
        f = Fields(parse_json(line, file, number), file, number, "", QUERY_FIELDS)
        qid = f.str("qid", required=True, nonempty=True)
        setting, run, step = f.opt_str("setting"), f.opt_str("run"), f.opt_str("step")
        # a query naming its step may be empty: a statement made only of its links, which leave-one-out
        # hides (`eval reuse --write-queries` writes it so), asks nothing and finds nothing
        text = f.str("query", required=True, nonempty=not step)
        try:  # blank, as empty: asked from no run; no slug, refused here as a search would refuse it
            run = slug_run(run, "run") if run and run.strip() else None
        except BadInput as err:
            f.fail("run", err.message)
        step = step and typed_ref(step)  # a look-alike dash: as a search reads it
        try:
            if plain(text).strip() or not step:  # (characters that draw nothing are empty too)
                check_text(text)  # what a search would refuse, refused here at its line
        except BadInput as err:
            f.fail("query", err.message)
        try:
            check_setting(setting or "")
        except BadInput as err:
            f.fail("setting", err.message)
        if step and (ref_problem(step) or "/" not in step):
            f.fail("step", f"{step!r} is not a global id (run/step)")
        if any(c.isspace() for c in qid):  # a qrels line and a TREC run are split at white space
            f.fail("qid", f"{qid!r} holds white space: no qrels line could judge it")
        if qid in seen:
            f.fail("qid", f"duplicate qid {qid!r}")
        seen.add(qid)
        queries.append(Query(qid, text, setting or None, run or None, canonical(step) if step else None))
    return queries


_GRADE = re.compile(r"[-+]?[0-9]+")  # as trec_eval's atoi and ir_measures' int read a grade
GRADES = (-(2**31), 2**31 - 1)


@dataclass(frozen=True)
class Judgments:
    """A qrels file as read, once (a pipe, `--qrels <(…)`, can be read only once): its grades, the
    line where each query is first judged, and the judged ids it writes otherwise than composed."""
    qrels: Qrels
    lines: dict[str, int]
    loose: list[str]


def apart(queries: Path | str, qrels: Path | str) -> None:
    """InputError when the queries and the qrels name one pipe (`/dev/stdin` twice): read once, it
    gave the queries all and the qrels nothing ("no query … has a relevant judgment")."""
    if same_pipe(queries, qrels):
        raise InputError(str(qrels), None, None, f"is the pipe the queries are read from ({queries}): a pipe "
                                                 "is read once, so give each file its own")


def read_judgments(path: Path) -> Judgments:
    """TREC qrels: ``qid 0 doc_id grade`` a line; one grade per query and document. Lines split at
    line feeds alone, as every record file is read (``records.parse.named_lines``). ``loose``: the
    doc ids not written composed (NFC): the evaluation reads them composed, as the records hold
    them, and a TREC run (``--trec-out``) writes them so, while trec_eval compares the bytes."""
    file = str(path)
    qrels: Qrels = {}
    at: dict[tuple[str, str], int] = {}
    lines: dict[str, int] = {}
    loose: dict[str, None] = {}
    for number, line in named_lines(path):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 4:
            raise InputError(file, number, None, f"expected 'qid 0 doc_id grade', got {len(parts)} fields")
        qid, written, grade = parts[0], parts[2], parts[3]
        doc = canonical(written)  # an id as the records hold it: composed, however the file writes it
        if doc != written:
            loose.setdefault(written)
        if not _GRADE.fullmatch(grade):  # int() takes '1_0' and other scripts' digits too
            raise InputError(file, number, "grade", f"{grade!r} is not an integer")
        value = int(grade)
        if not GRADES[0] <= value <= GRADES[1]:  # trec_eval's grades are C ints: others wrap
            raise InputError(file, number, "grade",
                             f"{grade} is out of range ({GRADES[0]:,} to {GRADES[1]:,})")
        docs = qrels.setdefault(qid, {})
        if docs.get(doc, value) != value:  # the same judgment twice is harmless; two are not
            raise InputError(file, number, "grade", f"{doc} is judged {docs[doc]} for {qid} at line "
                             f"{at[qid, doc]} and {value} here")
        docs[doc] = value
        at.setdefault((qid, doc), number)
        lines.setdefault(qid, number)
    return Judgments(qrels, lines, list(loose))


def read_qrels(path: Path) -> Qrels:
    """The grades of a TREC qrels file (``read_judgments``)."""
    return read_judgments(path).qrels


def judged(qrels: Qrels) -> Qrels:
    """The qrels of the judged queries only (at least one grade > 0)."""
    return {qid: dict(docs) for qid, docs in qrels.items() if any(grade > 0 for grade in docs.values())}


def judged_queries(queries: Sequence[Query], qrels: Qrels, qrels_file: str | Path = "qrels",
                   lines: Mapping[str, int] | None = None) -> list[Query]:
    """The queries that have relevance judgments, in file order. InputError when the qrels judge a
    query the queries file lacks, at its line in ``lines`` (``Judgments.lines``) where given."""
    known = {query.qid for query in queries}
    gold = judged(qrels)
    for qid in gold:
        if qid not in known:
            raise InputError(str(qrels_file), (lines or {}).get(qid), "qid",
                             f"{qid!r} is judged but not in the queries file")
    return [query for query in queries if query.qid in gold]


def write_trec_run(path: Path, runs: dict[str, Run]) -> None:
    """Rankings as TREC run lines ``qid Q0 doc rank score tag``, one tag per strategy."""
    with Path(path).open("w", encoding="utf-8") as out:
        for tag, run in runs.items():
            for qid in sorted(run):
                ranked = sorted(run[qid].items(), key=lambda item: (-item[1], item[0]))
                for rank, (doc, score) in enumerate(ranked, start=1):
                    out.write(f"{qid} Q0 {doc} {rank} {score:.6f} {tag}\n")
