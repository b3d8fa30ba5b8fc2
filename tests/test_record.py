"""`mem record RUN`: the design's Record step (check, admit what M2 allows and M3 does not forbid,
index) on the small workspace of conftest.py, whose steps are worked out by hand:

- alpha: a1 (already in the library), a2 proved/minor, a3 blocked/pass, a4 open and not audited
  (M2), a5 refuted/major but repaired. Admissible and new: a2, a3, a5.
- beta: b1 proved/pass, citing alpha/a1 (setting Qp, the run's own).

The crash trials (SIGKILL at 20 points) are in the slow part, with test_crash.py's warm forker."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import library_line, make_step, copy_workspace
from test_check import step_line
from mem_retrieval.memory import Memory
from mem_retrieval.records.errors import Refused
from mem_retrieval.records.parse import iter_library
from mem_retrieval.records.record import RecordRefused, plan_record
from mem_retrieval.records.workspace import Workspace as RecordsWorkspace
from mem_retrieval.configs import load_config

ALPHA_NEW = ["alpha/a2", "alpha/a3", "alpha/a5"]


def gids(workspace) -> list[str]:
    return [entry["run"] + "/" + entry["id"] for entry in workspace.library()]


def test_dry_run_plans_exactly_the_admissible_steps_and_writes_nothing(workspace, mem):
    before = workspace.library_path.read_bytes()
    code, out, err = mem("--json", "record", "alpha", "--dry-run")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert [a["id"] for a in data["admitted"]] == ALPHA_NEW
    assert [a["line"] for a in data["admitted"]] == [None, None, None]
    assert data["left_out"] == [{"id": "alpha/a4", "code": "M2",
                                 "reason": "status 'open' is not final (proved, refuted, blocked)"}]
    assert data["already"] == ["alpha/a1"] and data["dry_run"] is True and data["index"] is None
    assert workspace.library_path.read_bytes() == before
    assert not (workspace.root / ".mem").exists()


def test_record_admits_them_in_one_write_indexes_and_a_second_run_admits_nothing(workspace, mem):
    code, out, err = mem("record", "alpha")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "record alpha: admitted 3 steps, left out 1, 1 already in the library"
    assert lines[1:4] == ["admitted  alpha/a2 (proved, minor) → solve/library.jsonl:2",
                          "admitted  alpha/a3 (blocked, pass) → solve/library.jsonl:3",
                          "admitted  alpha/a5 (refuted, major) → solve/library.jsonl:4"]
    assert lines[4] == ("left out  alpha/a4: M2: status 'open' is not final (proved, refuted, "
                        "blocked)")
    assert lines[5].startswith("indexed: ")
    assert gids(workspace) == ["alpha/a1", *ALPHA_NEW]
    entries = workspace.library()
    assert entries[3]["repair"] == "input (b) restated" and entries[1]["grade"] == "minor"
    assert len({e["inserted"] for e in entries[1:]}) == 1  # one write, one time
    # the index knows them as library steps (search the library only, BM25: no model needed)
    memory = Memory.open(workspace.root)
    hits = memory.archive_hits("statement", run="alpha", library=True, strategy="bm25")
    assert sorted(h.id for h in hits) == ["alpha/a1", *ALPHA_NEW]
    before = workspace.library_path.read_bytes()
    code, out, _ = mem("--json", "record", "alpha")
    data = json.loads(out)
    assert code == 0 and data["admitted"] == [] and data["already"] == ["alpha/a1", *ALPHA_NEW]
    assert data["index"]["added"] == data["index"]["updated"] == data["index"]["removed"] == 0
    assert workspace.library_path.read_bytes() == before
    assert mem("check")[0] == 0


def test_record_says_an_admitted_step_whose_audit_failed_since_as_a_warning(workspace, mem):
    """alpha/a1 is in the library; its audit redone, it fails (major, not repaired): check says M2,
    and record said nothing at all (exit 0, "1 already in the library"): the agent never learnt."""
    tree = workspace.tree("alpha")
    tree["steps"][0]["audit"]["grade"] = "major"
    workspace.save_tree("alpha", tree)
    code, out, _ = mem("check", "alpha")
    said = [line for line in out.splitlines() if ": M2: " in line]
    assert code == 1 and len(said) == 1 and "alpha/a1" in said[0]
    code, out, err = mem("--json", "record", "alpha", "--dry-run")
    data = json.loads(out)
    assert code == 0 and data["warnings"][0] == said[0] and "alpha/a1" in data["already"]
    code, out, err = mem("record", "alpha")
    assert code == 0 and f"warning   {said[0]}" in out.splitlines()
    assert "alpha/a1" in [f"{e['run']}/{e['id']}" for e in workspace.library()]  # never removed by mem


def _return_not_utf8(ws) -> None:
    (ws.root / "alpha" / "returns").mkdir()
    (ws.root / "alpha" / "returns" / "A1.md").write_bytes(b"five steps\n\xff\xfe\n")
    ws.write_events("alpha", [*ws.events("alpha"), {
        "time": "2026-10-17T04:00:00Z", "actor": "A1", "kind": "return", "ids": [],
        "text": "returns/A1.md"}])


@pytest.mark.parametrize("break_it, code, where", [
    # M1: W promotes a4 (open in tree.json) to proved
    (lambda ws: ws.write_core("alpha", "## phase       x\n## portfolio   x\n## open gaps   x\n"
                              "## next        x\n## inputs      a4 proved\n"),
     "M1", "alpha/memory/core.md:5: M1: W says a4 proved, alpha/tree.json:"),
    # M1 through the library: L says a1 refuted, tree.json proved
    (lambda ws: ws.write_library([library_line("alpha", make_step("a1"), status="refuted")]),
     "M1", "solve/library.jsonl:1: M1: alpha/a1: the library says refuted"),
    # integrity: a parent naming nothing
    (lambda ws: ws.edit_step("alpha", "a2", parents=["a1", "zz9"]),
     "integrity", "step a2: parent 'zz9' resolves to nothing"),
    # M4: W over 2,000 tokens
    (lambda ws: ws.write_core("alpha", "## phase       " + "word " * 2100 + "\n"),
     "M4", "alpha/memory/core.md:1: M4: W is"),
    # unreadable input: a return the index would read whole is not UTF-8 (check passed it once,
    # and the Record step wrote the library before its index step failed)
    (lambda ws: _return_not_utf8(ws), "input", "alpha/returns/A1.md:2: input: not UTF-8 (byte 0xff"),
    # another run's folder lost its tree.json (memory/ kept): no index reads the workspace, so the
    # Record step wrote the library and then failed
    (lambda ws: (ws.root / "lost" / "memory").mkdir(parents=True), "input",
     "lost/tree.json: input: is missing: the run folder holds memory/ but not its record"),
])
def test_a_run_breaking_m1_m4_or_integrity_is_refused_listing_them(workspace, mem, break_it, code,
                                                                      where):
    break_it(workspace)
    before = workspace.library_path.read_bytes()
    status, out, err = mem("record", "alpha")
    expected = 2 if code == "input" else 1  # a file that cannot be read is bad input
    assert status == expected and out == ""
    lines = err.splitlines()
    assert lines[0].startswith(f"mem: record alpha refused: 1 violation ({code}: 1); nothing was admitted")
    assert lines[0].endswith({"input": "so it cannot be checked)", "M1": "they must agree first)",
                              "M4": "W is over its bound)", "integrity": "does not hold together)"}[code])
    assert len(lines) == 2 and where in lines[1]
    assert workspace.library_path.read_bytes() == before
    assert not (workspace.root / ".mem").exists()
    status, out, _ = mem("--json", "record", "alpha", "--dry-run")
    data = json.loads(out)
    assert status == expected and data["error"] == lines[0].removeprefix("mem: ")
    assert len(data["problems"]) == 2


def test_an_index_the_record_cannot_extend_refuses_it_before_it_writes(workspace, mem, tmp_path):
    """An index built with other text limits than the config's, or a corrupt meta.json: `record`
    wrote the library, then its index step failed (exit 2, "bad input", after a write)."""
    assert mem("index")[0] == 0
    before = workspace.library_path.read_bytes()
    (tmp_path / "limits.toml").write_text("[model]\nmax_chars = 1000\n")
    for dry in ((), ("--dry-run",)):  # the dry run as the run itself (it said "would admit 3 steps")
        status, out, err = mem("--config", str(tmp_path / "limits.toml"), "record", "alpha", *dry)
        assert (status, out) == (2, "") and "(text limits differ: index has {'model.max_chars': 2000}" in err
        assert err.endswith(" (record alpha refused: nothing was admitted)\n") and len(err.splitlines()) == 1
    (workspace.root / ".mem" / "meta.json").write_text("garbage")
    status, out, err = mem("record", "alpha")
    assert (status, out) == (2, "") and "is corrupt (unreadable meta.json)" in err
    assert err.endswith(" (record alpha refused: nothing was admitted)\n")
    assert workspace.library_path.read_bytes() == before


def test_an_index_step_that_fails_after_the_write_says_what_was_written(workspace, mem):
    assert mem("index")[0] == 0
    for data in (workspace.root / ".mem" / "lance" / "steps.lance" / "data").iterdir():
        data.write_bytes(b"")  # damaged: found once the index step reads the table
    status, out, err = mem("record", "alpha")
    assert (status, out) == (2, "")
    assert err.startswith("mem: record alpha: admitted 3 steps, left out 1, 1 already in the "
                          "library, written to the library; indexing it failed: ")
    assert err.rstrip().endswith("run `mem index --full`") and len(err.splitlines()) == 1
    assert gids(workspace) == ["alpha/a1", *ALPHA_NEW]  # the write stands
    status, _, err = mem("record", "alpha")  # nothing left to admit: nothing said written
    assert status == 2 and err.startswith("mem: record alpha: admitted 0 steps, left out 1, 4 already in "
                                          "the library; indexing it failed: ")
    assert mem("index", "--full")[0] == 0
    hits = Memory.open(workspace.root).archive_hits("statement", run="alpha", library=True,
                                                     strategy="bm25")
    assert sorted(h.id for h in hits) == ["alpha/a1", *ALPHA_NEW]


def test_another_runs_bad_input_the_index_step_may_read_refuses_it_before_it_writes(workspace, mem):
    """With no index yet, `record alpha` indexes every run: beta's broken log (which `check alpha`
    does not read) made it write the library and then exit 2."""
    log = workspace.root / "beta" / "memory" / "events.jsonl"
    mended = log.read_bytes()
    with log.open("a") as handle:
        handle.write("{not json\n")
    before = workspace.library_path.read_bytes()
    for argv in (("record", "alpha"), ("record", "alpha", "--dry-run")):
        status, out, err = mem(*argv)
        assert (status, out) == (2, "") and len(err.splitlines()) == 1
        assert err.startswith("mem: ") and "beta/memory/events.jsonl:2: " in err
        assert err.rstrip().endswith("(record alpha refused: nothing was admitted; its index step may "
                                     "read this file)")
        assert workspace.library_path.read_bytes() == before and not (workspace.root / ".mem").exists()
    log.write_bytes(mended)
    assert mem("record", "alpha")[0] == 0 and gids(workspace) == ["alpha/a1", *ALPHA_NEW]
    with log.open("a") as handle:  # an index now: the index step would read alpha alone, and the
        handle.write("{not json\n")  # library changed for no other run; still refused, as `mem index`
    assert mem("record", "alpha")[0] == 2 and mem("index")[0] == 2


def test_another_runs_file_with_several_problems_refuses_record_naming_each(workspace, mem):
    """`record alpha` refused by beta's tree.json named only its first problem (`mem index` names
    each, and `--json` lists them as "problems"): every one is said, the first with the refusal."""
    tree = workspace.root / "beta" / "tree.json"
    data = json.loads(tree.read_text())
    data["steps"].append(dict(data["steps"][0], id="b2", status="weird"))
    data["steps"][0]["kind"] = "bogus"
    tree.write_text(json.dumps(data, indent=1))
    status, out, err = mem("record", "alpha")
    lines = err.splitlines()
    assert (status, out, len(lines)) == (2, "", 2), err
    assert lines[0].endswith("(record alpha refused: nothing was admitted; its index step may read this "
                             "file)")
    assert all(line.startswith("mem: ") and "beta/tree.json:" in line for line in lines)
    status, out, _ = mem("--json", "record", "alpha", "--dry-run")
    assert status == 2 and len(json.loads(out)["problems"]) == 2
    assert len(mem("index")[2].splitlines()) == 2  # as `mem index` says them


def test_the_api_raises_the_refusal_with_its_violations(workspace):
    workspace.write_core("alpha", "## inputs      a4 proved\n")
    with pytest.raises(RecordRefused) as refused:
        Memory.open(workspace.root).record("alpha")
    assert [v.code for v in refused.value.violations] == ["M1"]
    assert isinstance(refused.value, Refused) and refused.value.exit_status == 1


def test_a_step_citing_a_library_step_its_setting_does_not_imply_is_left_out(workspace, mem):
    # gamma's library step holds over Fq((t)); beta's setting is Qp, which does not imply it (M3)
    workspace.write_library(workspace.library() + [library_line(
        "gamma", make_step("g1", setting="Fq((t))"))])
    workspace.add_step("beta", make_step("b2", parents=("gamma/g1",)))
    workspace.add_step("beta", make_step("b3", parents=("b1",)))
    code, out, err = mem("--json", "record", "beta", "--dry-run")
    assert code == 0, err
    data = json.loads(out)
    assert [a["id"] for a in data["admitted"]] == ["beta/b1", "beta/b3"]
    assert data["left_out"] == [{"id": "beta/b2", "code": "M3", "reason":
                                 "step b2 cites library step gamma/g1 (setting 'Fq((t))'), which this "
                                 "run's setting 'Qp' does not imply"}]


def test_a_cited_run_whose_tree_cannot_be_read_refuses_the_record_and_fails_check(workspace, mem):
    """gamma's tree.json narrowed g1 to Fq((t)) after its entry was written over Qp, then was damaged:
    M3 judged g1 by its entry, check said OK and record admitted beta/b2 into the library."""
    g1 = make_step("g1")
    workspace.add_run("gamma", [g1 | {"setting": "Fq((t))"}])
    workspace.write_library(workspace.library() + [library_line("gamma", g1)])
    workspace.add_step("beta", make_step("b2", parents=("gamma/g1",)))
    (workspace.root / "gamma" / "tree.json").write_text('{"run": "gamma", "steps": [')
    before = workspace.library_path.read_bytes()
    said = (f"beta/tree.json:{step_line(workspace, 'beta', 'b2')}: input: step b2 cites gamma/g1, whose "
            "run's gamma/tree.json cannot be read: M3 cannot judge it")
    code, out, _ = mem("check", "beta")
    assert code == 2 and said in out.splitlines()
    for argv in (("record", "beta", "--dry-run"), ("record", "beta")):
        code, out, err = mem(*argv)
        assert (code, out) == (2, "") and err.splitlines()[1:] == [f"mem: {said}"]
    assert workspace.library_path.read_bytes() == before


def test_a_step_citing_another_runs_step_its_setting_does_not_imply_is_left_out(workspace, mem):
    # gamma/g1 holds over Fq((t)) and is in no library: citing it from a Qp run transfers nothing
    workspace.add_run("gamma", [make_step("g1", setting="Fq((t))")])
    workspace.add_step("beta", make_step("b2", parents=("gamma/g1",)))
    code, out, err = mem("--json", "record", "beta", "--dry-run")
    assert code == 0, err
    data = json.loads(out)
    assert [a["id"] for a in data["admitted"]] == ["beta/b1"]
    assert data["left_out"] == [{"id": "beta/b2", "code": "M3", "reason":
                                 "step b2 cites step gamma/g1 (setting 'Fq((t))'), which this run's "
                                 "setting 'Qp' does not imply"}]


def test_a_step_resting_on_one_left_out_under_m3_is_left_out_too(workspace, mem):
    # b2 cites gamma/g1, which Qp does not imply (M3); b4 cites b3 cites beta/b2 (a global id of
    # its own run), b4 written first; b5 cites b1 alone
    workspace.write_library(workspace.library() + [library_line(
        "gamma", make_step("g1", setting="Fq((t))"))])
    workspace.add_step("beta", make_step("b4", parents=("b3",)))
    workspace.add_step("beta", make_step("b2", parents=("gamma/g1",)))
    workspace.add_step("beta", make_step("b3", parents=("b1", "beta/b2")))
    workspace.add_step("beta", make_step("b5", parents=("b1",)))
    code, out, err = mem("--json", "record", "beta", "--dry-run")
    assert code == 0, err
    data = json.loads(out)
    assert [a["id"] for a in data["admitted"]] == ["beta/b1", "beta/b5"]
    assert [(item["id"], item["code"], item["reason"]) for item in data["left_out"]] == [  # step order
        ("beta/b4", "M3", "step b4 cites b3, left out under M3"),
        ("beta/b2", "M3", "step b2 cites library step gamma/g1 (setting 'Fq((t))'), which this run's "
                          "setting 'Qp' does not imply"),
        ("beta/b3", "M3", "step b3 cites b2, left out under M3")]
    # archive-insert refuses what record leaves out, by the same rule (it admitted them: M2 alone)
    before = workspace.library_path.read_bytes()
    for gid, reason in (("beta/b2", "step b2 cites library step gamma/g1 (setting 'Fq((t))'), which "
                                     "this run's setting 'Qp' does not imply"),
                        ("beta/b4", "step b4 cites b3, left out under M3")):
        code, out, err = mem("archive-insert", gid)
        assert (code, out, err) == (1, "", f"mem: {gid} may not enter the library (M3): {reason}\n")
    assert workspace.library_path.read_bytes() == before
    assert mem("archive-insert", "beta/b5")[0] == 0


def test_a_step_another_run_leaves_out_under_m3_leaves_out_the_steps_citing_it_in_any_run(workspace, mem):
    """gamma/g2 cites zeta/z1, over Fq((t)), which gamma's Qp does not imply: gamma leaves g2 out
    (M3). delta/x1 cites gamma/g2, in no library: check said "not recorded yet", and record and
    archive-insert admitted x1, whose proof rests on the reuse M3 refused; so do delta/x2 (citing
    x1) and epsilon/e1 (citing delta/x1, a run further), whatever run cites them."""
    workspace.add_run("zeta", [make_step("z1", setting="Fq((t))")], setting="Fq((t))")
    workspace.add_run("gamma", [make_step("g1"), make_step("g2", parents=("zeta/z1", "g1"))])
    workspace.add_run("delta", [make_step("x1", parents=("gamma/g2",)), make_step("x2", parents=("x1",)),
                                make_step("x3", parents=("gamma/g1",))])
    workspace.add_run("epsilon", [make_step("e1", parents=("delta/x1",)),
                                  make_step("e2", parents=("delta/x3",))])
    m3 = "step g2 cites step zeta/z1 (setting 'Fq((t))'), which this run's setting 'Qp' does not imply"

    def left_out(run: str) -> list[tuple[str, str]]:
        code, out, err = mem("--json", "record", run, "--dry-run")
        assert code == 0, err
        return [(item["id"], item["reason"]) for item in json.loads(out)["left_out"]]

    assert left_out("gamma") == [("gamma/g2", m3)]
    assert left_out("delta") == [("delta/x1", "step x1 cites gamma/g2, which run gamma leaves out under M3"),
                                 ("delta/x2", "step x2 cites x1, left out under M3")]
    assert left_out("epsilon") == [("epsilon/e1", "step e1 cites delta/x1, which run delta leaves out under "
                                                  "M3")]
    code, out, _ = mem("check", "delta")  # a warning still (no library step is cited), saying why
    assert code == 0 and (f"M3: warning: step x1 cites step gamma/g2, which is not in the library (it may "
                          f"not be: M3 in run gamma: {m3})") in out
    before = workspace.library_path.read_bytes()
    code, out, err = mem("archive-insert", "delta/x1")
    assert (code, err) == (1, "mem: delta/x1 may not enter the library (M3): step x1 cites gamma/g2, which "
                              "run gamma leaves out under M3\n")
    assert workspace.library_path.read_bytes() == before
    for run in ("gamma", "delta", "epsilon"):  # what M3 allows is admitted
        assert mem("record", run)[0] == 0
    admitted = {e["id"] for e in workspace.library() if e["run"] in ("gamma", "delta", "epsilon")}
    assert admitted == {"g1", "x3", "e2"}


def test_runs_citing_each_other_in_a_circle_leave_out_what_rests_on_a_refused_reuse(workspace, mem):
    """gamma/g3 cites delta/e1, which cites gamma/g2, which cites zeta/z1 over Fq((t)) (refused in a
    Qp run): worked out run by run, delta was judged while gamma was half done, and g3 admitted."""
    workspace.add_run("zeta", [make_step("z1", setting="Fq((t))")], setting="Fq((t))")
    workspace.add_run("gamma", [make_step("g1"), make_step("g2", parents=("zeta/z1",)),
                                make_step("g3", parents=("delta/e1",))])
    workspace.add_run("delta", [make_step("e1", parents=("gamma/g2",))])
    for first in ("delta", "gamma"):  # whichever run is judged first
        code, out, _ = mem("--json", "record", first, "--dry-run")
        assert code == 0 and [i["id"] for i in json.loads(out)["left_out"]] == (
            ["delta/e1"] if first == "delta" else ["gamma/g2", "gamma/g3"])
    code, out, _ = mem("--json", "record", "gamma", "--dry-run")
    assert [(i["id"], i["reason"]) for i in json.loads(out)["left_out"]] == [
        ("gamma/g2", "step g2 cites step zeta/z1 (setting 'Fq((t))'), which this run's setting 'Qp' does not "
                     "imply"),
        ("gamma/g3", "step g3 cites delta/e1, which run delta leaves out under M3")]
    assert mem("archive-insert", "gamma/g3")[0] == 1 and mem("archive-insert", "gamma/g1")[0] == 0


def test_a_step_resting_on_a_citation_m3_cannot_judge_through_another_run_is_bad_input(workspace, mem):
    """delta/x1 cites gamma/g2 (in no library), which cites zeta/z1 in a run whose tree.json cannot be
    read: whether x1 may enter cannot be judged; archive-insert admitted it and check passed."""
    workspace.add_run("zeta", [make_step("z1", setting="Fq((t))")], setting="Fq((t))")
    workspace.add_run("gamma", [make_step("g2", parents=("zeta/z1",))])
    workspace.add_run("delta", [make_step("x1", parents=("gamma/g2",)), make_step("x2")])
    (workspace.root / "zeta" / "tree.json").write_text('{"run": "zeta", "steps": [')
    said = ("step x1 cites gamma/g2, which rests on a citation M3 cannot judge (it cites zeta/z1, whose "
            "run's zeta/tree.json cannot be read)")
    code, out, _ = mem("check", "delta")
    line = step_line(workspace, "delta", "x1")
    assert code == 2 and f"delta/tree.json:{line}: input: {said}" in out.splitlines()
    before = workspace.library_path.read_bytes()
    assert mem("archive-insert", "delta/x1") == (2, "", f"mem: delta/x1 may not enter the library (input): "
                                                        f"{said}\n")
    assert mem("record", "delta")[0] == 2 and workspace.library_path.read_bytes() == before
    workspace.add_run("eps", [make_step("e1", parents=("delta/x1",))])  # a run further: the first cause
    code, out, _ = mem("check", "eps")  # (said once, not each link's reason inside the next)
    line = step_line(workspace, "eps", "e1")
    assert code == 2 and (f"eps/tree.json:{line}: input: step e1 cites delta/x1, "
                          "which rests on a citation M3 cannot judge (it cites zeta/z1, whose run's "
                          "zeta/tree.json cannot be read)") in out.splitlines()


def test_a_chain_of_runs_longer_than_pythons_recursion_is_judged(workspace, mem):
    """Each run citing the next, 1,200 runs: worked out by recursion, check and record ended in a
    RecursionError; the last cites a step M3 refuses, so every one rests on it."""
    workspace.add_run("zeta", [make_step("z1", setting="Fq((t))")], setting="Fq((t))")
    for n in range(1200):
        cited = f"r{n + 1:04d}/s1" if n < 1199 else "zeta/z1"
        workspace.add_run(f"r{n:04d}", [make_step("s1", parents=(cited,))])
    code, out, _ = mem("--json", "record", "r0000", "--dry-run")
    assert code == 0 and json.loads(out)["left_out"][0]["reason"] == (
        "step s1 cites r0001/s1, which run r0001 leaves out under M3")
    code, out, err = mem("check")  # every run at once: r1199's citation is the one M3 error
    assert (code, err) == (1, "") and out.splitlines()[-1].startswith("1 violation (M3: 1)")


def test_a_citation_into_a_run_whose_tree_repeats_an_id_is_judged_under_m3_as_check_judges_it(
        workspace, mem):
    """delta's tree.json repeats an id: check reads it (naming the repeat) and judges beta/b7's
    citation of delta/x1 under M3; record admitted b7 and archive-insert wrote it (they read only
    trees without a fault, and so saw no cited step at all)."""
    workspace.add_run("delta", [make_step("x1", setting="Fq((t))"), make_step("y1"), make_step("y1")],
                      setting="Fq((t))")
    workspace.add_step("beta", make_step("b7", parents=("delta/x1",)))
    reason = "step b7 cites step delta/x1 (setting 'Fq((t))'), which this run's setting 'Qp' does not imply"
    assert f"M3: {reason}" in mem("check", "beta")[1]
    package = load_config(workspace.root).model.package
    plan = plan_record(RecordsWorkspace.open(workspace.root), "beta", package)
    assert {"id": "beta/b7", "code": "M3", "reason": reason} in [left.as_dict() for left in plan.left_out]
    code, _, err = mem("record", "beta", "--dry-run")  # the index step would read delta's tree.json
    assert code == 2 and "delta/tree.json" in err and "duplicate id 'y1'" in err
    before = workspace.library_path.read_bytes()
    assert mem("archive-insert", "beta/b7") == (1, "", f"mem: beta/b7 may not enter the library (M3): "
                                                       f"{reason}\n")
    assert workspace.library_path.read_bytes() == before
    # citing the id used twice: M3 judged the first of the two (admitted, or refused, by their order)
    workspace.add_step("beta", make_step("b8", parents=("delta/y1",)))
    for first, second in (("Fq((t))", "Qp"), ("Qp", "Fq((t))")):
        workspace.add_run("delta", [make_step("x1", setting="Fq((t))"), make_step("y1", setting=first),
                                    make_step("y1", setting=second)], setting="Fq((t))")
        assert mem("archive-insert", "beta/b8") == (1, "", "mem: beta/b8 may not enter the library "
                                                    "(integrity): it cites delta/y1, an id delta/tree.json "
                                                    "uses for two steps: M3 cannot judge it\n")
        out = mem("check")[1]  # check names the repeated id, and judges neither copy under M3
        assert "duplicate id 'y1'" in out and "b8 cites" not in out
        assert workspace.library_path.read_bytes() == before


def test_a_setting_the_ontology_cannot_judge_is_admitted_with_a_warning(workspace, mem):
    workspace.write_library(workspace.library() + [library_line(
        "gamma", make_step("g1", setting="some unknown world"))])
    workspace.add_step("beta", make_step("b2", parents=("gamma/g1",)))
    code, out, _ = mem("record", "beta", "--dry-run")
    assert code == 0
    assert "would admit  beta/b2 (proved, pass)" in out
    assert "warning   beta/tree.json:" in out and "unknown to the ontology" in out


def test_steps_another_writer_added_meanwhile_count_as_already_there(workspace):
    from mem_retrieval.records.record import admit, plan_record
    from mem_retrieval.records.workspace import Workspace
    from mem_retrieval.records.writes import archive_insert

    ws = Workspace.open(workspace.root)
    plan = plan_record(ws, "alpha", Memory.open(workspace.root).config.model.package)
    archive_insert(ws, "alpha/a3")                       # lands between the plan and the write
    done = admit(ws, plan)
    assert [e.gid for e in done.admitted] == ["alpha/a2", "alpha/a5"]
    assert [e.line for e in done.admitted] == [3, 4]
    assert done.already == ("alpha/a1", "alpha/a3")
    assert gids(workspace) == ["alpha/a1", "alpha/a3", "alpha/a2", "alpha/a5"]


def test_a_library_without_a_final_newline_and_a_stale_temp_file(workspace):
    from mem_retrieval.records.record import admit, plan_record
    from mem_retrieval.records.workspace import Workspace

    workspace.library_path.write_bytes(workspace.library_path.read_bytes().rstrip(b"\n"))
    stale = workspace.library_path.parent / ".library.jsonl.abc123.tmp"
    stale.write_text('{"half": ')                        # what a killed writer leaves
    ws = Workspace.open(workspace.root)
    done = admit(ws, plan_record(ws, "alpha", Memory.open(workspace.root).config.model.package))
    assert [e.line for e in done.admitted] == [2, 3, 4]
    assert [e.gid for e in iter_library(workspace.library_path)] == ["alpha/a1", *ALPHA_NEW]
    assert not stale.exists()


@pytest.mark.parametrize("argv, status, message", [
    (("record", "nosuch"), 1, "mem: no run 'nosuch' in"),
    (("record", "Not A Run"), 2, "mem: RUN 'Not A Run' is not a run slug"),
    (("record",), 2, "the following arguments are required: RUN"),
    # a name that cannot be a run is bad usage (2) for every command taking a run, not "not found"
    (("core-set", "Not A Run", "next", "x"), 2, "mem: RUN 'Not A Run' is not a run slug"),
    (("core-set", "nosuch", "next", "x"), 1, "mem: no run 'nosuch' in"),
    (("check", "NOPE"), 2, "mem: run 'NOPE' is not a run slug"),
    (("index", "NOPE"), 2, "mem: run 'NOPE' is not a run slug"),
    (("archive-insert", "NOPE/a1"), 2, "mem: ID 'NOPE/a1': run 'NOPE' is not a run slug"),  # as archive-get
    (("eval", "resume", "NOPE"), 2, "mem: run 'NOPE' is not a run slug"),
    (("eval", "reuse", "NOPE"), 2, "mem: run 'NOPE' is not a run slug"),
])
def test_unknown_runs_and_bad_usage(workspace, mem, argv, status, message):
    def files() -> dict:
        return {path: path.read_bytes() for path in workspace.root.rglob("*") if path.is_file()}

    before = files()
    code, out, err = mem(*argv)
    assert code == status and message in err and out == ""
    assert files() == before  # nothing written


def test_a_run_started_without_its_tree_is_refused_saying_what_makes_a_run(workspace, mem):
    """An agent starting a run wrote W before the Fix: `core-set` on a folder with no tree.json
    said only "no run", and nothing said a folder becomes a run by holding its tree.json."""
    (workspace.root / "gamma" / "memory").mkdir(parents=True)
    runs = "runs: alpha, beta"
    for argv in (("core-set", "gamma", "next", "x"), ("record", "gamma"), ("check", "gamma")):
        code, out, err = mem(*argv)
        assert code == 1 and out == "" and err == (
            f"mem: no run 'gamma' in {workspace.root}: gamma/ holds no tree.json (a run is a folder "
            f"holding its tree.json; {runs})\n")
    (workspace.root / "zeta" / "tree.json").mkdir(parents=True)  # there, but no file: not "holds none"
    code, _, err = mem("core-set", "zeta", "next", "x")
    assert code == 1 and err == (f"mem: no run 'zeta' in {workspace.root}: zeta/tree.json is not a file (a "
                                 f"run is a folder holding its tree.json; {runs})\n")
    code, _, err = mem("core-set", "delta", "next", "x")
    assert code == 1 and err == f"mem: no run 'delta' in {workspace.root} (a run is a folder holding its " \
                                f"tree.json; {runs})\n"
    assert not (workspace.root / "gamma" / "memory" / "core.md").exists()


def test_the_library_copy_is_byte_identical_to_archive_insert(workspace, tmp_path, mem):
    """record and archive-insert write the same SPEC §5 line for a step (but the time)."""
    other = tmp_path / "other"
    copy_workspace(workspace.root, other)
    assert mem("record", "alpha", "--dry-run")[0] == 0
    from mem_retrieval.records.record import admit, plan_record
    from mem_retrieval.records.workspace import Workspace
    from mem_retrieval.records.writes import archive_insert

    ws = Workspace.open(workspace.root)
    admit(ws, plan_record(ws, "alpha", Memory.open(workspace.root).config.model.package))
    alone = Workspace.open(other)
    for gid in ALPHA_NEW:
        archive_insert(alone, gid)

    def strip(path: Path) -> list[dict]:
        return [{k: v for k, v in json.loads(line).items() if k != "inserted"}
                for line in path.read_text().splitlines()]

    assert strip(workspace.library_path) == strip(other / "solve" / "library.jsonl")


# ------------------------------------------------------------------------------ SIGKILL trials (slow)

RECORDED = 12


@pytest.mark.slow
def test_record_killed_at_20_random_points_leaves_the_library_whole_and_a_rerun_completes(
        tmp_path_factory, tmp_path):
    """`mem record` killed at uniform points of its duration D: the library is the old one or the
    old one plus all 12 new lines (never a part, never a torn line); the rerun admits what is
    missing and indexes, so the library and the index end as after an uninterrupted run; a third
    run admits nothing."""
    from test_crash import kill_points, mem_argv, shared_forker

    forker = shared_forker(tmp_path_factory)
    base = tmp_path / "base"
    from conftest import build_workspace

    ws = build_workspace(base)
    ws.add_run("lib", [make_step(f"s{i}", statement=f"step {i} worth keeping") for i in range(RECORDED)])
    status, _, log = forker.run(mem_argv(base, "index", "--no-progress"))
    assert status["code"] == 0, log
    old = ws.library_path.read_bytes()
    probe = tmp_path / "probe"
    copy_workspace(base, probe)
    status, duration, log = forker.run(mem_argv(probe, "record", "lib"))
    assert status["code"] == 0 and "admitted 12 steps" in log, log
    expected = [e.gid for e in iter_library(ws.library_path)] + [f"lib/s{i}" for i in range(RECORDED)]
    outcomes = []
    for trial, delay in enumerate(kill_points(duration, seed=31)):
        root = tmp_path / f"trial{trial}"
        copy_workspace(base, root)
        forker.killed_after(delay, mem_argv(root, "record", "lib"))
        data = (root / "solve" / "library.jsonl").read_bytes()
        assert data.endswith(b"\n")
        now = [e.gid for e in iter_library(root / "solve" / "library.jsonl")]  # every line valid
        assert data == old or (data.startswith(old) and now == expected), (trial, delay, now)
        outcomes.append("old" if data == old else "new")
        status, _, log = forker.run(mem_argv(root, "--json", "record", "lib"))
        assert status["code"] == 0, log
        admitted = json.loads(log.splitlines()[-1])["admitted"]
        assert len(admitted) == (RECORDED if data == old else 0)
        assert [e.gid for e in iter_library(root / "solve" / "library.jsonl")] == expected
        memory = Memory.open(root)
        found = memory.archive_hits("worth keeping", run="lib", library=True, strategy="bm25")
        assert sorted(h.id for h in found) == sorted(expected[-RECORDED:])
        assert not list((root / "solve").glob(".library.jsonl.*.tmp"))
        again, _, log = forker.run(mem_argv(root, "--json", "record", "lib"))
        assert json.loads(log.splitlines()[-1])["admitted"] == []
        shutil.rmtree(root)  # each copy holds an index (and its model export): keep the disk free
    print(f"\nrecord kill trials: {len(outcomes)} (D = {duration:.2f} s): "
          f"{outcomes.count('old')} before the write, {outcomes.count('new')} after it")
