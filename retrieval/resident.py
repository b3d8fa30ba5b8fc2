"""The pinned steps table held in memory, for a searcher that answers many queries (`mem serve`,
the Python API, the evaluators): BM25 from an in-memory inverted index (``bm25.Bm25Index``), the
prefilter as numpy masks, rows and vectors taken by position.

It gives what a one-shot search gives over the same table version (the same candidates, scores and
order; ties by gid): LanceDB's full-text index, or for a search that cuts memory (as of a time,
before a hidden step) BM25 over that memory alone (``engines.memory_bm25_candidates``), checked
against both in tests/test_resident.py, in about a millisecond where the index query takes ~10 at
100,000 steps. It costs one scan of the table (about 2 s and, with the vectors, ~1.9 KB a step at
100,000 steps), so a one-shot CLI call never builds it: a searcher builds it on a worker thread from
its third search on (one call searches at most twice), and the index answers until it is ready."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mem_retrieval.retrieval.bm25 import Bm25Index
from mem_retrieval.retrieval.candidates import Candidate, StepRow, from_arrow, in_gid_order
from mem_retrieval.retrieval.graph import COLUMNS as GRAPH_COLUMNS
from mem_retrieval.retrieval.graph import CitationGraph

if TYPE_CHECKING:
    import numpy as np

    from mem_retrieval.retrieval.strategies import Request

FILTER_COLUMNS = ("key", "run_key", "setting_key", "kind", "status", "in_library", "inserted_ts", "named_ts",
                  "named_seq")


def best(scores: "np.ndarray", keep: "np.ndarray | None", limit: int, tiebreak: "np.ndarray") -> "np.ndarray":
    """The positions of the ``limit`` best positive ``scores`` that ``keep`` lets through, best
    first, equal scores in ``tiebreak`` order."""
    import numpy as np

    hit = scores > 0
    if keep is not None:
        hit &= keep
    found = np.flatnonzero(hit)
    if len(found) > limit > 0:
        values = scores[found]
        edge = np.partition(values, len(values) - limit)[len(values) - limit]
        found = found[values >= edge]  # the best `limit`, and every score tied with the last
    order = np.lexsort((tiebreak[found], -scores[found]))
    return found[order][:max(limit, 0)]


@dataclass(frozen=True)
class ResidentSteps:
    """One steps table version in memory: the columns a hit shows (``rows``), the prefilter's
    columns, the vectors (None while `mem index` still computes some), the citation graph and the
    BM25 index, all by row position; ``row_ids`` maps LanceDB row ids to positions."""

    rows: object                       # pyarrow.Table of StepRow.COLUMNS
    columns: dict[str, "np.ndarray"]   # FILTER_COLUMNS (the setting as ``Request.mask`` reads it)
    vectors: "np.ndarray | None"
    gid_rank: "np.ndarray"             # each row's place in gid order (ties between equal scores)
    sorted_row_ids: "np.ndarray"
    row_id_positions: "np.ndarray"
    graph: CitationGraph
    bm25: Bm25Index

    @classmethod
    def scan(cls, table, vectors: bool) -> "ResidentSteps":
        """Read the pinned steps ``table`` once (with its vectors when ``vectors``)."""
        import numpy as np

        wanted = list(dict.fromkeys([*StepRow.COLUMNS, *FILTER_COLUMNS, *GRAPH_COLUMNS, "tokens"]))
        data = (table.search().select(wanted + (["vector"] if vectors else [])).with_row_id(True)
                .limit(max(table.count_rows(), 1)).to_arrow())
        columns = {name: np.asarray(data[name].to_numpy(zero_copy_only=False)) for name in FILTER_COLUMNS}
        columns["in_library"] = columns["in_library"].astype(bool)
        for name in ("kind", "status"):  # fixed-width text: compared in C, not object by object
            columns[name] = columns[name].astype(str)
        columns["settings"], setting_of = np.unique(columns.pop("setting_key"), return_inverse=True)
        columns["setting_of"] = setting_of.astype(np.int32)
        matrix = None
        if vectors and data.num_rows:
            block = data["vector"].combine_chunks()
            matrix = np.ascontiguousarray(block.flatten().to_numpy().reshape(len(block), -1), dtype=np.float32)
        gid_rank = in_gid_order(data)[1]
        row_ids = np.asarray(data["_rowid"].to_numpy(zero_copy_only=False), dtype=np.uint64)
        by_row_id = np.argsort(row_ids, kind="stable")
        held = cls(rows=data.select(list(StepRow.COLUMNS)).combine_chunks(), columns=columns,
                   vectors=matrix, gid_rank=gid_rank, sorted_row_ids=row_ids[by_row_id],
                   row_id_positions=by_row_id, graph=CitationGraph.of(data),
                   bm25=Bm25Index.build(data["tokens"]))
        del data
        _give_back_freed_memory()
        return held

    @property
    def nbytes(self) -> int:
        """What it holds, in bytes (the id and term dictionaries' Python objects not counted)."""
        arrays = [*self.columns.values(), self.gid_rank, self.sorted_row_ids, self.row_id_positions,
                  self.bm25.offsets, self.bm25.docs, self.bm25.tf, self.bm25.impacts,
                  self.bm25.lengths, self.graph.keys,
                  self.graph.order, self.graph.sorted_keys, self.graph.offsets, self.graph.targets]
        return (self.rows.nbytes + sum(a.nbytes for a in arrays)
                + (0 if self.vectors is None else self.vectors.nbytes))

    def candidates(self, positions: "np.ndarray", bm25: "np.ndarray | None" = None,
                   vectors: bool = True) -> list[Candidate]:
        """Candidates of the rows at ``positions``, in that order (``bm25``: their scores)."""
        import numpy as np

        positions = np.asarray(positions, dtype=np.int64)
        return from_arrow(self.rows.take(positions), "steps",
                          vectors=self.vectors[positions] if vectors and self.vectors is not None else None,
                          scores=None if bm25 is None else bm25.tolist())

    def text(self, tokens: str, request: "Request", limit: int, vectors: bool = True) -> list[Candidate]:
        """The ``limit`` best BM25 matches of ``tokens`` under the request's prefilter, best first
        (ties by gid): the candidates ``engines.lance_candidates`` gives, but for the statistics
        of a search as of a time or before a hidden step, counted over its memory alone."""
        if not tokens:
            return []
        scores = self.bm25.scores(tokens, request.filters.memory().mask(self.columns))
        chosen = best(scores, request.mask(self.columns), limit, self.gid_rank)
        return self.candidates(chosen, scores[chosen], vectors)

    def by_key(self, keys: list[int], request: "Request") -> list[Candidate]:
        """The steps with these keys that pass the request's prefilter, with their vectors."""
        import numpy as np

        rows = self.graph.rows(np.asarray(keys, dtype=np.int64))
        rows = rows[rows >= 0]
        keep = request.mask(self.columns)
        return self.candidates(rows if keep is None else rows[keep[rows]])

    def positions(self, row_ids: list[int]) -> "np.ndarray":
        """The positions of rows given by their LanceDB row ids (of this table version)."""
        import numpy as np

        wanted = np.asarray(row_ids, dtype=np.uint64)
        return self.row_id_positions[np.searchsorted(self.sorted_row_ids, wanted)]


def _give_back_freed_memory() -> None:
    """Return the memory the build freed to the system: Arrow's allocator (mimalloc) keeps the
    pages it freed, glibc its heap (``malloc_trim``; Linux only). At 100,000 steps the searcher's
    process then holds ~460 MB (~520 with the heap trimmed alone, ~700 with neither)."""
    import ctypes
    import sys

    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None).malloc_trim(0)
        except (OSError, AttributeError):  # a libc without malloc_trim (musl)
            pass
