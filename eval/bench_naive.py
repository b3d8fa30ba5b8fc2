"""The naive baseline the speed benchmark compares the search against, in the same process.

What a first build would do: rank_bm25's ``BM25Okapi`` rebuilt in the process over every step's
tokens (``text.tokenize.tokenize`` of the text BM25 sees, ``indexers.rows.step_search_text``),
and an exhaustive cosine of the query against every step vector (numpy, the vectors read from the
index). The two are fused as the ``rerank`` strategy fuses them: over the top ``search.rerank_k``
of the ``search.pool`` BM25 candidates, ``w·cosine + (1−w)·bm25/max bm25``; the rest keep BM25
order. (The default, ``rerank-graph``, adds the citation graph's candidates and features; the
benchmark times it against this baseline, the work a first build would do for a query.)

The fusion is written out here rather than reusing ``retrieval.strategies.rerank``: a second
implementation, so the benchmark's top-10 overlap between the two (against the ``rerank``
strategy, the same ranking) is a check that both rank alike."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from mem_retrieval.retrieval.retriever import Retriever

TEXT_COLUMNS = ["gid", "sid", "statement", "hyp", "setting", "missing", "failed_input"]


class NaiveSearch:
    """BM25Okapi over all steps + exhaustive cosine over all vectors, built from the index."""

    def __init__(self, retriever: "Retriever"):
        from rank_bm25 import BM25Okapi

        from mem_retrieval.indexers.rows import step_search_text
        from mem_retrieval.text.tokenize import tokenize

        config = retriever.config
        self.pool, self.rerank_k, self.weight = config.search.pool, config.search.rerank_k, config.search.fusion_weight
        self.package, self.max_chars = config.model.package, config.model.max_chars
        started = time.perf_counter()
        table = retriever.searcher.table("steps")
        data = table.search().select(TEXT_COLUMNS + ["vector"]).limit(
            max(table.count_rows(), 1)).to_arrow()
        rows = data.select(TEXT_COLUMNS).to_pylist()
        self.gids = [row["gid"] for row in rows]
        self.bm25 = BM25Okapi([tokenize(step_search_text(row)) for row in rows],
                              k1=config.bm25.k1, b=config.bm25.b)
        vectors = data["vector"].combine_chunks()
        self.vectors = vectors.flatten().to_numpy().reshape(len(vectors), -1).astype(np.float32)
        self.build_seconds = time.perf_counter() - started

    def bm25_top(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """Indices and scores of the ``pool`` best BM25 steps (score > 0), best first."""
        from mem_retrieval.text.tokenize import tokenize

        scores = self.bm25.get_scores(tokenize(query))
        hits = np.flatnonzero(scores > 0)
        if hits.size > self.pool:
            hits = hits[np.argpartition(-scores[hits], self.pool - 1)[: self.pool]]
        order = sorted(hits.tolist(), key=lambda i: (-scores[i], self.gids[i]))
        return np.asarray(order, dtype=np.int64), scores[order]

    def search(self, query: str) -> list[str]:
        """Global ids of the fused result list for ``query``."""
        from mem_retrieval.text.embed import embed, prepare

        top, scores = self.bm25_top(query)
        if not top.size:
            return []
        vector = embed([prepare(query, self.max_chars)], self.package)[0]
        cosine = self.vectors @ vector  # every step, as a naive build would
        k = min(self.rerank_k, top.size)
        fused = self.weight * cosine[top[:k]] + (1 - self.weight) * scores[:k] / (scores[0] or 1.0)
        head = sorted(range(k), key=lambda i: (-fused[i], self.gids[top[i]]))
        return [self.gids[top[i]] for i in head] + [self.gids[i] for i in top[k:].tolist()]
