"""Shared fixtures: a minimal valid workspace built in tmp_path, and the CLI run in-process.

The workspace (SPEC §1) has two runs and a library:

- ``alpha`` (setting ``Qp``): a1 lemma proved/pass, a2 lemma proved/minor (parents a1, d1), a3 dead end
  blocked/pass, a4 lemma open (not audited), a5 lemma refuted/major repaired; source d1; two events;
  core.md stating ``a1 proved`` and ``a4 open``.
- ``beta`` (setting ``Qp``): b1 lemma proved/pass citing the library step ``alpha/a1``.
- solve/library.jsonl: alpha/a1.

Tests break one thing and look for the one message it should cause."""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import settings

from mem_retrieval.cli.main import run as run_cli

# No hypothesis example is timed: a loaded CI machine (the other worker indexing) stalls a process
# for longer than the default 200 ms deadline, which then fails a test that is right.
settings.register_profile("mem", deadline=None)
settings.load_profile("mem")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "workspace"


def make_step(step_id: str, status: str = "proved", grade: str | None = "pass", *,
              kind: str = "lemma", parents: tuple[str, ...] = (), setting: str = "Qp",
              repaired: bool = False, note: str = "", **extra) -> dict:
    """One tree.json step; ``grade=None`` means not audited."""
    step = {"id": step_id, "kind": kind, "agent": step_id[:2].upper(),
            "statement": f"statement of {step_id}", "hyp": ["p odd"], "setting": setting,
            "parents": list(parents), "proof": f"proof of {step_id}", "status": status,
            "audit": None if grade is None else {"grade": grade, "by": "A7", "note": note,
                                                 "repaired": repaired}}
    if kind == "dead_end":
        step.setdefault("missing", f"what would unblock {step_id}")
    if kind == "error":
        step.setdefault("failed_input", f"the input {step_id} fails on")
    step.update(extra)
    return step


def library_line(run: str, step: dict, **changes) -> dict:
    """The SPEC §5 library entry for a tree.json step."""
    audit = step.get("audit") or {}
    entry = {"run": run, "id": step["id"], "kind": step["kind"], "statement": step["statement"],
             "setting": step["setting"], "hyp": step["hyp"], "status": step["status"],
             "grade": audit.get("grade"), "repair": (audit.get("note") or "repaired")
             if audit.get("repaired") else None, "inserted": "2026-10-17T07:00:00Z"}
    for key in ("missing", "failed_input"):
        if key in step:
            entry[key] = step[key]
    entry.update(changes)
    return entry


class Workspace:
    """A workspace folder on disk with small editing helpers (each rewrites one file)."""

    def __init__(self, root: Path):
        self.root = root

    def tree(self, run: str) -> dict:
        return json.loads((self.root / run / "tree.json").read_text(encoding="utf-8"))

    def save_tree(self, run: str, tree: dict) -> None:
        (self.root / run).mkdir(parents=True, exist_ok=True)
        (self.root / run / "tree.json").write_text(json.dumps(tree, indent=1, ensure_ascii=False),
                                                   encoding="utf-8")

    def add_run(self, run: str, steps: list[dict], setting: str = "Qp") -> None:
        (self.root / run / "sources").mkdir(parents=True, exist_ok=True)
        (self.root / run / "sources" / "d1.md").write_text("a source\n", encoding="utf-8")
        self.save_tree(run, {
            "run": run, "date": "2026-10-17",
            "fix": {"problem": f"problem of {run}", "setting": setting, "criterion": "proof",
                    "checklist": []},
            "sources": [{"id": "d1", "origin": "https://example.org/d1", "retrieved":
                         "2026-10-17T02:00:00Z", "hash": "sha256:00", "path": "sources/d1.md"}],
            "steps": steps})

    def add_step(self, run: str, step: dict) -> None:
        tree = self.tree(run)
        tree["steps"].append(step)
        self.save_tree(run, tree)

    def edit_step(self, run: str, step_id: str, **changes) -> None:
        tree = self.tree(run)
        for step in tree["steps"]:
            if step["id"] == step_id:
                step.update(changes)
        self.save_tree(run, tree)

    def events_path(self, run: str) -> Path:
        return self.root / run / "memory" / "events.jsonl"

    def core_path(self, run: str) -> Path:
        return self.root / run / "memory" / "core.md"

    @property
    def library_path(self) -> Path:
        return self.root / "solve" / "library.jsonl"

    def write_events(self, run: str, events: list[dict]) -> None:
        self.events_path(run).parent.mkdir(parents=True, exist_ok=True)
        self.events_path(run).write_text(
            "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events), encoding="utf-8")

    def events(self, run: str) -> list[dict]:
        return [json.loads(line) for line in self.events_path(run).read_text().splitlines() if line]

    def write_core(self, run: str, text: str) -> None:
        self.core_path(run).parent.mkdir(parents=True, exist_ok=True)
        self.core_path(run).write_text(text, encoding="utf-8")

    def write_library(self, entries: list[dict]) -> None:
        self.library_path.parent.mkdir(parents=True, exist_ok=True)
        self.library_path.write_text(
            "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries), encoding="utf-8")

    def library(self) -> list[dict]:
        if not self.library_path.exists():
            return []
        return [json.loads(line) for line in self.library_path.read_text().splitlines() if line]


def step_line(workspace: Workspace, run: str, step_id: str) -> int:
    """The line a step's object starts on (the line before its "id", as ``save_tree`` writes JSON)."""
    lines = (workspace.root / run / "tree.json").read_text().splitlines()
    return lines.index(f'   "id": "{step_id}",')  # 0-based index of "id" = 1-based line of "{"


def build_workspace(root: Path) -> Workspace:
    """The minimal valid workspace described in this module's docstring."""
    ws = Workspace(root)
    alpha = [
        make_step("a1"),
        make_step("a2", grade="minor", parents=("a1", "d1")),
        make_step("a3", "blocked", kind="dead_end"),
        make_step("a4", "open", None, parents=("a2",)),
        make_step("a5", "refuted", "major", repaired=True, note="input (b) restated"),
    ]
    ws.add_run("alpha", alpha)
    ws.write_events("alpha", [
        {"time": "2026-10-17T02:05:00Z", "actor": "root", "kind": "source", "ids": ["d1"],
         "text": "fetched d1"},
        {"time": "2026-10-17T03:42:00Z", "actor": "A1", "kind": "return",
         "ids": ["a1", "a2", "a3", "a4", "a5"], "text": "five steps"},
    ])
    ws.write_core("alpha", "## phase       round 2\n## portfolio   A1 local\n## open gaps   a4 open\n"
                           "## next        audit a4\n## inputs      a1 proved · d1 = the source\n")
    ws.add_run("beta", [make_step("b1", parents=("alpha/a1", "d1"))])
    ws.write_events("beta", [{"time": "2026-10-18T01:00:00Z", "actor": "B1", "kind": "return",
                              "ids": ["b1", "alpha/a1"], "text": "one step"}])
    ws.write_library([library_line("alpha", alpha[0])])
    return ws


os.environ["MEM_NO_AUTOSTART"] = "1"  # no test leaves a server behind; tests of it clear this
# The suite's own export cache (text/onnx.py cache_dir), never the user's ~/.cache: every index
# links the one export made first. It is kept between runs in the temp folder (an export is
# deterministic for given package versions, which key it, and is checked whole before it is
# linked), so only a machine's first run pays the ~9 s of torch that making it costs.
_CACHE = os.path.join(tempfile.gettempdir(), f"mem-test-cache-{getattr(os, 'getuid', lambda: 0)()}")
os.environ["MEM_CACHE_DIR"] = _CACHE


def pytest_addoption(parser) -> None:
    parser.addoption("--slow", action="store_true",
                     help="also run the tests marked slow (crash trials, real servers, benchmarks): "
                          "CI and the README's test command do")


def pytest_collection_modifyitems(config, items) -> None:
    """Without --slow, the tests marked slow are deselected: the default run stays fast."""
    if config.getoption("--slow"):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


def without_root_override(argv: list[str]) -> list[str]:
    """``argv`` run as a user file modes bind: as it is for one who is not root; under root, by
    capsh without root's override of them (skip where there is no capsh)."""
    if os.geteuid() != 0:
        return argv
    capsh = shutil.which("capsh")
    if capsh is None:
        pytest.skip("run as root without capsh: root reads and writes whatever a file's mode says")
    return [capsh, "--drop=cap_dac_override,cap_dac_read_search,cap_fowner", "--", "-c",
            " ".join(f"'{a}'" for a in argv)]


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return build_workspace(tmp_path / "ws")


@pytest.fixture
def mem(workspace: Workspace) -> Callable[..., tuple[int, str, str]]:
    """``mem(*argv)`` -> (exit status, stdout, stderr), run in-process on the workspace."""

    def call(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = run_cli(["--workspace", str(workspace.root), *argv], out=out, err=err)
        return code, out.getvalue(), err.getvalue()

    return call


@pytest.fixture(scope="session")
def example(tmp_path_factory):
    """The example workspace, copied to tmp and indexed once for the whole session (read-only: a
    test that writes builds its own workspace)."""
    from mem_retrieval.memory import Memory

    root = tmp_path_factory.mktemp("example") / "workspace"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".mem"))
    memory = Memory.open(root)
    memory.index(progress=False)
    return memory


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """A real S3 API on 127.0.0.1 (moto's server mode, a test dependency) for the session; shut
    down at its end."""
    from mem_retrieval.eval.loopback_s3 import LoopbackS3

    server = LoopbackS3(tmp_path_factory.mktemp("s3") / "moto.log")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def onnx_export(example) -> Path:
    """The example index's ONNX export folder: seeded into a new index's model cache, a test's
    index skips the export (seconds of torch) and uses the very same files."""
    (folder,) = (example.workspace.index_dir / "models").glob("onnx-*")
    return folder


def seed_export(folder: Path, export: Path) -> None:
    """Put ``export`` into the models folder of ``folder`` (an index folder or a local cache),
    hard-linked: its ~110 MB are never written in place (an export is replaced whole)."""
    shutil.copytree(export, folder / "models" / export.name, dirs_exist_ok=True, copy_function=os.link)


def copy_workspace(source: Path, target: Path, **options) -> Path:
    """A copy of a workspace whose model files (``.mem/models``: content-addressed, replaced whole,
    never written in place) are hard links, not copies (``options``: copytree's, e.g. ``ignore``)."""
    def copy(src: str, dst: str) -> None:
        if f"{os.sep}models{os.sep}" in src:
            os.link(src, dst)
        else:
            shutil.copy2(src, dst)

    shutil.copytree(source, target, copy_function=copy, **options)
    return target
