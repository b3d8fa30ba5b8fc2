"""Records: the workspace's files (tree.json, events.jsonl, library.jsonl, core.md, settings) as typed,
validated values. Nothing here knows about the index."""

from mem_retrieval.records.errors import InputError, Problem
from mem_retrieval.records.types import Audit, CoreMemory, Event, Fix, LibraryEntry, Source, Step, Tree

__all__ = [
    "Audit", "CoreMemory", "Event", "Fix", "InputError", "LibraryEntry", "Problem", "Source",
    "Step", "Tree",
]
