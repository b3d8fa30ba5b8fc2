"""Evaluation files in the community's formats (SPEC §10): queries JSONL, TREC qrels, TREC runs.

A run is ``{qid: {doc_id: score}}`` and qrels ``{qid: {doc_id: grade}}``, as BEIR, ranx and
ir_measures take them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mem_retrieval.records.errors import BadInput, InputError
from mem_retrieval.records.ids import canonical, plain, ref_problem, typed_ref, typed_run
from mem_retrieval.records.parse import parse_json, read_text, text_lines
from mem_retrieval.records.validate import Fields
from mem_retrieval.retrieval.query import check_text

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
    is a global id."""
    file = str(path)
    queries: list[Query] = []
    seen: set[str] = set()
    for number, line in enumerate(text_lines(read_text(Path(path))), start=1):  # at line feeds alone: JSON
        if not line.strip():  # holds U+2028 and U+0085 raw in a string
            continue
        f = Fields(parse_json(line, file, number), file, number, "", QUERY_FIELDS)
        qid = f.str("qid", required=True, nonempty=True)
        setting, run, step = f.opt_str("setting"), f.opt_str("run"), f.opt_str("step")
        # a query naming its step may be empty: a statement made only of its links, which leave-one-out
        # hides (`eval reuse --write-queries` writes it so), asks nothing and finds nothing
        text = f.str("query", required=True, nonempty=not step)
        run = typed_run(run) if run and run.strip() else None  # blank, as empty: asked from no run
        step = step and typed_ref(step)  # a look-alike dash: as a search reads it
        try:
            if plain(text).strip() or not step:  # (characters that draw nothing are empty too)
                check_text(text)  # what a search would refuse, refused here at its line
        except BadInput as err:
            f.fail("query", err.message)
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


def read_qrels(path: Path) -> Qrels:
    """TREC qrels: ``qid 0 doc_id grade`` a line; one grade per query and document."""
    file = str(path)
    qrels: Qrels = {}
    at: dict[tuple[str, str], int] = {}
    for number, qid, doc, grade in _qrels_lines(path):
        doc = canonical(doc)  # an id as the records hold it: composed, however the file writes it
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
    return qrels


def _qrels_lines(path: Path):
    """Each judgment line of a qrels file: (line number, qid, doc id as written, grade as written);
    lines split at line feeds alone, as every record file is read (``records.parse.text_lines``)."""
    for number, line in enumerate(text_lines(read_text(Path(path))), start=1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 4:
            raise InputError(str(path), number, None,
                             f"expected 'qid 0 doc_id grade', got {len(parts)} fields")
        yield number, parts[0], parts[2], parts[3]


def not_composed(path: Path) -> list[str]:
    """The doc ids of a qrels file (read by ``read_qrels``) not written composed (NFC): the
    evaluation reads them composed, as the records hold them, and a TREC run (``--trec-out``)
    writes them so, while trec_eval compares the bytes."""
    return list(dict.fromkeys(doc for _, _, doc, _ in _qrels_lines(path) if canonical(doc) != doc))


def judged(qrels: Qrels) -> Qrels:
    """The qrels of the judged queries only (at least one grade > 0)."""
    return {qid: dict(docs) for qid, docs in qrels.items() if any(grade > 0 for grade in docs.values())}


def judged_queries(queries: Sequence[Query], qrels: Qrels, qrels_file: str | Path = "qrels") -> list[Query]:
    """The queries that have relevance judgments, in file order. InputError when the qrels judge a
    query the queries file lacks."""
    known = {query.qid for query in queries}
    gold = judged(qrels)
    for qid in gold:
        if qid not in known:
            raise InputError(str(qrels_file), _line_of(qrels_file, qid), "qid",
                             f"{qid!r} is judged but not in the queries file")
    return [query for query in queries if query.qid in gold]


def _line_of(path: str | Path, qid: str) -> int | None:
    try:
        for number, line in enumerate(text_lines(read_text(Path(path))), start=1):  # as read: no BOM
            if line.split()[:1] == [qid]:
                return number
    except (OSError, InputError):
        return None
    return None


def write_trec_run(path: Path, runs: dict[str, Run]) -> None:
    """Rankings as TREC run lines ``qid Q0 doc rank score tag``, one tag per strategy."""
    with Path(path).open("w", encoding="utf-8") as out:
        for tag, run in runs.items():
            for qid in sorted(run):
                ranked = sorted(run[qid].items(), key=lambda item: (-item[1], item[0]))
                for rank, (doc, score) in enumerate(ranked, start=1):
                    out.write(f"{qid} Q0 {doc} {rank} {score:.6f} {tag}\n")
