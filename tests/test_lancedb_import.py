"""lancedb imported without its REST namespace client (indexers/lancedb_import.py): a search never
runs the client's API modules (0.6 s of a cold call), and the deferral is invisible: every name of
the package is there when asked for, as after a plain import. Each case runs in a fresh interpreter,
since what is imported is per process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

REST = "lance_namespace_urllib3_client"


def _python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def _names(code: str) -> dict:
    """What the REST client package holds after ``code``, as a fresh interpreter sees it."""
    return json.loads(_python(
        code + "\nimport json, sys\n"
        f"import {REST} as c\n"
        "print(json.dumps({'version': c.__version__, 'client': c.ApiClient.__name__,\n"
        "                  'api': sorted(n for n in dir(c) if n.endswith('Api')),\n"
        "                  'models': c.models.__name__}))"))


def test_a_text_search_never_runs_the_rest_client(example):
    root = str(example.workspace.root)
    out = _python(
        "import sys\n"
        "from mem_retrieval.cli.main import run\n"
        f"assert run(['--workspace', {root!r}, 'archive-search', 'GL2m/Sp2m generation']) == 0\n"
        "assert 'lancedb' in sys.modules\n"
        f"print(sorted(n for n in sys.modules if n.startswith('{REST}.api')))")
    assert out == "[]"


@pytest.mark.slow  # two fresh interpreters importing the REST client whole (3 s)
def test_the_deferred_package_answers_as_a_plain_import():
    deferred = _names("from mem_retrieval.indexers.lancedb_import import import_lancedb\n"
                      "import_lancedb()")
    plain = _names("import lancedb")
    assert deferred == plain
    assert deferred["client"] == "ApiClient" and len(deferred["api"]) >= 5


@pytest.mark.slow  # a fresh interpreter (1.4 s)
def test_an_already_imported_client_is_left_as_it_is():
    out = _python(f"import {REST} as before\n"
                  "from mem_retrieval.indexers.lancedb_import import import_lancedb\n"
                  "import sys\n"
                  "import_lancedb()\n"
                  f"print(sys.modules[{REST!r}] is before and '__getattr__' not in vars(before))")
    assert out == "True"
