"""A generated battery of bad input, each case through `mem index`: one line naming the file, the line
and the field; exit status 2; never a traceback; nothing in `.mem/` changed. Then what is *not* bad
input (empty logs, dangling parents, a 20 MB statement, a million-line log), and property tests:
valid records round-trip through the parsers, and mutated bytes give a record or an InputError,
never another exception.

tests/test_bad_input.py holds 16 hand-written cases; the cases here are generated from small tables
(each step field × wrong values, malformed JSON at each nesting level, …) and do not repeat them. The
expected line of a tree.json case comes from the layout the case writes (one source or step per
line), not from the parser."""

from __future__ import annotations

import io
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import Workspace, build_workspace, library_line, make_step, copy_workspace
from mem_retrieval.cli.main import run as run_cli
from mem_retrieval.records.errors import InputError
from mem_retrieval.records.parse import (Malformed, event_path, field_line, iter_events, iter_library,
                                         parse_tree)
from mem_retrieval.records.types import EVENT_KINDS, GRADES, KINDS, STATUSES
from test_bad_input import snapshot

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------- writing the damaged files

def layout(tree: object) -> tuple[str, dict[str, int]]:
    """tree.json text with each top-level key, each source and each step on a line of its own, and
    the line of each (``run``, ``fix``, ``sources[0]``, ``steps[3]``, …)."""
    if not isinstance(tree, dict):
        return json.dumps(tree) + "\n", {}
    lines, where = ["{"], {}
    items = list(tree.items())
    for n, (key, value) in enumerate(items):
        comma = "," if n < len(items) - 1 else ""
        where[key] = len(lines) + 1
        if key in ("sources", "steps") and isinstance(value, list):
            lines.append(f"{json.dumps(key)}: [")
            for i, element in enumerate(value):
                where[f"{key}[{i}]"] = len(lines) + 1
                lines.append(json.dumps(element) + ("," if i < len(value) - 1 else ""))
            lines.append("]" + comma)
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n", where


def save_tree(ws: Workspace, run: str, tree: object) -> dict[str, int]:
    text, where = layout(tree)
    (ws.root / run / "tree.json").write_text(text, encoding="ascii")
    return where


def edit_tree(change: Callable[[dict], object], replace: bool = False) -> Callable:
    """A damage: ``change(tree)`` edits alpha's tree in place (or, with ``replace``, returns the
    tree to write instead)."""

    def damage(ws: Workspace) -> dict[str, int]:
        tree = ws.tree("alpha")
        replaced = change(tree)
        return save_tree(ws, "alpha", replaced if replace else tree)

    return damage


def edit_tree_text(change: Callable[[list[str], dict[str, int]], None]) -> Callable:
    """A damage of alpha's tree.json text: ``change(lines, where)`` edits the laid-out lines."""

    def damage(ws: Workspace) -> dict[str, int]:
        text, where = layout(ws.tree("alpha"))
        lines = text.split("\n")
        change(lines, where)
        data = "\n".join(lines).encode("utf-8", "surrogateescape")  # \udce9 writes the byte 0xe9
        (ws.root / "alpha" / "tree.json").write_bytes(data)
        return where

    return damage


def inject(at: str, old: str, new: str) -> Callable:
    """Replace ``old`` by ``new`` on the line of ``at``."""

    def change(lines: list[str], where: dict[str, int]) -> None:
        number = where[at]
        assert old in lines[number - 1], (old, lines[number - 1])
        lines[number - 1] = lines[number - 1].replace(old, new, 1)

    return edit_tree_text(change)


def step_change(index: int, **changes) -> Callable:
    def change(tree: dict) -> None:
        tree["steps"][index].update(changes)

    return edit_tree(change)


def step_without(index: int, name: str) -> Callable:
    return edit_tree(lambda tree: tree["steps"][index].pop(name))


def audit_change(**changes) -> Callable:
    return edit_tree(lambda tree: tree["steps"][1]["audit"].update(changes))


def write_lines(path: Path, lines: list[bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(line + b"\n" for line in lines))


def event_line(**changes) -> bytes:
    event = {"time": "2026-10-18T00:00:00Z", "actor": "A1", "kind": "audit", "ids": ["a1"],
             "text": "pass"}
    event.update(changes)
    for name in [k for k, v in changes.items() if v is DROP]:
        del event[name]
    return json.dumps(event).encode()


DROP = object()


def append_event(raw: bytes | None = None, **changes) -> Callable:
    """A damage: a third line in alpha's events.jsonl (``raw`` bytes, or an event with changes)."""

    def damage(ws: Workspace) -> None:
        with ws.events_path("alpha").open("ab") as handle:
            handle.write((raw if raw is not None else event_line(**changes)) + b"\n")

    return damage


def replace_event(number: int, raw: bytes) -> Callable:
    def damage(ws: Workspace) -> None:
        lines = ws.events_path("alpha").read_bytes().split(b"\n")[:-1]
        lines[number - 1] = raw
        write_lines(ws.events_path("alpha"), lines)

    return damage


def library_entry(**changes) -> dict:
    entry = library_line("alpha", make_step("a1"))
    entry.update(changes)
    for name in [k for k, v in changes.items() if v is DROP]:
        del entry[name]
    return entry


def set_library(*lines: dict | bytes) -> Callable:
    def damage(ws: Workspace) -> None:
        write_lines(ws.library_path, [line if isinstance(line, bytes) else json.dumps(line).encode()
                                      for line in lines])

    return damage


def with_brief(text: str, prepare: Callable[[Workspace], None] = lambda ws: None) -> Callable:
    """A damage: prepare the run folder, then a brief event whose text is ``text``."""

    def damage(ws: Workspace) -> None:
        (ws.root / "alpha" / "briefs").mkdir(exist_ok=True)
        prepare(ws)
        append_event(kind="brief", text=text)(ws)

    return damage


def symlinked_briefs(ws: Workspace) -> None:
    outside = ws.root.parent / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "A1.md").write_text("a brief outside the run\n")
    (ws.root / "alpha" / "briefs").rmdir()
    os.symlink(outside, ws.root / "alpha" / "briefs")


def looping_brief(ws: Workspace) -> None:
    os.symlink(ws.root / "alpha" / "briefs" / "loop.md", ws.root / "alpha" / "briefs" / "loop.md")


def non_utf8_brief(ws: Workspace) -> None:
    (ws.root / "alpha" / "briefs" / "A1.md").write_bytes(b"line one\nline \xc3\x28 two\n")


def settings_toml(text: str | bytes) -> Callable:
    def damage(ws: Workspace) -> None:
        path = ws.root / "solve" / "settings.toml"
        path.write_bytes(text if isinstance(text, bytes) else textwrap.dedent(text).encode())

    return damage


def core_md(data: bytes) -> Callable:
    def damage(ws: Workspace) -> None:
        ws.core_path("alpha").write_bytes(data)

    return damage


# ---------------------------------------------------------------------------------------- the cases

@dataclass(frozen=True)
class Case:
    """Damage, then the one line expected: FILE:LINE: FIELD: …MESSAGE…; ``at`` is a line number or
    a key of the tree.json layout the damage wrote (``steps[1]``)."""

    name: str
    damage: Callable
    file: str
    at: int | str
    field: str | None
    message: str


TREE = "alpha/tree.json"
EVENTS = "alpha/memory/events.jsonl"
LIBRARY = "solve/library.jsonl"
SETTINGS = "solve/settings.toml"
A2 = 1  # alpha's steps[1] is a2: a lemma, proved, audited minor, parents a1 and d1

# each field of a step × a value of the wrong type or form
STEP_VALUES = [
    ("id", 7, "id", "must be a string, not a number"),
    ("id", "", "id", "must not be empty"),
    ("id", "a/9", "id", "contains '/'"),
    ("id", "a\tb", "id", "contains '\\t'"),
    ("id", "x" * 201, "id", "is 201 characters long (at most 200)"),
    ("kind", "Lemma", "kind", "'Lemma' is not one of lemma, dead_end, error"),
    ("kind", None, "kind", "must be a string, not null"),
    ("agent", 5, "agent", "must be a string, not a number"),
    ("statement", ["x"], "statement", "must be a string, not a list"),
    ("statement", "a\x00b", "statement", "contains a NUL byte"),
    ("statement", "lone \ud800 surrogate", "statement", "contains an unpaired surrogate \\ud800"),
    ("hyp", {"p": "odd"}, "hyp", "must be a list of strings, not an object"),
    ("hyp", [1], "hyp[0]", "must be a string, not a number"),
    ("hyp", ["p\x00"], "hyp[0]", "contains a NUL byte"),
    ("setting", 1.5, "setting", "must be a string, not a number"),
    ("parents", "a1", "parents", "must be a list of strings, not a string"),
    ("parents", ["a 1"], "parents[0]", "'a 1' contains ' '"),
    ("parents", ["Alpha/a1"], "parents[0]", "run 'Alpha' is not a run slug"),
    ("parents", ["alpha/"], "parents[0]", "step id must not be empty"),
    ("proof", True, "proof", "must be a string, not a boolean"),
    ("status", "done", "status", "'done' is not one of open, proved, refuted, blocked, stale"),
    ("audit", "minor", "audit", "must be a JSON object, not a string"),
    ("kind", "error", "failed_input", "missing"),  # an error step must say what input fails
]
AUDIT_VALUES = [
    ("grade", "A", "'A' is not one of pass, minor, major, error"),
    ("grade", None, "must be a string, not null"),
    ("repaired", "yes", "must be true or false, not a string"),
    ("by", 3, "must be a string, not a number"),
    ("score", 3, "unknown field"),
]

CASES: list[Case] = []
CASES += [Case(f"step-{field}={value!r}"[:60], step_change(A2, **{field: value}), TREE, f"steps[{A2}]",
               f"steps[{A2}].{where}", message) for field, value, where, message in STEP_VALUES]
CASES += [Case(f"audit-{field}={value!r}", audit_change(**{field: value}), TREE, f"steps[{A2}]",
               f"steps[{A2}].audit.{field}", message) for field, value, message in AUDIT_VALUES]
CASES += [Case(f"step-without-{field}", step_without(A2, field), TREE, f"steps[{A2}]",
               f"steps[{A2}].{field}", "missing") for field in ("id", "kind", "status")]
CASES += [Case("dead-end-without-missing", step_without(2, "missing"), TREE, "steps[2]",
               "steps[2].missing", "missing")]

# the tree's own fields, its fix and its sources
TOP_VALUES = [
    ("run", 5, "run", "must be a string, not a number"),
    ("run", "Alpha", "run", "'Alpha' is not a run slug"),
    ("run", "beta", "run", "'beta' does not match its folder 'alpha'"),
    ("date", 20261017, "date", "must be a string, not a number"),
    ("fix", [], "fix", "must be a JSON object, not a list"),
    ("sources", {}, "sources", "must be a list, not an object"),
    ("steps", {}, "steps", "must be a list, not an object"),
    ("notes", "x", "notes", "unknown field"),
]
CASES += [Case(f"tree-{key}={value!r}", edit_tree(lambda t, k=key, v=value: t.update({k: v})), TREE,
               key, field, message) for key, value, field, message in TOP_VALUES]
CASES += [
    Case("tree-without-run", edit_tree(lambda t: t.pop("run")), TREE, 1, "run", "missing"),
    Case("tree-is-a-list", edit_tree(lambda t: [t], replace=True), TREE, 1, None,
         "must be a JSON object, not a list"),
    Case("fix-checklist-string", edit_tree(lambda t: t["fix"].update(checklist="x")), TREE, "fix",
         "fix.checklist", "must be a list of strings, not a string"),
    Case("fix-unknown-field", edit_tree(lambda t: t["fix"].update(goal="x")), TREE, "fix",
         "fix.goal", "unknown field"),
    Case("source-is-a-string", edit_tree(lambda t: t["sources"].__setitem__(0, "d1")), TREE,
         "sources[0]", "sources[0]", "must be a JSON object, not a string"),
    Case("source-id-with-space", edit_tree(lambda t: t["sources"][0].update(id="d 1")), TREE,
         "sources[0]", "sources[0].id", "'d 1' contains ' '"),
    Case("source-without-id", edit_tree(lambda t: t["sources"][0].pop("id")), TREE, "sources[0]",
         "sources[0].id", "missing"),
    Case("source-unknown-field", edit_tree(lambda t: t["sources"][0].update(size=3)), TREE,
         "sources[0]", "sources[0].size", "unknown field"),
    Case("step-is-a-string", edit_tree(lambda t: t["steps"].__setitem__(A2, "a2")), TREE,
         f"steps[{A2}]", f"steps[{A2}]", "must be a JSON object, not a string"),
    Case("step-unknown-field", step_change(A2, proved_by="A7"), TREE, f"steps[{A2}]",
         f"steps[{A2}].proved_by", "unknown field"),
    Case("step-id-is-a-source-id", step_change(4, id="d1"), TREE, "steps[4]", "steps[4].id",
         "duplicate id 'd1' (already a source of this run)"),
    Case("step-id-repeated-later", step_change(4, id="a2"), TREE, "steps[4]", "steps[4].id",
         "duplicate id 'a2' (already a step of this run)"),
]

# malformed JSON at each nesting level of tree.json: the error is on the line of the damage
CASES += [
    Case("json-top-object", inject("run", '"run"', '@"run"'), TREE, "run", None, "invalid JSON"),
    Case("json-missing-colon", inject("date", '"date":', '"date"'), TREE, "date", None,
         "invalid JSON: Expecting ':' delimiter"),
    Case("json-fix-object", inject("fix", '{"problem"', '{problem'), TREE, "fix", None,
         "invalid JSON: Expecting property name enclosed in double quotes"),
    Case("json-sources-array", inject("sources", "[", "[@"), TREE, "sources", None, "invalid JSON"),
    Case("json-source-object", inject("sources[0]", '{"id"', '{"id" @'), TREE, "sources[0]", None,
         "invalid JSON"),
    Case("json-steps-array", inject("steps", "[", "[,"), TREE, "steps", None, "invalid JSON"),
    Case("json-first-step", inject("steps[0]", '{"id"', "{'id'"), TREE, "steps[0]", None,
         "invalid JSON"),
    Case("json-last-step", inject("steps[4]", '"refuted"', "refuted"), TREE, "steps[4]", None,
         "invalid JSON: Expecting value"),
    Case("json-audit-object", inject(f"steps[{A2}]", '"audit": {', '"audit": {,'), TREE,
         f"steps[{A2}]", None, "invalid JSON"),
    Case("json-hyp-array", inject(f"steps[{A2}]", '"hyp": [', '"hyp": [,'), TREE, f"steps[{A2}]",
         None, "invalid JSON"),
    Case("json-bad-escape", inject(f"steps[{A2}]", "statement of a2", "statement \\q of a2"), TREE,
         f"steps[{A2}]", None, "invalid JSON: Invalid \\escape"),
    Case("json-bad-literal", inject(f"steps[{A2}]", '"repaired": false', '"repaired": fals'), TREE,
         f"steps[{A2}]", None, "invalid JSON: Expecting value"),
    Case("json-raw-nul-in-string", inject("steps[2]", "statement of a3", "statement\x00 of a3"),
         TREE, "steps[2]", None, "invalid JSON: Invalid control character"),
    Case("json-huge-integer", inject(f"steps[{A2}]", '"A2"', "1" * 5000), TREE, f"steps[{A2}]", None,
         "invalid JSON: Exceeds the limit (4300 digits)"),
    Case("json-nested-too-deeply", inject(f"steps[{A2}]", '"hyp": [', '"hyp": [' + "[" * 100_000),
         TREE, f"steps[{A2}]", None, "invalid JSON: nested too deeply"),
    Case("json-byte-order-mark-inside",  # one opening the file is left out (test_a_byte_order_mark…)
         edit_tree_text(lambda lines, where: lines.__setitem__(where["steps[3]"] - 1,
                                                               "\ufeff" + lines[where["steps[3]"] - 1])),
         TREE, "steps[3]", None, "invalid JSON: Expecting value"),
    Case("json-truncated", edit_tree_text(lambda lines, where: lines.__delitem__(slice(where["steps[3]"],
                                                                                       None))),
         TREE, "steps[3]", None, "invalid JSON"),
    Case("tree-empty-file", lambda ws: (ws.root / TREE).write_bytes(b""), TREE, 1, None,
         "invalid JSON: Expecting value"),
    Case("tree-not-utf8", inject("steps[3]", "statement of a4", "statement of \udce9 a4"), TREE,
         "steps[3]", None, "not UTF-8 (byte 0xe9"),
]

# events.jsonl: malformed lines, then each field × a wrong value (a third line appended)
CASES += [Case(f"event-json-{i}", replace_event(2, raw), EVENTS, 2, None, message)
          for i, (raw, message) in enumerate([
              (b'{"time": "2026-10-17T03:42:00Z", "actor": }', "invalid JSON: Expecting value"),
              (b'{"time": "2026-10-17T03:42:00Z",}', "invalid JSON: Expecting property name"),
              (b"{'time': '2026-10-17T03:42:00Z'}", "invalid JSON: Expecting property name"),
              (b"return A5 done", "invalid JSON: Expecting value"),
              (b'{"time": "2026-10-17T03:42', "invalid JSON: Unterminated string starting at (column 10)"),
              (b"{} {}", "invalid JSON: Extra data"),
              (b"[1, 2]", "must be a JSON object, not a list"),
              (b'"text"', "must be a JSON object, not a string"),
              (b"null", "must be a JSON object, not null"),
              (b"42", "must be a JSON object, not a number"),
              (event_line() + b"\x00", "invalid JSON: Extra data"),
              (b'{"time": "2026-10-17T03:42:00Z", "actor": "A\xff"}', "not UTF-8 (byte 0xff"),
              (b'{"ids": ' + b"[" * 100_000, "invalid JSON: nested too deeply"),
              (b'{"actor": ' + b"9" * 5000 + b"}", "invalid JSON: Exceeds the limit (4300 digits)"),
          ])]
EVENT_VALUES = [
    ("time", 5, "time", "must be a string, not a number"),
    ("time", "yesterday", "time", "'yesterday' is not an ISO 8601 time"),
    ("time", DROP, "time", "missing"),
    ("time", "9999-12-31T23:59:59-14:00", "time", "is out of range in UTC"),
    ("time", "2026-366T10:00:00Z", "time", "'2026-366T10:00:00Z' is not an ISO 8601 time"),  # a common year
    ("time", "2026-10-17T24:01Z", "time", "'2026-10-17T24:01Z' is not an ISO 8601 time"),
    ("actor", 5, "actor", "must be a string, not a number"),
    ("kind", "chat", "kind", "'chat' is not one of source, brief"),
    ("kind", DROP, "kind", "missing"),
    ("ids", "a1", "ids", "must be a list of strings, not a string"),
    ("ids", [1], "ids[0]", "must be a string, not a number"),
    ("ids", ["a 1"], "ids[0]", "'a 1' contains ' '"),
    ("ids", ["Alpha/a1"], "ids[0]", "run 'Alpha' is not a run slug"),
    ("text", 5, "text", "must be a string, not a number"),
    ("text", "a\x00b", "text", "contains a NUL byte"),
    ("text", "\udfff", "text", "contains an unpaired surrogate \\udfff"),
    ("who", "A1", "who", "unknown field"),
]
CASES += [Case(f"event-{name}={value if value is not DROP else 'dropped'!r}"[:60],
               append_event(**{name: value}), EVENTS, 3, field, message)
          for name, value, field, message in EVENT_VALUES]

# brief and return paths: they must stay inside the run folder and be readable files
CASES += [
    Case("brief-absolute-path", with_brief("/etc/passwd"), EVENTS, 3, "text", "leaves the run folder"),
    Case("brief-dot-dot-inside-prefix", with_brief("briefs/../../x"), EVENTS, 3, "text",
         "leaves the run folder"),
    Case("return-climbing-to-root", with_brief("returns/../../../etc/passwd"), EVENTS, 3, "text",
         "leaves the run folder"),
    Case("brief-missing-file", with_brief("briefs/nope.md"), EVENTS, 3, "text",
         "file 'briefs/nope.md' does not exist in the run folder"),
    Case("brief-folder-symlinked-outside", with_brief("briefs/A1.md", symlinked_briefs), EVENTS, 3,
         "text", "leaves the run folder"),
    Case("brief-symlink-loop", with_brief("briefs/loop.md", looping_brief), EVENTS, 3, "text",
         "cannot be resolved"),
    Case("brief-name-too-long", with_brief("briefs/" + "x" * 300 + ".md"), EVENTS, 3, "text",
         "cannot be resolved: File name too long"),
    Case("brief-not-utf8", with_brief("briefs/A1.md", non_utf8_brief), "alpha/briefs/A1.md", 2, None,
         "not UTF-8 (byte 0xc3"),
]

# solve/library.jsonl
LIBRARY_VALUES = [
    ("run", 5, "run", "must be a string, not a number"),
    ("run", "Alpha", "run", "'Alpha' is not a run slug"),
    ("id", "a/1", "id", "contains '/'"),
    ("id", "a 1", "id", "contains ' '"),
    ("kind", "Lemma", "kind", "'Lemma' is not one of"),
    ("statement", DROP, "statement", "missing"),
    ("statement", 5, "statement", "must be a string, not a number"),
    ("status", "done", "status", "'done' is not one of"),
    ("grade", "A", "grade", "'A' is not one of pass, minor, major, error"),
    ("repair", 5, "repair", "must be a string, not a number"),
    ("inserted", "yesterday", "inserted", "'yesterday' is not an ISO 8601 time"),
    ("inserted", "2026-10-17T07:00:00", "inserted", "has no time zone"),
    ("hyp", "p odd", "hyp", "must be a list of strings, not a string"),
    ("note", "x", "note", "unknown field"),
    ("kind", "dead_end", "missing", "missing"),
]
CASES += [Case(f"library-{name}={value if value is not DROP else 'dropped'!r}",
               set_library(library_entry(**{name: value})), LIBRARY, 1, field, message)
          for name, value, field, message in LIBRARY_VALUES]
CASES += [
    Case("library-repeat-not-adjacent",
         set_library(library_entry(), library_entry(run="beta", id="b1"), library_entry()), LIBRARY,
         3, "id", "duplicate library entry 'alpha/a1' (first on line 1)"),
    Case("library-malformed-line", set_library(library_entry(), b'{"run": "alpha"'), LIBRARY, 2,
         None, "invalid JSON"),
    Case("library-line-is-a-list", set_library(b"[]"), LIBRARY, 1, None,
         "must be a JSON object, not a list"),
    Case("library-not-utf8", set_library(library_entry(), b'{"run": "\xe9"}'), LIBRARY, 2, None,
         "not UTF-8 (byte 0xe9"),
]

# core.md (validated at index time though not indexed)
CASES += [
    Case("core-text-before-heading", core_md(b"notes first\n## phase  round 1\n"),
         "alpha/memory/core.md", 1, None, "text before the first '## field' heading"),
    Case("core-field-twice", core_md(b"## phase  1\n## next  a\n## next  b\n"), "alpha/memory/core.md",
         3, "next", "field appears twice"),
    Case("core-not-utf8", core_md(b"## phase  1\n## next  \xff\n"), "alpha/memory/core.md", 2, None,
         "not UTF-8 (byte 0xff"),
]

# the workspace's settings.toml
CASES += [
    Case("settings-self-cycle", settings_toml('''
        [[setting]]
        name = "a"
        implies = ["a"]
        '''), SETTINGS, 4, "a.implies", "cycle in implies: a -> a"),
    Case("settings-three-cycle", settings_toml('''
        [[setting]]
        name = "a"
        implies = ["b"]
        [[setting]]
        name = "b"
        implies = ["c"]
        [[setting]]
        name = "c"
        implies = ["a"]
        '''), SETTINGS, 10, "c.implies", "cycle in implies: a -> b -> c -> a"),
    Case("settings-cycle-through-shipped-entry", settings_toml('''
        [[setting]]
        name = "local"
        implies = ["Fq((t))"]
        '''), SETTINGS, 4, "local.implies", "cycle in implies"),
    Case("settings-implies-unknown", settings_toml('''
        [[setting]]
        name = "a"

        implies = ["nowhere"]
        '''), SETTINGS, 5, "a.implies", "'nowhere' is not a setting of the ontology"),
    Case("settings-alias-names-two", settings_toml('''
        [[setting]]
        name = "a"
        aliases = ["Qp"]
        '''), SETTINGS, 4, "a.aliases", "names both"),
    Case("settings-without-name", settings_toml('''
        [[setting]]
        name = "a"
        [[setting]]
        aliases = ["b"]
        '''), SETTINGS, 4, "setting[1].name", "missing"),
    Case("settings-implies-string", settings_toml('''
        [[setting]]
        name = "a"
        implies = "local"
        '''), SETTINGS, 4, "setting[0].implies", "must be a list of strings"),
    Case("settings-implies-element", settings_toml('''
        [[setting]]
        name = "b"

        [[setting]]
        name = "a"
        implies = ["local", 2]
        '''), SETTINGS, 7, "setting[1].implies[1]", "must be a string, not a number"),
    Case("settings-unknown-key", settings_toml('''
        [[setting]]
        name = "a"
        means = "b"
        '''), SETTINGS, 4, "setting[0].means", "unknown field"),
    Case("settings-a-table-not-an-array", settings_toml('''
        [setting]
        name = "a"
        '''), SETTINGS, 2, "setting", "must be an array of tables"),
    Case("settings-bad-toml", settings_toml('''
        [[setting]]
        name = "a
        '''), SETTINGS, 3, None, "invalid TOML"),
    Case("settings-not-utf8", settings_toml(b'[[setting]]\nname = "\xff"\n'), SETTINGS, 2, None,
         "not UTF-8 (byte 0xff at column 9)"),
    Case("settings-not-utf8-after-maths", settings_toml('[[setting]]\nname = "ℤ𝔽é'.encode() + b'\xe9"\n'),
         SETTINGS, 2, None, "not UTF-8 (byte 0xe9 at column 12)"),  # in characters: 18 in bytes
    Case("settings-not-utf8-after-a-bom", settings_toml(b'\xef\xbb\xbfname\xff = 1\n'), SETTINGS, 1, None,
         "not UTF-8 (byte 0xff at column 5)"),  # the mark is no character an editor shows
]


def test_the_battery_is_large_and_its_cases_are_distinct():
    assert len(CASES) >= 50
    assert len({case.name for case in CASES}) == len(CASES)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """The small workspace with alpha's tree.json laid out one step a line, indexed once."""
    root = tmp_path_factory.mktemp("battery") / "ws"
    ws = build_workspace(root)
    save_tree(ws, "alpha", ws.tree("alpha"))
    assert run_cli(["--workspace", str(root), "index", "--no-progress"], out=io.StringIO()) == 0
    return root


def fresh_copy(template: Path, tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    copy_workspace(template, root, symlinks=True)
    return Workspace(root)


def index(root: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_cli(["--workspace", str(root), "index", "--no-progress"], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_bad_input_names_file_line_and_field_and_leaves_the_index_alone(case, template, tmp_path):
    ws = fresh_copy(template, tmp_path)
    where = case.damage(ws) or {}
    line = where[case.at] if isinstance(case.at, str) else case.at
    before = snapshot(ws.root / ".mem")
    code, out, err = index(ws.root)
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and err.endswith("\n") and "Traceback" not in err
    head = f"mem: {ws.root.resolve() / case.file}:{line}: "
    assert err.startswith(head), err
    assert err[len(head):].startswith(f"{case.field}: " if case.field else ""), err
    assert case.message in err, err
    assert snapshot(ws.root / ".mem") == before


def test_a_damaged_file_never_gives_a_traceback_in_a_real_process(template, tmp_path):
    """The same path as a user's shell: a separate interpreter, --json and plain."""
    ws = fresh_copy(template, tmp_path)
    replace_event(1, b"\xff\xfe{not json")(ws)
    for extra in ([], ["--json"]):
        done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "--workspace", str(ws.root), *extra,
                               "index"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and "Traceback" not in done.stderr + done.stdout
        line = json.loads(done.stdout)["error"] if extra else done.stderr.removeprefix("mem: ")
        assert line.strip() == f"{ws.root.resolve() / EVENTS}:1: not UTF-8 (byte 0xff at column 1)"


# ----------------------------------------------------------------------------- valid, if surprising

def rows(root: Path, table: str) -> dict[str, dict]:
    from mem_retrieval.indexers import store

    meta = store.read_meta(root / ".mem")
    t = store.open_table(store.connect(root / ".mem"), table)
    t.checkout(meta["versions"][table])
    return {r["gid"]: r for r in t.search().limit(100_000).to_arrow().to_pylist()}


def test_empty_event_log_and_empty_library_are_valid_and_hold_no_records(template, tmp_path):
    ws = fresh_copy(template, tmp_path)
    ws.events_path("alpha").write_bytes(b"")
    ws.library_path.write_bytes(b"\n\n")
    code, out, err = index(ws.root)
    assert (code, err) == (0, ""), err
    events = rows(ws.root, "events")
    assert sorted(events) == ["beta#1"]  # alpha's two events left the index
    assert not any(row["in_library"] for row in rows(ws.root, "steps").values())


@pytest.mark.parametrize("kind, text", [("brief", "GL₄/Sp₄"), ("return", "n/a"), ("brief", "A2/brief")])
def test_a_brief_or_return_whose_one_word_holds_a_slash_but_no_file_name_is_free_text(template, tmp_path,
                                                                                    kind, text):
    # SPEC §4: text is "free text, or a path relative to the run"; GL₄/Sp₄ names no file
    ws = fresh_copy(template, tmp_path)
    append_event(kind=kind, text=text)(ws)
    code, out, err = index(ws.root)
    assert (code, err) == (0, ""), err
    row = rows(ws.root, "events")["alpha#3"]
    assert (row["text"], row["path"]) == (text, "")  # no file: the text is the event


def test_a_brief_naming_a_file_outside_the_usual_folders_is_still_a_path(template, tmp_path):
    ws = fresh_copy(template, tmp_path)
    append_event(kind="brief", text="notes/A5.md")(ws)
    code, _, err = index(ws.root)
    assert code == 2 and err.rstrip().endswith("text: file 'notes/A5.md' does not exist in the run folder")
    (ws.root / "alpha" / "notes").mkdir()
    (ws.root / "alpha" / "notes" / "A5.md").write_text("the brief of A5\n")
    assert index(ws.root)[0] == 0
    assert rows(ws.root, "events")["alpha#3"]["path"] == "notes/A5.md"


def test_equal_times_are_not_going_backwards(template, tmp_path):
    ws = fresh_copy(template, tmp_path)
    append_event(time="2026-10-17T05:42:00+02:00")(ws)  # = 03:42Z, the time of the event before it
    assert index(ws.root)[0] == 0


@settings(max_examples=200, deadline=None)
@given(day=st.integers(0, 3000), zone=st.integers(-14 * 4, 14 * 4), seconds=st.integers(0, 86399))
def test_an_ordinal_date_and_24_00_are_the_iso_8601_times_they_name(day, zone, seconds):
    """`2026-290` is day 290 of 2026 and `24:00` the end of a day, the next one's 00:00: both ISO
    8601, both refused by datetime.fromisoformat (and so by every reader of a time here)."""
    from mem_retrieval.records.parse import parse_time

    tz = timezone(timedelta(minutes=15 * zone))
    when = datetime(2025, 1, 1, tzinfo=tz) + timedelta(days=day, seconds=seconds)
    offset = when.strftime("%z")
    offset = offset[:3] + ":" + offset[3:]
    ordinal = f"{when.year}-{when.timetuple().tm_yday:03d}T{when:%H:%M:%S}{offset}"
    assert parse_time(ordinal, "f", 1, "time") == when
    assert parse_time(ordinal.replace("-", "", 1), "f", 1, "time") == when  # basic form: 2026290
    midnight = when.replace(hour=0, minute=0, second=0)
    for end in ("24:00", "24:00:00", "24:00:00.000", "2400"):
        earlier = (midnight - timedelta(days=1)).strftime(f"%Y-%m-%dT{end}") + offset
        assert parse_time(earlier, "f", 1, "time") == midnight


def test_a_parent_pointing_nowhere_is_indexed_and_reported_by_check(template, tmp_path):
    """The rule: `mem index` accepts dangling parents (the record is what it is); `mem check`
    reports them as integrity violations."""
    ws = fresh_copy(template, tmp_path)
    ws.add_step("alpha", make_step("a9", parents=("a404", "ghost-run/x1")))
    assert index(ws.root)[0] == 0
    assert rows(ws.root, "steps")["alpha/a9"]["parents"] == ["a404", "ghost-run/x1"]
    out, err = io.StringIO(), io.StringIO()
    code = run_cli(["--workspace", str(ws.root), "check", "alpha"], out=out, err=err)
    found = [line for line in out.getvalue().splitlines() if ": integrity: " in line]
    assert code == 1 and len(found) == 2, out.getvalue()
    assert "a404" in found[0] and "ghost-run/x1" in found[1]


def run_python(code: str, *args: str) -> list[dict]:
    """Run ``code`` in a fresh interpreter; each line it prints is a JSON object."""
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.slow
def test_a_20_mb_statement_indexes_in_bounded_memory_and_is_embedded_truncated(tmp_path):
    """A 20 MB statement is valid: BM25 finds a word at its very end, archive-get returns it whole,
    and its embedding is that of its first ``model.max_chars`` characters: a twin step holding only
    the statement's first 20,000 characters is indexed first, so the big step reuses the twin's
    vector and `mem index` embeds nothing (and never loads the model). The `mem index` process peaks
    at less than 20 × the statement over a no-op `mem index` of the same workspace."""
    from mem_retrieval.memory import Memory

    ws = build_workspace(tmp_path / "ws")
    sentence = "the Satake transform of GL2m/Sp2m at level K_{n} is injective for every odd prime p "
    big = (sentence * (20_000_000 // len(sentence) + 1))[:20_000_000] + " zanzibar"
    ws.add_step("alpha", make_step("twin", statement=big[:20_000]))
    memory = Memory.open(ws.root)
    memory.index(progress=False)
    measure = ("import json, resource, sys\nfrom mem_retrieval.cli.main import run\n"
               "code = run(sys.argv[1:])\n"
               "print(json.dumps({'code': code, 'torch': 'torch' in sys.modules, 'rss_mb': "
               "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))\n")
    argv = ["--workspace", str(ws.root), "--json", "index", "--no-progress"]
    _, idle = run_python(measure, *argv)
    ws.add_step("alpha", make_step("big", statement=big))
    report, done = run_python(measure, *argv)
    assert idle["code"] == 0 and done["code"] == 0
    assert (report["added"], report["embedded"], done["torch"]) == (1, 0, False)
    assert done["rss_mb"] - idle["rss_mb"] < 20 * 20, (idle, done)
    print(f"\n20 MB statement: `mem index` peaks at {done['rss_mb']:.0f} MB "
          f"(a no-op index: {idle['rss_mb']:.0f} MB)")
    report = Memory.open(ws.root).archive_search("zanzibar", strategy="bm25")
    assert [hit.id for hit in report.hits] == ["alpha/big"]
    assert len(Memory.open(ws.root).archive_get("alpha/big").step.statement) == len(big)
    steps = rows(ws.root, "steps")
    assert steps["alpha/big"]["text_hash"] == steps["alpha/twin"]["text_hash"]
    assert steps["alpha/big"]["vector"] == steps["alpha/twin"]["vector"]


@pytest.mark.slow
def test_a_million_line_event_log_is_streamed(tmp_path):
    """1,000,000 events (~150 MB) parse in a fresh process whose peak memory grows by less than
    50 MB: the log is read a line at a time, never whole."""
    path = tmp_path / "r" / "memory" / "events.jsonl"
    path.parent.mkdir(parents=True)
    line = (json.dumps({"time": "2026-10-17T03:42:00Z", "actor": "A5", "kind": "audit",
                        "ids": ["A5-7", "A5-8"], "text": "error: input (a) fails, pair model, "
                        "residue char. 2, " + "x" * 40}) + "\n").encode()
    with path.open("wb") as handle:
        for _ in range(100):
            handle.write(line * 10_000)
    assert path.stat().st_size > 140_000_000
    code = ("import json, resource, sys\nfrom pathlib import Path\n"
            "from mem_retrieval.records.parse import iter_events\n"
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "count = last = 0\n"
            "for event in iter_events(Path(sys.argv[1]), 'r'):\n"
            "    count, last = count + 1, event.seq\n"
            "grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024\n"
            "print(json.dumps({'count': count, 'last': last, 'grown_mb': grown}))\n")
    [result] = run_python(code, str(path))
    assert result["count"] == result["last"] == 1_000_000
    assert result["grown_mb"] < 50, result
    print(f"\n1,000,000 events parsed; peak memory grew by {result['grown_mb']:.1f} MB")


# -------------------------------------------------------------------------------- property tests

IDS = st.text("abcdefghijklmnopqrstuvwxyzABCZ0123456789-_.'", min_size=1, max_size=12)
RUNS = st.from_regex(r"[a-z0-9][a-z0-9-]{0,8}", fullmatch=True)
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)


@st.composite
def steps(draw) -> dict:
    kind = draw(st.sampled_from(KINDS))
    step = {"id": draw(IDS), "kind": kind, "statement": draw(TEXT),
            "status": draw(st.sampled_from(STATUSES))}
    optional = {"agent": TEXT, "hyp": st.lists(TEXT, max_size=3), "setting": TEXT, "proof": TEXT,
                "parents": st.lists(IDS | st.builds(lambda r, s: f"{r}/{s}", RUNS, IDS), max_size=3),
                "audit": st.none() | st.fixed_dictionaries(
                    {"grade": st.sampled_from(GRADES)},
                    optional={"by": TEXT, "note": TEXT, "repaired": st.booleans()})}
    for name, strategy in optional.items():
        if draw(st.booleans()):
            step[name] = draw(strategy)
    if kind == "dead_end":
        step["missing"] = draw(TEXT)
    if kind == "error":
        step["failed_input"] = draw(TEXT)
    return step


@settings(max_examples=150, deadline=None)
@given(st.lists(steps(), max_size=6, unique_by=lambda s: s["id"]), st.sampled_from([None, 0, 1, 2]),
       st.booleans())
def test_any_valid_tree_round_trips(step_list, indent, ascii_only):
    tree = {"run": "r", "date": "2026-10-17", "fix": {"setting": "Qp", "checklist": ["a"]},
            "sources": [{"id": "src-0", "origin": "x"}], "steps": step_list}
    if any(s["id"] == "src-0" for s in step_list):
        return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "tree.json"
        path.write_text(json.dumps(tree, indent=indent, ensure_ascii=ascii_only), encoding="utf-8")
        parsed = parse_tree(path, "r")
    assert [s.id for s in parsed.steps] == [s["id"] for s in step_list]
    for got, want in zip(parsed.steps, step_list):
        assert (got.kind, got.statement, got.status) == (want["kind"], want["statement"], want["status"])
        assert (got.hyp, got.parents) == (tuple(want.get("hyp", ())), tuple(want.get("parents", ())))
        assert (got.setting, got.proof, got.agent) == tuple(want.get(k, "") for k in
                                                            ("setting", "proof", "agent"))
        assert (got.missing, got.failed_input) == (want.get("missing", ""), want.get("failed_input", ""))
        audit = want.get("audit")
        assert (got.audit is None) == (audit is None)
        if audit is not None:
            assert (got.audit.grade, got.audit.by, got.audit.note, got.audit.repaired) == (
                audit["grade"], audit.get("by", ""), audit.get("note", ""), audit.get("repaired", False))
    assert parsed.fix.checklist == ("a",) and parsed.sources[0].id == "src-0"


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=12)


@st.composite
def documents_with_a_path(draw) -> tuple[dict, list]:
    """A JSON object and the path (keys and indexes) to one of its members, an object's or an
    array's, at any depth."""
    document = draw(st.dictionaries(st.text(max_size=4), JSON_VALUES, min_size=1, max_size=4))
    path, node = [], document
    while True:
        key = draw(st.sampled_from(sorted(node)) if isinstance(node, dict) else
                   st.integers(0, len(node) - 1))
        path.append(key)
        node = node[key]
        if not (isinstance(node, (dict, list)) and node and draw(st.booleans())):
            return document, path


@settings(max_examples=300, deadline=None)
@given(documents_with_a_path(), st.sampled_from([None, 0, 1, 2, "\t"]), st.booleans())
def test_the_line_of_a_field_is_where_json_dumps_puts_it(found, indent, ascii_only):
    """``field_line`` (the line an error in a pretty-printed tree.json names) against an oracle:
    the same document with the member at the path marked (its key renamed in place, or the element
    replaced by a string: neither moves the lines up to it) and the marker's line found as text."""
    document, path = found
    assume(all(isinstance(k, int) or (k and not set(k) & set(".[]")) for k in path))  # dotted-path names
    text = json.dumps(document, indent=indent, ensure_ascii=ascii_only)
    marked = json.loads(text)
    parent = marked
    for key in path[:-1]:
        parent = parent[key]
    marker = "\u2603marker\u2603"
    if isinstance(parent, dict):
        members = list(parent.items())
        parent.clear()
        parent.update((marker if k == path[-1] else k, v) for k, v in members)
    else:
        parent[path[-1]] = marker
    oracle = json.dumps(marked, indent=indent, ensure_ascii=ascii_only)
    where = oracle.index(json.dumps(marker, ensure_ascii=ascii_only))
    field = "".join(f"[{k}]" if isinstance(k, int) else ("." if i else "") + k for i, k in enumerate(path))
    assert field_line(text, field) == oracle.count("\n", 0, where) + 1


@st.composite
def event_logs(draw) -> list[tuple[int, dict]]:
    """Events with times that never decrease (written in varied zones), and blank lines between."""
    moment = datetime(2026, 10, 17, tzinfo=timezone.utc)
    log, number = [], 0
    for _ in range(draw(st.integers(0, 8))):
        number += 1 + draw(st.integers(0, 1))  # sometimes a blank line first
        moment += timedelta(seconds=draw(st.integers(0, 90_000)))
        zone = timezone(timedelta(minutes=draw(st.integers(-14 * 60, 14 * 60))))
        kind = draw(st.sampled_from(EVENT_KINDS))
        text = draw(TEXT)
        if event_path(kind, text):
            text = "free text " + text
        log.append((number, {"time": moment.astimezone(zone).isoformat(), "actor": draw(TEXT),
                             "kind": kind, "ids": draw(st.lists(IDS, max_size=3)), "text": text}))
    return log


@settings(max_examples=150, deadline=None)
@given(event_logs())
def test_any_valid_event_log_round_trips_with_line_numbers_as_sequence(log):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "r" / "memory" / "events.jsonl"
        path.parent.mkdir(parents=True)
        lines = [""] * (log[-1][0] if log else 0)
        for number, event in log:
            lines[number - 1] = json.dumps(event, ensure_ascii=False)
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        parsed = list(iter_events(path, "r"))
    assert [e.seq for e in parsed] == [number for number, _ in log]
    for got, (_, want) in zip(parsed, log):
        assert (got.time, got.actor, got.kind, got.ids, got.text) == (
            want["time"], want["actor"], want["kind"], tuple(want["ids"]), want["text"])
        assert got.timestamp == datetime.fromisoformat(want["time"]) and got.path is None


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(RUNS, IDS, TEXT, st.sampled_from(STATUSES),
                          st.none() | st.sampled_from(GRADES)),
                max_size=6, unique_by=lambda e: (e[0], e[1])))
def test_any_valid_library_round_trips(entries):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "library.jsonl"
        path.write_text("".join(json.dumps({"run": run, "id": step_id, "kind": "lemma",
                                            "statement": statement, "status": status, "grade": grade,
                                            "repair": None, "inserted": "2026-10-17T07:00:00Z"}) + "\n"
                                for run, step_id, statement, status, grade in entries))
        parsed = list(iter_library(path))
    assert [(e.run, e.id, e.statement, e.status, e.grade) for e in parsed] == entries
    assert [e.line for e in parsed] == list(range(1, len(entries) + 1))


INTERESTING = [b'"', b"{", b"}", b"[", b"]", b",", b":", b"\\", b"\x00", b"\xff", b"\xc3", b"\n",
               b"9", b"-", b"u", b"/", b" ", b"\\ud800", b"..", b"#", b"=", b"## "]
MUTATIONS = st.lists(st.tuples(st.floats(0, 1), st.sampled_from(["insert", "delete", "replace"]),
                               st.sampled_from(INTERESTING) | st.binary(min_size=1, max_size=4)),
                     min_size=1, max_size=4)


def mutate(data: bytes, mutations: list[tuple[float, str, bytes]]) -> bytes:
    for fraction, op, chunk in mutations:
        at = int(fraction * len(data))
        if op == "insert":
            data = data[:at] + chunk + data[at:]
        elif op == "delete":
            data = data[:at] + data[at + len(chunk):]
        else:
            data = data[:at] + chunk + data[at + len(chunk):]
    return data


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pristine") / "ws"
    ws = build_workspace(root)
    (root / "alpha" / "briefs").mkdir()
    (root / "alpha" / "briefs" / "A1.md").write_text("the brief of A1\n")
    append_event(kind="brief", text="briefs/A1.md")(ws)
    settings_toml('[[setting]]\nname = "PFR"\naliases = ["pfr"]\nimplies = ["local"]\n')(ws)
    return root


TARGETS = [TREE, EVENTS, LIBRARY, "alpha/memory/core.md", SETTINGS, "alpha/briefs/A1.md"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(TARGETS),
       MUTATIONS | st.builds(lambda b: [(0.0, "all", b)], st.binary(max_size=64)))
def test_arbitrary_bytes_give_records_or_one_input_error(pristine, target, mutations):
    """Whatever the bytes of one file, building the index rows (every parser, the tokenizer, the
    hashes) and `mem check` end in records or an InputError: never another exception."""
    from mem_retrieval.configs import load_config
    from mem_retrieval.indexers.rows import build_rows
    from mem_retrieval.records.invariants import check
    from mem_retrieval.records.workspace import Workspace as Records

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "ws"
        copy_workspace(pristine, root)
        path = root / target
        data = path.read_bytes()
        path.write_bytes(mutations[0][2] if mutations[0][1] == "all" else mutate(data, mutations))
        workspace = Records.open(root)
        try:
            build_rows(workspace, load_config(root, None), workspace.runs())
        except InputError as error:
            assert "\n" not in str(error) and str(error).startswith(str(root))
        try:  # `mem check` reports what it can read; a bad settings.toml stops it (exit 2)
            report = check(Records.open(root), None, load_config(root, None).model.package)
        except InputError as error:
            assert "\n" not in str(error) and str(error).startswith(str(root))
        else:
            assert all("\n" not in str(v) for v in report.violations)


def test_mutations_do_reach_every_parser(pristine, tmp_path):
    """The property above is not vacuous: one mutation of each target is refused, naming it."""
    from mem_retrieval.configs import load_config
    from mem_retrieval.indexers.rows import build_rows
    from mem_retrieval.records.workspace import Workspace as Records

    rng = random.Random(7)
    for target in TARGETS:
        root = tmp_path / target.replace("/", "_")
        copy_workspace(pristine, root)
        path = root / target
        path.write_bytes(path.read_bytes() + b"\n\xff" + bytes([rng.randrange(256)]) + b"\n")  # (a last
        # line of events.jsonl with no line break is one being written: passed over)
        with pytest.raises(InputError, match=re.escape(str(path))):
            workspace = Records.open(root)
            build_rows(workspace, load_config(root, None), workspace.runs())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.sampled_from(["", " ", "\r", "\t", "\u3000", "{}", "x"]), max_size=8),
       end=st.sampled_from(["", "\n", "\n\n"]), after=st.integers(0, 10))
def test_events_logged_after_a_line_are_counted_as_the_log_reader_numbers_them(lines, end, after, tmp_path):
    """The unindexed-events note counts (records.parse.lines_after) what iter_events would read
    after line ``after``: its non-blank lines, numbered as it numbers them (the oracle: the text's
    lines, blank ones counted in the numbering and skipped), but not a last line still being
    written."""
    from mem_retrieval.records.parse import lines_after

    text = "\n".join(lines) + end
    log = tmp_path / "events.jsonl"
    log.write_text(text, encoding="utf-8")
    physical = text.split("\n")
    expected = sum(1 for number, line in enumerate(physical, start=1) if number > after and line.strip())
    if len(physical) > after and physical[-1].strip() and physical[-1].strip() != "{}":
        expected -= 1  # no line break, and not yet JSON: being written
    assert lines_after(log, after) == expected
    if text.endswith("\n") or not text.strip():
        log.write_text(text + '{"time": "2026-10-17T0', encoding="utf-8")  # a line half-written
        assert lines_after(log, after) == expected
    assert lines_after(tmp_path / "none.jsonl", after) == 0


_EVENT = json.dumps({"time": "2026-10-17T04:00:00Z", "actor": "root", "kind": "audit", "ids": ["a1"],
                     "text": "t"})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.sampled_from(["", " ", "\r", "\u3000", _EVENT, _EVENT + "\r", "x", "{}"]),
                      max_size=8),
       end=st.sampled_from(["", "\n", "\n\n", '\n{"time": "2026-10-17T0']), after=st.integers(0, 10))
def test_the_events_after_a_line_are_those_the_log_reader_reads_after_it(lines, end, after, tmp_path):
    """What the note narrows by --until and --id (records.parse.events_after): the events
    iter_events reads after line ``after``, numbered as it numbers them, lines that are not events
    passed over (the oracle: iter_events keeping its malformed lines aside)."""
    from mem_retrieval.records.parse import events_after, iter_events

    log = tmp_path / "memory" / "events.jsonl"
    log.parent.mkdir(exist_ok=True)
    log.write_text("\n".join(lines) + end, encoding="utf-8")
    read = [(e.seq, e.ids, e.text) for e in iter_events(log, "alpha", tmp_path, malformed=Malformed())]
    expected = [event for event in read if event[0] > after]
    assert [(e.seq, e.ids, e.text) for e in events_after(log, after, "alpha", tmp_path)] == expected
