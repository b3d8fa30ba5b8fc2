#!/usr/bin/env python3
"""The skill's memory functions on the command line: `python scripts/mem.py COMMAND …` is `mem
COMMAND …` (core-set, recall-search, archive-search, archive-get, archive-insert, check, record).
Needs this project's package, mem_retrieval, installed in the Python that runs it (the README's
install command); without it, one line says so (exit 2)."""

import sys

try:
    from mem_retrieval.cli.main import main
except ImportError as error:  # the package, or one it needs (a Python that finds it on a path alone)
    ours = error.name is None or error.name.startswith("mem_retrieval")
    missing = "no mem_retrieval package" if ours else f"mem_retrieval, but not {error.name}, which it needs"
    sys.stderr.write(f"mem.py: {sys.executable} has {missing}: run this script with the Python that `mem` "
                     "was installed in, or call `mem` itself\n")
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(main())
