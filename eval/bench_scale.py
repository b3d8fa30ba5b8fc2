"""The scale benchmark: past one machine, measured where it can be and projected where it cannot.

    python -m mem_retrieval.eval.bench --scale [--scale-steps 2000] [--workers 1,2]
                                       [--uri loopback|s3://BUCKET/PREFIX] [--out out/bench]

One synthetic workspace (``eval/synthetic.py``), in one run:

- **engines**: ``mem index --full`` with the local engine, then with Ray (``--engine ray``) on a
  local Ray instance with 1 and with 2 workers (actors): seconds, texts embedded per second, per
  second per worker, and the actors' model seconds (``busy``: one text per second of one CPU,
  without start-up or waiting). Rows and vectors are checked equal to the local engine's.
- **stores** (with ``--uri``): the same full index, a 1% incremental reindex and warm searches with
  the index on local disk and at the URI (``loopback`` starts moto's S3 server on 127.0.0.1 for
  the run); the result lists are checked equal.
- **projection**: embedding is embarrassingly parallel and the commit is one step, so an index run
  of S steps on N workers takes ``fixed + serial·rows(S) + texts(S) / (N · rate)``: ``rate`` is one
  worker's model throughput (texts per busy second, measured), ``fixed`` Ray's start and the
  actors' model load (measured), ``serial`` the plan, commit and full-text index per row (a second
  ``--full`` run that reuses every vector, per row: linear, so an upper bound from a small
  workspace, whose fixed costs it counts per row). Written for N = 1 … 256 and for 1,000,000
  steps, with the CPU-hours and what they cost at the stated price.

Writes ``scale.json`` and ``scale.md`` to ``--out``."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from mem_retrieval.configs import load_config
from mem_retrieval.eval import synthetic
from mem_retrieval.records.workspace import Workspace
from mem_retrieval.retrieval.query import ArchiveQuery
from mem_retrieval.retrieval.retriever import Retriever

CPU_HOUR_USD = 0.05      # assumption: on-demand price of one vCPU-hour, compute-optimised class
STORAGE_GB_MONTH_USD = 0.023  # assumption: S3 Standard, per GB-month
TARGET_STEPS = 1_000_000
WORKER_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _say(message: str) -> None:
    import sys

    print(message, file=sys.stderr, flush=True)


def _copy(source: Path, target: Path, export: Path | None) -> Path:
    """A copy of the workspace files, its model cache seeded with ``export`` (no export timed)."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(".mem"))
    if export is not None:  # hard links: an export is never written in place
        shutil.copytree(export, target / ".mem" / "models" / export.name, copy_function=os.link)
    return target


def _export(root: Path, config) -> Path:
    """The ONNX export every timed run uses (made once, outside the timings)."""
    from mem_retrieval.indexers.build import _spec
    from mem_retrieval.indexers.location import Location

    scratch = root / ".export"
    spec = _spec(Location(str(scratch), scratch), config.model.package, config)
    return Path(spec.export) if spec.export else scratch


def _open(root: Path, config_file: Path | None):
    """The workspace at ``root`` and its configuration (with ``config_file`` over it)."""
    workspace = Workspace.open(root)
    return workspace, load_config(workspace.root, config_file)


def _retriever(root: Path, config_file: Path | None) -> Retriever:
    return Retriever(*_open(root, config_file))


def _index(root: Path, config_file: Path | None = None, full: bool = True, **options: Any) -> dict[str, Any]:
    from mem_retrieval.indexers.build import build_index

    started = time.perf_counter()
    report = build_index(*_open(root, config_file), full=full, progress=False, **options)
    return {"seconds": time.perf_counter() - started, "embedded": report.embedded,
            "records": report.total("added"), "engine": report.engine}


def _rows(root: Path, config_file: Path | None = None) -> dict[str, list]:
    searcher = _retriever(root, config_file).searcher
    return {name: sorted(searcher.table(name).to_arrow().to_pylist(), key=lambda r: r["gid"])
            for name in ("steps", "events")}


def engines(source: Path, scratch: Path, export: Path, workers: tuple[int, ...]) -> dict[str, Any]:
    """Full index with the local engine and with Ray at each worker count (one Ray instance)."""
    import ray

    _say("  local engine: full index, then again with every vector reused (the serial part) …")
    local = _index(_copy(source, scratch / "local", export))
    serial = _index(scratch / "local")  # --full, same model: nothing embedded, all else done
    expected = _rows(scratch / "local")
    started = time.perf_counter()
    ours = not ray.is_initialized()
    if ours:
        with warnings.catch_warnings():  # Ray forks its processes; they never touch lancedb
            warnings.filterwarnings("ignore", message="lancedb fork")
            ray.init(num_cpus=max(workers), include_dashboard=False, log_to_driver=False,
                     logging_level="ERROR")
    init_s = time.perf_counter() - started
    found: dict[str, Any] = {"local": local, "serial": serial, "ray_init_s": init_s, "ray": {}}
    try:
        for n in workers:
            _say(f"  Ray, {n} worker{'s' * (n > 1)}: full index …")
            root = _copy(source, scratch / f"ray-{n}", export)
            result = _index(root, engine="ray", workers=n)
            result["same_rows"] = _rows(root) == expected
            found["ray"][str(n)] = result
    finally:
        if ours:
            ray.shutdown()
    return found


def _warm_p50(root: Path, config_file: Path | None, texts: list[str], strategy: str | None) -> float:
    retriever = _retriever(root, config_file)
    retriever.archive_search(ArchiveQuery(texts[0], strategy=strategy))  # opens tables, the model
    times = []
    for text in texts[1:]:
        started = time.perf_counter()
        retriever.archive_search(ArchiveQuery(text, strategy=strategy))
        times.append((time.perf_counter() - started) * 1000)
    return float(np.percentile(times, 50))


def _cold_ms(root: Path, config_file: Path | None, text: str) -> float:
    """A new reader's first BM25 search (meta.json read, tables opened): what a CLI call pays."""
    started = time.perf_counter()
    _retriever(root, config_file).archive_search(ArchiveQuery(text, strategy="bm25"))
    return (time.perf_counter() - started) * 1000


def stores(source: Path, scratch: Path, export: Path, uri: str, queries: int, seed: int) -> dict[str, Any]:
    """Index, reindex and search with the index on local disk and at ``uri``, in this run."""
    server = None
    if uri == "loopback":
        from mem_retrieval.eval.loopback_s3 import LoopbackS3

        server = LoopbackS3(scratch / "moto.log")
        uri = f"s3://{server.bucket()}/bench"
    try:
        config_file = scratch / "store.toml"
        if server is not None:
            server.config(config_file, uri)
        else:
            config_file.write_text(f'[index]\nuri = "{uri}"\n')
        places = {"local disk": (scratch / "disk", None), uri: (scratch / "store", config_file)}
        load = synthetic.workload(source, queries + 1, seed)
        texts = list(load.texts[: queries + 1])
        found: dict[str, Any] = {}
        lists = []
        for label, (root, config) in places.items():
            _say(f"  index on {label}: full, 1% incremental, searches …")
            _copy(source, root, export)
            full = _index(root, config)
            changed, _ = synthetic.change_statements(root, 0.01, seed)
            incremental = _index(root, config, full=False)
            found[label] = {
                "full_s": full["seconds"], "records": full["records"], "embedded": full["embedded"],
                "incremental_s": incremental["seconds"], "incremental_changed": changed,
                "incremental_embedded": incremental["embedded"],
                "cold_bm25_ms": float(np.median([_cold_ms(root, config, t) for t in texts[:5]])),
                "warm_bm25_p50_ms": _warm_p50(root, config, texts, "bm25"),
                "warm_hybrid_p50_ms": _warm_p50(root, config, texts, None),
            }
            retriever = _retriever(root, config)
            lists.append([[h.id for h in retriever.archive_hits(ArchiveQuery(t))] for t in texts])
        found["same_results"] = lists[0] == lists[1]
        found["uri"] = uri
        return found
    finally:
        if server is not None:
            server.stop()


def _index_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in (root / ".mem" / "lance").rglob("*") if p.is_file())


def projection(steps: int, measured: dict[str, Any], index_bytes: int) -> dict[str, Any]:
    """Seconds for an index run of ``steps`` and of 1,000,000 steps on N workers, and its cost."""
    local = measured["local"]
    one = measured["ray"].get("1") or next(iter(measured["ray"].values()))
    texts, rows = local["embedded"], local["records"]
    rate = texts / one["engine"]["busy_seconds"]                      # one worker, model time only
    fixed = measured["ray_init_s"] + max(0.0, one["engine"]["embed_seconds"] - one["engine"]["busy_seconds"])
    serial = measured["serial"]["seconds"] / rows   # plan, commit, full-text index: per row
    scaling = {}
    for n, result in measured["ray"].items():
        wall_rate = texts / result["engine"]["embed_seconds"]
        scaling[n] = {"texts_per_s": wall_rate, "texts_per_s_per_worker": wall_rate / int(n),
                      "busy_texts_per_s_per_worker": texts / result["engine"]["busy_seconds"],
                      "index_s": result["seconds"]}
    local_rate = texts / local["engine"]["embed_seconds"]
    target_texts, target_rows = texts / steps * TARGET_STEPS, rows / steps * TARGET_STEPS

    def seconds(n: int, count_texts: float, count_rows: float) -> float:
        return fixed + serial * count_rows + count_texts / (n * rate)

    cpu_hours = target_texts / rate / 3600
    gigabytes = index_bytes / rows * target_rows / 1e9
    return {
        "measured_steps": steps, "texts": texts, "rows": rows,
        "texts_per_step": texts / steps, "rows_per_step": rows / steps,
        "local": {"texts_per_s": local_rate, "workers": local["engine"]["workers"],
                  "texts_per_s_per_core": local_rate / local["engine"]["workers"],
                  "index_s": local["seconds"]},
        "ray": scaling,
        "model": {"rate_per_worker": rate, "fixed_s": fixed, "serial_s_per_row": serial},
        "workers": {str(n): seconds(n, texts, rows) for n in WORKER_COUNTS},
        "million": {
            "steps": TARGET_STEPS, "texts": target_texts, "rows": target_rows,
            "seconds": {str(n): seconds(n, target_texts, target_rows) for n in WORKER_COUNTS},
            "serial_s": fixed + serial * target_rows,
            "cpu_hours": cpu_hours, "cpu_usd": cpu_hours * CPU_HOUR_USD,
            "index_gb": gigabytes, "storage_usd_month": gigabytes * STORAGE_GB_MONTH_USD,
        },
        "assumptions": [
            f"one worker = one CPU embedding at the measured rate ({rate:.1f} texts/s of model time, "
            "int8 ONNX all-MiniLM-L6-v2, one text per call); workers on other machines run as fast",
            f"texts and rows grow with steps as in the synthetic workspace ({texts / steps:.2f} texts "
            f"and {rows / steps:.2f} rows a step; ~90 word pieces a text)",
            f"fixed cost (Ray start, actors loading the model): {fixed:.1f} s, as measured here",
            f"plan, commit and full-text index stay on one machine, linear in rows: "
            f"{serial * 1000:.2f} ms a row, a --full run reusing every vector measured here on "
            "local disk (an upper bound: the fixed costs of a small workspace are counted per row; "
            "an object store adds request latency, see the stores figures)",
            f"${CPU_HOUR_USD} per vCPU-hour and ${STORAGE_GB_MONTH_USD} per GB-month of object "
            "storage (list prices of the kind, not quotes); the driver's own CPU and the network "
            "are not priced",
        ],
    }


def markdown(result: dict[str, Any]) -> str:
    p = result["projection"]
    lines = [f"# Scale: {p['measured_steps']:,} steps ({p['texts']:,} texts, {p['rows']:,} rows), "
             f"{result['machine']['cpus']} CPUs", "",
             "| engine | workers | index s | texts/s | texts/s per worker | model texts/s per worker | same rows |",
             "|---|---:|---:|---:|---:|---:|---|",
             f"| local | {p['local']['workers']} | {p['local']['index_s']:.1f} | {p['local']['texts_per_s']:.1f} "
             f"| {p['local']['texts_per_s_per_core']:.1f} (per core) | | |"]
    for n, s in p["ray"].items():
        same = result["engines"]["ray"][n]["same_rows"]
        lines.append(f"| ray | {n} | {s['index_s']:.1f} | {s['texts_per_s']:.1f} | "
                     f"{s['texts_per_s_per_worker']:.1f} | {s['busy_texts_per_s_per_worker']:.1f} | {same} |")
    lines += ["", f"Ray start: {result['engines']['ray_init_s']:.1f} s (not in the index seconds above).", ""]
    if result.get("stores"):
        stores = result["stores"]
        labels = [k for k in stores if k not in ("same_results", "uri")]
        lines += ["| index at | full s | 1% incremental s | cold BM25 search ms | warm BM25 p50 ms | warm hybrid p50 ms |",
                  "|---|---:|---:|---:|---:|---:|"]
        for label in labels:
            s = stores[label]
            lines.append(f"| {label} | {s['full_s']:.2f} | {s['incremental_s']:.2f} | {s['cold_bm25_ms']:.1f} "
                         f"| {s['warm_bm25_p50_ms']:.1f} | {s['warm_hybrid_p50_ms']:.1f} |")
        lines += ["", f"Same result lists on both: {stores['same_results']}.", ""]
    m = p["million"]
    lines += [f"## Projection: {m['steps']:,} steps ({m['texts']:,.0f} texts, {m['rows']:,.0f} rows)", "",
              "| workers | " + " | ".join(m["seconds"]) + " |",
              "|---|" + "---:|" * len(m["seconds"]),
              "| hours | " + " | ".join(f"{s / 3600:.2f}" for s in m["seconds"].values()) + " |", "",
              f"CPU time {m['cpu_hours']:.1f} CPU-hours (~${m['cpu_usd']:.2f}); the serial part "
              f"(start, plan, commit, full-text index) {m['serial_s'] / 60:.1f} min whatever N; index "
              f"{m['index_gb']:.1f} GB (~${m['storage_usd_month']:.2f} a month).", "", "Assumptions:", ""]
    lines += [f"- {a}" for a in p["assumptions"]]
    return "\n".join(lines) + "\n"


def run_scale(steps: int, workers: tuple[int, ...], uri: str | None, out: Path, queries: int = 20,
              seed: int = 0) -> dict[str, Any]:
    """Every scale figure for a synthetic workspace of ``steps`` steps; writes scale.json/.md."""
    out.mkdir(parents=True, exist_ok=True)
    config = load_config()
    with tempfile.TemporaryDirectory(prefix="mem-scale-") as folder:
        scratch = Path(folder)
        made = synthetic.generate(scratch / "workspace", steps, seed)
        _say(f"[scale] {steps:,} steps in {made.runs} runs; making the ONNX export once …")
        export = _export(scratch, config)
        measured = engines(made.root, scratch, export, workers)
        result: dict[str, Any] = {
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "machine": {"cpus": len(os.sched_getaffinity(0)), "load_average": os.getloadavg()[0]},
            "engines": measured,
            "stores": stores(made.root, scratch, export, uri, queries, seed) if uri else None,
        }
        result["projection"] = projection(steps, measured, _index_bytes(scratch / "local"))
    (out / "scale.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (out / "scale.md").write_text(markdown(result), encoding="utf-8")
    return result
