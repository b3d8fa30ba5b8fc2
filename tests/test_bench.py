"""The speed benchmark (eval/bench.py) runs end to end and reports every figure against its target.

No timing is asserted: the numbers depend on the machine. What a user relies on is that one command
generates a valid workspace, measures everything the issue asks for and writes both reports."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from mem_retrieval.eval import synthetic
from mem_retrieval.eval.bench import main as bench_main
from mem_retrieval.eval.bench_report import FIGURES, TARGETS
from mem_retrieval.cli.main import run as run_cli

# Figures that stay empty by design: a generated (not kept) workspace is always timed; the server
# figures only when this checkout has `mem serve`.
SERVER_FIGURES = {"cold_search_server_p50_s", "server_start_s", "server_peak_mb"}


def _tree_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_synthetic_workspace_is_valid_and_deterministic(tmp_path: Path) -> None:
    made = synthetic.generate(tmp_path / "a", 450, seed=3)
    again = synthetic.generate(tmp_path / "b", 450, seed=3)
    assert _tree_files(made.root) == _tree_files(again.root)  # same seed, same bytes
    steps = sum(len(json.loads((made.root / run / "tree.json").read_text())["steps"])
                for run in [p.parent.name for p in made.root.glob("*/tree.json")])
    assert (steps, made.runs) == (450, 3)  # ~200-step runs, exactly the steps asked for
    out, err = io.StringIO(), io.StringIO()
    code = run_cli(["--workspace", str(made.root), "check"], out=out, err=err)
    assert code == 0, out.getvalue()  # parses, and M1–M4 + integrity hold (library = audited finals)
    assert made.library == len((made.root / "solve" / "library.jsonl").read_text().splitlines()) > 0
    changed, restore = synthetic.change_statements(made.root, 0.01, seed=3)
    assert changed == 4 and _tree_files(made.root) != _tree_files(again.root)
    restore()
    assert _tree_files(made.root) == _tree_files(again.root)


def test_the_synthetic_command_writes_runs_of_the_size_asked_and_refuses_none(tmp_path: Path, capsys) -> None:
    """``--run-steps 5``: a workspace of many small runs (a search looks at every run), each of
    about 5 steps, the steps exactly as asked, valid; 0 is refused in one line, exit 2."""
    synthetic.main([str(tmp_path / "small"), "--steps", "60", "--run-steps", "5"])
    made = json.loads(capsys.readouterr().out)
    sizes = [len(json.loads(p.read_text())["steps"]) for p in (tmp_path / "small").glob("*/tree.json")]
    assert sum(sizes) == 60 and made["runs"] == len(sizes) >= 10
    assert max(sizes) <= 10
    out, err = io.StringIO(), io.StringIO()
    assert run_cli(["--workspace", str(tmp_path / "small"), "check"], out=out, err=err) == 0
    with pytest.raises(SystemExit) as refused:
        synthetic.main([str(tmp_path / "none"), "--run-steps", "0"])
    said = capsys.readouterr().err
    assert refused.value.code == 2 and "--run-steps: give a whole number of 1 or more" in said
    assert not (tmp_path / "none").exists()


def test_the_as_of_figures_search_as_of_the_middle_event_of_the_run_starting_midway(tmp_path: Path) -> None:
    """The toy's logs start alpha 2026-10-17 02:05, beta 2026-10-18 01:00; zeta has none and is
    passed over. Two runs with a log: the second, beta, starts midway; its one event is the middle."""
    from conftest import build_workspace, make_step

    from mem_retrieval.records.workspace import Workspace

    ws = build_workspace(tmp_path / "ws")
    ws.add_run("zeta", [make_step("z1")])
    assert synthetic.midway(Workspace(ws.root)) == "2026-10-18T01:00:00Z"
    bare = build_workspace(tmp_path / "bare")
    for run in ("alpha", "beta"):
        Workspace(bare.root).events_path(run).unlink()
    assert synthetic.midway(Workspace(bare.root)) is None


@pytest.mark.slow
def test_bench_reports_every_figure_and_target(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert bench_main(["--sizes", "100", "--queries", "3", "--cold-runs", "1", "--out", str(out)]) == 0
    results = json.loads((out / "bench.json").read_text())
    (size,) = results["sizes"]
    assert (size["steps"], size["runs"]) == (100, 1)
    figures = size["figures"]
    assert set(figures) == set(FIGURES)
    expected_empty = set() if results["serve"] else SERVER_FIGURES
    assert {name for name, value in figures.items() if value is None} == expected_empty
    assert figures["incremental_changed"] == 1 and figures["incremental_embedded"] >= 1
    assert [t["figure"] for t in results["targets"]] == [t.figure for t in TARGETS]
    for target in results["targets"]:
        (result,) = target["results"]
        assert result["value"] == figures[target["figure"]] and result["steps"] == 100
    table = (out / "bench.md").read_text()
    assert all(label in table for label, _ in FIGURES.values())
    exact = results["machine"]["int8_signed_exact"]
    assert isinstance(exact, bool)  # which int8 file ran, said as this CPU found it
    assert ("this CPU multiplies int8 weights exactly: the index's path ran their signed copy" if exact
            else "this CPU does not multiply int8 weights exactly: the index's path ran the uint8 model") in table
    assert all(t.label in table for t in TARGETS)


@pytest.mark.slow
def test_bench_of_a_workspace_writes_its_figures_to_out_and_leaves_the_workspace_alone(tmp_path: Path):
    """``--workspace DIR`` printed its figures and wrote nothing, though --out says where they go."""
    from conftest import build_workspace

    ws = build_workspace(tmp_path / "ws")
    before = _tree_files(ws.root)
    out = tmp_path / "out"
    assert bench_main(["--workspace", str(ws.root), "--queries", "2", "--out", str(out)]) == 0
    result = json.loads((out / "workspace.json").read_text())
    assert (result["workspace"], result["steps"]) == (str(ws.root), 6)
    figures = result["figures"]
    assert figures["records"] > 0 and figures["full_index_s"] > 0
    table = (out / "workspace.md").read_text()
    assert table.startswith(f"{ws.root}: 6 steps,") and table.count("  warm ") == 9
    assert all(f"warm {name} " in table for name in ("id", "gid", "bm25", "hybrid", "recall", "naive"))
    assert _tree_files(ws.root) == before  # measured on a copy


@pytest.mark.slow
def test_the_scale_benchmark_measures_both_engines_and_both_stores_and_projects(tmp_path: Path) -> None:
    """``--scale``: the local engine against Ray with 1 and 2 workers (same rows), local disk
    against loopback S3 (same result lists), and a projection whose time falls with workers."""
    out = tmp_path / "out"
    assert bench_main(["--scale", "--scale-steps", "60", "--workers", "1,2", "--uri", "loopback",
                       "--queries", "4", "--out", str(out)]) == 0
    result = json.loads((out / "scale.json").read_text())
    assert set(result["engines"]["ray"]) == {"1", "2"}
    assert all(run["same_rows"] for run in result["engines"]["ray"].values())
    assert result["stores"]["same_results"] and result["stores"]["uri"].startswith("s3://")
    projection = result["projection"]
    seconds = [projection["million"]["seconds"][n] for n in ("1", "2", "16", "256")]
    assert seconds == sorted(seconds, reverse=True) and seconds[-1] >= projection["million"]["serial_s"]
    assert projection["million"]["texts"] == pytest.approx(projection["texts_per_step"] * 1_000_000)
    table = (out / "scale.md").read_text()
    assert "1,000,000 steps" in table and "Assumptions" in table
