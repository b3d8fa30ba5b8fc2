"""The README documents the command line as it is: every command, and every option of it, on the
command's own usage line (the table of commands or its usage block). A new option without docs
fails here, as sqlite-utils checks its own."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

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
