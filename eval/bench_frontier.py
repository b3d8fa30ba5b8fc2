"""Time the lazy greedy frontier on a large random problem (default 10,000 events × 2,000 queries).

    python -m mem_retrieval.eval.bench_frontier [--events N] [--queries Q] [--answers K] [--false P]
                                  [--synergy P] [--seed S]

Each event has one span answering 1…2K random queries, shared with a second random event with
probability --synergy (cross-event synergy), and is false with probability --false; query weights
are random. Prints the problem's size, the seconds for both greedy frontiers up to every
event, and the marginal gains computed against the n(n+1)/2 a plain greedy would compute."""

from __future__ import annotations

import argparse
import time

import numpy as np

from mem_retrieval.eval.frontier import Problem, frontier


def random_problem(events: int, queries: int, answers: int, false: float, seed: int,
                   synergy: float = 0.0) -> Problem:
    """One span an event, ``answers`` queries a span on average, a share ``synergy`` of them needing
    a second event, a share ``false`` of false events."""
    rng = np.random.default_rng(seed)
    qids = [f"q{i}" for i in range(queries)]
    weights = rng.random(queries) + 0.1
    truth = rng.random(events) >= false
    spans = []
    for e in range(events):
        picked = rng.choice(queries, size=int(rng.integers(1, 2 * answers + 1)), replace=False)
        members = (f"e{e}",)
        if rng.random() < synergy:
            members += (f"e{int(rng.integers(events))}",)
        spans.append((members, tuple(qids[q] for q in picked)))
    return Problem.build(list(zip(qids, weights.tolist())),
                         [(f"e{e}", bool(t)) for e, t in enumerate(truth)], spans)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--answers", type=int, default=5, help="queries an event answers, on average")
    parser.add_argument("--false", type=float, default=0.1, help="share of false events")
    parser.add_argument("--synergy", type=float, default=0.0, help="share of two-event spans")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    problem = random_problem(args.events, args.queries, args.answers, args.false, args.seed,
                             args.synergy)
    built = time.perf_counter() - started
    front = frontier(problem)
    n = len(problem.event_ids)
    plain = n * (n + 1) // 2
    print(f"{n:,} events × {len(problem.query_ids):,} queries, {len(problem.spans):,} spans "
          f"({problem.synergy:,} of two events, {n - sum(problem.truth):,} events false) "
          f"({sum(len(s.answers) for s in problem.spans):,} answers); built in {built:.2f} s")
    print(f"greedy frontiers, coverage and precision, sizes 0…{front.max_size:,}: {front.seconds:.2f} s "
          f"({front.method})")
    for name, curve in (("coverage", front.greedy_coverage), ("precision", front.greedy_precision)):
        full = next(k for k, v in enumerate(curve.values) if v >= curve.values[-1] - 1e-12)
        print(f"  {name}: {curve.evaluations:,} gains computed (plain greedy: ~{plain:,}); "
              f"U(100) = {curve.value(100):.3f}, reaches {curve.values[-1]:.3f} at size {full:,}")


if __name__ == "__main__":
    main()
