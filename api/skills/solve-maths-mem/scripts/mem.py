#!/usr/bin/env python3
"""The skill's memory functions on the command line: `python scripts/mem.py COMMAND …` is `mem
COMMAND …` (core-set, recall-search, archive-search, archive-get, archive-insert, check, record).
Needs this project's package, mem_retrieval, installed in the Python that runs it (the README's
install command); without it, or without a package it needs, one line says so (exit 2)."""

import sys


def _refuse(error: ImportError) -> None:
    """Say in one line which Python lacks what, and exit 2; an error of the package's own code
    (a module of mem_retrieval's that does not import: a broken install) is raised as it is."""
    if error.name is not None and error.name.startswith("mem_retrieval."):
        raise error
    ours = error.name in (None, "mem_retrieval")
    missing = "no mem_retrieval package" if ours else f"mem_retrieval, but not {error.name}, which it needs"
    sys.stderr.write(f"mem.py: {sys.executable} has {missing}: run this script with the Python that `mem` "
                     "was installed in, or call `mem` itself\n")
    sys.exit(2)


try:
    from mem_retrieval.cli.main import main
except ImportError as error:
    _refuse(error)

if __name__ == "__main__":
    try:
        code = main()
    except ModuleNotFoundError as error:  # a dependency, imported when a command first needs it
        if error.name is None or error.name.startswith("mem_retrieval"):
            raise
        _refuse(error)
    sys.exit(code)
