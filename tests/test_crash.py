"""Crash safety: `mem index`, `mem archive-insert` and `mem core-set` killed with SIGKILL at random
points leave either the old state or the new one, never a mix, and the next run completes.

The killed commands are real processes running the real CLI (``mem_retrieval.cli.main.run``). They are forked from
a warm process (``Forker``) that has already imported lancedb and torch and loaded the model, so a
trial's time is spent in the command's own work and the kill points (uniform in [0, D], where D is
the measured duration of the same command run to completion, one point per twentieth of D) fall in
parsing, embedding, the table commits and the meta.json write, rather than in interpreter start-up."""

from __future__ import annotations

import atexit
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import Workspace, build_workspace, make_step, copy_workspace
from mem_retrieval.records.parse import iter_events, iter_library, parse_core

pytestmark = pytest.mark.slow  # real processes: run with --slow (CI does)

ROOT = Path(__file__).resolve().parent.parent
TRIALS = 20

SERVER = r'''
import json, os, sys, traceback, warnings
warnings.filterwarnings("ignore", message="lancedb fork")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import lancedb, pyarrow
import mem_retrieval.indexers.build, mem_retrieval.indexers.rows, mem_retrieval.records.writes, mem_retrieval.records.invariants, mem_retrieval.memory
from mem_retrieval.configs import load_config
from mem_retrieval.cli.main import run
from mem_retrieval.records.tokens import count_tokens
from mem_retrieval.text.embed import load_model

load_model(load_config(None, None).model.package)
count_tokens("warm", load_config(None, None).model.package)
print(json.dumps({"ready": os.getpid()}), flush=True)
for line in sys.stdin:
    job = json.loads(line)
    if "wait" in job:
        _, status = os.waitpid(job["wait"], 0)
        print(json.dumps({"killed": os.WIFSIGNALED(status),
                          "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None}),
              flush=True)
        continue
    pid = os.fork()
    if pid == 0:
        fd = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        code = 0
        try:
            if "python" in job:
                sys.argv = ["-c", *job["args"]]
                exec(compile(job["python"], "<job>", "exec"), {"__name__": "__main__"})
            else:
                code = max([run(argv) for argv in job["argvs"]], default=0)
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 70
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    print(json.dumps({"pid": pid}), flush=True)
'''


class Forker:
    """A warm Python process (lancedb and torch imported, the model loaded) that forks a child per
    job: ``mem`` argv lists run in turn, or a Python script; the child's stdout and stderr go to a
    log file. Several children may run at once; the test may SIGKILL any of them."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.jobs = 0
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER], cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        ready = self.proc.stdout.readline()
        assert ready and "ready" in json.loads(ready), "the warm process did not start"

    def _ask(self, request: dict) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def start(self, *argvs: list[str], python: str | None = None,
              args: tuple[str, ...] = ()) -> tuple[int, Path]:
        """Fork a child running ``argvs`` (or the script ``python`` with ``args``): (pid, log)."""
        self.jobs += 1
        log = self.log_dir / f"job{self.jobs}.log"
        job = {"python": python, "args": list(args)} if python else {"argvs": list(argvs)}
        return self._ask(job | {"log": str(log)})["pid"], log

    def wait(self, pid: int) -> dict:
        """Reap the child: {killed: by a signal, code: its exit status}."""
        return self._ask({"wait": pid})

    def run(self, *argvs: list[str]) -> tuple[dict, float, str]:
        """Run to completion: (status, seconds from fork to exit, log text)."""
        started = time.perf_counter()
        pid, log = self.start(*argvs)
        status = self.wait(pid)
        return status, time.perf_counter() - started, log.read_text()

    def killed_after(self, delay: float, *argvs: list[str]) -> dict:
        """Start a job and SIGKILL it ``delay`` seconds later (if it is still running)."""
        pid, _ = self.start(*argvs)
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)  # a child that has ended is a zombie until reaped: no error
        return self.wait(pid)

    def killed_in_commits(self, root: Path, delay: float, *argvs: list[str]) -> dict:
        """Start a job and SIGKILL it ``delay`` seconds after its first table commit appears."""
        before = manifests(root)
        pid, _ = self.start(*argvs)
        while running(pid) and not manifests(root) - before:
            time.sleep(0.002)
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        return self.wait(pid)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def running(pid: int) -> bool:
    """Whether a child has not exited yet (an exited, unreaped child is a zombie: state Z)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2] != "Z"


_SERVER: list[Forker] = []


def shared_forker(tmp_path_factory) -> Forker:
    """One warm process for the whole session (the crash and concurrency tests share it)."""
    if not _SERVER:
        _SERVER.append(Forker(tmp_path_factory.mktemp("forker")))
        atexit.register(_SERVER[0].close)
    return _SERVER[0]


@pytest.fixture(scope="module")
def forker(tmp_path_factory) -> Forker:
    return shared_forker(tmp_path_factory)


def kill_points(duration: float, seed: int, trials: int = TRIALS) -> list[float]:
    """``trials`` delays in [0, duration]: one uniform point in each equal slice, shuffled."""
    rng = random.Random(seed)
    points = [duration * (i + rng.random()) / trials for i in range(trials)]
    rng.shuffle(points)
    return points


def manifests(root: Path) -> set[Path]:
    """The committed table versions under ``root``/.mem."""
    return set((root / ".mem" / "lance").glob("*.lance/_versions/*.manifest"))


def mem_argv(root: Path, *argv: str) -> list[str]:
    return ["--workspace", str(root), *argv]


# ------------------------------------------------------------------------------------- mem index

RUNS, STEPS_PER_RUN = 3, 9


def build_corpus(root: Path) -> Workspace:
    """The small workspace plus 3 generated runs of 9 steps and 4 events each (33 steps)."""
    ws = build_workspace(root)
    words = ["Satake", "Hecke", "Iwahori", "spherical", "parahoric", "unramified", "Whittaker",
             "Jacquet", "Bernstein", "Kazhdan", "Lusztig", "Macdonald"]
    for r in range(RUNS):
        run = f"gen-{r}"
        ws.add_run(run, [make_step(f"g{r}-{i}", statement=f"the {words[i]} {words[(i + r) % 12]} "
                                   f"lemma {r}.{i} for GL{i + 2} over Q_p", parents=(f"g{r}-{i - 1}",)
                                   if i else ()) for i in range(STEPS_PER_RUN)])
        ws.write_events(run, [{"time": f"2026-10-17T0{k}:00:00Z", "actor": f"A{k}", "kind": "return",
                               "ids": [f"g{r}-{2 * k}", f"g{r}-{2 * k + 1}"],
                               "text": f"returned {words[k]} steps"} for k in range(4)])
    return ws


def change_corpus(ws: Workspace) -> set[str]:
    """The 'new' state: ~30% of statements rewritten (with the word quokka), two steps added, one
    removed, two events appended, one source changed. Returns the global ids holding quokka."""
    marked = set()
    for r in range(RUNS):
        run = f"gen-{r}"
        tree = ws.tree(run)
        for i, step in enumerate(tree["steps"]):
            if (i + r) % 3 == 0:
                step["statement"] += f" quokka variant {r}.{i}"
                marked.add(f"{run}/{step['id']}")
        ws.save_tree(run, tree)
    ws.add_step("gen-0", make_step("g0-new1", statement="a new quokka lemma on Bernstein centres"))
    ws.add_step("gen-1", make_step("g1-new2", statement="another quokka statement, Hecke algebras"))
    marked |= {"gen-0/g0-new1", "gen-1/g1-new2"}
    tree = ws.tree("gen-2")
    tree["steps"] = [s for s in tree["steps"] if s["id"] != "g2-8"]
    ws.save_tree("gen-2", tree)
    marked.discard("gen-2/g2-8")
    events = ws.events("gen-1")
    events += [{"time": "2026-10-18T00:00:00Z", "actor": "A9", "kind": "audit", "ids": ["g1-1"],
                "text": "quokka audit: pass"},
               {"time": "2026-10-18T01:00:00Z", "actor": "root", "kind": "checkpoint", "ids": [],
                "text": "round 3"}]
    ws.write_events("gen-1", events)
    tree = ws.tree("alpha")
    tree["sources"][0]["origin"] = "https://example.org/d1-v2"
    ws.save_tree("alpha", tree)
    return marked


def index_state(root: Path, location=None) -> dict:
    """What a reader sees: meta.json's versions, and each table's rows (gid -> content hash) at
    those versions; plus each table's latest version (ahead of meta.json after a torn build).
    ``location``: where the index is, when not ``root``/.mem (an object store)."""
    from mem_retrieval.indexers import store

    where = location or root / ".mem"
    meta = store.read_meta(where)
    db = store.connect(where)
    tables, latest = {}, {}
    for name in ("steps", "events", "sources"):
        table = store.open_table(db, name)
        latest[name] = table.version
        table.checkout(meta["versions"][name])
        data = table.search().select(["gid", "content_hash"]).limit(100_000).to_arrow()
        tables[name] = dict(zip(data["gid"].to_pylist(), data["content_hash"].to_pylist()))
    return {"versions": meta["versions"], "tables": tables, "latest": latest}


def workspace_files(root: Path) -> dict[str, bytes]:
    """Every file of the workspace outside .mem/, with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".mem" not in p.relative_to(root).parts}


def quokka_hits(root: Path) -> tuple[set[str], set[str]]:
    """What a search sees: every step (all pages) and every event holding the word quokka."""
    from mem_retrieval.memory import Memory
    from mem_retrieval.retrieval.query import ArchiveQuery, Filters

    memory = Memory.open(root)
    steps = memory.retriever.ranked(ArchiveQuery("quokka", strategy="bm25"))
    events = memory.retriever.searcher.rank_events("quokka", Filters())
    return {c.gid for c in steps}, {c.gid for c in events}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, forker):
    """The old state indexed, the new files, both states as a reader sees them, and D."""
    base = tmp_path_factory.mktemp("corpus")
    old = build_corpus(base / "old").root
    status, _, log = forker.run(mem_argv(old, "index", "--no-progress"))
    assert status["code"] == 0, log
    new = base / "new"
    copy_workspace(old, new)
    marked = change_corpus(Workspace(new))
    changed = {str(p.relative_to(new)): p.read_bytes() for p in new.rglob("*")
               if p.is_file() and ".mem" not in p.parts
               and (not (old / p.relative_to(new)).exists()
                    or (old / p.relative_to(new)).read_bytes() != p.read_bytes())}
    reference = base / "reference"
    copy_workspace(new, reference)
    before = manifests(reference)
    status, duration, log = forker.run(mem_argv(reference, "index", "--no-progress"))
    assert status["code"] == 0, log
    first_commit = min(p.stat().st_mtime for p in manifests(reference) - before)
    commits = (reference / ".mem" / "meta.json").stat().st_mtime - first_commit
    return {"old": old, "changed": changed, "marked": marked, "duration": duration,
            "commits": max(commits, 0.01), "old_state": index_state(old),
            "new_state": index_state(reference)}


@pytest.mark.slow
def test_index_killed_at_20_random_points_leaves_old_or_new_and_the_next_run_completes(
        corpus, forker, tmp_path):
    """10 kills at uniform points of [0, D]; since the table commits and the meta.json write take
    only the last ~10% of D, 10 more kills at uniform points of the commit window (timed from the
    first commit seen on disk). After each: a reader sees exactly the old rows or exactly the new
    ones (per table, at the versions meta.json pins), searches agree, and the next run completes."""
    old_state, new_state = corpus["old_state"], corpus["new_state"]
    assert old_state["tables"] != new_state["tables"]
    for name in ("steps", "events", "sources"):  # every table has real work in the new state
        assert old_state["tables"][name] != new_state["tables"][name], name
    outcomes = []
    uniform = kill_points(corpus["duration"], seed=20, trials=TRIALS // 2)
    in_commits = kill_points(corpus["commits"] * 1.2, seed=21, trials=TRIALS - len(uniform))
    for trial, (delay, during_commits) in enumerate([(d, False) for d in uniform]
                                                    + [(d, True) for d in in_commits]):
        root = tmp_path / f"trial{trial}"
        copy_workspace(corpus["old"], root)
        for relative, data in corpus["changed"].items():
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_bytes(data)
        files = workspace_files(root)
        argv = mem_argv(root, "index", "--no-progress")
        status = (forker.killed_in_commits(root, delay, argv) if during_commits
                  else forker.killed_after(delay, argv))
        seen = index_state(root)
        steps, events = quokka_hits(root)
        if seen["tables"] == old_state["tables"]:
            assert seen["versions"] == old_state["versions"] and (steps, events) == (set(), set())
            outcome = "torn" if seen["latest"] != seen["versions"] else "old"
        else:
            assert seen["tables"] == new_state["tables"], f"trial {trial} after {delay:.2f} s: a mix"
            assert all(seen["versions"][n] > old_state["versions"][n] for n in seen["versions"])
            assert (steps, events) == (corpus["marked"], {"gen-1#5"})
            outcome = "new"
        assert status["killed"] or (status["code"] == 0 and outcome == "new"), status
        outcomes.append(outcome)
        done, _, log = forker.run(mem_argv(root, "index", "--no-progress"))
        assert done["code"] == 0, log
        after = index_state(root)
        assert after["tables"] == new_state["tables"] and after["latest"] == after["versions"]
        assert quokka_hits(root) == (corpus["marked"], {"gen-1#5"})
        assert workspace_files(root) == files  # the index writes only inside .mem/
    print(f"\nindex kill trials: {len(outcomes)} (D = {corpus['duration']:.2f} s, commits "
          f"{corpus['commits']:.2f} s): "
          f"{outcomes.count('old')} old, {outcomes.count('torn')} torn (tables committed, meta.json "
          f"not yet), {outcomes.count('new')} new")



# ------------------------------------------------------------------------ archive-insert, core-set

INSERTS = 12


@pytest.fixture(scope="module")
def writers(tmp_path_factory, forker):
    """A workspace with 12 admissible steps to insert, and the measured duration of inserting them
    all and of 8 core-set calls."""
    root = tmp_path_factory.mktemp("writers") / "ws"
    ws = build_workspace(root)
    ws.add_run("lib", [make_step(f"s{i}", statement=f"step {i} worth keeping") for i in range(INSERTS)])
    probe = root.parent / "probe"
    copy_workspace(root, probe)
    status, insert_time, log = forker.run(*insert_argvs(probe))
    assert status["code"] == 0, log
    status, core_time, log = forker.run(*core_argvs(probe))
    assert status["code"] == 0, log
    return {"root": root, "insert_time": insert_time, "core_time": core_time}


def insert_argvs(root: Path) -> list[list[str]]:
    return [mem_argv(root, "archive-insert", f"lib/s{i}") for i in range(INSERTS)]


CORE_TEXTS = [f"audit lib/s{i} then s{i + 1}; portfolio round {i}" for i in range(8)]


def core_argvs(root: Path) -> list[list[str]]:
    return [mem_argv(root, "core-set", "alpha", "next", text) for text in CORE_TEXTS]


def library_gids(root: Path) -> list[str]:
    path = root / "solve" / "library.jsonl"
    data = path.read_bytes()
    assert data.endswith(b"\n")  # no torn last line
    return [entry.gid for entry in iter_library(path)]  # every line a valid SPEC §5 entry


@pytest.mark.slow
def test_archive_insert_killed_at_20_random_points_keeps_the_library_whole(writers, forker,
                                                                           tmp_path):
    expected = ["alpha/a1"] + [f"lib/s{i}" for i in range(INSERTS)]
    for trial, delay in enumerate(kill_points(writers["insert_time"], seed=22)):
        root = tmp_path / f"trial{trial}"
        copy_workspace(writers["root"], root)
        forker.killed_after(delay, *insert_argvs(root))
        gids = library_gids(root)
        assert gids == expected[:len(gids)], gids  # a prefix of the inserts, in order
        # the next run of the same inserts: those already there are refused, the rest go in
        status, _, log = forker.run(*insert_argvs(root))
        refused = log.count("is already in the library")
        assert status["code"] == (1 if refused else 0) and refused == len(gids) - 1, log
        assert library_gids(root) == expected


@pytest.mark.slow
def test_core_set_killed_at_20_random_points_keeps_core_md_whole_and_written_ahead(writers, forker,
                                                                                 tmp_path):
    for trial, delay in enumerate(kill_points(writers["core_time"], seed=23)):
        root = tmp_path / f"trial{trial}"
        copy_workspace(writers["root"], root)
        original = parse_core(root / "alpha" / "memory" / "core.md", "alpha").get("next")
        log = (root / "alpha" / "memory" / "events.jsonl").read_bytes()
        forker.killed_after(delay, *core_argvs(root))
        now = parse_core(root / "alpha" / "memory" / "core.md", "alpha")  # whole and valid
        assert [name for name, _ in now.fields] == ["phase", "portfolio", "open gaps", "next", "inputs"]
        events = list(iter_events(root / "alpha" / "memory" / "events.jsonl", "alpha"))  # all valid
        assert (root / "alpha" / "memory" / "events.jsonl").read_bytes().startswith(log)  # appended
        written = [e.text.removeprefix("core-set next: ") for e in events if e.kind == "checkpoint"]
        assert written == CORE_TEXTS[:len(written)]
        # write-ahead: core.md holds the last checkpoint's text, or the one before it (killed
        # between the event and the rename); never a text no event carries
        allowed = ([original] + written)[-2:]
        assert now.get("next") in allowed, (now.get("next"), allowed)
        status, _, log = forker.run(mem_argv(root, "core-set", "alpha", "next", "after the crash"))
        assert status["code"] == 0, log
        after = parse_core(root / "alpha" / "memory" / "core.md", "alpha")
        assert after.get("next") == "after the crash"
