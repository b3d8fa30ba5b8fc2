"""The README documents the command line as it is: every command, and every option of it, on the
command's own usage line (the table of commands or its usage block). A new option without docs
fails here, as sqlite-utils checks its own."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from mem_retrieval.cli.main import build_parser

README = Path(__file__).resolve().parent.parent / "README.md"
GLOBAL = {"--workspace", "--json", "--config", "--help"}


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _commands(sub, (*path, name))


def _usage_lines(readme: str, path: tuple[str, ...]) -> list[str]:
    """README lines showing ``mem … COMMAND`` (global options may come between), each with the
    indented lines continuing it (a usage block wrapped over lines)."""
    pattern = re.compile(r"\bmem\b[^|`\n]*?\s" + r"\s+".join(map(re.escape, path)) + r"(?![\w-])")
    lines = readme.splitlines()
    found = []
    for i, line in enumerate(lines):
        if pattern.search(line):
            found.append(line)
            found += [more for more in _continued(lines[i + 1:])]
    return found


def _continued(lines: list[str]) -> Iterator[str]:
    for line in lines:
        if not re.match(r"\s{8,}[\[-]", line):
            return
        yield line


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings
            if option.startswith("--") and option not in GLOBAL}


def test_every_command_and_option_is_on_its_usage_line_in_the_readme():
    readme = README.read_text(encoding="utf-8")
    missing = []
    commands = list(_commands(build_parser()))
    assert len(commands) > 10  # the walk found the command tree
    for path, parser in commands:
        if any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
            continue  # a family (``mem eval``): its members are checked
        lines = _usage_lines(readme, path)
        if not lines:
            missing.append(f"mem {' '.join(path)}: no usage line")
            continue
        shown = " ".join(lines)
        missing += [f"mem {' '.join(path)} {option}" for option in sorted(_options(parser))
                    if not re.search(re.escape(option) + r"(?![\w-])", shown)]
    assert not missing, "undocumented in README.md:\n" + "\n".join(missing)


def test_the_global_options_are_documented():
    readme = README.read_text(encoding="utf-8")
    assert all(option in readme for option in GLOBAL - {"--help"})


def _field_table() -> dict[str, tuple[set[str], set[str]]]:
    """The README's table of record fields: record -> (required, optional) top-level names (the
    names inside parentheses are a field's own)."""
    section = README.read_text(encoding="utf-8").split("### Record fields", 1)[1].split("\n#", 1)[0]
    table = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("record", "---"):
            names = [set(re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", c))) for c in cells[1:]]
            table[cells[0].strip("`")] = (names[0], names[1])
    return table


def test_the_record_field_table_is_the_readers(tmp_path):
    """Every field the readers know is in the README's table, required ones as required: each
    left out of a valid record is bad input naming it, each optional one may be left out."""
    import json

    from mem_retrieval.records import parse
    from mem_retrieval.records.errors import InputError

    table = _field_table()
    known = {"tree.json": parse.TREE_FIELDS, "a step": parse.STEP_FIELDS, "an event": parse.EVENT_FIELDS,
             "a library entry": parse.LIBRARY_FIELDS}
    assert {name: set.union(*table[name]) for name in known} == known

    def in_file(obj: dict, name: str) -> Path:
        path = tmp_path / "r" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(obj) + "\n", encoding="utf-8")
        return path

    readers = {
        "a step": ({"id": "A1", "kind": "lemma", "statement": "s", "status": "open"},
                   lambda obj: parse.parse_step(obj, "r", "f", 1, ""), "f:1: "),
        "a library entry": ({"run": "r", "id": "A1", "kind": "lemma", "statement": "s", "status": "proved"},
                            lambda obj: parse.parse_library_entry(obj, "f", 1), "f:1: "),
        "an event": ({"time": "2026-10-17T03:42:00Z", "kind": "audit"},
                     lambda obj: list(parse.iter_events(in_file(obj, "e.jsonl"), "r")), ":1: "),
        "tree.json": ({"run": "r"}, lambda obj: parse.parse_tree(in_file(obj, "tree.json"), "r"), ":1: "),
    }
    for name, (minimal, read, at) in readers.items():
        required, optional = table[name]
        assert set(minimal) == required - {"missing", "failed_input"}, name
        read(minimal)
        for field in minimal:
            with pytest.raises(InputError, match=rf"{re.escape(at)}{field}: missing$"):
                read({k: v for k, v in minimal.items() if k != field})
    for name in ("a step", "a library entry"):
        minimal, read, _ = readers[name]
        for kind, field in (("dead_end", "missing"), ("error", "failed_input")):
            with pytest.raises(InputError, match=rf"^f:1: {field}: missing \(an? {kind} "):
                read(minimal | {"kind": kind})
            read(minimal | {"kind": kind, field: "x"})


def test_the_contents_list_every_section_in_order_each_linked_to_it():
    """The README's contents, a list of links, name its `## ` sections in order, each link the anchor
    GitHub makes of the heading (lower case, spaces as `-`, other punctuation dropped)."""
    readme = README.read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", readme, re.M)
    contents = readme.split("Contents:", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^- \[(.+)\]\(#([^)]*)\)$", contents, re.M)
    anchors = [re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings]
    assert listed == list(zip(headings, anchors))


def test_every_file_a_document_links_to_is_in_the_checkout():
    """A relative link in the README, the CHANGELOG or a file under docs/ names a file that exists
    (figures and history moved between them keep their links working)."""
    root = README.parent
    documents = [README, root / "CHANGELOG.md", *sorted((root / "docs").rglob("*.md"))]
    broken = []
    for document in documents:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", document.read_text(encoding="utf-8")):
            if "://" not in target and not (document.parent / target).exists():
                broken.append(f"{document.relative_to(root)}: {target}")
    assert not broken
    assert len(documents) >= 4  # the README, the CHANGELOG, docs/measurements.md, the paging report


def test_the_dependency_table_names_what_pyproject_declares_and_where():
    """The README's "Dependencies, and why" against pyproject.toml: a package the table lists without
    a qualifier is a dependency, one marked `(tests)` is in the `test` extra, one marked with an
    extra (`[distributed]`, `[mcp]`) is in that extra; and every dependency and extra package has its
    row. `tokenizers`, imported by the model's ONNX path, was listed but not declared (it came with
    sentence-transformers)."""
    import tomllib

    project = tomllib.loads((README.parent / "pyproject.toml").read_text(encoding="utf-8"))["project"]

    def names(requirements: list[str]) -> set[str]:
        return {re.match(r"[A-Za-z0-9_.-]+", r).group().lower() for r in requirements} - {"mem-retrieval"}

    extras = {extra: names(packages) for extra, packages in project["optional-dependencies"].items()}
    section = README.read_text(encoding="utf-8").split("## Dependencies, and why")[1].split("\n## ")[0]
    rows = re.findall(r"^\| ([^|]+) \| ", section, re.MULTILINE)[1:]  # past the header
    listed: dict[str, set[str]] = {}
    for row in rows:
        packages, _, qualifier = row.replace("\\", "").partition(" (")
        where = ("test" if "tests" in qualifier else
                 next((extra for extra in extras if f"[{extra}]" in qualifier), "dependencies"))
        listed.setdefault(where, set()).update(re.sub(r"\[.*?\]", "", p).strip().lower()
                                               for p in packages.split(","))
    assert listed["dependencies"] == names(project["dependencies"])
    for extra, packages in extras.items():
        assert listed.get(extra, set()) <= packages, extra
        assert packages <= listed.get(extra, set()) | listed["test"] | listed["dependencies"], extra


@pytest.mark.slow  # the example's whole evaluation, every strategy: run with --slow (CI does)
def test_the_shipped_paging_report_is_the_one_the_code_writes(example, tmp_path):
    """docs/paging-example/report.md, the README's sample of `--report`, is what `mem eval paging
    --report` writes on the example set today (it had stayed as an earlier tokenizer wrote it)."""
    import io

    from mem_retrieval.cli.main import run

    root = example.workspace.root
    code = run(["--workspace", str(root), "eval", "paging", "--queries", str(root / "eval" / "queries.jsonl"),
                "--qrels", str(root / "eval" / "qrels"), "--report", str(tmp_path / "report")],
               out=io.StringIO(), err=io.StringIO())
    assert code == 0
    shipped = Path(__file__).resolve().parent.parent / "docs" / "paging-example" / "report.md"
    assert (tmp_path / "report" / "report.md").read_text() == shipped.read_text()
