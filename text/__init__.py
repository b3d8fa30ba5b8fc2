"""Text as indexing and search both see it: BM25 tokens (``tokenize``) and the embedding model
(``embed``; torch is imported only by ``embed``, ``onnx`` (the export) and ``train``, each only
when it runs)."""
