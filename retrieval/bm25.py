"""BM25 as LanceDB's full-text index scores it (k1 = 1.2, b = 0.75, idf = ln(1 + (N − n + 0.5)/(n
+ 0.5)); a query word written twice counts twice), from an inverted index held in memory: over the
whole table, or over only the rows in memory as of a time or before a hidden step (SPEC §10), as
over a table holding only them. LanceDB's own index counts its statistics over the whole table, the
rows written later and the hidden step too, so a search that cuts memory cannot ask it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mem_retrieval.configs import LANCE_B, LANCE_K1

if TYPE_CHECKING:
    import numpy as np



@dataclass(frozen=True)
class Bm25Index:
    """BM25 impacts by term: term ``t``'s postings are ``docs[offsets[t]:offsets[t + 1]]``, each
    with its term frequency ``tf`` and its precomputed share of a score over the whole table,
    idf(t) · tf·(k1 + 1) / (tf + k1·(1 − b + b·dl/avgdl)); ``lengths``: each document's length."""

    terms: dict[str, int]
    offsets: "np.ndarray"
    docs: "np.ndarray"
    tf: "np.ndarray"
    impacts: "np.ndarray"
    lengths: "np.ndarray"
    k1: float = LANCE_K1
    b: float = LANCE_B

    @classmethod
    def build(cls, tokens, k1: float = LANCE_K1, b: float = LANCE_B, chunk: int = 8192) -> "Bm25Index":
        """The index of a string column of space-separated tokens (row ``i`` is document ``i``),
        read ``chunk`` documents at a time (the split words of 100,000 steps at once cost ~400 MB)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        column = tokens.combine_chunks() if isinstance(tokens, pa.ChunkedArray) else tokens
        size = len(column)
        terms: dict[str, int] = {}
        parts_docs, parts_terms, parts_tf, lengths = [], [], [], []
        for start in range(0, size, chunk):
            words = pc.split_pattern(column.slice(start, chunk).fill_null(""), " ")
            counts = np.asarray(words.value_lengths().to_numpy(zero_copy_only=False), dtype=np.int64)
            encoded = words.flatten().dictionary_encode()
            local = np.asarray([terms.setdefault(w, len(terms)) if w else -1
                                for w in encoded.dictionary.to_pylist()], dtype=np.int64)
            term_ids = local[np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)]
            docs = np.repeat(np.arange(start, start + len(counts), dtype=np.int64), counts)
            real = term_ids >= 0  # two spaces in a row, or an empty text
            docs, term_ids = docs[real], term_ids[real]
            lengths.append(np.bincount(docs - start, minlength=len(counts)))
            pairs, tf = np.unique((docs << 32) + term_ids, return_counts=True)
            parts_docs.append((pairs >> 32).astype(np.int32))
            parts_terms.append((pairs & 0xFFFFFFFF).astype(np.int32))
            parts_tf.append(tf)
        width = max(len(terms), 1)
        pair_docs = np.concatenate(parts_docs or [np.zeros(0, np.int32)])
        pair_terms = np.concatenate(parts_terms or [np.zeros(0, np.int32)])
        tf = np.concatenate(parts_tf or [np.zeros(0, np.int64)])
        by_term = np.argsort(pair_terms, kind="stable")  # documents stay in order within a term
        pair_docs, pair_terms, tf = pair_docs[by_term], pair_terms[by_term], tf[by_term]
        df = np.bincount(pair_terms, minlength=width)
        offsets = np.zeros(width + 1, dtype=np.int64)
        np.cumsum(df, out=offsets[1:])
        length = np.concatenate(lengths or [np.zeros(0, np.int64)]).astype(np.int32)
        tf = tf.astype(np.uint16 if not tf.size or tf.max() < 2**16 else np.uint32)
        impacts = _shares(tf, length[pair_docs], df[pair_terms], size, _mean(length), k1, b)
        return cls(terms, offsets, pair_docs, tf, impacts, length, k1, b)

    @property
    def size(self) -> int:
        return len(self.lengths)

    def scores(self, tokens: str, memory: "np.ndarray | None" = None) -> "np.ndarray":
        """Every document's BM25 score for the query ``tokens`` (space-separated, as indexed).

        ``memory`` (a boolean per document; None: all of them) is what the search may know of:
        memory as it stood at a time, or before a hidden step was written (``Filters.memory``).
        The statistics (how many documents, how many hold each word, their average length) are
        then counted over it alone, as over a table holding only those documents, and the others
        score 0: a step written later, or hidden, weighs no word either."""
        import numpy as np

        spans = [(self.offsets[t], self.offsets[t + 1]) for t in
                 (self.terms.get(word) for word in tokens.split()) if t is not None]
        if not spans:
            return np.zeros(self.size, dtype=np.float64)
        docs = np.concatenate([self.docs[a:b] for a, b in spans])
        if memory is None:
            impacts = np.concatenate([self.impacts[a:b] for a, b in spans])
        else:
            keep = memory[docs]
            sizes = [b - a for a, b in spans]
            held = np.add.reduceat(keep.astype(np.int64), np.cumsum([0, *sizes[:-1]]))  # no span is empty
            docs = docs[keep]
            tf = np.concatenate([self.tf[a:b] for a, b in spans])[keep]
            impacts = _shares(tf, self.lengths[docs], np.repeat(held, sizes)[keep],
                              int(np.count_nonzero(memory)), _mean(self.lengths[memory]), self.k1, self.b)
        return np.bincount(docs, weights=impacts, minlength=self.size)


def _mean(lengths: "np.ndarray") -> float:
    import numpy as np

    return float(lengths.mean(dtype=np.float64)) if len(lengths) else 1.0


def _shares(tf, lengths, df, size: int, average: float, k1: float, b: float) -> "np.ndarray":
    """Each posting's share of a score, as float32 (what LanceDB scores in): its term frequency
    ``tf`` in a document of ``lengths`` words, its term held by ``df`` of ``size`` documents of
    ``average`` length (Lance's idf, ln(1 + (N − n + 0.5)/(n + 0.5)))."""
    import numpy as np

    tf, df = np.asarray(tf, dtype=np.float64), np.asarray(df, dtype=np.float64)
    idf = np.log1p((size - df + 0.5) / (df + 0.5))
    return (idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths / (average or 1.0)))).astype(np.float32)
