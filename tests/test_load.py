"""`mem serve` under load: 8 clients × 50 mixed calls at once get exactly the answers the same
calls get one at a time (no answer lost, none mixed up with another's), the server really answered
several at once (its peak), and clients that leave mid-call do not stop it. (`mem mcp` under the
same load: test_mcp.py.)"""

from __future__ import annotations

import json
import random
import socket
import threading
import time

import pytest

from test_serve import REPO, Servers, sock, served
from mem_retrieval.cli.forward import code_version, environment, exchange
from mem_retrieval.memory import Memory

pytestmark = pytest.mark.slow  # a real server process: run with --slow (CI does)

CLIENTS, CALLS = 8, 50

# read commands of every kind: searches (rerank, bm25, ids, settings, pages), gets, recall, errors
MIX = [
    ["archive-search", "GL2m/Sp2m generation", "--setting", "F_q((t))"],
    ["--json", "archive-search", "GL2m/Sp2m generation", "--setting", "F_q((t))", "--page", "2"],
    ["archive-search", "E6/F4 at function level", "--library"],
    ["archive-search", "Satake transform generation", "--strategy", "bm25"],
    ["archive-search", "A5-7 A2-4"],
    ["archive-search", "restriction map not onto", "--kind", "lemma", "--status", "proved"],
    ["archive-search", "GL2m", "--page", "99"],
    ["archive-search", "GL2m", "--kind", "nonsense"],
    ["archive-get", "satake-two-levels/A5-7"],
    ["--json", "archive-get", "A3-2", "--run", "iwahori-two-levels"],
    ["archive-get", "Z9-9"],
    ["recall-search", "audit of the pair model"],
    ["recall-search", "--id", "A5-8", "--json"],
    ["recall-search", "registry", "--run", "satake-two-levels", "--until", "R-1"],
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    import shutil

    from test_serve import EXAMPLE

    root = tmp_path_factory.mktemp("load") / "ws"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".mem"))
    Memory.open(root).index(progress=False)
    servers = Servers(tmp_path_factory.mktemp("logs"))
    try:
        proc = servers.start(root)
        yield root, proc
    finally:
        servers.stop_all()


def request(root, argv: list[str]) -> dict:
    return {"argv": ["-w", str(root), *argv], "cwd": str(REPO),
            "env": {"MEM_WORKSPACE": None, "vars": environment()}, "build": code_version()}


def test_eight_clients_at_once_get_exactly_the_one_at_a_time_answers(server):
    root, proc = server
    alone = []
    for argv in MIX:
        answer = exchange(sock(root), request(root, argv))
        assert answer is not None and "code" in answer, (argv, answer)
        alone.append(answer)
    assert {a["code"] for a in alone} == {0, 1, 2}
    before = served(root)
    plans = [[random.Random(client).randrange(len(MIX)) for _ in range(CALLS)] for client in range(CLIENTS)]
    results: list[list[tuple[int, dict | None]]] = [[] for _ in range(CLIENTS)]
    start = threading.Barrier(CLIENTS)

    def client(n: int) -> None:
        start.wait()
        for i in plans[n]:
            results[n].append((i, exchange(sock(root), request(root, MIX[i]), timeout=120)))

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    took = time.monotonic() - began
    wrong = [(n, MIX[i], answer) for n in range(CLIENTS) for i, answer in results[n] if answer != alone[i]]
    assert sum(map(len, results)) == CLIENTS * CALLS
    assert not wrong, wrong[:3]
    assert served(root) == before + CLIENTS * CALLS
    peak = exchange(sock(root), {"ping": True})["peak"]
    assert peak > 1, "the server never answered two requests at once"
    print(f"\n{CLIENTS} × {CALLS} calls in {took:.1f} s, at most {peak} at once")


def test_clients_leaving_mid_call_do_not_stop_the_server(server):
    root, proc = server
    expected = exchange(sock(root), request(root, MIX[0]))
    for leave_after in ("sending", "half a request", "connecting"):
        for _ in range(4):
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.connect(sock(root))
            data = json.dumps(request(root, MIX[0])).encode()
            if leave_after == "sending":
                conn.sendall(data)
                conn.shutdown(socket.SHUT_WR)     # the server now answers a client that is gone
            elif leave_after == "half a request":
                conn.sendall(data[: len(data) // 2])
            conn.close()
    time.sleep(1.0)
    assert proc.poll() is None
    assert exchange(sock(root), request(root, MIX[0])) == expected
    assert exchange(sock(root), {"ping": True})["pid"] == proc.pid
