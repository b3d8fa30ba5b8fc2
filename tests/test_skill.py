"""The solve-maths-mem skill: `mem skill install` writes both layouts, and the examples in its files
run: every ``$ mem …`` line of a ``console`` block is run on a copy of the indexed example
workspace (each file on its own copy, in order) and must print what the block shows; every tool
call written ``name({...})`` must be a valid call of that tool (its arguments against the tool's
input schema) and must answer as the command that follows it does.

In an expected block, a line ``...`` stands for any lines (none included), ``...`` inside a line
for any text, and a decimal number for any number within 0.002 of it (scores). ``[exit N]`` as the
last line is the exit status (0 when absent)."""

from __future__ import annotations

import io
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from conftest import copy_workspace

from mem_retrieval.cli.calls import call
from mem_retrieval.cli.main import run as run_cli
from mem_retrieval.functions import BY_NAME
from mem_retrieval.memory import Memory
from mem_retrieval.skill import LAYOUTS, SKILL, skill_files

ROOT = Path(__file__).resolve().parent.parent
SKILL_DIR = ROOT / "api" / "skills" / SKILL
DOCS = ["SKILL.md", "references/memory-protocol.md"]
NUMBER = re.compile(r"\d+\.\d+")
TOOL_CALL = re.compile(r"^    (\w+)\((\{.*\})\)$", re.M)


def examples(text: str) -> list[tuple[list[str], list[str], int]]:
    """``(argv, expected lines, exit status)`` of every ``$ mem …`` line of the console blocks."""
    found = []
    for block in re.findall(r"```console\n(.*?)```", text, re.S):
        current = None
        for line in block.splitlines():
            if line.startswith("$ mem "):
                current = (shlex.split(line[len("$ mem "):]), [])
                found.append(current)
            else:
                current[1].append(line)
    out = []
    for argv, lines in found:
        status = 0
        if lines and re.fullmatch(r"\[exit (\d)\]", lines[-1]):
            status = int(lines.pop()[6])
        out.append((argv, lines, status))
    return out


def line_matches(expected: str, actual: str) -> bool:
    """``expected`` with ``...`` as any text and numbers within 0.002."""
    pattern = "".join(
        r"(\d+\.\d+)" if NUMBER.fullmatch(part) else ".*" if part == "..." else re.escape(part)
        for part in re.split(r"(\d+\.\d+|\.\.\.)", expected))
    found = re.fullmatch(pattern, actual)
    if not found:
        return False
    numbers = [float(n) for n in NUMBER.findall(re.sub(r"\.\.\.", "", expected))]
    return all(abs(float(a) - e) <= 0.002 for a, e in zip(found.groups(), numbers))


def lines_match(expected: list[str], actual: list[str]) -> bool:
    """Line by line; a line ``...`` matches any run of lines."""
    if not expected:
        return not actual
    if expected[0] == "...":
        return any(lines_match(expected[1:], actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and line_matches(expected[0], actual[0]) and lines_match(expected[1:], actual[1:])


def test_the_matcher_accepts_what_it_should_and_nothing_else():
    assert line_matches("1. a · 0.767", "1. a · 0.768") and not line_matches("1. a · 0.767", "1. a · 0.770")
    assert line_matches("W is ... of 2,000 tokens", "W is 1,234 of 2,000 tokens")
    assert not line_matches("page 1 of 3", "page 1 of 4")
    assert lines_match(["a", "...", "z"], ["a", "b", "c", "z"]) and lines_match(["a", "...", "z"], ["a", "z"])
    assert not lines_match(["a", "...", "z"], ["a", "b"]) and not lines_match(["a"], ["a", "b"])


@pytest.fixture(scope="module")
def copies(example, tmp_path_factory):
    """A fresh copy of the indexed example workspace per skill file."""
    def fresh(name: str) -> Path:
        root = tmp_path_factory.mktemp(name.replace("/", "-")) / "ws"
        copy_workspace(example.workspace.root, root, ignore=shutil.ignore_patterns("serve.sock"))
        return root

    return fresh


@pytest.mark.parametrize("doc", DOCS)
def test_the_examples_of_the_skill_files_run_as_shown(doc, copies, monkeypatch):
    monkeypatch.setenv("MEM_NO_SERVER", "1")
    root = copies(doc)
    text = (SKILL_DIR / doc).read_text(encoding="utf-8")
    cases = examples(text)
    assert len(cases) >= 4
    commands = set()
    for argv, expected, status in cases:
        out, err = io.StringIO(), io.StringIO()
        code = run_cli(["--workspace", str(root), *argv], out=out, err=err)
        shown = (out.getvalue() + err.getvalue()).splitlines()
        assert (code, lines_match(expected, shown)) == (status, True), \
            f"$ mem {shlex.join(argv)}\n--- shown:\n" + "\n".join(shown)
        commands.add(argv[0])
    if doc.endswith("memory-protocol.md"):  # every function has its example
        assert commands == {f.command for f in BY_NAME.values()}


def test_the_tool_calls_in_the_protocol_are_valid_and_answer_as_their_commands(copies):
    """Each ``tool({...})`` line: its arguments are valid for the tool's schema, and the call
    answers with the text the command example after it shows (same function, same arguments)."""
    jsonschema = pytest.importorskip("jsonschema")
    root = copies("tool-calls")
    text = (SKILL_DIR / "references" / "memory-protocol.md").read_text(encoding="utf-8")
    calls = TOOL_CALL.findall(text)
    assert {name for name, _ in calls} == set(BY_NAME)
    memory = Memory.open(root)
    for name, arguments in calls:
        given = json.loads(arguments)
        jsonschema.validate(given, BY_NAME[name].input_schema())
        try:
            answer = call(memory, name, given)
        except Exception as error:  # a refusal shown in the doc (archive_insert of A5-10)
            assert getattr(error, "exit_status", None) == 1, (name, error)
            continue
        assert answer.text and answer.data, name


def test_skill_install_writes_both_layouts_and_refuses_to_overwrite_an_edit(tmp_path, mem):
    code, out, err = mem("--json", "skill", "install", str(tmp_path))
    assert code == 0, err
    files = skill_files()
    assert set(files) == {"SKILL.md", "references/memory-protocol.md", "scripts/mem.py"}
    written = {str(tmp_path / layout / SKILL / name) for layout in LAYOUTS for name in files}
    assert set(json.loads(out)["written"]) == written and json.loads(out)["unchanged"] == []
    for layout in LAYOUTS:
        for name, content in files.items():
            assert (tmp_path / layout / SKILL / name).read_text(encoding="utf-8") == content
    assert (tmp_path / ".claude" / "skills" / SKILL / "SKILL.md").read_text() == \
        (SKILL_DIR / "SKILL.md").read_text()
    code, out, _ = mem("--json", "skill", "install", str(tmp_path))  # again: nothing to write
    again = json.loads(out)
    assert code == 0 and again["written"] == [] and set(again["unchanged"]) == written
    edited = tmp_path / ".agents" / "skills" / SKILL / "SKILL.md"
    edited.write_text("my own notes\n")
    code, _, err = mem("skill", "install", str(tmp_path))
    assert code == 1 and f"{edited} exists with other text" in err
    assert edited.read_text() == "my own notes\n"
    # the command the refusal names runs as written (it lacked the folder, which the command needs)
    suggested = shlex.split(err.rstrip().rsplit("(`", 1)[1].removesuffix("`)"))
    assert suggested == ["mem", "skill", "install", str(tmp_path), "--force"]
    code, out, _ = mem(*suggested[1:])
    assert code == 0 and out.splitlines() == [f"wrote {edited}",
                                              "skill solve-maths-mem: 1 file written, 5 unchanged"]
    assert edited.read_text() == files["SKILL.md"]


@pytest.mark.parametrize("in_the_way", ["file for a folder", "folder for a file"])
def test_skill_install_writes_both_layouts_or_neither(tmp_path, mem, in_the_way):
    if in_the_way == "file for a folder":
        (tmp_path / ".agents").write_text("")
        blocked = f"{tmp_path / '.agents'} is a file, not a folder"
    else:
        (tmp_path / ".agents" / "skills" / SKILL / "SKILL.md").mkdir(parents=True)
        blocked = f"{tmp_path / '.agents' / 'skills' / SKILL / 'SKILL.md'} is a folder"
    before = sorted(p for p in tmp_path.rglob("*"))
    for extra in ((), ("--force",)):
        code, out, err = mem("skill", "install", str(tmp_path), *extra)
        assert (code, out) == (1, "") and err.count("\n") == 1 and blocked in err
        assert sorted(p for p in tmp_path.rglob("*")) == before  # the .claude layout neither


def test_skill_install_that_cannot_write_a_layout_writes_neither(tmp_path, mem):
    """`.agents` a link to nowhere: the .claude layout was written whole, then the .agents one
    failed. The folders are tried first; nothing is written, and the folders made are removed."""
    (tmp_path / ".agents").symlink_to(tmp_path / "gone" / "agents")
    before = sorted(tmp_path.rglob("*"))
    code, out, err = mem("skill", "install", str(tmp_path))
    assert (code, out) == (2, "") and err == (f"mem: cannot write {tmp_path / '.agents'}: File exists "
                                              "(nothing was written)\n")
    assert sorted(tmp_path.rglob("*")) == before
    (tmp_path / ".agents").unlink()
    scripts = tmp_path / ".agents" / "skills" / SKILL / "scripts"
    scripts.parent.mkdir(parents=True)
    scripts.symlink_to("/proc/self")  # a folder no file can be made in, named as the folder
    before = sorted(tmp_path.rglob("*"))
    code, out, err = mem("skill", "install", str(tmp_path))
    assert (code, out) == (2, "") and err.startswith(f"mem: cannot write {scripts / 'mem.py'}: ")
    assert err.endswith(" (nothing was written)\n") and sorted(tmp_path.rglob("*")) == before
    scripts.unlink()
    assert mem("skill", "install", str(tmp_path))[0] == 0


def test_skill_install_on_a_disk_that_fills_writes_no_file_and_says_so_in_one_line(tmp_path):
    """A file size limit (as a full disk) stopped it at references/memory-protocol.md (12 KB): the
    .claude layout's SKILL.md stood written and the .agents one not, exit 1. Every file is written
    beside its place first, and put in place only when all are: nothing is left, one line, exit 2."""
    import resource
    import subprocess
    import sys

    target = tmp_path / "dir"
    target.mkdir()
    done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "skill", "install", str(target)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (10_000, 10_000)))
    memory_protocol = target / ".claude" / "skills" / SKILL / "references" / "memory-protocol.md"
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"mem: cannot write {memory_protocol}: File too large (nothing was written)\n"
    assert list(target.rglob("*")) == []


def test_skill_install_needs_a_folder(tmp_path, mem):
    code, _, err = mem("skill", "install", str(tmp_path / "nope"))
    assert (code, err) == (2, f"mem: DIR {str(tmp_path / 'nope')!r} does not exist\n")
    (tmp_path / "file").write_text("x")
    code, _, err = mem("skill", "install", str(tmp_path / "file"))
    assert (code, err) == (2, f"mem: DIR {str(tmp_path / 'file')!r} is not a folder\n")
    code, out, err = mem("skill", "install", "")  # an unset variable: not the current folder
    assert (code, out, err) == (2, "", "mem: DIR is empty (give . for the current folder)\n")


def test_the_skill_front_matter_names_it():
    head = (SKILL_DIR / "SKILL.md").read_text(encoding="utf-8").split("---")[1]
    assert re.search(r"^name: solve-maths-mem$", head, re.M)
    assert re.search(r"^description: .{80,}$", head, re.M)


def test_the_skill_script_run_by_a_python_without_the_package_says_so_in_one_line(tmp_path):
    """`python scripts/mem.py` with a Python that lacks mem_retrieval (the system's, not the
    virtual environment's) ended in a traceback; it says which Python and what to do (exit 2).
    With the package it is `mem`."""
    import os
    import shutil
    import subprocess
    import sys

    from mem_retrieval.skill import skill_files

    script = tmp_path / "mem.py"
    script.write_text(skill_files()["scripts/mem.py"], encoding="utf-8")
    bare = subprocess.run([sys.executable, "-I", "-S", str(script), "--help"], capture_output=True,
                          text=True, timeout=60)  # -S: no site-packages, so no mem_retrieval
    assert (bare.returncode, bare.stdout) == (2, "")
    assert bare.stderr == (f"mem.py: {sys.executable} has no mem_retrieval package: run this script with "
                           "the Python that `mem` was installed in, or call `mem` itself\n")
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("usage: mem")
    # a Python finding the package on its path but not what it needs: said so too (a traceback),
    # when it is imported (tokenizers, for check) as when a command first needs it (filelock)
    root = Path(__file__).resolve().parent.parent
    package = tmp_path / "path" / "mem_retrieval"
    shutil.copytree(root / "api", package, ignore=shutil.ignore_patterns("__pycache__"))
    for layer in ("records", "configs", "text", "indexers", "retrieval", "eval", "cli"):
        shutil.copytree(root / layer, package / layer, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(root / "examples" / "workspace", tmp_path / "ws")
    for argv in (["check"], ["index"], ["archive-get", "satake-two-levels/A5-7"]):
        half = subprocess.run([sys.executable, "-S", str(script), "-w", str(tmp_path / "ws"), *argv],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(tmp_path / "path"), "MEM_NO_SERVER": "1"})
        if argv[0] == "archive-get":  # reads the files alone: needs nothing past the standard library
            assert half.returncode == 0 and half.stdout.startswith("id         satake-two-levels/A5-7")
            continue
        assert (half.returncode, half.stdout) == (2, ""), (argv, half.stderr)
        assert re.fullmatch(rf"mem\.py: {re.escape(sys.executable)} has mem_retrieval, but not \w+, which "
                            r"it needs: run this script with the Python that `mem` was installed in, or "
                            r"call `mem` itself\n", half.stderr), (argv, half.stderr)
    # a package whose own module is missing (a broken install) is no missing package: raised as it is
    (package / "cli" / "main.py").write_text("import mem_retrieval.records.nothere\n")
    broken = subprocess.run([sys.executable, "-S", str(script), "--help"], capture_output=True, text=True,
                            timeout=60, env={**os.environ, "PYTHONPATH": str(tmp_path / "path")})
    assert broken.returncode == 1 and "has no mem_retrieval package" not in broken.stderr
    assert broken.stderr.splitlines()[-1] == ("ModuleNotFoundError: No module named "
                                              "'mem_retrieval.records.nothere'")
