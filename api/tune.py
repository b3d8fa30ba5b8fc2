"""`mem tune`: fine-tune the rerank model on the workspace's own citations, and measure what it
buys.

Pairs (``retrieval.pairs``) are (a step's statement, the statement of each step it cites), with a
hard negative each: the best BM25 match of the statement (leave-one-out) that it does not cite; a
batch holds no text twice (``text.train.batches``). ``tune`` trains on every pair (less the steps of
``holdout`` queries and the work written after them, which leave-one-out hides: a query being
evaluated never trains the model that answers it), saves the model under
``.mem/models/tuned-<hash>/`` and re-embeds every text with it in one full index run: meta.json
records its provenance (base model, pairs, hash, file sizes), and an index never mixes two models.
``reset`` goes back to the configured model. ``evaluate`` holds out whole runs, trains on the others
(less the work written after the held-out queries' steps) into a scratch index, and compares the
held-out runs' per-step reuse queries before and after: nothing is installed."""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mem_retrieval.memory import Memory
from mem_retrieval.records.errors import BadInput, Refused, plural
from mem_retrieval.records.workspace import Workspace
from mem_retrieval.retrieval.pairs import Mined, mine_pairs
from mem_retrieval.retrieval.retriever import Retriever
from mem_retrieval.text.train import Training

MODELS = "models"
TUNE_LOCK = "tune.lock"  # beside the index lock: one tune (or reset) at a time


@dataclass(frozen=True)
class TuneReport:
    pairs: int
    steps: int                  # steps whose links were trained on
    seconds: float              # training time
    loss: float
    model: dict[str, Any]       # the provenance meta.json records (``path`` None: installed nowhere)
    index: Any = None           # the IndexReport of the re-embedding
    held_out: int = 0           # pairs kept out as leave-one-out hides them from held-out queries

    @property
    def pairs_per_second(self) -> float:
        """Pairs trained a second, each epoch's counted (``pairs`` counts each pair once)."""
        trained = self.pairs * self.model["training"]["epochs"]
        return trained / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "held_out_pairs": self.held_out, "steps": self.steps,
                "seconds": round(self.seconds, 2),
                "pairs_per_second": round(self.pairs_per_second, 2), "loss": round(self.loss, 4),
                "model": self.model, "index": self.index.as_dict() if self.index else None}

    def text(self) -> str:
        epochs = self.model["training"]["epochs"]
        held = (f" ({self.held_out:,} more kept out, as leave-one-out hides them from the held-out "
                "queries)" if self.held_out else "")
        lines = [f"tuned on {plural(self.pairs, 'pair')} from {plural(self.steps, 'step')}{held}"
                 + (f", {epochs} epochs," if epochs > 1 else "")
                 + f" in {self.seconds:.0f} s ({self.pairs_per_second:.1f} pairs/s); "
                   f"last batch loss {self.loss:.3f}",
                 f"model: {self.model['path'] or 'not installed'} (from {self.model['base']}, "
                 f"sha256 {self.model['sha256'][:12]})"]
        if self.index is not None:  # rows keep their content ("unchanged"); every vector is new
            lines.append(f"every text re-embedded with the tuned model: {self.index.summary()}")
        return "\n".join(lines)


def _fit(memory: Memory, mined: Mined, folder: Path, training: Training,
         progress: bool | None) -> tuple[dict[str, Any], float, float]:
    """Train on ``mined`` into ``folder/models/tuned-<hash>``; (provenance, seconds, loss)."""
    from mem_retrieval.indexers.store import file_sizes, model_digest, refusal
    from mem_retrieval.records.files import umask_modes
    from mem_retrieval.text.train import train

    if not mined.pairs:
        raise Refused("no step cites another step with a statement: nothing to tune on")
    training = training.resolved()     # the provenance names the precision it trained in
    scratch = folder / MODELS / f".training-{time.time_ns()}"
    bar = _bar(len(mined.pairs) * training.epochs, progress)
    started = [time.perf_counter()]  # from the first batch on, the model loaded

    def start() -> None:
        started[0] = time.perf_counter()

    try:
        loss = train(memory.config.model.package, mined.pairs, scratch, training,
                     bar.update if bar else None, on_start=start)
    except BaseException as error:  # stopped or failed: no half-saved model stays (a tune's lock cleans too)
        shutil.rmtree(scratch, ignore_errors=True)
        # a full disk or size limit while saving: one line (safetensors names the OS error in its own type)
        if isinstance(error, Exception) and (why := refusal(error)):
            raise BadInput(f"{scratch.parent}: cannot write the tuned model: {why}") from None
        raise
    finally:
        if bar:
            bar.close()
    seconds = time.perf_counter() - started[0]
    (scratch / "trained.json").write_text(json.dumps({"steps": sorted(mined.anchors)}) + "\n")
    umask_modes(scratch)
    sha = model_digest(scratch)
    final = folder / MODELS / f"tuned-{sha[:12]}"
    if final.is_dir() and model_digest(final) == sha:
        # the same training again (seeded: the same bytes): the copy in place, which the index's
        # meta.json names, stays (deleted first, a tune killed meanwhile left the index no model)
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        shutil.rmtree(final, ignore_errors=True)  # a damaged copy of it, which no index can use
        scratch.rename(final)
    provenance = {"path": f"{MODELS}/{final.name}", "base": memory.config.model_ref,
                  "pairs": len(mined.pairs), "steps": len(mined.anchors), "sha256": sha,
                  "sizes": file_sizes(final),
                  "training": asdict(training)}
    return provenance, seconds, loss


def _bar(total: int, progress: bool | None):
    import sys

    if not (sys.stderr.isatty() if progress is None else progress):
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc="tuning", unit="pair", file=sys.stderr, leave=False)


def tune(memory: Memory, *, max_pairs: int | None = None, training: Training = Training(),
         holdout_steps: Sequence[str] = (), progress: bool | None = None,
         on_message: Callable[[str], None] | None = None) -> TuneReport:
    """Train on the workspace's citations and re-embed every text with the tuned model."""
    with _one_tune(memory):
        return _tune(memory, max_pairs, training, holdout_steps, progress, on_message)


def _tune(memory: Memory, max_pairs: int | None, training: Training, holdout_steps: Sequence[str],
          progress: bool | None, on_message: Callable[[str], None] | None) -> TuneReport:
    from mem_retrieval.indexers.build import build_index

    memory.index(progress=False, on_message=on_message)  # the pairs' hard negatives read the index
    mined = mine_pairs(memory.retriever, exclude_keys=kept_out(memory.retriever, holdout_steps),
                       max_pairs=max_pairs, seed=training.seed)
    if not mined.pairs and holdout_steps and mine_pairs(memory.retriever, max_pairs=1).pairs:
        raise Refused(f"the {plural(len(set(holdout_steps)), 'held-out step')} and the work written after "
                      "them hold every citation: nothing left to tune on")
    folder = memory.retriever.location.folder  # the index folder, or a remote index's local cache
    provenance, seconds, loss = _fit(memory, mined, folder, training, progress)
    memory.retriever.reopen()
    try:
        report = build_index(memory.workspace, memory.config, full=True, progress=progress,
                             on_message=on_message, tuned=provenance)
    except BaseException:  # stopped or failed re-embedding: the index keeps its model, and only it
        from mem_retrieval.indexers.writer import drop_exports
        from mem_retrieval.indexers.store import export_of, read_meta, tuned_of

        meta = read_meta(memory.retriever.location) or {}
        installed = tuned_of(meta)
        _drop_unused(folder, installed["path"] if installed else None)
        drop_exports(folder, export_of(meta))
        raise
    _drop_unused(folder, provenance["path"])
    return TuneReport(len(mined.pairs), len(mined.anchors), seconds, loss, provenance, report, mined.held)


def reset(memory: Memory, progress: bool | None = None, on_message=None):
    """Re-embed every text with the configured model, and delete the tuned copies; the build's
    report, and whether a tuned model embedded the index before (False: nothing was undone)."""
    from mem_retrieval.indexers.build import build_index
    from mem_retrieval.indexers.store import IndexMismatch, read_meta, tuned_of

    with _one_tune(memory):
        memory.retriever.reopen()
        try:
            was_tuned = bool(tuned_of(read_meta(memory.retriever.location)))
        except IndexMismatch:  # an unreadable meta.json: the build rebuilds it
            was_tuned = True
        report = build_index(memory.workspace, memory.config, full=True, progress=progress,
                             on_message=on_message, tuned=None)
        _drop_unused(memory.retriever.location.folder, None)
    return report, was_tuned


@contextlib.contextmanager
def _one_tune(memory: Memory) -> Iterator[None]:
    """Hold the index's tune lock (beside its index lock) while a tune or reset runs: each deletes
    the tuned copies it does not install, another one's among them (the second of two tunes
    trained, then found its model gone). A second is refused at once; a tune's leftovers from a
    run that was killed (a half-saved model, a copy never installed) are deleted under it."""
    from filelock import FileLock, Timeout

    from mem_retrieval.indexers.store import IndexMismatch, read_meta, tuned_of

    location = memory.retriever.location
    lock = FileLock(str(location.lock_path.with_name(TUNE_LOCK)))
    try:
        location.lock_path.parent.mkdir(parents=True, exist_ok=True)
        lock.acquire(timeout=0)
    except Timeout:
        raise Refused("another `mem tune` (or `mem tune --reset`) is running on this index: "
                      "let it finish, then run this one") from None
    except OSError as error:
        raise BadInput(f"cannot write the index in {location.lock_path.parent}: "  # as `mem index` says it
                       f"{error.strerror or error}") from None
    try:
        try:
            installed = tuned_of(read_meta(location))
        except IndexMismatch:  # an unreadable meta.json: --reset rebuilds it; a tune says so later
            pass
        else:
            _drop_unused(location.folder, installed["path"] if installed else None)
        yield
    finally:
        lock.release()


def _drop_unused(index_dir: Path, keep: str | None) -> None:
    """Delete the tuned copies but ``keep`` (the one installed), and half-saved ones."""
    folder = index_dir / MODELS
    for old in [*folder.glob("tuned-*"), *folder.glob(".training-*")] if folder.is_dir() else ():
        if f"{MODELS}/{old.name}" != keep:
            shutil.rmtree(old, ignore_errors=True)


def trained_steps(location, meta: dict[str, Any] | None) -> set[str]:
    """The steps whose links trained the index's model (empty for the configured model);
    ``location``: the index's (``indexers.location.Location``) or its folder."""
    from mem_retrieval.indexers.store import at, tuned_of

    tuned = tuned_of(meta)
    if not tuned:
        return set()
    path = at(location).fetch(tuned["path"], lambda f: None if (f / "trained.json").is_file() else "missing") \
        / "trained.json"
    return set(json.loads(path.read_text())["steps"]) if path.is_file() else set()


def hidden_from(retriever: Retriever, step: str) -> set[int]:
    """The keys of the steps a leave-one-out query from ``step`` may not see: the step, and what
    was written after it (``CitationGraph.before``)."""
    from mem_retrieval.indexers.store import key
    from mem_retrieval.retrieval.query import Filters

    graph = retriever.searcher.graph()
    if graph is None:
        return {key(step)}
    visible = graph.visible(Filters(hide=graph.before(step)))
    return {key(step)} | set(graph.keys[~visible].tolist())


def kept_out(retriever: Retriever, steps: Iterable[str]) -> set[int]:
    """The keys of the steps no tuning for leave-one-out queries from ``steps`` may train on: each
    step and the work written after it (``hidden_from``)."""
    return set().union(*(hidden_from(retriever, step) for step in steps))


def held_out_pairs(retriever: Retriever, runs: set[str], steps: Sequence[str], *,
                   max_pairs: int | None = None, seed: int = 0) -> Mined:
    """The pairs ``evaluate`` trains on when it holds out ``runs``, whose queries come from
    ``steps``: none from those runs, nor from other runs' work written after any of the steps
    (it cites them, directly or through others), which their leave-one-out queries may not see."""
    return mine_pairs(retriever, exclude_runs=runs, exclude_keys=kept_out(retriever, steps),
                      max_pairs=max_pairs, seed=seed)


def trained_on_answers(retriever: Retriever, trained: set[str], steps: Sequence[str]) -> list[str]:
    """The ``steps`` (global ids, leave-one-out queries) whose answers a model tuned on the links
    of ``trained`` has seen: it trained on their own links, or on the links of a step written
    after them, which leave-one-out hides as well."""
    from mem_retrieval.indexers.store import key

    keys = {key(gid) for gid in trained}
    return [step for step in steps if hidden_from(retriever, step) & keys]


@dataclass(frozen=True)
class TuneEvaluation:
    held_out: list[str]         # runs
    queries: int
    before: dict[str, dict[str, float]]     # strategy -> metrics
    after: dict[str, dict[str, float]]
    report: TuneReport

    def as_dict(self) -> dict[str, Any]:
        return {"held_out": self.held_out, "queries": self.queries, "before": self.before,
                "after": self.after, "training": self.report.as_dict()}

    def text(self) -> str:
        metrics = list(next(iter(self.before.values())))
        lines = [f"held out {plural(len(self.held_out), 'run')} ({', '.join(self.held_out)}): {self.queries} "
                 "per-step reuse queries (leave-one-out), never trained on, nor the work written "
                 "after their steps",
                 self.report.text().splitlines()[0], "",
                 "  ".join(["strategy      ", "model ".ljust(7)] + [m.ljust(7) for m in metrics])]
        for name in self.before:
            for label, table in (("base", self.before), ("tuned", self.after)):
                lines.append("  ".join([name.ljust(14), label.ljust(7)]
                                       + [f"{table[name][m]:.3f}".ljust(7) for m in metrics]))
        return "\n".join(lines)


@contextlib.contextmanager
def base_retriever(memory: Memory, progress: bool | None = None) -> Iterator[Retriever]:
    """A retriever on the configured model's vectors: the index's own, unless a tuned copy
    embedded it (`mem tune` ran before): then a scratch index the configured model embeds."""
    from mem_retrieval.indexers.build import build_index
    from mem_retrieval.indexers.store import read_meta, tuned_of

    if not tuned_of(read_meta(memory.retriever.location)):
        yield memory.retriever
        return
    with tempfile.TemporaryDirectory(prefix="mem-base-") as scratch:
        base = Workspace(memory.workspace.root, Path(scratch))
        build_index(base, memory.config, full=True, progress=progress, tuned=None)
        yield Retriever(base, memory.config)


def evaluate(memory: Memory, *, folds: int = 5, max_pairs: int | None = None,
             training: Training = Training(), strategies: Sequence[str] = ("rerank", "rerank-graph"),
             progress: bool | None = None) -> TuneEvaluation:
    """Hold out one fold of whole runs; train on the others; compare the held-out runs' per-step
    reuse queries with the base model (``base_retriever``: not a tuned copy the index may hold)
    and with the tuned one (a scratch index; nothing installed)."""
    from mem_retrieval.eval.derived import derive
    from mem_retrieval.eval.folds import group_folds
    from mem_retrieval.eval.metrics import strategy_metrics
    from mem_retrieval.eval.ranker import make_ranker
    from mem_retrieval.indexers.build import build_index

    workspace = memory.workspace
    memory.index(progress=False)
    everything = derive(workspace, workspace.runs())
    runs = [q.run for q in everything.queries]
    if len(set(runs)) < 2:
        raise Refused("fewer than two runs have steps citing another run's library steps: "
                      "nothing to hold out")
    fold = group_folds(runs, min(folds, len(set(runs))))
    held = sorted({run for run, f in zip(runs, fold) if f == 0})
    derived = derive(workspace, held)

    def scores(retriever: Retriever) -> dict[str, dict[str, float]]:
        ranker = make_ranker(retriever, library=True)
        depth = memory.config.search.pool
        return {name: strategy_metrics(ranker, name, derived.queries, derived.qrels, depth)
                for name in strategies}

    mined = held_out_pairs(memory.retriever, set(held), [q.step for q in derived.queries if q.step],
                           max_pairs=max_pairs, seed=training.seed)
    if not mined.pairs and mine_pairs(memory.retriever, max_pairs=1).pairs:  # (said before scoring)
        runs = f"run{'s' if len(held) > 1 else ''} ({', '.join(held)})"
        raise Refused(f"the held-out {runs} and the work written after their queries hold every citation: "
                      "nothing left to tune on")
    with base_retriever(memory, progress) as base:
        before = scores(base)
    with tempfile.TemporaryDirectory(prefix="mem-tune-") as scratch:
        provenance, seconds, loss = _fit(memory, mined, Path(scratch), training, progress)
        trial = Workspace(workspace.root, Path(scratch))
        build_index(trial, memory.config, full=True, progress=progress, tuned=provenance)
        after = scores(Retriever(trial, memory.config))
    # the tuned copy lived in the scratch index, deleted with it: installed nowhere
    report = TuneReport(len(mined.pairs), len(mined.anchors), seconds, loss, {**provenance, "path": None},
                        held_out=mined.held)
    return TuneEvaluation(held, len(derived.queries), before, after, report)
