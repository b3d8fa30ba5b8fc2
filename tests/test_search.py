"""Search on the example workspace: ids first, BM25 candidates, rerank, settings, pages."""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import library_line, make_step, without_root_override
from mem_retrieval.eval.judgments import read_queries
from mem_retrieval.records.errors import BadInput, Refused
from mem_retrieval.memory import Memory
from mem_retrieval.retrieval.query import ArchiveQuery, ids_in_query

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "workspace"

# the `example` fixture (the example workspace copied and indexed once) is in conftest.py


def ids(page) -> list[str]:
    return [hit.id for hit in page.hits]


@pytest.mark.parametrize("query", ["A5-7", "satake-two-levels/A5-7", "A5-9",
                                   "satake-two-levels/A5-9"])
def test_an_id_returns_its_step_first(example, query):
    assert ids(example.archive_search(query))[0] == "satake-two-levels/" + query.split("/")[-1]


def test_ids_inside_a_longer_query_rank_first(example):
    page = example.archive_search("what became of satake-two-levels/A5-8 and A2-4 in the audit")
    assert ids(page)[:3] == ["satake-two-levels/A5-8", "iwahori-two-levels/A2-4", "satake-two-levels/A2-4"]
    assert all(hit.via == "id" for hit in page.hits[:3])


def test_plain_words_are_not_taken_for_ids():
    assert ids_in_query("concave functions and A5-7") == ["A5-7"]
    assert ids_in_query("concave") == ["concave"]  # a one-word query may be an id


def test_the_design_query(example):
    page = example.archive_search("GL2m/Sp2m generation", setting="F_q((t))")
    hit = next(h for h in page.hits if h.id == "satake-two-levels/A5-7")
    assert page.page == 1 and hit.setting == "every non-arch. local F"
    assert hit.setting_match == "implied"
    assert all(h.setting_match in ("same", "implied", "unknown") for h in page.hits)


def test_no_transfer_by_analogy(example):
    query = "trace dictionary Frobenius trace sheaves to functions"
    anywhere = {h.id: h for h in all_hits(example, query, setting="Q_p", any_setting=True)}
    # proved only over F_q((t)): found, and marked incompatible, when asked for any setting
    assert anywhere["satake-two-levels/A4-3"].setting_match == "incompatible"
    every = all_hits(example, query, setting="Q_p")
    assert "satake-two-levels/A4-3" not in [h.id for h in every]
    assert every and all(h.setting_match != "incompatible" for h in every)


def test_the_setting_rule_weighs_hypotheses_as_m3_does(workspace, mem):
    """A step is left out when the query's setting does not imply its setting or one of its
    hypotheses that the ontology knows (a hypothesis outside it, `p odd`, never counts): the rule
    `mem check` applies as M3, by every strategy, kept open or not, after an edit of `hyp` alone."""
    from mem_retrieval.retrieval.strategies import STRATEGIES

    def step(step_id, setting, hyp):
        return make_step(step_id, statement=f"Zorb tower descent {step_id}", setting=setting, hyp=hyp)

    workspace.add_run("gamma", [step("odd", "nonarch-local", ["p odd"]),           # kept: not a setting
                                step("padic", "nonarch-local", ["p-adic local"]),  # F_q((t)) ⇏ p-adic
                                step("local", "local", ["nonarch-local"]),          # F_q((t)) ⇒ both
                                step("complex", "C", [])])                          # setting refused
    kept = ["gamma/local", "gamma/odd"]
    memory = Memory.open(workspace.root)
    memory.index(progress=False)

    def found(memory, strategy, **kw):
        query = ArchiveQuery("Zorb tower descent", strategy=strategy, setting="F_q((t))", **kw)
        return sorted(c.gid for c in memory.retriever.ranked(query) if c.gid.startswith("gamma/"))

    for strategy in STRATEGIES:
        assert found(memory, strategy) == kept, strategy
        assert len(found(memory, strategy, any_setting=True)) == 4, strategy
    page = memory.archive_search("Zorb tower descent", setting="F_q((t))")
    assert {h.id: h.setting_match for h in page.hits if h.id.startswith("gamma/")} == {
        "gamma/odd": "implied", "gamma/local": "implied"}
    # what the rule leaves out says why: with --any-setting, and when named by id (setting_match
    # judges the setting, SPEC §8; unmet_hyp the hypotheses)
    anywhere = memory.archive_search("Zorb tower descent", setting="F_q((t))", any_setting=True)
    assert {h.id: (h.setting_match, h.unmet_hyp) for h in anywhere.hits if h.id.startswith("gamma/")} == {
        "gamma/odd": ("implied", ()), "gamma/local": ("implied", ()),
        "gamma/padic": ("implied", ("p-adic local",)), "gamma/complex": ("incompatible", ())}
    (named,) = memory.archive_search("gamma/padic", setting="F_q((t))").hits
    assert (named.id, named.via, named.unmet_hyp) == ("gamma/padic", "id", ("p-adic local",))
    code, out, _ = mem("archive-search", "gamma/padic", "--setting", "F_q((t))")
    assert code == 0 and "setting: nonarch-local (implied; hyp 'p-adic local' not implied)" in out

    tree = workspace.tree("gamma")  # an edit of hyp alone, indexed incrementally
    tree["steps"][2]["hyp"] = ["Qp"]
    workspace.save_tree("gamma", tree)
    memory.index(progress=False)
    for current in (memory, Memory.open(workspace.root)):
        assert found(current, "rerank-graph") == ["gamma/odd"]
        assert found(current, "bm25") == ["gamma/odd"]


def test_unicode_and_ascii_spellings_return_the_same_hits(example):
    for a, b in [("E₆/F₄", "E6/F4"), ("GL₄/Sp₄ semismall", "GL4/Sp4 semismall")]:
        assert ids(example.archive_search(a)) == ids(example.archive_search(b))
    # LaTeX is unwrapped for BM25: the same candidates
    latex = {h.id for h in all_hits(example, r"\mathrm{GL}_{2m}", strategy="bm25")}
    assert latex == {h.id for h in all_hits(example, "GL2m", strategy="bm25")} and latex


def test_a_formula_finds_the_step_stated_with_its_shape(workspace):
    # Only the shape links the query to the chain rule: the letters differ, and the other step
    # says bbh five times; without formula shapes BM25 puts that one first.
    workspace.add_run("gamma", [
        make_step("chain", statement=r"Chain rule. $\bbH[X|Y] = \bbH[X,Y] - \bbH[Y]$"),
        make_step("bound", statement=r"Entropy bound. "
                                     r"$\bbH[X] + \bbH[Y] + \bbH[Z] \leq \bbH[X,Y,Z] + \bbH[W]$"),
    ])
    memory = Memory.open(workspace.root)
    memory.index(progress=False)
    query = ArchiveQuery(r"$\bbH[U|V]$", strategy="bm25")
    assert [c.gid for c in memory.retriever.ranked(query)][:2] == ["gamma/chain", "gamma/bound"]


def all_hits(memory, query, **kw):
    first = memory.archive_search(query, **kw)
    return [h for p in range(1, first.pages + 1) for h in memory.archive_search(query, page=p, **kw).hits]


def test_pages_partition_the_ranked_list_and_are_stable(example):
    query = "Hecke algebra generation at function level"
    ranked = [c.gid for c in example.retriever.ranked(ArchiveQuery(query))]
    paged = [h.id for h in all_hits(example, query)]
    assert paged == ranked and len(set(paged)) == len(paged)  # oracle: the unpaged list
    assert paged == [h.id for h in all_hits(example, query)]  # same again
    first = example.archive_search(query)
    assert first.total == len(ranked) and first.pages == (len(ranked) + 4) // 5
    with pytest.raises(Refused, match=f"only {first.pages} pages"):
        example.archive_search(query, page=first.pages + 1)


def test_rerank_reorders_only_bm25_candidates(example):
    for query in [q.query for q in read_queries(EXAMPLE / "eval" / "queries.jsonl")][:15]:
        bm25 = {c.gid for c in example.retriever.ranked(ArchiveQuery(query, strategy="bm25"))}
        rerank = [c.gid for c in example.retriever.ranked(ArchiveQuery(query, strategy="rerank"))]
        assert set(rerank) == bm25  # nothing BM25 did not find is added
    scores = [c.score for c in example.retriever.ranked(ArchiveQuery("E6/F4 sheaf level"))]
    assert scores == sorted(scores, reverse=True)


def test_the_embedding_never_adds_a_candidate_to_the_graph_strategy(example):
    """rerank-graph's candidates are BM25's and the voted steps; a step neither found nor voted
    for is never added, however close its vector."""
    for query in [q.query for q in read_queries(EXAMPLE / "eval" / "queries.jsonl")][:15]:
        bm25 = {c.gid for c in example.retriever.ranked(ArchiveQuery(query, strategy="bm25"))}
        _, found = example.retriever.candidates(ArchiveQuery(query, strategy="rerank-graph"))
        assert all(c.gid in bm25 or c.vote > 0 for c in found)
        assert all(c.bm25 == 0 for c in found if c.gid not in bm25)


def test_filters_run_inside_the_query(example):
    assert {h.run for h in all_hits(example, "GL2m/Sp2m", run="iwahori-two-levels")} == {"iwahori-two-levels"}
    assert {h.kind for h in all_hits(example, "E6/F4", kind="dead_end")} == {"dead_end"}
    assert {h.status for h in all_hits(example, "SL2/SO2", status="proved")} == {"proved"}
    # a hostile run name selects no run at all: it is no slug, bad input
    with pytest.raises(BadInput, match="is not a run slug"):
        example.archive_search("GL2m", run="x' OR '1'='1")
    assert example.archive_search("GL2m", run="x-or-1-1").total == 0


def test_archive_get_gives_the_whole_step(example):
    view = example.archive_get("satake-two-levels/A5-7").as_dict()
    assert view["parents"] == ["A5-5", "A5-6", "d2"] and view["audit"]["grade"] == "minor"
    assert view["hyp"] == ["F non-archimedean local"] and view["proof"]
    with pytest.raises(Refused, match="nearest: satake-two-levels/A5-7"):
        example.archive_get("satake-two-levels/A5-77")


def test_a_bare_id_that_several_runs_use_is_refused_not_answered_by_the_first_run(example):
    # both example runs have an A2-4 (different statements, different parents) and a source d1
    for ref, kind in (("A2-4", "parents"), ("d1", "origin")):
        with pytest.raises(Refused, match=f"'{ref}' is an id in several runs: "
                           f"iwahori-two-levels/{ref}, satake-two-levels/{ref}; name one"):
            example.archive_get(ref)
        views = {run: example.archive_get(ref, run=run).as_dict()
                 for run in ("iwahori-two-levels", "satake-two-levels")}
        assert views["iwahori-two-levels"] != views["satake-two-levels"]
        assert all(kind in view for view in views.values())
    assert example.archive_get("A2-4", run="satake-two-levels").as_dict()["parents"] == ["A2-2", "A2-3"]
    # an id that one run alone uses is still found without its run
    assert example.archive_get("A5-7").as_dict()["id"] == "satake-two-levels/A5-7"


def test_archive_get_with_a_run_that_names_none_says_so_not_no_step(example):
    with pytest.raises(Refused, match=r"^run 'nope' names no run of this workspace \(runs: "
                                      r"iwahori-two-levels, satake-two-levels\)$"):
        example.archive_get("A5-7", run="nope")
    with pytest.raises(Refused, match=r"^'satake-two-level/A5-7': run 'satake-two-level' names no run of "
                                      r"this workspace; nearest: satake-two-levels"):
        example.archive_get("satake-two-level/A5-7")


def test_archive_get_with_a_run_judges_it_as_archive_insert_does(example):
    """A global id is always accepted (SPEC §2), whatever the run in context: an auditor of
    iwahori-two-levels reading its parent satake-two-levels/A5-7 with that run was refused; a bare
    id missing from the run given says which run it looked in."""
    for run in ("iwahori-two-levels", "satake-two-levels", None):
        assert example.archive_get("satake-two-levels/A5-7", run=run).as_dict()["id"] == \
            "satake-two-levels/A5-7"
    with pytest.raises(Refused, match=r"^satake-two-levels/A5-7 is already in the library"):
        example.archive_insert("satake-two-levels/A5-7", run="iwahori-two-levels")  # that step's
    with pytest.raises(Refused, match=r"^no step 'A5-7' in run 'iwahori-two-levels'; nearest: "):
        example.archive_get("A5-7", run="iwahori-two-levels")


def test_a_bare_id_missing_from_the_run_given_is_told_the_runs_nearest_ids_and_the_same_id_elsewhere(example):
    """With `--run`, "nearest" gave other runs' steps first, the same id in another run at the head
    (`A3-9 --run iwahori-two-levels`: satake-two-levels/A3-9, satake-two-levels/A5-9, then the run's
    own A3-3…): an agent taking the first cited another run's step where it meant its own. Now the
    run's nearest ids, then that id in other runs apart (a wrong run meant it), in archive-get and
    recall-search alike; without a run, every run's ids as before."""
    iwahori = "iwahori-two-levels"
    own = [f"{iwahori}/A3-3", f"{iwahori}/A3-2", f"{iwahori}/A3-1"]
    with pytest.raises(Refused) as refused:
        example.archive_get("A3-9", run=iwahori)
    said = str(refused.value)
    assert said.startswith(f"no step 'A3-9' in run '{iwahori}'; nearest: {', '.join(own)}, ")
    assert said.endswith("; the same id in other runs: satake-two-levels/A3-9")
    assert said.split("nearest: ")[1].split("; ")[0].count("satake-two-levels/") == 0
    (note,) = example.recall_search(None, id="A3-9", run=iwahori).notes
    assert note.message == f"'A3-9' names no step of run '{iwahori}'" + said.split(f"'{iwahori}'")[1]
    notes = [n.message for n in example.archive_search("A3-9", run=iwahori).notes if n.param == "query"]
    assert notes == ["'A3-9': the filters of this search leave out the step with this id (satake-two-levels/"
                     f"A3-9); the hits are a text search; nearest: {', '.join(own)}, {iwahori}/A6-2, "
                     f"{iwahori}/A5-4"]
    with pytest.raises(Refused) as refused:  # no run: the nearest across runs, the same id first
        example.archive_get("A3-99")
    assert str(refused.value).startswith("no step 'A3-99'; nearest: satake-two-levels/A3-9, ")
    assert "other runs" not in str(refused.value)


def test_recall_by_id_lists_every_event_naming_the_step_in_log_order(example):
    page = example.recall_search(id="A5-8", run="satake-two-levels")
    events = [json.loads(line) for line in (EXAMPLE / "satake-two-levels" / "memory" / "events.jsonl")
              .read_text().splitlines() if line.strip()]
    expected = [i + 1 for i, e in enumerate(events) if "A5-8" in e["ids"]]
    seqs = [h.seq for p in range(1, page.pages + 1)
            for h in example.recall_search(id="A5-8", run="satake-two-levels", page=p).hits]
    assert seqs == expected and len(expected) >= 2


def test_recall_by_a_bare_id_several_runs_use_is_refused_not_merged(example):
    """The oracle: each run's own events naming A2-2, read from its events.jsonl."""
    def naming(run: str) -> list[int]:
        lines = (EXAMPLE / run / "memory" / "events.jsonl").read_text().splitlines()
        return [n for n, line in enumerate(lines, start=1)
                if line.strip() and {"A2-2", f"{run}/A2-2"} & set(json.loads(line)["ids"])]

    with pytest.raises(Refused, match=r"^'A2-2' is an id in several runs: iwahori-two-levels/A2-2, "
                                      r"satake-two-levels/A2-2; name one \(run/A2-2\) or give its run$"):
        example.recall_hits(id="A2-2")
    for run in ("iwahori-two-levels", "satake-two-levels"):
        expected = naming(run)
        assert expected
        assert [h.seq for h in example.recall_hits(id="A2-2", run=run)] == expected
        assert [(h.run, h.seq) for h in example.recall_hits(id=f"{run}/A2-2")] == [
            (run, seq) for seq in expected]
    assert {h.run for h in example.recall_hits(id="A5-8")} == {"satake-two-levels"}


def test_recall_by_id_means_the_runs_own_step_and_lists_events_in_time_order(workspace, mem):
    """A bare id with a run is that run's step (SPEC §2): an event of alpha naming beta/a1 is not
    about alpha/a1. Events of several runs naming one step come in time order, each run's in its
    log order."""
    workspace.add_step("beta", make_step("a1"))
    events = workspace.events("alpha") + [
        {"time": "2026-10-17T05:00:00Z", "actor": "root", "kind": "audit", "ids": ["beta/a1"],
         "text": "beta's a1 has the wrong sign"},
        {"time": "2026-10-17T06:00:00Z", "actor": "root", "kind": "audit", "ids": ["a1"],
         "text": "a1 checked again"}]
    workspace.write_events("alpha", events)
    workspace.write_events("beta", [{"time": "2026-10-17T04:00:00Z", "actor": "B1", "kind": "return",
                                     "ids": ["b1", "alpha/a1"], "text": "one step"}])
    assert mem("index")[0] == 0

    def listed(*argv: str) -> list[str]:
        code, out, _ = mem("--json", "recall-search", *argv)
        return [hit["id"] for hit in json.loads(out)["hits"]] if code == 0 else []

    assert listed("--id", "a1", "--run", "alpha") == ["alpha#2", "alpha#4"]
    assert listed("--id", "alpha/a1") == ["alpha#2", "beta#1", "alpha#4"]  # 03:42, 04:00, 06:00
    assert listed("--id", "beta/a1") == listed("--id", "beta/a1", "--run", "alpha") == ["alpha#3"]
    assert listed("--id", "a1", "--run", "beta") == []  # beta's own events never name its a1


def test_recall_gives_briefs_whole_and_names_the_events_the_index_does_not_hold(workspace, mem):
    """A brief comes whole in --json (its first 300 characters as the excerpt); an event's text is
    shown whole. Events appended after `mem index` cannot be searched until the next one: every
    page says how many, of which runs, and the command that indexes them; none once indexed."""
    brief = "pair model audit notes. " + "filler " * 400 + "platypus verdict"
    (workspace.root / "alpha" / "briefs").mkdir()
    (workspace.root / "alpha" / "briefs" / "A2.md").write_text(brief, encoding="utf-8")
    long_text = "the sign " + "word " * 80 + "wombat verdict"
    workspace.write_events("alpha", workspace.events("alpha") + [
        {"time": "2026-10-17T04:00:00Z", "actor": "root", "kind": "brief", "ids": ["a4"],
         "text": "briefs/A2.md"},
        {"time": "2026-10-17T04:10:00Z", "actor": "audit", "kind": "audit", "ids": ["a4"],
         "text": long_text}])
    assert mem("index")[0] == 0
    code, out, err = mem("--json", "recall-search", "platypus")
    hit = json.loads(out)["hits"][0]
    assert (code, err, hit["id"], hit["body"]) == (0, "", "alpha#3", brief)
    assert hit["excerpt"] == " ".join(brief[:300].split())
    code, out, _ = mem("recall-search", "platypus")
    assert f"({len(brief):,} characters: alpha/briefs/A2.md; whole as body in the --json output)" in out
    code, out, _ = mem("recall-search", "wombat verdict")
    assert code == 0 and "wombat verdict" in out  # the event's own text, not cut at 200 characters
    assert json.loads(mem("--json", "recall-search", "wombat")[1])["hits"][0]["body"] is None

    with workspace.events_path("alpha").open("a", encoding="utf-8") as log:
        for minute in (20, 30):
            log.write(json.dumps({"time": f"2026-10-17T04:{minute}:00Z", "actor": "root",
                                  "kind": "audit", "ids": ["a4"], "text": "echidna"}) + "\n\n")
    workspace.write_events("gamma-new", [{"time": "2026-10-17T05:00:00Z", "actor": "root",
                                          "kind": "audit", "ids": [], "text": "echidna"}])
    workspace.add_run("gamma-new", [make_step("g1")])
    unseen = ("mem: 3 events written since the last `mem index` are not searched (alpha: 2, "
              "gamma-new: 1): run `mem index alpha gamma-new`\n")
    assert mem("recall-search", "echidna")[::2] == (1, unseen)
    assert mem("recall-search", "platypus")[::2] == (0, unseen)  # a page with hits says it too
    assert mem("recall-search", "--id", "a4", "--run", "alpha")[2] == unseen.replace(
        "3 events", "2 events").replace(", gamma-new: 1", "").replace(" gamma-new`", "`")
    assert mem("recall-search", "--id", "b1", "--run", "beta")[2] == ""  # beta's log is indexed
    assert mem("index", "alpha", "gamma-new")[0] == 0
    code, out, err = mem("recall-search", "echidna")
    assert (code, err) == (0, "") and out.startswith("page 1 of 1 · 3 events")


def _log_note(happened: str, rest: str, *names: str) -> str:
    """The note that ``names``' logs ``happened`` after the last `mem index` read them."""
    which = (f"{names[0]}/memory/events.jsonl" if len(names) == 1 else
             f"the events.jsonl of {len(names)} runs")
    listed = "" if len(names) == 1 else f" ({', '.join(names)})"
    return f"mem: {which} {happened} after the last `mem index` read it{listed}: {rest}\n".format(
        it="it" if len(names) == 1 else "them")


_MEND = "mend {it} (`mem check` says what is wrong), then run `mem index`"


def _rewritten(*names: str) -> str:
    return _log_note("was changed (not only appended to)", "the events searched are as `mem index` read "
                     "them; run `mem index`", *names)


def _append(log, text: str = "echidna") -> None:
    with log.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"time": "2026-10-17T04:00:00Z", "actor": "root", "kind": "audit", "ids": [],
                                 "text": text}) + "\n")


def test_a_search_names_a_log_changed_otherwise_than_by_appending_since_the_last_index(workspace, mem):
    """A log is appended only (SPEC §4), and the note of events written since counts lines past
    the last indexed one: a log edited in place, cut short or removed after `mem index` went
    unsaid while the search answered from events no longer logged. read.json keeps each log's
    stamp and hash as read; bytes appended since, or the same bytes in a new file, are no change."""
    assert mem("index")[0] == 0
    alpha, beta = workspace.events_path("alpha"), workspace.events_path("beta")
    logged, beta_logged = alpha.read_bytes(), beta.read_bytes()
    _append(alpha)
    assert mem("recall-search", "five steps")[2] == ("mem: 1 event written since the last `mem index` "
                                                     "is not searched (alpha: 1): run `mem index alpha`\n")
    alpha.unlink()
    alpha.write_bytes(logged)  # the bytes read, in a new file (a copied workspace): no change
    assert mem("recall-search", "five steps")[2] == ""
    alpha.write_bytes(logged.replace(b"five steps", b"six steps!"))  # edited in place, as long
    code, out, err = mem("recall-search", "five steps")
    assert (code, err) == (0, _rewritten("alpha")) and "five steps" in out  # the index's, as it read it
    beta.write_text("")
    assert mem("recall-search", "steps")[2] == _rewritten("alpha", "beta")
    assert mem("recall-search", "steps", "--run", "beta")[2] == _rewritten("beta")
    assert mem("index", "alpha")[0] == 0  # a run read anew: its record replaced, the other's kept
    code, out, err = mem("recall-search", "six steps")
    assert (code, err) == (0, _rewritten("beta")) and "six steps" in out
    beta.unlink()  # removed: the index still holds its events
    removed = _log_note("was removed", "its events are still searched; run `mem index`", "beta")
    assert mem("recall-search", "steps")[2] == removed
    beta.mkdir()  # no file now: `mem index` refuses it until mended
    unfiled = _log_note("stopped being a file", "its events are still searched; " + _MEND, "beta")
    assert mem("recall-search", "steps")[2] == unfiled
    assert mem("index")[0] == 2
    beta.rmdir()
    beta.write_bytes(beta_logged)
    assert mem("index")[0] == 0
    assert mem("recall-search", "steps")[2] == ""
    tree = workspace.root / "beta" / "tree.json"  # a run no more, but its log still searched
    kept = tree.read_bytes()
    tree.unlink()
    tree.mkdir()
    _append(beta)
    beta.write_text("")  # changed too: what `mem index` refuses is to be mended first
    assert mem("recall-search", "steps", "--run", "beta")[2] == _log_note(
        "was changed (not only appended to)", "the events searched are as `mem index` read them; " + _MEND, "beta")
    tree.rmdir()  # removed, memory/ left: `mem index` refuses that too
    assert mem("recall-search", "steps", "--run", "beta")[2] == (
        _log_note("was changed (not only appended to)", "the events searched are as `mem index` read them; "
                  + _MEND, "beta")
        + "mem: beta/tree.json was removed after the last `mem index` read it: its events are still searched; "
        + _MEND.format(it="it") + "\n")
    assert mem("index")[0] == 2
    tree.write_bytes(kept)
    read = workspace.root / ".mem" / "read.json"  # as an index of an earlier version left it: no record
    record = json.loads(read.read_text())
    del record["logs"]
    read.write_text(json.dumps(record))
    alpha.write_bytes(logged)
    assert mem("recall-search", "steps")[2] == ""


def test_a_log_this_user_may_no_longer_read_is_said_so_and_the_search_answers(workspace, mem):
    """A run's memory/ (or its log) made unreadable after `mem index`: a recall search of every run
    failed, saying the index could not be read (the check of the log raised), and one that could
    read the folder called the log changed. The search answers from the index, naming the log."""
    import os
    import subprocess
    import sys

    assert mem("index")[0] == 0
    memory, log = workspace.root / "alpha" / "memory", workspace.events_path("alpha")
    argv = [sys.executable, "-m", "mem_retrieval.cli", "--workspace", str(workspace.root), "recall-search",
            "one step, five steps"]
    said = ("mem: alpha/memory/events.jsonl became unreadable after the last `mem index` read it: its events "
            "are still searched; mend it (`mem check` says what is wrong), then run `mem index`\n")
    for path in (memory, log):
        os.chmod(path, 0)
        try:
            done = subprocess.run(without_root_override(argv), capture_output=True, text=True, timeout=120,
                                  env={**os.environ, "MEM_NO_SERVER": "1"})
        finally:
            os.chmod(path, 0o755 if path == memory else 0o644)
        assert (done.returncode, done.stderr) == (0, said), path
        assert "beta #1" in done.stdout and "alpha #2" in done.stdout  # the index's events, every run's
    assert mem("recall-search", "one step, five steps")[2] == ""

def test_a_record_this_user_may_no_longer_read_is_mended_first_never_dropped(workspace, mem):
    """Modes changed after `mem index`: a run folder this user may not read was read as no run, so
    `mem index` dropped the run in silence and `mem check` said OK; a tree.json or library it may
    not read was "written since: run `mem index`", which refuses it; `mem check` of a solve/ it may
    not read was a traceback. Each is refused, or said to be unreadable, to mend first."""
    import os
    import subprocess
    import sys

    def as_user(*argv: str) -> tuple[int, str, str]:
        done = subprocess.run(without_root_override([sys.executable, "-m", "mem_retrieval.cli", "--workspace",
                                                     str(workspace.root), *argv]), capture_output=True,
                              text=True, timeout=120, env={**os.environ, "MEM_NO_SERVER": "1"})
        return done.returncode, done.stdout, done.stderr

    def unreadable(which: str, what: str = "its steps are still searched") -> str:
        return (f"mem: {which} became unreadable after the last `mem index` read it: {what}; mend it "
                "(`mem check` says what is wrong), then run `mem index`\n")

    assert mem("index")[0] == 0
    beta, library = workspace.root / "beta", workspace.library_path
    tree = workspace.root / "alpha" / "tree.json"
    for path, mode in ((beta, 0o755), (tree, 0o644), (library, 0o644), (library.parent, 0o755)):
        os.chmod(path, 0)
        try:
            searched, checked, indexed = (as_user("archive-search", "statement"), as_user("check"),
                                          as_user("index", "--no-progress"))
        finally:
            os.chmod(path, mode)
        assert searched[0] == 0 and "Traceback" not in searched[2] + checked[2] + indexed[2], path
        assert (indexed[0], len(indexed[2].splitlines())) == (2, 1), path
        assert "Permission denied" in indexed[2], path
        assert checked[0] == 2 and "Permission denied" in checked[1] + checked[2], path
        if path == beta:
            assert searched[2] == unreadable("beta/tree.json")
        elif path == tree:
            assert searched[2] == unreadable("alpha/tree.json")
        else:
            assert searched[2] == unreadable("solve/library.jsonl", "its entries are still searched as "
                                             "library entries")
    assert mem("archive-search", "statement")[2] == "" and mem("check")[0] == 0

@pytest.mark.parametrize("entry", [{"stamp": None, "sha256": "0" * 64}, {"stamp": [1, 2], "sha256": "0"},
                                   {"stamp": "abc", "sha256": "0"}, {"stamp": [1, 2, "x", 4], "sha256": "0"},
                                   {"stamp": [1, 2, 3, 4], "sha256": None}, {"stamp": [1, 2, 3, 4]}])
def test_a_log_record_no_index_run_wrote_loses_the_notes_and_is_replaced(workspace, mem, entry):
    """A read.json whose log record is no stamp and hash (edited by hand) failed every recall
    search, `eval resume` and `mem index RUN` with a traceback: it is read as no record (the
    notes go unsaid, as for any read.json no index run wrote), and the next index run replaces it."""
    assert mem("index")[0] == 0
    read = workspace.root / ".mem" / "read.json"
    record = json.loads(read.read_text())
    record["logs"]["alpha"] = entry
    read.write_text(json.dumps(record))
    workspace.events_path("alpha").write_text("")
    assert mem("recall-search", "steps")[::2] == (0, "")
    assert mem("index", "beta")[0] == 0
    assert mem("recall-search", "steps")[2] == ""  # alpha's record: none since
    assert mem("index")[0] == 0
    assert json.loads(read.read_text())["logs"]["alpha"]["stamp"][2] == 0  # read anew: the empty log



def test_a_tree_record_of_no_stamp_is_kept_by_a_narrowed_index(workspace, mem):
    """A tree's record with no stamp (as a library's may be) failed `mem index RUN` of another run
    with a traceback, after its commit, when it copied the record over: it is kept as it was, and
    the tree it names is judged by its hash."""
    assert mem("index")[0] == 0
    read = workspace.root / ".mem" / "read.json"
    record = json.loads(read.read_text())
    record["trees"]["alpha"]["stamp"] = None
    read.write_text(json.dumps(record))
    assert mem("index", "beta")[0] == 0
    assert json.loads(read.read_text())["trees"]["alpha"]["stamp"] is None
    assert mem("archive-search", "statement")[2] == ""  # the same bytes: not written since

def test_a_log_changed_while_mem_index_runs_is_judged_by_the_bytes_it_read(workspace, mem, monkeypatch):
    """Agents log while `mem index` runs (it embeds and commits after reading): a log appended
    after the index read it, before it recorded what it read, lost its record, so a later edit
    went unsaid; one cut short or edited then was recorded as read. The record is the bytes the
    index read and their hash: appended since, the events are written since (a note says so);
    cut or edited, the log is named."""
    from mem_retrieval.indexers import build

    alpha, beta = workspace.events_path("alpha"), workspace.events_path("beta")
    logged, commit = alpha.read_bytes(), build.commit

    def changing_first(*args, **kwargs):  # after the read, before the commit
        _append(alpha, "logged while indexing")
        beta.write_text("")
        return commit(*args, **kwargs)
    monkeypatch.setattr(build, "commit", changing_first)
    assert mem("index")[0] == 0
    monkeypatch.setattr(build, "commit", commit)
    assert mem("recall-search", "steps")[2] == (
        "mem: 1 event written since the last `mem index` is not searched (alpha: 1): run `mem index alpha`\n"
        + _rewritten("beta"))
    alpha.write_bytes(logged.replace(b"five steps", b"six steps!"))
    assert mem("recall-search", "steps")[2] == _rewritten("alpha", "beta")


def test_a_search_while_mem_index_runs_leaves_what_it_records_of_a_log(workspace, monkeypatch):
    """A search of the same `Memory` meanwhile (another thread's) reads the logs too: one cut by
    --until stops reading part way, which erased the record the index run had taken of that log,
    so a later edit went unsaid. What the index run read is its own (``RunRecords.log``)."""
    from mem_retrieval import Memory
    from mem_retrieval.indexers import build

    memory, commit = Memory.open(workspace.root), build.commit
    memory.index(progress=False)
    _append(workspace.events_path("alpha"))  # for the next index run to commit

    def searching_first(*args, **kwargs):
        assert memory.recall_search("fetched", until="alpha#1").hits  # reads alpha's log to its event 1
        return commit(*args, **kwargs)
    monkeypatch.setattr(build, "commit", searching_first)
    memory.index(progress=False)
    monkeypatch.setattr(build, "commit", commit)
    alpha = workspace.events_path("alpha")
    alpha.write_bytes(alpha.read_bytes().replace(b"five steps", b"six steps!"))
    assert [note.message for note in memory.recall_search("steps").notes] == [_rewritten("alpha")[5:-1]]


def test_the_head_of_a_file_hashes_as_a_file_of_that_size(tmp_path):
    """``sha256_head``, which a log's record is checked by: the first n bytes hash as those bytes
    alone (across its 1 MiB reads), a file holding fewer, or none, or a pipe, gives None. Oracle:
    hashlib."""
    import hashlib
    import os

    from mem_retrieval.records.parse import sha256_head

    path = tmp_path / "log"
    data = bytes(range(256)) * 5000  # 1.28 MB: more than one read
    path.write_bytes(data)
    for size in (0, 1, 1 << 20, (1 << 20) + 1, len(data)):
        assert sha256_head(path, size) == hashlib.sha256(data[:size]).hexdigest(), size
    assert sha256_head(path, len(data) + 1) is None
    assert sha256_head(tmp_path / "none", 0) is None
    os.mkfifo(tmp_path / "pipe")  # no file: never waited on (no writer would ever come)
    assert sha256_head(tmp_path / "pipe", 0) is None


def test_a_last_line_nested_deeper_than_python_reads_is_not_counted_and_breaks_no_search(workspace, mem):
    """An unfinished last line is passed over however deep it is (a RecursionError's traceback before)."""
    assert mem("index")[0] == 0
    with workspace.events_path("alpha").open("a", encoding="utf-8") as log:
        log.write("[" * 100_000)
    code, out, err = mem("recall-search", "echidna")
    assert code in (0, 1) and err == "" and "Traceback" not in out


def test_the_unindexed_events_note_counts_only_what_the_search_would_have_kept(workspace, mem):
    """With --until or --id, the note counts the events written since `mem index` that the search
    would have kept: logged by the cut (by position in the cut's own run, else by time), naming
    the step (a bare id with --run: that run's; alone: any run's). Oracle: the lines by hand."""
    assert mem("index")[0] == 0
    with workspace.events_path("alpha").open("a", encoding="utf-8") as log:
        for minute, ids in ((20, ["a4"]), (30, ["a1"]), (40, ["beta/b1"])):
            log.write(json.dumps({"time": f"2026-10-17T04:{minute}:00Z", "actor": "root",
                                  "kind": "audit", "ids": ids, "text": "echidna"}) + "\n")
        log.write('{"time": "2026-10-17T04:50:00Z", "actor": "ro')  # still being written
    workspace.write_events("gamma-new", [{"time": "2026-10-17T05:00:00Z", "actor": "root",
                                          "kind": "audit", "ids": ["a4"], "text": "echidna"}])
    workspace.add_run("gamma-new", [make_step("g1")])
    lines = workspace.events_path("alpha").read_text(encoding="utf-8").split("\n")
    first = next(n for n, line in enumerate(lines, 1) if "04:20" in line)  # the first unindexed

    def note(*args):
        code, _, err = mem("recall-search", *args)
        assert code in (0, 1)
        return err

    def says(total, where, command):
        return (f"mem: {total} written since the last `mem index` "
                f"{'is' if total.startswith('1 ') else 'are'} not searched ({where}): "
                f"run `mem index {command}`\n")

    assert note("echidna") == says("4 events", "alpha: 3, gamma-new: 1", "alpha gamma-new")
    assert note("echidna", "--until", "2026-10-17T04:35:00Z") == says("2 events", "alpha: 2", "alpha")
    assert note("echidna", "--until", "2026-10-17T04:15:00Z") == ""
    assert note("echidna", "--run", "alpha", "--until", str(first)) == says("1 event", "alpha: 1", "alpha")
    assert note("--id", "a4", "--run", "alpha") == says("1 event", "alpha: 1", "alpha")
    assert note("--id", "beta/b1") == says("1 event", "alpha: 1", "alpha")
    assert note("--id", "a1", "--run", "alpha", "--until", str(first)) == ""
    assert note("--id", "g1") == ""


def test_an_archive_search_the_index_is_behind_for_says_so(workspace, mem):
    """A step is in memory from the first event naming it, as the last `mem index` read the log:
    as of an event written since (naming a step indexed before it), a search found nothing and
    said nothing, while it found the step with no cut. A cut that keeps such events says so, as
    recall-search does; so does a --run of a run begun since the last index (it read as no step)."""
    workspace.add_step("alpha", make_step("a9", statement="zonotope packing bound for alcove walks"))
    assert mem("index")[0] == 0
    workspace.write_events("alpha", workspace.events("alpha") + [  # events that date no step anew:
        {"time": "2026-10-17T04:10:00Z", "actor": "root", "kind": "checkpoint", "ids": [], "text": "W"},
        {"time": "2026-10-17T04:15:00Z", "actor": "A1", "kind": "audit", "ids": ["a1", "beta/b1"],
         "text": "a1 again"},  # a1 named at event 2 already; beta's step is beta's log's to date
        {"time": "2026-10-17T04:20:00Z", "actor": "A1", "kind": "return", "ids": ["a9"], "text": "a9"}])
    behind = ("mem: 1 event written since the last `mem index` is not read, and a step first named "
              "there is not in memory as of this cut (alpha: 1): run `mem index alpha`\n")

    def search(*args):
        code, out, err = mem("archive-search", "zonotope packing alcove", "--run", "alpha", *args)
        return code, "alpha/a9" in out, err

    assert search() == (0, True, "")  # no cut: the step is indexed
    assert search("--until", "5") == (1, False, behind)
    assert search("--until", "alpha#5") == (1, False, behind)
    assert search("--until", "2026-10-17T04:20:00Z") == (1, False, behind)
    assert mem("archive-search", "zonotope packing alcove", "--until", "alpha#5")[2] == behind  # any run
    for cut in ("2", "4", "2026-10-17T04:19:59Z"):  # the cut keeps no event naming a step anew
        assert search("--until", cut) == (1, False, ""), cut
    assert mem("index", "alpha")[0] == 0
    assert search("--until", "5") == (0, True, "")

    workspace.add_run("gamma-new", [make_step("g1", statement="zonotope packing, a second proof")])
    code, out, err = mem("archive-search", "zonotope packing", "--run", "gamma-new")
    assert (code, err) == (1, "mem: --run 'gamma-new' has no step in the index (a run begun since "
                              "the last `mem index`): run `mem index gamma-new`\n")
    code, out, err = mem("archive-search", "zonotope packing", "--context-run", "gamma-new")
    assert (code, err) == (0, "mem: --context-run 'gamma-new' has no step in the index (a run begun "
                              "since the last `mem index`): run `mem index gamma-new`\n")  # its citations
    workspace.add_run("delta-empty", [])  # are not read: said whatever the list holds
    assert mem("archive-search", "zonotope packing", "--run", "delta-empty")[::2] == (1, "")
    tree = workspace.tree("delta-empty")
    del tree["steps"]  # a run at its Fix, before its first step (`steps: missing` was refused)
    workspace.save_tree("delta-empty", tree)
    assert mem("archive-search", "zonotope packing", "--run", "delta-empty")[::2] == (1, "")
    assert mem("core-set", "delta-empty", "phase", "Fix")[::2] == (0, "")
    assert mem("check", "delta-empty")[0] == 0
    assert mem("index", "gamma-new")[0] == 0
    code, out, err = mem("archive-search", "zonotope packing", "--run", "gamma-new")
    assert (code, err, "gamma-new/g1" in out) == (0, "", True)


def test_a_brief_swapped_after_indexing_for_a_link_out_or_a_pipe_is_never_read(workspace, mem, tmp_path):
    """`mem index` refuses a brief that leaves the run folder or is no regular file; a search reads
    the brief as it stands now, so one swapped after indexing for a link to a file outside (its
    text was shown), to /dev/zero (read until memory ran out) or for a pipe (the search hung) gives
    no body, and the hit stays. Its excerpt is the start of that body (it was the indexed text: a
    brief rewritten or gone still showed its old words, and the text view no sign of it)."""
    (workspace.root / "alpha" / "briefs").mkdir()
    brief = workspace.root / "alpha" / "briefs" / "A2.md"
    brief.write_text("pair model audit notes", encoding="utf-8")
    workspace.write_events("alpha", workspace.events("alpha") + [
        {"time": "2026-10-17T04:00:00Z", "actor": "root", "kind": "brief", "ids": ["a4"],
         "text": "briefs/A2.md"}])
    assert mem("index")[0] == 0

    def body() -> str | None:
        code, out, err = mem("--json", "recall-search", "--id", "a4", "--run", "alpha")
        (hit,) = [h for h in json.loads(out)["hits"] if h["path"] == "briefs/A2.md"]
        assert (code, err) == (0, "") and hit["excerpt"] == " ".join((hit["body"] or "").split())
        return hit["body"]

    assert body() == "pair model audit notes"
    brief.write_text("pair model dropped:   use   the residue", encoding="utf-8")
    assert body() == "pair model dropped:   use   the residue"
    code, out, _ = mem("recall-search", "--id", "a4", "--run", "alpha")
    assert "   | pair model dropped: use the residue\n" in out and "audit notes" not in out
    secret = tmp_path / "secret.txt"
    secret.write_text("the user's other file", encoding="utf-8")
    for swap in (lambda: brief.symlink_to(secret), lambda: brief.symlink_to("/dev/zero"),
                 lambda: os.mkfifo(brief), lambda: brief.mkdir()):
        brief.rmdir() if brief.is_dir() and not brief.is_symlink() else brief.unlink()
        swap()
        assert body() is None
        code, out, _ = mem("recall-search", "--id", "a4", "--run", "alpha")
        said = "   | (alpha/briefs/A2.md cannot be read now: gone, no longer a file in the run, or not " \
               "UTF-8)\n"
        assert said in out
    brief.rmdir()
    inside = workspace.root / "alpha" / "briefs" / "real.md"
    inside.write_text("the same notes, moved", encoding="utf-8")
    brief.symlink_to("real.md")  # a link that stays in the run folder is read, as `mem index` reads it
    assert body() == "the same notes, moved"


def test_a_global_id_naming_no_step_does_not_make_a_bare_id_ambiguous(workspace, mem):
    """An event naming ``beta/a1`` where beta has no a1 (a typo `check` reports) made every bare
    `--id a1` refused as "an id in several runs"; the bare id names alpha's step alone, and lists
    alpha's events naming it, not the typo's."""
    workspace.write_events("beta", [{"time": "2026-10-18T01:00:00Z", "actor": "B1", "kind": "audit",
                                     "ids": ["beta/a1"], "text": "a typo"}])
    assert mem("index")[0] == 0
    code, out, err = mem("--json", "recall-search", "--id", "a1")
    assert (code, err) == (0, "")
    expected = [f"alpha#{n}" for n, e in enumerate(workspace.events("alpha"), 1) if "a1" in e["ids"]]
    assert [h["id"] for h in json.loads(out)["hits"]] == expected and expected
    workspace.add_step("beta", make_step("a1"))  # now a step of both runs: refused, naming both
    assert mem("index")[0] == 0
    code, out, err = mem("recall-search", "--id", "a1")
    assert code == 1 and "is an id in several runs: alpha/a1, beta/a1" in err


def test_a_bare_id_of_several_runs_typed_decomposed_is_refused_as_typed_composed(workspace, mem):
    """Runs alpha and beta each with a step Ü-1 their logs name: `--id` typed composed was refused
    as "an id in several runs", typed decomposed (U + U+0308) it listed both runs' events as one."""
    import unicodedata

    composed = unicodedata.normalize("NFC", "Ü-1")
    for run in ("alpha", "beta"):
        workspace.add_step(run, make_step(composed))
        event = {"time": "2026-10-18T02:00:00Z", "actor": "root", "kind": "audit", "ids": [composed],
                 "text": run}
        workspace.write_events(run, [*workspace.events(run), event])
    assert mem("index")[0] == 0
    for typed in (composed, unicodedata.normalize("NFD", composed)):
        code, out, err = mem("recall-search", "--id", typed)
        assert (code, out) == (1, "")
        assert f"is an id in several runs: alpha/{composed}, beta/{composed}" in err
        code, out, err = mem("--json", "recall-search", "--id", typed, "--run", "beta")
        assert code == 0 and [h["text"] for h in json.loads(out)["hits"]] == ["beta"], typed


def test_an_unindexed_event_whose_brief_is_missing_is_counted_by_id_as_by_words(workspace, mem):
    """An event appended after `mem index` whose brief is missing (which the next `mem index` will
    refuse) was counted by a word search's note but not by `--id`'s, which parsed it and passed
    it over: both say it, so the agent runs `mem index` and learns what is wrong."""
    assert mem("index")[0] == 0
    with workspace.events_path("alpha").open("a", encoding="utf-8") as log:
        log.write(json.dumps({"time": "2026-10-18T04:00:00Z", "actor": "root", "kind": "return",
                              "ids": ["a4"], "text": "returns/missing.md"}) + "\n")
    for argv in (("echidna",), ("--id", "a4", "--run", "alpha"), ("--id", "alpha/a4")):
        code, _, err = mem("recall-search", *argv)
        assert "mem: 1 event written since the last `mem index` is not searched (alpha: 1)" in err, argv
    code, _, err = mem("index")
    assert code == 2 and "alpha/memory/events.jsonl:" in err and "returns/missing.md" in err


def test_a_recall_text_query_that_is_a_steps_id_points_to_id(workspace, mem):
    """`recall-search A5-8` searches the words of the id (any event saying `a4` ranks), which an
    agent meaning `--id A5-8` could not tell: a note says so when `--id` (with the same `--run`)
    would list events naming the step; none where it would list none or refuse the id, nor for an
    id naming no step, nor for a longer query."""
    workspace.add_run("gamma", [make_step("g1")])  # a step no event names
    assert mem("index")[0] == 0
    note = ("mem: QUERY {!r} names a step and is searched as words; the events naming that step, "
            "in time order (--id shows them)\n")
    for argv, typed in ((("a4",), "a4"), (("a4", "--run", "alpha"), "a4"), (("alpha/a4",), "alpha/a4"),
                        (("a4,",), "a4"), (("alpha/a1", "--run", "beta"), "alpha/a1")):
        code, _, err = mem("recall-search", *argv)
        assert err == note.format(typed), argv
        assert mem("recall-search", "--id", typed, *argv[1:])[0] == 0  # what the note points to lists them
    for argv in (("a9",), ("a4", "--run", "beta"), ("a4 echidna",), ("alpha/a9",),
                 ("alpha/a4", "--run", "beta"), ("g1",), ("g1", "--run", "gamma")):
        assert "names a step" not in mem("recall-search", *argv)[2], argv
    assert "names a step" not in mem("recall-search", "--id", "a4", "--run", "alpha")[2]
    workspace.add_run("delta", [make_step("a4")])  # a bare a4 of two runs: --id refuses it alone
    workspace.write_events("delta", [{"time": "2026-10-19T01:00:00Z", "actor": "D1", "kind": "return",
                                      "ids": ["a4"], "text": "delta's a4"}])
    assert mem("index")[0] == 0
    assert mem("recall-search", "--id", "a4")[0] == 1
    assert "names a step" not in mem("recall-search", "a4")[2]
    assert mem("recall-search", "a4", "--run", "delta")[2] == note.format("a4")


def test_an_id_the_filters_leave_out_is_said_so_not_offered_as_its_own_nearest(workspace, mem):
    """`archive-search a4 --library` (a4 indexed, not in the library) said "a typo, a step added
    since the last `mem index`, or one the filters leave out … nearest: alpha/a4": the id asked,
    offered as a near miss. The index holds it: the note says the filters left it out."""
    assert mem("index")[0] == 0
    for argv in (("a4", "--library"), ("alpha/a4", "--run", "beta"), ("a4", "--kind", "dead_end")):
        _, _, err = mem("archive-search", *argv)
        assert err.startswith(f"mem: QUERY {argv[0]!r}: the filters of this search leave out the step "
                              "with this id (alpha/a4); "), (argv, err)
    _, _, err = mem("archive-search", "a9", "--library")  # no such step: a typo's note, with its nearest
    assert "no step this search may return has this id (a typo" in err and "nearest: " in err


def test_an_unindexed_line_that_is_no_event_is_counted_with_a_cut_as_without(workspace, mem):
    """A malformed line appended after `mem index` was counted by a word search's note but not
    by one whose `--until` keeps the whole tail: a line no event is read from is counted by a
    time cut (none can date it), and `mem index` names it; it names no step, so `--id` and
    archive-search's `--until` note (events naming an undated step) leave it out."""
    assert mem("index")[0] == 0
    with workspace.events_path("alpha").open("a", encoding="utf-8") as log:
        log.write(json.dumps({"time": "2026-10-18T04:00:00Z", "actor": "root", "kind": "audit",
                              "ids": ["a4"], "text": "wombat new"}) + "\n{bad\n")
    for argv in (("echidna",), ("echidna", "--until", "2026-10-20T00:00:00Z")):
        code, _, err = mem("recall-search", *argv)
        assert "mem: 2 events written since the last `mem index` are not searched (alpha: 2)" in err, argv
    code, _, err = mem("recall-search", "--id", "a4", "--run", "alpha")
    assert "mem: 1 event written since the last `mem index` is not searched (alpha: 1)" in err
    with workspace.events_path("alpha").open("a", encoding="utf-8") as log:  # names no step: no note
        log.write("{worse\n")
    assert "not in memory as of this cut" not in mem("archive-search", "statement", "--until",
                                                     "2026-10-20T00:00:00Z")[2]
    code, _, err = mem("index")
    assert code == 2 and "alpha/memory/events.jsonl:" in err and "invalid JSON" in err


def test_a_query_of_no_word_a_search_reads_says_so(workspace, mem):
    """`{` or `· the` tokenise to nothing: "no hits" / "no events" alone read as nothing being on
    the subject. Both searches say why (exit 1, as any empty list)."""
    assert mem("index")[0] == 0
    said = ("holds no word a search reads (punctuation, function words and LaTeX that draws nothing "
            "are not searched)")
    assert mem("archive-search", "{") == (1, "no hits\n", f"mem: QUERY '{{' {said}\n")
    code, out, err = mem("--json", "recall-search", "\u00b7 the")
    assert code == 1 and json.loads(out)["notes"] == [f"QUERY '\u00b7 the' {said}"]
    assert mem("archive-search", "statement")[2] == ""  # a query with a word: no such note
    # a strategy embedding the text finds hits for any: a list its filters leave empty is no such case
    assert mem("archive-search", "{", "--strategy", "vector", "--kind", "error") == (1, "no hits\n", "")


def test_a_search_names_a_run_whose_tree_stopped_being_a_file_since_the_last_index(workspace, mem):
    """beta/tree.json made a folder, or a link to nothing, after `mem index`: its steps were still
    hits, which `archive-get` then refused naming the tree, and no search said why. An archive
    search says so (`mem index` refuses the workspace until it is mended); a recall search, whose
    events of beta are as logged, does not; --run beta still names a run; mended, nothing is said."""
    import os

    assert mem("index")[0] == 0
    tree, other = (workspace.root / run / "tree.json" for run in ("beta", "alpha"))
    kept = {path: path.read_bytes() for path in (tree, other)}
    note = ("mem: beta/tree.json stopped being a file after the last `mem index` read it: its steps are "
            "still searched; mend it (`mem check` says what is wrong), then run `mem index`\n")
    for make in (tree.mkdir, lambda: os.symlink("nowhere", tree)):
        tree.unlink()
        make()
        code, out, err = mem("archive-search", "statement of b1")
        assert (code, err) == (0, note) and "beta/b1" in out
        assert mem("archive-search", "statement", "--run", "beta")[2] == note  # a run still, not "no run"
        assert mem("archive-search", "statement", "--run", "alpha")[2] == ""
        assert mem("recall-search", "statement", "--run", "beta")[2] == ""
        code, _, err = mem("archive-get", "beta/b1")
        assert code == 2 and err.startswith(f"mem: {tree}: ") and "not a file" in err
        assert mem("index")[0] == 2  # refused until mended, as the note says
        tree.rmdir() if tree.is_dir() else tree.unlink()
        tree.write_bytes(kept[tree])
        assert mem("archive-search", "statement of b1")[2] == ""
    for path in (tree, other):
        path.unlink()
        path.mkdir()
    assert mem("archive-search", "statement")[2] == (
        "mem: the tree.json of 2 runs stopped being a file after the last `mem index` read it (alpha, beta): "
        "their steps are still searched; mend them (`mem check` says what is wrong), then run "
        "`mem index`\n")

def test_a_search_names_the_runs_removed_since_the_last_index_read_them(workspace, mem):
    """A run folder deleted after `mem index`: its steps were still hits, which `archive-get` then
    said are no step, and no note said why. The note names the run and `mem index`, which ends it;
    a search narrowed to another run says nothing."""
    import shutil

    assert mem("index")[0] == 0
    shutil.rmtree(workspace.root / "beta")
    code, out, err = mem("archive-search", "statement of b1")
    assert (code, err) == (0, "mem: beta/tree.json was removed after the last `mem index` read it: its "
                              "steps are still searched; run `mem index`\n") and "beta/b1" in out
    assert mem("archive-search", "statement", "--run", "alpha")[2] == ""
    events = "mem: beta/tree.json was removed after the last `mem index` read it: its events are still " \
             "searched; run `mem index`\n"
    assert mem("recall-search", "zzzq", "--run", "beta") == (1, "no events\n", events)  # not "no log"
    assert mem("recall-search", "statement")[2] == events
    code, _, err = mem("archive-get", "beta/b1")  # a hit of the searches: "no step" alone said nothing
    assert (code, err) == (1, "mem: no step 'beta/b1' (the folder of run 'beta' was removed after the last "
                              "`mem index` read it, so searches still find its steps: run `mem index`)\n")
    shutil.move(workspace.root / "alpha", workspace.root.parent / "alpha")  # every run: their log is there
    assert mem("recall-search", "zzzq") == (1, "no events\n", (
        "mem: the tree.json of 2 runs was removed after the last `mem index` read it (alpha, beta): their "
        "events are still searched; run `mem index`\n"))
    shutil.move(workspace.root.parent / "alpha", workspace.root / "alpha")
    assert mem("index")[0] == 0
    code, out, err = mem("archive-search", "statement of b1")
    assert err == "" and "beta/b1" not in out
    assert mem("recall-search", "zzzq", "--run", "beta")[2] == ("mem: --run 'beta' names no run of this "
                                                                "workspace (runs: alpha)\n")


def test_recall_search_says_when_there_is_no_log_to_read(workspace, mem):
    """A workspace holding only a library, or a run the library alone holds: "no events" alone
    read as nothing said about the subject."""
    import shutil

    shutil.rmtree(workspace.root / "alpha")
    shutil.rmtree(workspace.root / "beta")  # the library's alpha/a1 stays
    assert mem("index")[0] == 0
    assert mem("recall-search", "statement") == (
        1, "no events\n", "mem: the workspace holds no run, so no event log to search (only "
                          "solve/library.jsonl)\n")
    assert mem("recall-search", "statement", "--run", "alpha") == (
        1, "no events\n", "mem: --run 'alpha' has no log here (only library entries of it)\n")
    assert mem("recall-search", "--id", "alpha/a1") == (
        1, "no events\n", "mem: --id 'alpha/a1': run 'alpha' has no log here (only library entries of it)\n")


def test_a_search_names_the_trees_written_since_the_last_index_read_them(workspace, mem):
    """A step written to a run's tree.json after `mem index` is not searched, and archive-search
    said nothing of it (recall-search names the events written since): an agent looking for the
    step it had just written found nothing and no reason. The note names the run and the command;
    indexing that run, or the runs whose trees changed, ends it; a search narrowed to another run
    says nothing."""
    assert mem("index")[0] == 0
    assert mem("archive-search", "statement")[2] == ""
    workspace.add_step("alpha", make_step("a6", statement="the quokka bound"))
    code, _, err = mem("archive-search", "quokka")
    assert (code, err) == (1, "mem: alpha/tree.json was written after the last `mem index` read it: steps "
                              "added or changed since are not searched; run `mem index alpha`\n")
    code, out, err = mem("--json", "archive-search", "statement")
    assert code == 0 and json.loads(out)["notes"] == [err.removeprefix("mem: ").rstrip("\n")]
    assert mem("archive-search", "statement", "--run", "beta")[2] == ""
    workspace.edit_step("beta", "b1", statement="the wombat bound")
    both = mem("archive-search", "x")[2]
    assert ("the tree.json of 2 runs was written after the last `mem index` read it (alpha, beta): steps "
            "added or changed since are not searched; run `mem index alpha beta`") in both
    assert mem("index", "beta")[0] == 0  # alpha is still unread
    assert "mem: alpha/tree.json was written after" in mem("archive-search", "wombat")[2]
    assert mem("index", "alpha")[0] == 0
    code, out, err = mem("archive-search", "quokka")
    assert (code, err) == (0, "") and "alpha/a6" in out
    workspace.add_run("gamma", [make_step("g1", statement="the numbat bound")])  # a run begun since
    assert "mem: gamma/tree.json was written after" in mem("archive-search", "statement")[2]
    assert mem("index")[0] == 0
    (workspace.root / ".mem" / "read.json").unlink()  # an index of an older version: nothing known
    workspace.add_step("alpha", make_step("a7", statement="the bilby bound"))
    assert mem("archive-search", "statement")[2] == ""
    assert mem("index", "beta")[0] == 0  # beta read; alpha and gamma may be indexed or not: unknown
    assert mem("archive-search", "statement")[2] == ""
    workspace.edit_step("beta", "b1", statement="the potoroo bound")
    assert "mem: beta/tree.json was written after" in mem("archive-search", "statement")[2]


def test_a_library_written_while_an_index_run_read_it_is_named_as_written_since(workspace, mem):
    """The index run records the library's stamp taken before it read it: a library appended while
    the run read it is recorded with neither stamp nor hash, so a search names it rather than take
    the new bytes as read; one unchanged is recorded as read, and says nothing."""
    from mem_retrieval.configs import load_config
    from mem_retrieval.indexers.build import _library_as_read
    from mem_retrieval.indexers.location import Location
    from mem_retrieval.records.files import stamp
    from mem_retrieval.records.workspace import Workspace as Records

    assert mem("index")[0] == 0
    records = Records.open(workspace.root)
    records.library()
    unchanged = _library_as_read(records)
    assert unchanged["stamp"] is not None and len(unchanged["sha256"]) == 64
    with workspace.library_path.open("a", encoding="utf-8") as library:
        library.write("\n")
    assert _library_as_read(records) == {"stamp": None, "sha256": None}
    location = Location.of(records, load_config(None))
    library = str(workspace.library_path)
    assert location.written_since(library, stamp(library), {"stamp": None, "sha256": None})
    assert not location.written_since(str(workspace.root / "solve" / "none.jsonl"), None, None)
    # removed after the index read it (or while it read it): its entries are still library rows
    workspace.library_path.unlink()
    assert location.written_since(library, stamp(library), unchanged)
    assert location.written_since(library, stamp(library), {"stamp": None, "sha256": None})
    code, _, err = mem("archive-search", "statement", "--library")
    assert code == 0 and err == ("mem: solve/library.jsonl was removed after the last `mem index` read it: "
                                 "its entries are still searched as library entries; run `mem index`\n")
    assert mem("index")[0] == 0
    assert mem("archive-search", "statement", "--library")[::2] == (1, "")


@pytest.mark.parametrize("hostile", ["nested", "folder", "link", "loop", "device", "huge"])
def test_a_read_json_no_index_run_wrote_loses_the_note_and_is_replaced(workspace, mem, tmp_path, hostile):
    """.mem/read.json nested past the recursion limit failed every search and `mem index` with a
    traceback; a link to a file elsewhere was written through (a folder made there), a folder was
    never replaced, and a huge one was read whole at every search. Each loses the note only, and
    the next `mem index` replaces it in .mem (a link replaced, not followed)."""
    assert mem("index")[0] == 0
    read = workspace.root / ".mem" / "read.json"
    read.unlink()
    outside = tmp_path / "outside" / "new" / "x.json"
    if hostile == "nested":
        read.write_text("[" * 100_000)
    elif hostile == "folder":
        (read / "inside").mkdir(parents=True)
    elif hostile == "link":
        read.symlink_to(outside)
    elif hostile == "loop":  # replaced by a file mode that made it ELOOP: the record was deleted
        read.symlink_to("read.json")
    elif hostile == "device":  # its replacement took the device's mode (0666)
        read.symlink_to("/dev/zero")
    else:
        with read.open("wb") as handle:
            handle.truncate((64 << 20) + 1)
    workspace.add_step("alpha", make_step("a6", statement="the quokka bound"))
    assert mem("archive-search", "statement") == (0, mem("archive-search", "statement")[1], "")
    assert mem("index")[0] == 0
    assert read.is_file() and not read.is_symlink() and not (tmp_path / "outside").exists()
    assert json.loads(read.read_text())["complete"] is True
    assert read.stat().st_mode & 0o777 == (workspace.root / ".mem" / "meta.json").stat().st_mode & 0o777
    workspace.add_step("alpha", make_step("a7", statement="the numbat bound"))
    assert "mem: alpha/tree.json was written after" in mem("archive-search", "statement")[2]


def test_a_memory_let_go_frees_its_index_at_once_not_at_a_full_collection(example):
    """A searcher held its retriever through the bound method it reads the ontology with: a cycle,
    so a Memory a warm server let go for a newer index version left its searcher (tables, connection,
    the steps held in memory) until Python's next full collection: up to ten versions at once."""
    import gc
    import weakref

    memory = Memory.open(example.workspace.root)
    assert memory.archive_search("Satake", setting="every non-arch. local F").total
    searcher = weakref.ref(memory.retriever.searcher)
    gc.disable()
    try:
        del memory
        assert searcher() is None
    finally:
        gc.enable()


def test_every_strategy_looks_ids_up_first(workspace, mem):
    """A step named by id leads the list whatever the strategy (``vector`` and ``hybrid-rrf`` once
    ranked it as text and said no step had the id), once, even when the setting rule would leave
    it out; an exact lookup lists the named steps alone."""
    from mem_retrieval.retrieval.strategies import STRATEGIES

    workspace.add_run("gamma", [make_step("g1", statement="Zorb tower descent", setting="C"),
                                make_step("g2", statement="Zorb tower ascent", setting="F_q((t))")])
    assert mem("index")[0] == 0
    memory = Memory.open(workspace.root)
    for strategy in STRATEGIES:
        hits = memory.archive_hits("gamma/g1 Zorb tower", setting="F_q((t))", strategy=strategy)
        assert [(h.id, h.via) for h in hits[:1]] == [("gamma/g1", "id")], strategy
        assert len({h.id for h in hits}) == len(hits) and "gamma/g2" in {h.id for h in hits}, strategy
        assert [h.id for h in memory.archive_hits("gamma/g2", strategy=strategy)] == ["gamma/g2"]
        code, out, err = mem("archive-search", "Zorb gamma/g1", "--strategy", strategy)
        assert (code, err) == (0, "") and out.split("\n")[1].startswith("1. gamma/g1 "), strategy


def test_a_query_naming_more_ids_than_the_pool_holds_lists_every_named_step(workspace, mem):
    """The pool cut (``search.pool``) bounds what the text search adds, not the steps a query names
    by id: a bare id can name a step in each of hundreds of runs. Cut at the pool, named steps were
    dropped, and a note said the filters left them out."""
    from dataclasses import replace

    assert mem("index")[0] == 0
    memory = Memory.open(workspace.root)
    small = Memory(memory.workspace, replace(memory.config, search=replace(memory.config.search, pool=4)))
    query = "a1 a2 a3 a4 a5 b1"
    hits = small.archive_hits(query)
    assert [h.id for h in hits[:6]] == ["alpha/a1", "alpha/a2", "alpha/a3", "alpha/a4", "alpha/a5", "beta/b1"]
    assert {h.via for h in hits[:6]} == {"id"} and len(hits) == 6
    assert small.archive_search(query).notes == ()


def test_the_footer_says_read_on_from_an_estimate_of_one_hit_ahead(example):
    """The footer's hint shows from an estimate of 1 up (a tie of six id hits, page 1 of 2, reads
    exactly 1.0), in the singular then; below 1 it says nothing (not reliable enough to stop on)."""
    import io

    from mem_retrieval.cli.calls import _footer
    from mem_retrieval.cli.main import run as run_cli

    out = io.StringIO()
    run_cli(["--workspace", str(example.workspace.root), "archive-search", "A1-3 A2-2 A2-3"], out=out,
            err=io.StringIO())
    assert out.getvalue().splitlines()[-1].endswith("(1 more hit) · about 1 relevant-looking hit ahead")
    page = example.archive_search("A1-3 A2-2 A2-3")
    assert page.remaining == 1.0
    spell = "--{}".format
    assert _footer(replace(page, remaining=0.999), spell).endswith("(1 more hit)")
    assert _footer(replace(page, remaining=2.6), spell).endswith(" · about 3 relevant-looking hits ahead")


def test_an_id_typed_decomposed_names_the_step_written_composed(workspace, mem):
    """Unicode writes Ü as one letter (NFC) or as U and a combining diaeresis (NFD); an id typed
    either way names the step, in archive-search, archive-get and recall-search --id."""
    import unicodedata

    composed = unicodedata.normalize("NFC", "Ünïcode_ид")
    decomposed = unicodedata.normalize("NFD", composed)
    assert composed != decomposed
    workspace.add_run("gamma", [make_step(composed, statement="Zorb tower descent")])
    workspace.write_events("gamma", [{"time": "2026-10-17T05:00:00Z", "actor": "root",
                                      "kind": "audit", "ids": [composed], "text": "checked"}])
    assert mem("index")[0] == 0
    gid = f"gamma/{composed}"
    for typed in (decomposed, f"gamma/{decomposed}"):
        code, out, err = mem("--json", "archive-search", typed)
        hits = [(h["id"], h["via"]) for h in json.loads(out)["hits"]]
        assert (code, err, hits) == (0, "", [(gid, "id")])
        code, out, _ = mem("--json", "archive-get", typed)
        assert code == 0 and json.loads(out)["id"] == gid
        code, out, _ = mem("--json", "recall-search", "--id", typed)
        assert code == 0 and [h["id"] for h in json.loads(out)["hits"]] == ["gamma#1"]
    typo = unicodedata.normalize("NFD", "Ünïcode_иж")  # a typo, typed decomposed: noted as composed
    assert "no step this search may return has this id" in mem("archive-search", typo)[2]


def test_an_id_written_decomposed_in_the_records_is_the_same_id_composed(workspace, mem):
    """A step written composed, its parent, its events and its library entry written decomposed
    (one system's Ü as another's U and a combining diaeresis): one id. `check` called the parent
    dangling and the events' ids unknown, the library entry was a second hit and `archive-get`
    refused the id as in "several runs" (one run, twice); `--until` as of the event did not hold
    the step. A twin in the other form is a duplicate id of the run."""
    import unicodedata

    composed = unicodedata.normalize("NFC", "Ü-1")
    decomposed = unicodedata.normalize("NFD", composed)
    step = make_step(composed, statement="Zorb tower descent")
    workspace.add_run("gamma", [step, make_step("g2", parents=(decomposed,))])
    workspace.write_events("gamma", [{"time": "2026-10-17T05:00:00Z", "actor": "root",
                                      "kind": "audit", "ids": [decomposed], "text": "checked"}])
    workspace.write_library([library_line("alpha", workspace.tree("alpha")["steps"][0]),
                             library_line("gamma", step, id=decomposed)])
    code, out, _ = mem("--json", "check", "gamma")
    assert code == 0 and json.loads(out)["violations"] == [], out
    assert mem("index")[0] == 0
    gid = f"gamma/{composed}"
    for until, in_library in ((), True), (("--until", "gamma#1"), False):  # inserted at 07:00
        code, out, _ = mem("--json", "archive-search", "Zorb tower descent", *until)
        hits = [(h["id"], h["in_library"]) for h in json.loads(out)["hits"]]
        assert code == 0 and hits == [(gid, in_library)], until
    for typed in (composed, decomposed):
        code, out, _ = mem("--json", "archive-get", typed)
        assert code == 0 and json.loads(out)["id"] == gid
        code, out, _ = mem("--json", "archive-search", "Zorb tower descent", "--run", "gamma",
                           "--until", typed)
        assert code == 0 and [h["id"] for h in json.loads(out)["hits"]] == [gid], typed  # an event's id
    from mem_retrieval.eval.judgments import read_qrels, read_queries

    query = {"qid": "q1", "query": "Zorb", "step": f"gamma/{decomposed}"}
    (workspace.root / "q.jsonl").write_text(json.dumps(query) + "\n", encoding="utf-8")
    (workspace.root / "r.qrels").write_text(f"q1 0 gamma/{decomposed} 1\n", encoding="utf-8")
    assert read_queries(workspace.root / "q.jsonl")[0].step == gid  # as the records hold it: leave-one-out
    assert read_qrels(workspace.root / "r.qrels") == {"q1": {gid: 1}}  # hides it, a judgment names it
    workspace.add_step("gamma", make_step(decomposed))
    code, out, _ = mem("check", "gamma")
    assert code == 1 and f"steps[2].id: duplicate id {composed!r} (already a step of this run; written " \
        "here decomposed, the same letters)" in out


@pytest.mark.parametrize("dash", ["\u2011", "\u2013", "\u2212", "\uff0d", "-\u200b", "-\u200e"])
def test_an_id_typed_with_a_look_alike_dash_or_fullwidth_names_the_step(workspace, mem, dash):
    """An agent's text draws A5-7's hyphen as a non-breaking hyphen, an en dash, a minus sign, …
    or its letters fullwidth: `archive-search` gave 34 text hits with no note, `A7-24` first; the id
    names the step in archive-search (an exact lookup, a global id's run typed alike too),
    archive-get and recall-search --id, as it does typed decomposed."""
    workspace.add_run("gamma-run", [make_step("A5-7", statement="Zorb tower descent")])
    workspace.write_events("gamma-run", [{"time": "2026-10-17T05:00:00Z", "actor": "root",
                                          "kind": "audit", "ids": ["A5-7"], "text": "checked"}])
    assert mem("index")[0] == 0
    fullwidth = ("\uff21\uff15-\uff17", "\uff21\uff15\uff0d\uff17")  # Ａ５-７, and its hyphen too
    for typed in (f"A5{dash}7", f"gamma{dash}run/A5{dash}7", *fullwidth):
        code, out, err = mem("--json", "archive-search", typed)
        hits = [(h["id"], h["via"]) for h in json.loads(out)["hits"]]
        assert (code, err, hits) == (0, "", [("gamma-run/A5-7", "id")]), typed
        code, out, _ = mem("--json", "archive-get", typed)
        assert code == 0 and json.loads(out)["id"] == "gamma-run/A5-7"
        code, out, _ = mem("--json", "recall-search", "--id", typed)
        assert code == 0 and [h["id"] for h in json.loads(out)["hits"]] == ["gamma-run#1"]
    escaped = ascii(f"A5{dash}7")[1:-1]  # as an output in ASCII shows it: `A5\u20117`
    code, out, _ = mem("--json", "archive-get", escaped)
    assert code == 0 and json.loads(out)["id"] == "gamma-run/A5-7", escaped
    # a --run typed so too (it was "names no run")
    code, out, _ = mem("--json", "archive-get", "A5-7", "--run", f"gamma{dash}run")
    assert code == 0 and json.loads(out)["id"] == "gamma-run/A5-7"
    code, out, _ = mem("--json", "recall-search", "--id", "A5-7", "--run", f"gamma{dash}run")
    assert code == 0 and [h["id"] for h in json.loads(out)["hits"]] == ["gamma-run#1"]
    for flag in ("--run", "--context-run"):  # archive-search's too (they said "names no run")
        code, out, err = mem("--json", "archive-search", "Zorb tower descent", flag, f"gamma{dash}run")
        assert (code, err, [h["id"] for h in json.loads(out)["hits"]]) == (0, "", ["gamma-run/A5-7"])
    # a fullwidth typo is suggested the step it is close to (it got no suggestion)
    code, _, err = mem("archive-get", "\uff21\uff15-\uff18")
    assert code == 1 and "; nearest: gamma-run/A5-7" in err


def test_an_id_that_names_a_step_as_typed_never_adds_its_look_alike(workspace, mem):
    """Two steps whose ids differ by a dash alone (`A5-7`, `A5‑7` with U+2011): the id as typed
    names its own step in archive-get (which said "an id in several runs", both of one run) and in
    recall-search --id (which listed the other step's events) and in a search (which listed
    both); `A5‑8`, naming none as typed, still reads as `A5-8`."""
    look = "A5\u20117"
    workspace.add_run("gamma-run", [make_step("A5-7", statement="Zorb tower descent"),
                                    make_step(look, statement="Zorb tower ascent"),
                                    make_step("A5-8", statement="Zorb tower sideways")])
    workspace.write_events("gamma-run", [{"time": "2026-10-17T05:00:00Z", "actor": "root",
                                          "kind": "audit", "ids": ["A5-7", "A5-8"], "text": "checked"}])
    assert mem("index")[0] == 0
    for typed, gid in ((look, f"gamma-run/{look}"), ("A5-7", "gamma-run/A5-7"),
                       ("A5\u20118", "gamma-run/A5-8")):
        code, out, _ = mem("--json", "archive-get", typed)
        assert code == 0 and json.loads(out)["id"] == gid
    code, out, _ = mem("--json", "recall-search", "--id", look)
    assert code == 1 and json.loads(out)["hits"] == []  # A5‑7 has no events; A5-7's are not its
    code, out, _ = mem("--json", "recall-search", "--id", "A5\u20118")
    assert code == 0 and [h["id"] for h in json.loads(out)["hits"]] == ["gamma-run#1"]
    twin, eight = f"gamma-run/{look}", "gamma-run/A5-8"
    for query, ids in ((look, [twin]), (f"{look} A5-7", [twin, "gamma-run/A5-7"]),
                       ("A5\u20118", [eight]), (f"A5\u20118 {look}", [eight, twin])):
        hits = [h["id"] for h in json.loads(mem("--json", "archive-search", query)[1])["hits"]]
        assert hits == ids, query
        memory = Memory.open(workspace.root)
        for _ in range(3):  # a long-lived searcher answers from its id map after a few lookups
            assert [h.id for h in memory.archive_search(query).hits] == ids, query
        assert memory.retriever.searcher._id_map is not None


def test_recall_by_an_id_that_names_no_step_says_so_with_the_nearest(example):
    """`recall-search --id` answered a mistyped id, an id with a full stop, or a step of another
    run with "no events" alone: an agent resuming read it as a step nothing was said about."""
    satake, iwahori = "satake-two-levels", "iwahori-two-levels"
    cases = [({"id": "A9-99", "run": satake}, f"'A9-99' names no step of run '{satake}'"),
             ({"id": "A5-7", "run": iwahori}, f"'A5-7' names no step of run '{iwahori}'"),
             ({"id": "satake-two-levels/A5-7."}, "'satake-two-levels/A5-7.' names no step")]
    for options, said in cases:
        page = example.recall_search(None, **options)
        (note,) = page.notes
        assert page.total == 0 and note.param == "id" and note.message.startswith(said + "; nearest: ")
        if "A5-7" in options["id"]:  # the step meant is named: among the nearest first, or apart
            near = note.message.split("nearest: ")[1]
            assert ("satake-two-levels/A5-7" in near.split(", ")[:2] if "run" not in options
                    else near.endswith("; the same id in other runs: satake-two-levels/A5-7"))
    from mem_retrieval.cli.calls import call

    done = call(example, "recall_search", {"id": "A9-99", "run": satake})  # --json and MCP say it too
    assert done.data["notes"] == list(done.notes) and done.notes[0].startswith("id 'A9-99' names no step")
    done = call(example, "archive_search", {"query": "A5-77"})
    assert done.data["notes"] == list(done.notes) and done.notes[0].startswith("query 'A5-77': no step")
    assert example.recall_search(None, id="A5-7", run="satake-two-levels").notes == ()  # it has events
    before = example.recall_search(None, id="A5-7", run="satake-two-levels", until="1")
    assert (before.total, before.notes) == (0, ())  # a step no event had named yet: no such note
    # a global id with another run: that run's log may name the step, but none of its events does
    page = example.recall_search(None, id="satake-two-levels/A5-7", run=iwahori)
    assert page.total == 0 and [(n.param, n.message) for n in page.notes] == [
        ("run", f"'{iwahori}' logs no event naming 'satake-two-levels/A5-7', a step of run '{satake}': "
                "without the run, every run's events naming it are listed")]
    done = call(example, "recall_search", {"id": "satake-two-levels/A5-7", "run": iwahori})
    assert done.notes[0].startswith(f"run '{iwahori}' logs no event naming")


def test_the_names_no_step_note_passes_over_a_tree_or_library_it_cannot_read(workspace, mem):
    """The note is advice: a half-written tree.json of another run made every no-hit `recall-search
    --id` fail as bad input (exit 2), for every run (a review of the commit adding the note)."""
    assert mem("index")[0] == 0
    (workspace.root / "live").mkdir()
    (workspace.root / "live" / "tree.json").write_text('{"run": "live", "steps": [')
    code, out, err = mem("recall-search", "--id", "alpha/a9")
    assert (code, out) == (1, "no events\n")
    assert err.startswith("mem: --id 'alpha/a9' names no step; nearest: alpha/")
    assert mem("recall-search", "--id", "a9", "--run", "alpha")[0] == 1
    workspace.library_path.write_text(workspace.library_path.read_text() + "{not json\n")
    code, out, err = mem("recall-search", "--id", "alpha/a9")
    assert (code, out) == (1, "no events\n") and err.startswith("mem: --id 'alpha/a9' names no step")


def test_recall_query_searches_briefs_and_returns(example):
    assert "fibre" in (EXAMPLE / "satake-two-levels" / "briefs" / "A8.md").read_text().lower()
    hits = example.recall_search("fibre method E6/F4 sheaf").hits
    assert any(h.path == "briefs/A8.md" for h in hits)


def test_both_bm25_engines_agree_on_the_fixture_queries(example):
    config = example.config
    rank_bm25 = Memory(example.workspace, replace(config, bm25=replace(config.bm25, engine="rank-bm25")))
    queries = read_queries(EXAMPLE / "eval" / "queries.jsonl")
    overlaps, firsts = [], 0
    for query in queries:
        a = [c.gid for c in example.retriever.ranked(ArchiveQuery(query.query, strategy="bm25"))]
        b = [c.gid for c in rank_bm25.retriever.ranked(ArchiveQuery(query.query, strategy="bm25"))]
        assert set(a) == set(b)  # the same candidates: every step sharing a token
        overlaps.append(len(set(a[:10]) & set(b[:10])) / max(1, min(10, len(a))))
        firsts += a[:1] == b[:1]
    assert sum(overlaps) / len(overlaps) >= 0.8
    assert firsts >= 0.8 * len(queries)


@pytest.mark.parametrize("run", ["satake-two-levels", "iwahori-two-levels"])
def test_the_rank_bm25_engine_keeps_every_step_of_a_run_that_shares_a_word(example, run):
    """Oracle: the steps of the run whose tokens meet the query's. A word in half of one run's steps
    is common there, not across the workspace: the rank-bm25 engine counts how rare a word is over
    all that memory holds (as the native engine does), so a run filter drops none of these."""
    from mem_retrieval.text.tokenize import token_string

    config = example.config
    rank_bm25 = Memory(example.workspace, replace(config, bm25=replace(config.bm25, engine="rank-bm25")))
    rows = example.retriever.searcher.table("steps").search().select(["gid", "run", "tokens"]) \
        .limit(10_000).to_arrow().to_pylist()
    texts = [q.query for q in read_queries(EXAMPLE / "eval" / "queries.jsonl") if not ids_in_query(q.query)]
    for text in texts + ["Iwahori sheaf generation", "residue characteristic 2 pair model"]:
        words = set(token_string(text).split())
        oracle = {r["gid"] for r in rows if r["run"] == run and words & set(r["tokens"].split())}
        for memory in (example, rank_bm25):
            found = {c.gid for c in memory.retriever.ranked(ArchiveQuery(text, strategy="bm25", run=run))}
            assert found == oracle, text
    # as of an event, the cut memory is what both engines count over: rank_bm25's formula gives a
    # word in exactly half the rows an idf of 0, so it may find a few less, never others
    kept, native = 0, 0
    for until in ("13", "60"):
        for text in texts[:5] + ["residue characteristic 2 pair model"]:
            query = ArchiveQuery(text, strategy="bm25", run=run, until=until)
            found = {c.gid for c in rank_bm25.retriever.ranked(query)}
            expected = {c.gid for c in example.retriever.ranked(query)}
            assert found <= expected, (text, until)
            kept, native = kept + len(found), native + len(expected)
    assert native > 0 and kept >= 0.9 * native


def test_no_search_imports_torch(example):
    """archive-get imports neither lancedb nor torch; an exact id lookup loads no model (neither
    ONNX Runtime nor torch); a text search (which embeds its query on ONNX Runtime) and a recall
    search import no torch."""
    code = (
        "import sys\n"
        "from mem_retrieval.cli.main import run\n"
        f"assert run(['--workspace', {str(example.workspace.root)!r}, 'archive-get', 'satake-two-levels/A5-7']) == 0\n"
        "assert 'torch' not in sys.modules and 'sentence_transformers' not in sys.modules\n"
        "assert 'lancedb' not in sys.modules\n"
        f"assert run(['--workspace', {str(example.workspace.root)!r}, 'archive-search', 'A5-7']) == 0\n"
        "assert 'torch' not in sys.modules and 'sentence_transformers' not in sys.modules\n"
        "assert 'onnxruntime' not in sys.modules  # an exact lookup embeds nothing\n"
        f"assert run(['--workspace', {str(example.workspace.root)!r}, 'archive-search', 'GL2m/Sp2m generation']) == 0\n"
        "assert 'onnxruntime' in sys.modules  # the query was embedded (on ONNX Runtime)\n"
        f"assert run(['--workspace', {str(example.workspace.root)!r}, 'recall-search', 'fibre method']) == 0\n"
        "assert 'torch' not in sys.modules and 'sentence_transformers' not in sys.modules\n"
        "assert 'transformers' not in sys.modules\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")


def test_a_one_shot_read_command_runs_without_pandas(example):
    """`mem archive-search` run as a command (no server) never imports pandas (pyarrow's dataset
    module would when pandas is installed, ~53 MB of a cold search's memory) and answers as
    in-process; pandas stays importable afterwards, and in-process callers (the API, the server)
    keep it."""
    import os

    root = str(example.workspace.root)
    code = (
        "import contextlib, io, sys\n"
        "from mem_retrieval.cli.main import main, run\n"
        f"argv = ['--workspace', {root!r}, 'archive-search', 'GL2m/Sp2m generation', '--setting', 'F_q((t))']\n"
        "one_shot, in_process = io.StringIO(), io.StringIO()\n"
        "with contextlib.redirect_stdout(one_shot):\n"
        "    assert main(argv) == 0\n"
        "assert 'pandas' not in sys.modules and 'lancedb' in sys.modules\n"
        "assert run(argv, out=in_process) == 0\n"
        "assert one_shot.getvalue() == in_process.getvalue() and 'satake' in one_shot.getvalue()\n"
        "import importlib.util\n"
        "if importlib.util.find_spec('pandas'):  # installed (e.g. by ray[data]): still importable\n"
        "    import pandas\n"
        "print('ok')\n"
    )
    env = dict(os.environ, MEM_NO_SERVER="1")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")


def test_a_one_shot_read_command_answers_a_lookup_of_pandas():
    """Without pandas, importing it fails as if it were missing, but looking it up answers (torch
    looks it up at import: the torch backend's every one-shot search ended in that traceback)."""
    import importlib.util

    from mem_retrieval.cli.main import _WithoutPandas

    finder = _WithoutPandas()
    sys.meta_path.insert(0, finder)
    kept = {name: sys.modules.pop(name) for name in list(sys.modules) if name.split(".")[0] == "pandas"}
    try:
        spec = importlib.util.find_spec("pandas")
        assert spec is not None and spec.origin is None  # nothing there to skip
        with pytest.raises(ModuleNotFoundError, match="not needed by a read command"):
            import pandas  # noqa: F401
        assert "pandas" not in sys.modules
    finally:
        sys.meta_path.remove(finder)
        sys.modules.update(kept)


@pytest.mark.slow
def test_a_one_shot_search_on_the_torch_backend(tmp_path):
    """`model.backend = "torch"` is a documented setting: its one-shot searches ended in a traceback
    (torch looked pandas up while read commands refused it)."""
    import os
    import shutil

    from conftest import EXAMPLE

    root = tmp_path / "ws"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".mem"))
    (root / "solve" / "mem.toml").write_text('[model]\nbackend = "torch"\nquantize = false\n')
    env = dict(os.environ, MEM_NO_SERVER="1")
    mem = [sys.executable, "-m", "mem_retrieval.cli", "--workspace", str(root)]
    assert subprocess.run([*mem, "index"], capture_output=True, env=env, timeout=600).returncode == 0
    result = subprocess.run([*mem, "archive-search", "GL2m/Sp2m generation"], capture_output=True, text=True,
                            env=env, timeout=300)
    assert (result.returncode, result.stderr) == (0, "") and "satake-two-levels/" in result.stdout


@pytest.mark.slow
def test_cli_json_shape(example):
    result = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "--workspace", str(example.workspace.root),
                             "--json", "archive-search", "GL2m/Sp2m generation", "--setting", "F_q((t))"],
                            capture_output=True, text=True, timeout=120)
    data = json.loads(result.stdout)
    assert result.returncode == 0
    assert {"query", "setting", "page", "pages", "total", "hits"} <= set(data)
    assert {"id", "run", "kind", "statement", "status", "grade", "setting", "setting_match",
            "score"} <= set(data["hits"][0])
    result = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "--workspace", str(example.workspace.root),
                             "archive-search", "GL2m/Sp2m generation", "--page", "99"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "pages" in result.stderr and result.stderr.count("\n") == 1


def test_an_exact_id_lookup_lists_only_the_steps_named(example):
    page = example.archive_search("A5-9")
    assert [h.id for h in page.hits] == ["satake-two-levels/A5-9"] and page.total == 1
    both = example.archive_search("A2-4")  # a bare id held by two runs: both, by run
    assert [h.id for h in both.hits] == ["iwahori-two-levels/A2-4", "satake-two-levels/A2-4"]
    assert all(h.via == "id" for h in both.hits)
    # a plain word is a text query even when it is one word
    assert example.archive_search("Frobenius").total > 1
    assert page.notes == both.notes == ()


def test_an_id_that_names_no_step_says_so_not_only_gives_text_hits(example):
    """A typo in an id (or a step not indexed yet) made an exact lookup a text search whose hit 1
    an agent could take for the step it asked for: a note names the id; none for ids that name."""
    typo = example.archive_search("satake-two-levels/A5-77")
    assert typo.total > 1 and all(h.via == "text" for h in typo.hits)
    (note,) = typo.notes
    assert note.param == "query" and note.message.startswith("'satake-two-levels/A5-77': no step")
    assert "the hits are a text search; nearest: satake-two-levels/A5-7, " in note.message
    half = example.archive_search("A5-9 A5-77")
    assert [h.id for h in half.hits] == ["satake-two-levels/A5-9"]
    assert [n.message.split(":")[0] for n in half.notes] == ["'A5-77'"]
    filtered = example.archive_search("A5-9", run="iwahori-two-levels")  # satake's, left out
    assert filtered.notes and "'A5-9'" in filtered.notes[0].message
    # a symbol is no mistyped id: a bare word of the shape of no step id here (a9-9, a-9) says
    # nothing (it did: "E6: no step has this id (a typo…)" on the maths agent's commonest query)
    for symbols in ("E6", "SL2", "GL2m", "C_K", "E6 F4", "GL2m Sp2m"):
        found = example.archive_search(symbols)
        assert found.total > 0 and found.notes == (), symbols
    assert [n.message.split(":")[0] for n in example.archive_search("E6 A5-77").notes] == ["'A5-77'"]
    mixed = example.archive_search("E6 A5-9")  # a symbol beside an id: the id first, then E6's text
    assert (mixed.hits[0].id, mixed.hits[0].via, mixed.notes) == ("satake-two-levels/A5-9", "id", ())
    assert mixed.total > 1 and all(h.via == "text" for h in mixed.hits[1:])
    assert example.archive_search("A5-9 A5-77").total == 1  # a typo beside an id: the id alone, noted
    for typo in ("A5-77.", "A5-77:", "(A5-77)"):  # a typo is judged by its shape without the marks
        (note,) = example.archive_search(typo).notes
        assert "A5-77" in note.message.split(": no step")[0], typo
    import io

    from mem_retrieval.cli.main import run

    out, err = io.StringIO(), io.StringIO()
    code = run(["--workspace", str(example.workspace.root), "archive-search", "satake-two-levels/A5-77"],
               out=out, err=err)
    assert code == 0 and err.getvalue().startswith("mem: QUERY 'satake-two-levels/A5-77': no step this")


def test_an_id_ending_in_punctuation_is_looked_up_as_written_first(workspace):
    """Lean names end in ? or ! (``List.get?``, ``Array.get!``; SPEC §2 allows any character but
    white space and /): the lookup stripped them as it strips a sentence's full stop, and answered
    ``List.get?`` with ``List.get``. The word as written comes first, then without the mark
    (``see b1.`` still finds b1), and a word names a step when either form does."""
    from conftest import make_step

    workspace.add_step("beta", make_step("List.get?"))
    workspace.add_step("beta", make_step("List.get"))
    workspace.add_step("beta", make_step("Array.get!"))
    memory = Memory.open(workspace.root)
    memory.index(progress=False)
    for lookup in range(2):  # through the index, then from the id map
        asked = memory.archive_search("List.get?")
        assert [h.id for h in asked.hits[:2]] == ["beta/List.get?", "beta/List.get"] and not asked.notes
        asked = memory.archive_search("beta/Array.get!")
        assert [h.id for h in asked.hits] == ["beta/Array.get!"] and not asked.notes
        asked = memory.archive_search("b1. Array.get!")
        assert [h.id for h in asked.hits] == ["beta/b1", "beta/Array.get!"] and not asked.notes
    missing = memory.archive_search("beta/Array.set!")
    assert [n.message.split(":")[0] for n in missing.notes] == ["'beta/Array.set!'"]  # as written


def test_id_lookups_from_the_id_map_equal_those_read_from_the_index(example):
    """From its second id lookup a searcher answers from an in-memory id map and reads only the
    rows a page shows. Every id of the example, bare and global, alone and in pairs, must give the
    same hits and pages as a fresh searcher's lookup through the index, and as the brute-force
    oracle: every step named, in the order the query names them, ties by gid."""
    ws = example.workspace
    gids = sorted({s.gid for run in ws.runs() for s in ws.tree(run).steps}
                  | {e.gid for e in ws.library()})
    sids = sorted({g.split("/", 1)[1] for g in gids})
    queries = sids + gids[::3] + [f"{a} {b}" for a, b in zip(sids[::4], sids[1::4])] + [
        f"{gids[0]} {gids[0].split('/', 1)[1]}"]
    warm = Memory.open(ws.root)
    warm.archive_search(sids[0])
    warm.archive_search(sids[1])
    assert warm.retriever.searcher._id_map is not None  # the map path is what the rest checks
    for query in queries:
        refs = query.split()
        oracle = sorted((g for g in gids if g in refs or g.split("/", 1)[1] in refs),
                        key=lambda g: (min(refs.index(r) for r in (g, g.split("/", 1)[1])
                                           if r in refs), g))
        through_index = Memory.open(ws.root).archive_hits(query)  # a fresh searcher: no map
        assert [h.id for h in through_index] == oracle, query
        assert warm.archive_hits(query) == through_index, query
        for page in range(1, warm.archive_search(query).pages + 1):
            fresh = Memory.open(ws.root)
            assert warm.archive_search(query, page=page) == fresh.archive_search(query, page=page)
    # filters are applied by the index, map or not; settings only mark the hits
    assert ids(warm.archive_search("A2-4", run="iwahori-two-levels")) == ["iwahori-two-levels/A2-4"]
    marked = warm.archive_search("A2-4", setting="F_q((t))")
    assert marked == Memory.open(ws.root).archive_search("A2-4", setting="F_q((t))")
    assert all(h.setting_match is not None for h in marked.hits)


def test_a_search_reads_one_index_version_though_another_thread_reindexes_meanwhile(workspace, mem):
    """A search took its row ids from one searcher and read the rows through whichever searcher
    the retriever held next: a reindex meanwhile (Memory.index() in another thread) replaced it, and
    an id lookup of a step just edited raised KeyError. Here the reindex runs between the two."""
    from mem_retrieval.retrieval.retriever import Retriever

    assert mem("index")[0] == 0
    memory = Memory.open(workspace.root)
    for _ in range(2):  # the searcher's id map is built: a lookup gives row ids, read by complete()
        memory.archive_search("alpha/a2")
    ranked = Retriever.ranked

    def ranked_then_reindexed(self, query):
        found = ranked(self, query)
        workspace.edit_step("alpha", "a2", statement="a statement edited while the search ran")
        memory.index()  # reopens: the retriever's next searcher reads the new version
        return found

    Retriever.ranked = ranked_then_reindexed
    try:
        page = memory.archive_search("alpha/a2")
    finally:
        Retriever.ranked = ranked
    edited = "a statement edited while the search ran"
    assert page.hits[0].id == "alpha/a2" and page.hits[0].statement != edited
    assert memory.archive_search("alpha/a2").hits[0].statement == edited


HOST = """
import json, multiprocessing, sys, warnings
from mem_retrieval import Memory

warnings.simplefilter("ignore")  # Python's and lancedb's notes on forking a process with threads
memory = Memory.open(sys.argv[1])
for _ in range(3):  # the query-embedding pool and its thread, the ONNX session
    memory.archive_search("GL2m/Sp2m generation")
searcher = memory.retriever.searcher
parent = searcher.query_vector_soon("Satake transform").result().tolist()
answers = multiprocessing.get_context("fork").Queue()

def child():
    answers.put(searcher.query_vector_soon("Satake transform").result(timeout=60).tolist())

process = multiprocessing.get_context("fork").Process(target=child, daemon=True)
process.start()
process.join(90)
hung = process.is_alive()
print(json.dumps({"hung": hung, "same": not hung and answers.get(timeout=10) == parent}))
"""


def test_a_forked_child_embeds_its_queries_as_its_parent_does(example):
    """A host that searched, then forked workers (multiprocessing's fork, a pre-forking server):
    the query-embedding pool's thread and the ONNX session's were the parent's, so in the child
    every search that embeds its query waited for ever (or crashed). The host is a process of its
    own: this one's other threads are no host's. (LanceDB's own fork support is experimental: the
    README says to fork before opening a Memory, or to spawn.)"""
    done = subprocess.run([sys.executable, "-c", HOST, str(example.workspace.root)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "MEM_NO_SERVER": "1"})
    found = json.loads(done.stdout)
    assert (done.returncode, found) == (0, {"hung": False, "same": True}), done.stderr[-2000:]


FORKED = """
import json, multiprocessing, sys, warnings
from mem_retrieval import Memory

warnings.simplefilter("ignore")
config = sys.argv[3] if len(sys.argv) > 3 else None
memory = Memory.open(sys.argv[1], config)
if sys.argv[2] == "after":  # a search; on a store, reading meta.json alone opens its client
    memory.archive_search("GL2m/Sp2m generation")
elif sys.argv[2] == "meta":
    memory.index_refusal()
answers = multiprocessing.get_context("fork").Queue()

def child():
    said = []
    for call in (lambda: memory.archive_search("Satake transform").total,
                 lambda: memory.recall_search("registry").total,
                 lambda: Memory.open(sys.argv[1], config).recall_search("registry").total,
                 lambda: memory.index(progress=False).embedded):
        try:
            said.append(call())
        except Exception as error:
            said.append(f"{type(error).__name__}: {error}".replace(str(__import__('os').getppid()), "PID"))
    answers.put(said)

process = multiprocessing.get_context("fork").Process(target=child, daemon=True)
process.start()
process.join(90)
hung = process.is_alive()
print(json.dumps({"hung": hung, "said": None if hung else answers.get(timeout=10)}))
"""


FORK_REFUSED = ("BadInput: this process was forked from process PID after that one opened an index: LanceDB "
                "does not survive a fork (a read hangs or crashes): fork before the first search or index, "
                "or use multiprocessing's spawn or forkserver start method")


def forked_child(root, when: str, *config: str) -> dict:
    """What a child forked (``FORKED``) from a host that opened ``root``'s memory ``when`` (before
    any search, ``after`` one, or after reading its ``meta``) answers: each call's result or error."""
    done = subprocess.run([sys.executable, "-c", FORKED, str(root), when, *config], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "MEM_NO_SERVER": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.slow  # two processes, each loading the model (6 s)
def test_a_child_forked_after_its_parent_opened_the_index_is_refused_not_hung(example):
    """A child forked after its parent searched (multiprocessing's fork, a pre-forking server)
    waited for ever at its first read of a table the parent had read (lancedb's background loop),
    and a Memory the child opened afresh crashed it (SIGSEGV) in recall: the README called it a
    crash now and then. Every read or write of an index is refused in one line; a child forked
    before the parent's first search searches as any process does."""
    assert forked_child(example.workspace.root, "after") == {"hung": False, "said": [FORK_REFUSED] * 4}
    found = forked_child(example.workspace.root, "before")
    assert not found["hung"] and found["said"][0] > 0 and found["said"][1] > 0 and found["said"][3] == 0


@pytest.mark.slow  # a process loading the model (3 s)
def test_record_in_a_forked_child_is_refused_before_it_writes_the_library(workspace):
    """`record` in a child forked after its parent searched wrote the library, then met the fork's
    refusal at its index step: the library written, the index owed. Refused before the write."""
    host = FORKED.replace("memory.archive_search(\"Satake transform\").total", "memory.record('alpha').run")
    Memory.open(workspace.root).index(progress=False)
    before = workspace.library_path.read_bytes()
    assert Memory.open(workspace.root).record("alpha", dry_run=True).admitted  # a2 would be admitted
    done = subprocess.run([sys.executable, "-c", host, str(workspace.root), "after"], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "MEM_NO_SERVER": "1"})
    said = json.loads(done.stdout)["said"][0]
    assert said == FORK_REFUSED + " (record alpha refused: nothing was admitted)", done.stderr[-2000:]
    assert workspace.library_path.read_bytes() == before


def test_a_forgotten_query_vector_is_embedded_anew(example, monkeypatch):
    """The bench times the default `--until` on the texts it has just timed uncut: their vectors
    came from the cache, and the cut search read 4.9 ms p50 against 7.8 ms uncut at 1,000 steps."""
    from mem_retrieval.retrieval.search import forget_query_vectors
    from mem_retrieval.text import embed

    embedded, real = [], embed.embed_query
    monkeypatch.setattr(embed, "embed_query",
                        lambda *args, **kw: embedded.append(args[0]) or real(*args, **kw))
    text = "a Satake transform asked twice for the bench"
    first = example.archive_search(text)
    assert example.archive_search(text) == first and len(embedded) == 1  # the second read the cache
    forget_query_vectors()
    assert example.archive_search(text) == first and len(embedded) == 2


def test_recall_text_shows_a_brief_up_to_its_excerpt_whole_and_says_where_a_longer_one_is(example):
    """The text cut the 300-character excerpt at 200, and said "whole in --json" under a brief of
    246 characters it had then shown whole."""
    import io

    from mem_retrieval.cli.main import run as run_cli

    def text(*argv: str) -> str:
        out = io.StringIO()
        assert run_cli(["--workspace", str(example.workspace.root), *argv], out=out, err=io.StringIO()) == 0
        return out.getvalue()

    for query, whole in (("redirect", True), ("brief", False)):  # a brief of 246 characters; of 379
        (hit, *_) = json.loads(text("--json", "recall-search", query, "--run", "iwahori-two-levels"))["hits"]
        assert hit["body"] and (len(hit["body"]) <= 300) == whole
        shown = text("recall-search", query, "--run", "iwahori-two-levels")
        assert f"   | {hit['excerpt']}\n" in shown and len(hit["excerpt"]) > 200
        said = (f"({len(hit['body']):,} characters: {hit['run']}/{hit['path']}; whole as body in the "
                "--json output)")
        assert (said in shown) != whole


def test_calls_in_one_process_share_a_parser_and_never_each_others_arguments(example):
    """`mem serve` and the API's callers of ``cli.main.run`` parse every call with one parser, built
    once: a call's options (`--page 2`, `--strategy` given twice) never carry into the next, and calls
    from several threads at once answer as they do one by one."""
    import io
    from concurrent.futures import ThreadPoolExecutor

    from mem_retrieval.cli.main import run

    root = str(example.workspace.root)
    calls = [["--json", "archive-search", "Frobenius fixed field", "--page", "2"],
             ["--json", "archive-search", "Frobenius fixed field"],
             ["archive-search", "Satake transform", "--setting", "F_q((t))"],
             ["--json", "archive-get", "satake-two-levels/A5-7"],
             ["--json", "recall-search", "Hecke"],
             ["archive-search", "Satake transform"]]

    def call(argv: list[str]) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        return run(["--workspace", root, *argv], out=out, err=err), out.getvalue(), err.getvalue()

    alone = [call(argv) for argv in calls]
    assert [json.loads(alone[i][1])["page"] for i in (0, 1)] == [2, 1]
    assert alone[2][1] != alone[5][1]  # the setting of the one before is not the next one's
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(call, calls * 4))
    assert together == alone * 4


def test_a_search_looks_at_each_runs_tree_and_log_once(workspace, mem, monkeypatch):
    """Every search lists the runs and asks, of each, whether its tree.json (archive-search) or
    its log (recall-search) was written since the last `mem index`: at 2,000 runs these looks were
    most of a warm search (recall-search 55 ms, against 34 ms once each file is looked at once).
    Counted, not timed: one stat of each run's tree.json and log a search (and of any other such
    path it looks at: the folder named as the workspace, `solve/`), whatever it says."""
    import os

    assert mem("index")[0] == 0
    looks: list[str] = []
    real = os.stat

    def counted(path, *args, **kwargs):
        if str(path).endswith(("tree.json", "events.jsonl")):
            looks.append(os.path.relpath(os.fspath(path), workspace.root))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", counted)
    workspace.add_step("alpha", make_step("a6", statement="the quokka bound"))  # a note to give
    trees = ["alpha/tree.json", "beta/tree.json"]
    logs = ["alpha/memory/events.jsonl", "beta/memory/events.jsonl"]
    for argv, each, said in ((("archive-search", "quokka"), trees, "was written after the last"),
                             (("recall-search", "a2"), trees + logs, "")):
        looks.clear()
        assert said in mem(*argv)[2]
        assert set(each) <= set(looks) and len(looks) == len(set(looks)), (argv, looks)
