"""mem_retrieval: the embedded memory-retrieval layer of a maths research agent.

``from mem_retrieval import Memory`` is the Python API (``mem_retrieval.memory``); the command
line ``mem`` is a thin shell over it (``mem_retrieval.cli``). The layers, each importing only
those before it: ``records`` (the workspace files as typed records) → ``configs`` → ``text``
(tokenizer, embedding model) → ``indexers`` (LanceDB tables) → ``retrieval`` (the query path) →
``eval`` (quality) → this package's ``Memory`` and the ``cli``.

``Memory`` is loaded on first use, so importing a light submodule (the CLI's forwarding client)
costs nothing more."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mem_retrieval.memory import Memory

__all__ = ["Memory"]


def __getattr__(name: str) -> Any:
    if name == "Memory":
        from mem_retrieval.memory import Memory

        return Memory
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
