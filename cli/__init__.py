"""The `mem` command line: a thin shell over the Python API (records, indexers, retrieval, eval)."""
