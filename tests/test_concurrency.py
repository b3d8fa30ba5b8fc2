"""Concurrent readers and writers, as separate processes: searches running during a reindex all
succeed and each sees one consistent version (the old index or the new one, never a mix); two
`mem index` at once are serialised by the lock on .mem/index.lock."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import copy_workspace

from test_crash import build_corpus, change_corpus, index_state, running, shared_forker

pytestmark = pytest.mark.slow  # real processes: run with --slow (CI does)

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
READERS = 4


def look(memory) -> dict:
    """What one search session sees: the versions it is pinned to, the row count of each table at
    them, and every step and event holding the word quokka."""
    from mem_retrieval.retrieval.query import ArchiveQuery

    searcher = memory.retriever.searcher
    return {"versions": dict(searcher.versions),
            "counts": {n: searcher.table(n).count_rows() for n in ("steps", "events", "sources")},
            "steps": sorted(c.gid for c in memory.retriever.ranked(ArchiveQuery("quokka",
                                                                                 strategy="bm25"))),
            "events": sorted(hit.id for hit in memory.recall_search("quokka").hits)}


READER = f"""
import json, sys, time, traceback
from pathlib import Path
sys.path.insert(0, {str(TESTS)!r})
from mem_retrieval.memory import Memory
from test_concurrency import look

root, stop = Path(sys.argv[1]), Path(sys.argv[2])
held = Memory.open(root)  # opened before the reindex, kept through it
print(json.dumps({{"kind": "ready", "held": look(held)}}), flush=True)
deadline = time.time() + 300  # never outlive a failed test
while True:
    last = stop.exists() or time.time() > deadline
    started = time.time()
    try:
        fresh = look(Memory.open(root))  # a new search: reads meta.json again
        print(json.dumps({{"kind": "look", "start": started, "end": time.time(), "fresh": fresh,
                          "held": look(held)}}), flush=True)
    except BaseException:
        print(json.dumps({{"kind": "error", "error": traceback.format_exc()}}), flush=True)
    if last:
        break
    time.sleep(0.05)
"""


@pytest.fixture(scope="module")
def forker(tmp_path_factory):
    return shared_forker(tmp_path_factory)


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, forker):
    """The crash corpus indexed (the old state)."""
    root = tmp_path_factory.mktemp("concurrency") / "old"
    build_corpus(root)
    status, _, log = forker.run(["--workspace", str(root), "index", "--no-progress"])
    assert status["code"] == 0, log
    return root


def changed_copy(indexed: Path, folder: Path) -> tuple[Path, set[str]]:
    from conftest import Workspace

    root = folder / "ws"
    copy_workspace(indexed, root)
    return root, change_corpus(Workspace(root))


def wait_for(condition, what: str, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.mark.slow
def test_searches_in_other_processes_during_a_reindex_each_see_one_version(indexed, forker,
                                                                           tmp_path):
    """Four reader processes search in a loop (each search opens the index afresh, and each reader
    also keeps one session opened before the reindex) while a `mem index` process rebuilds it."""
    from mem_retrieval.memory import Memory

    root, marked = changed_copy(indexed, tmp_path)
    old = look(Memory.open(root))
    assert old["steps"] == [] and old["events"] == []
    stop = tmp_path / "stop"
    readers = [forker.start(python=READER, args=(str(root), str(stop))) for _ in range(READERS)]
    try:
        wait_for(lambda: all(log.exists() and '"ready"' in log.read_text() for _, log in readers),
                 "the readers")
        wait_for(lambda: all(log.read_text().count('"look"') >= 1 for _, log in readers),
                 "a first search in each reader")
        began = time.time()
        status, _, log = forker.run(["--workspace", str(root), "index", "--no-progress"])
        ended = time.time()
    finally:
        stop.touch()
        statuses = [forker.wait(pid) for pid, _ in readers]
    assert status["code"] == 0, log
    new = look(Memory.open(root))
    assert new["steps"] == sorted(marked) and new["events"] == ["gen-1#5"]
    assert new["counts"] != old["counts"] and new["versions"] != old["versions"]
    during = total = 0
    for status, (_, log) in zip(statuses, readers):
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
        assert status["code"] == 0 and all(entry["kind"] != "error" for entry in lines), lines
        assert lines[0] == {"kind": "ready", "held": old}
        states = []
        for entry in lines[1:]:
            assert entry["fresh"] in (old, new), entry  # one version, whole: never a mix
            assert entry["held"] == old  # a session opened before the reindex stays on its version
            states.append("new" if entry["fresh"] == new else "old")
            during += began <= entry["start"] and entry["end"] <= ended
            total += 1
        assert states == sorted(states, key=["old", "new"].index) and states[-1] == "new"
        assert "old" in states
    assert during >= 1, "no search ran while the index was rebuilt"
    print(f"\n{READERS} reader processes, 1 `mem index` process ({ended - began:.1f} s): "
          f"{total} searches, {during} of them wholly during the reindex; all saw one version")


@pytest.mark.slow
@pytest.mark.slow
def test_a_run_that_waited_for_the_lock_indexes_the_files_as_they_are_when_it_gets_it(
        indexed, forker, tmp_path):
    """A run read the files, then waited while another held the lock; what changed meanwhile
    (what that other run indexed, say) was undone by the rows it had read before."""
    from filelock import FileLock

    from conftest import Workspace
    from mem_retrieval.memory import Memory

    root = tmp_path / "ws"
    copy_workspace(indexed, root)
    lock = FileLock(str(root / ".mem" / "index.lock"))
    lock.acquire()
    try:
        pid, log = forker.start(["--workspace", str(root), "--json", "index", "--no-progress"])
        wait_for(lambda: log.exists() and "waiting" in log.read_text(), "the run to wait for the lock")
        marked = change_corpus(Workspace(root))  # while it waits
    finally:
        lock.release()
    assert forker.wait(pid)["code"] == 0, log.read_text()
    assert look(Memory.open(root))["steps"] == sorted(marked)


def test_two_index_runs_at_once_are_serialised_by_the_lock(indexed, forker, tmp_path):
    """The test holds .mem/index.lock, starts two `mem index` processes, sees both say they wait,
    releases it: one run then does all the work and the other, planning only after the first has
    committed, finds nothing left to do. Both succeed and the index is the new state."""
    from filelock import FileLock

    from mem_retrieval.memory import Memory

    root, marked = changed_copy(indexed, tmp_path)
    lock = FileLock(str(root / ".mem" / "index.lock"))
    lock.acquire()
    try:
        runs = [forker.start(["--workspace", str(root), "--json", "index", "--no-progress"])
                for _ in range(2)]
        wait_for(lambda: all(log.exists() and "waiting" in log.read_text() for _, log in runs),
                 "both runs to wait for the lock")
        assert all(running(pid) for pid, _ in runs)
    finally:
        lock.release()
    reports = []
    for pid, log in runs:
        assert forker.wait(pid)["code"] == 0, log.read_text()
        waiting, report = log.read_text().splitlines()
        assert waiting == "another `mem index` is running; waiting for it to finish"
        reports.append(json.loads(report))
    worked = [r for r in reports if r["added"] or r["updated"] or r["removed"]]
    idle = [r for r in reports if not (r["added"] or r["updated"] or r["removed"])]
    assert len(worked) == len(idle) == 1, reports
    assert worked[0]["embedded"] > 0 and idle[0]["embedded"] == 0
    assert worked[0]["added"] == 4 and worked[0]["removed"] == 1  # 2 steps + 2 events; 1 step
    state = index_state(root)
    assert state["latest"] == state["versions"]
    assert look(Memory.open(root))["steps"] == sorted(marked)


@pytest.mark.slow
def test_a_record_waiting_for_another_index_run_says_so_while_it_waits(indexed, forker, tmp_path):
    """`mem record`'s index step waits for a `mem index` holding .mem/index.lock. It said nothing
    until it ended (its notes were printed with the answer), so a person saw a command hang."""
    from filelock import FileLock

    root = tmp_path / "ws"
    copy_workspace(indexed, root)
    lock = FileLock(str(root / ".mem" / "index.lock"))
    lock.acquire()
    try:
        pid, log = forker.start(["--workspace", str(root), "record", "gen-1"])
        wait_for(lambda: log.exists() and "waiting" in log.read_text(), "record to say it waits")
        assert running(pid)
        said = log.read_text()
    finally:
        lock.release()
    assert said == "mem: another `mem index` is running; waiting for it to finish\n"
    assert forker.wait(pid)["code"] == 0, log.read_text()
    assert log.read_text().startswith(said + "record gen-1: admitted "), log.read_text()
