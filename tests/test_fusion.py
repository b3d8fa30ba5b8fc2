"""Choosing fusion weights: the grid, folds by run, the cross-validated choice, and the guard set,
on hand-made candidate lists whose best weights are known; then `mem eval fusion` end to end."""

from __future__ import annotations

import io
import json
import math

import pytest

from conftest import build_workspace, make_step
from mem_retrieval.configs import RUN_FEATURES
from mem_retrieval.cli.main import run as run_cli
from mem_retrieval.eval.folds import group_folds
from mem_retrieval.eval.fusion import (OBJECTIVE, Guard, QueryFeatures, choose_weights, grid_metrics,
                                       rank, simplex)
from mem_retrieval.eval.metrics import per_query
from mem_retrieval.retrieval.strategies import FEATURES, NORMALISED, fused_score_grid, fused_scores


def test_the_grid_is_the_simplex():
    grid = simplex(["a", "b", "c"], 0.5)
    assert len(grid) == 6 and all(sum(w.values()) == pytest.approx(1.0) for w in grid)
    assert {tuple(w.values()) for w in grid} == {(1, 0, 0), (0, 1, 0), (0, 0, 1), (0.5, 0.5, 0),
                                                 (0.5, 0, 0.5), (0, 0.5, 0.5)}
    assert len(simplex(["bm25", "cosine", "vote", "prior"], 0.1)) == 286  # C(13, 3)
    from mem_retrieval.eval.fusion import FEATURES as BY_STRATEGY, grid_size

    for strategy, step in (("graph", 0.25), ("rerank-graph", 0.2), ("graph", 0.1)):
        assert grid_size(strategy, step) == len(simplex(BY_STRATEGY[strategy], step))
    assert grid_size("rerank-graph", 0.05) == 230_230  # C(26, 6): the README's figure


def test_runs_go_whole_to_the_lightest_fold():
    # sizes r3: 3, r1: 2, r2: 1 -> r3 to fold 0, r1 to fold 1, r2 to fold 1 (2 < 3)
    assert group_folds(["r1", "r1", "r2", "r3", "r3", "r3"], 2) == [1, 1, 1, 0, 0, 0]


def features(qid: str, run: str, gold_feature: str) -> QueryFeatures:
    """Five candidates; the gold one (``{qid}-gold``) leads on ``gold_feature`` only, the others
    lead on bm25."""
    gids = (f"{qid}-gold",) + tuple(f"{qid}-{i}" for i in range(4))
    columns = {"bm25": [0.1, 1.0, 0.9, 0.8, 0.7], "cosine": [0.0] * 5, "vote": [0.0] * 5,
               "expanded": [0.0] * 5, "prior": [0.0] * 5, "context": [0.0] * 5, "affinity": [0.0] * 5}
    columns[gold_feature] = [1.0, 0.0, 0.0, 0.0, 0.0]
    return QueryFeatures(qid, run, (), gids, columns, in_run=False)


def test_rank_puts_id_hits_first_and_orders_by_the_weighted_features():
    f = features("q", "r", "vote")
    assert list(rank(f, {"vote": 1.0}, 100))[0] == "q-gold"
    assert list(rank(f, {"bm25": 1.0}, 100))[:2] == ["q-0", "q-1"]
    named = QueryFeatures("q", "r", ("x/named",), f.gids, f.features, in_run=False)
    assert list(rank(named, {"vote": 1.0}, 3)) == ["x/named", "q-gold", "q-0"]


def test_the_fused_score_by_hand_and_for_a_whole_grid_at_once():
    # bm25 and prior are divided by their best (4 and 0: a column of zeros stays 0); vote is absolute
    columns = {"bm25": [2.0, 4.0, 0.0], "vote": [0.5, 1.0, 0.25], "prior": [0.0, 0.0, 0.0]}
    assert fused_scores(columns, {"bm25": 0.5, "vote": 0.5}).tolist() == [0.5, 1.0, 0.125]
    assert fused_scores(columns, {"vote": 1.0, "prior": 1.0}).tolist() == [0.5, 1.0, 0.25]
    # each row of the grid is bit for bit its point's fused_scores: the tuning's ties are the search's
    import random

    rng = random.Random(0)
    columns = {name: [rng.choice((0.0, 0.3, 0.7, 1.9)) for _ in range(40)] for name in FEATURES}
    grid = simplex(FEATURES, 0.2)
    rows = fused_score_grid(columns, grid)
    assert rows.shape == (len(grid), 40)
    assert all(rows[p].tolist() == fused_scores(columns, w).tolist() for p, w in enumerate(grid))
    # and each row is the sum written out in plain Python (a brute-force oracle, feature by feature)
    scale = {name: (max(column) or 1.0) if name in NORMALISED else 1.0 for name, column in columns.items()}
    by_hand = [[sum(w.get(name, 0.0) * column[i] / scale[name] for name, column in columns.items())
                for i in range(40)] for w in grid]
    assert rows.tolist() == by_hand
    assert fused_score_grid({}, grid).shape == (len(grid), 0)


def random_queries(seed: int, count: int = 12) -> tuple[list[QueryFeatures], dict]:
    """Candidate lists with many ties (feature values of four levels), gids in no particular
    order, id hits (one also among the candidates, one not, one named twice), graded judgments,
    relevant steps that are not candidates, and a query judged nothing relevant."""
    import random

    rng = random.Random(seed)
    data, qrels = [], {}
    for q in range(count):
        gids = [f"s{rng.randrange(100):02d}-{q}-{i}" for i in range(rng.randrange(0, 14))]
        columns = {name: [0.0 if name in RUN_FEATURES else rng.choice((0.0, 0.5, 1.0, 2.0)) for _ in gids]
                   for name in FEATURES}  # asked from no run: no context, no affinity
        named = ("x/named",) * (1 + (q % 8 == 0)) if q % 4 == 0 else ()  # named twice in q0, q8
        ids = tuple(rng.sample(gids, 1) if gids and q % 3 == 0 else ()) + named
        data.append(QueryFeatures(f"q{q}", f"run{q % 3}", ids, tuple(gids), columns, in_run=False))
        pool = gids + list(ids) + ["absent-1", "absent-2"]
        qrels[f"q{q}"] = {gid: rng.choice((0, 0, 1, 2)) for gid in rng.sample(pool, min(len(pool), 5))}
    qrels["q1"] = {gid: 0 for gid in qrels["q1"]}
    return data, qrels


@pytest.mark.parametrize("seed", range(3))
def test_the_grid_is_scored_as_ir_measures_scores_each_ranked_list(seed):
    """Brute force: every point's ranking built by ``rank`` and scored by ir_measures, against
    ``grid_metrics`` (cut at 8 hits, inside R@10 and nDCG@10, so the cut counts)."""
    data, qrels = random_queries(seed)
    grid = simplex(FEATURES, 0.5)
    names = ("R@5", "R@10", "R@50", "nDCG@5", "nDCG@10")
    fast = grid_metrics(data, qrels, grid, 8, names)
    for p, weights in enumerate(grid):
        slow = per_query({f.qid: rank(f, weights, 8) for f in data}, qrels, names)
        for q, f in enumerate(data):
            expected = [slow[f.qid][m] for m in names] if f.qid in slow else [0.0] * len(names)
            assert fast[p, q].tolist() == pytest.approx(expected, abs=1e-12), (p, f.qid)


@pytest.mark.parametrize("seed", range(3))
def test_the_choice_is_the_best_point_by_ir_measures(seed):
    """Brute force: the objective of every point from ir_measures' per-query figures; the choice,
    its ties and each fold's choice are those of the grid search done the slow way."""
    data, qrels = random_queries(seed, count=9)
    grid = simplex(FEATURES, 0.5)
    configured = {"bm25": 0.6, "vote": 0.4}
    slow = [per_query({f.qid: rank(f, w, 100) for f in data}, qrels, OBJECTIVE) for w in grid]

    def best(qids):
        value = [round(sum(s.get(q, {}).get(m, 0.0) for q in qids for m in OBJECTIVE), 9) for s in slow]
        tied = [p for p in range(len(grid)) if value[p] == max(value)]
        near = lambda p: (round(sum(abs(grid[p][n] - configured.get(n, 0.0)) for n in grid[p]), 9), p)
        read = {n: 0.0 if n in RUN_FEATURES else w for n, w in grid[min(tied, key=near)].items()}
        return read, len(tied)  # from no run, the weights of context and affinity rank nothing: 0

    choice = choose_weights(data, qrels, "rerank-graph", folds=3, step=0.5, configured=configured)
    assert (choice.chosen, choice.tied) == best([f.qid for f in data])
    fold = group_folds([f.run for f in data], 3)
    assert choice.fold_weights == [best([f.qid for f, k in zip(data, fold) if k != j])[0]
                                   for j in range(3)]


def test_the_choice_finds_the_feature_that_ranks_the_gold_and_generalises():
    data = [features(f"q{i}", f"run{i % 3}", "vote") for i in range(6)]
    qrels = {f.qid: {f"{f.qid}-gold": 1} for f in data}
    choice = choose_weights(data, qrels, "rerank-graph", folds=3, step=0.5)
    assert choice.folds == 3 and choice.chosen["vote"] > choice.chosen["bm25"]
    assert choice.in_sample["R@5"] == 1.0 and choice.in_sample["nDCG@10"] == 1.0
    assert choice.cross_validated["R@5"] == 1.0 and choice.cross_validated["nDCG@10"] == 1.0
    assert all(w["vote"] > w["bm25"] for w in choice.fold_weights)


def test_queries_of_one_run_give_no_cross_validated_figures():
    data = [features(f"q{i}", "run0", "vote") for i in range(4)]
    qrels = {f.qid: {f"{f.qid}-gold": 1} for f in data}
    choice = choose_weights(data, qrels, "rerank-graph", folds=5, step=0.5)
    assert choice.folds == 1 and choice.cross_validated is None and choice.fold_weights == []
    assert choice.in_sample["R@5"] == 1.0 and choice.chosen["vote"] > choice.chosen["bm25"]


def both(qid: str, run: str) -> QueryFeatures:
    """``features`` whose gold leads on vote and on cosine alike (1 against 0), so weights on
    either serve it equally."""
    f = features(qid, run, "vote")
    return QueryFeatures(f.qid, f.run, f.ids, f.gids, f.features | {"cosine": f.features["vote"]},
                         in_run=False)


def test_of_weights_doing_equally_well_the_nearest_to_the_configured_are_chosen():
    data = [both(f"q{i}", f"run{i % 2}") for i in range(4)]
    qrels = {f.qid: {f"{f.qid}-gold": 1} for f in data}
    # step .5 over 7 features: 28 points. The gold scores .1 b + c + v (b, c, v: the bm25, cosine
    # and vote weights), the best other candidate b: the gold is first, and every figure at its
    # best, when c + v > .9 b. That holds for the 21 - 10 points with b = 0 and c + v > 0, and
    # for b = .5 with c or v = .5 (2 points): 13 points tie.
    for configured, expected in (({"cosine": 1.0}, {"cosine": 1.0}), ({"vote": 1.0}, {"vote": 1.0}),
                                 ({"cosine": 0.6, "vote": 0.4}, {"cosine": 0.5, "vote": 0.5})):
        choice = choose_weights(data, qrels, "rerank-graph", folds=2, step=0.5, configured=configured)
        assert {n: w for n, w in choice.chosen.items() if w} == expected
        assert all({n: w for n, w in fold.items() if w} == expected for fold in choice.fold_weights)
        assert choice.tied == 13 and choice.in_sample["R@5"] == 1.0


def test_folds_by_setting_score_each_setting_with_weights_chosen_on_the_others():
    """Setting A's gold leads on vote, B's on cosine: folds by run mix the settings and every fold
    chooses cosine .5 + vote .5 (the one point serving both); folds by setting score A with what
    B chose and B with what A chose."""
    def of(feature, qid, run, setting):
        f = features(qid, run, feature)
        return QueryFeatures(f.qid, f.run, f.ids, f.gids, f.features, in_run=False, setting=setting)
    data = [of("vote", "a0", "r0", "A"), of("vote", "a1", "r1", "A"),
            of("cosine", "b0", "r2", "B"), of("cosine", "b1", "r3", "B")]
    qrels = {f.qid: {f"{f.qid}-gold": 1} for f in data}
    both_ = {"cosine": 0.5, "vote": 0.5}
    by_run = choose_weights(data, qrels, "rerank-graph", folds=2, step=0.5, configured={"cosine": 1.0})
    assert by_run.by == "run" and by_run.cross_validated["nDCG@10"] == 1.0
    assert all({n: w for n, w in fold.items() if w} == both_ for fold in by_run.fold_weights)
    by_setting = choose_weights(data, qrels, "rerank-graph", folds=5, step=0.5, by="setting",
                                configured={"cosine": 1.0})
    assert by_setting.folds == 2 and by_setting.as_dict()["folds_by"] == "setting"
    # fold 0 holds A (equal sizes, by name): chosen on B, where vote is never used, so the tie
    # goes to the configured cosine 1; fold 1 holds B: chosen on A, nearest cosine 1 is both_
    assert [{n: w for n, w in fold.items() if w} for fold in by_setting.fold_weights] == \
        [{"cosine": 1.0}, both_]
    # under cosine 1 every A candidate scores 0 and the gold comes last by name (5th):
    # nDCG@10 1 / log2(6); B's gold is first under both_
    assert by_setting.cross_validated["nDCG@10"] == pytest.approx((2 / math.log2(6) + 2) / 4)
    assert by_setting.in_sample["nDCG@10"] == 1.0 and by_setting.chosen == by_run.chosen
    with pytest.raises(ValueError, match="folds by 'project'"):
        choose_weights(data, qrels, "rerank-graph", by="project")


def test_a_guard_set_rules_out_weights_that_would_hurt_it():
    data = [features(f"q{i}", f"run{i % 2}", "vote") for i in range(4)]
    qrels = {f.qid: {f"{f.qid}-gold": 1} for f in data}
    guarded = [features(f"g{i}", "ex", "cosine") for i in range(2)]  # its gold leads on cosine
    guard = Guard(guarded, {f.qid: {f"{f.qid}-gold": 1} for f in guarded}, floor=1.0, fold_floor=1.0)
    choice = choose_weights(data, qrels, "rerank-graph", folds=2, step=0.5, guard=guard)
    # vote alone would serve the data, but leaves the guard's gold last: cosine 0.5 + vote 0.5
    # ranks both golds first (0.5 beats every other candidate's 0)
    assert choice.chosen == {"bm25": 0.0, "cosine": 0.5, "vote": 0.5, "expanded": 0.0, "prior": 0.0,
                             "context": 0.0, "affinity": 0.0}
    assert choice.guard_ndcg == 1.0 and choice.in_sample["R@5"] == 1.0
    assert choice.admissible == 7 and choice.guard_floor == 1.0  # of 28: the 7 points with cosine > 0


def test_the_folds_keep_the_guard_at_its_fold_floor_so_a_held_out_run_cannot_choose_through_it():
    # run0's gold leads on vote, run1's on expanded: only vote 0.5 + expanded 0.5 ranks every gold
    # first, and only it keeps the guard (one gold of each kind) at 1.0, the floor these weights set
    data = [features("q0", "run0", "vote"), features("q1", "run1", "expanded")]
    qrels = {f.qid: {f"{f.qid}-gold": 1} for f in data}
    guarded = [features("g0", "ex", "vote"), features("g1", "ex", "expanded")]
    gold = {f.qid: {f"{f.qid}-gold": 1} for f in guarded}
    both = {"bm25": 0.0, "cosine": 0.0, "vote": 0.5, "expanded": 0.5, "prior": 0.0, "context": 0.0,
            "affinity": 0.0}
    # with the table's floor in the folds too, each fold "chooses" the one point it admits: the
    # held-out run picks its own weights
    leaky = choose_weights(data, qrels, "rerank-graph", folds=2, step=0.5,
                           guard=Guard(guarded, gold, 1.0, fold_floor=1.0))
    assert leaky.chosen == both and leaky.fold_weights == [both, both]
    assert leaky.admissible == 1 and leaky.cross_validated["nDCG@10"] == 1.0
    honest = choose_weights(data, qrels, "rerank-graph", folds=2, step=0.5,
                            guard=Guard(guarded, gold, 1.0, fold_floor=0.0))
    assert honest.chosen == both and honest.admissible == 1  # the table still keeps the guard
    assert (honest.guard_floor, honest.guard_fold_floor) == (1.0, 0.0)
    # each fold knows only the other run's feature, so the held-out gold scores 0 like every other
    # candidate and falls last of 5 (ties by id): nDCG@10 = 1 / log2(6) for both queries
    for held_out, weights in zip(("vote", "expanded"), honest.fold_weights):  # fold k holds runk
        assert weights[held_out] == 0.0
    assert honest.cross_validated["nDCG@10"] == pytest.approx(1 / math.log2(6))
    assert honest.in_sample["nDCG@10"] == 1.0


def test_when_no_weights_keep_the_guard_the_closest_are_chosen_and_none_is_said_to_keep_it():
    data = [features(f"q{i}", f"run{i % 2}", "vote") for i in range(4)]
    qrels = {f.qid: {f"{f.qid}-gold": 1} for f in data}
    guarded = [features(f"g{i}", "ex", "cosine") for i in range(2)]
    guard = Guard(guarded, {f.qid: {f"{f.qid}-gold": 1} for f in guarded}, floor=1.5,
                  fold_floor=1.5)  # unreachable
    choice = choose_weights(data, qrels, "rerank-graph", folds=2, step=0.5, guard=guard)
    assert choice.admissible == 0 and choice.guard_floor == 1.5
    assert choice.guard_ndcg == 1.0  # the best the guard set gets, and among those the data's best
    assert choice.chosen == {"bm25": 0.0, "cosine": 0.5, "vote": 0.5, "expanded": 0.0, "prior": 0.0,
                             "context": 0.0, "affinity": 0.0}


def indexed_workspace(tmp_path):
    """A run whose step g2 (the query, hidden) and g1 cite alpha/a1; g1 votes for it, though it
    shares no word with the query: its only route. Indexed; with q.jsonl and r.qrels beside it."""
    ws = build_workspace(tmp_path / "ws")
    ws.add_run("gamma", [make_step("g1", statement="zircon lemma", parents=("alpha/a1",)),
                         make_step("g2", statement="zircon corollary", parents=("alpha/a1",))])
    (tmp_path / "q.jsonl").write_text(json.dumps(
        {"qid": "q", "query": "zircon corollary", "run": "gamma", "step": "gamma/g2"}) + "\n")
    (tmp_path / "r.qrels").write_text("q 0 alpha/a1 1\n")
    assert run_cli(["--workspace", str(ws.root), "index"], out=io.StringIO(), err=io.StringIO()) == 0
    return ws


def test_mem_eval_fusion_end_to_end(tmp_path):
    ws = indexed_workspace(tmp_path)
    out = io.StringIO()
    code = run_cli(["--workspace", str(ws.root), "--json", "eval", "fusion", "--queries",
                    str(tmp_path / "q.jsonl"), "--qrels", str(tmp_path / "r.qrels"), "--step", "0.5"],
                   out=out, err=io.StringIO())
    data = json.loads(out.getvalue())
    assert code == 0 and data["queries"] == 1 and data["grid"] == 28  # C(8, 6): 7 features, step 0.5
    # g1 (visible: only g2 is hidden; gamma is excluded from the candidates, not from memory)
    # votes for a1
    assert data["in_sample"]["R@5"] == 1.0
    # one run: no fold can be held out, so nothing is called cross-validated
    assert data["folds"] == 1 and data["cross_validated"] is None and data["fold_weights"] == []
    out = io.StringIO()
    assert run_cli(["--workspace", str(ws.root), "eval", "fusion", "--queries", str(tmp_path / "q.jsonl"),
                    "--qrels", str(tmp_path / "r.qrels"), "--step", "0.5"], out=out, err=io.StringIO()) == 0
    text = out.getvalue()
    assert "cross-validated" not in text and "folds by run," not in text
    assert data["tied"] > 1 and f"{data['tied']} of 28 weight vectors do equally well on these queries: " \
        "the nearest to the configured weights is chosen" in text
    assert "no cross-validation: the queries are all of one run (their run, else their step's; queries " \
        "with neither are one group), and folds by run need two" in text
    out = io.StringIO()  # the query has no setting: all are of one
    assert run_cli(["--workspace", str(ws.root), "eval", "fusion", "--queries", str(tmp_path / "q.jsonl"),
                    "--qrels", str(tmp_path / "r.qrels"), "--step", "0.5", "--folds-by", "setting"],
                   out=out, err=io.StringIO()) == 0
    assert "no cross-validation: the queries are all of one setting, and folds by setting need two" \
        in out.getvalue()
    err = io.StringIO()
    code = run_cli(["--workspace", str(ws.root), "eval", "fusion", "--queries", str(tmp_path / "q.jsonl"),
                    "--qrels", str(tmp_path / "r.qrels"), "--step", "0.3"], out=io.StringIO(), err=err)
    assert code == 2 and err.getvalue() == "mem: --step 0.3 is not 1/n for a whole n of at least 2 (0.5, 0.25, 0.1, 0.05, …)\n"
    err = io.StringIO()  # C(106, 6) = 1,705,904,746 weight vectors: refused before any work
    code = run_cli(["--workspace", str(ws.root), "eval", "fusion", "--queries", str(tmp_path / "q.jsonl"),
                    "--qrels", str(tmp_path / "r.qrels"), "--step", "0.01"], out=io.StringIO(), err=err)
    assert code == 2 and err.getvalue() == ("mem: --step 0.01 makes a grid of 1,705,904,746 weight vectors "
                                            "for rerank-graph; at most 250,000 (0.05: 230,230)\n")
    err = io.StringIO()  # its count has 1,798 digits: said by their number, not written out
    code = run_cli(["--workspace", str(ws.root), "eval", "fusion", "--queries", str(tmp_path / "q.jsonl"),
                    "--qrels", str(tmp_path / "r.qrels"), "--step", "1e-300"], out=io.StringIO(), err=err)
    assert code == 2 and err.getvalue() == ("mem: --step 1e-300 makes a grid of a 1798-digit number of weight "
                                            "vectors for rerank-graph; at most 250,000 (0.05: 230,230)\n")
    err = io.StringIO()
    code = run_cli(["--workspace", str(ws.root), "eval", "fusion", "--queries", str(tmp_path / "q.jsonl"),
                    "--qrels", str(tmp_path / "r.qrels"), "--folds-by", "project"], out=io.StringIO(), err=err)
    assert code == 2 and err.getvalue() == "mem: --folds-by 'project' is not one of run, setting\n"


@pytest.mark.parametrize("spellings, folds", [
    (("F_q((t))", "Fq((t))", "\\mathbb{F}_q((t))", "local function field"), 1),  # one entry
    (("F_q((t))", "Fq((t))", "Q_p", "ℚ_p"), 2),
    (("F_q((t)); char 0", "char 0;Fq((t))", "GL_n", "gl_n"), 3)])  # unknown clauses keep their case
def test_folds_by_setting_hold_one_setting_whole_however_its_queries_spell_it(tmp_path, spellings, folds):
    """A setting is matched by its name or an alias (SPEC §8): queries spelling one setting
    differently are one group, never split between a fold and the weights that score it."""
    ws = indexed_workspace(tmp_path)
    queries = tmp_path / "settings.jsonl"
    queries.write_text("".join(json.dumps({"qid": f"q{i}", "query": "zircon corollary", "run": "gamma",
                                           "step": "gamma/g2", "setting": setting}) + "\n"
                               for i, setting in enumerate(spellings)))
    (tmp_path / "s.qrels").write_text("".join(f"q{i} 0 alpha/a1 1\n" for i in range(len(spellings))))
    out = io.StringIO()
    assert run_cli(["--workspace", str(ws.root), "--json", "eval", "fusion", "--queries", str(queries),
                    "--qrels", str(tmp_path / "s.qrels"), "--step", "0.5", "--folds-by", "setting"],
                   out=out, err=io.StringIO()) == 0
    assert json.loads(out.getvalue())["folds"] == folds


def test_each_kind_of_query_has_its_table():
    asked = [QueryFeatures(f.qid, f.run, f.ids, f.gids, f.features, in_run=True)
             for f in (features(f"q{i}", f"run{i % 2}", "vote") for i in range(4))]
    qrels = {f.qid: {f"{f.qid}-gold": 1} for f in asked}
    choice = choose_weights(asked, qrels, "rerank-graph", folds=2, step=0.5)
    assert choice.in_run and choice.toml().startswith("[fusion.rerank_graph_in_run]\n")
    lookups = [features(f"l{i}", f"run{i % 2}", "vote") for i in range(2)]
    gold = {f.qid: {f"{f.qid}-gold": 1} for f in lookups}
    choice = choose_weights(lookups, gold, "graph", folds=2, step=0.5)
    assert not choice.in_run and choice.toml().startswith("[fusion.graph]\n")
    with pytest.raises(ValueError, match="weights of their own"):
        choose_weights(asked + lookups, qrels, "rerank-graph", folds=2, step=0.5)
    guard = Guard(lookups, gold, floor=0.0, fold_floor=0.0)
    with pytest.raises(ValueError, match="weights of their own"):
        choose_weights(asked, qrels, "rerank-graph", folds=2, step=0.5, guard=guard)


def test_mem_eval_fusion_tunes_one_kind_of_query_at_a_time(tmp_path):
    """q is asked from run gamma, l from none: a file holding both needs --asked; the guard set
    (here the same files) counts only its queries of the kind tuned."""
    ws = build_workspace(tmp_path / "ws")
    ws.add_run("gamma", [make_step("g1", statement="zircon lemma", parents=("alpha/a1",)),
                         make_step("g2", statement="zircon corollary", parents=("alpha/a1",))])
    queries, qrels = tmp_path / "q.jsonl", tmp_path / "r.qrels"
    asked = {"qid": "q", "query": "zircon corollary", "run": "gamma"}
    queries.write_text(json.dumps(asked | {"step": "gamma/g2"}) + "\n"
                       + json.dumps({"qid": "l", "query": "zircon lemma"}) + "\n")
    qrels.write_text("q 0 alpha/a1 1\nl 0 gamma/g1 1\n")
    assert run_cli(["--workspace", str(ws.root), "index"], out=io.StringIO(), err=io.StringIO()) == 0

    def fusion(*options: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = run_cli(["--workspace", str(ws.root), "eval", "fusion", "--queries", str(queries),
                        "--qrels", str(qrels), "--step", "0.5", *options], out=out, err=err)
        return code, out.getvalue(), err.getvalue()

    code, _, err = fusion()
    assert code == 2 and err == (f"mem: --asked run|none is needed: {queries} has 1 judged queries asked "
                                 "from a run and 1 from none, which have weights of their own\n")
    code, out, err = fusion("--asked", "run", "--guard", str(ws.root), str(queries), str(qrels))
    assert code == 0 and "1 judged queries asked from a run" in out and "[fusion.rerank_graph_in_run]" in out
    assert "on the 1 queries asked from a run of" in err and "in the folds at least" in err
    # the floors are what `mem eval paging` scores on the guard's queries of the kind tuned: the
    # configured weights' (rerank-graph) for the table, the text ranking's (rerank) for the folds
    code, out, _ = fusion("--asked", "run", "--guard", str(ws.root), str(queries), str(qrels), "--json")
    floors = json.loads(out)
    (tmp_path / "asked.jsonl").write_text(json.dumps(asked | {"step": "gamma/g2"}) + "\n")
    (tmp_path / "asked.qrels").write_text("q 0 alpha/a1 1\n")
    paging = io.StringIO()
    assert run_cli(["--workspace", str(ws.root), "eval", "paging", "--queries",
                    str(tmp_path / "asked.jsonl"), "--qrels", str(tmp_path / "asked.qrels"),
                    "--strategy", "rerank", "--strategy", "rerank-graph", "--json"],
                   out=paging, err=io.StringIO()) == 0
    scored = {s: v["metrics"]["nDCG@10"] for s, v in json.loads(paging.getvalue())["strategies"].items()}
    assert floors["guard_floor"] == pytest.approx(scored["rerank-graph"])
    assert floors["guard_fold_floor"] == pytest.approx(scored["rerank"])
    assert scored == {"rerank": 0.0, "rerank-graph": 1.0}  # alpha/a1 is found by g1's vote alone
    code, out, _ = fusion("--asked", "none")
    assert code == 0 and "asked from no run" in out and "\n[fusion.rerank_graph]\n" in out
    queries.write_text(json.dumps({"qid": "l", "query": "zircon lemma"}) + "\n")
    qrels.write_text("l 0 gamma/g1 1\n")
    (tmp_path / "run.jsonl").write_text(json.dumps(asked) + "\n")
    (tmp_path / "run.qrels").write_text("q 0 alpha/a1 1\n")
    code, out, err = fusion("--guard", str(ws.root), str(tmp_path / "run.jsonl"), str(tmp_path / "run.qrels"))
    assert code == 0 and "asked from no run" in out  # the file's only kind
    assert err.endswith("run.jsonl has no judged query asked from no run: nothing to keep\n")
    assert "keep the guard set" not in out
    code, _, err = fusion("--asked", "run")
    assert code == 2 and err == f"mem: --asked run: no judged query of {queries} is asked from a run\n"


def test_the_fusion_benchmark_times_both_ways_on_the_same_points_and_finds_them_equal(tmp_path, capsys):
    from mem_retrieval.eval import bench_fusion

    ws = indexed_workspace(tmp_path)
    assert bench_fusion.main([str(ws.root), "--queries", str(tmp_path / "q.jsonl"), "--qrels",
                              str(tmp_path / "r.qrels"), "--points", "7", "--repeats", "2",
                              "--out", str(tmp_path / "b.json")]) == 0
    result = json.loads((tmp_path / "b.json").read_text())
    assert result["queries"] == 1 and result["grid"] == 8008 and result["sample"] == 7
    assert [w["way"] for w in result["ways"]] == ["ir_measures", "grid_metrics", "whole grid"]
    assert [w["points"] for w in result["ways"]] == [7, 7, 8008]
    assert result["ways"][0]["ratio"] == 1.0 and result["max_difference"] < 1e-12
    assert "| whole grid | 8008 |" in capsys.readouterr().out


@pytest.mark.parametrize("options, status, said", [
    (["--points", "0"], 2, "error: --points 0: at least 1"),     # a numpy broadcast traceback
    (["--repeats", "0"], 2, "error: --repeats 0: at least 1"),   # a ZeroDivisionError
    (["--queries", "missing.jsonl"], 2, "missing.jsonl: cannot read: No such file or directory"),
])
def test_the_fusion_benchmark_says_bad_input_in_one_line(tmp_path, capsys, options, status, said):
    from mem_retrieval.eval import bench_fusion

    ws = indexed_workspace(tmp_path)
    argv = [str(ws.root), "--queries", str(tmp_path / "q.jsonl"), "--qrels", str(tmp_path / "r.qrels"), *options]
    with pytest.raises(SystemExit) as stopped:
        bench_fusion.main(argv)
    err = capsys.readouterr().err
    assert stopped.value.code == status and err.splitlines()[-1].endswith(said) and "Traceback" not in err


@pytest.mark.parametrize("strategy", ["graph", "rerank-graph"])
def test_the_tuner_ranks_each_query_as_the_search_does_when_its_text_names_steps(example, strategy):
    """The search took a feature's best over its candidates with the steps the query names by id
    still among them; the tuner, without them: for a query naming ids, the two ranked other lists,
    so weights were chosen, and figures printed, for rankings the search never gave."""
    from mem_retrieval.eval.fusion import collect
    from mem_retrieval.eval.judgments import Query
    from mem_retrieval.eval.ranker import archive_query

    retriever = example.retriever
    texts = ["satake-two-levels/A5-7 Hecke algebra Satake transform",
             "A2-4 and A5-8 trace dictionary Frobenius", "iwahori-two-levels/A4-1 Iwahori sheaf generation",
             "spherical Hecke operators generate the Satake category",
             # an audit step's statement, asked leave-one-out: it names seven steps
             "Audit, round 1: A2-2, A2-3, A2-4, A4-3, A4-6, A4-7, A6-5 re-derived; A4-5's leading "
             "coefficient corrected; A4-2 is not semismall at μ = (2,2,0,0); A6-7 holds only under (A) "
             "for E₆/F₄, not unconditionally."]
    queries = [Query(f"q{i}", text, run=run, step="satake-two-levels/A7-19" if i == 4 else None)
               for i, text in enumerate(texts) for run in (None, "iwahori-two-levels")]
    pool = retriever.config.search.pool
    for query, features in zip(queries, collect(retriever, strategy, queries)):
        weights = retriever.config.fusion.weights(strategy, in_run=query.in_run)
        tuner = list(rank(features, {name: getattr(weights, name) for name in features.features}, pool))
        search = [c.gid for c in retriever.ranked(archive_query(retriever, query, strategy))]
        assert tuner == search[:len(tuner)] and len(tuner) == min(len(search), pool), query
    assert any(f.named for f in collect(retriever, strategy, queries))
