"""The citation graph and the graph strategies: counts and votes worked out by hand on the shared
toy workspace, leave-one-out (a query never finds its gold through its own step, nor through
work written after it, by any strategy; nor does a tuned model train on either, in `mem tune`
--holdout-queries or --eval), ``--until`` cutting the graph as it cuts the text, an incremental
index keeping the graph current, and the asking run's citations (``context_run``) on a workspace of
their own.

The toy workspace (conftest): alpha/a2 cites a1 (and the source d1, not a step), alpha/a4 cites
a2, beta/b1 cites alpha/a1 (and d1). So a1 is cited twice, a2 once."""

from __future__ import annotations

import io

import numpy as np
import pytest

from conftest import build_workspace, make_step
from mem_retrieval.cli.main import run as run_cli
from mem_retrieval.memory import Memory
from mem_retrieval.retrieval.query import ArchiveQuery, Filters, Hidden, Until
from mem_retrieval.retrieval.strategies import STRATEGIES

TEXT_STRATEGIES = list(STRATEGIES)


def index(root) -> Memory:
    assert run_cli(["--workspace", str(root), "index"], out=io.StringIO(), err=io.StringIO()) == 0
    return Memory.open(root)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return index(build_workspace(tmp_path_factory.mktemp("graph") / "ws").root)


def gids(memory: Memory) -> list[str]:
    """The global id of each row of the memory's citation graph (the graph keeps only keys)."""
    searcher = memory.retriever.searcher
    data = searcher.table("steps").search().select(["key", "gid"]).limit(10_000).to_arrow()
    by_key = dict(zip(data["key"].to_pylist(), data["gid"].to_pylist()))
    return [by_key[int(k)] for k in searcher.graph().keys]


def counts(memory: Memory, cited) -> dict[str, int]:
    return {gid: int(n) for gid, n in zip(gids(memory), cited) if n}


def test_citation_counts_by_hand(toy):
    graph = toy.retriever.searcher.graph()
    assert counts(toy, graph.in_degree(None)) == {"alpha/a1": 2, "alpha/a2": 1}
    hidden = graph.visible(Filters(hide=graph.before("beta/b1")))
    assert counts(toy, graph.in_degree(hidden)) == {"alpha/a1": 1, "alpha/a2": 1}
    assert not hidden[gids(toy).index("beta/b1")]
    # a run excluded is still memory: it only stops being a candidate
    assert graph.visible(Filters(exclude_run="beta")) is None


def by_hand(toy, per_voter: str, similarity: list[float], hidden: str | None = None) -> dict[str, float]:
    """``graph.<per_voter>`` with the voters a2, a4, b1 at ``similarity``: the nonzero values by
    gid (with ``hidden`` hidden)."""
    graph = toy.retriever.searcher.graph()
    names = gids(toy)
    row = {gid: i for i, gid in enumerate(names)}
    voters = np.asarray([row["alpha/a2"], row["alpha/a4"], row["beta/b1"]])
    seen = graph.visible(Filters(hide=graph.before(hidden))) if hidden else None
    values = getattr(graph, per_voter)(voters, np.asarray(similarity), seen)
    return {g: v for g, v in zip(names, values) if v}


def test_votes_by_hand(toy):
    assert by_hand(toy, "votes", [0.5, 0.25, 1.0]) == {"alpha/a1": 1.5, "alpha/a2": 0.25}
    # links to a hidden step drop
    assert by_hand(toy, "votes", [0.5, 0.25, 1.0], hidden="alpha/a2") == {"alpha/a1": 1.5}


def test_nearest_citing_voter_by_hand(toy):
    """a1 is cited by a2 (.5) and b1 (1.0), a2 by a4 (.25); a voter less similar than nothing
    counts as 0, and a hidden step keeps no best."""
    assert by_hand(toy, "nearest_citing", [0.5, 0.25, 1.0]) == {"alpha/a1": 1.0, "alpha/a2": 0.25}
    assert by_hand(toy, "nearest_citing", [0.5, -0.25, -1.0]) == {"alpha/a1": 0.5}
    assert by_hand(toy, "nearest_citing", [0.5, 0.25, 1.0], hidden="alpha/a2") == {"alpha/a1": 1.0}


def test_votes_and_nearest_citing_match_a_loop_over_the_links():
    """On a random graph (steps citing none, one or several, a link repeated, a step citing
    itself, a voter listed twice, negative similarities, a mask of what is seen), each is the plain
    loop over every voter's every step it cites, itself aside: the sum of its weights, the best of
    its similarities (at least 0). A parent named twice counted twice: two votes, two citations."""
    import pyarrow as pa

    from mem_retrieval.retrieval.graph import CitationGraph

    rng = np.random.default_rng(7)
    n = 40
    parents = [rng.integers(0, n, rng.integers(0, 4)).tolist() for _ in range(n)]
    parents[0] = [5, 5]  # one link twice
    parents[1] = [1, 6]  # itself
    graph = CitationGraph.of(pa.table({
        "key": np.arange(n, dtype=np.int64), "run_key": rng.integers(0, 3, n),
        "named_ts": np.full(n, -1), "named_seq": np.full(n, -1),
        "parent_keys": pa.array(parents, type=pa.list_(pa.int64()))}))
    voters = np.concatenate([rng.choice(n, 15, replace=False), [0, 0]])
    values = rng.uniform(-0.5, 1.0, len(voters))
    seen = rng.random(n) < 0.8
    total, best = np.zeros(n), np.zeros(n)
    voters[:2] = [1, 1]
    for voter, value in zip(voters, values):
        for parent in set(parents[voter]) - {voter}:
            total[parent] += value
            best[parent] = max(best[parent], value)
    assert graph.votes(voters, values, seen) == pytest.approx(total * seen)
    assert graph.nearest_citing(voters, values, seen) == pytest.approx(best * seen)
    assert graph.votes(voters, values, None) == pytest.approx(total)
    assert graph.cited.tolist() == np.bincount([p for step, cited in enumerate(parents)
                                                for p in set(cited) - {step}], minlength=n).tolist()
    empty = np.zeros(0, dtype=np.int64)
    assert not graph.votes(empty, np.zeros(0), None).any()
    assert not graph.nearest_citing(empty, np.zeros(0), None).any()


def test_a_candidate_is_read_with_the_steps_citing_it(toy):
    """expanded is the best cosine of the candidate and of the voters citing it, at least 0.
    Every toy step matches "statement" and there are fewer than graph.voters, so every step citing
    something is a voter (a4 too, though the query names it): the oracle is the brute force over
    the table's vectors and the links by hand."""
    text = "statement of a4"
    ids, found = toy.retriever.candidates(ArchiveQuery(text, strategy="rerank-graph"))
    searcher = toy.retriever.searcher
    data = searcher.table("steps").search().select(["gid", "vector"]).limit(10_000).to_arrow()
    cosine = dict(zip(data["gid"].to_pylist(),
                      np.asarray(data["vector"].to_pylist()) @ searcher.query_vector(text)))
    cited_by = {"alpha/a1": ["alpha/a2", "beta/b1"], "alpha/a2": ["alpha/a4"]}
    by = {c.gid: c for c in found}
    assert {"alpha/a1", "alpha/a2", "alpha/a5"} <= set(by)  # a4: an id hit, and a voter
    for gid, c in by.items():
        oracle = max([0.0, cosine[gid]] + [cosine[s] for s in cited_by.get(gid, [])])
        assert c.expanded == pytest.approx(oracle, abs=1e-5), gid
    assert by["alpha/a5"].expanded == pytest.approx(by["alpha/a5"].cosine)
    assert by["alpha/a2"].expanded > by["alpha/a2"].cosine  # a4, citing it, reads closer
    _, plain = toy.retriever.candidates(ArchiveQuery(text, strategy="graph"))
    assert all(c.expanded is None for c in plain)  # no model, no cosine


def test_a_step_citing_only_the_hidden_step_takes_no_voter_place(toy):
    """a4 cites only a2: with a2 hidden it has nothing to vote for, so the one voter place goes to
    the next neighbour (b1, citing a1), as if a2 had never been written."""
    from dataclasses import replace
    from types import SimpleNamespace

    from mem_retrieval.retrieval.graph import _voters

    graph = toy.retriever.searcher.graph()
    names = gids(toy)
    row = {gid: i for i, gid in enumerate(names)}
    neighbours = [SimpleNamespace(gid="alpha/a4", bm25=2.0), SimpleNamespace(gid="beta/b1", bm25=1.0)]
    config = replace(toy.config.graph, voters=1)
    rows, similarity = _voters(graph, neighbours, None, config, None)
    assert rows.tolist() == [row["alpha/a4"]] and similarity.tolist() == [1.0]
    seen = graph.visible(Filters(hide=graph.before("alpha/a2")))
    rows, similarity = _voters(graph, neighbours, None, config, seen)
    assert rows.tolist() == [row["beta/b1"]] and similarity.tolist() == [0.5]
    votes = graph.votes(rows, similarity ** config.vote_power, seen)
    assert {g: v for g, v in zip(names, votes) if v} == {"alpha/a1": 0.5 ** config.vote_power}


def test_until_cuts_the_graph_as_it_cuts_the_text(toy):
    """beta/b1 is first named on 2026-10-18: as of the day before it neither exists nor cites."""
    graph = toy.retriever.searcher.graph()
    cut = Until(micros=int(np.datetime64("2026-10-17T12:00:00", "us").astype(np.int64)))
    seen = graph.visible(Filters(until=cut))
    assert counts(toy, graph.in_degree(seen)) == {"alpha/a1": 1, "alpha/a2": 1}
    found = {h.id for h in toy.archive_hits("statement", until="2026-10-17T12:00:00Z")}
    assert "beta/b1" not in found and "alpha/a1" in found


def test_a_graph_candidate_carries_its_vote_and_prior(toy):
    """The query matches a4 best (its own words); a4 cites a2, so a2 is voted and carries log 2
    as its prior (cited once)."""
    ids, found = toy.retriever.candidates(ArchiveQuery("statement of a4", strategy="rerank-graph"))
    by = {c.gid: c for c in found}
    assert by["alpha/a2"].vote > 0 and by["alpha/a2"].prior == pytest.approx(np.log(2))
    assert by["alpha/a1"].prior == pytest.approx(np.log(3))
    assert by["alpha/a5"].prior == 0.0


def named_together(ws, run: str, ids: list[str]) -> None:
    """One event of ``run`` names ``ids`` (on 2026-10-17)."""
    ws.write_events(run, [{"time": "2026-10-17T03:00:00Z", "actor": "L", "kind": "return",
                           "ids": ids, "text": "lemmas"}])


def named_in_turn(ws, run: str, ids: list[str]) -> None:
    """``run``'s events name ``ids`` one by one, the n-th at 0n:00 on 2026-10-18."""
    ws.write_events(run, [{"time": f"2026-10-18T0{n}:00:00Z", "actor": "W", "kind": "return",
                           "ids": [step], "text": f"step {step}"} for n, step in enumerate(ids, 1)])


def add_work(ws, cites: dict[str, tuple[str, ...]], named: list[str]) -> None:
    """Run ``work``: a step for each entry of ``cites`` (its id -> what it cites), all with the same
    statement; its events name ``named`` in turn."""
    ws.add_run("work", [make_step(step, statement="a step", parents=parents)
                        for step, parents in cites.items()])
    named_in_turn(ws, "work", named)


def gamma_workspace(root, upto: str) -> Memory:
    """Run gamma's log names g, h, q, r in turn: q cites g, which shares no word with q; r, written
    after q, cites g too; run delta's d cites q and g (so it came after q), run epsilon's e cites r
    and g (so it came after r, hence after q); r, d and e share q's words. ``upto``: "h" (the
    workspace as it stood before q was written), "q" (the only route from q's text to g is then q
    itself) or "r" (with the later work: r, d and e)."""
    ws = build_workspace(root)
    steps = [make_step("g", statement="zircon quartz beryl"),
             make_step("h", statement="spherical Hecke operators generate the algebra"),
             make_step("q", statement="spherical Hecke operators generate", parents=("g",)),
             make_step("r", statement="spherical Hecke operators generate again", parents=("g",))]
    steps = steps[:[step["id"] for step in steps].index(upto) + 1]
    if upto == "r":
        ws.add_run("delta", [make_step("d", statement="spherical Hecke operators generate more",
                                       parents=("gamma/q", "gamma/g"))])
        ws.add_run("epsilon", [make_step("e", statement="spherical Hecke operators generate once more",
                                         parents=("gamma/r", "gamma/g"))])
    ws.add_run("gamma", steps)
    named_in_turn(ws, "gamma", [step["id"] for step in steps])
    return index(ws.root)


@pytest.fixture(scope="module")
def only_route(tmp_path_factory):
    return gamma_workspace(tmp_path_factory.mktemp("loo") / "ws", "q")


@pytest.fixture(scope="module")
def before_q(tmp_path_factory):
    return gamma_workspace(tmp_path_factory.mktemp("before") / "ws", "h")


@pytest.mark.parametrize("strategy", TEXT_STRATEGIES)
def test_a_query_never_finds_its_gold_through_its_own_step(only_route, before_q, strategy):
    """Hiding the query's step answers as if it had never been written: the gold is found
    exactly when it is found in the workspace without that step (by its own text, not by q)."""
    query = "spherical Hecke operators generate"
    hidden = {c.gid for c in only_route.retriever.ranked(ArchiveQuery(query, hide="gamma/q",
                                                                      strategy=strategy))}
    absent = {c.gid for c in before_q.retriever.ranked(ArchiveQuery(query, strategy=strategy))}
    assert "gamma/q" not in hidden
    assert hidden == absent
    if strategy in ("bm25", "rerank", "graph", "rerank-graph"):
        assert "gamma/g" not in hidden
    if strategy in ("graph", "rerank-graph"):  # the oracle: with its step visible, q votes for g
        seen = {c.gid for c in only_route.retriever.ranked(ArchiveQuery(query, strategy=strategy))}
        assert "gamma/g" in seen


@pytest.mark.parametrize("strategy", TEXT_STRATEGIES)
def test_a_query_text_naming_its_steps_links_does_not_find_them_by_id(only_route, before_q, strategy):
    """q's statement as written once its input was found (``\\Cref{g}``) names its link: asked
    leave-one-out, the evaluation leaves those words out, and answers as the text without them
    does in the workspace before q; the same text not naming q as its step finds g by its id."""
    from mem_retrieval.eval.judgments import Query
    from mem_retrieval.eval.ranker import make_ranker

    text = "spherical Hecke operators generate, by \\Cref{g},gamma/g"
    ranker = make_ranker(only_route.retriever)
    found = [hit.gid for hit in ranker(strategy, Query("q1", text, step="gamma/q"), 100)]
    plain = "spherical Hecke operators generate, by \\Cref{},"  # g: cited, if no id in a longer query
    assert found == [hit.gid for hit in make_ranker(before_q.retriever)(strategy, Query("q1", plain), 100)]
    if strategy in ("bm25", "rerank", "graph", "rerank-graph"):  # (ids first; the vector: by text)
        assert "gamma/g" not in found
        assert ranker(strategy, Query("q1", text), 100)[0].gid == "gamma/g"  # the oracle: by its id
    assert ranker(strategy, Query("q1", "gamma/g", step="gamma/q"), 100) == []  # nothing left to ask


def test_an_id_its_step_names_only_in_its_proof_is_a_link_too(tmp_path):
    """SPEC §10 counts a step's proof among its links: a query naming an id its step's proof names
    (and not its parents) found that step first by id, with the step hidden; the words are left out,
    as a parent's are. Oracle: the same text asked without its step finds it by id."""
    from mem_retrieval.eval.judgments import Query
    from mem_retrieval.eval.ranker import make_ranker

    ws = build_workspace(tmp_path / "ws")
    ws.add_step("alpha", make_step("p", statement="zorblax flux bound, see alpha/a1 and a2",
                                   proof="Apply alpha/a1, then a2 and the source d1 (alpha/d1)."))
    memory = Memory.open(ws.root)
    memory.index(progress=False)
    from mem_retrieval.eval.derived import step_links

    step = memory.workspace.step("alpha/p")
    assert step_links(memory.workspace, step, frozenset({"d1"})) == ["alpha/a1", "alpha/a2"]  # no source
    ranker = make_ranker(memory.retriever)
    for strategy in TEXT_STRATEGIES:
        asked = ranker(strategy, Query("q", "zorblax flux bound, see alpha/a1 and a2"), 100)
        assert [hit.gid for hit in asked[:2]] == ["alpha/a1", "alpha/a2"], strategy  # by their ids
        hidden = ranker(strategy, Query("q", "zorblax flux bound, see alpha/a1 and a2", step="alpha/p"), 100)
        if strategy in ("bm25", "rerank", "graph", "rerank-graph"):  # (the vector ranks every step)
            assert {"alpha/a1", "alpha/a2"}.isdisjoint(hit.gid for hit in hidden), strategy


@pytest.fixture(scope="module")
def later_work(tmp_path_factory):
    return gamma_workspace(tmp_path_factory.mktemp("later") / "ws", "r")


def test_hiding_a_step_hides_what_was_written_after_it_by_hand(later_work):
    graph = later_work.retriever.searcher.graph()
    names = gids(later_work)
    hidden = graph.before("gamma/q")
    # r is cut by gamma's log; d cites q, and e cites r: both written after q
    assert sorted(names[i] for i in graph.rows(np.asarray(hidden.keys))) == ["delta/d", "epsilon/e",
                                                                            "gamma/q"]
    assert hidden.seq == 3  # the third event of gamma's log names q
    seen = graph.visible(Filters(hide=hidden))
    assert {names[i] for i in np.flatnonzero(~seen)} == {"gamma/q", "gamma/r", "delta/d", "epsilon/e"}
    assert counts(later_work, graph.in_degree(None))["gamma/g"] == 4
    assert "gamma/g" not in counts(later_work, graph.in_degree(seen))
    # a step no step cites, in a run without a log: itself alone, its run-mates kept
    assert graph.before("delta/d").keys == (graph.keys[names.index("delta/d")],)
    assert graph.before("delta/d").seq is None
    assert graph.before("nowhere/x").keys == Hidden.only("nowhere/x").keys


def stated_first_workspace(root, full: bool, q_cites: tuple[str, ...] = ("proof/x",)) -> Memory:
    """A blueprint's first chapter states p, q, m, n (its log names them in turn); another chapter
    proves z, citing p, and x and y, both citing m, and w, citing n. q cites ``q_cites``. ``full``
    False: the workspace as its logs say it stood before q (p and z only)."""
    ws = build_workspace(root)
    intro = [make_step("p", statement="a covering lemma for balls"),
             make_step("q", statement="maximal operator bounded on Lebesgue spaces", parents=q_cites),
             make_step("m", statement="metric form of the maximal theorem"),
             make_step("n", statement="maximal operator bounded on Lebesgue spaces again")]
    proof = [make_step("z", statement="maximal operator of a covering", parents=("intro/p",)),
             make_step("x", statement="exceptional set of the maximal operator", parents=("intro/m",)),
             make_step("y", statement="exceptional set of the maximal operator again", parents=("intro/m",)),
             make_step("w", statement="maximal operator bounded on Lebesgue spaces once more",
                       parents=("intro/n",))]
    ws.add_run("intro", intro if full else intro[:1])
    ws.add_run("proof", proof if full else proof[:1])
    named_in_turn(ws, "intro", ["p", "q", "m", "n"] if full else ["p"])
    return index(ws.root)


@pytest.mark.parametrize("q_cites", [("proof/x",), ("proof/y", "intro/m"), ()])
def test_what_a_hidden_step_cites_never_changes_what_memory_held_before_it(tmp_path, q_cites):
    """q's log names m and n after q, so they are cut, with x, y and w, which cite them: whatever q
    cites (x, its gold, or y and m, or nothing), memory before q is p and z, as the logs say. Until
    2026-12-07 a run-mate q cites stayed, and so did what cites it: q's gold x was kept while y, the
    same but for q's link, was hidden (what memory held depended on the answer)."""
    full = stated_first_workspace(tmp_path / "full", True, q_cites)
    graph = full.retriever.searcher.graph()
    names = gids(full)
    seen = graph.visible(Filters(hide=graph.before("intro/q")))
    mine = {name for name in names if name.startswith(("intro/", "proof/"))}  # (beside the base runs')
    assert {names[i] for i in np.flatnonzero(seen)} & mine == {"intro/p", "proof/z"}
    before = stated_first_workspace(tmp_path / "before", False)
    text = "maximal operator bounded on Lebesgue spaces"
    for strategy in TEXT_STRATEGIES:
        ids, scores = scored(full.retriever.ranked(ArchiveQuery(text, hide="intro/q", strategy=strategy)))
        want = scored(before.retriever.ranked(ArchiveQuery(text, strategy=strategy)))
        assert ids == want[0] and scores == pytest.approx(want[1], abs=1e-6), strategy
        assert "proof/z" in ids and set(ids) & mine <= {"intro/p", "proof/z"}


@pytest.mark.parametrize("links, visible", [
    # q cites x of another run, x cites m, which q's log names after q: m is cut, and x with it
    ({"A/q": ["B/x"], "A/m": [], "B/x": ["A/m"]}, set()),
    # p is named before q: it stays, and x, citing only p; y cites m, named after q
    ({"A/p": [], "A/q": ["A/p", "B/x", "B/y"], "A/m": [], "B/x": ["A/p"], "B/y": ["A/m", "A/p"]},
     {"A/p", "B/x"}),
    # q and m cite each other: m is named after q, and cites it
    ({"A/q": ["A/m"], "A/m": ["A/q"]}, set()),
    # s cites q (written after q): cut, and m, named after q
    ({"A/q": ["B/s"], "A/m": [], "B/s": ["A/q", "A/m"]}, set()),
    # another run's step citing nothing stays; one citing a step that cites q does not
    ({"A/q": [], "B/u": [], "B/v": ["B/t"], "B/t": ["A/q"]}, {"B/u"}),
])
def test_a_hidden_step_hides_by_its_log_and_what_cites_it_never_by_what_it_cites(links, visible):
    """Hiding A/q, whose run's log names p, q, m in turn (other runs' steps are never named): what
    stays visible, worked out by hand from the links; the same when q cites nothing."""
    import pyarrow as pa

    from mem_retrieval.indexers.store import key
    from mem_retrieval.retrieval.graph import CitationGraph

    def seen(links: dict[str, list[str]]) -> set[str]:
        gids = list(links)
        graph = CitationGraph.of(pa.table({
            "key": [key(g) for g in gids], "run_key": [key(g.split("/")[0]) for g in gids],
            "named_ts": [1] * len(gids),
            "named_seq": [{"A/p": 0, "A/q": 1, "A/m": 2}.get(g, -1) for g in gids],
            "parent_keys": pa.array([[key(p) for p in links[g]] for g in gids], type=pa.list_(pa.int64()))}))
        return {g for g, v in zip(gids, graph.visible(Filters(hide=graph.before("A/q")))) if v}

    assert seen(links) == visible
    assert seen({**links, "A/q": []}) == visible


@pytest.mark.parametrize("strategy", TEXT_STRATEGIES)
def test_later_work_never_leads_a_query_to_its_gold(later_work, before_q, strategy, monkeypatch):
    """r, d and e would vote for g (each cites it and shares the query's words); as memory stood
    before q was written none existed, and leave-one-out answers as that memory would."""
    def found() -> set[str]:
        query = ArchiveQuery("spherical Hecke operators generate", hide="gamma/q", strategy=strategy)
        return {c.gid for c in later_work.retriever.ranked(query)}

    before = {c.gid for c in before_q.retriever.ranked(
        ArchiveQuery("spherical Hecke operators generate", strategy=strategy))}
    assert found() == before
    if strategy in ("bm25", "rerank", "graph", "rerank-graph"):  # (the vector finds every step here)
        assert "gamma/g" not in found()
    if strategy in ("graph", "rerank-graph"):  # the oracle: hiding q alone, r and d vote g in
        monkeypatch.setattr(type(later_work.retriever.searcher), "before",
                            lambda searcher, gid: Hidden.only(gid))
        assert "gamma/g" in found()


BEFORE_Q = "2026-10-18T02:30:00Z"  # gamma's log has named g and h, not yet q; delta has no log


def scored(hits) -> tuple[list[str], list[float]]:
    """Ranked candidates (``gid``) or event hits (``id``): their ids in order, and their scores."""
    return [getattr(h, "gid", None) or h.id for h in hits], [h.score for h in hits]


@pytest.mark.parametrize("held", ["index", "in memory"])
def test_a_cut_memory_ranks_and_scores_as_the_workspace_that_held_only_it(later_work, before_q, held,
                                                                        monkeypatch):
    """Hiding q, or asking as of the hour before q was named, answers exactly as the workspace
    before q (which never held q, r, d nor e): the same hits in the same order with the same scores,
    by every strategy, whether the index or the table in memory answers. BM25's statistics too:
    LanceDB's own index counts q's, r's and d's words in its idf and average length. The events as
    of that hour likewise (epsilon, without a log, is cut only by what it cites: r)."""
    import mem_retrieval.retrieval.search as search_module

    monkeypatch.setattr(search_module, "RESIDENT_AFTER", 10**9)
    full, cut = Memory.open(later_work.workspace.root), Memory.open(before_q.workspace.root)
    if held == "in memory":
        full.retriever.searcher.warm()
        cut.retriever.searcher.warm()
    text = "statement: spherical Hecke operators generate"  # every step of the toy has a statement
    for strategy in TEXT_STRATEGIES:
        want = scored(cut.retriever.ranked(ArchiveQuery(text, strategy=strategy)))
        assert len(want[0]) > 3
        for asked in (ArchiveQuery(text, hide="gamma/q", strategy=strategy),
                      ArchiveQuery(text, until=BEFORE_Q, strategy=strategy)):
            ids, scores = scored(full.retriever.ranked(asked))
            assert ids == want[0] and scores == pytest.approx(want[1], abs=1e-6), asked
    ids, scores = scored(cut.recall_hits("step"))
    assert len(ids) > 2 and scored(full.recall_hits("step", until=BEFORE_Q)) == (ids, pytest.approx(scores))


def test_tuning_data_keeps_out_what_a_held_out_query_may_not_see(later_work):
    """What leave-one-out hides is kept out of `mem tune --holdout-queries` too, and `mem eval
    paging` warns about a model trained on it: d cites q, which gamma's log names after g and h,
    so d came after all three; r came after q, and nothing says it came before d."""
    from mem_retrieval.indexers.store import key
    from mem_retrieval.retrieval.pairs import mine_pairs
    from mem_retrieval.tune import hidden_from, trained_on_answers

    retriever = later_work.retriever
    assert hidden_from(retriever, "gamma/q") == {key(g) for g in ("gamma/q", "gamma/r", "delta/d",
                                                                   "epsilon/e")}
    asked = ["gamma/g", "gamma/h", "gamma/q"]
    assert trained_on_answers(retriever, {"delta/d"}, asked) == ["gamma/g", "gamma/h", "gamma/q"]
    assert trained_on_answers(retriever, {"gamma/r"}, asked) == ["gamma/g", "gamma/h", "gamma/q"]
    assert trained_on_answers(retriever, {"gamma/g"}, ["gamma/q"]) == []  # written before q
    assert trained_on_answers(retriever, {"gamma/q"}, ["gamma/q"]) == ["gamma/q"]
    held = mine_pairs(retriever, exclude_keys=hidden_from(retriever, "gamma/q"))
    assert sorted(held.anchors) == ["alpha/a2", "alpha/a4", "beta/b1"]  # not q, r, d, e
    assert held.held == 6  # the links kept out: q's to g, r's to g, d's to q and g, e's to r and g


def test_a_step_kept_out_of_tuning_is_no_hard_negative_either(tmp_path):
    """p's best BM25 match that it does not cite is q (they share four words): q is p's hard
    negative, until q is kept out (a held-out query's step); then no pair holds q's statement."""
    from mem_retrieval.indexers.store import key
    from mem_retrieval.retrieval.pairs import mine_pairs

    ws = build_workspace(tmp_path / "ws")
    ws.add_run("held", [make_step("q", statement="spherical Hecke operators generate the algebra",
                                  parents=("alpha/a1",))])
    ws.add_run("other", [make_step("p", statement="spherical Hecke operators generate modules",
                                   parents=("alpha/a5",))])
    retriever = index(ws.root).retriever
    q = "spherical Hecke operators generate the algebra"
    negatives = {pair.anchor: pair.negative for pair in mine_pairs(retriever).pairs}
    assert negatives["spherical Hecke operators generate modules"] == q
    held = mine_pairs(retriever, exclude_keys={key("held/q")})
    assert "other/p" in held.anchors and "held/q" not in held.anchors
    assert all(q not in (pair.anchor, pair.positive, pair.negative) for pair in held.pairs)


def test_a_step_longer_than_a_query_may_be_still_gets_its_hard_negative(tmp_path):
    """The hard negative is searched with the step's statement: one past the query limit stopped
    `mem tune` with "query is 21,206 characters long" on a valid workspace. It is searched with
    what a search reads of it (``searched_part``): q still finds p, the two sharing four words."""
    from mem_retrieval.retrieval.pairs import mine_pairs
    from mem_retrieval.retrieval.query import MAX_QUERY_CHARS

    ws = build_workspace(tmp_path / "ws")
    long = "spherical Hecke operators generate the algebra " + "again " * MAX_QUERY_CHARS
    ws.add_run("held", [make_step("q", statement=long, parents=("alpha/a1",))])
    ws.add_run("other", [make_step("p", statement="spherical Hecke operators generate modules")])
    negatives = {pair.anchor[:40]: pair.negative for pair in mine_pairs(index(ws.root).retriever).pairs}
    assert negatives[long[:40]] == "spherical Hecke operators generate modules"


def test_a_sample_of_the_pairs_names_the_steps_it_kept_as_trained_on(later_work):
    """`mem tune --max-pairs` records (trained.json, meta.json) the steps whose links it trained
    on: those of the sampled pairs, not every step with a link, or `eval paging` warns of them."""
    from mem_retrieval.retrieval.pairs import mine_pairs
    from mem_retrieval.text.embed import prepare

    retriever = later_work.retriever
    every = mine_pairs(retriever)
    chars = retriever.config.model.max_chars
    statements = {gid: prepare(retriever.workspace.step(gid).statement, chars) for gid in every.anchors}
    assert len(every.pairs) > len(every.anchors) > 2
    for seed in range(5):
        sample = mine_pairs(retriever, max_pairs=2, seed=seed)
        assert len(sample.pairs) == 2 and set(sample.pairs) <= set(every.pairs)
        assert {statements[gid] for gid in sample.anchors} == {pair.anchor for pair in sample.pairs}
        assert set(sample.anchors) < set(every.anchors)


def test_unknown_steps_are_those_the_index_holds_no_row_for(later_work):
    """What `mem eval paging`, `mem eval fusion` and `mem tune --holdout-queries` warn about: a
    query step the index does not hold hides itself alone (``Hidden.only``)."""
    retriever = later_work.retriever
    asked = ["gamma/q", "gamma/nope", "delta/d", "zeta/q"]
    assert retriever.unknown_steps(asked) == ["gamma/nope", "zeta/q"]
    assert retriever.unknown_steps([]) == []


def test_tune_eval_keeps_out_other_runs_work_written_after_its_queries(later_work):
    """`mem tune --eval` holding out run gamma, whose query comes from q, trains on no step of gamma
    and not on delta/d or epsilon/e either: d cites q and e cites r, so both were written after the
    query's step."""
    from mem_retrieval.tune import held_out_pairs

    retriever = later_work.retriever
    assert sorted(held_out_pairs(retriever, {"gamma"}, []).anchors) == [
        "alpha/a2", "alpha/a4", "beta/b1", "delta/d", "epsilon/e"]
    assert sorted(held_out_pairs(retriever, {"gamma"}, ["gamma/q"]).anchors) == [
        "alpha/a2", "alpha/a4", "beta/b1"]


def test_the_hidden_step_loses_its_share_of_the_prior(only_route):
    graph = only_route.retriever.searcher.graph()
    row = gids(only_route).index("gamma/g")
    assert graph.in_degree(None)[row] == 1
    assert graph.in_degree(graph.visible(Filters(hide=graph.before("gamma/q"))))[row] == 0


def test_an_incremental_index_brings_the_graph_up_to_date(tmp_path):
    ws = build_workspace(tmp_path / "ws")
    memory = index(ws.root)
    graph = memory.retriever.searcher.graph()
    assert counts(memory, graph.cited).get("alpha/a5", 0) == 0
    ws.add_step("beta", make_step("b2", parents=("alpha/a5", "alpha/a2")))
    ws.edit_step("alpha", "a4", parents=[])
    report = memory.index(["beta", "alpha"])
    assert report.embedded == 1  # only b2's statement is new
    graph = memory.retriever.searcher.graph()
    assert counts(memory, graph.cited) == {"alpha/a1": 2, "alpha/a2": 1, "alpha/a5": 1}


def test_voted_steps_obey_the_setting_rule(only_route):
    """g is voted in (its step q visible); with a setting g's (Qp) is incompatible with, it is
    left out like any other candidate."""
    found = {c.gid for c in only_route.retriever.ranked(
        ArchiveQuery("spherical Hecke operators generate", setting="C", any_setting=False,
                     strategy="rerank-graph"))}
    assert "gamma/g" not in found


def test_voted_places_go_to_steps_the_query_may_have(tmp_path):
    """Two voters cite own/x1, one also other/y1; x1, voted twice, outranks y1 (1.15 against 0.71
    after hub damping). With one place for a voted step, x1 takes it; when the query leaves the run
    `own` out, x1 cannot be a candidate, and the place goes to y1 instead of being lost."""
    from dataclasses import replace

    ws = build_workspace(tmp_path / "ws")
    ws.add_run("own", [make_step("x1", statement="zircon quartz")])
    ws.add_run("other", [make_step("y1", statement="beryl topaz")])
    ws.add_run("delta", [make_step("v1", statement="ruby sapphire emerald", parents=("own/x1", "other/y1")),
                         make_step("v2", statement="ruby sapphire garnet", parents=("own/x1",))])
    indexed = index(ws.root)
    memory = Memory(indexed.workspace, replace(indexed.config, graph=replace(indexed.config.graph, voted=1)))

    def found(**options) -> set[str]:
        return {c.gid for c in memory.retriever.ranked(ArchiveQuery("ruby sapphire", strategy="graph", **options))}

    assert "own/x1" in found() and "other/y1" not in found()
    assert "other/y1" in found(exclude_run="own") and "own/x1" not in found(exclude_run="own")


def test_tied_votes_go_to_the_same_step_however_the_index_was_built(tmp_path):
    """v1 alone cites own/x1 and other/y1: their votes are equal. With one voted place the tie goes
    to the smaller key (a hash of the global id), not to the row that lies first in the table, so
    indexes built run by run in either order answer alike (the index is derived data)."""
    import shutil
    from dataclasses import replace

    from mem_retrieval.indexers.store import key

    ws = build_workspace(tmp_path / "ws")
    ws.add_run("own", [make_step("x1", statement="zircon quartz")])
    ws.add_run("other", [make_step("y1", statement="beryl topaz")])
    ws.add_run("delta", [make_step("v1", statement="ruby sapphire", parents=("own/x1", "other/y1"))])
    found = []
    for first in ("own", "other"):
        root = tmp_path / first
        shutil.copytree(ws.root, root)
        assert run_cli(["--workspace", str(root), "index", first], out=io.StringIO(),
                       err=io.StringIO()) == 0
        indexed = index(root)  # the rest after it: its row lies first
        config = replace(indexed.config, graph=replace(indexed.config.graph, voted=1))
        query = ArchiveQuery("ruby sapphire", strategy="graph")
        found.append({c.gid for c in Memory(indexed.workspace, config).retriever.ranked(query)})
    winner = min(("own/x1", "other/y1"), key=key)
    assert found[0] == found[1] == {"delta/v1", winner}


# ---- the query's own run as context -----------------------------------------------------------

@pytest.fixture(scope="module")
def working(tmp_path_factory):
    """Run lib holds three lemmas equal for BM25; run work's steps, named one event each in this
    order, cite lib: w1 -> l3, w2 -> l3 and l2, w3 -> l1; w4 cites nothing and no event names it."""
    ws = build_workspace(tmp_path_factory.mktemp("context") / "ws")
    ws.add_run("lib", [make_step(f"l{i}", statement=f"zircon lemma {word}")
                       for i, word in ((1, "one"), (2, "two"), (3, "six"))])
    add_work(ws, {"w1": ("lib/l3",), "w2": ("lib/l3", "lib/l2"), "w3": ("lib/l1",), "w4": ()},
             named=["w1", "w2", "w3"])
    named_together(ws, "lib", ["l1", "l2", "l3"])
    return index(ws.root)


def test_context_counts_by_hand(working):
    graph = working.retriever.searcher.graph()

    def cited(filters: Filters) -> dict[str, int]:
        seen = graph.visible(filters)
        return counts(working, graph.cited_by(graph.context("work", filters, seen), seen))

    assert cited(Filters()) == {"lib/l1": 1, "lib/l2": 1, "lib/l3": 2}
    # leave-one-out: only the steps named before the hidden one, as the run stood when it was written
    assert cited(Filters(hide=graph.before("work/w3"))) == {"lib/l2": 1, "lib/l3": 2}
    assert cited(Filters(hide=graph.before("work/w2"))) == {"lib/l3": 1}
    assert cited(Filters(hide=graph.before("work/w1"))) == {}
    assert cited(Filters(hide=graph.before("work/w4"))) == {}  # no event names it: nothing is known to come before
    # a hidden step of another run: the steps citing it (w1, w2) were written after it, so they
    # are gone too; the rest of the run stays
    assert cited(Filters(hide=graph.before("lib/l3"))) == {"lib/l1": 1}
    cut = Until(micros=int(np.datetime64("2026-10-18T02:30:00", "us").astype(np.int64)))
    assert cited(Filters(until=cut)) == {"lib/l2": 1, "lib/l3": 2}  # w3 not named yet
    assert not counts(working, graph.cited_by(graph.context("lib", Filters(), None), None))  # cites nothing


def test_a_batch_mate_of_the_hidden_step_is_not_yet_its_runs_citation(tmp_path):
    """Leave-one-out answers as the run stood when the hidden step was written: a step named by the
    same event (its batch-mate) is memory, but what it cites was not yet the run's citation. A
    context counting it (``named_seq <= hide.seq``) moved 2 of the example's 18 in-run queries."""
    ws = build_workspace(tmp_path / "ws")
    ws.add_run("lib", [make_step(f"l{i}", statement=f"zircon lemma {i}") for i in (1, 2, 3)])
    ws.add_run("work", [make_step("w1", statement="a step", parents=("lib/l1",)),
                        make_step("w2", statement="a step", parents=("lib/l2",)),
                        make_step("w3", statement="a step", parents=("lib/l3",))])
    ws.write_events("work", [
        {"time": "2026-10-18T01:00:00Z", "actor": "W", "kind": "return", "ids": ["w1"], "text": "one"},
        {"time": "2026-10-18T02:00:00Z", "actor": "W", "kind": "return", "ids": ["w2", "w3"], "text": "two"}])
    named_together(ws, "lib", ["l1", "l2", "l3"])
    memory = index(ws.root)
    graph = memory.retriever.searcher.graph()

    def cited(filters: Filters) -> dict[str, int]:
        seen = graph.visible(filters)
        return counts(memory, graph.cited_by(graph.context("work", filters, seen), seen))

    assert cited(Filters()) == {"lib/l1": 1, "lib/l2": 1, "lib/l3": 1}
    assert cited(Filters(hide=graph.before("work/w3"))) == {"lib/l1": 1}  # not w2's l2: named with w3
    assert cited(Filters(hide=graph.before("work/w2"))) == {"lib/l1": 1}


@pytest.mark.parametrize("strategy", ["graph", "rerank-graph"])
def test_what_the_asking_run_cites_ranks_first_and_nothing_else_moves(working, strategy):
    def ranked(**options) -> list[str]:
        return [h.id for h in working.archive_hits("zircon lemma", strategy=strategy, **options)]

    if strategy == "graph":  # equal for BM25, no voter: gid order
        assert ranked()[:3] == ["lib/l1", "lib/l2", "lib/l3"]
        assert ranked(context_run="work")[:3] == ["lib/l3", "lib/l1", "lib/l2"]  # cited twice, then once
    assert ranked()[0] != "lib/l3"  # last for BM25's ties (graph), and for the cosine (rerank-graph)
    assert ranked(context_run="work")[0] == ranked(context_run="work", hide="work/w2")[0] == "lib/l3"
    assert ranked(context_run="work", hide="work/w1")[:3] == ranked()[:3]  # nothing named before w1
    assert set(ranked(context_run="work")) == set(ranked())  # a context leaves nothing out
    ids, found = working.retriever.candidates(ArchiveQuery("zircon lemma", strategy=strategy))
    assert all(c.context == 0.0 for c in found)


@pytest.mark.parametrize("strategy", ["graph", "rerank-graph"])
def test_a_query_asked_from_a_run_is_ranked_by_the_in_run_weights(working, strategy, tmp_path):
    """Configs swap the tables: ranking by the context, or by the prior, alone puts l3 (cited twice
    by work) first; ranking by BM25 alone leaves the three tied lemmas in gid order. A query asked
    from a run is ranked by [fusion.<S>_in_run], one asked from none by [fusion.<S>]."""
    from mem_retrieval.configs import table_of
    from mem_retrieval.retrieval.strategies import FEATURES

    zero = dict.fromkeys(FEATURES, 0.0)

    def weights(**nonzero) -> str:
        return "".join(f"{name} = {value}\n" for name, value in (zero | nonzero).items())

    def ranked(plain: dict, in_run: dict, **options) -> list[str]:
        config = tmp_path / f"{len(list(tmp_path.iterdir()))}.toml"
        config.write_text(f"[fusion.{table_of(strategy, in_run=False)}]\n{weights(**plain)}\n"
                          f"[fusion.{table_of(strategy, in_run=True)}]\n{weights(**in_run)}")
        memory = Memory.open(working.workspace.root, config)
        return [h.id for h in memory.archive_hits("zircon lemma", strategy=strategy, **options)][:3]

    by_context, by_prior, by_bm25 = {"context": 1.0}, {"prior": 1.0}, {"bm25": 1.0}
    assert ranked(by_bm25, by_context, context_run="work")[0] == "lib/l3"
    assert ranked(by_prior, by_bm25, context_run="work") == ["lib/l1", "lib/l2", "lib/l3"]
    assert ranked(by_prior, by_bm25)[0] == "lib/l3"
    assert ranked(by_bm25, by_prior) == ["lib/l1", "lib/l2", "lib/l3"]


@pytest.fixture(scope="module")
def drawing(tmp_path_factory):
    """Run work draws on run q three times and on run p once: w1 -> q1, w2 -> q2 and p1,
    w3 -> q1 and its own w1 (named in that order). q3 and p2 are equal for BM25 and cited by none."""
    ws = build_workspace(tmp_path_factory.mktemp("affinity") / "ws")
    ws.add_run("q", [make_step("q1", statement="opal one"), make_step("q2", statement="opal two"),
                     make_step("q3", statement="garnet lemma alpha")])
    ws.add_run("p", [make_step("p1", statement="opal three"), make_step("p2", statement="garnet lemma beta")])
    add_work(ws, {"w1": ("q/q1",), "w2": ("q/q2", "p/p1"), "w3": ("q/q1", "work/w1")},
             named=["w1", "w2", "w3"])
    named_together(ws, "q", ["q1", "q2", "q3"])
    named_together(ws, "p", ["p1", "p2"])
    return index(ws.root)


def test_affinity_counts_the_links_into_each_run_by_hand(drawing):
    graph = drawing.retriever.searcher.graph()

    def per_run(filters: Filters) -> dict[str, int]:
        seen = graph.visible(filters)
        mates = graph.context("work", filters, seen)
        links = graph.affinity(mates, graph.cited_by(mates, seen))
        return {run: int(links[graph.run_index[gids(drawing).index(f"{run}/{first}")]])
                for run, first in (("q", "q1"), ("p", "p1"), ("work", "w1"))}

    assert per_run(Filters()) == {"q": 3, "p": 1, "work": 0}  # the run's own links (w3 -> w1) do not count
    assert per_run(Filters(hide=graph.before("work/w3"))) == {"q": 2, "p": 1, "work": 0}  # only what came before w3
    assert per_run(Filters(hide=graph.before("work/w2"))) == {"q": 1, "p": 0, "work": 0}
    assert per_run(Filters(hide=graph.before("q/q1"))) == {"q": 1, "p": 1, "work": 0}  # w1, w3 cite q1: gone
    cut = Until(micros=int(np.datetime64("2026-10-18T02:30:00", "us").astype(np.int64)))
    assert per_run(Filters(until=cut)) == {"q": 2, "p": 1, "work": 0}  # w3 not named yet


def test_a_step_of_the_run_the_asking_run_draws_on_ranks_first_and_nothing_else_moves(drawing):
    def ranked(**options) -> list[str]:
        return [h.id for h in drawing.archive_hits("garnet lemma", strategy="graph", **options)]

    assert ranked()[:2] == ["p/p2", "q/q3"]  # equal for BM25, no voter, no context: gid order
    assert ranked(context_run="work")[:2] == ["q/q3", "p/p2"]  # q is cited three times, p once
    assert set(ranked(context_run="work")) == set(ranked())
    _, found = drawing.retriever.candidates(ArchiveQuery("garnet lemma", strategy="rerank-graph",
                                                         context_run="work"))
    affinity = {c.gid: c.affinity for c in found}
    assert affinity["q/q3"] == pytest.approx(np.log1p(3)) and affinity["p/p2"] == pytest.approx(np.log1p(1))
    _, found = drawing.retriever.candidates(ArchiveQuery("garnet lemma", strategy="rerank-graph"))
    assert all(c.affinity == 0.0 for c in found)


def test_the_command_line_takes_the_asking_run(working):
    import json

    out = io.StringIO()
    assert run_cli(["--workspace", str(working.workspace.root), "--json", "archive-search",
                    "zircon lemma", "--context-run", "work", "--strategy", "graph"],
                   out=out, err=io.StringIO()) == 0
    assert [h["id"] for h in json.loads(out.getvalue())["hits"]][:2] == ["lib/l3", "lib/l1"]


def test_before_a_run_began_none_of_it_nor_what_cites_it_is_memory():
    """Hiding run B (``before_run``, the reuse test's Fix): B's steps go, and so does every step
    citing one of them, directly (C/x cites B/b1) or through others (D/y cites C/x); A's steps,
    and C/z citing only A, stay. Worked out by hand."""
    import pyarrow as pa

    from mem_retrieval.indexers.store import key
    from mem_retrieval.retrieval.graph import CitationGraph

    links = {"A/a1": [], "A/a2": ["A/a1"], "B/b1": ["A/a1"], "B/b2": ["B/b1"], "C/x": ["B/b1", "A/a2"],
             "D/y": ["C/x"], "C/z": ["A/a2"]}
    gids = list(links)
    graph = CitationGraph.of(pa.table({
        "key": [key(g) for g in gids], "run_key": [key(g.split("/")[0]) for g in gids],
        "named_ts": [1] * len(gids), "named_seq": [1, 2, 1, 2, 1, -1, -1],
        "parent_keys": pa.array([[key(p) for p in links[g]] for g in gids], type=pa.list_(pa.int64()))}))
    seen = graph.visible(Filters(hide=graph.before_run("B")))
    assert {g for g, v in zip(gids, seen) if v} == {"A/a1", "A/a2", "C/z"}
    assert graph.in_degree(seen).tolist() == [1, 1, 0, 0, 0, 0, 0]  # a1 by a2, a2 by C/z: what is left


def test_a_parent_named_twice_or_a_step_citing_itself_adds_no_vote(tmp_path):
    """V1 names X four times (bare and as `r/X`), V2 names Y once (X and Y alike, V1 and V2 alike): X
    was voted and counted four times and ranked above Y (.54 against .21); a step citing itself (which
    `check` calls a circular proof) voted for itself and outranked its twin. Each is one link, or
    none, and the twins score alike, by every graph strategy."""
    workspace = build_workspace(tmp_path / "ws")
    workspace.add_run("r", [make_step("X", statement="an unrelated lemma about tori"),
                            make_step("Y", statement="an unrelated lemma about tori"),
                            make_step("V1", statement="alpha beta gamma delta",
                                      parents=("X", "X", "r/X", "X")),
                            make_step("V2", statement="alpha beta gamma delta", parents=("Y",)),
                            make_step("W1", statement="epsilon zeta eta theta", parents=("W1",)),
                            make_step("W2", statement="epsilon zeta eta theta")])
    memory = Memory.open(workspace.root)
    memory.index(progress=False)
    for strategy in ("graph", "rerank-graph"):
        scores = {h.id: h.score for h in memory.archive_hits("alpha beta gamma delta", strategy=strategy)}
        assert scores["r/X"] == pytest.approx(scores["r/Y"]), (strategy, scores)
        scores = {h.id: h.score for h in memory.archive_hits("epsilon zeta eta theta", strategy=strategy)}
        assert scores["r/W1"] == pytest.approx(scores["r/W2"]), (strategy, scores)
