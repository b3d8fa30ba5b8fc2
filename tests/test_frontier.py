"""`mem eval frontier`: the utility–capacity frontier against brute force and hand-worked numbers,
coverage against precision (water inflation), synergy against greedy, the CLI and workspace mode."""

from __future__ import annotations

import io
import itertools
import json
import random

import pytest

from mem_retrieval.eval.frontier import Problem, exhaustive, frontier, greedy, score_memory
from mem_retrieval.eval.frontier_input import ids_in_text
from mem_retrieval.cli.main import run


# ---------------------------------------------------------------------------- oracles (plain Python)

def answered(problem: Problem, memory, precise=False) -> set[int]:
    inside = set(memory)
    done: set[int] = set()
    for span in problem.spans:
        if set(span.events) <= inside and (not precise or all(problem.truth[e] for e in span.events)):
            done |= set(span.answers)
    return done


def oracle_utility(problem: Problem, memory, precise=False) -> float:
    return sum(float(problem.weights[q]) for q in answered(problem, memory, precise))


def oracle_frontier(problem: Problem, precise=False) -> list[float]:
    """max over all memories of each size, by listing them."""
    n = len(problem.event_ids)
    return [max(oracle_utility(problem, m, precise) for m in itertools.combinations(range(n), k))
            for k in range(n + 1)]


def plain_greedy(problem: Problem, precise=False) -> list[int]:
    """Recompute every gain every step; ties (to 12 decimals) to the first event; stop when
    nothing can gain."""
    chosen: list[int] = []
    reachable = oracle_utility(problem, range(len(problem.event_ids)), precise)
    useful = sorted({e for s in (problem.true_spans if precise else problem.spans) for e in s.events})
    while len(chosen) < len(useful):
        now = oracle_utility(problem, chosen, precise)
        if now >= reachable:
            break
        gains = [(round(oracle_utility(problem, chosen + [e], precise) - now, 12), -e)
                 for e in useful if e not in chosen]
        chosen.append(-max(gains)[1])
    return chosen


def build(weights: dict[str, float], spans: list[tuple[list[str], list[str]]],
          false: tuple[str, ...] = (), events: list[str] | None = None) -> Problem:
    events = events or sorted({e for members, _ in spans for e in members})
    return Problem.build(list(weights.items()), [(e, e not in false) for e in events], spans)


# Five events, eight queries of weight 1/8, overlapping: greedy takes e1 (4 queries) first, but
# {e2, e3} answers 6 at size 2. Worked by hand:
#   exact  U*(S) = 0, 4/8, 6/8, 7/8, 8/8, 8/8   ({e1}, {e2,e3}, {e2,e3,e4}, {e2,e3,e4,e5})
#   greedy       = 0, 4/8, 5/8, 6/8, 7/8, 8/8   (e1, e2, e3, e4, e5)
FIVE = build({f"q{i}": 1.0 for i in range(1, 9)},
             [(["e1"], ["q1", "q2", "q3", "q4"]), (["e2"], ["q1", "q2", "q5"]),
              (["e3"], ["q3", "q4", "q6"]), (["e4"], ["q7"]), (["e5"], ["q8"])])


def test_weights_are_shares_whatever_their_scale_even_near_the_float_limit():
    # two queries of equal weight: one event answers half, whether the weights are 1 or 1e308
    # (summed as given, 1e308 + 1e308 overflows to infinity and every share became 0)
    for weight in (1.0, 1e-300, 1e308):
        problem = build({"q1": weight, "q2": weight}, [(["e1"], ["q1"]), (["e2"], ["q2"])])
        assert list(problem.weights) == [0.5, 0.5]
        assert frontier(problem).coverage.value(1) == 0.5


def test_five_event_frontier_matches_hand_values_and_brute_force():
    front = frontier(FIVE)
    exact = [front.coverage.value(s) for s in range(6)]
    assert exact == [0, 4 / 8, 6 / 8, 7 / 8, 1, 1]
    assert exact == oracle_frontier(FIVE)
    assert [front.greedy_coverage.value(s) for s in range(6)] == [0, 4 / 8, 5 / 8, 6 / 8, 7 / 8, 1]
    assert front.method == "exact"
    for size in range(6):  # the memory reported reaches the value reported, within its size
        memory = front.coverage.memory(size)
        assert len(memory) <= size and oracle_utility(FIVE, memory) == exact[size]
    assert {FIVE.event_ids[e] for e in front.coverage.memory(2)} == {"e2", "e3"}
    # every span is one event: greedy keeps its (1 - 1/e) guarantee, and says so
    assert all(front.greedy_coverage.value(s) >= 0.632 * exact[s] for s in range(6))
    assert "(1 − 1/e)" in front.notes()[1] and front.notes()[1].startswith("bound")


def test_too_many_subsets_falls_back_to_greedy_and_says_so():
    front = frontier(FIVE, exact_limit=16)  # 2^5 = 32 memories
    assert front.method == "greedy"
    assert front.coverage.value(2) == 5 / 8
    assert front.notes()[0].startswith("greedy: the 2^5 memories")


def test_random_problems_exact_and_lazy_greedy_match_their_oracles():
    rng = random.Random(7)
    for _ in range(60):
        n, m = rng.randint(1, 7), rng.randint(1, 6)
        weights = {f"q{i}": float(rng.randint(0, 4)) for i in range(m)}
        weights["q0"] += 1.0
        spans = [(rng.sample([f"e{i}" for i in range(n)], rng.choice([1, 1, 1, 2, 3][:n + 1] or [1])),
                  rng.sample(list(weights), rng.randint(0, m))) for _ in range(rng.randint(1, 8))]
        false = tuple(f"e{i}" for i in range(n) if rng.random() < 0.3)
        problem = build(weights, spans, false, [f"e{i}" for i in range(n)])
        for precise in (False, True):
            spans_used = problem.true_spans if precise else problem.spans
            values = exhaustive(problem, spans_used)
            brute = oracle_frontier(problem, precise)
            assert [values.value(k) for k in range(n + 1)] == pytest.approx(brute)
            lazy = greedy(problem, spans_used, n)
            assert list(lazy.order) == plain_greedy(problem, precise)


def test_greedy_breaks_a_tie_by_order_whatever_the_rounding_of_the_weights():
    """e0 answers q3 (weight 3), e1 q1 and q2 (1 + 2): a tie, so greedy takes the first, e0. A
    query no span answers (q4, weight 4) rescales the shares: 2/10 + 1/10 then sums to
    0.30000000000000004 against 3/10's 0.3, and greedy took e1 (which events first: not the values)."""
    for weights in ({"q1": 1, "q2": 2, "q3": 3}, {"q1": 1, "q2": 2, "q3": 3, "q4": 4}):
        problem = build(weights, [(["e0"], ["q3"]), (["e1"], ["q1", "q2"])], events=["e0", "e1"])
        curve = greedy(problem, problem.spans, 2)
        assert curve.order == (0, 1), weights
        assert curve.values[1] == pytest.approx(3 / sum(weights.values()))


def test_false_claim_covering_most_inflates_coverage_not_precision():
    # the paper's numbers: a false claim of apparent mass 0.45 beats a true event's 0.35
    problem = build({"q1": 0.35, "q2": 0.45, "q3": 0.20},
                    [(["e1"], ["q1"]), (["f"], ["q2"]), (["e2"], ["q3"]), (["e1", "f"], ["q3"])],
                    false=("f",), events=["e1", "e2", "f"])
    front = frontier(problem)
    assert front.coverage.value(1) == pytest.approx(0.45)    # f
    assert front.precision.value(1) == pytest.approx(0.35)   # e1: f counts for nothing
    assert front.precision.value(2) == pytest.approx(0.55)   # e1 + e2
    only_false = score_memory(front, [2])
    assert (only_false.coverage, only_false.precision) == (pytest.approx(0.45), 0.0)
    assert only_false.water_inflation == pytest.approx(0.45)
    assert only_false.loss == pytest.approx(0.35)
    # {e1, f}: the synergy span {e1, f} answers q3 for coverage only (f is false)
    mixed = score_memory(front, [0, 2])
    assert mixed.coverage == pytest.approx(1.0)
    assert mixed.precision == pytest.approx(0.35)
    assert mixed.water_inflation == pytest.approx(0.65)
    assert mixed.loss == pytest.approx(0.55 - 0.35)


# Synergy: {b, c} together answer q3–q5 (0.6); a alone q1–q2 (0.4). c gains 0 alone, 0.6 after b,
# so greedy takes a, then b (gain 0), and reaches 0.4 at size 2 where {b, c} reaches 0.6.
SYNERGY = build({f"q{i}": 1.0 for i in range(1, 6)},
                [(["a"], ["q1", "q2"]), (["b", "c"], ["q3", "q4", "q5"])])


def test_synergy_lets_exact_beat_greedy_and_voids_the_bound():
    a, b, c = 0, 1, 2
    assert SYNERGY.utility([b, c]) - SYNERGY.utility([b]) > SYNERGY.utility([c]) - SYNERGY.utility([])
    front = frontier(SYNERGY)
    assert front.coverage.value(2) == pytest.approx(0.6)
    assert front.greedy_coverage.value(2) == pytest.approx(0.4)
    assert set(front.coverage.memory(2)) == {b, c}
    assert front.greedy_coverage.memory(2) == (a, b)
    assert front.notes()[1].startswith("no bound: 1 span(s) of several events")


def test_a_memory_better_than_greedy_loses_nothing_against_it():
    """With the greedy frontier (a lower bound), a memory better than greedy's at its size read a
    negative loss (-0.5 here) and was drawn above the "frontier": the memory shows the frontier is at
    least its precision, so its loss is 0, as the exact frontier says."""
    problem = Problem.build([("q1", 1.0), ("q2", 1.0)], [("a", True), ("b", True), ("c", True)],
                           [(("a", "b"), ("q1", "q2")), (("c",), ("q1",))])
    assert frontier(problem, exact_limit=0).precision.value(2) == pytest.approx(0.5)  # greedy: c first
    for limit in (0, 1 << 20):
        assert score_memory(frontier(problem, exact_limit=limit), [0, 1]).loss == 0.0
    assert score_memory(frontier(problem, exact_limit=0), [2]).loss == 0.0  # greedy's own pick: 0 too


# ------------------------------------------------------------------------------------------ the CLI

def mem(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = run(list(argv), out=out, err=err)
    return status, out.getvalue(), err.getvalue()


def write_problem(path, queries, events, spans) -> str:
    path.write_text(json.dumps({"queries": queries, "events": events, "spans": spans}, indent=1))
    return str(path)


def test_cli_json_has_the_issue_shape(tmp_path):
    file = write_problem(
        tmp_path / "p.json",
        [{"qid": "q1", "text": "who", "weight": 2}, {"qid": "q2", "weight": 1}, {"qid": "q3", "weight": 1}],
        [{"id": "e1", "true": True}, {"id": "e2", "true": False}, {"id": "e3", "text": "claim"}],
        [{"events": ["e1"], "item": "x", "answers": ["q1"]}, {"events": ["e2"], "answers": ["q1", "q2"]},
         {"events": ["e2", "e3"], "answers": ["q3"]}])
    status, out, _ = mem("--json", "eval", "frontier", file, "--memory", "e3,e2")
    assert status == 0
    data = json.loads(out)
    assert set(data) == {"events", "queries", "frontier", "memory", "notes"}
    assert (data["events"], data["queries"]) == (3, 3)
    assert [row["size"] for row in data["frontier"]] == [0, 1, 2, 3]
    assert set(data["frontier"][0]) >= {"size", "coverage", "precision", "method",
                                        "coverage_memory", "precision_memory"}
    row = data["frontier"][2]
    assert (row["coverage"], row["precision"], row["method"]) == (1.0, 0.5, "exact")
    assert row["coverage_memory"] == ["e2", "e3"] and row["precision_memory"] == ["e1"]
    assert data["memory"] == {"ids": ["e3", "e2"], "size": 2, "coverage": 1.0, "precision": 0.0,
                              "water_inflation": 1.0, "loss": 0.5}
    status, out, _ = mem("--json", "eval", "frontier", file)
    assert status == 0 and json.loads(out)["memory"] is None


@pytest.mark.parametrize("text, where", [
    ('{"queries": [{"qid": "q1"}], "events": [', ":1: invalid JSON"),
    ('{"queries": [{"qid": "q1"}],\n "events": [{"id": "e1"}],\n "spans": [\n  {"events": ["e9"], "answers": []}]}',
     ":4: spans[0].events[0]: 'e9' is not one of this file's event ids"),
    ('{"queries": [\n {"qid": "q1", "weight": -1}], "events": [], "spans": []}', ":2: queries[0].weight"),
    ('{"queries": [{"qid": "q1"}], "spans": []}', "events: missing"),
    ('{"queries": [{"qid": "q1"}], "events": [{"id": "e1", "true": "yes"}], "spans": []}',
     "events[0].true: must be true or false"),
    ('{"queries": [{"qid": "q1"}], "events": [{"id": "e1"}, {"id": "e1"}], "spans": []}', "duplicate id"),
    # ids --memory could never name (it splits at commas and strips)
    ('{"queries": [{"qid": "q1"}], "events": [{"id": "a,b"}], "spans": []}',
     "events[0].id: 'a,b' holds a comma"),
    ('{"queries": [{"qid": "q1"}], "events": [{"id": "c "}], "spans": []}',
     "events[0].id: 'c ' holds a comma"),
])
def test_malformed_file_is_one_line_exit_2_and_no_plot(tmp_path, text, where):
    file = tmp_path / "bad.json"
    file.write_text(text)
    plot = tmp_path / "f.png"
    status, out, err = mem("eval", "frontier", str(file), "--plot", str(plot))
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and str(file) in err and where in err
    assert not plot.exists()


def test_unknown_memory_id_is_exit_2(tmp_path):
    file = write_problem(tmp_path / "p.json", [{"qid": "q1"}], [{"id": "e1"}], [])
    status, _, err = mem("eval", "frontier", file, "--memory", "e1,e7")
    assert status == 2 and "'e7' is not an event" in err


def test_memory_from_a_library_that_is_not_there_is_refused_not_scored_empty(tmp_path):
    """A problem FILE with `--memory-from library` in a folder without solve/library.jsonl (the
    wrong folder, most likely) scored an empty memory, where the workspace form refuses; an empty
    library is an empty memory, said."""
    file = write_problem(tmp_path / "p.json", [{"qid": "q1"}], [{"id": "e1"}],
                         [{"events": ["e1"], "answers": ["q1"]}])
    status, out, err = mem("--workspace", str(tmp_path), "eval", "frontier", file, "--memory-from", "library")
    library = tmp_path / "solve" / "library.jsonl"
    assert (status, out, err) == (1, "", f"mem: --memory-from library: there is no {library}\n")
    library.parent.mkdir()
    library.write_text("")
    status, out, err = mem("--workspace", str(tmp_path), "eval", "frontier", file, "--memory-from", "library")
    assert status == 0 and "size 0  coverage 0.000" in out
    assert err == "mem: --memory-from library: names no event of this problem (empty memory)\n"


def test_table_and_plot(tmp_path):
    file = write_problem(tmp_path / "p.json", [{"qid": "q1"}, {"qid": "q2"}],
                         [{"id": "e1"}, {"id": "e2", "true": False}],
                         [{"events": ["e1"], "answers": ["q1"]}, {"events": ["e2"], "answers": ["q2"]}])
    plot = tmp_path / "f.png"
    status, out, _ = mem("eval", "frontier", file, "--memory", "e2", "--plot", str(plot))
    assert status == 0
    assert "water inflation 0.500  loss 0.500" in out and "exact: exhaustive search" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------------ workspace mode

def library_line(run, step, status, grade, repair=None) -> str:
    return json.dumps({"run": run, "id": step, "kind": "lemma", "statement": f"{step} holds",
                       "status": status, "grade": grade, "repair": repair})


def tiny_workspace(tmp_path):
    ws = tmp_path / "ws"
    (ws / "solve").mkdir(parents=True)
    (ws / "solve" / "library.jsonl").write_text("\n".join([
        library_line("alpha", "A1", "proved", "pass"),            # true
        library_line("alpha", "A2", "proved", "major"),           # false: failed the audit
        library_line("beta", "B1", "proved", "error", "fixed"),   # true: repaired
        library_line("beta", "B2", "proved", "minor"),            # true, judged for nothing
    ]) + "\n")
    (ws / "alpha" / "memory").mkdir(parents=True)
    (ws / "alpha" / "tree.json").write_text(json.dumps({"run": "alpha", "steps": []}))
    (ws / "alpha" / "memory" / "core.md").write_text(
        "## phase       round 1\n## inputs      A2 audited · (beta/B1) used · A9 unknown\n")
    queries = tmp_path / "q.jsonl"
    queries.write_text("\n".join(json.dumps({"qid": q, "query": q}) for q in ("q1", "q2", "q3", "q4")))
    qrels = tmp_path / "r.qrels"
    qrels.write_text("q1 0 alpha/A1 1\nq2 0 alpha/A2 2\nq3 0 alpha/A2 1\nq3 0 beta/B1 0\n"
                     "q4 0 beta/B1 1\nq4 0 gamma/G1 1\n")
    return ws, queries, qrels


def test_workspace_mode_library_steps_are_events(tmp_path):
    ws, queries, qrels = tiny_workspace(tmp_path)
    status, out, err = mem("--json", "--workspace", str(ws), "eval", "frontier", "--queries", str(queries),
                           "--qrels", str(qrels), "--memory-from", "alpha")
    assert status == 0, err
    data = json.loads(out)
    assert (data["events"], data["queries"]) == (4, 4)
    # A2 (false) answers q2 and q3; A1 q1; B1 q4 (its grade-0 judgment for q3 does not count)
    sizes = {row["size"]: row for row in data["frontier"]}
    assert sizes[1]["coverage"] == 0.5 and sizes[1]["coverage_memory"] == ["alpha/A2"]
    assert sizes[1]["precision"] == 0.25
    assert sizes[2]["precision"] == 0.5 and sizes[4]["precision"] == 0.5
    assert sizes[3]["coverage"] == 1.0
    # W names A2 (bare, this run) and beta/B1 (global, in brackets); A9 is no event
    assert data["memory"] == {"ids": ["alpha/A2", "beta/B1"], "size": 2, "coverage": 0.75,
                              "precision": 0.25, "water_inflation": 0.5, "loss": 0.25}
    status, out, _ = mem("--json", "--workspace", str(ws), "eval", "frontier", "--queries", str(queries),
                         "--qrels", str(qrels), "--memory-from", "library")
    assert json.loads(out)["memory"]["size"] == 4
    status, _, err = mem("--workspace", str(ws), "eval", "frontier", "--queries", str(queries),
                         "--qrels", str(qrels), "--memory-from", "nosuchrun")
    assert status == 1 and "nosuchrun" in err


def test_judgments_the_frontier_cannot_use_are_said_not_dropped(tmp_path):
    """A relevant id no library entry has (gamma/G1, or a bare A1) is warned of, as `eval paging`
    warns of ids the index does not hold; a judged query the queries file lacks is bad input naming
    its line. Both were dropped silently, a frontier of 0.000 at every size with bare ids."""
    ws, queries, qrels = tiny_workspace(tmp_path)
    status, _, err = mem("--workspace", str(ws), "eval", "frontier", "--queries", str(queries),
                         "--qrels", str(qrels))
    assert status == 0 and err == (f"mem: warning: {qrels} judges relevant 1 id no library entry has "
                                   "(gamma/G1): "
                                   "no memory answers with them (judgments name library steps by global id, "
                                   "run/step)\n")
    qrels.write_text("q1 0 A1 1\nq2 0 A2 1\nq3 0 B1 1\nq4 0 B2 1\n")
    status, _, err = mem("--workspace", str(ws), "eval", "frontier", "--queries", str(queries),
                         "--qrels", str(qrels))
    assert status == 0 and "judges relevant 4 ids no library entry has (A1, A2, B1, …)" in err
    qrels.write_text("q1 0 alpha/A1 1\nq9 0 alpha/A2 1\n")
    status, out, err = mem("--workspace", str(ws), "eval", "frontier", "--queries", str(queries),
                           "--qrels", str(qrels))
    assert (status, out) == (2, "")
    assert err == f"mem: {qrels}:2: qid: 'q9' is judged but not in the queries file\n"


def test_ids_in_text_reads_bare_and_global_ids():
    problem = build({"q1": 1.0}, [], events=["r/A5-7", "r/mul_le_mul'", "s/B1", "s/B2"])
    text = "next: audit A5-7, then mul_le_mul' · s/B2 ← (r/A5-7) · B1 is another run's"
    assert [problem.event_ids[e] for e in ids_in_text(text, "r", problem)] == ["r/A5-7", "r/mul_le_mul'", "s/B2"]
