"""As-of search (``--until``): memory as it stood at an event, on the example workspace.

The oracle is read from the events files: a step of run r is visible as of an event of r once an
event of r with a sequence number at most the cut has named it in its ``ids``; a step of another run
once that run's own events named it by the cut's time; a library entry of an absent run once it was
inserted. An id-only query naming every step is an exact lookup, so its hits are exactly the visible
steps."""

from __future__ import annotations

import calendar
import io
import json
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import library_line, make_step
from mem_retrieval.cli.main import run as run_cli
from mem_retrieval.records.errors import BadInput, Refused
from mem_retrieval.indexers.store import key
from mem_retrieval.records.parse import iso_time, micros
from mem_retrieval.memory import Memory

SATAKE, IWAHORI = "satake-two-levels", "iwahori-two-levels"


def cli(memory: Memory, *argv: str) -> tuple[int, dict]:
    out, err = io.StringIO(), io.StringIO()
    code = run_cli(["--workspace", str(memory.workspace.root), "--json", *argv], out=out, err=err)
    return code, json.loads(out.getvalue())


def first_named(memory: Memory, run: str) -> dict[str, tuple[int, datetime]]:
    """Step id -> (seq, time) of the first event of ``run`` naming it in its ids."""
    first: dict[str, tuple[int, datetime]] = {}
    for event in memory.workspace.events(run):
        for ref in event.ids:
            step = ref.split("/", 1)[1] if ref.startswith(f"{run}/") else ref
            first.setdefault(step, (event.seq, event.timestamp))
    return first


def every_step_query(memory: Memory, runs: list[str]) -> str:
    return " ".join(s.gid for run in runs for s in memory.workspace.tree(run).steps)


def seq_of(memory: Memory, run: str, prefix: str) -> int:
    return next(e.seq for e in memory.workspace.events(run) if e.text.startswith(prefix))


# ---------------------------------------------------------------------------------- --until SEQ

def test_steps_visible_as_of_each_event_are_exactly_those_named_by_then(example):
    named = first_named(example, SATAKE)
    steps = {s.id for s in example.workspace.tree(SATAKE).steps}
    query = every_step_query(example, [SATAKE])
    last = max(e.seq for e in example.workspace.events(SATAKE))
    for cut in range(1, last + 1):
        expected = {f"{SATAKE}/{s}" for s in steps if s in named and named[s][0] <= cut}
        found = {h.id for h in example.archive_hits(query, run=SATAKE, until=str(cut))}
        assert found == expected, cut


def test_a_step_appears_with_the_event_that_first_names_it(example):
    # A5-7 is first named by A5's return, line 38 of satake's log (03:42)
    assert first_named(example, SATAKE)["A5-7"][0] == 38
    code, data = cli(example, "archive-search", "A5-7", "--run", SATAKE, "--until", "37")
    assert f"{SATAKE}/A5-7" not in [h["id"] for h in data["hits"]]  # other steps share its words
    code, data = cli(example, "archive-search", "A5-7", "--run", SATAKE, "--until", "38")
    assert code == 0 and data["hits"][0]["id"] == f"{SATAKE}/A5-7" and data["hits"][0]["via"] == "id"


def test_recall_returns_no_event_after_the_cut(example):
    r1 = seq_of(example, SATAKE, "R-1:")
    assert r1 == 24
    for query in ["audit", "E₆/F₄ function level", "registry next action", "triangularity"]:
        whole = example.recall_hits(query, run=SATAKE)
        cut = example.recall_hits(query, run=SATAKE, until="R-1")
        assert {h.id for h in cut} == {h.id for h in whole if h.seq <= r1}, query
    later = example.recall_hits("A7 audit every candidate proof", run=SATAKE)
    assert any(h.seq > r1 for h in later)  # the cut does remove something
    # the event's global id, its text's first word with its run, names the same event
    assert example.retriever.resolve_until(f"{SATAKE}/R-1", None) == \
        example.retriever.resolve_until("R-1", SATAKE)
    assert example.recall_hits("audit", run=SATAKE, until=f"{SATAKE}/R-1") == \
        example.recall_hits("audit", run=SATAKE, until="R-1")
    # and as a recall hit names it, run#seq: refused before as "needs the run" or "no such event"
    resolve = example.retriever.resolve_until
    assert resolve(f"{SATAKE}#{r1}", None) == resolve("R-1", SATAKE) == resolve(f"{SATAKE}#{r1}", SATAKE)
    with pytest.raises(BadInput, match=f"is an event of run '{SATAKE}', not of '{IWAHORI}'"):
        example.retriever.resolve_until(f"{SATAKE}#{r1}", IWAHORI)
    for tail in ("-1", "x", "1.5", "", "٣"):  # what follows '#' is no sequence number: said so
        with pytest.raises(BadInput, match=f"^until '{SATAKE}#{tail}': '{tail}' after run '{SATAKE}' is no "
                           r"sequence number \(RUN#SEQ: the event's number in its run's log"):
            resolve(f"{SATAKE}#{tail}", None)
    with pytest.raises(BadInput, match="needs the run"):  # no run before '#': an event id wants its run
        resolve("nope#x", None)


def test_an_event_of_a_run_that_is_none_here_names_the_run_not_the_event(example):
    """``--until nope/R-1`` (or ``nope#3``) of a run the workspace lacks says so, with the runs
    there, as the value was typed: it said "no such event in run 'nope'" (and ``'3'`` for
    ``nope#3``), as if the run's log had been read."""
    def refusal(value: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        argv = ["--workspace", str(root), "archive-search", "audit", "--until", value]
        code = run_cli(argv, out=out, err=err)
        return code, out.getvalue(), err.getvalue()

    root = example.workspace.root
    for value in ("nope/R-1", "nope#3", "nope/3"):
        assert refusal(value) == (1, "", f"mem: --until {value!r}: no run 'nope' in {root} (a run is a "
                                         f"folder holding its tree.json; runs: {IWAHORI}, {SATAKE})\n")
    said = f"mem: --until '{SATAKE}/R-99': no such event in run '{SATAKE}'\n"
    assert refusal(f"{SATAKE}/R-99") == (1, "", said)
    resolve, dashed = example.retriever.resolve_until, SATAKE.replace("-", "\u2011")  # as --run reads it
    assert resolve(f"{dashed}#40", None) == resolve(f"{SATAKE}#40", None)
    assert resolve(f"{dashed}/R-1", None) == resolve("R-1", SATAKE)


def test_an_event_of_a_run_the_library_alone_holds_says_it_has_no_log(workspace, mem):
    workspace.write_library(workspace.library() + [library_line("gone", make_step("g1"))])
    assert mem("index")[0] == 0
    for value in ("gone#1", "gone/R-1"):
        said = f"mem: --until {value!r}: run 'gone' has no log here (only library entries of it)\n"
        assert mem("archive-search", "statement", "--until", value) == (1, "", said)


def test_the_nearest_ids_a_note_names_were_in_memory_at_the_cut(example):
    """A typo's nearest ids, as of an event, are steps named by then (oracle: the log's first
    mentions); a search as of line 37 named A5-7, first named at line 38."""
    named = first_named(example, SATAKE)
    for cut in (24, 37, 60):
        memory = {f"{SATAKE}/{s}" for s, (seq, _) in named.items() if seq <= cut}
        _, searched = cli(example, "archive-search", "A5-77", "--run", SATAKE, "--until", str(cut))
        _, recalled = cli(example, "recall-search", "--id", "A5-77", "--run", SATAKE, "--until", str(cut))
        for notes in (searched["notes"], recalled["notes"]):
            nearest = [note.split("; nearest: ")[1].split(", ") for note in notes if "; nearest: " in note]
            assert len(nearest) == 1 and set(nearest[0]) <= memory, (cut, nearest)
        assert (f"{SATAKE}/A5-7" in nearest[0]) == (cut >= 38)


def test_recall_by_id_as_of_an_event(example):
    # A2's return (line 17), W's inputs checkpointed at R-1 (line 23), the registry R-1 (line 24)
    code, data = cli(example, "recall-search", "--id", "A2-4", "--run", SATAKE, "--until", "R-1")
    assert code == 0 and [h["seq"] for h in data["hits"]] == [17, 23, 24]
    code, data = cli(example, "recall-search", "--id", "A5-8", "--run", SATAKE, "--until", "R-1")
    assert code == 1 and data["total"] == 0


# ---------------------------------------------------------------------------- --until EVENT ID

def test_an_event_id_is_an_id_it_names_or_the_first_word_of_its_text(example):
    by_text = example.retriever.resolve_until("R-2", SATAKE)
    assert by_text.seq == seq_of(example, SATAKE, "R-2:") and by_text.run == SATAKE
    by_ids = example.retriever.resolve_until("A7-24", SATAKE)  # first named by A7's return at 03:47
    assert by_ids.seq == first_named(example, SATAKE)["A7-24"][0]
    assert example.retriever.resolve_until("R-1", SATAKE) == example.retriever.resolve_until("24", SATAKE)
    verdict = example.retriever.resolve_until("R-4", SATAKE)  # "R-4 (verdict draft): …"
    assert verdict.seq == seq_of(example, SATAKE, "R-4 ")
    # a global id names the step in its run's log, and gives the run when --run is absent
    assert example.retriever.resolve_until(f"{SATAKE}/A7-24", None) == by_ids
    assert example.retriever.resolve_until(f"{SATAKE}/A7-24", SATAKE) == by_ids
    with pytest.raises(Refused):
        example.retriever.resolve_until("R-9", SATAKE)
    with pytest.raises(Refused):  # iwahori's log never names satake's A7-24
        example.retriever.resolve_until(f"{SATAKE}/A7-24", IWAHORI)


def test_events_at_the_same_time_are_cut_by_their_position(example):
    # R-1 (line 24) and its checkpoint (line 25) are both at 02:56; --until R-1 keeps line 24 only
    events = {e.seq: e for e in example.workspace.events(SATAKE)}
    assert events[24].time == events[25].time
    seqs = {h.seq for h in example.recall_hits("core.md checkpoint", run=SATAKE, until="R-1")}
    assert 25 not in seqs and max(seqs) <= 24



def test_at_an_event_the_steps_of_other_runs_its_log_has_named_are_memory(workspace):
    """alpha's log names beta/b1 at 04:00 on the 17th; beta's own log, whose clock need not agree,
    names it at 01:00 on the 18th. As of alpha's event the run knew b1, and the search left it out."""
    events = workspace.events("alpha")
    workspace.write_events("alpha", [*events, {"time": "2026-10-17T04:00:00Z", "actor": "root",
                                               "kind": "checkpoint", "ids": ["beta/b1"],
                                               "text": "R-1: see doc/3/page, returns/A6.json, (beta/b1)"}])
    memory = Memory.open(workspace.root)
    memory.index(progress=False)
    query = every_step_query(memory, ["alpha", "beta"])
    for until, seen in [("alpha#2", False), ("alpha#3", True),
                        ("2026-10-17T04:00:00Z", False),  # a time: each run by its own clock
                        ("2026-10-18T01:00:00Z", True)]:
        found = {h.id for h in memory.archive_hits(query, until=until)}
        assert ("beta/b1" in found) == seen, until
        assert "alpha/a1" in found  # named at 03:42 by alpha's own log
    # words of no run's step (a path, `doc/3`) make no key: on a long log they made 180,000
    named = set(memory.retriever.resolve_until("alpha#3", None).named)
    assert key("beta/b1") in named and not named & {key("doc/3/page"), key("returns/A6.json")}
    # a run only the library holds is a run; when the library cannot be read, any may be
    events = workspace.events("alpha")
    workspace.write_events("alpha", [*events[:-1], dict(events[-1], text="R-1: gone/g1 and doc/3")])
    workspace.write_library([*workspace.library(), library_line("gone", make_step("g1"))])
    assert key("gone/g1") in memory.retriever.resolve_until("alpha#3", None).named
    assert key("doc/3") not in memory.retriever.resolve_until("alpha#3", None).named
    workspace.library_path.write_text(workspace.library_path.read_text() + '{"run": "x"\n')
    assert {key("gone/g1"), key("doc/3")} <= set(memory.retriever.resolve_until("alpha#3", None).named)

# -------------------------------------------------------------------------------- --until TIME

@pytest.mark.parametrize("time", ["2026-10-17T02:56:00Z", "2026-10-17T03:41:59Z",
                                  "2026-10-17T03:42:00Z", "2026-10-18T02:40:00+00:00",
                                  "2026-10-18T04:40:00+02:00", "2026-10-19T00:00:00Z"])
def test_a_time_cuts_every_run_by_its_own_log(example, time):
    cut = datetime.fromisoformat(time.replace("Z", "+00:00"))
    expected = set()
    for run in (SATAKE, IWAHORI):
        named = first_named(example, run)
        expected |= {s.gid for s in example.workspace.tree(run).steps
                     if s.id in named and named[s.id][1] <= cut}
    query = every_step_query(example, [SATAKE, IWAHORI])
    found = {h.id for h in example.archive_hits(query, until=time)}
    assert found == expected
    events = {h.id for h in example.recall_hits("A2-4", until=time)}
    assert all(e.timestamp <= cut for run in (SATAKE, IWAHORI)
               for e in example.workspace.events(run) if e.gid in events)


def test_a_time_without_a_zone_is_refused(example):
    out, err = io.StringIO(), io.StringIO()
    code = run_cli(["--workspace", str(example.workspace.root), "archive-search", "A5-7",
                    "--until", "2026-10-17T03:42:00"], out=out, err=err)
    assert code == 2 and "--until '2026-10-17T03:42:00' is a time without a zone" in err.getvalue()



@pytest.mark.parametrize("date, write", [("2026-10-17", "2026-10-17T00:00Z"),
                                         ("2026-10-17Z", "2026-10-17T00:00Z"),
                                         ("2026-10-17+05:30", "2026-10-17T00:00+05:30"),
                                         ("2026-10-17-08:00", "2026-10-17T00:00-08:00"),
                                         ("20261017Z", "20261017T00:00Z"), ("2026-290Z", "2026-290T00:00Z"),
                                         ("2026-W42+05:30", "2026-W42T00:00+05:30")])
def test_a_date_alone_is_refused_saying_the_time_to_write(example, workspace, date, write):
    """`2026-10-17` was "a time without a zone (write Z or +hh:mm)", and `2026-10-17Z`, written as
    told, "not a valid time"; `2026-10-17+05:30` was read as 05:30 that day, without a zone."""
    out, err = io.StringIO(), io.StringIO()
    code = run_cli(["--workspace", str(example.workspace.root), "archive-search", "A5-7",
                    "--until", date], out=out, err=err)
    assert code == 2 and err.getvalue() == (f"mem: --until {date!r} is a date without a time of day "
                                            f"(write a time with its zone: {write})\n")
    events = workspace.events("alpha")
    workspace.write_events("alpha", [*events[:-1], dict(events[-1], time=date)])
    code, err = None, io.StringIO()
    code = run_cli(["--workspace", str(workspace.root), "index", "--no-progress"], out=io.StringIO(), err=err)
    assert code == 2 and err.getvalue().endswith(
        f"alpha/memory/events.jsonl:{len(events)}: time: {date!r} is a date without a time of day "
        f"(write a time with its zone: {write})\n")


def test_a_time_names_an_instant_as_long_as_its_last_written_unit():
    from mem_retrieval.records.parse import time_resolution

    assert [time_resolution(t) for t in ("2026-10-17T03:42:00Z", "2026-10-17T03:42Z", "2026-10-17T03Z",
                                         "2026-10-17T03:42:00.717Z", "2026-10-17 03:42:00,5+02:00",
                                         "2026-10-17T03:42:00.123456789Z", "20261017T034200Z")] == [
        timedelta(seconds=1), timedelta(minutes=1), timedelta(hours=1), timedelta(milliseconds=1),
        timedelta(milliseconds=100), timedelta(microseconds=1), timedelta(seconds=1)]


def test_no_such_day_is_said_so_with_no_time_to_write(example):
    out, err = io.StringIO(), io.StringIO()
    code = run_cli(["--workspace", str(example.workspace.root), "archive-search", "A5-7",
                    "--until", "2026-02-30"], out=out, err=err)
    assert (code, err.getvalue()) == (2, "mem: --until '2026-02-30' is not a valid time (day is out of "
                                         "range for month)\n")


@settings(max_examples=400, deadline=None)
@given(st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1),
                    timezones=st.sampled_from([timezone.utc, timezone(timedelta(hours=5, minutes=30)),
                                               timezone(timedelta(hours=-8))])))
def test_a_time_is_its_epoch_microseconds_exactly(stamp):
    """Through a float, 2005-05-28T13:47:43.673030Z and a microsecond before it were one instant."""
    whole = calendar.timegm(stamp.utctimetuple()) * 1_000_000 + stamp.microsecond
    assert micros(stamp) == whole
    assert micros(stamp + timedelta(microseconds=1)) == whole + 1
    later, earlier = iso_time("2005-05-28T13:47:43.673030Z"), iso_time("2005-05-28T13:47:43.673029Z")
    assert micros(later) - micros(earlier) == 1

# ------------------------------------------------------------------- the library across runs

def test_library_entries_of_other_runs_follow_their_own_time(example):
    # as of iwahori's R-1 (2026-10-18 02:40): every satake library step, by satake's own time (all
    # named on 2026-10-17, inserted at 07:00 that day); none of iwahori's, inserted at 05:40 after it
    until = example.retriever.resolve_until("R-1", IWAHORI)
    query = every_step_query(example, [SATAKE, IWAHORI])
    found = {h.id for h in example.archive_hits(query, until=until, library=True)}
    library = {e.gid for e in example.workspace.library()}
    assert found == {g for g in library if g.startswith(SATAKE)}
    # as of satake's R-1 (02:56 on the 17th) its steps named by then are there, but not in the library yet
    until = example.retriever.resolve_until("R-1", SATAKE)
    assert f"{SATAKE}/A2-4" in {h.id for h in example.archive_hits(query, until=until)}
    assert not example.archive_hits(query, until=until, library=True)


def test_the_library_as_of_each_event_holds_the_entries_inserted_by_then(example):
    """Oracle from the files: an entry is a library hit as of a cut when its step is in memory then
    (its run's log named it by the cut) and it was inserted by the cut's time. Library membership
    was today's: `--library --until` (and `eval reuse --until`) listed entries inserted later; and
    a plain search as of the cut labelled a hit `in_library` (text: `· library`) before its entry
    was inserted, where `--library` at the same cut listed none."""
    query = every_step_query(example, [SATAKE, IWAHORI])
    named = {run: first_named(example, run) for run in (SATAKE, IWAHORI)}
    entries = example.workspace.library()
    for run in (SATAKE, IWAHORI):
        for event in example.workspace.events(run):
            until = example.retriever.resolve_until(str(event.seq), run)
            cut = datetime.fromtimestamp(until.micros / 1e6, tz=timezone.utc)
            expected = set()
            for entry in entries:
                first = named[entry.run].get(entry.id)
                in_memory = first is not None and (
                    first[0] <= event.seq if entry.run == run else first[1] <= cut)
                if in_memory and datetime.fromisoformat(entry.inserted) <= cut:
                    expected.add(entry.gid)
            found = {h.id for h in example.archive_hits(query, until=until, library=True)}
            assert found == expected, (run, event.seq)
            labelled = {h.id for h in example.archive_hits(query, until=until) if h.in_library}
            assert labelled == expected, (run, event.seq)
            page = example.archive_search(query, until=until)
            assert {h.id for h in page.hits if h.in_library} == expected & {h.id for h in page.hits}


def test_a_library_entry_without_its_run_appears_when_inserted(workspace):
    ws = workspace
    ws.write_library(ws.library() + [library_line("gamma", make_step("g1"),
                                                  inserted="2026-10-17T07:00:00Z")])
    ws.add_step("alpha", make_step("a9"))  # a step no event ever names
    memory = Memory.open(ws.root)
    memory.index(progress=False)
    assert {h.id for h in memory.archive_hits("gamma/g1 alpha/a9")} == {"gamma/g1", "alpha/a9"}
    assert {h.id for h in memory.archive_hits("gamma/g1", until="2026-10-17T07:00:00Z")} == {"gamma/g1"}
    assert not memory.archive_hits("gamma/g1", until="2026-10-17T06:59:59Z")
    assert {h.id for h in memory.archive_hits("alpha/a2")} == {"alpha/a2"}
    assert {h.id for h in memory.archive_hits("alpha/a2", run="alpha", until="2")} == {"alpha/a2"}
    assert not memory.archive_hits("alpha/a9", run="alpha", until="2")  # never named: never there


def _a8_and_a9_in_the_library(ws, *more: str) -> Memory:
    """alpha's steps a8 (inserted into the library at 03:00) and a9 (at 05:00), and ``more`` steps
    not in it, none named by alpha's log; the workspace indexed."""
    steps = {name: make_step(name) for name in (*more, "a8", "a9")}
    for step in steps.values():
        ws.add_step("alpha", step)
    ws.write_library(ws.library() + [library_line("alpha", steps["a8"], inserted="2026-10-17T03:00:00Z"),
                                     library_line("alpha", steps["a9"], inserted="2026-10-17T05:00:00Z")])
    memory = Memory.open(ws.root)
    memory.index(progress=False)
    return memory


def test_a_step_its_log_never_names_is_in_memory_from_its_library_copys_insertion(workspace):
    """A step no event names counts as written when its library copy was inserted: by time, at
    that time; by position in its run's log, at the first event whose instant reaches it (alpha's
    log: #1 at 02:05, #2 at 03:42). Inserted after the last event: past the log's end, where no
    sequence-number cut reaches. A step neither named nor dated is in memory as of no cut."""
    memory = _a8_and_a9_in_the_library(workspace, "a7")
    query = "alpha/a7 alpha/a8 alpha/a9"

    def seen(**cut) -> set[str]:
        return {h.id for h in memory.archive_hits(query, **cut)}

    assert seen() == {"alpha/a7", "alpha/a8", "alpha/a9"}
    assert seen(until="2026-10-17T02:59:59Z") == set()
    assert seen(until="2026-10-17T03:00:00Z") == {"alpha/a8"}
    assert seen(until="2026-10-17T05:00:00Z") == {"alpha/a8", "alpha/a9"}
    assert seen(run="alpha", until="1") == set()
    assert seen(run="alpha", until="2") == {"alpha/a8"}
    assert seen(run="alpha", until="99") == {"alpha/a8"}  # the log's last event: before a9's insertion
    later = memory.archive_hits("a8", library=True, until="2099-01-01T00:00:00Z")
    assert {h.id for h in later} == {"alpha/a8"}


def test_a_step_its_log_names_after_its_library_copys_insertion_is_in_memory_from_the_insertion(workspace):
    """The entry and its step are one record: in memory from the earlier of its first naming and
    its insertion. An event naming it later hid it from the times it was in the library, so
    appending to the log changed what a past cut answered. alpha's log: #1 at 02:05, #2 at 03:42;
    a8 inserted at 03:00, a9 at 05:00; then #3 at 04:00 names both, and only a9 moves earlier."""
    ws = workspace
    memory = _a8_and_a9_in_the_library(ws)

    def seen(**cut) -> tuple[set[str], set[str]]:
        return ({h.id for h in memory.archive_hits("alpha/a8 alpha/a9", **cut)},
                {h.id for h in memory.archive_hits("a8 a9", library=True, **cut)})

    cuts = [{"until": "2026-10-17T02:59:59Z"}, {"until": "2026-10-17T03:00:00Z"},
            {"until": "2026-10-17T04:00:00Z"}, {"until": "2026-10-17T05:00:00Z"},
            {"run": "alpha", "until": "1"}, {"run": "alpha", "until": "2"}, {"run": "alpha", "until": "3"}]
    before = [seen(**cut) for cut in cuts]
    a8, both = {"alpha/a8"}, {"alpha/a8", "alpha/a9"}
    assert before == [(set(), set()), (a8, a8), (a8, a8), (both, both), (set(), set()), (a8, a8), (a8, a8)]
    ws.write_events("alpha", ws.events("alpha") + [{"time": "2026-10-17T04:00:00Z", "actor": "A7",
                                                    "kind": "audit", "ids": ["a8", "a9"], "text": "re-read"}])
    memory.index(progress=False)
    after = [seen(**cut) for cut in cuts]
    assert after == [(set(), set()), (a8, a8), (both, a8), (both, both), (set(), set()), (a8, a8), (both, a8)]


def test_an_entry_inserted_within_the_second_of_an_event_is_memory_as_of_that_event(workspace):
    """`mem` stamps `inserted` to the millisecond and an event to the second: an archive-insert at
    06:58:56.050 then a core-set (its event written 06:58:56) left the step out of memory as of that
    event, in the log and in the library. A cut names an instant as long as its last written unit
    (``instant_last``), as a run's start lasts to the end of its second."""
    ws = workspace
    ws.add_step("alpha", make_step("a7", statement="Hensel lifting in rank two"))
    ws.write_events("alpha", [*ws.events("alpha"), {"time": "2026-10-17T06:58:56Z", "actor": "root",
                                                    "kind": "checkpoint", "ids": [], "text": "next: lift"}])
    ws.write_library(ws.library() + [library_line("alpha", make_step("a7"),
                                                  inserted="2026-10-17T06:58:56.050Z")])
    memory = Memory.open(ws.root)
    memory.index(progress=False)
    for until in ("alpha#3", "2026-10-17T06:58:56Z", "2026-10-17T06:58Z"):
        assert {h.id for h in memory.archive_hits("alpha/a7", until=until)} == {"alpha/a7"}, until
        assert {h.id for h in memory.archive_hits("alpha/a7", library=True, until=until)} == {"alpha/a7"}
    for until in ("alpha#2", "2026-10-17T06:58:55Z", "2026-10-17T06:58:56.049Z"):
        assert not memory.archive_hits("alpha/a7", until=until), until
        assert not memory.archive_hits("alpha/a7", library=True, until=until), until


def write_logs(ws, later: list[str], beta: str) -> None:
    """alpha's log: its five steps' return at 03:42:47Z, then a checkpoint at each time of
    ``later``; beta's one event at ``beta``."""
    checkpoints = [{"time": time, "actor": "root", "kind": "checkpoint", "ids": [], "text": f"at {time}"}
                   for time in later]
    ws.write_events("alpha", [{"time": "2026-10-17T03:42:47Z", "actor": "A1", "kind": "return",
                               "ids": ["a1", "a2", "a3", "a4", "a5"], "text": "five steps"}, *checkpoints])
    ws.write_events("beta", [dict(e, time=beta) for e in ws.events("beta")])


def test_a_cut_at_the_very_microsecond_of_a_record_keeps_it_and_one_before_does_not(workspace, mem):
    """A time written to the microsecond names that instant: an event logged then, a library entry
    inserted then, and the event `eval resume` answers as of, are in memory at it, and not a
    microsecond before (each of recall-search, archive-search --library and eval resume cut at the
    boundary its own way: ``<=`` in the events' and the library's filters, ``>`` in event_cut)."""
    assert mem("index")[0] == 0
    at, before = "2026-10-17T02:05:00.000000Z", "2026-10-17T02:04:59.999999Z"  # alpha's first event
    assert "alpha #1 " in mem("recall-search", "fetched", "--until", at)[1]
    assert mem("recall-search", "fetched", "--until", before)[:2] == (1, "no events\n")
    at, before = "2026-10-17T07:00:00.000000Z", "2026-10-17T06:59:59.999999Z"  # alpha/a1's insertion
    code, out, _ = mem("archive-search", "statement", "--library", "--until", at)
    assert code == 0 and "1. alpha/a1 " in out and " · library · " in out
    assert mem("archive-search", "statement", "--library", "--until", before)[:2] == (1, "no hits\n")
    at, before = "2026-10-17T03:42:00.000000Z", "2026-10-17T03:41:59.999999Z"  # alpha's second event
    assert json.loads(mem("--json", "eval", "resume", "alpha", "--until", at)[1])["event"]["seq"] == 2
    assert json.loads(mem("--json", "eval", "resume", "alpha", "--until", before)[1])["event"]["seq"] == 1


def test_a_line_written_to_the_minute_after_one_to_the_second_covers_that_minute_not_more(workspace, mem):
    """``03:42Z`` after ``03:42:47Z``: the log's order dated it 03:42:47, and the instant rule then
    added its minute, so a cut as of it reached 03:43:46, taking in another run's step written at
    03:43:30 (an hour for ``03Z``); `check` called the line earlier than the one before it."""
    ws = workspace
    write_logs(ws, ["2026-10-17T03:42Z", "2026-10-17T03Z"], "2026-10-17T03:43:30Z")
    code, out, _ = mem("check")
    assert code == 0 and "warning" not in out, out
    memory = Memory.open(ws.root)
    memory.index(progress=False)
    for until in ("alpha#2", "2026-10-17T03:42Z", "2026-10-17T03:42:59.999Z"):
        assert not memory.archive_hits("beta/b1", until=until), until
        assert not memory.recall_hits("one step", until=until), until
    for until in ("alpha#3", "2026-10-17T03:43:30Z"):  # the hour 03 covers 03:43:30
        assert {h.id for h in memory.archive_hits("beta/b1", until=until)} == {"beta/b1"}, until
    assert memory.retriever.resolve_until("alpha#2", None).micros == \
        memory.retriever.resolve_until("2026-10-17T03:42Z", None).micros


def test_a_cut_as_of_a_later_line_never_reaches_less_than_one_as_of_the_line_before(workspace):
    """A line stamped earlier than the one before it (a clock set back) is dated as that one: the
    cut as of it ended at the start of that second, short of the cut as of the line before, which
    held another run's step named within that second."""
    ws = workspace
    write_logs(ws, ["2026-10-17T03:42:30Z", "2026-10-17T03:41Z"], "2026-10-17T03:42:47.500Z")
    memory = Memory.open(ws.root)
    memory.index(progress=False)
    cuts = [memory.retriever.resolve_until(f"alpha#{seq}", None).micros for seq in (1, 2, 3)]
    assert cuts == [micros(iso_time("2026-10-17T03:42:47.999999Z"))] * 3
    for until in ("alpha#1", "alpha#2", "alpha#3", "alpha#99"):
        assert {h.id for h in memory.archive_hits("beta/b1", until=until)} == {"beta/b1"}, until


def test_the_end_of_a_day_is_its_last_instant_not_the_next_days_first_minute(workspace):
    """`--until 2026-10-17T24:00Z` reached one minute into the next day (`24Z` an hour): the instant
    rule added a minute to the 00:00 that 24:00 is read as."""
    ws = workspace
    ws.write_events("beta", [dict(e, time="2026-10-18T00:00:30Z") for e in ws.events("beta")])
    memory = Memory.open(ws.root)
    memory.index(progress=False)
    for until in ("2026-10-17T24:00Z", "2026-10-17T24Z", "2026-10-17T24:00:00Z"):
        assert not memory.archive_hits("beta/b1", until=until), until
    assert {h.id for h in memory.archive_hits("beta/b1", until="2026-10-18T00:00Z")} == {"beta/b1"}


def test_times_before_1970_and_in_the_last_second_of_year_9999_are_times(workspace):
    """"Never" was -1, above every time before 1970 (negative microseconds): no cut showed a step
    or an entry dated so. A run whose first event is in year 9999's last second: `eval reuse
    --runs-before` ended in a traceback (the end of that instant overflowed)."""
    ws = workspace
    for run in ("alpha", "beta"):
        ws.write_events(run, [dict(e, time=e["time"].replace("2026-10-1", "1966-10-1"))
                              for e in ws.events(run)])
    ws.write_library([dict(e, inserted=e["inserted"].replace("2026-10-1", "1966-10-1"))
                      for e in ws.library()])
    memory = Memory.open(ws.root)
    memory.index(progress=False)
    query = "alpha/a1 alpha/a2 beta/b1"
    assert {h.id for h in memory.archive_hits(query, until="1966-10-17T03:42:00Z")} == {
        "alpha/a1", "alpha/a2"}
    assert {h.id for h in memory.archive_hits(query, until="1966-10-18T01:00Z")} == {
        "alpha/a1", "alpha/a2", "beta/b1"}
    assert {h.id for h in memory.archive_hits("alpha/a1", library=True, until="1966-10-17T07:00Z")} == {
        "alpha/a1"}
    assert not memory.archive_hits(query, until="1966-10-17T03:41:59Z")
    assert not memory.archive_hits("alpha/a1", library=True, until="1966-10-17T06:59:59Z")
    ws.write_events("beta", [dict(e, time="9999-12-31T23:59:59Z") for e in ws.events("beta")])
    memory.index(progress=False)
    code, data = cli(memory, "eval", "reuse", "beta", "--runs-before")
    assert code == 1 and [t["id"] for t in data["cited"]] == ["alpha/a1"]  # required, and missed
    assert data["cut"].startswith("the run's start (before 9999-12-31T23:59:59.999999+00:00")


@pytest.mark.parametrize("until, said", [
    ("20261017", "is a date without a time of day (write a time with its zone: 20261017T00:00Z)"),
    ("2026290", "is a date without a time of day (write a time with its zone: 2026290T00:00Z)"),
    ("20260230T0000Z", "is not a valid time (day is out of range for month)"),
    ("2026-366T00:00Z", "is not a valid time (2026 has 365 days)"),
    ("2026-W54-1T00:00Z", "is not a valid time (Invalid isoformat string: '2026-W54-1T00:00Z')"),
    ("2026-10-17T03:41.99Z", "is not a valid time (a fraction of a minute or an hour (which Python reads as "
                             "of a second): write the seconds)"),
    ("10000-01-01T00:00Z", "is not a valid time (Invalid isoformat string: '10000-01-01T00:00Z')")])
def test_a_date_in_basic_week_or_ordinal_form_is_a_time_or_refused_as_one(workspace, until, said):
    """`20261017` was read as the sequence number 20,261,017 (memory as of now), and a basic, week
    or ordinal date of no such day as an event's id ("no such event")."""
    for argv in (("archive-search", "a1", "--run", "alpha"), ("recall-search", "five", "--run", "alpha"),
                 ("eval", "resume", "alpha")):
        out, err = io.StringIO(), io.StringIO()
        code = run_cli(["--workspace", str(workspace.root), *argv, "--until", until], out=out, err=err)
        assert (code, err.getvalue()) == (2, f"mem: --until {until!r} {said}\n"), argv


def test_a_cut_searched_after_the_index_was_made_anew_reads_the_new_rows(workspace):
    """A cut memory's BM25 is cached for the process by table version; an index made anew at the
    same path (`.mem` deleted and indexed again: it loses nothing) counts its versions from 1
    again, and a long-lived process answered the cut from the old rows (a reviewer's fuzzing of
    incremental against full indexes in one process)."""
    import shutil

    cut = "2026-10-17T12:00:00Z"
    first = Memory.open(workspace.root)
    first.index(progress=False)
    assert first.recall_hits("hecke", until=cut) == []
    workspace.write_events("alpha", workspace.events("alpha") + [
        {"time": "2026-10-17T04:00:00Z", "actor": "A1", "kind": "audit", "ids": ["a1"],
         "text": "hecke operator"}])
    shutil.rmtree(workspace.root / ".mem")
    again = Memory.open(workspace.root)
    again.index(progress=False)
    assert [h.id for h in again.recall_hits("hecke", until=cut)] == ["alpha#3"]
