"""Hostile query text and filter values: quotes, SQL, full-text-search syntax, 10,000 characters,
only punctuation, only an id. Each search returns hits or one clear line, and no text changes which
rows a filter selects: filters are built from integer keys and closed enums, never from user text."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import build_workspace, make_step
from mem_retrieval.cli.main import run as run_cli
from mem_retrieval.retrieval.query import ArchiveQuery, Filters

ROOT = Path(__file__).resolve().parent.parent

SQL = ["x' OR '1'='1", "alpha' --", "'; DROP TABLE steps; --", '" OR ""="', "1 OR 1=1",
       "alpha') OR ('1'='1", "%", "_", "alph%", "*", "ALPHA", "alpha ", " alpha", "alpha\\",
       "run_key = 0 OR TRUE", "NULL", "\\x00", "' UNION SELECT * FROM steps --"]
FTS = ["statement AND proof", "statement OR NOT proof", '"statement of a2"', "stat*", "statement~2",
       "(statement OR proof) AND NOT a1", "+statement -proof", "statement^10", "tokens:statement",
       "NEAR(statement proof)", "{!lucene}statement", "statement AND", "(((", '"', "'", "AND OR NOT"]
SHAPES = ["!!!", "...", "—", "()[]{}", "'\"`", "$$\\\\", "%_%", ";;", "\u200ba", "‮a1", "😀",
          "a" * 10_000, "statement " * 1_000, " ".join(f"w{i}" for i in range(1_700)),
          ("GL2m/Sp2m " * 1_000)[:10_000],
          "\\ud800", "H^1 \\udc00-x", "\\ud835\\udd3d_q",  # escapes, as an output in ASCII writes them
          "\\ud83d\\ude42-1"]
IDS = ["a1", "alpha/a1", "A5-7", "alpha/zz9", "x/y/z", "../a1", "a1'--", "alpha/a1' OR '1'='1",
       "a1 a2 beta/b1", "d1"]
QUERIES = SQL + FTS + SHAPES + IDS


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile") / "ws"
    workspace = build_workspace(root)
    assert run_cli(["--workspace", str(root), "index", "--no-progress"], out=io.StringIO()) == 0
    return workspace


def mem(ws, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_cli(["--workspace", str(ws.root), *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def hits(ws, *argv: str) -> list[dict]:
    """Every hit of a search, all pages (JSON), or [] when there is none (exit 1)."""
    found, page = [], 1
    while True:
        code, out, err = mem(ws, "--json", *argv, "--page", str(page))
        assert code in (0, 1) and all(line.startswith("mem: ") for line in err.splitlines()), (
            code, out, err)  # notes only: why a list is empty, a setting the ontology lacks
        data = json.loads(out)
        if code == 1:
            assert page == 1 and data["total"] == 0 and data["hits"] == []
            return found
        found += data["hits"]
        if page == data["pages"]:
            assert len(found) == data["total"]
            return found
        page += 1


@pytest.mark.parametrize("query", QUERIES, ids=[f"{i}:{q[:30]}" for i, q in enumerate(QUERIES)])
def test_a_hostile_query_returns_hits_or_says_none(ws, query):
    for command in ("archive-search", "recall-search"):
        code, out, err = mem(ws, command, query)
        assert code in (0, 1), (code, err)
        # at most notes (an id-like word naming no step), one line each, control characters escaped
        assert all(line.startswith("mem: ") and line.isprintable() for line in err.splitlines()), err
        assert out.startswith("page 1 of ") if code == 0 else out in ("no hits\n", "no events\n")


@pytest.mark.parametrize("query", SQL + FTS + IDS[:3], ids=[q[:30] for q in SQL + FTS + IDS[:3]])
def test_query_text_never_widens_a_filter(ws, query):
    for found in (hits(ws, "archive-search", query, "--run", "beta", "--strategy", "bm25"),
                  hits(ws, "archive-search", query, "--run", "beta")):
        assert all(hit["run"] == "beta" for hit in found)
    for option, value in (("kind", "dead_end"), ("status", "open")):
        found = hits(ws, "archive-search", query, f"--{option}", value)
        assert all(hit[option] == value for hit in found)
    assert all(hit["run"] == "beta" for hit in hits(ws, "recall-search", query, "--run", "beta"))


def test_an_id_alone_is_found_by_name(ws):
    for query in ("a1", "alpha/a1"):
        first = hits(ws, "archive-search", query)[0]
        assert (first["id"], first["via"]) == ("alpha/a1", "id")
    assert [h["id"] for h in hits(ws, "archive-search", "a1 a2 beta/b1")][:3] == [
        "alpha/a1", "alpha/a2", "beta/b1"]


@pytest.mark.parametrize("value", SQL)
def test_a_hostile_run_matches_no_run(ws, value):
    """A run that is no slug can name no run (none of these is one): one line, exit 2, as `check`
    and `core-set` refuse it (a slug naming no run selects nothing: test_usability.py)."""
    for argv in (["archive-search", "statement", "--run", value],
                 ["recall-search", "five steps", "--run", value],
                 ["recall-search", "--id", "a1", "--run", value], ["archive-get", "a1", "--run", value],
                 ["archive-search", "statement", "--context-run", value]):
        code, out, err = mem(ws, *argv)
        said = f"mem: {argv[-2]} {value!r} is not a run slug ([a-z0-9][a-z0-9-]*)\n"
        assert (code, out, err) == (2, "", said)
    assert len(hits(ws, "archive-search", "statement", "--run", "alpha")) == 5  # the oracle


@pytest.mark.parametrize("value", SQL)
def test_filters_are_built_from_integer_keys_only(value):
    where = Filters(run=value, exclude_run=value).where("steps")
    assert re.fullmatch(r"\(run_key = -?\d+\) AND \(run_key != -?\d+\)", where), where
    events = Filters(run=value).where("events", ["array_has(sid_keys, 5)"])
    assert re.fullmatch(r"\(array_has\(sid_keys, 5\)\) AND \(run_key = -?\d+\)", events), events


@pytest.mark.parametrize("option", ["--kind", "--status"])
@pytest.mark.parametrize("value", SQL[:6] + ["Lemma", "lemma ", "proved;"])
def test_a_kind_or_status_outside_its_enum_is_refused(ws, option, value):
    code, out, err = mem(ws, "archive-search", "statement", option, value)
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert err.startswith(f"mem: {option} ") and "is not one of" in err


@pytest.mark.parametrize("value", SQL[:6])
def test_a_hostile_setting_is_only_an_unknown_setting(ws, value):
    """A setting is matched against the ontology, never put in a filter: SQL in it selects what
    any setting outside the ontology selects, each hit marked unknown."""
    plain = hits(ws, "archive-search", "statement", "--setting", "no such setting")
    hostile = hits(ws, "archive-search", "statement", "--setting", value)
    assert [h["id"] for h in hostile] == [h["id"] for h in plain] and len(plain) == 6
    assert {h["setting_match"] for h in hostile} == {"unknown"}
    assert len(hits(ws, "archive-search", "statement", "--setting", "C")) == 0  # the oracle:
    # a known setting incompatible with Qp leaves every (Qp) step out


@pytest.mark.parametrize("value, status, message", [
    ("a1' OR '1'='1", 2, "contains ' '"),
    ("alpha/a1 OR 1=1", 2, "contains ' '"),
    ("a1'--", 1, None),
    ("%", 1, None),
    ("x/y/z", 2, "step id"),
])
def test_a_hostile_id_names_nothing(ws, value, status, message):
    code, out, err = mem(ws, "recall-search", "--id", value)
    assert code == status
    if status == 2:
        assert out == "" and err.count("\n") == 1 and message in err
    else:  # no events, and a note that the id names no step (an oracle: the run has no such step)
        assert out == "no events\n" and err.startswith(f"mem: --id {value!r} names no step")
    assert len(hits(ws, "recall-search", "--id", "a1")) == 2  # the oracle: two events name a1


@pytest.mark.parametrize("value", SQL[:6] + ["2026-10-17T03:00:00Z' OR '1'='1", "1 OR 1=1", "-1"])
def test_a_hostile_until_is_refused_or_names_no_event(ws, value):
    code, out, err = mem(ws, "archive-search", "statement", "--run", "alpha", "--until", value)
    assert code in (1, 2) and out == "" and err.count("\n") == 1
    assert err.startswith("mem: --until ")


@pytest.mark.parametrize("value", ["³", "10²", "①"])
def test_digits_that_are_not_ascii_are_no_sequence_number(ws, value):
    code, out, err = mem(ws, "archive-search", "statement", "--run", "alpha", "--until", value)
    assert (code, out, err) == (1, "", f"mem: --until {value!r}: no such event in run 'alpha'\n")


@pytest.mark.parametrize("value", ["99999999999999999999", "9" * 5_000])
def test_a_sequence_number_past_any_log_is_memory_as_the_log_ends(ws, value):
    """The same hits as as of the log's last event (an int past 2^63 once reached the filter,
    and 5,000 digits int() itself, as tracebacks)."""
    last = str(len(ws.events_path("alpha").read_text().splitlines()))
    at_end = hits(ws, "archive-search", "statement", "--run", "alpha", "--until", last)
    assert at_end and hits(ws, "archive-search", "statement", "--run", "alpha", "--until", value) == at_end
    assert mem(ws, "recall-search", "--id", "a1", "--run", "alpha", "--until", value) \
        == mem(ws, "recall-search", "--id", "a1", "--run", "alpha", "--until", last)


@pytest.mark.parametrize("value", ["2026-13-45T00:00:00Z", "2026-10-17T99:00:00Z", "2026-10-17T03:00:00+25:00"])
def test_a_time_that_is_no_time_is_said_to_be_so(ws, value):
    code, out, err = mem(ws, "archive-search", "statement", "--until", value)
    assert (code, out) == (2, "") and err.startswith(f"mem: --until {value!r} is not a valid time (")
    assert err.count("\n") == 1


def test_a_query_past_the_length_limit_is_refused_before_it_is_searched(ws):
    """The full-text search holds ~16 KB per query word: 3 million words asked for 49 GB and
    aborted the process (killing an MCP server with it). The limit is checked before any search."""
    from mem_retrieval.memory import Memory
    from mem_retrieval.records.errors import BadInput
    from mem_retrieval.retrieval.query import MAX_QUERY_CHARS

    memory = Memory.open(ws.root)
    assert memory.archive_search("statement " * (MAX_QUERY_CHARS // 10)).total > 0  # at the limit
    for search in (memory.archive_search, memory.recall_search):
        with pytest.raises(BadInput, match=r"^query is 30,000,000 characters long; at most 16,384"):
            search("statement " * 3_000_000)
    code, out, err = mem(ws, "archive-search", "x" * (MAX_QUERY_CHARS + 1))
    assert (code, out) == (2, "") and err.startswith("mem: QUERY is 16,385 characters long")


@pytest.mark.parametrize("query", ["   ", "\u200b\u200b", " \ufeff\u2060 ", "\u00ad"])
def test_a_query_of_characters_that_draw_nothing_is_empty(ws, query):
    """A query of zero-width spaces, word joiners or soft hyphens alone was searched ("no hits",
    exit 1) where one of spaces is empty (exit 2): both draw nothing an agent could have meant (a
    recall search without text or id is asked for one)."""
    from mem_retrieval.memory import Memory
    from mem_retrieval.records.errors import BadInput

    assert mem(ws, "archive-search", query) == (2, "", "mem: QUERY is empty\n")
    assert mem(ws, "recall-search", query) == (2, "", "mem: give a query text or an id\n")  # as none
    with pytest.raises(BadInput, match="^query is empty$"):
        Memory.open(ws.root).archive_search(query)
    with pytest.raises(BadInput, match="^give a query text or an id$"):
        Memory.open(ws.root).recall_search(query)
    assert mem(ws, "archive-search", "\u200bstatement")[0] == 0  # beside a word, it is the word


def test_what_a_search_reads_of_a_long_record(monkeypatch):
    """``searched_part``: a record's text past the limit is cut at the last white space before it
    (the limit of 10 here, by hand), at the limit when it holds none; shorter text is whole."""
    from mem_retrieval.retrieval import query

    monkeypatch.setattr(query, "MAX_QUERY_CHARS", 10)
    assert query.searched_part("abcd efghij") == "abcd"                    # 11 characters
    assert query.searched_part("abc defg hijk") == "abc defg"              # cut at the space at 8
    assert query.searched_part("abcdefghij klm") == "abcdefghij"           # at the space at 10: 10 kept
    assert query.searched_part("abc defghij klm") == "abc"                 # the one at 11 would keep 11
    assert query.searched_part("abcdefghijklmnop") == "abcdefghij"         # no white space: at 10
    assert query.searched_part(" abcdefghijklmnop") == "abcdefghij"        # a leading one stripped
    assert query.searched_part("abcdefghij") == "abcdefghij"
    assert query.searched_part(" " * 20 + "abc def\n") == "abc def"  # its ends stripped first
    assert query.searched_part(" " * 20 + "abc defghij") == "abc"       # (a cut of spaces was empty)


def test_the_nearest_ids_of_many_are_read_among_their_sorted_neighbours(monkeypatch):
    """``NearestIds``: past ``WINDOW`` names, difflib reads the ``WINDOW`` nearest in sorted order
    (a typo keeps its first characters); within it, every name, as difflib alone would."""
    import difflib

    from mem_retrieval.records.ids import NearestIds

    names = [f"x{i:03d}-y" for i in range(100)]
    known = [f"r/{n}" for n in names]
    everything = difflib.get_close_matches("x05-y", names, n=3, cutoff=0.5)
    assert NearestIds(known).near("x05-y", 3) == [f"r/{n}" for n in everything]  # 100 < WINDOW
    monkeypatch.setattr(NearestIds, "WINDOW", 10)
    near = NearestIds(known).near("x0500-y", 3)  # sorted between x050-y and x051-y
    assert near[0] == "r/x050-y" and all(n in {f"r/x{i:03d}-y" for i in range(45, 56)} for n in near)



def test_the_nearest_ids_never_name_the_id_asked(example):
    """A source, or a step the filters leave out, is a known id: "no step this search may return
    has this id; nearest: satake-two-levels/d3, …" named the very id asked. An id spelled otherwise
    (case) is still offered, and a bare id's steps in every run (`--run` may be the mistake)."""
    from mem_retrieval.records.ids import NearestIds

    known = NearestIds(["r/d3", "r/d2", "s/d3", "s/A5-7"])
    assert sorted(known.near("r/d3")) == ["r/d2", "s/d3"] and known.near("d3")[:2] == ["r/d3", "s/d3"]
    assert known.near("a5-7") == ["s/A5-7"]
    (note,) = example.archive_search("satake-two-levels/d3").notes
    assert "; nearest: " in note.message and "nearest: satake-two-levels/d3" not in note.message


def test_the_nearest_ids_of_one_name_come_in_the_same_order_however_the_index_lies():
    """Ids of one step id in several runs came in the index's row order, which an upsert changes (a
    row moves to a new fragment): an incremental index and a fresh one named them in two orders, and
    the list, cut at 5, could name other ids."""
    from mem_retrieval.records.ids import NearestIds

    known = ["s/A4-2", "r/A4-2", "s/A8-2", "r/A6-2", "q/A4-2"]
    said = {tuple(NearestIds(order).near("A9-2", 4)) for order in (known, known[::-1], sorted(known))}
    assert said == {("s/A8-2", "r/A6-2", "q/A4-2", "r/A4-2")}


NOT_TEXT = "is not valid Unicode text (it holds an unpaired surrogate)"


@pytest.mark.parametrize("call, message", [
    (lambda m: m.archive_search(5), "query must be a string, not a number"),
    (lambda m: m.archive_search(None), "query is missing"),
    (lambda m: m.archive_search("statement", page="2"), "page must be a whole number, not a string"),
    (lambda m: m.archive_search("statement", page=True), "page must be a whole number, not a boolean"),
    (lambda m: m.archive_search("statement", setting=["F"]), "setting must be a string, not a list"),
    (lambda m: m.archive_search("statement", run=3), "run must be a string, not a number"),
    (lambda m: m.archive_search("statement", any_setting="no"), "any_setting must be true or false, not a string"),
    (lambda m: m.archive_search("statement", exclude_run=5), "exclude_run must be a string, not a number"),
    (lambda m: m.archive_hits("statement", hide=["alpha/a1"]), "hide must be a string, not a list"),
    (lambda m: m.archive_hits("statement", until=1), "until must be a string, not a number"),
    (lambda m: m.recall_search(b"statement"), "query must be a string, not bytes"),
    (lambda m: m.recall_search("statement", page=1.0), "page must be a whole number, not 1.0"),
    (lambda m: m.archive_get("a1", run=5), "run must be a string, not a number"),
    (lambda m: m.core_set("alpha", "next", None), "text is missing"),
    (lambda m: m.core_set("alpha", "next", b"x"), "text must be a string, not bytes"),
    (lambda m: m.archive_insert(None), "id is missing"),
    (lambda m: m.check("alpha"), "runs must be a list of strings, not a string"),
    (lambda m: m.check([1]), "runs must be a list of strings, not a list holding a number"),
    (lambda m: m.index("alpha"), "runs must be a list of strings, not a string"),
    (lambda m: m.record("alpha", dry_run="no"), "dry_run must be true or false, not a string"),
    (lambda m: m.archive_search("statement", run="\ud800"), f"run {NOT_TEXT}"),
    (lambda m: m.archive_search("statement", context_run="\udfff"), f"context_run {NOT_TEXT}"),
    (lambda m: m.recall_search("statement", id="a\udce9"), f"id {NOT_TEXT}"),
    (lambda m: m.core_set("alpha", "next", "\ud800"), f"text {NOT_TEXT}"),
    (lambda m: m.check(["alpha", "\ud800"]), f"runs {NOT_TEXT}"),
    (lambda m: m.archive_search("statement", strategy=""),
     "strategy '' is not one of bm25, rerank, vector, hybrid-rrf, graph, rerank-graph"),
    (lambda m: m.archive_search("statement", setting="F" * 16_385),
     "setting is 16,385 characters long; a setting is at most 16,384"),
    # an ArchiveQuery made beforehand (library="no" kept library steps alone; run=5 an AttributeError)
    (lambda m: m.archive_search(ArchiveQuery("statement", library="no")),
     "library must be true or false, not a string"),
    (lambda m: m.archive_hits(ArchiveQuery("statement", run=5)), "run must be a string, not a number"),
    (lambda m: m.archive_hits(ArchiveQuery(5)), "text must be a string, not a number"),
    # index's own parameters, as `mem index` judges them (full="no" asked for a full build)
    (lambda m: m.index(full="no"), "full must be true or false, not a string"),
    (lambda m: m.index(engine="foo"), "engine 'foo' is not one of local, ray"),
    (lambda m: m.index(engine=""), "engine '' is not one of local, ray"),  # not the config's
    (lambda m: m.index(workers=-1), "workers must be a whole number (0: one per CPU), not -1"),
    (lambda m: m.index(workers=1.5), "workers must be a whole number (0: one per CPU), not 1.5"),
    # taken and dropped in silence, where `mem index --workers` refused it
    (lambda m: m.index(workers=7), "workers 7: only Ray actors are counted, and this index embeds in this "
                                   "process (--engine ray, or index.engine = \"ray\")"),
    # as --workspace "" and --config "" (an unset variable opened the current folder)
    (lambda m: type(m).open(""), "workspace is empty (leave it out for the default)"),
    (lambda m: type(m).open(m.workspace.root, ""), "config is empty (leave it out for the default)"),
    (lambda m: type(m).open(5), "workspace must be a folder's path, not a number"),
])
def test_a_python_value_of_the_wrong_type_is_bad_input_naming_its_parameter(ws, call, message):
    """The API checks types as the MCP tools do (one rule, ``functions.Param``): a wrong type is
    one line naming the parameter, not an AttributeError from deep inside, nor a string read as
    a list of runs or as true."""
    from mem_retrieval.memory import Memory
    from mem_retrieval.records.errors import BadInput

    before = (ws.root / "alpha" / "memory" / "events.jsonl").read_bytes()
    with pytest.raises(BadInput) as raised:
        call(Memory.open(ws.root))
    assert str(raised.value) == message
    assert (ws.root / "alpha" / "memory" / "events.jsonl").read_bytes() == before


def test_every_text_parameter_of_every_function_refuses_a_lone_surrogate():
    # the oracle: each parameter taking text, alone, as a tool call or the API would pass it
    from mem_retrieval.functions import FUNCTIONS
    from mem_retrieval.records.errors import BadInput

    texts = [(f, p) for f in FUNCTIONS for p in f.params if p.type in ("string", "strings")]
    assert len(texts) >= 10
    for function, param in texts:
        value = ["\ud800"] if param.type == "strings" else "x\ud800"
        with pytest.raises(BadInput) as raised:
            function.check_types({param.name: value})
        assert str(raised.value) == f"{param.name} {NOT_TEXT}", (function.name, param.name)


def test_every_text_parameter_refuses_a_value_past_its_length_without_repeating_it():
    """A refusal repeats the value it refuses (``kind 'x' is not one of …``): a 1.1 MB run, kind,
    until or list id made a refusal larger than the MCP SDK client reads (1 MB an event), so the
    client saw a broken stream, not the tool error. Every text argument is at most 16,384
    characters (the query's limit), said without repeating it; the query, the setting and
    core_set's text are bounded by their own rules."""
    from mem_retrieval.functions import FUNCTIONS
    from mem_retrieval.records.errors import BadInput
    from mem_retrieval.records.validate import MAX_ARGUMENT_CHARS

    bounded = [(f, p) for f in FUNCTIONS for p in f.params if p.type in ("string", "strings")
               and p.max_chars is not None and not p.own_limit]
    assert len(bounded) >= 15 and MAX_ARGUMENT_CHARS == 16_384
    assert {(f.name, p.name) for f in FUNCTIONS for p in f.params if p.type == "string"
            and p.max_chars is None} == {("core_set", "text")}  # M4 bounds it
    own = {(f.name, p.name): p for f in FUNCTIONS for p in f.params if p.own_limit}
    assert set(own) == {("archive_search", "query"), ("archive_search", "setting"),
                        ("recall_search", "query")}
    for param in own.values():  # advertised to a tool's client, said by the query's own check
        assert param.schema()["maxLength"] == 16_384 and param.type_problem("b" * 16_385) is None
    for function, param in bounded:
        for length, problem in ((16_384, None), (16_385, "is 16,385 characters long; at most 16,384")):
            value = ["b" * length] if param.type == "strings" else "b" * length
            assert param.type_problem(value) == problem, (function.name, param.name)
        with pytest.raises(BadInput) as raised:
            function.check_types({param.name: ["b"] * 3 + ["b" * 1_100_000]
                                  if param.type == "strings" else "b" * 1_100_000})
        assert str(raised.value) == f"{param.name} is 1,100,000 characters long; at most 16,384"


@pytest.mark.parametrize("argv", [("archive-get", "a1", "--run", "r" * 300),
                                  ("recall-search", "five steps", "--run", "r" * 300),
                                  ("recall-search", "--id", "a1", "--run", "r" * 300),
                                  ("archive-get", "r" * 300 + "/a1"),
                                  ("recall-search", "--id", "r" * 300 + "/a1")])
def test_a_run_name_longer_than_a_file_name_names_no_run(ws, argv):
    """A run of 300 characters (past the system's 255 for a file name) made archive-get and
    recall-search end in a traceback (File name too long), where one of 200 named no run."""
    code, out, err = mem(ws, *argv)
    assert code == 1 and "Traceback" not in err and len(err.splitlines()) <= 2, err[-500:]
    assert f"'{'r' * 300}' names no run of this workspace (runs: alpha, beta" in err.splitlines()[0], err


@pytest.mark.parametrize("argv", [("core-set", "r" * 300, "next", "x"), ("check", "r" * 300),
                                  ("record", "r" * 300), ("index", "r" * 300), ("eval", "resume", "r" * 300),
                                  ("eval", "reuse", "r" * 300), ("archive-insert", "a1", "--run", "r" * 300)])
def test_a_run_argument_longer_than_a_file_name_is_no_run_in_one_line(ws, argv):
    """The refusal that says what makes a folder a run looked for the run's tree.json, and a name past
    the system's 255 characters ended every command taking a run in a traceback (File name too long)."""
    code, out, err = mem(ws, *argv)
    assert (code, out) == (1, "") and err.startswith(f"mem: no run '{'r' * 300}' in "), err[-500:]
    assert len(err.splitlines()) == 1


def test_a_page_of_none_is_the_first_page_as_a_tools_null_is(ws):
    from mem_retrieval.memory import Memory

    memory = Memory.open(ws.root)
    assert memory.archive_search("statement", page=None) == memory.archive_search("statement")
    assert memory.recall_search("statement", page=None) == memory.recall_search("statement")


def test_pages_that_are_not_numbers_or_out_of_range(ws):
    code, _, err = mem(ws, "archive-search", "statement", "--page", "1; DROP TABLE steps")
    assert code == 2 and "'1; DROP TABLE steps' is not an integer (digits 0-9)" in err
    code, _, err = mem(ws, "archive-search", "statement", "--page", "0")
    assert code == 2 and "--page 0 is not a page number (pages start at 1)" in err
    code, _, err = mem(ws, "archive-search", "statement", "--page", "99999999999999999999")
    assert code == 1 and "there are only 2 pages (6 hits)" in err
    code, out, err = mem(ws, "archive-search", "zzzqx", "--page", "3")  # no hits: page 1 is empty
    assert (code, out) == (1, "")
    assert err == "mem: page 3: no hits, so no page past the first (an empty page 1)\n"
    assert mem(ws, "archive-search", "zzzqx")[0] == 1  # page 1: "no hits", as any empty search


def test_bytes_that_are_not_utf8_in_arguments_are_refused(ws):
    """On a shell, an argument may hold any bytes: a query, a filter value or a core.md text that
    is not UTF-8 is refused (exit 2), naming the bytes, before anything is read or written."""
    before = (ws.root / "alpha" / "memory" / "events.jsonl").read_bytes()
    for argv in ([b"archive-search", b"stat\xffement"], [b"archive-search", b"x", b"--run", b"\xfe"],
                 [b"recall-search", b"--id", b"a\xc3"], [b"core-set", b"alpha", b"next", b"\xff"]):
        done = subprocess.run([sys.executable.encode(), b"-m", b"mem_retrieval.cli", b"--workspace",
                               str(ws.root).encode(), *argv], cwd=ROOT, capture_output=True,
                              timeout=120)
        assert done.returncode == 2 and done.stdout == b"", done.stderr
        assert done.stderr.endswith(b"is not valid UTF-8\n") and done.stderr.count(b"\n") == 1
        assert b"\\x" in done.stderr
    assert (ws.root / "alpha" / "memory" / "events.jsonl").read_bytes() == before


@pytest.mark.parametrize("locale", [{"PYTHONUTF8": "0", "LC_ALL": "C"},
                                    {"PYTHONUTF8": "0", "LC_ALL": "C.UTF-8"}])
def test_an_argument_is_read_as_utf8_whatever_the_locale_decodes_it_by(ws, tmp_path, locale):
    """Without UTF-8 mode in the C locale, Python decodes arguments as ASCII (each byte past it a
    lone surrogate), and every non-ASCII query, setting or core.md text was refused as "not valid
    UTF-8", which it was. It is read as UTF-8; bytes that are not are refused as before. A path
    past ASCII cannot reach LanceDB there: the workspace is refused, saying what to set."""
    env = {k: v for k, v in os.environ.items() if k not in ("LANG", "LC_CTYPE", "PYTHONIOENCODING")}
    env |= locale | {"MEM_NO_SERVER": "1"}

    def mem_bytes(*argv: bytes, root: Path = ws.root):
        return subprocess.run([sys.executable.encode(), b"-m", b"mem_retrieval.cli", b"--workspace",
                               os.fsencode(root), *argv], cwd=ROOT, capture_output=True, env=env,
                              timeout=120)

    done = mem_bytes(b"--json", b"archive-search", "statement φ₀ — ℤ".encode())
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["query"] == "statement φ₀ — ℤ"
    done = mem_bytes(b"archive-search", b"stat\xffement")
    assert done.returncode == 2 and done.stderr == b"mem: argument 'stat\\xffement' is not valid UTF-8\n"
    other = tmp_path / "w é"
    other.mkdir()
    done = mem_bytes(b"check", root=other)
    if locale["LC_ALL"] == "C":
        assert done.returncode == 2 and done.stderr.count(b"\n") == 1
        assert b"a path past ASCII needs Python's UTF-8 mode where the file system's encoding is ascii" \
            in done.stderr
    else:
        assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("argv", [["archive-search", "statement"], ["recall-search", "statement"],
                                  ["eval", "resume", "alpha"]])
def test_an_empty_until_is_refused_not_read_as_now(ws, argv):
    """``--until "$CUT"`` with CUT unset: memory as it is now would answer a question about then."""
    code, out, err = mem(ws, *argv, "--until", "")
    assert (code, out, err) == (2, "", "mem: --until is empty (leave it out for memory as it is now)\n")


def test_a_stream_that_cannot_encode_a_character_gets_an_escape_not_a_traceback():
    """``PYTHONIOENCODING=ascii`` (or a C locale): text shows ``\\u2265``; JSON stays valid JSON
    holding the very characters (the escapes sit inside its strings)."""
    from conftest import EXAMPLE

    env = os.environ | {"PYTHONIOENCODING": "ascii", "MEM_NO_SERVER": "1"}
    statement = json.loads((EXAMPLE / "satake-two-levels" / "tree.json").read_text(encoding="utf-8"))
    statement = next(s["statement"] for s in statement["steps"] if s["id"] == "A5-7")
    assert "≥" in statement
    argv = [sys.executable, "-m", "mem_retrieval.cli", "-w", str(EXAMPLE)]
    text = subprocess.run([*argv, "archive-get", "satake-two-levels/A5-7"], cwd=ROOT, env=env,
                          capture_output=True, timeout=120)
    assert text.returncode == 0 and text.stderr == b"", text.stderr
    assert "every m \\u2265 1".encode() in text.stdout
    data = subprocess.run([*argv, "--json", "archive-get", "satake-two-levels/A5-7"], cwd=ROOT, env=env,
                          capture_output=True, timeout=120)
    assert data.returncode == 0 and json.loads(data.stdout)["statement"] == statement


def test_an_id_printed_in_ascii_names_its_step_when_pasted_back(tmp_path):
    """What an output in ASCII prints of an id (``\\u00dc``, a surrogate pair past U+FFFF), typed
    back, names the step; a lone surrogate's escape is a query's plain text, not a traceback."""
    workspace = build_workspace(tmp_path / "ws")
    workspace.add_run("gamma", [make_step("Ü-1"), make_step("🙂-1")])
    env = os.environ | {"PYTHONIOENCODING": "ascii", "MEM_NO_SERVER": "1"}
    argv = [sys.executable, "-m", "mem_retrieval.cli", "-w", str(workspace.root)]
    assert run_cli(["--workspace", str(workspace.root), "index", "--no-progress"], out=io.StringIO()) == 0
    for step in ("Ü-1", "🙂-1"):
        shown = subprocess.run([*argv, "archive-get", f"gamma/{step}"], env=env, capture_output=True,
                               text=True, timeout=120).stdout.split()[1]
        assert shown.isascii() and shown != f"gamma/{step}", shown
        code, out, _ = mem(workspace, "--json", "archive-get", shown)
        assert code == 0 and json.loads(out)["id"] == f"gamma/{step}"
        code, out, _ = mem(workspace, "--json", "archive-search", shown.split("/")[1], "--run", "gamma")
        assert code == 0 and json.loads(out)["hits"][0]["id"] == f"gamma/{step}"
    code, out, err = mem(workspace, "archive-search", "\\ud83d-1 \\ud800")
    assert code in (0, 1) and "Traceback" not in err


def test_a_current_folder_that_no_longer_exists_is_one_line_where_a_path_needs_it(tmp_path):
    """A relative path needs the current folder: one line then. A command naming its workspace and
    files by absolute paths needs none, and answers (an agent's scratch folder cleaned away)."""
    ws = build_workspace(tmp_path / "ws")
    queries, qrels = tmp_path / "q.jsonl", tmp_path / "r.qrels"
    queries.write_text(json.dumps({"qid": "q", "query": "statement"}) + "\n")
    qrels.write_text("q 0 alpha/a1 1\n")

    def from_gone(command: str, server: bool = False, **env: str) -> subprocess.CompletedProcess:
        gone = tmp_path / "gone"
        gone.mkdir()
        environ = {k: v for k, v in os.environ.items() if k != "MEM_NO_SERVER"} | env  # a read looks
        return subprocess.run(["sh", "-c", f'cd "{gone}" && rmdir "{gone}" && exec "$0" -m mem_retrieval.cli '
                               + command, sys.executable],  # for a warm server unless it is off
                              env=environ | ({} if server else {"MEM_NO_SERVER": "1"}),
                              capture_output=True, text=True, timeout=120)

    said = ("mem: the current folder no longer exists: change to one that does, or name the workspace and "
            "every file by an absolute path\n")
    for command, env in [("-w ../ws check", {}), ("check", {}), ("check", {"MEM_WORKSPACE": "../ws"}),
                         ("archive-get a1", {}), ("archive-search statement", {}),
                         (f"-w {ws.root} eval paging --queries {queries} --qrels {qrels} --trec-out run.trec",
                          {})]:
        for server in (False, True):  # the read's socket was looked for from the folder: a traceback
            done = from_gone(command, server, **env)
            assert (done.returncode, done.stdout, done.stderr) == (2, "", said), (command, server)
    for command, env in [(f"-w {ws.root} check", {}), ("check", {"MEM_WORKSPACE": str(ws.root)})]:
        done = from_gone(command, **env)
        assert done.returncode == 0 and done.stdout.startswith("OK: 2 runs") and done.stderr == "", command
    # with standard output closed (`>&-`), or error: the same exit, no traceback (the message went
    # to the stream closed when the module was imported: AttributeError, exit 1)
    for closed in (">&-", "2>&-"):
        done = subprocess.run(["sh", "-c", f'cd "{tmp_path}" && mkdir gone2 && cd gone2 && rmdir ../gone2 && '
                               f'exec "$0" -m mem_retrieval.cli archive-get a1 {closed}', sys.executable],
                              env=os.environ | {"MEM_NO_SERVER": "1"}, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 2 and "Traceback" not in done.stderr, (closed, done.stderr)


# ------------------------------------------------------- text read in time linear in its length

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_OLD_HEADING = re.compile(r"^## +(.*?)\s*$")  # the regex core_heading replaces: the oracle


@given(st.text(alphabet=st.sampled_from(list("#  \t\u00a0\u2028xA5-7·\r\x0b")), max_size=30))
@settings(max_examples=500, deadline=None)
def test_a_core_heading_is_read_as_the_regex_read_it(line):
    """``^## +(.*?)\\s*$`` backtracked at each space of a long run (40,000 spaces inside one
    heading, which M4's token count admits: 4.9 s a read, three reads a `mem check`); the plain
    reading gives what it gave, on every short line of these characters."""
    from mem_retrieval.records.parse import core_heading

    match = _OLD_HEADING.match(line)
    assert core_heading(line) == (match.group(1) if match else None)


def test_a_word_after_a_status_is_taken_for_an_id_as_the_old_pattern_took_it():
    """The id pattern after a status word tried every separator and every digit of a word against
    the rest: one 60 KB `a_a_…` word, or a 40 KB `a-111…1€`, in core.md took `mem check` 16–19 s.
    The reading in linear time takes every word of up to 5 of these characters as the old pattern
    did (the oracle)."""
    import itertools

    from mem_retrieval.records.core import id_like

    old = re.compile(r"(?:[A-Z][A-Za-z]*\d|[A-Za-z][\w.']*[-_.][\w.'-]*\d)[\w.'-]*")
    for size in range(1, 6):
        for word in map("".join, itertools.product(["a", "A", "1", "-", "_", ".", "'", "é", "€", "٣"],
                                                   repeat=size)):
            assert id_like(word) == bool(old.fullmatch(word)), word
    for word, expected in (("a_" * 30_000 + "x", False), ("a_" * 30_000 + "7", True),
                           ("a-" + "1" * 40_000 + "€", False), ("a-" + "1-" * 20_000 + "€", False),
                           ("A" * 40_000 + "_", False), ("a'" * 20_000 + "-" * 20_000, False)):
        assert id_like(word) is expected  # each in milliseconds (seconds to minutes before)


def test_a_long_run_of_combining_marks_is_read_in_linear_time_and_cut_to_64():
    """Python puts a run of combining marks in canonical order by an insertion sort: one word of
    15,000 U+0301 then 15,000 U+0316 in core.md took `mem check` 8 s (29 s at 25,000), and a query
    of 16,000 marks `archive-search` 5.8 s. Past the longest id, a text not normal already has each
    run cut at 64 marks first; every form is otherwise Python's own (the oracle)."""
    import unicodedata

    from mem_retrieval.records.ids import normal_form, plain, spellings

    for value in ["Ü-1", "U\u0308-1", "ｐｒｏｖｅｄ", "A5\u20117", "x" * 100 + "é", "\u05d0\u05b8" * 40, "क्" * 50,
                  "é" * 100 + "\u0316\u0301" * 32]:
        for form in ("NFC", "NFD", "NFKC", "NFKD"):
            assert normal_form(form, value) == unicodedata.normalize(form, value), (form, value)
    word = "A5-7" + "\u0301" * 15_000 + "\u0316" * 15_000
    cut = "A5-7" + "\u0301" * 64
    assert normal_form("NFD", word) == unicodedata.normalize("NFD", cut)  # milliseconds, not seconds
    assert plain(word) == plain(cut) and spellings(word)[1:3] == spellings(cut)[:2]  # NFC, NFD
    # characters of class 0 that decompose to marks alone (Tibetan U+0F73, halfwidth U+FF9E) make
    # a run as long once decomposed: counted in it
    for mark, forms in (("\u0f73", "NFC NFD NFKC NFKD"), ("\u0f75", "NFC NFD NFKC NFKD"),
                        ("\u0f81", "NFC NFD"), ("\uff9e\u093c", "NFKC NFKD"), ("\uff9f", "NFKC NFKD")):
        for form in forms.split():
            long, cut = "x" + mark * 15_000, "x" + (mark * 64)[:64]
            assert normal_form(form, long) == unicodedata.normalize(form, cut), (mark, form)
    assert normal_form("NFC", "x" + "\uff9e\u093c" * 15_000) == "x" + "\uff9e\u093c" * 15_000  # NFC already
    kana = "e\u0301\uff76" + "\uff9e" * 70 + "x" * 200  # U+FF9E is a mark in NFKD alone: cut there only
    assert normal_form("NFC", kana) == unicodedata.normalize("NFC", kana)
    assert normal_form("NFD", kana) == unicodedata.normalize("NFD", kana)
    # an id (at most 200 characters) is normalised exactly: unequal ids past 64 marks stay apart,
    # equal ones in another order or form stay equal
    from mem_retrieval.records.ids import canonical

    assert canonical("Q" + "\u0301" * 65) != canonical("Q" + "\u0301" * 64 + "\u0302")
    assert canonical("Q" + "\u0301" * 64 + "\u0316") == canonical("Q" + "\u0316" + "\u0301" * 64)
    long_id = "A\u01d6" + "\u0301" * 63
    assert canonical(long_id) == canonical(unicodedata.normalize("NFD", long_id))


def _every_cut(word: str) -> list[str]:
    """The oracle: every cut of the edge punctuation, least removed first (what id_candidates
    made before it bounded them)."""
    from mem_retrieval.records.core import EDGE

    lead = len(word) - len(word.lstrip(EDGE))
    trail = len(word) - len(word.rstrip(EDGE))
    cuts = sorted(((i, j) for i in range(lead + 1) for j in range(trail + 1)),
                  key=lambda c: (c[0] + c[1], c))
    return list(dict.fromkeys(form for i, j in cuts if (form := word[i:len(word) - j])))


@given(st.integers(0, 30), st.integers(0, 30), st.sampled_from(["A5-7", "mul_le_mul'", "", "x.y"]),
       st.sampled_from("(*.)'…·"))
@settings(max_examples=300, deadline=None)
def test_an_ids_candidates_are_every_cut_of_its_punctuation_up_to_a_bound(lead, trail, core, mark):
    """Every cut of ``((…(A5-7)…))`` made (L+1)(T+1) forms, kept in a list: 300 brackets a side
    took `mem check` 52 s, a `core-set` 44 s under core.md's lock. Up to ``EDGE_CUTS`` characters
    a side are cut one by one, and all but up to that many: the same forms as every cut while the
    word has no more than twice that a side, in the same order; past it, the id is still there."""
    from mem_retrieval.records.core import EDGE, EDGE_CUTS, id_candidates

    word = mark * lead + core + mark * trail
    every, bounded = _every_cut(word), id_candidates(word)
    assert set(bounded) <= set(every) and bounded == [f for f in every if f in set(bounded)]
    if max(len(word) - len(word.lstrip(EDGE)), len(word) - len(word.rstrip(EDGE))) <= 2 * EDGE_CUTS:
        assert bounded == every
    assert not core or core in bounded  # all punctuation cut: the id itself
    word = "(" * 300 + "A5-7" + ")" * 300
    assert "A5-7" in id_candidates(word) and len(id_candidates(word)) == (2 * EDGE_CUTS + 2) ** 2


# ------------------------------------------------------------- folders other local users can write

def test_a_folder_is_private_only_when_no_other_user_can_write_it(tmp_path):
    from mem_retrieval.records.files import private, seal

    top = tmp_path / "cache"
    (top / "models" / "export").mkdir(parents=True)
    for mode, ours in [(0o755, True), (0o700, True), (0o775, False), (0o777, False), (0o757, False)]:
        (top / "models").chmod(mode)  # 0o775: a group may be every user's (useradd -N)
        assert private(top / "models" / "export", top) is ours, oct(mode)
    (top / "models" / "export").chmod(0o775)  # a umask of 002 leaves folders so: seal mends them
    seal(top / "models" / "export", top)
    assert private(top / "models" / "export", top)
    assert [oct((top / p).stat().st_mode & 0o777) for p in ("", "models", "models/export")] == [
        oct(0o755)] * 3
    (tmp_path / "link").symlink_to(top)
    assert private(top) and not private(tmp_path / "link")
    if os.getuid() == 0:  # another owner: only root can make one
        os.chown(top / "models", 12345, -1)
        assert not private(top / "models" / "export", top)


def test_the_ray_actors_model_folder_is_never_one_another_user_made_first(tmp_path, monkeypatch):
    """/tmp/mem-ray-models-<uid> has a predictable name: another user could make it first, world
    writable, with their model in it, and the actors loaded it. Such a folder is passed over for
    the export cache's; without one of the user's own, the run stops saying so."""
    import tempfile

    from mem_retrieval.indexers.distributed import _own_folder
    from mem_retrieval.records.files import private

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    mine = _own_folder("mem-ray-models-x")
    assert mine == tmp_path / "mem-ray-models-x" and private(mine)
    planted = tmp_path / "mem-ray-models-y"
    planted.mkdir()
    planted.chmod(0o777)
    monkeypatch.setenv("MEM_CACHE_DIR", str(tmp_path / "cache"))  # the user's own: used next
    assert _own_folder("mem-ray-models-y") == tmp_path / "cache" / "mem-ray-models-y"
    monkeypatch.setenv("MEM_CACHE_DIR", "off")  # none: said, not a temporary folder left a run
    with pytest.raises(PermissionError, match="mem-ray-models-y is not a folder of this user's own"):
        _own_folder("mem-ray-models-y")


def test_record_text_reaches_a_terminal_escaped_and_the_json_whole(tmp_path):
    """A run's records are a model's output; `archive-get`, `archive-search` and `recall-search`
    printed their text byte for byte: ESC sequences that clear the screen or write the clipboard
    (OSC 52), hidden text, backspaces, a right-to-left override reversing the rest of a line. The
    text output escapes them (line feeds and tabs kept); --json carries the text as it is."""
    hostile = "gadget \x1b[2J\x1b]52;c;cm0gLXJmIH4K\x07 \x1b[8mhidden\x08\x08 \u202ereversed\u202c \x9b31m"
    workspace = build_workspace(tmp_path / "ws")
    workspace.add_step("alpha", make_step("a9", statement=f"the {hostile} lemma",
                                          proof="line one\n\tline two"))
    workspace.write_events("alpha", [*workspace.events("alpha"), {
        "time": "2026-10-18T00:00:00Z", "actor": "A1", "kind": "return", "ids": ["a9"],
        "text": f"returned {hostile}\nsecond line"}])
    assert mem(workspace, "index", "--no-progress")[0] == 0
    escaped = r"gadget \x1b[2J\x1b]52;c;cm0gLXJmIH4K\x07 \x1b[8mhidden\x08\x08 \u202ereversed\u202c \x9b31m"
    for argv in (("archive-get", "alpha/a9"), ("archive-search", "gadget"), ("recall-search", "gadget")):
        code, out, _ = mem(workspace, *argv)
        assert code == 0 and escaped in out, argv
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", out), argv
    assert "proof      line one\n\tline two" in mem(workspace, "archive-get", "alpha/a9")[1]
    assert "returned " + escaped + "\n   second line" in mem(workspace, "recall-search", "gadget")[1]
    shown = json.loads(mem(workspace, "--json", "archive-get", "alpha/a9")[1])
    assert shown["statement"] == f"the {hostile} lemma"


# ---- closed descriptors and signals -------------------------------------------------------------

def _cli(workspace, *argv: str) -> list[str]:
    return [sys.executable, "-m", "mem_retrieval.cli", "-w", str(workspace.root), *argv]


def _catches_sigterm(pid: int) -> bool:
    """Whether process ``pid`` has a handler for SIGTERM (``/proc/PID/status``'s SigCgt mask)."""
    import signal

    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        caught = next(int(line.split()[1], 16) for line in status if line.startswith("SigCgt:"))
    return bool(caught >> (signal.SIGTERM - 1) & 1)


def test_standard_input_closed_ends_mcp_at_once_and_refuses_core_set_dash(tmp_path):
    """Started with descriptor 0 closed (`<&-`), `mem mcp` opened its signal pipe there, read it as
    its requests and waited for ever; `core-set … -` printed a traceback (sys.stdin is None). The
    null device takes descriptor 0: mcp ends as at the end of its input, and `-` is refused in one
    line, core.md untouched."""
    workspace = build_workspace(tmp_path / "ws")
    env = os.environ | {"MEM_NO_SERVER": "1"}
    close = lambda: os.close(0)  # noqa: E731 (after the child's descriptors are set up)
    done = subprocess.run(_cli(workspace, "mcp"), env=env, capture_output=True, text=True, timeout=60,
                          preexec_fn=close)
    assert done.returncode == 0 and "Traceback" not in done.stderr
    before = workspace.core_path("alpha").read_bytes()
    done = subprocess.run(_cli(workspace, "core-set", "alpha", "phase", "-"), env=env, capture_output=True,
                          text=True, timeout=60, preexec_fn=close)
    assert (done.returncode, done.stderr) == (2, "mem: '-' reads the text from standard input, which is "
                                                 "closed\n")
    assert workspace.core_path("alpha").read_bytes() == before


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
def test_sigterm_stops_a_command_as_ctrl_c_does_in_one_line(tmp_path):
    """SIGTERM (an agent's timeout, `kill`) killed a command outright: no word said, and what an
    interrupted command cleans up (`tune`'s scratch, staged output files) was left. It stops as
    Ctrl-C does, saying so (exit 143), with nothing written."""
    import signal
    import time

    workspace = build_workspace(tmp_path / "ws")
    before = workspace.core_path("alpha").read_bytes()
    proc = subprocess.Popen(_cli(workspace, "core-set", "alpha", "phase", "-"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=os.environ | {"MEM_NO_SERVER": "1"})
    try:
        deadline = time.monotonic() + 60
        while not _catches_sigterm(proc.pid):  # main() has set its handler: it waits on its input
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert (proc.returncode, out, err) == (143, "", "mem: terminated (SIGTERM)\n"), err  # (whole: a
    assert workspace.core_path("alpha").read_bytes() == before  # traceback seen once on a loaded CI run)


def test_a_stop_raised_where_python_ignores_it_is_raised_again_where_it_stops():
    """A SIGTERM handled inside a finalizer or a weak reference's callback (as a collection runs)
    raised `Terminated` where Python only prints "Exception ignored" and goes on: the command ran
    to its end, exit 0. The unraisable hook sends the stop again, to land in the command's code."""
    script = (
        "import os, signal, sys, time\n"
        "from mem_retrieval.cli import main as m\n"
        "m._catch_stop_signals()\n"
        "class Held:\n"
        "    def __del__(self):\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        time.sleep(0.05)\n"
        "try:\n"
        "    Held()\n"
        "    for _ in range(1000):\n"
        "        time.sleep(0.01)\n"
        "    print('ran on')\n"
        "except m.Terminated:\n"
        "    print('stopped')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "stopped\n"), done.stderr


# ---- the machine refusing memory or a thread -----------------------------------------------------

def _raised_in_lancedb(error: BaseException) -> BaseException:
    """``error`` as raised from a frame of lancedb's (``store.is_damage`` reads the frames)."""
    try:
        exec("raise error", {"__name__": "lancedb.table", "error": error})
    except BaseException as raised:  # noqa: BLE001 (a panic is one)
        return raised
    raise AssertionError("not raised")


@pytest.mark.parametrize("error, why", [
    (MemoryError(), "Cannot allocate memory"),
    (RuntimeError("can't start new thread"), "Cannot start a thread"),
    (RuntimeError("OS can't spawn worker thread: Resource temporarily unavailable (os error 11)"),
     "Cannot start a thread"),
    (OSError(12, "Cannot allocate memory"), "Cannot allocate memory"),
    (OSError(5, "Cannot allocate memory (os error 12)"), "Cannot allocate memory"),
    (RuntimeError("Unknown error: Failed to launch worker thread: Resource temporarily unavailable"),
     "Cannot start a thread"),  # pyarrow's (an ArrowException)
    (ImportError("libx.so: failed to map segment from shared object"), "Cannot allocate memory")])
def test_memory_or_a_thread_refused_is_the_machines_refusal_never_damage(error, why):
    """Under an address-space limit (`ulimit -v`), lance's thread spawn panicked and Arrow's
    allocator failed inside lancedb's frames: `is_damage` called the index damaged and advised
    `mem index --full` (which, failing so inside `--full`, would drop an intact table). They are
    the machine refusing, as a full disk is: one line, nothing deleted."""
    from mem_retrieval.indexers import store

    raised = _raised_in_lancedb(error)
    assert store.refusal(raised) == why and not store.is_damage(raised)
    assert store.is_damage(_raised_in_lancedb(RuntimeError("range end index 9 out of range")))
    with pytest.raises(store.IndexUnwritable, match=f"{why}: the index is kept as it was"):
        with store.guard(Path("/nonexistent/.mem")):
            raise raised


@pytest.mark.parametrize("folder", ["os error 11", "Permission denied",
                                    "Cannot allocate memory (os error 12)"])
def test_damage_in_a_folder_named_like_a_refusal_is_damage(tmp_path, folder):
    """The refusal words were looked for anywhere in lance's message, which names the file: a
    workspace in a folder named `os error 11` had its damaged index called the machine's refusal
    ("kept as it was"), and `--full`, no longer dropping the table, could never mend it. The
    message is read without the index's own path."""
    import pyarrow as pa

    from mem_retrieval.indexers import store
    from mem_retrieval.indexers.location import Location

    assert store.refusal(pa.ArrowMemoryError("malloc of size 64 failed")) == "Cannot allocate memory"
    index = tmp_path / folder / "ws" / ".mem"
    location = Location(str(index), index)
    for path in (str(location.folder), str(location.folder).lstrip("/")):
        missing = f"lance error: Not found: {path}/lance/steps.lance/data/x.lance"
        damaged = _raised_in_lancedb(RuntimeError(missing))
        assert store.refusal(damaged, location) is None and store.is_damage(damaged, location)
        with pytest.raises(store.IndexDamaged):
            with store.guard(location):
                raise damaged


def test_a_command_refused_memory_says_so_in_one_line(workspace, monkeypatch):
    """A MemoryError or a thread that could not start, outside the index's guard (a model's
    import, a search's own arrays), was a 70-line traceback, exit 1."""
    from mem_retrieval.retrieval.retriever import Retriever

    assert run_cli(["--workspace", str(workspace.root), "index", "--no-progress"], out=io.StringIO()) == 0
    for error in (MemoryError(), RuntimeError("can't start new thread")):
        def refused(*args, error=error, **kwargs):
            raise error
        monkeypatch.setattr(Retriever, "archive_search", refused)
        err = io.StringIO()
        code = run_cli(["--workspace", str(workspace.root), "archive-search", "statement"], out=io.StringIO(),
                       err=err)
        said = err.getvalue()
        assert code == 2 and said.count("\n") == 1 and "the machine refused this command" in said
    monkeypatch.setattr(Retriever, "archive_search", lambda *a, **k: 1 / 0)  # a bug stays a traceback
    with pytest.raises(ZeroDivisionError):
        run_cli(["--workspace", str(workspace.root), "archive-search", "statement"], out=io.StringIO(),
                err=io.StringIO())


def test_a_bounded_read_reserves_what_the_file_holds_not_its_limit(tmp_path):
    """`read(limit + 1)` reserved the whole limit first: reading .mem/read.json (150 bytes, a 64 MB
    limit) failed every search with MemoryError in a process allowed under ~850 MB."""
    import tracemalloc

    from mem_retrieval.records.parse import read_at_most

    path = tmp_path / "small"
    path.write_bytes(b"x" * 150)
    tracemalloc.start()
    with path.open("rb") as handle:
        assert read_at_most(handle, 64 << 20) == b"x" * 150
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 4 << 20
    path.write_bytes(b"y" * ((3 << 20) + 5))
    with path.open("rb") as handle:
        assert read_at_most(handle, 2 << 20) == b"y" * ((2 << 20) + 1)  # one more: it holds more


@pytest.mark.parametrize("where", ["_fewer_malloc_arenas", "_flushed"])
def test_a_stop_between_the_commands_own_handlers_is_one_line_too(workspace, monkeypatch, capsys, where):
    """A SIGTERM sent as soon as the handler was set (an agent's timeout on a loaded machine) landed
    before the command's own try, in the forwarding or set-up code, or after it, as the answer was
    flushed: a traceback, exit 1. The whole of `main` after the handler is set stops in one line."""
    from mem_retrieval.cli import main as cli_main

    def stop(*args):
        raise cli_main.Terminated
    monkeypatch.setattr(cli_main, where, stop)
    monkeypatch.setenv("MEM_NO_SERVER", "1")
    code = cli_main.main(["--workspace", str(workspace.root), "check"])
    assert (code, capsys.readouterr().err) == (143, "mem: terminated (SIGTERM)\n")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
@pytest.mark.slow  # a process, killed in native code (3 s)
def test_a_command_stuck_in_native_code_still_ends_on_sigterm():
    """The handler raising `Terminated` runs only when the main thread runs Python: a search
    blocked for good in LanceDB's Rust code (under `ulimit -v`) ignored every SIGTERM, where the
    default had killed it. A thread woken by the signal ends the process after a grace period
    while the handler has not run, and at once at a second SIGTERM."""
    import signal
    import time

    script = ("import sys, threading\n"
              "from mem_retrieval.cli import main as m\n"
              "m.GRACE = 2.0\n"
              "m._catch_stop_signals()\n"
              "import ctypes\n"
              "libc, mutex = ctypes.CDLL(None), ctypes.create_string_buffer(64)\n"
              "libc.pthread_mutex_lock(mutex)\n"
              "print('ready', flush=True)\n"
              "libc.pthread_mutex_lock(mutex)\n")  # a relock: blocked in C for good, as a signal
    # does not end a mutex wait, so no Python (the handler) runs again
    for second in (False, True):
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline() == "ready\n"
            time.sleep(0.3)
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            if second:
                time.sleep(0.3)
                proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
            took = time.monotonic() - started
        finally:
            proc.kill()
        assert (proc.returncode, err) == (143, "mem: terminated (SIGTERM)\n")
        assert (took < 1.5) if second else (1.5 < took < 30), took


def test_a_read_command_keeps_sigterms_default_and_a_write_command_cleans_up():
    """A read command writes nothing to clean up, and one blocked in LanceDB's Rust code under a
    memory limit (holding the interpreter's lock, where no Python handler or thread can run)
    ignored SIGTERM for good: the read commands keep the default (ended at once); the others
    raise `Terminated`."""
    script = ("import signal, sys\n"
              "from mem_retrieval.cli import main as m\n"
              "m._main = lambda argv, words: print(signal.getsignal(signal.SIGTERM) is m._terminate) or 0\n"
              "sys.argv = ['mem', '-w', '/nonexistent', *sys.argv[1:]]\n"
              "m.main()\n")
    for command, caught in (("archive-search", False), ("recall-search", False), ("archive-get", False),
                            ("check", True), ("index", True), ("core-set", True)):
        done = subprocess.run([sys.executable, "-c", script, command, "x"], capture_output=True, text=True,
                              timeout=60)
        assert done.stdout == f"{caught}\n", (command, done.stderr)
