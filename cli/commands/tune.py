"""`mem tune [--eval] [--reset] [--max-pairs N] [--epochs N] [--batch-size N] [--precision P]
[--holdout-queries Q]`:
fine-tune the rerank model on the workspace's own citations (api/tune.py, ``mem_retrieval.tune``)."""

from __future__ import annotations

from mem_retrieval.cli.outputs import integer, named

ORDER = 15


def register(subparsers, common) -> None:
    parser = subparsers.add_parser(
        "tune", parents=[common], help="fine-tune the embedding model on the workspace's citations",
        description="Contrastive fine-tuning of the rerank model on (step statement, cited step's "
                    "statement) pairs, with in-batch and BM25 hard negatives, on the CPU. The tuned "
                    "model is saved under .mem/models/ with its provenance in meta.json and every "
                    "text is re-embedded with it. --eval holds out whole runs, trains on the rest "
                    "and prints before/after metrics without installing anything; --reset goes "
                    "back to the configured model. Off by default: see the README for when it pays.")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--eval", action="store_true",
                      help="hold out a fold of runs, train on the others less the work written after the "
                           "held-out queries, compare (installs nothing)")
    mode.add_argument("--reset", action="store_true",
                      help="re-embed with the configured model and delete the tuned copy")
    parser.add_argument("--max-pairs", type=integer, metavar="N", help="train on at most N pairs (a seeded sample)")
    parser.add_argument("--epochs", type=integer, default=1, metavar="N", help="passes over the pairs (default 1)")
    parser.add_argument("--batch-size", type=integer, default=16, metavar="N",
                        help="pairs a step; the other pairs of a batch are its negatives (default 16)")
    parser.add_argument("--precision", default="auto", metavar="P",
                        help="the encoding's arithmetic while training, bf16 or fp32: bf16 runs 1.4-1.9x "
                             "as fast where the CPU has it natively; auto (the default) uses it there")
    parser.add_argument("--holdout-queries", type=named, metavar="FILE",
                        help="queries JSONL: the steps they name, and the work written after them, never "
                             "train the model (evaluate them after)")
    parser.add_argument("--progress", dest="progress", action="store_true", default=None,
                        help="show a progress bar even when stderr is not a terminal")
    parser.set_defaults(handler=run_tune)


def run_tune(args, ctx) -> int:
    from pathlib import Path

    from mem_retrieval.records.errors import BadInput
    from mem_retrieval.text.train import PRECISIONS, Training
    from mem_retrieval import tune

    for name in ("max_pairs", "epochs", "batch_size"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise BadInput(f"{value} is not a positive number", param=name)
    if args.precision not in PRECISIONS:
        raise BadInput(f"{args.precision!r} is not one of {', '.join(PRECISIONS)}", param="precision")
    trains = [flag for flag, given in (("--max-pairs", args.max_pairs is not None),
                                       ("--epochs", args.epochs != 1), ("--batch-size", args.batch_size != 16),
                                       ("--precision", args.precision != "auto"),
                                       ("--holdout-queries", args.holdout_queries is not None)) if given]
    if args.reset and trains:
        raise BadInput(f"--reset trains nothing: {', '.join(trains)} would be ignored")
    if args.eval and args.holdout_queries:
        raise BadInput("--eval holds out whole runs itself: --holdout-queries would be ignored")
    memory = ctx.memory()
    training = Training(epochs=args.epochs, batch_size=args.batch_size, precision=args.precision)
    if args.reset:
        report, was_tuned = tune.reset(memory, args.progress, ctx.note)
        ctx.emit(report.as_dict(), ("every text re-embedded with the configured model again: " if was_tuned
                                    else "the index was not tuned (its texts are the configured model's): ")
                 + report.summary())
        return 0
    if args.eval:
        result = tune.evaluate(memory, max_pairs=args.max_pairs, training=training, progress=args.progress)
        ctx.emit(result.as_dict(), result.text())
        return 0
    holdout = []
    if args.holdout_queries:
        from mem_retrieval.eval.judgments import read_queries

        queries = read_queries(Path(args.holdout_queries))
        holdout = [q.step for q in queries if q.step]
        if not queries:  # a file not written yet, or the wrong one: as `mem eval paging` refuses it
            raise BadInput(f"{args.holdout_queries}: holds no query, so nothing would be held out")
        if len(holdout) < len(queries):  # only a query's step says what to keep out of training
            ctx.note(f"mem: warning: {args.holdout_queries}: {len(queries) - len(holdout)} of "
                     f"{len(queries)} queries name no step: nothing of theirs is held out")
        ctx.warn_if_unknown_steps(memory, holdout, args.holdout_queries)
    report = tune.tune(memory, max_pairs=args.max_pairs, training=training, holdout_steps=holdout,
                       progress=args.progress, on_message=ctx.note)
    ctx.emit(report.as_dict(), report.text())
    return 0
