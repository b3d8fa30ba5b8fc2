"""The query path: ids first, then BM25 candidates, then embeddings rerank them; pages of 5."""
