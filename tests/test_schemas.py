"""The JSON contract: the ``--json`` output of every command is described by a JSON Schema shipped
in the package (``mem_retrieval/schemas/<command>.json``), checked here against real output: each
case runs the real command (in-process) and validates what it printed. Failures print
``{"error": …}``, checked against ``error.json``. `mem serve`'s ready line is checked in the slow
part; `mem mcp --http`'s in test_mcp.py."""

from __future__ import annotations

import argparse
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLE, build_workspace, copy_workspace, library_line, make_step
from mem_retrieval.cli.main import build_parser
from mem_retrieval.cli.main import run as run_cli
from mem_retrieval.functions import output_schema, schema_names
from mem_retrieval.memory import Memory

jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parent.parent
CHECKED_ELSEWHERE = {"serve": "below (slow)", "tune": "below (slow)", "mcp": "test_mcp.py"}

# (schema, argv after --workspace WS --json, which workspace: example (indexed, read-only) or own)
CASES = [
    ("archive-search", ["archive-search", "GL2m/Sp2m generation", "--setting", "F_q((t))"], "example"),
    ("archive-search", ["archive-search", "zorbification"], "example"),              # no hit: exit 1
    ("archive-search", ["archive-search", "A5-7 E6/F4", "--library", "--page", "2"], "example"),
    ("archive-get", ["archive-get", "satake-two-levels/A5-9"], "example"),            # a dead end
    ("archive-get", ["archive-get", "A5-8", "--run", "satake-two-levels"], "example"),  # an error
    ("archive-get", ["archive-get", "satake-two-levels/d2"], "example"),              # a source
    ("recall-search", ["recall-search", "audit of the pair model"], "example"),
    ("recall-search", ["recall-search", "--id", "A5-7"], "example"),
    ("check", ["check"], "example"),
    ("check", ["check", "alpha"], "broken"),                                           # violations
    ("check", ["check"], "unreadable"),                     # a run that cannot be read: "unchecked"
    ("check", ["check"], "elsewhere"),                    # a library entry of no run here: "elsewhere"
    ("eval-status", ["eval", "status"], "elsewhere"),
    ("eval-status", ["eval", "status"], "example"),
    ("eval-resume", ["eval", "resume", "satake-two-levels", "--until", "R-1"], "example"),
    ("eval-reuse", ["eval", "reuse", "iwahori-two-levels"], "example"),
    ("eval-reuse", ["eval", "reuse", "--all"], "example"),
    ("eval-reuse", ["eval", "reuse", "--all", "--per-step", "--max-pages", "2"], "example"),
    ("eval-fusion", ["eval", "fusion", "--queries", "{fusion_queries}", "--qrels", "{fusion_qrels}",
                     "--step", "0.5"], "fusion-ws"),
    ("eval-paging", ["eval", "paging", "--queries", "{queries}", "--qrels", "{qrels}", "--strategy",
                     "bm25", "--max-pages", "2"], "example"),
    ("eval-frontier", ["eval", "frontier", "{problem}", "--memory", "e1"], "example"),
    ("index", ["index", "--no-progress"], "own"),
    ("core-set", ["core-set", "alpha", "next", "audit a4, then a2"], "own"),
    ("archive-insert", ["archive-insert", "alpha/a2"], "own"),
    ("record", ["record", "alpha", "--dry-run"], "own"),
    ("record", ["record", "beta"], "own"),
    ("skill-install", ["skill", "install", "{folder}"], "own"),
    ("error", ["archive-get", "no-such-step"], "example"),
    ("error", ["archive-search", "GL2m", "--kind", "theorem"], "example"),
    ("error", ["record", "alpha"], "broken"),                      # several problems: "problems"
    ("error", ["core-set", "alpha", "colour", "x"], "own"),
]


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
                    yield from commands(sub, (*path, name))
                else:
                    yield "-".join((*path, name))


def test_every_command_has_a_schema_and_every_schema_is_checked_against_real_output():
    leaves = set(commands(build_parser()))
    assert leaves | {"error"} == set(schema_names())
    assert {name for name, _, _ in CASES} | set(CHECKED_ELSEWHERE) == set(schema_names())


@pytest.mark.parametrize("name", schema_names())
def test_each_schema_is_a_valid_draft_2020_12_schema(name):
    schema = output_schema(name)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


class Places(dict):
    """The workspaces and files the cases name, each made the first time a case asks for it (a case
    reads one workspace and a file or two: building all of them for each case cost seconds)."""

    def __init__(self, makers):
        super().__init__()
        self.makers = makers

    def __missing__(self, name):
        self[name] = self.makers[name]()
        return self[name]

    def get(self, name, default=None):
        return self[name] if name in self.makers else default


@pytest.fixture
def places(example, workspace, tmp_path):
    """The workspaces and files the cases name."""

    def broken():
        folder = tmp_path / "broken"
        copy_workspace(workspace.root, folder)
        (folder / "alpha" / "memory" / "core.md").write_text("## inputs      a4 proved\n## next  a2 refuted\n")
        return folder

    def unreadable():
        folder = tmp_path / "unreadable"
        copy_workspace(workspace.root, folder)
        (folder / "alpha" / "tree.json").write_text('{"run": broken')  # its library entry: unchecked
        return folder

    def elsewhere():
        folder = tmp_path / "elsewhere"
        copy_workspace(workspace.root, folder)
        shutil.rmtree(folder / "alpha")  # the library's entry of alpha/a1 stays
        return folder

    def queries():
        path = tmp_path / "queries.jsonl"
        path.write_text("".join(line + "\n" for line in
                                (EXAMPLE / "eval" / "queries.jsonl").read_text().splitlines()[:3]))
        return str(path)

    def qrels():
        path = tmp_path / "qrels"
        path.write_text("".join(line + "\n" for line in (EXAMPLE / "eval" / "qrels").read_text().splitlines()
                                if line.split()[:1] in (["q1"], ["q2"], ["q3"])))
        return str(path)

    def problem():
        path = tmp_path / "problem.json"
        path.write_text(json.dumps({"queries": [{"qid": "q1"}, {"qid": "q2"}],
                                    "events": [{"id": "e1"}, {"id": "e2", "true": False}],
                                    "spans": [{"events": ["e1"], "answers": ["q1"]},
                                              {"events": ["e2"], "answers": ["q1", "q2"]}]}))
        return str(path)

    def folder():
        path = tmp_path / "project"
        path.mkdir()
        return str(path)

    def fusion():
        # mem eval fusion's own end-to-end case (tests/test_fusion.py): g1 votes for alpha/a1
        ws = build_workspace(tmp_path / "fusion")
        ws.add_run("gamma", [make_step("g1", statement="zircon lemma", parents=("alpha/a1",)),
                             make_step("g2", statement="zircon corollary", parents=("alpha/a1",))])
        Memory.open(ws.root).index(progress=False)
        (tmp_path / "fq.jsonl").write_text(json.dumps(
            {"qid": "q", "query": "zircon corollary", "run": "gamma", "step": "gamma/g2"}) + "\n")
        (tmp_path / "fr.qrels").write_text("q 0 alpha/a1 1\n")
        return ws.root

    return Places({"example": lambda: example.workspace.root, "own": lambda: workspace.root,
                   "broken": broken, "unreadable": unreadable, "elsewhere": elsewhere, "fusion-ws": fusion,
                   "{fusion_queries}": lambda: str(tmp_path / "fq.jsonl"),
                   "{fusion_qrels}": lambda: str(tmp_path / "fr.qrels"),
                   "{queries}": queries, "{qrels}": qrels, "{problem}": problem, "{folder}": folder})


@pytest.mark.parametrize("name, argv, where", CASES, ids=[" ".join(c[1][:3]) for c in CASES])
def test_the_json_output_matches_its_schema(places, name, argv, where):
    root = places[where]  # the workspace first: it writes the files its arguments name
    argv = [places.get(a, a) for a in argv]
    out, err = io.StringIO(), io.StringIO()
    code = run_cli(["--workspace", str(root), "--json", *argv], out=out, err=err)
    data = json.loads(out.getvalue())
    assert ("error" in data) == (name == "error") and (code == 0 or name in ("error", "check", "eval-reuse")
                                                       or "hits" in data), (code, data, err.getvalue())
    jsonschema.Draft202012Validator(output_schema(name)).validate(data)
    if name == "error" and argv[0] == "record":
        assert len(data["problems"]) == 3  # the headline and both M1 violations


def test_the_apis_results_are_json_as_they_are(example):
    """``as_dict()`` of what the Python API returns holds JSON's types only (lists, not tuples), so
    it survives a JSON round trip unchanged and validates against the command's schema without one
    (a hit's ``unmet_hyp`` was a tuple: jsonschema refused ``()`` as an array), a page's with its
    notes (the schema requires them: a page's ``as_dict()`` had none)."""
    search = example.archive_search("GL2m/Sp2m generation", setting="F_q((t))")
    recall = example.recall_search(id="A5-8", run="satake-two-levels")
    noted = example.archive_search("GL2m/Sp2m generation", setting="no such setting")
    results = {"archive-search": search.as_dict(), "recall-search": recall.as_dict(),
               "archive-get": example.archive_get("satake-two-levels/A5-7").as_dict()}
    assert search.hits and recall.hits
    assert noted.as_dict()["notes"] == [note.render() for note in noted.notes] != []
    assert noted.as_dict()["notes"][0].startswith("setting 'no such setting': ")
    for name, data in results.items():
        assert json.loads(json.dumps(data)) == data, name
        jsonschema.Draft202012Validator(output_schema(name)).validate(data)


def test_a_schema_refuses_output_that_drifts():
    """The schemas are strict: a renamed or added field fails (so a drift is caught here)."""
    schema = output_schema("archive-insert")
    good = {"inserted": "r/a1", "line": 2, "status": "proved", "grade": "pass", "repair": None,
            "time": "2026-10-17T07:00:00Z"}
    jsonschema.validate(good, schema)
    for bad in ({**good, "extra": 1}, {k: v for k, v in good.items() if k != "line"},
                {**good, "status": "done"}, {**good, "line": 0}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


@pytest.mark.slow
def test_the_serve_ready_status_and_stop_lines_match_their_schema(tmp_path):
    root = tmp_path / "ws"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".mem"))
    mem = [sys.executable, "-m", "mem_retrieval.cli", "-w", str(root), "--json", "serve"]
    proc = subprocess.Popen([*mem, "--lazy"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        status = subprocess.run([*mem, "--status"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        stop = subprocess.run([*mem, "--stop"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    finally:
        proc.terminate()
        proc.wait(30)
        proc.stdout.close()
    validator = jsonschema.Draft202012Validator(output_schema("serve"))
    data = json.loads(line)
    validator.validate(data)
    assert data["socket"] == str(root / ".mem" / "serve.sock")
    for done in (status, stop):
        assert done.returncode == 0, done.stderr
        validator.validate(json.loads(done.stdout))
    assert json.loads(status.stdout)["pid"] == json.loads(stop.stdout)["stopped"] == data["pid"]


@pytest.mark.slow
def test_the_tune_outputs_match_their_schema(workspace):
    """`mem tune` (a training run and its index run), `mem tune --reset` (an index run) and `mem
    tune --eval` (the held-out runs' figures before and after, and the training: two runs citing
    another run's library steps to hold out, gamma's g1 written after beta's query, so kept out)."""
    workspace.add_run("gamma", [make_step("g1", parents=("beta/b1",))])
    workspace.write_library([library_line("alpha", workspace.tree("alpha")["steps"][0]),
                             library_line("beta", workspace.tree("beta")["steps"][0])])
    for argv in (["tune"], ["tune", "--reset"], ["tune", "--eval"]):
        out, err = io.StringIO(), io.StringIO()
        code = run_cli(["--workspace", str(workspace.root), "--json", *argv], out=out, err=err)
        assert code == 0, err.getvalue()
        jsonschema.Draft202012Validator(output_schema("tune")).validate(json.loads(out.getvalue()))
