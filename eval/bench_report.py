"""What the speed benchmark reports: its figures, their targets, and the Markdown table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# name -> (label, unit); every size carries every name (None when it could not be measured)
FIGURES: dict[str, tuple[str, str]] = {
    "generate_s": ("generate the workspace", "s"),
    "full_index_s": ("full index (in-process)", "s"),
    "full_index_records_per_s": ("full index rate", "records/s"),
    "full_index_texts_per_s": ("full index embedding rate", "texts/s"),
    "full_index_searchable_s": ("full index: searchable (BM25) after", "s"),
    "embed_texts_per_s": ("embedding rate, the index's path (sample)", "texts/s"),
    "plain_st_texts_per_s": ("embedding rate, plain SentenceTransformer.encode (same sample)", "texts/s"),
    "embed_vs_plain": ("index path / plain sentence-transformers", "×"),
    "int8_uint8_texts_per_s": ("embedding rate, int8 weights as uint8 (exact on every CPU; sample)",
                               "texts/s"),
    "int8_signed_texts_per_s": ("embedding rate, their signed copy (exact with VNNI or AMX; same sample)",
                                "texts/s"),
    "int8_signed_vs_uint8": ("signed copy / uint8 (the index's path runs the signed copy where exact)", "×"),
    "index_peak_mb": ("peak memory, `mem index --full`", "MB"),
    "incremental_changed": ("statements changed (1%)", "steps"),
    "incremental_embedded": ("texts re-embedded", "texts"),
    "incremental_s": ("incremental index", "s"),
    "incremental_ratio": ("incremental / full", "ratio"),
    "resident_wait_s": ("steps table into memory: left to wait after the warm-up", "s"),
    "resident_mb": ("steps table held in memory (warm searcher)", "MB"),
    "id_p50_ms": ("warm id lookup `A5-7` p50", "ms"),
    "id_p95_ms": ("warm id lookup `A5-7` p95", "ms"),
    "gid_p50_ms": ("warm id lookup `run/A5-7` p50", "ms"),
    "gid_p95_ms": ("warm id lookup `run/A5-7` p95", "ms"),
    "bm25_p50_ms": ("warm BM25-only p50", "ms"),
    "bm25_p95_ms": ("warm BM25-only p95", "ms"),
    "hybrid_p50_ms": ("warm hybrid (default) p50", "ms"),
    "hybrid_p95_ms": ("warm hybrid (default) p95", "ms"),
    "hybrid_setting_p50_ms": ("warm hybrid with --setting p50", "ms"),
    "hybrid_setting_p95_ms": ("warm hybrid with --setting p95", "ms"),
    "recall_p50_ms": ("warm `recall-search` p50", "ms"),
    "recall_p95_ms": ("warm `recall-search` p95", "ms"),
    "bm25_asof_p50_ms": ("warm BM25-only with --until (half the workspace) p50", "ms"),
    "bm25_asof_p95_ms": ("warm BM25-only with --until (half the workspace) p95", "ms"),
    "hybrid_asof_p50_ms": ("warm hybrid with --until (half the workspace) p50", "ms"),
    "hybrid_asof_p95_ms": ("warm hybrid with --until (half the workspace) p95", "ms"),
    "naive_build_s": ("naive: build BM25Okapi + load vectors", "s"),
    "naive_bm25_p50_ms": ("naive BM25-only p50", "ms"),
    "naive_bm25_p95_ms": ("naive BM25-only p95", "ms"),
    "naive_p50_ms": ("naive hybrid p50", "ms"),
    "naive_p95_ms": ("naive hybrid p95", "ms"),
    "bm25_vs_naive": ("ours / naive, BM25-only p50", "ratio"),
    "hybrid_vs_naive": ("ours / naive, hybrid p50", "ratio"),
    "hybrid_speedup": ("naive / ours, hybrid p50 (speed-up)", "×"),
    "top10_overlap": ("top-10 overlap, rerank vs naive", "share"),
    "cold_search_p50_s": ("cold `mem archive-search`, no server, p50", "s"),
    "cold_search_asof_p50_s": ("cold `mem archive-search --until` (half the workspace), no server, p50", "s"),
    "cold_get_p50_s": ("cold `mem archive-get`, no server, p50", "s"),
    "search_peak_mb": ("peak memory, `mem archive-search`", "MB"),
    "get_peak_mb": ("peak memory, `mem archive-get`", "MB"),
    "cold_search_server_p50_s": ("cold `mem archive-search` with `mem serve`, p50", "s"),
    "server_start_s": ("`mem serve` start until ready", "s"),
    "server_peak_mb": ("peak memory, `mem serve`", "MB"),
}


@dataclass(frozen=True)
class Target:
    """``figure op value``, set for ``at_steps`` steps (None: at every size)."""

    figure: str
    op: str  # "<=" or ">="
    value: float
    at_steps: int | None
    label: str

    def met(self, measured: float | None) -> bool | None:
        if measured is None:
            return None
        return measured <= self.value if self.op == "<=" else measured >= self.value

    def applies(self, steps: int) -> bool:
        return self.at_steps is None or steps >= self.at_steps


TARGETS = (
    Target("hybrid_p50_ms", "<=", 12, 100_000, "warm hybrid p50 ≤ 12 ms"),
    Target("id_p50_ms", "<=", 3, 100_000, "warm id lookup (`A5-7`) p50 ≤ 3 ms"),
    Target("gid_p50_ms", "<=", 3, 100_000, "warm id lookup (`run/A5-7`) p50 ≤ 3 ms"),
    Target("cold_search_p50_s", "<=", 1.5, None, "cold archive-search without server p50 ≤ 1.5 s"),
    Target("search_peak_mb", "<=", 300, None, "peak memory of a cold search ≤ 300 MB"),
    Target("cold_search_server_p50_s", "<=", 0.3, None, "cold archive-search with server p50 ≤ 0.3 s"),
    Target("cold_get_p50_s", "<=", 1.5, None, "cold archive-get without server p50 ≤ 1.5 s"),
    Target("embed_vs_plain", ">=", 2, None, "embedding ≥ 2× plain sentence-transformers"),
    Target("full_index_texts_per_s", ">=", 150, 100_000, "full index embedding ≥ 150 texts/s"),
    Target("full_index_searchable_s", "<=", 90, 100_000, "searchable (BM25) within 90 s"),
    Target("incremental_ratio", "<=", 0.10, 100_000, "incremental (1%) ≤ 10% of full index"),
    Target("hybrid_speedup", ">=", 5, 100_000, "hybrid ≥ 5× faster than naive"),
)


def target_results(sizes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each target with its measured value and verdict at every size."""
    out = []
    for target in TARGETS:
        results = [{"steps": size["steps"], "value": size["figures"].get(target.figure),
                    "met": target.met(size["figures"].get(target.figure)),
                    "applies": target.applies(size["steps"])} for size in sizes]
        out.append({"figure": target.figure, "label": target.label, "op": target.op,
                    "target": target.value, "at_steps": target.at_steps, "results": results})
    return out


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    if unit in ("steps", "texts"):
        return f"{value:,.0f}"
    if unit == "ratio" or unit == "share":
        return f"{value:.3f}"
    if unit in ("records/s", "texts/s", "MB"):
        return f"{value:,.0f}"
    return f"{value:,.3f}" if value < 10 else f"{value:,.1f}"


def _verdict(target: dict[str, Any]) -> str:
    """The verdict at the largest size measured; below the target's size it is only indicative."""
    last = target["results"][-1] if target["results"] else None
    if last is None or last["met"] is None:
        return "not measured"
    word = "met" if last["met"] else "**not met**"
    if not last["applies"]:
        return f"{word} at {last['steps']:,} (target is for {target['at_steps']:,})"
    return word


def _signed(machine: dict[str, Any]) -> str:
    """Which int8 file the index's path ran (results from before the signed copy do not say)."""
    exact = machine.get("int8_signed_exact")
    if exact is None:
        return ""
    return ("; this CPU multiplies int8 weights exactly: the index's path ran their signed copy" if exact
            else "; this CPU does not multiply int8 weights exactly: the index's path ran the uint8 model")


def markdown(results: dict[str, Any]) -> str:
    """The figures as one table (a column per size), then the targets."""
    sizes = results["sizes"]
    machine = results["machine"]
    lines = [f"## Speed benchmark · {results['created']}", "",
             f"{machine['cpus']} CPUs, Python {machine['python']}; {results['options']['queries']} "
             f"warm queries a figure, {results['options']['cold_runs']} cold processes; load average "
             + ", ".join(f"{s['load_average'][0]:.1f}" for s in sizes) + _signed(machine) + ".", "",
             "| figure | unit | " + " | ".join(f"{s['steps']:,} steps" for s in sizes) + " |",
             "|---|---|" + "---:|" * len(sizes)]
    for name, (label, unit) in FIGURES.items():
        cells = [_value(s["figures"].get(name), unit) for s in sizes]
        lines.append(f"| {label} | {unit} | " + " | ".join(cells) + " |")
    lines += ["", "| target | " + " | ".join(f"{s['steps']:,}" for s in sizes) + " | verdict |",
              "|---|" + "---:|" * len(sizes) + "---|"]
    for target in results["targets"]:
        unit = FIGURES[target["figure"]][1]
        cells = [_value(r["value"], unit) for r in target["results"]]
        lines.append(f"| {target['label']} | " + " | ".join(cells) + f" | {_verdict(target)} |")
    notes = [f"- {s['steps']:,} steps: {note}" for s in sizes for note in s["notes"]]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"
