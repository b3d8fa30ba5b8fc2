"""How a frontier is shown: the terminal table, the JSON other tools read, and the plot (written
whole or not at all); `mem eval frontier` prints them."""

from __future__ import annotations

from pathlib import Path

from mem_retrieval.records.files import replace_atomic

PLOT_SUFFIXES = (".png", ".svg", ".pdf")
TABLE_ROWS = 30  # more sizes than this: the table keeps only the sizes where something changed


def _r(value: float) -> float:
    return round(value, 6) + 0.0  # no -0.0


def as_json(front, score) -> dict:
    """The shape other tools read (issue 5), plus greedy beside each size and the notes."""
    problem = front.problem
    ids = problem.event_ids
    rows = [{"size": size,
             "coverage": _r(front.coverage.value(size)),
             "precision": _r(front.precision.value(size)),
             "method": front.method,
             "coverage_memory": [ids[e] for e in front.coverage.memory(size)],
             "precision_memory": [ids[e] for e in front.precision.memory(size)],
             "greedy_coverage": _r(front.greedy_coverage.value(size)),
             "greedy_precision": _r(front.greedy_precision.value(size))}
            for size in range(front.max_size + 1)]
    memory = None
    if score is not None:
        memory = {"ids": list(score.ids), "size": score.size, "coverage": _r(score.coverage),
                  "precision": _r(score.precision), "water_inflation": _r(score.water_inflation),
                  "loss": _r(score.loss)}
    return {"events": len(ids), "queries": len(problem.query_ids), "frontier": rows, "memory": memory,
            "notes": front.notes()}


def as_table(front, score) -> str:
    """Sizes with both frontiers (greedy beside exact), the notes, and the memory's line."""
    problem = front.problem
    exact = front.method == "exact"
    true_events = sum(problem.truth)
    lines = [f"{len(problem.event_ids)} events ({true_events} true), {len(problem.query_ids)} queries, "
             f"{len(problem.spans)} spans ({problem.synergy} of several events); "
             f"computed in {front.seconds:.2f} s", *front.notes(), ""]
    header = f"{'size':>5}  {'coverage':>8}  {'precision':>9}"
    if exact:
        header += f"  {'greedy cov':>10}  {'greedy prec':>11}"
    lines.append(header + ("  precision memory" if exact else "  precision: greedy adds"))
    shown, previous = 0, None
    for size in range(front.max_size + 1):
        values = (front.coverage.value(size), front.precision.value(size),
                  front.greedy_coverage.value(size), front.greedy_precision.value(size))
        last = size == front.max_size
        if front.max_size + 1 > TABLE_ROWS and values == previous and not last:
            continue
        previous = values
        shown += 1
        row = f"{size:>5}  {values[0]:>8.3f}  {values[1]:>9.3f}"
        if exact:
            row += f"  {values[2]:>10.3f}  {values[3]:>11.3f}"
        memory = front.precision.memory(size)
        if not exact:  # a chain: name the event this size adds
            memory = memory[-1:] if len(memory) == size else ()
        lines.append(row + "  " + _ids(problem, memory))
    if shown < front.max_size + 1:
        lines.append(f"({front.max_size + 1 - shown} sizes where nothing changed left out; "
                     f"--json lists every size)")
    if score is not None:
        shown_ids = " ".join(score.ids) or "—"
        lines += ["", f"memory {shown_ids if len(shown_ids) <= 60 else shown_ids[:59] + '…'}",
                  f"  size {score.size}  coverage {score.coverage:.3f}  precision {score.precision:.3f}  "
                  f"water inflation {score.water_inflation:.3f}  loss {score.loss:.3f}"
                  + ("" if score.method == "exact" else "  (against greedy: a lower bound of U*, "
                     "so the true loss is at least this)")]
    return "\n".join(lines)


def _ids(problem, memory, width: int = 60) -> str:
    text = " ".join(problem.event_ids[e] for e in memory) or "—"
    return text if len(text) <= width else text[:width - 1] + "…"


def plot(front, score, path: Path) -> None:
    """Both frontiers as steps, greedy dashed beside exact, the memory as two points (coverage above
    precision: the gap is its water inflation). Written whole or not at all."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.ticker import MaxNLocator

    sizes = list(range(max(front.max_size, score.size if score else 0) + 1))  # reach the memory
    marker = "o" if len(sizes) <= 50 else None  # U*(S) lives on whole sizes
    figure, axes = plt.subplots(figsize=(7, 4.5))
    axes.step(sizes, [front.coverage.value(s) for s in sizes], where="post", marker=marker,
              markersize=5, linewidth=2.5, label=f"coverage U*(S) ({front.method})")
    axes.step(sizes, [front.precision.value(s) for s in sizes], where="post", marker=marker,
              markersize=4, label=f"precision U*(S) ({front.method})")
    if front.method == "exact":
        axes.step(sizes, [front.greedy_coverage.value(s) for s in sizes], where="post",
                  linestyle="--", alpha=0.6, label="coverage, greedy")
        axes.step(sizes, [front.greedy_precision.value(s) for s in sizes], where="post",
                  linestyle="--", alpha=0.6, label="precision, greedy")
    if score is not None:
        axes.plot([score.size, score.size], [score.precision, score.coverage], color="black", lw=1)
        axes.scatter([score.size], [score.coverage], marker="o", color="black", zorder=3,
                     label=f"memory coverage {score.coverage:.2f}")
        axes.scatter([score.size], [score.precision], marker="x", color="red", zorder=3,
                     label=f"memory precision {score.precision:.2f} (loss {score.loss:.2f})")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("memory size S (events)")
    axes.set_ylabel("weighted share of queries answered")
    axes.set_ylim(0, 1.05)
    axes.set_title("utility–capacity frontier")
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    try:
        replace_atomic(path, lambda tmp: figure.savefig(tmp, format=path.suffix.lstrip(".") or "png"))
    finally:
        plt.close(figure)
