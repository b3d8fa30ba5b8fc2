"""The fusion benchmark: how fast ``mem eval fusion`` scores its grid, against ir_measures, in one run.

    python -m mem_retrieval.eval.bench_fusion WORKSPACE --queries Q.jsonl --qrels R.qrels
                                              [--strategy rerank-graph] [--points 100]
                                              [--repeats 3] [--out FILE.json]

The judged queries' candidates are read once (``eval.fusion.collect``, leave-one-out). Then, per
query and repeat, the two ways of scoring the objective (R@10, R@50, nDCG@10) are timed on the same
seeded sample of ``--points`` weight vectors of the grid (step 0.1): the baseline ranks the
candidates once per point (``rank``) and asks ir_measures (``per_query``), as ``mem eval fusion``
did; ``grid_metrics`` takes every point at once. The two alternate, so a machine slowing down costs
each alike. Also timed: ``grid_metrics`` on the whole grid (what ``mem eval fusion`` runs). Output:
p50 / p95 seconds a query for each, the whole grid's seconds (the baseline's extrapolated from its
sample, per point), the ratio, and the largest difference between the two ways' figures (0 but for
rounding: the tests hold them equal)."""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

from mem_retrieval.configs import load_config
from mem_retrieval.eval.fusion import FEATURES, OBJECTIVE, collect, grid_metrics, rank, simplex
from mem_retrieval.eval.judgments import judged
from mem_retrieval.eval.metrics import per_query
from mem_retrieval.eval.paging_eval import read_judged
from mem_retrieval.records.errors import MemError
from mem_retrieval.records.workspace import Workspace
from mem_retrieval.retrieval.retriever import Retriever


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mem_retrieval.eval.bench_fusion",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("workspace", type=Path)
    parser.add_argument("--queries", type=Path, required=True)
    parser.add_argument("--qrels", type=Path, required=True)
    parser.add_argument("--strategy", default="rerank-graph", choices=tuple(FEATURES))
    parser.add_argument("--points", type=int, default=100, help="grid points both ways (default 100)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    for name in ("points", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} {getattr(args, name)}: at least 1")
    try:  # bad input (files, a missing index): one line, exit 2 or 1, as `mem` says it
        workspace = Workspace.open(args.workspace)
        config = load_config(workspace.root)
        queries, judgments, _ = read_judged(args.queries, args.qrels)
        qrels = judgments.qrels
        started = time.perf_counter()
        features = collect(Retriever(workspace, config), args.strategy, queries)
    except MemError as error:
        parser.exit(error.exit_status, f"{parser.prog}: {error}\n")
    collected = time.perf_counter() - started
    gold = judged(qrels)
    grid = simplex(FEATURES[args.strategy], 0.1)
    sample = random.Random(0).sample(grid, min(args.points, len(grid)))
    depth = config.search.pool
    seconds: dict[str, list[float]] = {"ir_measures": [], "grid_metrics": [], "whole grid": []}
    difference = 0.0
    for _ in range(args.repeats):
        for f in features:
            started = time.perf_counter()
            slow = [per_query({f.qid: rank(f, w, depth)}, {f.qid: gold.get(f.qid, {})}, OBJECTIVE)
                    for w in sample]
            seconds["ir_measures"].append(time.perf_counter() - started)
            started = time.perf_counter()
            fast = grid_metrics([f], gold, sample, depth)
            seconds["grid_metrics"].append(time.perf_counter() - started)
            started = time.perf_counter()
            grid_metrics([f], gold, grid, depth)
            seconds["whole grid"].append(time.perf_counter() - started)
            expected = np.array([[s.get(f.qid, {}).get(m, 0.0) for m in OBJECTIVE] for s in slow])
            difference = max(difference, float(np.abs(fast[:, 0, :] - expected).max(initial=0.0)))
    per_point = len(grid) / len(sample)
    whole = {name: sum(values) / args.repeats * (per_point if name != "whole grid" else 1.0)
             for name, values in seconds.items()}
    rows = [{"way": name, "points": len(grid) if name == "whole grid" else len(sample),
             "p50_query_s": round(float(np.percentile(values, 50)), 5),
             "p95_query_s": round(float(np.percentile(values, 95)), 5),
             "grid_s": round(whole[name], 2)} for name, values in seconds.items()]
    for row in rows:
        row["ratio"] = round(whole["ir_measures"] / row["grid_s"], 1) if row["grid_s"] else None
    result = {"workspace": str(args.workspace), "queries": len(features), "strategy": args.strategy,
              "grid": len(grid), "sample": len(sample), "repeats": args.repeats,
              "collect_s": round(collected, 2), "max_difference": difference, "ways": rows}
    print(f"{len(features)} queries, {args.strategy}, grid of {len(grid)}, {len(sample)} sampled, "
          f"{args.repeats} repeats; candidates read in {collected:.1f} s\n"
          "| way | points | p50 s/query | p95 s/query | whole grid, s | ratio |\n"
          "|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['way']} | {row['points']} | {row['p50_query_s']:.4f} | {row['p95_query_s']:.4f} | "
              f"{row['grid_s']:.1f} | {row['ratio']} |")
    print(f"largest difference between the two ways' figures: {difference:.1e}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
