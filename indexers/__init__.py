"""Indexing: records -> LanceDB tables under WORKSPACE/.mem (derived data, rebuilt from the files)."""
