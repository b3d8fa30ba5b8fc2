"""What a release holds: the wheel ships every file an installed `mem` reads, and the source archive
runs its own tests and the README's first command (its conftest, the example workspace, the docs).
Built in a copy of the checkout's tracked files by setuptools' own build backend, as `python -m
build` and `pip` call it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = """
import sys
from setuptools import build_meta
out = sys.argv[1]  # build_meta rewrites sys.argv for setuptools' commands
sdist, wheel = build_meta.build_sdist(out), build_meta.build_wheel(out)
print("built:", sdist, wheel)
"""


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("needs the git checkout (its tracked files are what a release is built from)")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    source = tmp_path_factory.mktemp("source")
    for name in filter(None, tracked.decode().split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    for derived in ("examples/workspace/.mem/meta.json", "docs/bench/.mem/data.lance",
                    "tests/__pycache__/conftest.cpython-311.pyc"):  # an index, a cache: never shipped
        (source / derived).parent.mkdir(parents=True, exist_ok=True)
        (source / derived).write_text("x")
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-c", BUILD, str(out)], cwd=source, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    sdist, wheel = done.stdout.rsplit("built: ", 1)[1].split()
    return out / sdist, out / wheel, done.stdout + done.stderr


def test_the_wheel_ships_what_an_installed_mem_reads_and_builds_without_warnings(release):
    _, wheel, log = release
    names = set(zipfile.ZipFile(wheel).namelist())
    for wanted in ("mem_retrieval/configs/default.toml", "mem_retrieval/configs/settings.toml",
                   "mem_retrieval/schemas/eval-paging.json", "mem_retrieval/skills/solve-maths-mem/SKILL.md",
                   "mem_retrieval/skills/solve-maths-mem/scripts/mem.py", "mem_retrieval/cli/main.py"):
        assert wanted in names
    assert len([n for n in names if n.startswith("mem_retrieval/schemas/")]) == len(
        list((ROOT / "api" / "schemas").glob("*.json")))
    assert not [n for n in names if n.startswith(("tests/", "examples/")) or "__pycache__" in n]
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("/METADATA"))).decode()
    assert "Description-Content-Type: text/markdown" in metadata and "# mem — memory retrieval" in metadata
    assert "absent from the `packages` configuration" not in log  # data folders are listed as packages


def test_the_source_archive_holds_its_tests_conftest_example_and_docs(release):
    sdist, _, _ = release
    names = {name.split("/", 1)[1] for name in tarfile.open(sdist).getnames() if "/" in name}
    for wanted in ("tests/conftest.py", "tests/test_packaging.py", "MANIFEST.in", "README.md",
                   "examples/workspace/satake-two-levels/tree.json", "examples/workspace/eval/qrels",
                   "examples/workspace/solve/library.jsonl", "docs/paging-example/report.md"):
        assert wanted in names
    assert not [n for n in names if ".mem/" in n or "__pycache__" in n or n.endswith(".pyc")]
