"""How a paging evaluation is shown: the terminal table, the TREC run file, and the report folder
(report.md and the plot recall_by_page.png). Files are written whole or not at all, and the files
of one command all or none (``output_files``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mem_retrieval.eval.judgments import write_trec_run
from mem_retrieval.eval.paging import STOP_LOSS, recall_at
from mem_retrieval.eval.paging_eval import PagingEvaluation

PLOT = "recall_by_page.png"
REPORT = "report.md"
BOUND = f"bound-{STOP_LOSS:g}"  # the pager table's row for eval.paging.fewest_pages


def _rows(evaluation: PagingEvaluation) -> tuple[list[str], list[list[str]], list[str], list[list[str]],
                                                 list[str], list[list[str]]]:
    """The three tables (metrics, recall by page, pagers) as header + rows of strings."""
    names = list(evaluation.strategies)
    metrics = list(next(iter(evaluation.strategies.values())).metrics) if names else []
    metric_rows = [[_named(evaluation, name)] + [f"{evaluation.strategies[name].metrics[m]:.3f}"
                                                 for m in metrics] for name in names]
    pages = [str(page) for page in range(1, evaluation.max_pages + 1)]
    page_rows = [[name] + [f"{value:.3f}" for value in evaluation.strategies[name].recall_by_page]
                 for name in names]
    pager_rows = [[name, pager, f"{summary.pages:.2f}", f"{summary.recall:.3f}", f"{summary.loss:.3f}",
                   _versus_fixed(result, summary.recall, summary.pages)]
                  for name, result in evaluation.strategies.items()
                  for pager, summary in [*result.pagers.items(), (BOUND, result.bound)]]
    return (["strategy"] + metrics, metric_rows, ["strategy"] + pages, page_rows,
            ["strategy", "pager", "pages", "recall", "loss", "vs fixed"], pager_rows)


def _named(evaluation: PagingEvaluation, name: str) -> str:
    return f"{name} (default)" if name == evaluation.default else name


def _versus_fixed(result, recall: float, pages: float) -> str:
    curve = result.recall_by_page
    return (f"{recall - recall_at(curve, pages, result.fixed_pages):+.3f}" if 1 <= pages <= len(curve)
            else "-")


def _aligned(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in [header] + rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                     for row in [header] + rows)


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _title(evaluation: PagingEvaluation) -> str:
    return (f"{evaluation.queries} judged queries, pages of {evaluation.page_size}, "
            f"up to {evaluation.max_pages} pages")


def table_text(evaluation: PagingEvaluation) -> str:
    """The terminal form: metrics, recall after each page, and each pager's cost and loss."""
    metric_head, metric_rows, page_head, page_rows, pager_head, pager_rows = _rows(evaluation)
    return "\n\n".join([
        f"paging evaluation: {_title(evaluation)}",
        _aligned(metric_head, metric_rows),
        "recall after page\n" + _aligned(page_head, page_rows),
        "pagers (mean pages read, recall at stop, early-stop loss, recall minus fixed paging's "
        f"at the same mean pages; {BOUND}: the fewest pages any stopping rule reads at a loss of at "
        f"most {STOP_LOSS:g}, knowing the judgments)\n" + _aligned(pager_head, pager_rows),
    ])


def report_markdown(evaluation: PagingEvaluation) -> str:
    metric_head, metric_rows, page_head, page_rows, pager_head, pager_rows = _rows(evaluation)
    return "\n\n".join([
        "# Paging evaluation", _title(evaluation) + ".",
        "## Metrics\n\nMeans over every judged query (a query without hits scores 0), computed by "
        "ir_measures.\n\n" + _markdown(metric_head, metric_rows),
        "## Recall after each page\n\n" + _markdown(page_head, page_rows),
        f"![recall by page, early-stop loss]({PLOT})",
        "## Pagers\n\n`pages`: mean pages read; `recall`: mean recall where the pager stopped; "
        f"`loss`: recall after {evaluation.max_pages} pages minus recall at stop; `vs fixed`: "
        "recall minus that of reading a fixed number of pages at the same mean cost (the recall "
        "curve interpolated at `pages`, fixed-k reading k pages or to the list's end, as every pager "
        "does): positive when the pager spends its pages where they pay.\n\n"
        "`first-page` reads one page; `fixed-k` k pages; `patience-1` stops after the first page "
        "with no new relevant hit; `score-drop` stops after a page whose best score is below a "
        "fraction (0.5) of the first hit's; `hint` reads on while the page's estimate of relevant "
        "hits remaining is at least 1 (the sum, over the next pages, of each hit's score height "
        "above the score ending the last page an agent reads, relative to the top score's). "
        f"`{BOUND}` is not a pager but a bound: the fewest mean pages any stopping rule could read "
        f"on these lists with a mean loss of at most {STOP_LOSS:g}, each stop chosen knowing the "
        "judgments; no pager does better on this ranking.\n\n" + _markdown(pager_head, pager_rows),
    ]) + "\n"


def plot(evaluation: PagingEvaluation, path: Path) -> None:
    """Recall against pages read (one line per strategy) beside early-stop loss per pager (bars),
    drawn into the PNG file ``path``."""
    _draw(evaluation, lambda figure: figure.savefig(path, dpi=120, format="png"))


def _draw(evaluation: PagingEvaluation, write: Callable[[Any], None]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(evaluation.strategies)
    pagers = list(next(iter(evaluation.strategies.values())).pagers) if names else []
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    pages = list(range(1, evaluation.max_pages + 1))
    for name in names:
        left.plot(pages, evaluation.strategies[name].recall_by_page, marker="o", label=name)
    left.set(xlabel="pages read", ylabel="recall", title="Recall after each page", ylim=(0, 1.02),
             xticks=pages[::-(-len(pages) // 20)])  # at most 20 labels (100 pages drew 100, overprinted)
    left.grid(alpha=0.3)
    left.legend()
    width = 0.8 / max(1, len(names))
    for index, name in enumerate(names):
        summaries = evaluation.strategies[name].pagers
        xs = [position + (index - (len(names) - 1) / 2) * width for position in range(len(pagers))]
        bars = right.bar(xs, [summaries[pager].loss for pager in pagers], width, label=name)
        right.bar_label(bars, labels=[f"{summaries[pager].pages:.1f}p" for pager in pagers], fontsize=6)
    right.set_xticks(range(len(pagers)), pagers)
    right.set(ylabel="early-stop loss (recall)", title="Early-stop loss per pager (label: pages read)")
    right.grid(axis="y", alpha=0.3)
    right.legend()
    figure.tight_layout()
    try:
        write(figure)
    finally:
        plt.close(figure)


def report_files(directory) -> list[Path]:
    """The files `--report DIR` writes in ``directory`` (``output_files``)."""
    return [Path(directory) / REPORT, Path(directory) / PLOT]


def output_files(evaluation: PagingEvaluation, trec_out: Path | None = None,
                 report: Path | None = None) -> list[tuple[Path, Callable[[Path], None], str]]:
    """What `--trec-out FILE` and `--report DIR` write: (path, its writer, the option), the run file
    (every strategy's ranking, tagged by strategy), then ``DIR/report.md`` and
    ``DIR/recall_by_page.png``, for ``files.replace_all`` to write all or none."""
    files: list[tuple[Path, Callable[[Path], None], str]] = []
    if trec_out is not None:
        files.append((Path(trec_out), lambda tmp: write_trec_run(tmp, evaluation.runs), "trec_out"))
    if report is not None:
        text, figure = report_files(report)
        files.append((text, lambda tmp: tmp.write_text(report_markdown(evaluation), encoding="utf-8"),
                      "report"))
        files.append((figure, lambda tmp: plot(evaluation, tmp), "report"))
    return files
