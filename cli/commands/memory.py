"""`mem core-set`, `mem archive-insert`, `mem check`, `mem record`: the memory functions that write,
M1–M4, and the Record step. Built from their definitions (mem_retrieval.functions); the answers are
cli/calls.py's, over Memory (records.writes, records.invariants, records.record)."""

from __future__ import annotations

from mem_retrieval.cli.arguments import register_functions

ORDER = 30


def register(subparsers, common) -> None:
    register_functions(subparsers, common, ["core_set", "archive_insert", "check", "record"])
