"""The speed benchmark (issue 6): synthetic workspaces measured against the targets, beside a naive baseline.

Workspaces of 1,000, 10,000 and 100,000 steps (``eval/synthetic.py``) are measured in one run.

    python -m mem_retrieval.eval.bench [--sizes 1000,10000,100000] [--quick] [--out out/bench] [--keep DIR]
                         [--skip-full-index-above N] [--queries N] [--cold-runs N] [--profile]
    python -m mem_retrieval.eval.bench --scale [--scale-steps 2000] [--workers 1,2] [--uri loopback|s3://…]

Per size: full index (`mem index --full` as a process: in-process seconds, records/s, texts/s, peak
memory); incremental reindex after rewriting 1% of the statements; warm in-process p50/p95 of id
lookups, BM25-only and the default hybrid search, `recall-search`, and of both archive searches as
of a time halfway through the workspace (``--until``: BM25 counts its statistics over that memory);
the naive baseline on the same queries; cold whole-process `mem archive-search` (also with
``--until``) / `mem archive-get`, and `mem archive-search` with `mem serve` running when this
checkout has it. Writes ``bench.json`` and ``bench.md`` to --out and prints the table. ``--quick``
is 1,000 and 10,000 steps with fewer queries (CI-safe time). ``--scale`` runs the scale benchmark
instead (``eval/bench_scale.py``: local engine against Ray with 1 and 2 workers, local disk against
an object store, and the projection to N workers and 1,000,000 steps)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mem_retrieval.configs import load_config
from mem_retrieval.eval import synthetic
from mem_retrieval.eval.bench_process import Server, mem_argv, run_child, serve_available
from mem_retrieval.eval.bench_report import FIGURES, markdown, target_results
from mem_retrieval.records.workspace import Workspace
from mem_retrieval.retrieval.query import ArchiveQuery, RecallQuery
from mem_retrieval.retrieval.search import forget_query_vectors

INDEX_RECORD = ".bench-index.json"   # the full-index figures of a kept workspace's index
CHANGING = ".bench-changing"         # present while 1% of a kept workspace's statements are changed
CHANGE_SHARE = 0.01


@dataclass(frozen=True)
class Options:
    sizes: tuple[int, ...]
    quick: bool
    out: Path
    keep: Path | None
    skip_full_above: int | None
    queries: int
    warmup: int
    cold_runs: int
    seed: int
    profile: bool
    workspace: Path | None = None
    embed_sample: int = 2000
    scale: bool = False
    scale_steps: int = 2000
    workers: tuple[int, ...] = (1, 2)
    uri: str | None = None


def percentiles(ms: list[float]) -> tuple[float | None, float | None]:
    if not ms:
        return None, None
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


def _timed_ms(call, items) -> list[float]:
    out = []
    for item in items:
        started = time.perf_counter()
        call(item)
        out.append((time.perf_counter() - started) * 1000)
    return out


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---- one size, phase by phase

def _workspace(size: int, options: Options, scratch: Path) -> tuple[synthetic.Synthetic, bool]:
    """The workspace of ``size`` steps (kept and reused, or generated) and its generation seconds."""
    root = (options.keep or scratch) / f"steps-{size}"
    made = synthetic.load(root, size, options.seed) if options.keep else None
    if made is not None and not (root / CHANGING).exists():
        return made, True
    return synthetic.generate(root, size, options.seed), False


def _full_index(made: synthetic.Synthetic, options: Options, reused: bool) -> dict[str, Any]:
    record = made.root / INDEX_RECORD
    skip = options.skip_full_above is not None and made.steps > options.skip_full_above
    if reused and skip and record.is_file() and (made.root / ".mem" / "meta.json").is_file():
        _say(f"  full index: reusing the index kept in {made.root} (built earlier)")
        return json.loads(record.read_text(encoding="utf-8")) | {"reused": True}
    shutil.rmtree(made.root / ".mem", ignore_errors=True)
    record.unlink(missing_ok=True)
    _say(f"  full index of {made.steps:,} steps …")
    child = run_child(mem_argv(made.root, "--json", "index", "--full"),
                      show_stderr=sys.stderr.isatty()).check("mem index --full")
    report = child.json()
    full = {"seconds": report["seconds"], "wall_seconds": child.seconds, "records": report["added"],
            "embedded": report["embedded"], "peak_mb": child.peak_mb,
            "searchable_s": report.get("searchable_seconds")}
    record.write_text(json.dumps(full) + "\n", encoding="utf-8")
    return full | {"reused": False}


def _incremental(made: synthetic.Synthetic, options: Options) -> dict[str, Any]:
    """Rewrite 1% of the statements, reindex, and (for a kept workspace) put them back."""
    marker = made.root / CHANGING
    marker.touch()
    changed, restore = synthetic.change_statements(made.root, CHANGE_SHARE, options.seed)
    _say(f"  incremental index after changing {changed:,} statements …")
    try:
        child = run_child(mem_argv(made.root, "--json", "index")).check("mem index")
    finally:
        if options.keep:
            restore()
            run_child(mem_argv(made.root, "index")).check("mem index (putting the 1% back)")
    marker.unlink()
    report = child.json()
    return {"changed": changed, "seconds": report["seconds"], "wall_seconds": child.seconds,
            "updated": report["updated"], "embedded": report["embedded"], "peak_mb": child.peak_mb}


def _profile(call, items, path: Path) -> None:
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for item in items:
        call(item)
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text).strip_dirs()
    text.write(f"{len(items)} calls\n\n== by cumulative time ==\n")
    stats.sort_stats("cumulative").print_stats(30)
    text.write("\n== by own time ==\n")
    stats.sort_stats("tottime").print_stats(20)
    path.write_text(text.getvalue(), encoding="utf-8")
    _say(f"  profile written to {path}")


def _warm(made: synthetic.Synthetic, load: synthetic.Workload, options: Options) -> dict[str, Any]:
    """Warm in-process p50/p95 of ours and of the naive baseline, on the same queries."""
    from mem_retrieval.eval.bench_naive import NaiveSearch

    retriever = _retriever(made.root)

    def search(text: str, **options: Any):
        return retriever.archive_search(ArchiveQuery(text, **options))

    n, w = options.queries, options.warmup
    warm_texts, texts = load.texts[:w], load.texts[w:w + n]
    setting_texts = list(zip(load.texts[w + n:w + 2 * n], load.settings[w:w + n]))
    ids, gids = load.ids[w:w + n], load.gids[w:w + n]
    _say(f"  warm searches ({len(texts)} queries each, after {len(warm_texts)} warm-up) …")
    for text in warm_texts:  # imports, the model, table handles, caches
        search(text)
        search(text, strategy="bm25")
        retriever.recall_search(RecallQuery(text))
    for ref in load.ids[:w] + load.gids[:w]:
        search(ref)
    started = time.perf_counter()
    retriever.searcher.warm()  # begun by the warm-up's third search: the steps table in memory
    resident = retriever.searcher.resident()
    figures: dict[str, Any] = {"resident_wait_s": time.perf_counter() - started,
                               "resident_mb": resident.nbytes / 2**20 if resident else None}
    timings = {
        "id": _timed_ms(search, ids),
        "gid": _timed_ms(search, gids),
        "bm25": _timed_ms(lambda q: search(q, strategy="bm25"), texts),
        "hybrid": _timed_ms(search, texts),
        "hybrid_setting": _timed_ms(lambda qs: search(qs[0], setting=qs[1]), setting_texts),
        "recall": _timed_ms(lambda q: retriever.recall_search(RecallQuery(q)), texts),  # (the events'
        # own table, and the look at every run's log a search makes: it grows with the runs)
    }
    # memory as it stood halfway: BM25 counts its statistics over it (retrieval/bm25.py)
    as_of = texts if load.until else []
    timings["bm25_asof"] = _timed_ms(lambda q: search(q, strategy="bm25", until=load.until), as_of)
    forget_query_vectors()  # the same texts as "hybrid": embedded anew, not read from its cache
    timings["hybrid_asof"] = _timed_ms(lambda q: search(q, until=load.until), as_of)
    naive = NaiveSearch(retriever)
    for text in warm_texts:
        naive.search(text)
    naive_lists: dict[str, list[str]] = {}
    timings["naive_bm25"] = _timed_ms(naive.bm25_top, texts)
    timings["naive"] = _timed_ms(lambda q: naive_lists.__setitem__(q, naive.search(q)), texts)
    for name, values in timings.items():
        figures[f"{name}_p50_ms"], figures[f"{name}_p95_ms"] = percentiles(values)
    figures["naive_build_s"] = naive.build_seconds
    overlaps = []
    for text in texts:
        ours = [c.gid for c in retriever.ranked(ArchiveQuery(text, strategy="rerank"))[:10]]  # alike
        theirs = naive_lists[text][:10]
        if ours or theirs:
            overlaps.append(len(set(ours) & set(theirs)) / max(len(ours), len(theirs)))
    figures["top10_overlap"] = float(np.mean(overlaps)) if overlaps else None
    if options.profile:
        spare = load.texts[w + 2 * n:w + 3 * n] or texts
        _profile(search, list(spare), options.out / f"profile-{made.steps}-hybrid.txt")
        _profile(search, list(ids), options.out / f"profile-{made.steps}-id.txt")
    return figures


def _embedding(made: synthetic.Synthetic, options: Options) -> dict[str, Any]:
    """Texts/s of the index's embedding path against plain ``SentenceTransformer.encode`` (batch
    16, the texts as given), on the same sample of the workspace's texts, in this process."""
    import random

    from mem_retrieval.indexers.rows import build_rows
    from mem_retrieval.indexers.store import model_spec, read_meta
    from mem_retrieval.text.embed import embed, load_model

    workspace = Workspace.open(made.root)
    config = load_config(workspace.root)
    rows = build_rows(workspace, config, workspace.runs()[:50])
    texts = sorted(rows.embed_text.values())
    texts = random.Random(options.seed).sample(texts, min(options.embed_sample, len(texts)))
    spec = model_spec(workspace.index_dir, read_meta(workspace.index_dir), config)
    _say(f"  embedding {len(texts):,} texts: the index's path, then plain sentence-transformers …")
    embed(texts[:8], spec)
    started = time.perf_counter()
    embed(texts, spec)
    ours = len(texts) / (time.perf_counter() - started)
    model = load_model(config.model.package)
    model.encode(texts[:8], batch_size=16)
    started = time.perf_counter()
    model.encode(texts, batch_size=16, normalize_embeddings=True, show_progress_bar=False)
    plain = len(texts) / (time.perf_counter() - started)
    return {"embed_texts_per_s": ours, "plain_st_texts_per_s": plain, "embed_vs_plain": ours / plain,
            **_int8_files(spec, texts)}


def _signed_exact() -> bool:
    """Whether this CPU multiplies int8 weights exactly (``text.onnx.signed_products_exact``)."""
    from mem_retrieval.text.onnx import signed_products_exact, write_probe

    with tempfile.TemporaryDirectory() as folder:
        write_probe(Path(folder) / "probe.onnx")
        return signed_products_exact(Path(folder) / "probe.onnx")


def _int8_files(spec, texts: list[str]) -> dict[str, float | None]:
    """Texts/s of each int8 file of the export on the same sample and workers as the index's path:
    the uint8 model (exact on every CPU) and its signed copy (exact only where
    ``signed_products_exact``: the index's path runs it there); None without int8 weights."""
    from mem_retrieval.text.onnx import SIGNED, OnnxEmbedder

    names = ("int8_uint8_texts_per_s", "int8_signed_texts_per_s", "int8_signed_vs_uint8")
    if not (spec.export and spec.quantized and (Path(spec.export) / SIGNED).is_file()):
        return dict.fromkeys(names)
    rates = []
    for signed in (False, True):
        embedder = OnnxEmbedder(Path(spec.export), True, workers=os.cpu_count() or 1, signed=signed)
        embedder.embed(texts[:8])
        started = time.perf_counter()
        embedder.embed(texts)
        rates.append(len(texts) / (time.perf_counter() - started))
    return dict(zip(names, (*rates, rates[1] / rates[0])))


def _cold(made: synthetic.Synthetic, load: synthetic.Workload, options: Options,
          serve: bool) -> tuple[dict[str, Any], list[str]]:
    """Whole-process `mem archive-search` / `mem archive-get`, without and with `mem serve`."""
    runs, w, n = options.cold_runs, options.warmup, options.queries
    notes: list[str] = []
    _say(f"  cold processes ({runs} runs each) …")
    search = [run_child(mem_argv(made.root, "archive-search", text)) for text in load.texts[w:w + runs]]
    as_of = [run_child(mem_argv(made.root, "archive-search", text, "--until", load.until))
             for text in load.texts[w:w + runs] if load.until]
    get = [run_child(mem_argv(made.root, "archive-get", gid)).check("mem archive-get")
           for gid in load.gids[:runs]]
    for child in search + as_of:
        if child.returncode not in (0, 1):  # 1: no hit, a valid answer
            child.check("mem archive-search")
    figures: dict[str, Any] = {  # no server: MEM_NO_SERVER=1 in these children
        "cold_search_p50_s": float(np.median([c.seconds for c in search])),
        "cold_search_asof_p50_s": float(np.median([c.seconds for c in as_of])) if as_of else None,
        "cold_get_p50_s": float(np.median([c.seconds for c in get])),
        "search_peak_mb": max(c.peak_mb for c in search),
        "get_peak_mb": max(c.peak_mb for c in get),
        "cold_search_server_p50_s": None, "server_start_s": None, "server_peak_mb": None,
    }
    if not serve:
        notes.append("`mem serve` is not in this checkout: no with-server figures")
        return figures, notes
    texts = load.texts[w + n:w + n + runs] or load.texts[w:w + runs]
    try:
        with Server(made.root) as server:
            run_child(mem_argv(made.root, "archive-search", load.texts[0]), server=True)  # warm-up
            served = [run_child(mem_argv(made.root, "archive-search", text), server=True)
                      for text in texts]
        figures["cold_search_server_p50_s"] = float(np.median([c.seconds for c in served]))
        figures["server_start_s"] = server.start_seconds
        figures["server_peak_mb"] = server.peak_mb
        if server.requests is not None and server.requests < len(served) + 1:
            notes.append(f"`mem serve` answered {server.requests} of {len(served) + 1} calls: "
                         "the rest ran in-process")
    except RuntimeError as err:
        notes.append(f"with-server figures not measured: {err}")
    return figures, notes


def bench_size(size: int, options: Options, serve: bool, scratch: Path) -> dict[str, Any]:
    """Every figure for one workspace size."""
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    made, reused = _workspace(size, options, scratch)
    generate_s = None if reused else time.perf_counter() - started
    _say(f"[{size:,} steps] {made.runs} runs, {made.events:,} events, {made.library:,} library "
         f"entries ({'kept workspace' if reused else f'generated in {generate_s:.1f} s'})")
    full = _full_index(made, options, reused)
    incremental = _incremental(made, options)
    load = synthetic.workload(made.root, options.queries + options.warmup, options.seed)
    figures: dict[str, Any] = {
        "generate_s": generate_s,
        "full_index_s": full["seconds"],
        "full_index_records_per_s": full["records"] / full["seconds"],
        "full_index_texts_per_s": full["embedded"] / full["seconds"],
        "full_index_searchable_s": full.get("searchable_s"),
        "index_peak_mb": full["peak_mb"],
        "incremental_changed": incremental["changed"],
        "incremental_embedded": incremental["embedded"],
        "incremental_s": incremental["seconds"],
        "incremental_ratio": incremental["seconds"] / full["seconds"],
    }
    figures |= _warm(made, load, options)
    figures |= _embedding(made, options)
    cold, notes = _cold(made, load, options, serve)
    figures |= cold
    figures["hybrid_vs_naive"] = _ratio(figures["hybrid_p50_ms"], figures["naive_p50_ms"])
    figures["bm25_vs_naive"] = _ratio(figures["bm25_p50_ms"], figures["naive_bm25_p50_ms"])
    figures["hybrid_speedup"] = _ratio(figures["naive_p50_ms"], figures["hybrid_p50_ms"])
    if full.get("reused"):
        notes.append("full-index figures from the kept index's first build (--skip-full-index-above)")
    return {"steps": size, "runs": made.runs, "events": made.events, "library": made.library,
            "workspace": str(made.root) if options.keep else None, "reused_index": bool(full.get("reused")),
            "load_average": [load_before, os.getloadavg()[0]],
            "seconds": time.perf_counter() - started, "figures": figures, "notes": notes}


def bench_workspace(root: Path, options: Options, scratch: Path) -> dict[str, Any]:
    """Index time and warm figures on an existing workspace (e.g. examples/workspace), copied
    without its index: what a user of that workspace would see."""
    import shutil

    from mem_retrieval.indexers.build import build_index

    copy = scratch / "workspace"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns(".mem"))
    started = time.perf_counter()
    workspace = Workspace.open(copy)
    report = build_index(workspace, load_config(copy), full=True, progress=False)
    index_s = time.perf_counter() - started
    steps = sum(len(workspace.tree(run).steps) for run in workspace.runs())
    made = synthetic.Synthetic(root=copy, steps=steps, runs=len(workspace.runs()), events=0,
                               library=len(workspace.library()), seed=options.seed)
    load = synthetic.workload(copy, options.queries + options.warmup, options.seed)
    figures = {"full_index_s": index_s, "embedded": report.embedded,
               "records": report.total("added")} | _warm(made, load, options)
    return {"workspace": str(root), "steps": steps, "figures": figures}


WORKSPACE_FIGURES = ("id", "gid", "bm25", "hybrid", "hybrid_setting", "recall", "bm25_asof", "hybrid_asof",
                     "naive")


def workspace_markdown(result: dict[str, Any]) -> str:
    """``bench_workspace``'s figures as the lines it prints and writes to ``workspace.md``."""
    figures = result["figures"]
    lines = [f"{result['workspace']}: {result['steps']} steps, {figures['records']} records, "
             f"{figures['embedded']} texts embedded; full index {figures['full_index_s']:.1f} s"]
    for name in WORKSPACE_FIGURES:
        if figures[f"{name}_p50_ms"] is None:  # (no event to search as of)
            lines.append(f"  warm {name:<15} not measured: the workspace has no event")
        else:
            lines.append(f"  warm {name:<15} p50 {figures[f'{name}_p50_ms']:8.2f} ms   "
                         f"p95 {figures[f'{name}_p95_ms']:8.2f} ms")
    return "\n".join(lines) + "\n"


def _retriever(root: Path):
    """The read side of the workspace at ``root``, with its configuration."""
    from mem_retrieval.retrieval.retriever import Retriever

    workspace = Workspace.open(root)
    return Retriever(workspace, load_config(workspace.root))


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


# ---- the run

def run(options: Options) -> dict[str, Any]:
    """Measure every size; write bench.json and bench.md to ``options.out`` after each size (a long
    run stopped half-way keeps what it measured); return the results."""
    options.out.mkdir(parents=True, exist_ok=True)
    serve = serve_available()
    _say(f"mem serve: {'found' if serve else 'not in this checkout'}")
    config = load_config()
    results: dict[str, Any] = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"cpus": len(os.sched_getaffinity(0)), "platform": platform.platform(),
                    "python": platform.python_version(), "int8_signed_exact": _signed_exact()},
        "options": {"quick": options.quick, "queries": options.queries, "warmup": options.warmup,
                    "cold_runs": options.cold_runs, "seed": options.seed,
                    "change_share": CHANGE_SHARE},
        "config": {"pool": config.search.pool, "rerank_k": config.search.rerank_k, "bm25_engine": config.bm25.engine,
                   "model": config.model.name},
        "serve": serve,
        "figures": {name: {"label": label, "unit": unit} for name, (label, unit) in FIGURES.items()},
        "sizes": [],
        "targets": [],
    }
    with tempfile.TemporaryDirectory(prefix="mem-bench-") as scratch:
        for size in options.sizes:
            results["sizes"].append(bench_size(size, options, serve, Path(scratch)))
            if not options.keep:
                shutil.rmtree(Path(scratch) / f"steps-{size}", ignore_errors=True)
            results["targets"] = target_results(results["sizes"])
            (options.out / "bench.json").write_text(json.dumps(results, indent=1) + "\n",
                                                    encoding="utf-8")
            (options.out / "bench.md").write_text(markdown(results), encoding="utf-8")
    return results


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part.replace("_", "")) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sizes {text!r}: give step counts like 1000,10000") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"--sizes {text!r}: give positive step counts")
    return sizes


def parse_options(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m mem_retrieval.eval.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=_sizes, help="step counts (default 1000,10000,100000)")
    parser.add_argument("--quick", action="store_true",
                        help="1,000 and 10,000 steps, 30 queries, 3 cold runs (CI-safe time)")
    parser.add_argument("--out", type=Path, default=Path("out/bench"), help="where bench.json/.md go")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="keep the workspaces and indexes in DIR/steps-N and reuse them next time")
    parser.add_argument("--skip-full-index-above", type=int, metavar="N", dest="skip_full_above",
                        help="with --keep: for sizes above N, reuse the kept index and its recorded "
                             "full-index figures instead of rebuilding it")
    parser.add_argument("--queries", type=int, help="timed warm queries of each kind (default 100; "
                                                    "--quick 30)")
    parser.add_argument("--cold-runs", type=int, help="processes per cold figure (default 5; --quick 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true",
                        help="write cProfile listings of the warm hybrid and id paths to --out")
    parser.add_argument("--embed-sample", type=int, default=2000, metavar="N",
                        help="texts embedded by both paths for the embedding-rate comparison (default 2000)")
    parser.add_argument("--workspace", type=Path, metavar="DIR",
                        help="instead of synthetic sizes: index time and warm figures of this "
                             "workspace (copied; its own .mem is left alone)")
    parser.add_argument("--scale", action="store_true",
                        help="the scale benchmark: local engine against Ray workers, local disk "
                             "against --uri, and the projection to N workers and 1,000,000 steps")
    parser.add_argument("--scale-steps", type=int, default=2000, metavar="N",
                        help="--scale: steps of the synthetic workspace (default 2000)")
    parser.add_argument("--workers", type=_sizes, default=(1, 2), metavar="1,2",
                        help="--scale: Ray worker counts to measure (default 1,2)")
    parser.add_argument("--uri", metavar="URI",
                        help="--scale: also index and search at this index.uri (s3://BUCKET/PREFIX, "
                             "keys from the AWS_* variables), or 'loopback': moto's S3 server on "
                             "127.0.0.1, started for the run")
    args = parser.parse_args(argv)
    if (args.uri or args.workers != (1, 2) or args.scale_steps != 2000) and not args.scale:
        parser.error("--scale-steps, --workers and --uri belong to --scale")
    if args.scale_steps < 10:
        parser.error("--scale-steps must be at least 10")
    if args.scale:  # what the scale benchmark runs on, said before minutes of work (a traceback after)
        _needs(parser, ("ray",), "--scale needs Ray", "distributed")
        if args.uri == "loopback":
            _needs(parser, ("moto", "boto3", "flask", "flask_cors"), "--uri loopback needs moto's S3 server",
                   "test", ("moto", "boto3"))  # (flask and flask_cors: what moto[server] brings)
    if args.skip_full_above is not None and args.keep is None:
        parser.error("--skip-full-index-above needs --keep DIR (an index to reuse)")
    for name in ("queries", "cold_runs"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    queries = args.queries or (30 if args.quick else 100)
    return Options(sizes=args.sizes or ((1000, 10000) if args.quick else (1000, 10000, 100000)),
                   quick=args.quick, out=args.out, keep=args.keep.resolve() if args.keep else None,
                   skip_full_above=args.skip_full_above, queries=queries,
                   warmup=max(1, min(10, queries // 5)),
                   cold_runs=args.cold_runs or (3 if args.quick else 5), seed=args.seed,
                   profile=args.profile, workspace=args.workspace, embed_sample=args.embed_sample,
                   scale=args.scale, scale_steps=args.scale_steps, workers=args.workers, uri=args.uri)


def _needs(parser, modules: tuple[str, ...], what: str, extra: str, packages: tuple[str, ...] = ()) -> None:
    """One line, exit 2, unless each of ``modules`` is installed (found, not imported), naming
    ``packages`` of ``extra`` (default: ``modules``) to install."""
    from mem_retrieval.records.errors import install_hint, installed

    if not all(map(installed, modules)):
        parser.exit(2, f"{parser.prog}: {what}: {install_hint(extra, packages or modules)}\n")


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    if options.scale:
        from mem_retrieval.eval.bench_scale import markdown as scale_markdown, run_scale

        result = run_scale(options.scale_steps, options.workers, options.uri, options.out,
                           queries=min(options.queries, 30), seed=options.seed)
        print(scale_markdown(result))
        return 0
    if options.workspace is not None:
        import tempfile

        options.out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as scratch:
            result = bench_workspace(options.workspace.resolve(), options, Path(scratch))
        table = workspace_markdown(result)
        (options.out / "workspace.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        (options.out / "workspace.md").write_text(table, encoding="utf-8")
        print(table, end="")
        return 0
    results = run(options)
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
