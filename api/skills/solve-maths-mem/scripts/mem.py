#!/usr/bin/env python3
"""The skill's memory functions on the command line: `python scripts/mem.py COMMAND …` is `mem
COMMAND …` (core-set, recall-search, archive-search, archive-get, archive-insert, check, record).
Needs this project's package, mem_retrieval, installed in the Python that runs it (the README's
install command)."""

import sys

from mem_retrieval.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
