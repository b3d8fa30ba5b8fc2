"""Text as indexing and search both see it: BM25 tokens (``tokenize``) and the embedding model
(``embed``, the one place that imports torch)."""
