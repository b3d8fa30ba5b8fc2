"""The training benchmark: how fast ``mem tune`` trains, each setting against the first, in one run.

    python -m mem_retrieval.eval.bench_tune WORKSPACE [--pairs 256] [--batch-size 16]
                                            [--chunks 48,8] [--precisions fp32] [--repeats 2]
                                            [--out FILE.json]

The workspace's citation pairs (``retrieval.pairs``, read from its index: run ``mem index`` first),
a seeded sample of ``--pairs``, train the configured model for one epoch once per setting (each
chunk size with each precision) and repeat (the settings alternate, so a machine slowing down costs
each alike). The chunk is ``Training.chunk``, the texts encoded in one call (``text.train._encode``):
48, all the texts of a batch of 16 pairs, is one call padded to the batch's longest text; 8 is the
default. The precision is ``Training.precision`` (fp32, bf16, or auto: bf16 where the CPU has it).
The batches are the same for every setting. Per setting: pairs/s, p50 and p95 seconds a batch, and
the ratio of its pairs/s to the first setting's. A batch's time is that between two progress calls, so
the first batch of each run (which also loads the model) is left out. Nothing is written to the
workspace; the models go to a scratch folder."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from mem_retrieval.configs import load_config
from mem_retrieval.records.workspace import Workspace
from mem_retrieval.retrieval.pairs import mine_pairs
from mem_retrieval.retrieval.retriever import Retriever
from mem_retrieval.text.train import Training, train


def measure(model: str, pairs, training: Training, scratch: Path) -> tuple[list[float], list[int]]:
    """Seconds and pairs of every batch after the first, training ``pairs`` once."""
    stamps: list[tuple[float, int]] = []
    train(model, pairs, scratch / f"model-{time.time_ns()}", training,
          lambda n: stamps.append((time.perf_counter(), n)))
    return ([b[0] - a[0] for a, b in zip(stamps, stamps[1:])], [n for _, n in stamps[1:]])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mem_retrieval.eval.bench_tune",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("workspace", type=Path)
    parser.add_argument("--pairs", type=int, default=256, help="pairs sampled (default 256)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--chunks", default="48,8", help="chunk sizes, the first the baseline")
    parser.add_argument("--precisions", default="fp32",
                        help="precisions (fp32, bf16, auto), the first the baseline")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    settings = list(dict.fromkeys(  # auto is bf16 or fp32: a setting named twice runs once
        Training(batch_size=args.batch_size, chunk=int(c), precision=p).resolved()
        for c in args.chunks.split(",") for p in args.precisions.split(",")))
    workspace = Workspace.open(args.workspace)
    config = load_config(workspace.root)
    mined = mine_pairs(Retriever(workspace, config), max_pairs=args.pairs)
    if len(mined.pairs) < 2 * args.batch_size:
        print(f"{args.workspace}: {len(mined.pairs)} citation pairs, too few to time batches of "
              f"{args.batch_size}", file=sys.stderr)
        return 2
    seconds: dict[Training, list[float]] = {t: [] for t in settings}
    counts: dict[Training, list[int]] = {t: [] for t in settings}
    batches = {}
    with tempfile.TemporaryDirectory(prefix="bench-tune-") as scratch:
        for repeat in range(args.repeats):
            for training in settings:
                took, sizes = measure(config.model.package, mined.pairs, training, Path(scratch))
                seconds[training] += took
                counts[training] += sizes
                batches[training] = len(sizes) + 1
                print(f"repeat {repeat + 1}, chunk {training.chunk}, {training.precision}: "
                      f"{sum(sizes) / sum(took):.2f} pairs/s", file=sys.stderr)
    rows = []
    for training in settings:
        rate = sum(counts[training]) / sum(seconds[training])
        rows.append({"chunk": training.chunk, "precision": training.precision,
                     "pairs_per_second": round(rate, 3),
                     "p50_batch_s": round(float(np.percentile(seconds[training], 50)), 3),
                     "p95_batch_s": round(float(np.percentile(seconds[training], 95)), 3),
                     "batches": batches[training]})
    for row in rows:
        row["ratio"] = round(row["pairs_per_second"] / rows[0]["pairs_per_second"], 2)
    result = {"workspace": str(args.workspace), "model": config.model.package, "pairs": len(mined.pairs),
              "batch_size": args.batch_size, "repeats": args.repeats, "settings": rows}
    print(f"{len(mined.pairs)} pairs, batches of {args.batch_size}, {args.repeats} repeats\n"
          "| chunk | precision | pairs/s | p50 s/batch | p95 s/batch | batches | ratio |\n"
          "|---:|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['chunk']} | {row['precision']} | {row['pairs_per_second']:.2f} | "
              f"{row['p50_batch_s']:.2f} | {row['p95_batch_s']:.2f} | {row['batches']} | "
              f"{row['ratio']:.2f} |")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
