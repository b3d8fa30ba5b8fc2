"""What `mem eval frontier` reads: a JSON file of queries, events and spans, or a workspace's library
with judged queries; and the memory to score (ids given, the ids a run's W names, or the library)."""

from __future__ import annotations

import json
from pathlib import Path

from mem_retrieval.eval.frontier import Problem
from mem_retrieval.eval.judgments import apart, judged_queries, read_judgments, read_queries
from mem_retrieval.records.errors import InputError, Refused, BadInput
from mem_retrieval.records.parse import parse_json, read_text
from mem_retrieval.records.validate import Fields
from mem_retrieval.records.workspace import Workspace

TOP_FIELDS = {"queries", "events", "spans"}


def read_problem(path: Path) -> Problem:
    """The JSON input of the frontier (issue 5); one InputError naming file, line and field."""
    file = str(path)
    text = read_text(Path(path))
    top = Fields(parse_json(text, file), file, None, "", TOP_FIELDS)
    for name in sorted(TOP_FIELDS):
        if not isinstance(top.obj.get(name), list):
            top.fail(name, "missing" if name not in top.obj else "must be a list")
    lines = _element_lines(text)

    queries: list[tuple[str, float]] = []
    qids: set[str] = set()
    for i, raw in enumerate(top.obj["queries"]):
        f = Fields(raw, file, lines.get(("queries", i)), f"queries[{i}].", {"qid", "text", "weight"})
        qid = _fresh_id(f, "qid", qids)
        f.str("text")
        queries.append((qid, f.number("weight", minimum=0.0, default=1.0)))
    if not queries:
        top.fail("queries", "is empty (nothing for a memory to answer)")
    if max(weight for _, weight in queries) <= 0:
        top.fail("queries", "every weight is 0 (they are normalised to sum 1)")

    events: list[tuple[str, bool]] = []
    event_ids: set[str] = set()
    for i, raw in enumerate(top.obj["events"]):
        f = Fields(raw, file, lines.get(("events", i)), f"events[{i}].", {"id", "text", "true"})
        eid = _fresh_id(f, "id", event_ids)
        if "," in eid or eid != eid.strip():  # `--memory a,b` splits at commas and strips each id
            f.fail("id", f"{eid!r} holds a comma or white space at an end: --memory could not name it")
        f.str("text")
        events.append((eid, f.bool("true", default=True)))

    spans: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    for i, raw in enumerate(top.obj["spans"]):
        f = Fields(raw, file, lines.get(("spans", i)), f"spans[{i}].", {"events", "item", "answers"})
        f.str("item")
        members = _known(f, "events", event_ids, "event")
        if not members:
            f.fail("events", "must list at least one event (the events generating the item)")
        spans.append((members, _known(f, "answers", qids, "query")))
    return Problem.build(queries, events, spans)


def _element_lines(text: str) -> dict[tuple[str, int], int]:
    """(top-level key, index) -> the line its array element starts on, read off the text."""
    decoder, lines = json.JSONDecoder(), {}
    counted = [0, 1]  # position, line there: counted forward only (big files stay linear)

    def line_at(pos: int) -> int:
        counted[1] += text.count("\n", counted[0], pos)
        counted[0] = pos
        return counted[1]

    def skip(pos: int, chars: str = " \t\r\n") -> int:
        while pos < len(text) and text[pos] in chars:
            pos += 1
        return pos

    try:
        pos = skip(text.index("{") + 1)
        while text[pos] == '"':
            key, pos = decoder.raw_decode(text, pos)
            pos = skip(skip(pos) + 1)  # past ':'
            if text[pos] == "[":
                pos, index = skip(pos + 1), 0
                while text[pos] != "]":
                    lines[(key, index)] = line_at(pos)
                    pos = skip(decoder.raw_decode(text, pos)[1], " \t\r\n,")
                    index += 1
                pos += 1
            else:
                pos = decoder.raw_decode(text, pos)[1]
            pos = skip(pos, " \t\r\n,")
    except (ValueError, IndexError):
        pass
    return lines


def _fresh_id(f: Fields, name: str, seen: set[str]) -> str:
    value = f.str(name, required=True)
    if not value.strip():
        f.fail(name, "must not be empty")
    if value in seen:
        f.fail(name, f"duplicate id {value!r}")
    seen.add(value)
    return value


def _known(f: Fields, name: str, known: set[str], what: str) -> tuple[str, ...]:
    if name not in f.obj:
        f.fail(name, "missing")
    values = f.str_list(name)
    for j, value in enumerate(values):
        if value not in known:
            f.fail(f"{name}[{j}]", f"{value!r} is not one of this file's {what} ids")
    return values


def problem_from_workspace(workspace: Workspace, queries_path: Path,
                           qrels_path: Path) -> tuple[Problem, list[str]]:
    """Each library step is an event, true when admissible (final status; passed the audit or was
    repaired); each step judged relevant (grade > 0) to a query answers it, alone. Weights uniform.
    Also the ids judged relevant that are no library entry (a bare step id, a step never admitted):
    they answer no memory, so the caller says so. InputError when the qrels judge a query the
    queries file lacks, as for `eval paging`."""
    library = workspace.library()
    if not library:
        raise InputError(str(workspace.library_path), None, None,
                         "no library steps (the events of the frontier)")
    apart(queries_path, qrels_path)
    queries = read_queries(queries_path)
    if not queries:
        raise InputError(str(queries_path), None, None, "no queries")
    judgments = read_judgments(qrels_path)
    qrels = judgments.qrels
    answers: dict[str, list[str]] = {}
    for query in judged_queries(queries, qrels, qrels_path, judgments.lines):
        for doc, grade in qrels[query.qid].items():
            if grade > 0:
                answers.setdefault(doc, []).append(query.qid)
    events = [(entry.gid, entry.admissible) for entry in library]
    spans = [((entry.gid,), tuple(answers[entry.gid])) for entry in library if entry.gid in answers]
    outside = sorted(set(answers) - {entry.gid for entry in library})
    return Problem.build([(query.qid, 1.0) for query in queries], events, spans), outside


def parse_memory(text: str, problem: Problem) -> list[int]:
    """``e3,e1,…`` as event indices; a bare step id stands for the one event ``run/<id>``."""
    at = problem.event_index()
    by_step: dict[str, list[int]] = {}
    for i, eid in enumerate(problem.event_ids):
        by_step.setdefault(eid.rpartition("/")[2], []).append(i)
    memory: list[int] = []
    for name in (part.strip() for part in text.split(",")):
        if not name:
            continue
        if name in at:
            memory.append(at[name])
        elif len(by_step.get(name, [])) == 1:
            memory.append(by_step[name][0])
        else:
            sample = ", ".join(problem.event_ids[:5]) + (", …" if len(problem.event_ids) > 5 else "")
            why = "names several events (give run/id)" if by_step.get(name) else f"is not an event ({sample})"
            raise BadInput(f"{name!r} {why}", param="memory")
    return list(dict.fromkeys(memory))


_EDGE = "()[]{}<>,;:.·←→\"'`*"


def ids_in_text(text: str, run: str | None, problem: Problem) -> list[int]:
    """Events named in free text (W's fields): a word that is an event id, or ``run/<word>``,
    first as written, then with punctuation around it stripped; in order of first mention."""
    at = problem.event_index()
    found: list[int] = []
    for word in text.split():
        for candidate in dict.fromkeys((word, word.strip(_EDGE), word.rstrip(_EDGE), word.lstrip(_EDGE))):
            hit = at.get(candidate)
            if hit is None and run is not None:
                hit = at.get(f"{run}/{candidate}")
            if hit is not None:
                found.append(hit)
                break
    return list(dict.fromkeys(found))


def memory_from(source: str, workspace: Workspace, problem: Problem) -> list[int]:
    """``library``: the library steps that are events; else a run: the events its core.md names."""
    if source == "library":
        if not workspace.library_path.is_file():  # not an empty memory: most likely the wrong folder
            raise Refused(f"library: there is no {workspace.library_path}", param="memory_from")
        at = problem.event_index()
        return [at[entry.gid] for entry in workspace.library() if entry.gid in at]
    run = workspace.check_runs([source])[0]
    core = workspace.core(run)
    if core is None:
        raise Refused(f"{run!r}: the run has no {workspace.core_path(run)}", param="memory_from")
    return ids_in_text("\n".join(value for _, value in core.fields), run, problem)
