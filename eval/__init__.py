"""Evaluation: retrieval quality (paging, metrics), memory quality (frontier), tests before use."""
