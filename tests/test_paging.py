"""The paging evaluator: standard metrics (hand-computed, and trec_eval's own numbers on the written
run), recall by page and each pager on toy rankings known by hand, the hint, the JSON shape, the
report files, and `mem eval paging` end to end."""

from __future__ import annotations

import io
import json
import os
import random
import shutil
from pathlib import Path

import pytest

from mem_retrieval.retrieval.hint import Hint, relevance_weights
from mem_retrieval.eval.judgments import Query, judged, write_trec_run
from mem_retrieval.eval.metrics import METRICS, mean_metrics, per_query, run_scores, strategy_metrics
from mem_retrieval.eval.paging import (RankedPages, fewest_pages, fixed, first_page, hint, patience, read, recall_at,
                         recall_by_page, score_drop, standard_pagers, summarize)
from mem_retrieval.eval.paging_eval import evaluate_paging, search_depth
from mem_retrieval.eval.paging_report import output_files, table_text
from mem_retrieval.records.files import replace_all
from mem_retrieval.eval.ranker import RankedHit
from mem_retrieval.retrieval.strategies import STRATEGIES
from mem_retrieval.cli.main import run as mem
from mem_retrieval.records.errors import InputError

PAGERS = ["first-page", "fixed-2", "patience-1", "score-drop", "hint"]
# the public development set, in shared/ beside the checkout (as in CI)
BLUEPRINTS = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "blueprints"


def hits(*gids: str, scores: list[float] | None = None) -> list[RankedHit]:
    scores = scores if scores is not None else [float(len(gids) - rank) for rank in range(len(gids))]
    return [RankedHit(gid, score) for gid, score in zip(gids, scores)]


def filler(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{n}" for n in range(count)]


# ---- standard metrics ------------------------------------------------------------------------

# q1: gold a (rank 1), c (rank 3); q2: gold x, no hits at all; q3: gold g (grade 2) at rank 7;
# q4: judged only non-relevant, so not a judged query.
TOY_QRELS = {"q1": {"a": 1, "c": 1, "z": 0}, "q2": {"x": 1}, "q3": {"g": 2}, "q4": {"y": 0}}
TOY_RUN = {
    "q1": run_scores(hits("a", "b", "c", "d", "e", "f")),
    "q3": run_scores(hits(*filler("h", 6), "g", *filler("k", 5))),
    "q4": run_scores(hits("y")),
}


def test_metrics_on_a_hand_computed_ranking():
    values = per_query(TOY_RUN, TOY_QRELS)
    assert set(values) == {"q1", "q2", "q3"}  # q4 has no relevant document: not judged
    ndcg_q1 = (1 + 1 / 2) / (1 + 1 / 1.5849625007211562)  # gains at ranks 1, 3 over ideal ranks 1, 2
    assert values["q1"] == pytest.approx({"R@5": 1, "R@10": 1, "R@50": 1, "RR@10": 1,
                                          "nDCG@10": ndcg_q1, "AP": (1 + 2 / 3) / 2})
    assert values["q2"] == dict.fromkeys(METRICS, 0.0)
    assert values["q3"] == pytest.approx({"R@5": 0, "R@10": 1, "R@50": 1, "RR@10": 1 / 7,
                                          "nDCG@10": 1 / 3, "AP": 1 / 7})  # 2/log2(8) over 2/log2(2)
    means = mean_metrics(TOY_RUN, TOY_QRELS)
    assert list(means) == list(METRICS)
    assert means == pytest.approx({"R@5": 1 / 3, "R@10": 2 / 3, "R@50": 2 / 3, "RR@10": (1 + 1 / 7) / 3,
                                   "nDCG@10": (ndcg_q1 + 1 / 3) / 3, "AP": (5 / 6 + 1 / 7) / 3})


def test_a_query_without_hits_counts_as_zero_not_dropped():
    only_q1 = {"q1": TOY_RUN["q1"]}
    assert mean_metrics(only_q1, TOY_QRELS)["R@5"] == pytest.approx(1 / 3)
    assert mean_metrics({"q1": TOY_RUN["q1"], "q3": {}}, TOY_QRELS)["R@5"] == pytest.approx(1 / 3)
    assert mean_metrics({}, TOY_QRELS) == dict.fromkeys(METRICS, 0.0)
    assert mean_metrics({}, {}) == dict.fromkeys(METRICS, 0.0)


def test_a_strategys_metrics_rank_each_query_at_the_depth_asked():
    # q3's gold g is the 7th hit of "slow" and the 1st of "fast"; q1 and q2 are judged, with no hits
    lists = {"slow": hits(*filler("h", 6), "g", *filler("k", 5)), "fast": hits("g", *filler("h", 6))}
    asked = []

    def ranker(strategy: str, query: Query, depth: int) -> list[RankedHit]:
        asked.append((strategy, query.qid, depth))
        return lists[strategy][:depth] if query.qid == "q3" else []

    queries = [Query(qid, "text") for qid in ("q1", "q2", "q3")]
    assert strategy_metrics(ranker, "slow", queries, TOY_QRELS, 12) == pytest.approx(
        {"R@5": 0, "R@10": 1 / 3, "R@50": 1 / 3, "RR@10": 1 / 21, "nDCG@10": 1 / 9, "AP": 1 / 21})
    assert strategy_metrics(ranker, "slow", queries, TOY_QRELS, 6, ["R@10"]) == {"R@10": 0.0}  # cut at 6
    assert strategy_metrics(ranker, "fast", queries, TOY_QRELS, 6, ["nDCG@10"]) == pytest.approx(
        {"nDCG@10": 1 / 3})
    assert asked[:3] == [("slow", "q1", 12), ("slow", "q2", 12), ("slow", "q3", 12)]


def test_run_scores_keep_the_ranked_order_under_trec_eval_tie_breaking():
    import pytrec_eval

    # Tied scores: trec_eval would put "b" before "a" (ties go by descending id); the list says a, b.
    scores = run_scores(hits("a", "b", "a", "c", scores=[1.0, 1.0, 0.9, 1.5]))
    assert list(scores) == ["a", "b", "c"]
    assert scores == {"a": 1.0, "b": 0.999999, "c": 0.999998}
    qrels = {"q": {"b": 1}}
    assert per_query({"q": scores}, qrels)["q"]["RR@10"] == 0.5
    assert pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate({"q": scores})["q"][
        "recip_rank"] == 0.5


def _read_trec_runs(path: Path) -> dict[str, dict[str, dict[str, float]]]:
    runs: dict[str, dict[str, dict[str, float]]] = {}
    for line in path.read_text().splitlines():
        qid, _, doc, _, score, tag = line.split()
        runs.setdefault(tag, {}).setdefault(qid, {})[doc] = float(score)
    return runs


def _trec_eval(run: dict[str, dict[str, float]], qrels) -> dict[str, dict[str, float]]:
    """trec_eval's own measures (pytrec_eval), RR@10 as recip_rank over each ranking's first 10."""
    import pytrec_eval

    gold = judged(qrels)
    main = pytrec_eval.RelevanceEvaluator(gold, {"recall.5,10,50", "ndcg_cut.10", "map"}).evaluate(run)
    top10 = {qid: dict(sorted(docs.items(), key=lambda item: -item[1])[:10]) for qid, docs in run.items()}
    rr = pytrec_eval.RelevanceEvaluator(gold, {"recip_rank"}).evaluate(top10)
    return {qid: {"R@5": main[qid]["recall_5"], "R@10": main[qid]["recall_10"],
                  "R@50": main[qid]["recall_50"], "RR@10": rr[qid]["recip_rank"],
                  "nDCG@10": main[qid]["ndcg_cut_10"], "AP": main[qid]["map"]} for qid in main}


def random_case(seed: int, queries: int = 12, docs: int = 80):
    """Random rankings and graded qrels; some queries get no hits, some judged only 0."""
    rng = random.Random(seed)
    pool = [f"run-{rng.randint(1, 3)}/s{n}" for n in range(docs)]
    qrels, lists = {}, {}
    for q in range(queries):
        qid = f"q{q}"
        qrels[qid] = {doc: rng.choice([0, 1, 1, 2]) for doc in rng.sample(pool, rng.randint(1, 6))}
        depth = 0 if q % 5 == 0 else rng.randint(1, 70)
        ranked = rng.sample(pool, depth)
        lists[qid] = hits(*ranked, scores=[round(rng.uniform(0, 3), 1) for _ in ranked])  # many ties
        lists[qid].sort(key=lambda hit: -hit.score)
    return qrels, lists


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_metrics_equal_trec_eval_on_the_written_trec_run(tmp_path, seed):
    qrels, lists = random_case(seed)
    run = {qid: run_scores(ranked) for qid, ranked in lists.items()}
    write_trec_run(tmp_path / "run.trec", {"rerank": run})
    written = _read_trec_runs(tmp_path / "run.trec")["rerank"]
    oracle = _trec_eval(written, qrels)
    ours = per_query(run, qrels)
    for qid in judged(qrels):
        expected = oracle.get(qid, dict.fromkeys(METRICS, 0.0))  # trec_eval skips queries without hits
        assert ours[qid] == pytest.approx(expected, abs=1e-9), qid


@pytest.mark.parametrize("seed", [4, 5])
def test_recall_by_page_agrees_with_ir_measures_recall(seed):
    qrels, lists = random_case(seed)
    values = per_query({qid: run_scores(ranked) for qid, ranked in lists.items()}, qrels)
    for qid, gold in judged(qrels).items():
        scores = run_scores(lists[qid])
        ranked = RankedPages(tuple(scores), tuple(scores.values()),
                             frozenset(doc for doc, grade in gold.items() if grade > 0), 5)
        curve = recall_by_page(ranked, max_pages=10)
        assert (curve[0], curve[1], curve[9]) == pytest.approx(
            (values[qid]["R@5"], values[qid]["R@10"], values[qid]["R@50"]))


# ---- paging and pagers -----------------------------------------------------------------------

def pages_of(gids: list[str], gold: set[str], scores: list[float] | None = None, size: int = 5) -> RankedPages:
    scores = scores if scores is not None else [float(len(gids) - n) for n in range(len(gids))]
    return RankedPages(tuple(gids), tuple(scores), frozenset(gold), size)


def gold_on_pages_1_and_3() -> RankedPages:
    gids = filler("n", 20)
    gids[1], gids[11] = "gold-1", "gold-3"
    return pages_of(gids, {"gold-1", "gold-3"})


def test_gold_on_pages_1_and_3_patience_stops_after_page_2():
    ranked = gold_on_pages_1_and_3()
    assert recall_by_page(ranked, max_pages=5) == [0.5, 0.5, 1.0, 1.0, 1.0]
    assert read(ranked, patience(1)) == read(ranked, fixed(2)) == _stop(2, 0.5)
    assert read(ranked, patience(2)) == _stop(4, 1.0)  # one barren page is forgiven: reads to the end
    assert read(ranked, first_page()) == _stop(1, 0.5)
    assert read(ranked, fixed(3)) == _stop(3, 1.0)
    summary = summarize([ranked], {"patience-1": patience(1), "first-page": first_page()}, max_pages=4)
    assert summary.pagers["patience-1"].loss == 0.5 and summary.pagers["patience-1"].pages == 2


def _stop(pages: int, recall: float):
    from mem_retrieval.eval.paging import Stop

    return Stop(pages, recall)


def test_fewest_pages_bound_by_hand():
    late, early = [0.0, 0.0, 1.0], [1.0, 1.0, 1.0]   # gold on page 3; gold on page 1
    assert fewest_pages([late, early], loss=0.0).pages == 2.0      # 3 + 1 pages, nothing lost
    assert fewest_pages([late, early], loss=0.02).pages == 2.0
    cut = fewest_pages([late, early], loss=0.5)                     # q1 gives up its one hit
    assert (cut.pages, cut.recall, cut.loss) == (1.0, 0.5, 0.5)
    half = [0.5, 0.5, 1.0]                                          # gold on pages 1 and 3
    assert fewest_pages([half, half], loss=0.25).pages == 2.0       # one stops at 1, one reads 3
    assert fewest_pages([half, half], loss=0.2).pages == 3.0
    assert fewest_pages([], loss=0.02).pages == 0.0


def test_fewest_pages_agrees_with_brute_force():
    import itertools
    import random

    rng = random.Random(7)
    for _ in range(30):
        curves = []
        for _ in range(rng.randint(1, 4)):
            hits = sorted(rng.randint(1, 4) for _ in range(rng.randint(1, 3)))
            curves.append([sum(h <= page for h in hits) / len(hits) for page in range(1, 5)])
        budget = rng.choice([0.0, 0.02, 0.1, 0.3])
        best = min(sum(stops) for stops in itertools.product(range(1, 5), repeat=len(curves))
                   if sum(c[-1] - c[s - 1] for c, s in zip(curves, stops)) <= budget * len(curves) + 1e-9)
        assert fewest_pages(curves, loss=budget).pages == best / len(curves)


def test_patience_stops_after_a_first_page_without_gold():
    gids = filler("n", 20)
    gids[7] = "gold"
    assert read(pages_of(gids, {"gold"}), patience(1)) == _stop(1, 0.0)


def test_pagers_never_read_past_the_list_or_max_pages():
    short = pages_of(filler("n", 7), {"n6"})  # 2 pages
    assert read(short, fixed(5)) == _stop(2, 1.0)
    long = pages_of(filler("n", 100), {"n99"})
    assert read(long, fixed(20), max_pages=10) == _stop(10, 0.0)
    empty = pages_of([], {"gold"})
    for pager in standard_pagers(Hint(3, 10)).values():
        assert read(empty, pager) == _stop(1, 0.0)  # the first (empty) page is always read


def test_score_drop_stops_after_the_page_whose_best_falls_below_half_the_first():
    gids = filler("n", 25)
    gids[12] = "gold"
    scores = [10.0] * 5 + [6.0] * 5 + [4.9] * 5 + [4.0] * 10  # page 3's best 4.9 < 0.5 * 10
    ranked = pages_of(gids, {"gold"}, scores)
    assert read(ranked, score_drop(0.5)) == _stop(3, 1.0)
    assert read(ranked, score_drop(0.7)) == _stop(2, 0.0)  # page 2's best 6 < 7
    assert read(pages_of(gids, {"gold"}, [0.0] * 25), score_drop(0.5)) == _stop(1, 0.0)
    # a page whose best is exactly the fraction of the first has not fallen below it: read on
    tied = pages_of(gids, {"gold"}, [10.0] * 5 + [5.0] * 5 + [4.0] * 15)
    assert read(tied, score_drop(0.5)) == _stop(3, 1.0)


def test_hint_estimate_by_hand():
    scores = [10, 9, 8, 7, 6] + [5] * 5 + [1] * 10  # 20 hits
    # depth 2 pages of 5: the floor is the 10th score, 5; weights (s - 5) / (10 - 5)
    assert relevance_weights(scores, 10) == pytest.approx([1, 0.8, 0.6, 0.4, 0.2] + [0] * 15)
    assert Hint(1, 2).remaining(scores, page=0, page_size=5) == pytest.approx(3.0)
    assert Hint(3, 2).remaining(scores, page=1, page_size=5) == 0
    # depth 10 pages, past the list's end: the floor is its last score, 1; weights (s - 1) / 9
    assert relevance_weights(scores, 50)[:6] == pytest.approx([1, 8 / 9, 7 / 9, 6 / 9, 5 / 9, 4 / 9])
    assert Hint(1, 10).remaining(scores, page=0, page_size=5) == pytest.approx(35 / 9)
    assert Hint(3, 10).remaining(scores, page=1, page_size=5) == pytest.approx(20 / 9)
    assert Hint(3, 10).remaining(scores, page=2, page_size=5) == 0
    flat = [4.0] * 12  # a listing (events naming a step): every hit scores like the top
    assert relevance_weights(flat, 50) == [1.0] * 12
    assert Hint(3, 10).remaining(flat, page=1, page_size=5) == 7  # hits 6 … 12
    assert Hint(1, 2).remaining(flat + [1.0] * 5, page=1, page_size=5) == 5  # the floor ties: 6 … 10
    assert Hint(3, 10).remaining([], page=1, page_size=5) == 0
    # the same list on another scale gives the same estimate (BM25, cosine, RRF alike)
    rescaled = [s / 70 + 0.01 for s in scores]
    assert Hint(3, 10).remaining(rescaled, page=1, page_size=5) == pytest.approx(20 / 9)
    with pytest.raises(ValueError):
        Hint(3, 10).remaining(scores, page=-1, page_size=5)
    with pytest.raises(ValueError):
        Hint(3, 0)


def test_hits_past_the_depth_do_not_move_the_hint():
    """How long a list runs past the last page an agent reads says nothing of relevance: a longer
    tail (a bigger pool, a bigger workspace) leaves every weight above the floor as it was. (With
    the list's median as the floor, 80 more weak hits moved it from 3 to 0.5.)"""
    scores = [10, 9, 8, 7, 6] + [5] * 5 + [1] * 10
    longer = scores + [0.5] * 80
    assert relevance_weights(longer, 10)[:20] == relevance_weights(scores, 10)
    for page in range(4):
        assert Hint(3, 2).remaining(longer, page, 5) == Hint(3, 2).remaining(scores, page, 5)
    # the floor is found by score, whatever order the list comes in
    assert sorted(relevance_weights(scores[::-1], 10)) == sorted(relevance_weights(scores, 10))


def test_hint_pager_reads_on_while_strong_scores_remain_where_patience_stops():
    gids = filler("n", 30)
    gids[1], gids[12] = "gold-1", "gold-3"  # page 2 brings nothing new: patience-1 stops there
    scores = [10.0] * 5 + [9.0] * 5 + [8.0] * 5 + [0.0] * 15  # floor 0 (the list ends before 50)
    ranked = pages_of(gids, {"gold-1", "gold-3"}, scores)
    assert Hint(3, 10).remaining(scores, 2, 5) == pytest.approx(5 * 0.8)
    assert read(ranked, hint(Hint(3, 10))) == _stop(3, 1.0)
    assert read(ranked, patience(1)) == _stop(2, 0.5)
    # a floor at page 2 (score 9) weighs pages 2 and 3 at 0: stop after page 1
    assert read(ranked, hint(Hint(3, 2))) == _stop(1, 0.5)
    # a steeper list: page 2 still weighs 20/9 (read it), nothing after (stop); one strong hit alone: stop
    steep = pages_of(filler("n", 20), set(), [10, 9, 8, 7, 6] + [5] * 5 + [1] * 10)
    assert read(steep, hint(Hint(3, 10))).pages == 2 and read(steep, hint(Hint(1, 10))).pages == 2
    assert read(pages_of(filler("n", 20), set(), [10.0] + [1.0] * 19), hint(Hint(3, 10))).pages == 1


def test_summary_counts_every_query_including_empty_lists():
    full, empty = gold_on_pages_1_and_3(), pages_of([], {"gold"})
    summary = summarize([full, empty], standard_pagers(Hint(3, 10)), max_pages=4)
    assert summary.recall_by_page == [0.25, 0.25, 0.5, 0.5]
    assert list(summary.pagers) == PAGERS
    patience1 = summary.pagers["patience-1"]
    assert (patience1.pages, patience1.recall, patience1.loss) == (1.5, 0.25, 0.25)
    first = summary.pagers["first-page"]
    assert (first.pages, first.recall, first.loss) == (1.0, 0.25, 0.25)


def test_recall_of_fixed_paging_at_a_mean_cost_interpolates_the_curve():
    curve = [0.2, 0.5, 0.6]
    assert recall_at(curve, 1) == 0.2 and recall_at(curve, 3) == 0.6
    assert recall_at(curve, 1.5) == pytest.approx(0.35)  # half the queries read 1 page, half 2
    assert recall_at(curve, 2.25) == pytest.approx(0.525)
    with pytest.raises(ValueError):
        recall_at(curve, 0.5)
    # where lists end sooner, fixed-k reads fewer than k pages: 1, 1.5 and 2 on average
    assert recall_at(curve, 1.25, [1, 1.5, 2]) == pytest.approx(0.35)
    assert recall_at(curve, 1.75, [1, 1.5, 2]) == pytest.approx(0.55)
    assert recall_at(curve, 2.5, [1, 1.5, 2]) == 0.6  # past every list's end
    assert recall_at([0.4, 0.4, 0.4], 2, [1, 1, 1]) == 0.4  # one-page lists: every k is fixed-1


def test_fixed_paging_is_even_with_itself_where_lists_end_early():
    """`vs fixed` compared each pager with fixed paging as if every list were as long as the pages
    read: fixed-2 itself read +0.007 and +0.019 against fixed paging on the example set."""
    # q1: 2 pages, relevant hits at ranks 1 and 7; q2: 1 page, its one relevant hit first.
    # Mean recall by page .75, 1, 1, 1; fixed-2 reads 2 and 1 pages (1.5) to recall 1: fixed paging
    # at 1.5 pages is fixed-2 itself, not the mix of fixed-1 and fixed-2 (.875, "+0.125")
    lists = {"bm25": {"q1": hits(*(["g1"] + filler("n", 5) + ["g7"] + filler("m", 3))), "q2": hits("g")}}
    evaluation = evaluate_paging(ToyRanker(lists), [Query("q1", "first"), Query("q2", "second")],
                                 {"q1": {"g1": 1, "g7": 1}, "q2": {"g": 1}}, page_size=5, hint=Hint(3, 10),
                                 strategies=["bm25"], max_pages=4)
    assert evaluation.strategies["bm25"].fixed_pages == [1.0, 1.5, 1.5, 1.5]
    (row,) = [line.split() for line in table_text(evaluation).splitlines()
              if line.split()[1:2] == ["fixed-2"]]
    assert (row[0], row[2:]) == ("bm25", ["1.50", "1.000", "0.000", "+0.000"])


# ---- the evaluation, its JSON, table, TREC run and report ------------------------------------

class ToyRanker:
    """Fixed ranked lists by (strategy, qid); records what it was asked."""

    def __init__(self, lists: dict[str, dict[str, list[RankedHit]]]):
        self.lists, self.asked = lists, []

    def __call__(self, strategy: str, query: Query, depth: int) -> list[RankedHit]:
        self.asked.append((strategy, query.qid, depth))
        return self.lists[strategy].get(query.qid, [])


def toy_evaluation(strategies=("bm25", "rerank")):
    gold_list = [RankedHit(hit.gid, hit.score) for hit in hits(*(["gold-1"] + filler("n", 10) + ["gold-3"]))]
    lists = {"bm25": {"q1": gold_list, "q3": [RankedHit("nope", 1.0)]},
             "rerank": {"q1": hits("gold-1", "gold-3"), "q3": hits("g")}}
    queries = [Query("q1", "first"), Query("q2", "not judged"), Query("q3", "third", "PFR", "run-x")]
    qrels = {"q1": {"gold-1": 1, "gold-3": 1}, "q2": {"nope": 0}, "q3": {"g": 1}}
    ranker = ToyRanker(lists)
    return ranker, evaluate_paging(ranker, queries, qrels, page_size=5, hint=Hint(3, 10),
                                   strategies=strategies, max_pages=4)


def test_evaluation_json_has_the_issue_shape():
    ranker, evaluation = toy_evaluation()
    data = json.loads(json.dumps(evaluation.to_json()))
    assert list(data) == ["queries", "page_size", "max_pages", "default", "strategies"]
    assert (data["queries"], data["page_size"], data["max_pages"]) == (2, 5, 4)
    assert data["default"] is None  # a toy ranker: no configured default
    assert list(data["strategies"]) == ["bm25", "rerank"]
    # fixed-k reads k pages or to the list's end: bm25's lists have 3 pages (12 hits) and 1, rerank's 1 and 1
    assert data["strategies"]["bm25"]["fixed_pages"] == [1.0, 1.5, 2.0, 2.0]
    assert data["strategies"]["rerank"]["fixed_pages"] == [1.0, 1.0, 1.0, 1.0]
    for result in data["strategies"].values():
        assert list(result) == ["metrics", "recall_by_page", "fixed_pages", "pagers", "bound"]
        assert list(result["bound"]) == ["pages", "recall", "loss"]
        assert list(result["metrics"]) == ["R@5", "R@10", "R@50", "RR@10", "nDCG@10", "AP"]
        assert len(result["recall_by_page"]) == 4
        assert list(result["pagers"]) == PAGERS
        assert all(list(pager) == ["pages", "recall", "loss"] for pager in result["pagers"].values())
    rerank = data["strategies"]["rerank"]
    assert rerank["metrics"]["R@5"] == 1.0 and rerank["recall_by_page"] == [1.0] * 4
    bm25 = data["strategies"]["bm25"]
    assert bm25["recall_by_page"] == [0.25, 0.25, 0.5, 0.5]  # q1: gold on pages 1 and 3; q3: none
    assert bm25["pagers"]["patience-1"] == {"pages": 1.5, "recall": 0.25, "loss": 0.25}
    # q1 must read to page 3 to lose nothing; q3 (no hit) stops at once: (3 + 1) / 2 pages
    assert bm25["bound"] == {"pages": 2.0, "recall": 0.5, "loss": 0.0}
    # the unjudged query is never searched; the judged one keeps its setting and run for the ranker
    assert {qid for _, qid, _ in ranker.asked} == {"q1", "q3"}


@pytest.mark.parametrize("bom", ["", "\ufeff"])
def test_a_judged_query_missing_from_the_queries_file_is_bad_input(tmp_path, bom):
    """Named at its line, the first too in a file opened by a byte order mark (it had no line);
    by the Python API, given grades that are no file's, named without a line."""
    from mem_retrieval.eval.paging_eval import read_judged

    qrels_file = tmp_path / "r.qrels"
    qrels_file.write_text(f"{bom}q1 0 a 1\nq9 0 b 0\nq9 0 c 1\n")
    (tmp_path / "q.jsonl").write_text('{"qid": "q1", "query": "x"}\n')
    with pytest.raises(InputError, match=r"r\.qrels:2: qid: 'q9' is judged but not in the queries"):
        read_judged(tmp_path / "q.jsonl", qrels_file)
    with pytest.raises(InputError, match=r"r\.qrels: qid: 'q9' is judged but not in the queries"):
        evaluate_paging(ToyRanker({"bm25": {}}), [Query("q1", "x")], {"q1": {"a": 1}, "q9": {"b": 1}},
                        page_size=5, hint=Hint(3, 10), strategies=["bm25"],
                        qrels_file=qrels_file)


@pytest.mark.parametrize("qid", ["q 1", "q\u00a01", "q1\t"])
def test_a_qid_holding_white_space_is_bad_input_at_its_line(tmp_path, qid):
    """No qrels line can judge it (its columns are split at white space), and a TREC run written
    with it would read as another line."""
    from mem_retrieval.eval.judgments import read_queries

    path = tmp_path / "q.jsonl"
    path.write_text('{"qid": "q0", "query": "x"}\n' + json.dumps({"qid": qid, "query": "x"}) + "\n")
    with pytest.raises(InputError) as refused:
        read_queries(path)
    assert str(refused.value) == f"{path}:2: qid: {qid!r} holds white space: no qrels line could judge it"


@pytest.mark.parametrize("brk", ["\u2028", "\u2029", "\x85", "\x0c", "\x1e"])
def test_queries_and_qrels_are_split_at_line_feeds_alone(tmp_path, brk):
    """JSON holds U+2028, U+0085 and the like raw inside a string (`json.dumps(…, ensure_ascii=False)`
    writes them so): the queries file was split at them too, and a valid line refused as invalid
    JSON. Both files are read line by line as every record file is; a qrels grade may carry a sign
    (trec_eval reads `+2` as 2); a blank `run` is no run, as an empty one."""
    from mem_retrieval.eval.judgments import read_qrels, read_queries

    queries, qrels = tmp_path / "q.jsonl", tmp_path / "r.qrels"
    queries.write_text(json.dumps({"qid": "q1", "query": f"one{brk}two", "run": "  "}, ensure_ascii=False)
                       + "\r\n" + json.dumps({"qid": "q2", "query": "three", "run": ""}) + "\n",
                       encoding="utf-8")
    assert [(q.qid, q.query, q.run) for q in read_queries(queries)] == [("q1", f"one{brk}two", None),
                                                                      ("q2", "three", None)]
    qrels.write_text("q1 0 a/b +2\r\nq1 0 a/c 1\n\nq2 0 a/d 0\n", encoding="utf-8")
    assert read_qrels(qrels) == {"q1": {"a/b": 2, "a/c": 1}, "q2": {"a/d": 0}}


def test_trec_out_names_judged_ids_the_qrels_write_decomposed(tmp_path):
    """The evaluation reads a qrels id composed (NFC), as the records hold ids, and `--trec-out`
    writes ids so: trec_eval, comparing bytes, scored the same two files otherwise. A note names
    such ids when a run file is asked for."""
    import unicodedata

    from conftest import build_workspace, make_step

    ws = build_workspace(tmp_path / "ws")
    ws.add_run("gamma", [make_step("Ä1", statement="the wombat bound")])
    assert mem(["--workspace", str(ws.root), "index"], out=io.StringIO(), err=io.StringIO()) == 0
    (tmp_path / "q.jsonl").write_text('{"qid": "q1", "query": "wombat bound"}\n')
    (tmp_path / "r.qrels").write_text(unicodedata.normalize("NFD", "q1 0 gamma/Ä1 1\n"), encoding="utf-8")
    argv = ["--workspace", str(ws.root), "--json", "eval", "paging", "--queries", str(tmp_path / "q.jsonl"),
            "--qrels", str(tmp_path / "r.qrels"), "--strategy", "bm25"]
    out, err = io.StringIO(), io.StringIO()
    assert mem([*argv, "--trec-out", str(tmp_path / "run.trec")], out=out, err=err) == 0
    assert json.loads(out.getvalue())["strategies"]["bm25"]["metrics"]["R@5"] == 1.0
    said = err.getvalue()
    assert said.startswith("1 judged ids of ") and "not written composed (NFC), as 'gamma/A\u03081'" in said
    assert "gamma/Ä1" in (tmp_path / "run.trec").read_text(encoding="utf-8")
    err = io.StringIO()
    assert mem(argv, out=io.StringIO(), err=err) == 0 and "composed" not in err.getvalue()


def test_queries_and_qrels_may_be_pipes_each_read_once(tmp_path):
    """`--qrels <(grep … qrels)`, `--queries /dev/stdin`: a pipe the caller names is read, once
    (a second read found it empty: the NFC note, and the line of a query judged but not asked,
    were read again from the file); a device is refused in one line, a pipe found read whole."""
    import unicodedata

    from conftest import build_workspace, make_step

    ws = build_workspace(tmp_path / "ws")
    ws.add_run("gamma", [make_step("Ä1", statement="the wombat bound")])
    assert mem(["--workspace", str(ws.root), "index"], out=io.StringIO(), err=io.StringIO()) == 0
    queries = b'{"qid": "q1", "query": "wombat bound"}\n'
    qrels = unicodedata.normalize("NFD", "q1 0 gamma/Ä1 1\n").encode()

    def piped(data: bytes) -> str:
        read, write = os.pipe()
        os.write(write, data)
        os.close(write)
        opened.append(read)
        return f"/proc/self/fd/{read}"

    def run(queries_at: str, qrels_at: str, *more: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = mem(["--workspace", str(ws.root), *(["--json"] if "--trec-out" in more else []), "eval",
                    "paging", "--queries", queries_at,
                    "--qrels", qrels_at, "--strategy", "bm25", *more], out=out, err=err)
        return code, out.getvalue(), err.getvalue()

    (tmp_path / "q.jsonl").write_bytes(queries)
    (tmp_path / "r.qrels").write_bytes(qrels)
    opened: list[int] = []
    try:
        trec = str(tmp_path / "run.trec")
        code, from_files, said_files = run(str(tmp_path / "q.jsonl"), str(tmp_path / "r.qrels"),
                                           "--trec-out", trec)
        code_piped, from_pipes, said_pipes = run(piped(queries), piped(qrels), "--trec-out", trec)
        assert code == code_piped == 0 and from_pipes == from_files
        assert json.loads(from_pipes)["strategies"]["bm25"]["metrics"]["R@5"] == 1.0
        assert "not written composed (NFC), as 'gamma/A\u03081'" in said_pipes and "composed" in said_files
        at = piped(qrels + "\nq9 0 gamma/Ä1 1\n".encode())
        code, _, said = run(piped(queries), at)
        assert (code, said) == (2, f"mem: {at}:3: qid: 'q9' is judged but not in the queries file\n")
    finally:
        for fd in opened:
            os.close(fd)
    code, _, said = run(str(tmp_path / "q.jsonl"), "/dev/zero")
    assert (code, said) == (2, "mem: /dev/zero: is not a regular file or a pipe (a socket or a device)\n")


def test_a_pipe_that_never_ends_is_refused_at_its_first_bad_line(tmp_path):
    """`--qrels <(yes)` was read whole, until memory ran out (3.7 GB in 3 s): the lines are read
    one at a time, so line 1 refuses it; one line that never ends stops at 1 MiB; and the same
    pipe named for both files (`/dev/stdin` twice) is refused, where the qrels read it empty."""
    import subprocess

    from mem_retrieval.eval.judgments import read_judgments, read_queries
    from mem_retrieval.eval.paging_eval import read_judged
    from mem_retrieval.records.parse import NAMED_LINE_BYTES

    endless = {"lines": ["yes"], "one line": ["sh", "-c", "yes | tr -d '\\n'"]}
    for kind, argv in endless.items():
        for reader in (read_queries, read_judgments):
            writer = subprocess.Popen(argv, stdout=subprocess.PIPE)
            try:
                path = f"/proc/self/fd/{writer.stdout.fileno()}"
                with pytest.raises(InputError) as refused:
                    reader(path)
                said = str(refused.value)
                assert said.startswith(f"{path}:1:"), said
                if kind == "one line":
                    assert said.endswith(f"is longer than {NAMED_LINE_BYTES:,} bytes, which no line of it is "
                                         "(a pipe that never ends?)")
            finally:
                writer.kill()
                writer.wait()
                writer.stdout.close()
    read, write = os.pipe()
    os.write(write, b'{"qid": "q1", "query": "x"}\n')
    os.close(write)
    try:
        with pytest.raises(InputError, match=r"is the pipe the queries are read from .*: a pipe is read"):
            read_judged(f"/proc/self/fd/{read}", f"/dev/fd/{read}")
    finally:
        os.close(read)


def test_a_line_at_the_limit_is_read_whatever_its_end(tmp_path, monkeypatch):
    """A line as long as a line may be was refused when it ended in CR LF (the limit cut it after
    the CR), read when it ended in LF or the file; one byte more is refused either way."""
    from mem_retrieval.records import parse

    monkeypatch.setattr(parse, "NAMED_LINE_BYTES", 16)
    for end, last in (("\n", "\n"), ("\r\n", "\r\n"), ("\r\n", "")):  # the file's end ends a line too
        path = tmp_path / "f"
        path.write_bytes(("a" * 16 + end + "b" * 3 + last).encode())
        assert list(parse.named_lines(path)) == [(1, "a" * 16), (2, "bbb")]
        path.write_bytes(("a" * 17 + last).encode())
        with pytest.raises(InputError, match=r"f:1: is longer than 16 bytes"):
            list(parse.named_lines(path))


def _write(files) -> list[Path]:
    """What `--trec-out` and `--report` write, written as ``cli.outputs.write_all`` does."""
    replace_all([(path, write) for path, write, _ in files])
    return [path for path, _, _ in files]


def test_trec_out_reproduces_the_metrics_with_trec_eval(tmp_path):
    _, evaluation = toy_evaluation()
    _write(output_files(evaluation, trec_out=tmp_path / "runs.trec"))
    written = _read_trec_runs(tmp_path / "runs.trec")
    assert set(written) == {"bm25", "rerank"}
    qrels = {"q1": {"gold-1": 1, "gold-3": 1}, "q3": {"g": 1}}
    for name, run in written.items():
        oracle = _trec_eval(run, qrels)
        means = {metric: sum(oracle.get(qid, {}).get(metric, 0.0) for qid in qrels) / len(qrels)
                 for metric in METRICS}
        assert evaluation.strategies[name].metrics == pytest.approx(means)


def test_table_and_report_files(tmp_path):
    _, evaluation = toy_evaluation(list(STRATEGIES)[:2])
    text = table_text(evaluation)
    assert "2 judged queries" in text and all(pager in text for pager in PAGERS)
    assert all(metric in text for metric in METRICS)
    paths = _write(output_files(evaluation, report=tmp_path / "out"))
    assert [path.name for path in paths] == ["report.md", "recall_by_page.png"]
    assert paths[1].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = paths[0].read_text()
    assert "![recall by page, early-stop loss](recall_by_page.png)" in report
    # patience-1 on bm25 reads 1.5 pages for recall 0.25; fixed paging at 1.5 pages also gets 0.25
    assert "| bm25 | patience-1 | 1.50 | 0.250 | 0.250 | +0.000 |" in report
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["recall_by_page.png", "report.md"]


def test_search_depth_covers_the_pool_r50_and_the_pages():
    assert search_depth(100, 10, 5) == 100
    assert search_depth(20, 4, 5) == 50
    assert search_depth(100, 30, 5) == 150


# ---- the command ------------------------------------------------------------------------------

def test_cli_bad_qrels_exits_2_naming_file_line_and_field(tmp_path):
    (tmp_path / "q.jsonl").write_text('{"qid": "q1", "query": "entropy"}\n')
    (tmp_path / "r.qrels").write_text("q1 0 a/b 1\nq1 0 a/c high\n")
    err = io.StringIO()
    status = mem(["--workspace", str(tmp_path), "eval", "paging", "--queries", str(tmp_path / "q.jsonl"),
                  "--qrels", str(tmp_path / "r.qrels")], out=io.StringIO(), err=err)
    assert status == 2
    assert err.getvalue() == f"mem: {tmp_path / 'r.qrels'}:2: grade: 'high' is not an integer\n"
    status = mem(["eval", "paging", "--queries", "q", "--qrels", "r", "--strategy", "tfidf"],
                 out=io.StringIO(), err=io.StringIO())
    assert status == 2
    (tmp_path / "r.qrels").write_text("q1 0 a/b 0\n")
    out = io.StringIO()
    status = mem(["--workspace", str(tmp_path), "--json", "eval", "paging", "--queries",
                  str(tmp_path / "q.jsonl"), "--qrels", str(tmp_path / "r.qrels")], out=out, err=io.StringIO())
    assert status == 2
    assert json.loads(out.getvalue()) == {
        "error": f"{tmp_path / 'r.qrels'}: no query of the queries file has a relevant judgment"}


@pytest.mark.parametrize("grade, problem", [
    ("4294967298", "4294967298 is out of range (-2,147,483,648 to 2,147,483,647)"),  # wrapped to 2
    ("3000000000", "3000000000 is out of range (-2,147,483,648 to 2,147,483,647)"),
    ("99999999999999999999", "99999999999999999999 is out of range (-2,147,483,648 to 2,147,483,647)"),
    ("1_0", "'1_0' is not an integer"),
    ("١", "'١' is not an integer"),                                                  # an Arabic-Indic 1
])
def test_a_grade_trec_eval_cannot_hold_is_bad_input_not_a_wrong_figure(tmp_path, grade, problem):
    from mem_retrieval.eval.judgments import read_qrels

    (tmp_path / "r.qrels").write_text(f"q1 0 a/b 1\nq1 0 a/c {grade}\n", encoding="utf-8")
    with pytest.raises(InputError) as raised:
        read_qrels(tmp_path / "r.qrels")
    assert str(raised.value) == f"{tmp_path / 'r.qrels'}:2: grade: {problem}"
    (tmp_path / "r.qrels").write_text("q1 0 a/b 2147483647\nq1 0 a/c -2147483648\n")
    assert read_qrels(tmp_path / "r.qrels") == {"q1": {"a/b": 2147483647, "a/c": -2147483648}}


def small_blueprint_workspace(root: Path) -> tuple[Path, Path, Path]:
    """Three PFR chapters of the blueprint development set, with their cross-chapter queries."""
    runs = {"pfr-jensen", "pfr-entropy", "pfr-distance"}
    workspace = root / "ws"
    for run in runs:
        shutil.copytree(BLUEPRINTS / "ws" / run, workspace / run)
    (workspace / "solve").mkdir()
    library = [line for line in (BLUEPRINTS / "ws/solve/library.jsonl").read_text().splitlines()
               if json.loads(line)["run"] in runs]
    (workspace / "solve/library.jsonl").write_text("\n".join(library) + "\n")
    gold: dict[str, list[str]] = {}
    for line in (BLUEPRINTS / "eval/uses.qrels").read_text().splitlines():
        qid, _, doc, _ = line.split()
        gold.setdefault(qid, []).append(doc)
    queries = [json.loads(line) for line in (BLUEPRINTS / "eval/uses.queries.jsonl").read_text().splitlines()]
    chosen = [q for q in queries if q["run"] in runs and all(d.split("/")[0] in runs for d in gold[q["qid"]])]
    (root / "q.jsonl").write_text("".join(json.dumps(q) + "\n" for q in chosen))
    (root / "r.qrels").write_text("".join(f"{q['qid']} 0 {doc} 1\n" for q in chosen for doc in gold[q["qid"]]))
    return workspace, root / "q.jsonl", root / "r.qrels"


def test_cli_end_to_end_on_three_blueprint_chapters(tmp_path):
    pytest.importorskip("mem_retrieval.eval.ranker",
                        reason="retrieval.evaluation.make_ranker (the search layer) is not built yet")
    if not BLUEPRINTS.is_dir():
        pytest.skip(f"blueprint development set not found at {BLUEPRINTS}")
    workspace, queries, qrels = small_blueprint_workspace(tmp_path)
    assert mem(["--workspace", str(workspace), "index"], out=io.StringIO(), err=io.StringIO()) == 0
    out = io.StringIO()
    status = mem(["--workspace", str(workspace), "--json", "eval", "paging", "--queries", str(queries),
                  "--qrels", str(qrels), "--max-pages", "4", "--trec-out", str(tmp_path / "run.trec"),
                  "--report", str(tmp_path / "report")], out=out, err=io.StringIO())
    assert status == 0, out.getvalue()
    data = json.loads(out.getvalue())
    assert data["queries"] == 21 and list(data["strategies"]) == list(STRATEGIES)
    assert all(list(result["pagers"]) == PAGERS for result in data["strategies"].values())
    assert (tmp_path / "report/report.md").is_file() and (tmp_path / "report/recall_by_page.png").is_file()
    # a query's own run is never a candidate
    own_run = {json.loads(line)["qid"]: json.loads(line)["run"] for line in queries.read_text().splitlines()}
    for line in (tmp_path / "run.trec").read_text().splitlines():
        qid, _, doc, *_ = line.split()
        assert doc.split("/")[0] != own_run[qid], line
    text = io.StringIO()
    assert mem(["--workspace", str(workspace), "eval", "paging", "--queries", str(queries), "--qrels",
                str(qrels), "--strategy", "bm25", "--max-pages", "2"], out=text, err=io.StringIO()) == 0
    assert "bm25" in text.getvalue() and "rerank" not in text.getvalue()


def test_a_query_naming_its_step_never_finds_that_step(tmp_path):
    """SPEC §10 leave-one-out: the query is its step's own statement, so the step would rank first;
    named as ``step`` it is hidden, while the run's other steps stay candidates for a query with
    no ``run``."""
    from conftest import build_workspace, make_step

    ws = build_workspace(tmp_path / "ws")
    ws.add_step("alpha", make_step("a6", statement="Hecke operators span the spherical algebra"))
    ws.add_step("alpha", make_step("a7", statement="the spherical Hecke algebra is commutative"))
    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"qid": "q", "query": "Hecke operators span the spherical algebra",
                                   "step": "alpha/a6"}) + "\n")
    (tmp_path / "r.qrels").write_text("q 0 alpha/a7 1\n")
    assert mem(["--workspace", str(ws.root), "index"], out=io.StringIO(), err=io.StringIO()) == 0
    status = mem(["--workspace", str(ws.root), "eval", "paging", "--queries", str(queries), "--qrels",
                  str(tmp_path / "r.qrels"), "--trec-out", str(tmp_path / "run.trec")],
                 out=io.StringIO(), err=io.StringIO())
    assert status == 0
    ranked = [line.split()[2] for line in (tmp_path / "run.trec").read_text().splitlines()]
    assert "alpha/a7" in ranked and "alpha/a6" not in ranked


def test_max_pages_past_the_longest_list_a_search_gives_is_warned_of(tmp_path):
    """`--max-pages 100` reported 100 pages of recall, every one past page 20 the same (a list is at
    most search.pool hits long, 100), its loss against page 20 read as against page 100, unsaid."""
    from conftest import build_workspace

    ws = build_workspace(tmp_path / "ws")
    (tmp_path / "q.jsonl").write_text(json.dumps({"qid": "q", "query": "statement"}) + "\n")
    (tmp_path / "r.qrels").write_text("q 0 alpha/a2 1\n")
    (tmp_path / "c.toml").write_text("[search]\npool = 12\n")  # 3 pages of 5, the last of 2
    assert mem(["--workspace", str(ws.root), "index"], out=io.StringIO(), err=io.StringIO()) == 0
    said = {}
    for pages in (3, 4):
        err = io.StringIO()
        assert mem(["--workspace", str(ws.root), "--config", str(tmp_path / "c.toml"), "eval", "paging",
                    "--queries", str(tmp_path / "q.jsonl"), "--qrels", str(tmp_path / "r.qrels"),
                    "--strategy", "bm25", "--max-pages", str(pages)], out=io.StringIO(), err=err) == 0
        said[pages] = [line for line in err.getvalue().splitlines() if "--max-pages" in line]
    assert said == {3: [], 4: [
        "mem: warning: --max-pages 4 reads past the longest list a search gives (search.pool 12: 3 pages "
        "of 5): the pages after it find nothing, as an agent's would; set search.pool (--config) to read "
        "deeper"]}


def test_a_step_the_index_does_not_hold_is_named_in_a_warning(tmp_path):
    """A misspelt ``step`` hides nothing but itself, so the step meant stays visible and the
    figures are in-sample: the evaluation names each step it did not find once (two queries name
    gamma/a6), and nothing about the one it did."""
    from conftest import build_workspace, make_step

    ws = build_workspace(tmp_path / "ws")
    ws.add_step("alpha", make_step("a6", statement="Hecke operators span the spherical algebra"))
    queries = tmp_path / "q.jsonl"
    queries.write_text("".join(json.dumps({"qid": qid, "query": "Hecke operators", "step": step}) + "\n"
                               for qid, step in [("q1", "alpha/a6"), ("q2", "alpha/a-6"),
                                                 ("q3", "gamma/a6"), ("q4", "gamma/a6")]))
    (tmp_path / "r.qrels").write_text("".join(f"q{i} 0 alpha/a6 1\n" for i in range(1, 5)))
    assert mem(["--workspace", str(ws.root), "index"], out=io.StringIO(), err=io.StringIO()) == 0
    err = io.StringIO()
    status = mem(["--workspace", str(ws.root), "eval", "paging", "--queries", str(queries), "--qrels",
                  str(tmp_path / "r.qrels"), "--strategy", "bm25", "--trec-out", str(tmp_path / "run.trec")],
                 out=io.StringIO(), err=err)
    assert status == 0
    warnings = [line for line in err.getvalue().splitlines() if "warning" in line]
    assert warnings == [f"mem: warning: {queries} names 2 steps the index does not hold (alpha/a-6, "
                        "gamma/a6): leave-one-out hides nothing else for those queries, so a "
                        "misspelt id leaves the step it meant visible",
                        f"mem: warning: {tmp_path / 'r.qrels'} judges relevant 1 step their query leaves "
                        "out (q1: alpha/a6): a query's `run` leaves that run's steps out of the search, "
                        "and its `step` hides itself, what cites it and its run-mates written after it "
                        "(leave-one-out), so no search finds them, and they count as missed"]
    ranked = {line.split()[0] for line in (tmp_path / "run.trec").read_text().splitlines()}
    assert ranked == {"q2", "q3", "q4"}  # the misspelt ones find the step; q1's own step is hidden


def _warnings(tmp_path, field: str, values: list[str], command: str = "paging") -> tuple[Path, list[str]]:
    """The warnings of `mem eval COMMAND` over three queries giving ``field`` these ``values``."""
    from conftest import build_workspace

    ws = build_workspace(tmp_path / "ws")
    queries = tmp_path / "q.jsonl"
    queries.write_text("".join(json.dumps({"qid": f"q{i}", "query": "statement", field: value}) + "\n"
                               for i, value in enumerate(values, start=1)))
    (tmp_path / "r.qrels").write_text("".join(f"q{i} 0 alpha/a1 1\n" for i in range(1, len(values) + 1)))
    assert mem(["--workspace", str(ws.root), "index"], out=io.StringIO(), err=io.StringIO()) == 0
    err = io.StringIO()
    status = mem(["--workspace", str(ws.root), "eval", command, "--queries", str(queries), "--qrels",
                  str(tmp_path / "r.qrels"), "--strategy", "bm25" if command == "paging" else "graph"],
                 out=io.StringIO(), err=err)
    assert status == 0, err.getvalue()
    return queries, [line for line in err.getvalue().splitlines() if "warning" in line]


def test_a_run_the_workspace_does_not_hold_is_named_in_a_warning(tmp_path):
    """A query leaves out its own run's steps; a misspelt ``run`` leaves them in: named once."""
    queries, warnings = _warnings(tmp_path, "run", ["beta", "bta", "bta"])
    assert warnings == [f"mem: warning: {queries} names 1 run the workspace does not hold (bta): those "
                        "queries leave out no run's own steps, and are ranked as asked from no run"]


def test_eval_fusion_counts_a_query_whose_run_is_none_here_as_asked_from_no_run(tmp_path):
    """The search ranks a query whose ``run`` names no run as asked from no run
    (``Retriever.asks_from``); `eval fusion` tuned the in-run table on such queries."""
    queries, warnings = _warnings(tmp_path, "run", ["bta", "bta", "bta"], "fusion")
    assert warnings[0].startswith(f"mem: warning: {queries} names 1 run the workspace does not hold")
    ws, qrels = tmp_path / "ws", tmp_path / "r.qrels"
    out = io.StringIO()
    assert mem(["--workspace", str(ws), "--json", "eval", "fusion", "--queries", str(queries), "--qrels",
                str(qrels), "--strategy", "graph"], out=out, err=io.StringIO()) == 0
    assert json.loads(out.getvalue())["in_run"] is False
    err = io.StringIO()  # a guard set is read so too: its queries guard the no-run table
    assert mem(["--workspace", str(ws), "eval", "fusion", "--queries", str(queries), "--qrels", str(qrels),
                "--strategy", "graph", "--guard", str(ws), str(queries), str(qrels)], out=io.StringIO(),
               err=err) == 0
    assert "guard: nDCG@10 at least 1.000 (graph's with the configured weights) on the 3 queries " \
        "asked from no run" in err.getvalue()
    mixed = tmp_path / "mixed.jsonl"  # with one query of a run that is: two kinds, each its own table
    mixed.write_text(queries.read_text().replace('"bta"', '"beta"', 1))
    err = io.StringIO()
    assert mem(["--workspace", str(ws), "eval", "fusion", "--queries", str(mixed), "--qrels", str(qrels),
                "--strategy", "graph"], out=io.StringIO(), err=err) == 2
    assert err.getvalue().splitlines()[-1].startswith(f"mem: --asked run|none is needed: {mixed} has 1 "
                                                      "judged queries asked from a run and 2 from none")


@pytest.mark.parametrize("command", ["paging", "fusion"])
def test_a_setting_the_ontology_does_not_know_is_named_in_a_warning(tmp_path, command):
    """`archive-search --setting Mars` notes it; a queries file giving it was silent."""
    queries, warnings = _warnings(tmp_path, "setting", ["Qp", "Mars", "Mars"], command)
    assert [line for line in warnings if "setting clause" in line] == [
        f"mem: warning: {queries} gives 1 setting clause the settings ontology does not know (Mars): a "
        "step matches those only by the same text"]


def _judged_warnings(tmp_path, command: str, queries: list[dict], qrels: str) -> list[str]:
    """The warnings of `mem eval COMMAND` over ``queries`` (each asking "statement") judged by
    ``qrels`` on the test workspace."""
    from conftest import build_workspace

    ws = build_workspace(tmp_path / "ws")
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps({"query": "statement", **query}) + "\n" for query in queries))
    (tmp_path / "r.qrels").write_text(qrels)
    assert mem(["--workspace", str(ws.root), "index"], out=io.StringIO(), err=io.StringIO()) == 0
    err = io.StringIO()
    extra = ["--strategy", "bm25"] if command == "paging" else ["--strategy", "graph", "--folds", "2"]
    mem(["--workspace", str(ws.root), "eval", command, "--queries", str(path), "--qrels",
         str(tmp_path / "r.qrels"), *extra], out=io.StringIO(), err=err)
    return [line for line in err.getvalue().splitlines() if "warning" in line]


@pytest.mark.parametrize("command", ["paging", "fusion"])
def test_a_judged_id_the_index_does_not_hold_is_named_in_a_warning(tmp_path, command):
    """A bare step id, or a misspelt run, in a qrels file scores 0 for its query: named once (one
    in the query's own run was named again as one its query leaves out); grade 0 is no judgment of
    relevance."""
    warnings = _judged_warnings(tmp_path, command, [{"qid": q, "run": "beta"} for q in ("q1", "q2", "q3")],
                                "q1 0 alpha/a1 1\nq1 0 a2 1\nq2 0 nosuch/z1 2\nq2 0 a2 1\nq2 0 alpha/zz 0\n"
                                "q3 0 beta/nope 1\nq3 0 alpha/a1 1\n")
    assert warnings == [
        (f"mem: warning: {tmp_path / 'r.qrels'} judges relevant 3 ids the index does not hold (a2, "
         "nosuch/z1, beta/nope): no search finds them, and they count as missed (judgments name steps by "
         "global id, run/step)")]


@pytest.mark.parametrize("command", ["paging", "fusion"])
def test_a_judged_step_its_own_query_leaves_out_is_named_in_a_warning(tmp_path, command):
    """A step of the query's own `run` is no candidate (a run cannot reuse itself), and its own
    `step` is hidden: the development set's `uses-all` files, run as shipped, judged 563 of 772
    such, and the figures read a sixth of the README's with no warning."""
    # q2 hides alpha/a2 and alpha/a4, which cites it; a2's input alpha/a1 stays
    warnings = _judged_warnings(tmp_path, command, [{"qid": "q1", "run": "beta"},
                                                    {"qid": "q2", "step": "alpha/a2", "run": "beta"}],
                                "q1 0 alpha/a1 1\nq1 0 beta/b1 1\nq2 0 alpha/a2 1\nq2 0 alpha/a1 1\n"
                                "q2 0 alpha/a4 1\n")
    assert warnings == [
        (f"mem: warning: {tmp_path / 'r.qrels'} judges relevant 3 steps their query leaves out (q1: "
         "beta/b1, q2: alpha/a2, q2: alpha/a4): a query's `run` leaves that run's steps out of the "
         "search, and its `step` hides itself, what cites it and its run-mates written after it "
         "(leave-one-out), so no search finds them, and they count as missed")]


def test_a_step_that_is_not_a_global_id_is_bad_input(tmp_path):
    from mem_retrieval.eval.judgments import read_queries

    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"qid": "q", "query": "x", "step": "a6"}) + "\n")
    with pytest.raises(InputError, match=r"q.jsonl:1: step: 'a6' is not a global id"):
        read_queries(path)


def test_a_run_or_step_typed_with_look_alikes_is_read_as_a_search_reads_it(tmp_path):
    """A search read ``satake‑two‑levels`` (U+2011) as the run and left its steps out, while the
    evaluator's warnings took it for a run the workspace lacks and `eval fusion` put it in a fold
    of its own; the run part of ``step`` was refused as no global id."""
    from mem_retrieval.eval.judgments import read_queries

    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in [
        {"qid": "q1", "query": "x", "run": "satake\u2011two\u2011levels",
         "step": "satake\u2011two\u2011levels/A5-7"},
        {"qid": "q2", "query": "x", "run": "\uff53atake-two-levels"}]))
    assert [(q.run, q.step) for q in read_queries(path)] == [
        ("satake-two-levels", "satake-two-levels/A5-7"), ("satake-two-levels", None)]
    with path.open("a") as out:  # no slug, no run: refused at its line, as a search would refuse it
        out.write(json.dumps({"qid": "q3", "query": "x", "run": "sa take"}) + "\n")
    with pytest.raises(InputError, match=r"q\.jsonl:3: run: 'sa take' is not a run slug \(\[a-z0-9\]"):
        read_queries(path)
    assert _warnings(tmp_path / "w", "run", ["beta", "\uff42eta", "b\uff45ta"])[1] == []  # none unknown


@pytest.mark.parametrize("field", ["query", "setting"])
def test_a_query_a_search_would_refuse_is_bad_input_at_its_line(example, tmp_path, field):
    """Refused as the file is read, not by the search half-way through an evaluation. A setting too
    long was refused by the search, as if `--setting` had been given, after a warning of 18 KB."""
    from mem_retrieval.eval.judgments import read_queries

    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps({"qid": f"q{i}", "query": "x", field: text}) + "\n"
                            for i, text in enumerate(["x", "y " * 10_000])))
    want = {"query": f"q.jsonl:2: {field}: is 20,000 characters long; at most 16,384 are searched",
            "setting": f"q.jsonl:2: {field}: is 20,000 characters long; a setting is at most 16,384"}[field]
    with pytest.raises(InputError, match=want):
        read_queries(path)
    qrels = tmp_path / "r.qrels"
    qrels.write_text("q0 0 satake-two-levels/A5-7 1\n")
    err = io.StringIO()
    assert mem(["--workspace", str(example.workspace.root), "eval", "paging", "--queries", str(path),
                "--qrels", str(qrels)], out=io.StringIO(), err=err) == 2
    assert err.getvalue().count("\n") == 1 and want in err.getvalue()


@pytest.mark.parametrize("argv", [["eval", "paging", "--queries", "Q", "--qrels", "R"],
                                  ["eval", "reuse", "--all", "--per-step"]])
@pytest.mark.parametrize("pages", ["0", "-3", "101", "100000"])
def test_a_number_of_pages_outside_1_to_100_is_refused_before_any_work(tmp_path, argv, pages):
    """``--max-pages 100000`` ran for hours (the bound's cost grows with the square of the pages);
    ``eval reuse`` read 0 or -3 as the default."""
    err = io.StringIO()
    status = mem(["--workspace", str(tmp_path), *argv, "--max-pages", pages], out=io.StringIO(), err=err)
    assert status == 2
    assert err.getvalue() == f"mem: --max-pages {pages} is not a number of pages from 1 to 100\n"


def test_a_document_judged_twice_with_two_grades_is_bad_input_at_the_second(tmp_path):
    """The later grade silently won; the same judgment twice is harmless and read once."""
    from mem_retrieval.eval.judgments import read_qrels

    path = tmp_path / "r.qrels"
    path.write_text("q1 0 alpha/a1 2\nq1 0 alpha/a2 1\nq1 0 alpha/a2 1\nq2 0 alpha/a1 1\n")
    assert read_qrels(path) == {"q1": {"alpha/a1": 2, "alpha/a2": 1}, "q2": {"alpha/a1": 1}}
    path.write_text("q1 0 alpha/a1 2\nq2 0 alpha/a1 1\nq1 0 alpha/a1 1\n")
    with pytest.raises(InputError, match=r"r.qrels:3: grade: alpha/a1 is judged 2 for q1 at line 1 and 1 here"):
        read_qrels(path)


def agent_pages(retriever, search, max_pages: int, read_on) -> int:
    """Pages an agent reads through ``retriever.archive_search``, asking ``read_on(page, first
    score)`` after each page what it shows."""
    first = None
    page = 1
    while True:
        shown = retriever.archive_search(search, page)
        first = shown.hits[0].score if first is None and shown.hits else first
        if page >= min(max_pages, max(shown.pages, 1)) or not read_on(shown, first):
            return page
        page += 1


def test_the_hint_and_score_drop_pagers_read_the_pages_an_agent_reads(example):
    """Oracle: an agent paging with the real search, reading on while the page's ``remaining`` is at
    least 1 (``hint``), or while the page's best shown score is at least half the first hit's
    (``score-drop``). The evaluator read its own run's scores (six decimals, ties nudged apart for
    trec_eval): a list of tied hits said to stop where the page says to read on."""
    from mem_retrieval.eval.judgments import read_qrels, read_queries
    from mem_retrieval.eval.ranker import archive_query, make_ranker

    example_dir = Path(__file__).resolve().parent.parent / "examples" / "workspace" / "eval"
    tied = "satake-two-levels/A5-5 satake-two-levels/A5-7 satake-two-levels/A5-6 satake-two-levels/A2-6 " \
           "satake-two-levels/A5-8 satake-two-levels/A2-4 satake-two-levels/A4-3"
    queries = read_queries(example_dir / "queries.jsonl")[::3] + [Query("tied", tied)]  # 14 + 1: 4.7 s -> 2 s
    judged = {**read_qrels(example_dir / "qrels"), "tied": {"satake-two-levels/A4-3": 1}}
    qrels = {q.qid: judged[q.qid] for q in queries if q.qid in judged}
    retriever, max_pages = example.retriever, 10
    rules = {"hint": lambda shown, first: shown.remaining >= 1,
             "score-drop": lambda shown, first: first is not None and first > 0
             and max(h.score for h in shown.hits) >= 0.5 * first}
    for strategy in ("rerank-graph", "hybrid-rrf"):
        evaluation = evaluate_paging(make_ranker(retriever), queries, qrels, page_size=5,
                                     hint=Hint.of(example.config.search), strategies=[strategy],
                                     max_pages=max_pages, depth=100)
        judged_queries = [q for q in queries if any(g > 0 for g in qrels.get(q.qid, {}).values())]
        for pager, read_on in rules.items():
            pages = [agent_pages(retriever, archive_query(retriever, q, strategy), max_pages, read_on)
                     for q in judged_queries]
            assert evaluation.strategies[strategy].pagers[pager].pages == \
                pytest.approx(sum(pages) / len(pages)), (strategy, pager)
    # an exact lookup of seven ids: they tie, page 1 says two more hits like the best; both read on
    tied_search = archive_query(retriever, Query("tied", tied), "rerank-graph")
    assert agent_pages(retriever, tied_search, max_pages, rules["hint"]) == 2
    alone = evaluate_paging(make_ranker(retriever), [Query("tied", tied)], {"tied": qrels["tied"]},
                            page_size=5, hint=Hint.of(example.config.search), strategies=["rerank-graph"])
    assert alone.strategies["rerank-graph"].pagers["hint"].pages == 2


@pytest.mark.slow
def test_the_files_of_one_evaluation_are_written_all_or_none(example, tmp_path):
    """`--trec-out F --report DIR` on a disk that filled at the plot: F was replaced by the new run
    and an empty DIR was left, though the command failed (exit 2). A file size limit between the run
    file's size and the plot's stops it at the plot: F keeps its old text and no DIR is made."""
    import os
    import resource
    import subprocess
    import sys

    root, queries = example.workspace.root, example.workspace.root / "eval"
    argv = [sys.executable, "-m", "mem_retrieval.cli", "-w", str(root), "eval", "paging", "--queries",
            str(queries / "queries.jsonl"), "--qrels", str(queries / "qrels"), "--strategy", "bm25",
            "--max-pages", "2"]
    env = os.environ | {"MEM_NO_SERVER": "1"}
    done = subprocess.run([*argv, "--trec-out", str(tmp_path / "probe.trec"), "--report",
                           str(tmp_path / "probe")], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    run = (tmp_path / "probe.trec").stat().st_size
    figure = (tmp_path / "probe" / "recall_by_page.png").stat().st_size
    assert (tmp_path / "probe" / "report.md").stat().st_size < run < figure  # the plot fills the disk
    limit = (run + figure) // 2
    (tmp_path / "old.trec").write_text("old\n")
    done = subprocess.run([*argv, "--trec-out", str(tmp_path / "old.trec"), "--report",
                           str(tmp_path / "rep")], capture_output=True, text=True, env=env, timeout=300,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.endswith(f"mem: --report {str(tmp_path / 'rep' / 'recall_by_page.png')!r}: cannot "
                                "write it: File too large\n"), done.stderr
    assert (tmp_path / "old.trec").read_text() == "old\n" and not (tmp_path / "rep").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.trec", "probe", "probe.trec"]
