"""`mem archive-search`, `mem archive-get`, `mem recall-search` (SPEC §9): built from their
definitions (mem_retrieval.functions); the answers are cli/calls.py's."""

from __future__ import annotations

from mem_retrieval.cli.arguments import register_functions

ORDER = 20


def register(subparsers, common) -> None:
    register_functions(subparsers, common, ["archive_search", "archive_get", "recall_search"])
