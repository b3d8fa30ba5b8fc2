#!/usr/bin/env python3
"""The skill's memory functions on the command line: `python scripts/mem.py COMMAND …` is `mem
COMMAND …` (core-set, recall-search, archive-search, archive-get, archive-insert, check, record).
Needs the mem-retrieval package installed (pip install mem-retrieval)."""

import sys

from mem_retrieval.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
