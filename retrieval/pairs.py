"""The citation pairs a workspace holds, to train the rerank model on (``mem tune``) and to measure
that training (``eval/bench_tune.py``): (a step's statement, the statement of each step it cites),
each with a hard negative, the best BM25 match of the statement (leave-one-out) that it does not
cite and that the pairs may use (a step kept out is no negative either). Texts are prepared as the
index embeds them (``text.embed.prepare``)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from mem_retrieval.records.types import Step
from mem_retrieval.retrieval.query import ArchiveQuery, searched_part
from mem_retrieval.retrieval.retriever import Retriever
from mem_retrieval.text.train import Pair


@dataclass(frozen=True)
class Mined:
    pairs: list[Pair]
    anchors: list[str]          # the steps whose links the pairs are (global ids)
    held: int = 0               # links of the steps of ``exclude_keys``: kept out, not trained on


def mine_pairs(retriever: Retriever, *, exclude_runs: set[str] = frozenset(),
               exclude_keys: set[int] = frozenset(), max_pairs: int | None = None,
               seed: int = 0) -> Mined:
    """The citation pairs of every step outside ``exclude_runs`` and ``exclude_keys`` (steps by
    key, ``indexers.store.key`` of the global id), each with a BM25 hard negative that is no step
    of ``exclude_keys`` either (what a held-out query may not see is not trained on); ``max_pairs``
    keeps a seeded sample, and ``anchors`` are then the steps whose links it kept (the hard
    negatives are looked up for those alone); ``held`` counts the links ``exclude_keys`` kept out."""
    from mem_retrieval.indexers.store import key
    from mem_retrieval.text.embed import prepare

    workspace, max_chars = retriever.workspace, retriever.config.model.max_chars
    statements = {entry.gid: entry.statement for entry in workspace.library()}
    trees = {run: workspace.tree(run) for run in workspace.runs()}
    for tree in trees.values():
        statements.update({step.gid: step.statement for step in tree.steps})
    links: list[tuple[Step, str]] = []      # (the citing step, a step it cites)
    cites: dict[str, set[str]] = {}         # each citing step's cited steps
    held = 0
    for run, tree in trees.items():
        if run in exclude_runs:
            continue
        sources = frozenset(s.id for s in tree.sources)
        for step in tree.steps:
            cited = [gid for gid in dict.fromkeys(step.cited(sources)) if gid in statements]
            if key(step.gid) in exclude_keys:
                held += len(cited)
                continue
            if not cited:
                continue
            cites[step.gid] = set(cited)
            links += [(step, gid) for gid in cited]
    if max_pairs is not None and len(links) > max_pairs:
        links = random.Random(seed).sample(links, max_pairs)
    negatives: dict[str, str | None] = {}
    for step, _ in links:
        if step.gid not in negatives:
            negatives[step.gid] = _hard_negative(retriever, step.statement, step.gid, cites[step.gid],
                                                 exclude_keys)
    pairs = [Pair(prepare(step.statement, max_chars), prepare(statements[gid], max_chars),
                  prepare(negatives[step.gid], max_chars) if negatives[step.gid] else None)
             for step, gid in links]
    return Mined(pairs, [gid for gid in cites if gid in negatives], held)


def _hard_negative(retriever: Retriever, text: str, gid: str, cited: set[str],
                   excluded: set[int]) -> str | None:
    """The best BM25 match of ``text`` that is neither the step, nor one it cites, nor one of the
    ``excluded`` keys, searched in memory as it stood before the step, without the ``excluded``
    steps (their words counted in BM25's statistics, so chose the negative)."""
    if not text.strip():
        return None
    ranked = retriever.archive_hits(ArchiveQuery(searched_part(text), hide=gid, strategy="bm25"),
                                    also_hidden=frozenset(excluded))
    return next((hit.statement for hit in ranked if hit.id not in cited), None)
