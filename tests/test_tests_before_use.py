"""The design's tests before use: `mem eval resume`, `mem eval reuse` (and `mem eval status`) pass
on the example workspace, and fail, naming the culprit, on workspaces built to break them.

(`mem eval status` failing on a promoted status is tested in test_check.py.)"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import library_line, make_step
from mem_retrieval.eval.resume import blocked_routes, resume, w_as_of
from mem_retrieval.eval.reuse import citations, reuse
from mem_retrieval.cli.main import run as run_cli
from mem_retrieval.records import writes
from mem_retrieval.records.errors import BadInput
from mem_retrieval.memory import Memory
from mem_retrieval.records.types import Event

SATAKE, IWAHORI = "satake-two-levels", "iwahori-two-levels"
# every satake step iwahori cites: parents in its tree.json, and ids in its briefs (A6-7 is named
# in briefs/A5.md only as "Not an input here (M3)")
IWAHORI_CITES = {f"{SATAKE}/{s}" for s in
                 ("A2-2", "A2-4", "A4-3", "A5-5", "A5-6", "A5-7", "A5-8", "A5-9", "A6-5")}


def cli(root, *argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_cli(["--workspace", str(root), *argv], out=out, err=err)
    return code, out.getvalue() + err.getvalue()


# ------------------------------------------------------------------------- the example workspace

def test_the_three_tests_pass_on_the_example(example):
    root = example.workspace.root
    code, text = cli(root, "eval", "resume", SATAKE, "--until", "R-1")
    assert code == 0 and text.splitlines()[-1].startswith("resume: PASS")
    code, text = cli(root, "eval", "reuse", IWAHORI)
    assert code == 0 and "reuse: PASS: recall 9/9 = 1.00 within 2 pages (threshold 1.00)" in text
    code, text = cli(root, "eval", "status")
    assert code == 0 and "status: PASS" in text


def test_reuse_on_the_example_finds_every_cited_step_with_its_setting(example):
    code, text = cli(example.workspace.root, "--json", "eval", "reuse", IWAHORI)
    data = json.loads(text)
    assert code == 0 and data["pass"] and data["recall"] == 1.0
    assert {t["id"] for t in data["cited"]} == IWAHORI_CITES
    assert data["not_cited"] == [f"{SATAKE}/A6-7"]
    library = {e.gid: e for e in example.workspace.library()}
    for target in data["cited"]:
        assert target["found"] and target["page"] <= 2
        assert target["setting"] == library[target["id"]].setting
        assert target["setting_match"] in ("same", "implied")
    assert [q["origin"] for q in data["queries"]] == ["Fix problem", "Fix criterion"]
    cited = {t["id"]: t["cited"] for t in data["cited"]}
    assert "A5.md:6 dead end" in cited[f"{SATAKE}/A5-9"] and "parent of A5-1" in cited[f"{SATAKE}/A5-9"]
    assert cited[f"{SATAKE}/A5-8"] == ["A2.md:7 dead end", "A5.md:7 dead end"]  # cited in briefs only


def test_blocked_routes_are_the_steps_named_by_then(example):
    # brute force over every cut of satake's log: its steps with status blocked or kind
    # dead_end/error that an event up to the cut names in its ids (satake names no other run's)
    ws = example.workspace
    events = list(ws.events(SATAKE))
    steps = {s.id: s for s in ws.tree(SATAKE).steps}
    for cut in range(len(events) + 1):
        named = {ref for e in events[:cut] for ref in e.ids}
        expected = {f"{SATAKE}/{s}" for s in named if s in steps and (
            steps[s].status == "blocked" or steps[s].kind in ("dead_end", "error"))}
        assert set(blocked_routes(example, SATAKE, events[:cut])) == expected, cut
    assert set(blocked_routes(example, SATAKE, events)) == {
        f"{SATAKE}/{s}" for s in ("A2-6", "A6-3", "A5-8", "A5-9")}


def test_resume_on_the_example_at_each_registry(example):
    # at R-1 satake knows two blocked routes, returned before it: A6-3 (dead end, A6 at 02:31) and
    # A2-6 (error, A2 at 02:40); A5-8 and A5-9 come back at 03:42, after it. W is the one
    # checkpointed at R-1, with the seed's next action
    report = resume(example.retriever, SATAKE, "R-1")
    assert report.passed and report.event.seq == 24 and report.w_source == "checkpoints"
    assert {r.id for r in report.routes} == {f"{SATAKE}/A6-3", f"{SATAKE}/A2-6"}
    assert report.w["next"].startswith("A7: audit every candidate proof (A2, A4, A6 now;")
    assert report.notes == ()
    # the same next action: after R-1 the run briefed A7 and A8 (#26, #27), whom W's next names
    assert (report.next_action.briefs, [e.seq for e in report.next_action.events]) == (("A7", "A8"), [26, 27])
    assert report.next_action.missing == ()
    # before R-1, W's next (#4) predates the returns the root had not planned on yet; before #4
    # no next was checkpointed: neither W is held to what the run did next
    assert resume(example.retriever, SATAKE, "20").next_untested == (
        "not tested: W's next was checkpointed at #4, before #18 (return), the last news before the stop, "
        "which the root had not planned on yet")
    assert resume(example.retriever, SATAKE, "3").next_untested == (
        "not tested: no next action was checkpointed by then (core-set next)")
    report = resume(example.retriever, SATAKE, "R-3")
    assert report.passed and {r.id for r in report.routes} == {
        f"{SATAKE}/{s}" for s in ("A2-6", "A6-3", "A5-8", "A5-9")}
    assert all(r.best.page == 1 for r in report.routes)
    # W as of the end is core.md itself: the last checkpoints carry its text
    assert resume(example.retriever, SATAKE).w == dict(example.workspace.core(SATAKE).fields)
    # iwahori at R-1: the library dead ends its Recall checkpoint names, and its own A3-3
    report = resume(example.retriever, IWAHORI, "R-1")
    assert report.passed
    assert {r.id for r in report.routes} == {f"{SATAKE}/A5-9", f"{SATAKE}/A5-8", f"{IWAHORI}/A3-3"}
    # at R-2 the event that first named A5-8 ("error satake-two-levels/A5-8;") comes back on page 1
    # for W's inputs line: the id with a semicolon after it names the route, as it did to find it
    report = resume(example.retriever, IWAHORI, "R-2")
    assert report.passed, [(r.id, r.best) for r in report.routes]


def test_a_run_named_twice_is_evaluated_once(example):
    once = cli(example.workspace.root, "--json", "eval", "reuse", IWAHORI)
    assert cli(example.workspace.root, "--json", "eval", "reuse", IWAHORI, IWAHORI) == once


def test_pages_must_be_positive(example):
    with pytest.raises(BadInput):
        reuse(example.retriever, IWAHORI, pages=0)
    code, text = cli(example.workspace.root, "eval", "resume", SATAKE, "--pages", "0")
    assert code == 2 and "--pages 0" in text
    # nor past the evaluator's 100: --per-step read its lists that deep (a million pages ran for hours)
    for argv in (["resume", SATAKE], ["reuse", IWAHORI], ["reuse", IWAHORI, "--per-step"]):
        code, text = cli(example.workspace.root, "eval", *argv, "--pages", "101")
        assert (code, text) == (2, "mem: --pages 101 is not a number of pages from 1 to 100\n"), argv
        assert cli(example.workspace.root, "eval", *argv, "--pages", "100")[0] in (0, 1), argv


def test_an_unknown_strategy_is_one_line_before_the_work(example, tmp_path):
    # it was a traceback after --write-queries had written its files
    code, text = cli(example.workspace.root, "eval", "reuse", IWAHORI, "--per-step", "--strategy", "nope",
                     "--write-queries", str(tmp_path / "q"))
    assert code == 2 and len(text.splitlines()) == 1 and "invalid choice: 'nope'" in text, text
    assert not (tmp_path / "q").exists()


# ---------------------------------------------------------------------------------- resume, built

def _run_with_a_hidden_route(workspace) -> None:
    """alpha: a3 (dead end, blocked) comes back alone in event 3; W names only a1 and a4."""
    workspace.write_events("alpha", [
        {"time": "2026-10-17T02:05:00Z", "actor": "root", "kind": "source", "ids": ["d1"],
         "text": "fetched d1"},
        {"time": "2026-10-17T03:00:00Z", "actor": "B7", "kind": "return", "ids": ["a1", "a2", "a4", "a5"],
         "text": "four steps"},
        {"time": "2026-10-17T03:10:00Z", "actor": "B8", "kind": "return", "ids": ["a3"],
         "text": "one more"},
    ])
    workspace.edit_step("alpha", "a3", statement="Hensel lifting fails for the quartic twist",
                        missing="a lifting lemma in residue characteristic 2")


def test_resume_fails_naming_a_blocked_route_nobody_can_find(workspace):
    _run_with_a_hidden_route(workspace)
    memory = Memory.open(workspace.root)
    memory.core_set("alpha", "inputs", "a1 proved")
    memory.core_set("alpha", "next", "audit a4")
    memory.index(progress=False)
    code, text = cli(workspace.root, "eval", "resume", "alpha")
    assert code == 1
    assert "MISSED  alpha/a3  dead_end · blocked" in text
    assert ("returned by no query: W names nothing that leads to it (name it in W, by its id or its words, "
            "with core-set before the stop: `open gaps` or `inputs`)") in text
    assert text.splitlines()[-1] == ("resume: FAIL: 0 of 1 blocked routes found within 2 pages; "
                                     "missed: alpha/a3")
    assert "W from the core-set checkpoints" in text
    # as of event 2 the route was not known yet: nothing to test, which is no pass (as eval reuse)
    code, text = cli(workspace.root, "eval", "resume", "alpha", "--until", "2")
    assert code == 1 and "blocked routes known by then: 0" in text
    assert text.splitlines()[-1] == ("resume: nothing to test: no blocked route was known by then, nor a "
                                     "next action to compare")
    code, text = cli(workspace.root, "--json", "eval", "resume", "alpha", "--until", "2")
    assert code == 1 and (json.loads(text)["pass"], json.loads(text)["verdict"]) == (False, "nothing to test")
    # once W names it, it is found (by id) on page 1, once its checkpoint is indexed: till then
    # the index lacks it, and the test says so (it blamed W alone)
    memory.core_set("alpha", "open gaps", "the quartic twist ← a3 blocked")
    code, text = cli(workspace.root, "--json", "eval", "resume", "alpha")
    assert "1 event written since the last `mem index` is not searched (alpha: 1): run `mem index alpha`" \
        in json.loads(text)["notes"]
    memory.index(progress=False)
    code, text = cli(workspace.root, "--json", "eval", "resume", "alpha")
    data = json.loads(text)
    assert code == 0 and data["pass"] and data["routes"][0]["id"] == "alpha/a3"
    assert data["routes"][0]["page"] == 1 and data["w_source"] == "checkpoints"
    assert not any("tree.json" in note for note in data["notes"])
    workspace.edit_step("alpha", "a3", statement="the quartic twist, restated")  # a step the index lacks
    data = json.loads(cli(workspace.root, "--json", "eval", "resume", "alpha")[1])
    assert ("alpha/tree.json was written after the last `mem index` read it: steps added or changed since "
            "are not searched; run `mem index alpha`") in data["notes"]


def test_resume_takes_the_same_next_action_as_the_run(workspace):
    """The design's test: "same next action; every blocked route found". W's next must name the
    agents the run briefed or redirected first after the stop; a W with no next passed."""
    _run_with_a_hidden_route(workspace)
    (workspace.root / "alpha" / "briefs").mkdir(exist_ok=True)
    for name in ("B9", "B7-continued", "B10"):
        (workspace.root / "alpha" / "briefs" / f"{name}.md").write_text("Audit a4.\n", encoding="utf-8")

    def event(time, kind, text):
        return {"time": f"2026-10-17T{time}:00Z", "actor": "root", "kind": kind, "ids": [], "text": text}

    def log(next_text):
        return [*workspace.events("alpha")[:3], event("03:20", "checkpoint", "core-set open gaps: the "
                                                      "quartic twist ← a3 blocked"),
                event("03:20", "checkpoint", f"core-set next: {next_text}"),  # the cut: #5
                event("09:00", "brief", "briefs/B9.md"), event("09:00", "redirect", "briefs/B7-continued.md"),
                event("09:30", "brief", "briefs/B10.md")]

    workspace.write_events("alpha", log("audit a4"))
    memory = Memory.open(workspace.root)
    memory.index(progress=False)
    code, text = cli(workspace.root, "--json", "eval", "resume", "alpha", "--until", "5")
    data = json.loads(text)
    assert code == 1 and [route["found"] for route in data["routes"]] == [True] and not data["pass"]
    assert data["next_action"] == {"briefs": ["B9", "B7-continued"], "events": [6, 7],
                                   "missing": ["B9", "B7-continued"], "found": False}
    code, text = cli(workspace.root, "eval", "resume", "alpha", "--until", "5")
    assert text.splitlines()[-1] == ("resume: FAIL: 1 of 1 blocked routes found within 2 pages, next action "
                                     "not in W; missed: B9, B7-continued")
    assert ("W's next does not name B9, B7-continued: checkpoint `next` (core-set next) before the "
            "stop") in text
    workspace.write_events("alpha", log("B9: audit a4 · B7 (continued): the quartic twist; not B7-24"))
    memory.index(progress=False)
    code, text = cli(workspace.root, "eval", "resume", "alpha", "--until", "5")
    assert code == 0 and text.splitlines()[-1] == (
        "resume: PASS: 1 of 1 blocked routes found within 2 pages, next action as W says")
    workspace.write_events("alpha", log("B9: audit a4, then B7-24"))  # a step id is no agent
    memory.index(progress=False)
    assert resume(memory.retriever, "alpha", "5").next_action.missing == ("B7-continued",)
    # W of then unknown (no checkpoint carries its text): the current core.md is a later W, untested
    assert resume(memory.retriever, "beta").next_action is None


def test_the_next_action_is_whom_the_run_launched_before_any_news_as_w_names_them():
    """Worked by hand on events: what counts as the next action, and what names its agent."""
    from datetime import UTC, datetime

    from mem_retrieval.eval.resume import NextAction, next_action

    def event(seq, kind, text, minute=0):
        path = text if "/" in text and " " not in text else None
        return Event("r", seq, "", datetime(2026, 1, 1, 0, minute, tzinfo=UTC), "root", kind, (), text, path)

    briefs = [event(6, "checkpoint", "core.md checkpoint"), event(7, "registry", "R-2: …"),
              event(8, "evict", "lost session: the root's context is lost"),  # no news: the test's case
              event(9, "brief", "briefs/A7-continued.md", 5), event(10, "redirect", "notes/a8.v2.md", 5),
              event(11, "brief", "briefs/A9.md", 6)]
    found = next_action({"next": "a7 (continued) · Ａ8: the fibre method"}, briefs)
    assert isinstance(found, NextAction) and (found.briefs, found.missing) == (("A7-continued", "a8"), ())
    assert [e.seq for e in found.events] == [9, 10]  # A9, a minute later, is a later action
    # at one time, what is no news between two briefs leaves them one launch; news ends it
    group = [event(9, "brief", "briefs/A2.md", 5), event(10, "checkpoint", "core-set portfolio: A2, A3", 5),
             event(11, "brief", "briefs/A3.md", 5)]
    assert next_action({"next": "A2 now"}, group).missing == ("A3",)
    assert [e.seq for e in next_action({"next": "A2 now"}, group).events] == [9, 11]
    for ended in (event(10, "return", "returns/A1.md", 5), event(10, "checkpoint", "core-set next: A3", 5)):
        found = next_action({"next": "A2 now"}, [group[0], ended, group[2]])
        assert (found.briefs, found.missing) == (("A2",), ())
    assert next_action({"next": "A7-continued, then a8"}, briefs).missing == ()  # the brief by name
    assert next_action({"next": "A7\u2013A8: the fibres"}, briefs).missing == ()  # a range names both
    # a step id is no agent, whichever hyphen it is written with
    assert next_action({"next": "audit A7\u201124 and A7-25; a8"}, briefs).missing == ("A7-continued",)
    assert next_action({"next": ""}, briefs).missing == ("A7-continued", "a8")
    # agents sharing a head are two: `lit` of lit-search names no lit-review
    pair = [event(2, "brief", "briefs/lit-review.md"), event(3, "brief", "briefs/lit\u2011search.md")]
    assert next_action({"next": "lit-search: find d2"}, pair).missing == ("lit-review",)
    assert next_action({"next": "lit: both reviews"}, pair).missing == ()
    assert next_action({"next": "lit-search: find d2"}, pair[:1]).missing == ("lit-review",)  # alone too
    # a name in punctuation is read without it (it was a TypeError)
    assert next_action({"next": "(A7): audit"}, [event(2, "brief", "briefs/(A7).md")]).missing == ()
    assert next_action({"next": "A7 audit"}, [event(2, "brief", "briefs/#A7.md")]).missing == ("#A7",)
    # news first: the launch after it was decided on it; a new next first: a plan made after the stop
    assert next_action({"next": "A7"}, [event(6, "return", "returns/A3.md"), *briefs[3:]]) == (
        "not tested: #6 (return) came before the run's next brief or redirect, which was decided on it")
    assert next_action({"next": "A7"}, [event(6, "checkpoint", "core-set next: A9 first"), *briefs[3:]]) == (
        "not tested: #6 checkpointed a new next before the run's next brief or redirect: a plan made "
        "after the stop")
    assert isinstance(next_action({"next": "A7, a8"}, [event(6, "checkpoint", "core-set next: A7, a8"),
                                                      *briefs[3:]]), NextAction)  # the same plan again
    # a brief that names no file names no agent; no launch at all, whatever news comes
    assert next_action({"next": "A8"}, [event(8, "brief", "A8: attack the fibres"), *briefs[4:]]) == (
        "not tested: #8 (brief) names no brief file, so no agent to look for in W")
    assert next_action({"next": "A8"}, [*briefs[:3], event(12, "audit", "A7-24: pass")]) == (
        "not tested: the run briefed or redirected no agent after then")


def test_resume_asks_with_a_checkpointed_w_line_of_any_length(workspace):
    """A checkpoint's text has no length limit (the log keeps what core-set was given, and other
    writers append), and `eval resume` refused every W line past 16,384 characters as a person's
    overlong query, exit 2 naming no file. It asks with what a search reads of it, as `eval reuse`
    asks with a long Fix."""
    from mem_retrieval.retrieval.query import MAX_QUERY_CHARS

    _run_with_a_hidden_route(workspace)
    long = "the quartic twist, a dead end " + "and again " * 2_000
    assert len(long) > MAX_QUERY_CHARS
    workspace.write_events("beta", [
        {"time": "2026-10-17T01:00:00Z", "actor": "root", "kind": "checkpoint", "ids": [],
         "text": f"core-set open gaps: {long}"},
        {"time": "2026-10-17T02:00:00Z", "actor": "root", "kind": "brief", "ids": ["alpha/a3"],
         "text": "avoid alpha/a3: do not retry"}])
    memory = Memory.open(workspace.root)
    memory.index(progress=False)
    report = resume(memory.retriever, "beta", "2")
    assert [(r.id, r.found) for r in report.routes] == [("alpha/a3", True)] and report.passed
    assert max(len(p.text) for p in report.probes) <= MAX_QUERY_CHARS
    assert cli(workspace.root, "eval", "resume", "beta", "--until", "2")[0] == 0
    # a line that draws nothing where a search reads it (zero-width spaces) asks nothing: left out,
    # as a blank line is, not a stop on "QUERY is empty" (exit 2, no file named)
    for nothing in ("\u200b" * 5, "\u200b" * 20_000 + " and a dead end"):
        workspace.write_events("beta", [
            {"time": "2026-10-17T01:00:00Z", "actor": "root", "kind": "checkpoint", "ids": [],
             "text": f"core-set open gaps: the quartic twist, a dead end\n{nothing}"},
            {"time": "2026-10-17T02:00:00Z", "actor": "root", "kind": "brief", "ids": ["alpha/a3"],
             "text": "avoid alpha/a3: do not retry"}])
        memory.index(progress=False)
        report = resume(memory.retriever, "beta", "2")
        assert report.passed and all(p.text.strip("\u200b ") for p in report.probes)


def test_resume_as_of_a_time_is_resumed_at_the_runs_event_then(workspace):
    """beta names alpha's dead end a3 at 02:00 on the 17th; alpha's own log, by its clock, at 03:10.
    At beta's event, as at the time of it, beta knew the route: a time cut hid it (FAIL, where the
    event's sequence number passed). A step its text alone names (a4) is known as well."""
    _run_with_a_hidden_route(workspace)
    workspace.write_events("beta", [
        {"time": "2026-10-17T01:00:00Z", "actor": "root", "kind": "checkpoint", "ids": [],
         "text": "core-set open gaps: the quartic twist, a dead end"},
        {"time": "2026-10-17T02:00:00Z", "actor": "root", "kind": "brief", "ids": ["alpha/a3"],
         "text": "avoid alpha/a3 and alpha/a4: do not retry"},
        {"time": "2026-10-17T02:30:00Z", "actor": "B1", "kind": "return", "ids": ["b1"], "text": "one step"}])
    memory = Memory.open(workspace.root)
    memory.index(progress=False)
    by_seq = resume(memory.retriever, "beta", "2")
    by_time = resume(memory.retriever, "beta", "2026-10-17T02:10:00Z")
    assert by_seq.event.seq == by_time.event.seq == 2
    assert [(r.id, r.found) for r in by_seq.routes] == [(r.id, r.found) for r in by_time.routes] == [
        ("alpha/a3", True)]
    assert by_time.passed
    found = memory.archive_hits("Hensel lifting quartic twist a4", until="beta#2")
    assert {"alpha/a3", "alpha/a4"} <= {hit.id for hit in found}  # a4: named in the text of beta's log


def test_w_as_of_an_event_is_rebuilt_from_the_checkpoints(workspace):
    memory = Memory.open(workspace.root)
    first = memory.core_set("alpha", "next", "audit a4")
    memory.core_set("alpha", "next", "audit a5\nthen a2")
    events = list(memory.workspace.events("alpha"))
    w, source, notes = w_as_of(memory, "alpha", [e for e in events if e.seq <= first.event.seq])
    assert source == "checkpoints" and w["next"] == "audit a4" and w["inputs"] == ""
    assert "are empty: phase, portfolio, open gaps, inputs" in notes[0]
    w, _, _ = w_as_of(memory, "alpha", events)
    assert w["next"] == "audit a5\nthen a2" == memory.workspace.core("alpha").get("next")
    # before any core-set: the current core.md, said so
    w, source, notes = w_as_of(memory, "alpha", events[:2])
    assert source == "core.md" and w["next"] == "audit a5\nthen a2" and "current core.md" in notes[0]


# ----------------------------------------------------------------------------------- reuse, built

def _beta_reusing(workspace, brief: str, setting: str = "Qp") -> Memory:
    """beta's Fix asks about Hensel lifting; alpha/a1 (library) is about it; beta's brief is given."""
    workspace.edit_step("alpha", "a1", statement="Hensel lifting of simple roots for p odd")
    workspace.write_library([library_line("alpha", make_step(
        "a1", statement="Hensel lifting of simple roots for p odd"))])
    tree = workspace.tree("beta")
    tree["fix"]["problem"] = "Lift simple roots of the quartic by Hensel lifting, p odd."
    tree["fix"]["setting"] = setting
    workspace.save_tree("beta", tree)
    (workspace.root / "beta" / "briefs").mkdir(exist_ok=True)
    (workspace.root / "beta" / "briefs" / "B1.md").write_text(brief, encoding="utf-8")
    return Memory.open(workspace.root)


def test_reuse_of_every_run_passes_when_those_with_something_to_test_pass(example, workspace):
    """`--all` on the example exited 1 with no verdict of its own: satake, the run the library
    came from, cites no library step. A run with nothing to test fails none of the others; one
    that fails fails them all; the last line says the verdict and how many runs had each."""
    code, text = cli(example.workspace.root, "eval", "reuse", "--all")
    assert (code, text.splitlines()[-1]) == (0, "reuse: PASS: 2 runs (1 PASS, 1 nothing to test)")
    code, text = cli(example.workspace.root, "--json", "eval", "reuse", "--all")
    data = json.loads(text)
    assert (data["verdict"], data["pass"]) == ("PASS", True)
    assert [f["verdict"] for f in data["fix"]] == ["PASS", "nothing to test"]
    memory = _beta_reusing(workspace, "Inputs (library): alpha/a1, and\n- alpha/a2 for the lift.\n")
    memory.index(progress=False)
    code, text = cli(workspace.root, "eval", "reuse", "--all")
    assert (code, text.splitlines()[-1]) == (1, "reuse: FAIL: 2 runs (1 FAIL, 1 nothing to test)")
    # with --per-step, the Fix queries of every run, apart (the run with nothing to test was gone)
    code, text = cli(example.workspace.root, "--json", "eval", "reuse", "--all", "--per-step")
    assert (code, [f["verdict"] for f in json.loads(text)["fix"]]) == (0, ["PASS", "nothing to test"])
    code, text = cli(example.workspace.root, "eval", "reuse", "--all", "--per-step")
    assert "\n\nFix queries, apart from the verdict: PASS: 2 runs (1 PASS, 1 nothing to test)\n\n" in text


def test_reuse_passes_when_the_cited_library_step_comes_back(workspace):
    memory = _beta_reusing(workspace, "Inputs (library): alpha/a1.\n")
    memory.index(progress=False)
    report = reuse(memory.retriever, "beta")
    assert report.passed and report.recall == 1.0
    (target,) = report.cited
    assert target.id == "alpha/a1" and target.best.page == 1 and target.setting == "Qp"
    assert target.cited == ("parent of b1", "B1.md:1 input")


def test_reuse_and_the_searches_name_a_library_written_since_the_last_index(workspace):
    """`eval reuse` of a run citing a step `archive-insert` admitted after the last `mem index`
    failed, the step "not found", with nothing said of the index being behind (the search reads
    the index's library rows). The test and archive-search say the library was written since;
    `mem index` ends it; an index record an older version wrote (no library in it) says nothing."""
    memory = _beta_reusing(workspace, "Inputs (library): alpha/a1 and alpha/a2.\n")
    workspace.edit_step("alpha", "a2", statement="Hensel lifting of double roots, p odd")
    memory.index(progress=False)
    note = ("solve/library.jsonl was written after the last `mem index` read it: entries added or "
            "changed since are not searched as library entries; run `mem index`")
    data = json.loads(cli(workspace.root, "--json", "eval", "reuse", "beta")[1])
    assert data["notes"] == [] and data["missed"] == ["alpha/a2"]
    assert cli(workspace.root, "archive-insert", "alpha/a2")[0] == 0
    code, text = cli(workspace.root, "--json", "eval", "reuse", "beta")
    data = json.loads(text)
    assert code == 1 and data["missed"] == ["alpha/a2"] and data["notes"] == [note]
    assert f"\nnote: {note}\n" in cli(workspace.root, "eval", "reuse", "beta")[1]
    out, err = io.StringIO(), io.StringIO()
    run_cli(["--workspace", str(workspace.root), "--json", "archive-search", "Hensel"], out=out, err=err)
    assert json.loads(out.getvalue())["notes"] == [note] and err.getvalue() == f"mem: {note}\n"
    memory.index(progress=False)
    code, text = cli(workspace.root, "--json", "eval", "reuse", "beta")
    data = json.loads(text)
    assert (code, data["recall"], data["notes"]) == (0, 1.0, [])
    read = workspace.root / ".mem" / "read.json"
    record = json.loads(read.read_text())
    del record["library"]
    read.write_text(json.dumps(record))
    workspace.write_library(workspace.library()[:1])
    assert json.loads(cli(workspace.root, "--json", "eval", "reuse", "beta")[1])["notes"] == []


def test_reuse_asks_with_records_of_any_length(workspace):
    """A valid run whose Fix problem, Fix setting (sixty hypotheses) or a step's statement is past
    what a person may type into a search was refused by `eval reuse` and `--per-step` as if the
    user had typed it ("QUERY is 20,263 characters long", "--setting is 1,673 …"): they ask with
    what the search reads of a record (``searched_part``), and the setting rule still applies."""
    from mem_retrieval.retrieval.query import MAX_QUERY_CHARS

    memory = _beta_reusing(workspace, "Inputs (library): alpha/a1.\n",
                           setting="Qp; " + "; ".join(f"assumption number {i} holds" for i in range(60)))
    tree = workspace.tree("beta")
    tree["fix"]["problem"] += " and more" * 2_500
    assert len(tree["fix"]["problem"]) > MAX_QUERY_CHARS and len(tree["fix"]["setting"]) > 1_600
    workspace.save_tree("beta", tree)
    workspace.edit_step("beta", "b1", statement="Hensel lifting for the quartic " + "again " * 3_000)
    memory.index(progress=False)
    report = reuse(memory.retriever, "beta")
    assert report.passed and [t.id for t in report.cited] == ["alpha/a1"]
    code, text = cli(workspace.root, "--json", "eval", "reuse", "beta", "--per-step")
    assert code == 0 and json.loads(text)["per_step"]["queries"] == 1


def test_reuse_fails_naming_a_cited_step_not_in_the_library(workspace):
    memory = _beta_reusing(workspace, "Inputs (library): alpha/a1, and\n- alpha/a2 for the lift.\n")
    memory.index(progress=False)
    code, text = cli(workspace.root, "eval", "reuse", "beta")
    assert code == 1
    assert "MISSED  alpha/a2  lemma · proved · setting Qp (same)" in text
    assert "not in the library (solve/library.jsonl)" in text
    assert text.splitlines()[-1] == ("reuse: FAIL: recall 1/2 = 0.50 within 2 pages (threshold 1.00); "
                                     "missed: alpha/a2")


def test_reuse_fails_naming_a_cited_step_of_an_incompatible_setting(workspace):
    memory = _beta_reusing(workspace, "Dead ends, do not retry:\n- alpha/a6: the complex case.\n")
    workspace.add_step("alpha", make_step("a6", setting="C",
                                          statement="Hensel lifting of simple roots over C"))
    workspace.write_library(workspace.library() + [library_line("alpha", make_step(
        "a6", setting="C", statement="Hensel lifting of simple roots over C"))])
    memory.index(progress=False)
    code, text = cli(workspace.root, "--json", "eval", "reuse", "beta")
    data = json.loads(text)
    assert code == 1 and data["missed"] == ["alpha/a6"] and data["recall"] == 0.5
    (miss,) = [t for t in data["cited"] if not t["found"]]
    assert miss["setting_match"] == "incompatible" and "B1.md:2 dead end" in miss["cited"]
    assert "incompatible with the Fix setting 'Qp' (M3)" in miss["missed"]


def test_reuse_names_a_hypothesis_the_fix_setting_does_not_imply(workspace):
    """Its setting is the Fix's, but one of its hypotheses is `C`: M3 refuses it, the search leaves it
    out, and the miss says which hypothesis."""
    memory = _beta_reusing(workspace, "Input (library): alpha/a6.\n")
    a6 = make_step("a6", setting="Qp", hyp=["C"], statement="Hensel lifting of simple roots")
    workspace.add_step("alpha", a6)
    workspace.write_library(workspace.library() + [library_line("alpha", a6)])
    memory.index(progress=False)
    code, text = cli(workspace.root, "--json", "eval", "reuse", "beta")
    data = json.loads(text)
    (miss,) = [t for t in data["cited"] if not t["found"]]
    assert code == 1 and data["missed"] == ["alpha/a6"] and miss["setting_match"] == "same"
    assert "its hypothesis 'C' is incompatible with the Fix setting 'Qp' (M3)" in miss["missed"]


def test_a_step_named_as_not_an_input_is_not_required(workspace):
    memory = _beta_reusing(workspace, "Input: alpha/a1.\nNot an input here (M3): alpha/a2, alpha/a9.\n")
    memory.index(progress=False)
    found = citations(memory.retriever, "beta")
    assert set(found.cited) == {"alpha/a1"} and list(found.not_cited) == ["alpha/a2"]
    assert list(found.unresolved) == ["alpha/a9"]  # names no step: listed, not required
    assert reuse(memory.retriever, "beta").passed


def test_an_item_saying_not_an_input_under_an_inputs_heading_is_not_required(workspace):
    """A list item said "not an input" itself, under a heading "Inputs (library):": it took the
    heading's label and was required, and the test failed on it."""
    memory = _beta_reusing(workspace, "Inputs (library):\n- alpha/a1 (the lifting);\n"
                                      "- alpha/a2: not an input here (M3: another setting).\n")
    memory.index(progress=False)
    found = citations(memory.retriever, "beta")
    assert set(found.cited) == {"alpha/a1"} and list(found.not_cited) == ["alpha/a2"]
    assert reuse(memory.retriever, "beta").passed
    # a remark in parentheses says nothing of the item: "(the case m = 1 is left out)" is required
    (workspace.root / "beta" / "briefs" / "B1.md").write_text(
        "Inputs (library):\n- alpha/a2 (the case p = 2 is left out (not an input there));\n",
        encoding="utf-8")
    found = citations(memory.retriever, "beta")
    assert set(found.cited) == {"alpha/a1", "alpha/a2"} and not found.not_cited  # (a1: a parent)


def test_reuse_and_resume_refuse_a_cited_run_they_cannot_read_as_bad_input(workspace):
    """A cited run's tree.json unreadable: its ids read as naming no step, dropped from what the
    run needs, and the test passed on what it could not read (`--all` and `check` said exit 2)."""
    _beta_reusing(workspace, "Input: alpha/a1.\n").index(progress=False)
    (workspace.root / "alpha" / "tree.json").write_text('{"run": "alpha", "steps": [')
    for argv in (("eval", "reuse", "beta"), ("eval", "resume", "beta"), ("eval", "reuse", "--all")):
        code, text = cli(workspace.root, *argv)
        assert code == 2 and text.startswith("mem: ") and "alpha/tree.json" in text \
            and len(text.splitlines()) == 1, (argv, text)


def test_a_fix_asking_nothing_is_nothing_to_test_not_a_failure(workspace):
    """No Fix problem or criterion: no query was asked, and every cited step was called missed."""
    _beta_reusing(workspace, "Input: alpha/a1.\n").index(progress=False)
    tree = workspace.tree("beta")
    del tree["fix"]
    workspace.save_tree("beta", tree)
    code, text = cli(workspace.root, "eval", "reuse", "beta")
    assert code == 1 and text.splitlines()[-1] == ("reuse: nothing to test: its Fix asks nothing (no problem "
                                                   "or criterion holding a word a search reads)")
    assert "MISSED" not in text and "library steps it cites: 1 (alpha/a1)" in text
    code, text = cli(workspace.root, "--json", "eval", "reuse", "beta")
    data = json.loads(text)
    assert (code, data["verdict"], data["recall"], data["missed"], data["queries"]) == (
        1, "nothing to test", None, [], [])
    tree = workspace.tree("beta")  # a Fix of punctuation and function words asks no word either
    tree["fix"] = {"problem": "—", "setting": "Qp", "criterion": "? and the", "checklist": []}
    workspace.save_tree("beta", tree)
    code, text = cli(workspace.root, "eval", "reuse", "beta")
    assert code == 1 and text.splitlines()[-1].startswith("reuse: nothing to test: its Fix asks nothing")


def test_a_parent_naming_another_runs_source_is_no_library_citation(workspace):
    # beta's b1 cites alpha's source d1 besides alpha/a1: a paper is never in the library, and the
    # Fix test failed on it for good (while --per-step, reading only library steps, dropped it)
    memory = _beta_reusing(workspace, "Inputs (library): alpha/a1.\n")
    workspace.edit_step("beta", "b1", parents=["alpha/a1", "alpha/d1"])
    assert set(citations(memory.retriever, "beta").cited) == {"alpha/a1"}
    memory.index(progress=False)
    assert reuse(memory.retriever, "beta").passed


def test_an_entry_inserted_just_before_the_run_began_is_required_and_one_with_no_time_is_not_dated(
        workspace, monkeypatch):
    """A Record inserts alpha/a7 at 08:02:53.100 and beta's first event follows at 08:02:53.400:
    both written to the second read 08:02:53, so the entry read as inserted with the run's start,
    "after" it, and was dropped. The entry is now stamped to the millisecond, the event to the
    second (as a harness writes its next), and the run's start lasts to that second's end. An entry
    with no `inserted` was listed as inserted after it too."""
    memory = _beta_reusing(workspace, "Inputs: alpha/a1, and\n- alpha/a7 for the lift.\n")
    workspace.events_path("beta").unlink()  # beta begins below
    workspace.add_step("alpha", make_step("a7", grade="minor", statement="Hensel lifting in rank two"))
    ticks = iter([datetime(2026, 12, 5, 8, 2, 53, 100_000, tzinfo=UTC),
                  datetime(2026, 12, 5, 8, 2, 53, 400_000, tzinfo=UTC)])

    class Clock(datetime):
        @classmethod
        def now(cls, tz=None):
            return next(ticks)

    monkeypatch.setattr(writes, "datetime", Clock)
    assert memory.archive_insert("alpha/a7").inserted == "2026-12-05T08:02:53.100Z"
    memory.core_set("beta", "phase", "Fix")
    assert workspace.events("beta")[0]["time"] == "2026-12-05T08:02:53Z"  # as a harness writes its next
    memory.index(progress=False)
    began = reuse(memory.retriever, "beta", runs_before=True)
    assert {t.id for t in began.cited} == {"alpha/a1", "alpha/a7"} and began.later == began.undated == ()
    workspace.write_library([{k: v for k, v in line.items() if k != "inserted" or line["id"] != "a1"}
                             for line in workspace.library()])
    memory.index(progress=False)
    code, text = cli(workspace.root, "--json", "eval", "reuse", "beta", "--runs-before")
    data = json.loads(text)
    assert [t["id"] for t in data["cited"]] == ["alpha/a7"]
    assert (data["later"], data["undated"]) == ([], ["alpha/a1"])
    code, text = cli(workspace.root, "eval", "reuse", "beta", "--runs-before")
    assert "in the library with no insertion time, so not dated before that (not required): alpha/a1" in text
    assert "inserted in the library after that" not in text


def test_reuse_as_the_run_began_or_as_of_a_time_requires_only_entries_inserted_by_then(workspace):
    # a1 entered the library at 2026-10-17T07:00Z, a2 at 2026-10-18T02:00Z; beta's first event is
    # at 2026-10-18T01:00Z: as beta began, only a1 was there to reuse
    memory = _beta_reusing(workspace, "Inputs: alpha/a1, and\n- alpha/a2 for the lift.\n")
    workspace.write_library(workspace.library() + [library_line(
        "alpha", make_step("a2", grade="minor", parents=("a1", "d1")), inserted="2026-10-18T02:00:00Z")])
    memory.index(progress=False)
    assert {t.id for t in reuse(memory.retriever, "beta").cited} == {"alpha/a1", "alpha/a2"}
    began = reuse(memory.retriever, "beta", runs_before=True)
    assert [t.id for t in began.cited] == ["alpha/a1"] and began.later == ("alpha/a2",) and began.passed
    code, text = cli(workspace.root, "--json", "eval", "reuse", "beta", "--until", "2026-10-17T08:00:00Z")
    data = json.loads(text)
    assert code == 0 and [t["id"] for t in data["cited"]] == ["alpha/a1"] and data["later"] == ["alpha/a2"]
    assert data["cut"] == "2026-10-17T08:00:00.999999+00:00"  # the end of the second it names
    spaced = cli(workspace.root, "--json", "eval", "reuse", "beta", "--until", " 2026-10-17T08:00:00Z ")
    assert spaced == (code, text)  # as every --until reads it (it was "Invalid isoformat string")
    code, text = cli(workspace.root, "eval", "reuse", "beta", "--until", "2026-10-17T06:00:00Z")
    assert code == 1 and text.splitlines()[-1].startswith(
        "reuse: nothing to test: recall 0/0 = n/a (it cites no library step inserted by then)")
    assert "inserted in the library after that (not required): alpha/a1, alpha/a2" in text
    for argv, message in [(["--until", "soon"], "--until 'soon' is not an ISO time with a zone"),
                          (["--strategy", "bm25"], "--strategy: only with --per-step"),
                          (["--max-pages", "3"], "--max-pages: only with --per-step"),  # was ignored
                          (["--max-pages", "0"], "--max-pages: only with --per-step"),
                          (["--per-step", "--pages", "3", "--max-pages", "2"],  # was raised to 3, unsaid
                           "--max-pages 2 is fewer than the 3 pages an agent reads (--pages, reuse.pages): "
                           "the evaluation reads at least those"),
                          (["--per-step", "--pages", "100000", "--max-pages", "10"],
                           "--pages 100000 is not a number of pages from 1 to 100")]:
        code, text = cli(workspace.root, "eval", "reuse", "beta", *argv)
        assert (code, text) == (2, f"mem: {message}\n")


def test_reuse_reads_only_as_many_pages_as_asked(workspace):
    # six library steps say more about the Fix than a1 does, so a1 ranks on page 2
    strong = [make_step(f"h{i}", statement=f"Hensel lifting of simple roots of the quartic, p odd, "
                                           f"case {i}") for i in range(1, 7)]
    memory = _beta_reusing(workspace, "Inputs: alpha/a1.\n")
    workspace.edit_step("alpha", "a1", statement="simple roots for p odd")
    for step in strong:
        workspace.add_step("alpha", step)
    workspace.write_library([library_line("alpha", make_step("a1", statement="simple roots for p odd"))]
                            + [library_line("alpha", step) for step in strong])
    memory.index(progress=False)
    ranked = [h.id for h in memory.archive_hits(memory.workspace.tree("beta").fix.problem, "Qp",
                                                library=True, exclude_run="beta")]
    rank = ranked.index("alpha/a1") + 1
    assert 5 < rank <= 10
    narrow = reuse(memory.retriever, "beta", pages=1)
    assert not narrow.passed and narrow.cited[0].why_missed().startswith(f"best rank {rank} (page 2)")
    assert reuse(memory.retriever, "beta", pages=2).passed


# --------------------------------------------------------------------------- reuse, step by step

def _citing(workspace) -> Memory:
    """gamma's steps cite alpha's library steps: g1 cites a1 and a2 (both library) and its own
    run's g0; g2 cites a3 (not in the library); g3 cites nothing. alpha/a1 was inserted before
    gamma started, alpha/a2 after."""
    workspace.write_library([library_line("alpha", make_step("a1"), inserted="2026-10-17T07:00:00Z"),
                             library_line("alpha", make_step("a2", grade="minor"),
                                          inserted="2026-10-20T07:00:00Z"),
                             library_line("gamma", make_step("g0"), inserted="2026-10-19T09:00:00Z")])
    workspace.add_run("gamma", [
        make_step("g0", statement="zircon base case"),
        make_step("g1", statement="quartz lifting of simple roots", parents=("alpha/a1", "alpha/a2", "g0")),
        make_step("g2", statement="beryl descent", parents=("alpha/a3",)),
        make_step("g3", statement="topaz remark")])
    workspace.write_events("gamma", [{"time": "2026-10-19T08:00:00Z", "actor": "G1", "kind": "return",
                                      "ids": ["g0", "g1", "g2", "g3"], "text": "four steps"}])
    memory = Memory.open(workspace.root)
    memory.index(progress=False)
    return memory


def test_the_derived_queries_are_the_steps_citing_other_runs_library_steps(workspace):
    from mem_retrieval.eval.derived import derive

    memory = _citing(workspace)
    derived = derive(memory.workspace, ["gamma"])
    assert [(q.qid, q.query, q.setting, q.run, q.step) for q in derived.queries] == [
        ("q-gamma/g1", "quartz lifting of simple roots", "Qp", "gamma", "gamma/g1")]
    assert derived.qrels == {"q-gamma/g1": {"alpha/a1": 1, "alpha/a2": 1}}  # not g0: its own run
    assert derived.steps == 4
    before = derive(memory.workspace, ["gamma"], runs_before=True)  # gamma started 10-19 08:00
    assert before.qrels == {"q-gamma/g1": {"alpha/a1": 1}}


PARENTS = ["satake/A2-4", "satake/A4-3"]
NAMES = {"A2-4", "A4-3", *PARENTS}


@given(st.lists(st.tuples(st.sampled_from(["A2-4", "satake/A4-3", "A2-5", "lemma", r"\Cref{A2-4}",
                                           "(A4-3).", "X_1", "satake/A2-4:"]),
                          st.sampled_from([" ", ",", ", ", "; ", "{", "} ", "(", ") ", "\n", '"'])),
                min_size=1, max_size=8))
@settings(max_examples=200, deadline=None)
def test_a_derived_query_names_none_of_its_own_links_as_the_id_lookup_reads_it(pieces):
    """Whatever the separators (braces of \\Cref, commas without a space), no word the id lookup
    reads in the derived query names a parent, and every other id-like word is still there."""
    from mem_retrieval.eval.derived import without_links
    from mem_retrieval.retrieval.query import id_words, ids_in_query

    text = "".join(word + sep for word, sep in pieces) + "holds"
    left = without_links(text, PARENTS)
    assert not set(ids_in_query(left)) & NAMES
    # by word: one the lookup reads as a name (as written, or without its end mark: A2-4:) goes
    assert [forms for forms in id_words(left) if forms != ("holds",)] == [
        forms for forms in id_words(text) if not set(forms) & NAMES and forms != ("holds",)]


def test_a_parent_named_by_a_plain_word_leaves_the_word_in_a_longer_query():
    """Only words used as references go: what the id lookup reads (inside a longer query a plain
    word, with no digit nor - _ . ' inside, is no id) and what a LaTeX cross-reference names (BM25
    reads a step's id too); a parent whose id is a plain word used as a word keeps it."""
    from mem_retrieval.eval.derived import without_links

    parents = ["pfr/submodularity", "pfr/gibbs-ineq", "pfr/A2-4", "pfr/g"]
    text = "Alternate form of submodularity, by \\Cref{gibbs-ineq} and A2-4"
    assert without_links(text, parents) == "Alternate form of submodularity, by \\Cref{} and"
    assert without_links("submodularity", parents) == ""  # one word alone is read as an id
    assert without_links("as \\cref{submodularity,g} and \\ref{x}: g", parents) == "as \\cref{,} and \\ref{x}: g"


def test_per_step_reuse_goes_through_the_paging_evaluator_leave_one_out(workspace, tmp_path):
    _citing(workspace)
    code, text = cli(workspace.root, "--json", "eval", "reuse", "gamma", "--per-step",
                     "--write-queries", str(tmp_path / "derived"), "--strategy", "bm25")
    data = json.loads(text[:text.rindex("}") + 1])
    step = data["per_step"]
    assert step["queries"] == 1 and step["judgments"] == 2 and step["steps"] == 4
    evaluation = step["evaluation"]
    assert evaluation["default"] == "rerank-graph" and set(evaluation["strategies"]) == {"rerank-graph", "bm25"}
    # g1 shares no word with a1 or a2 and nothing else cites them: only g1's own links could find
    # them, and leave-one-out hides those
    assert step["recall"] == 0.0 and step["verdict"] == "FAIL" and code == 1
    assert {m["id"] for m in step["missed"]} == {"alpha/a1", "alpha/a2"}
    written = (tmp_path / "derived" / "reuse.qrels").read_text()
    assert written == "q-gamma/g1 0 alpha/a1 1\nq-gamma/g1 0 alpha/a2 1\n"
    code, text = cli(workspace.root, "eval", "paging", "--queries",
                     str(tmp_path / "derived" / "reuse.queries.jsonl"), "--qrels",
                     str(tmp_path / "derived" / "reuse.qrels"), "--strategy", "rerank-graph")
    assert code == 0  # the written files are ordinary SPEC §10 evaluation files


def test_a_step_stated_by_its_links_alone_is_written_as_a_query_eval_paging_reads(workspace, tmp_path):
    """A statement that is only its links (a blueprint's reference) asks nothing once leave-one-out
    hides them: `--per-step` scores it as finding nothing, and the files `--write-queries` writes
    hold it as an empty query naming its step, which `eval paging` reads and scores the same (it
    refused the file); an empty query naming no step stays bad input."""
    memory = _citing(workspace)
    workspace.edit_step("gamma", "g1", statement="alpha/a1")
    memory.index(progress=False)
    folder = tmp_path / "derived"
    code, text = cli(workspace.root, "--json", "eval", "reuse", "gamma", "--per-step", "--write-queries",
                     str(folder), "--strategy", "bm25")
    step = json.loads(text[:text.rindex("}") + 1])["per_step"]
    assert code == 1 and step["queries"] == 1 and step["recall"] == 0.0
    queries = folder / "reuse.queries.jsonl"
    assert json.loads(queries.read_text()) == {"qid": "q-gamma/g1", "query": "", "setting": "Qp",
                                               "run": "gamma", "step": "gamma/g1"}
    code, text = cli(workspace.root, "--json", "eval", "paging", "--queries", str(queries), "--qrels",
                     str(folder / "reuse.qrels"), "--strategy", "bm25")
    assert code == 0, text
    figures = json.loads(text)["strategies"]["bm25"]
    assert figures["metrics"]["R@10"] == 0.0 and figures["recall_by_page"][0] == 0.0
    queries.write_text('{"qid": "q-gamma/g1", "query": "\\u200b ", "step": "gamma/g1"}\n')  # draws nothing
    code, text = cli(workspace.root, "eval", "paging", "--queries", str(queries), "--qrels",
                     str(folder / "reuse.qrels"), "--strategy", "bm25")
    assert code == 0, text
    queries.write_text('{"qid": "q1", "query": ""}\n')
    code, text = cli(workspace.root, "eval", "paging", "--queries", str(queries), "--qrels",
                     str(folder / "reuse.qrels"))
    assert (code, text) == (2, f"mem: {queries}:1: query: must not be empty\n")


def test_a_derived_query_leaves_out_the_ids_of_its_own_inputs(workspace):
    """A statement naming its inputs (written once they were found) is a query with its links in
    it: an id lookup put them first. Each word naming a parent, globally or by its step id alone,
    is left out; other ids stay."""
    from mem_retrieval.eval.derived import derive

    memory = _citing(workspace)
    workspace.edit_step("gamma", "g1", statement="quartz lifting by alpha/a1,\na2 and (g0); not "
                                                 "alpha/a3 by \\Cref{a2},a1")
    (query,) = derive(memory.workspace, ["gamma"]).queries
    assert query.query == "quartz lifting by , and (); not alpha/a3 by \\Cref{},"
    memory.index(progress=False)
    code, text = cli(workspace.root, "eval", "reuse", "gamma", "--per-step")
    assert code == 1 and "mean recall within 2 pages = 0.000" in text  # as without the ids


def test_the_verdict_reads_the_threshold_and_says_when_there_is_nothing_to_test(workspace, tmp_path):
    memory = _citing(workspace)
    workspace.edit_step("alpha", "a1", statement="quartz lifting of simple roots, the base")
    workspace.edit_step("alpha", "a2", statement="statement of a2 about topaz")
    memory.index(progress=False)
    code, text = cli(workspace.root, "eval", "reuse", "gamma", "--per-step")
    assert text.splitlines()[-1] == ("reuse per step: PASS: 1 of 4 steps cite the library (2 "
                                     "citations); mean recall within 2 pages = 0.500 (rerank-graph; "
                                     "threshold 0.50)") and code == 0
    strict = tmp_path / "strict.toml"
    strict.write_text("[reuse]\nstep_recall = 0.75\n")
    code, text = cli(workspace.root, "--config", str(strict), "eval", "reuse", "gamma", "--per-step")
    assert code == 1 and "FAIL" in text.splitlines()[-1] and "threshold 0.75" in text.splitlines()[-1]
    code, text = cli(workspace.root, "eval", "reuse", "alpha", "--per-step")
    assert code == 1 and text.splitlines()[-1].startswith("reuse per step: nothing to test: 0 of 5 steps")


def test_reuse_of_every_run_of_a_workspace_without_runs_is_nothing_to_test(tmp_path):
    """It printed an empty line and exited 0: a test that tests nothing passed."""
    (tmp_path / "empty").mkdir()
    code, text = cli(tmp_path / "empty", "eval", "reuse", "--all")
    assert (code, text) == (1, "reuse: nothing to test (the workspace has no runs)\n")
    import jsonschema

    from mem_retrieval.functions import output_schema

    code, text = cli(tmp_path / "empty", "--json", "eval", "reuse", "--all")
    data = json.loads(text)
    assert (code, data) == (1, {"fix": [], "verdict": "nothing to test", "pass": False})
    jsonschema.validate(data, output_schema("eval-reuse"))


def test_reuse_refuses_an_empty_until_rather_than_reading_it_as_now(workspace):
    """An unset variable in a script (`--until "$T"`) is no time: resume and the searches refuse
    it; reuse tested memory as it is now."""
    code, text = cli(workspace.root, "eval", "reuse", "alpha", "--until", "")
    assert (code, text) == (2, "mem: --until '' is not an ISO time with a zone\n")


# ------------------------------------------------------------------- reuse as the run met memory

def _fix_asking(workspace, problem: str) -> None:
    tree = workspace.tree("beta")
    tree["fix"]["problem"], tree["fix"]["criterion"] = problem, "decide it"
    workspace.save_tree("beta", tree)


def test_the_fix_is_asked_as_memory_stood_before_the_run_began(workspace):
    """The Fix test is the design's Recall, before the portfolio: beta's own steps (written after
    it) neither vote nor count, nor does a step of another run citing one of them. alpha/a1 shares
    no word with beta's Fix; only b1, beta's own step citing it, stood near the Fix and voted for
    it, so that the test found what the run went on to cite through the run itself."""
    workspace.edit_step("alpha", "a1", statement="zircon crystal growth")
    workspace.write_library([library_line("alpha", make_step("a1", statement="zircon crystal growth"))])
    _fix_asking(workspace, "quartz lifting of simple roots")
    workspace.edit_step("beta", "b1", statement="quartz lifting of simple roots, the base case")
    memory = Memory.open(workspace.root)
    memory.index(progress=False)
    report = reuse(memory.retriever, "beta")
    (target,) = report.cited
    assert (target.id, target.best, report.verdict) == ("alpha/a1", None, "FAIL")
    # another run's step near the Fix citing a1 votes for it (memory before beta began) ...
    workspace.add_run("gamma", [make_step("g1", statement="quartz lifting of simple roots, again",
                                          parents=("alpha/a1",))])
    memory.index(progress=False)
    report = reuse(memory.retriever, "beta")
    assert report.passed and report.cited[0].best.rank == 1
    # ... unless it cites beta's own step too: then it was written after beta began
    workspace.edit_step("gamma", "g1", parents=["alpha/a1", "beta/b1"])
    memory.index(progress=False)
    assert reuse(memory.retriever, "beta").cited[0].best is None


def test_runs_before_asks_the_library_as_the_run_met_it(workspace):
    """`--runs-before` requires only the entries inserted before the run's first event, and only
    they are candidates: a2, inserted after beta began and stated as beta's Fix is, ranked
    before a1 in a test that said "as of the run's start"."""
    memory = _beta_reusing(workspace, "Inputs: alpha/a1.\n")
    problem = workspace.tree("beta")["fix"]["problem"]
    workspace.edit_step("alpha", "a2", statement=problem)
    workspace.write_library(workspace.library() + [library_line(
        "alpha", make_step("a2", grade="minor", statement=problem), inserted="2026-10-18T02:00:00Z")])
    memory.index(progress=False)
    assert reuse(memory.retriever, "beta").cited[0].best.rank == 2  # a2 first: the library today
    began = reuse(memory.retriever, "beta", runs_before=True)
    assert began.cited[0].best.rank == 1 and began.cut.startswith("the run's start")


def test_runs_before_per_step_ranks_only_entries_inserted_before_the_run_began(workspace, tmp_path):
    """gamma began at 2026-10-19T08:00; alpha/a2 entered the library at 2026-10-20: with
    `--runs-before` it is neither required of g1 nor a hit for it (it took a place on page 1)."""
    _citing(workspace)
    workspace.edit_step("alpha", "a2", statement="quartz lifting of simple roots")
    memory = Memory.open(workspace.root)
    memory.index(progress=False)
    runs = tmp_path / "runs.trec"
    code, text = cli(workspace.root, "--json", "eval", "reuse", "gamma", "--per-step", "--runs-before",
                     "--trec-out", str(runs))
    data = json.loads(text[:text.rindex("}") + 1])
    assert data["per_step"]["judgments"] == 1 and data["per_step"]["start_unknown"] == []
    ranked = [line.split()[2] for line in runs.read_text().splitlines()]
    assert "alpha/a2" not in ranked and "alpha/a1" in ranked
    cli(workspace.root, "--json", "eval", "reuse", "gamma", "--per-step", "--trec-out", str(runs))
    assert [line.split()[2] for line in runs.read_text().splitlines()][0] == "alpha/a2"  # today


def test_per_step_names_why_the_search_leaves_a_citation_out(workspace):
    """g1 (setting Qp) cites alpha/a1, stated over F_q((t)): the citation breaks M3 (`mem check`
    says so), the search leaves a1 out, and the miss says why, as the Fix test's does."""
    _citing(workspace)
    workspace.edit_step("alpha", "a1", setting="F_q((t))")
    workspace.write_library([library_line("alpha", make_step("a1", setting="F_q((t))"))])
    memory = Memory.open(workspace.root)
    memory.index(progress=False)
    code, text = cli(workspace.root, "--json", "eval", "reuse", "gamma", "--per-step")
    (miss,) = json.loads(text[:text.rindex("}") + 1])["per_step"]["missed"]
    assert (miss["id"], miss["rank"]) == ("alpha/a1", None)
    assert miss["why"] == ("its setting 'F_q((t))' is incompatible with the step's setting 'Qp' (M3): "
                           "the search leaves it out")
    code, text = cli(workspace.root, "eval", "reuse", "gamma", "--per-step")
    assert "  gamma/g1 -> alpha/a1: not found (its setting 'F_q((t))' is incompatible" in text


def test_per_step_tells_a_step_claiming_more_than_its_input_from_an_m3_break(workspace):
    """g1 claims 'nonarch-local' but cites alpha/a1, stated over F_q((t)), in a run whose Fix
    setting is F_q((t)): M3 (judged by the Fix setting) holds and `mem check` passes it, yet its
    miss said "(M3)", as though check reported it."""
    _citing(workspace)
    workspace.edit_step("alpha", "a1", setting="F_q((t))")
    workspace.write_library([library_line("alpha", make_step("a1", setting="F_q((t))"))])
    tree = workspace.tree("gamma")
    tree["fix"]["setting"] = "F_q((t))"
    workspace.save_tree("gamma", tree)
    workspace.edit_step("gamma", "g1", setting="nonarch-local", parents=["alpha/a1"])
    memory = Memory.open(workspace.root)
    memory.index(progress=False)
    gamma = [v for v in memory.check().violations if v.file.startswith("gamma")]
    assert not [v for v in gamma if "alpha/a1" in v.message]
    code, text = cli(workspace.root, "--json", "eval", "reuse", "gamma", "--per-step")
    (miss,) = json.loads(text[:text.rindex("}") + 1])["per_step"]["missed"]
    assert (miss["id"], miss["rank"]) == ("alpha/a1", None)
    assert miss["why"] == ("its setting 'F_q((t))' is incompatible with the step's setting 'nonarch-local' "
                           "(not M3: its run's Fix setting 'F_q((t))' allows it; the step claims more than "
                           "this input gives): the search leaves it out")


def test_runs_before_says_when_a_run_has_no_start(workspace):
    """A run without events has no start: `--runs-before` requires all it cites, and says so
    rather than printing what it prints without the flag; a Fix setting of white space is none."""
    memory = _beta_reusing(workspace, "Inputs: alpha/a1.\n", setting="   ")
    workspace.write_events("beta", [])
    memory.index(progress=False)
    note = ("--runs-before: beta has no events, so nothing says when it started: every library "
            "entry it cites is required, whenever inserted")
    code, text = cli(workspace.root, "eval", "reuse", "beta", "--runs-before")
    assert note in text.splitlines() and "setting —," in text.splitlines()[0] and code == 0
    code, text = cli(workspace.root, "--json", "eval", "reuse", "beta", "--runs-before", "--per-step")
    data = json.loads(text[:text.rindex("}") + 1])
    assert data["per_step"]["start_unknown"] == ["beta"] and data["fix"][0]["start_unknown"]
    code, text = cli(workspace.root, "--json", "eval", "reuse", "beta")
    assert json.loads(text)["start_unknown"] is False


def test_per_step_counts_the_steps_written_by_until(workspace):
    from datetime import datetime, timezone

    from mem_retrieval.eval.derived import derive

    memory = _citing(workspace)  # gamma's one event, at 2026-10-19T08:00, names its four steps
    before = derive(memory.workspace, ["gamma"], until=datetime(2026, 10, 19, 7, tzinfo=timezone.utc))
    assert (before.steps, before.queries) == (0, [])
    after = derive(memory.workspace, ["gamma"], until=datetime(2026, 10, 19, 9, tzinfo=timezone.utc))
    assert (after.steps, len(after.queries)) == (4, 1)


def test_a_search_hiding_a_run_or_cutting_the_library_checks_its_values(workspace):
    from datetime import datetime, timezone

    memory = Memory.open(workspace.root)
    memory.index(progress=False)
    at = datetime(2026, 10, 18, tzinfo=timezone.utc)
    for options, said in [({"hide_run": 3}, "hide_run must be a string"),
                          ({"hide_run": "beta", "hide": "beta/b1"}, "hide_run hides a step"),
                          ({"library_before": at}, "library_before is a time with a zone, and only"),
                          ({"library_before": "2026-10-18", "library": True}, "library_before is a time")]:
        with pytest.raises(BadInput) as raised:
            memory.archive_search("statement", **options)
        assert str(raised.value).startswith(said), options
    hits = memory.archive_hits("statement", hide_run="beta", library=True, library_before=at)
    assert [hit.id for hit in hits] == ["alpha/a1"]  # the one entry, inserted 2026-10-17T07:00Z
    assert memory.archive_hits("statement", library=True, library_before=at.replace(day=17)) == []


def test_a_cited_step_citing_the_run_itself_is_not_required_of_its_fix(workspace):
    """gamma/g1 cites beta's b1 and beta's b2 cites g1 back (runs that draw on each other): g1 was
    written after beta began, so the Fix, asked as memory stood then, cannot find it. It was
    required all the same, and missed with no reason: FAIL on a step the test had hidden."""
    memory = _beta_reusing(workspace, "Inputs (library): alpha/a1.\n")
    g1 = make_step("g1", statement="Hensel lifting of simple roots, the quartic case", parents=("beta/b1",))
    workspace.add_run("gamma", [g1])
    workspace.write_library(workspace.library()
                            + [library_line("gamma", g1, inserted="2026-10-19T07:00:00Z")])
    workspace.add_step("beta", make_step("b2", parents=("gamma/g1",)))
    memory.index(progress=False)
    report = reuse(memory.retriever, "beta")
    assert [t.id for t in report.cited] == ["alpha/a1"] and report.after == ("gamma/g1",)
    assert report.passed
    code, text = cli(workspace.root, "eval", "reuse", "beta")
    assert code == 0 and ("citing the run's own steps, so written after it began (not required): "
                          "gamma/g1") in text.splitlines()


def test_reuse_of_many_runs_lists_the_runs_once_and_searches_only_for_runs_citing_something(
        example, tmp_path, monkeypatch):
    """`eval reuse --all` listed every run folder once for each run it tested, and each
    query derived for `--per-step` (`derive`) listed them again: 8,000 steps in 1,790 runs of 5
    took 119 s, in 40 runs 5 s. And it asked both Fix searches of a run citing nothing (most runs
    there) before finding there was nothing to look for. Counted, not timed."""
    from mem_retrieval.eval.derived import derive
    from mem_retrieval.eval.synthetic import generate
    from mem_retrieval.records.workspace import Workspace
    from mem_retrieval.retrieval.retriever import Retriever

    listed = []
    real_runs = Workspace.runs
    monkeypatch.setattr(Workspace, "runs", lambda ws: listed.append(1) or real_runs(ws))
    generate(tmp_path / "many", 300, run_steps=5)
    memory = Memory.open(tmp_path / "many")
    runs = real_runs(memory.workspace)
    cited = [citations(memory.retriever, run) for run in runs]
    assert len(runs) > 50 and any(found.cited for found in cited) and listed == []
    derived = derive(memory.workspace, runs)
    assert derived.queries and len(listed) <= 1, len(listed)
    searched = []
    real_hits = Retriever.archive_hits
    monkeypatch.setattr(Retriever, "archive_hits",
                        lambda r, *a, **k: searched.append(1) or real_hits(r, *a, **k))
    nothing = reuse(example.retriever, SATAKE)  # cites no library step
    assert (nothing.cited, nothing.recall, searched) == ((), None, [])
    assert len(reuse(example.retriever, IWAHORI).probes) == len(searched) == 2
