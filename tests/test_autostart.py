"""A server that starts itself: the first read command that finds no `mem serve` answers in-process
and starts one in the background; the next call is answered by it; it stops when idle; it is off
by config or environment; `mem serve --status` and `--stop` see and stop it. Real processes; every
server a test starts is stopped before it ends."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import build_workspace
from mem_retrieval.cli.forward import exchange

pytestmark = pytest.mark.slow  # real servers: run with --slow (CI does)


def env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items()
           if k not in ("MEM_NO_AUTOSTART", "MEM_NO_SERVER", "MEM_WORKSPACE")}
    return out | extra


def mem(root: Path, *argv: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "--workspace", str(root), *argv],
                          capture_output=True, text=True, timeout=120, env=env(**extra))


def ping(root: Path) -> dict | None:
    socket = root / ".mem" / "serve.sock"
    return exchange(str(socket), {"ping": True}, timeout=5.0) if socket.exists() else None


def wait_for(condition, seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


@pytest.fixture
def ws(tmp_path):
    workspace = build_workspace(tmp_path / "ws")
    (workspace.root / "solve" / "mem.toml").write_text("[serve]\nidle_timeout = 60\n")  # the idle test: 12
    assert mem(workspace.root, "index").returncode == 0
    yield workspace
    answer = ping(workspace.root)
    if answer:  # never leave a server behind
        os.kill(answer["pid"], signal.SIGTERM)
        wait_for(lambda: ping(workspace.root) is None, 15)


def test_the_first_read_starts_one_server_the_next_uses_it_and_it_stops_when_idle(ws):
    # 12 s idle: each step below is one cold client (about 1 s, 3.3 s seen on a loaded machine)
    (ws.root / "solve" / "mem.toml").write_text("[serve]\nidle_timeout = 12\n")
    first = mem(ws.root, "archive-search", "statement of a2")
    assert first.returncode == 0 and first.stdout.startswith("page 1 of")
    assert wait_for(lambda: ping(ws.root) is not None), (ws.root / ".mem" / "serve.log").read_text()
    pid = ping(ws.root)["pid"]
    assert not (ws.root / ".mem" / "serve.starting").exists()
    second = mem(ws.root, "archive-search", "statement of a2")
    assert second.stdout == first.stdout and second.returncode == 0  # the same answer, served warm
    assert ping(ws.root)["requests"] >= 1 and ping(ws.root)["pid"] == pid
    status = mem(ws.root, "serve", "--status")
    assert status.returncode == 0 and f"pid {pid}" in status.stdout
    said = re.search(r"; ([0-9,]+) (requests?) answered, at most", status.stdout)  # "1 requests"
    assert said and (said[2] == "request") == (said[1] == "1"), status.stdout
    assert wait_for(lambda: ping(ws.root) is None, 30), (ws.root / ".mem" / "serve.log").read_text()
    assert not (ws.root / ".mem" / "serve.sock").exists()


def test_an_index_in_another_folder_starts_a_server_too(ws, tmp_path):
    """With `index.uri` a folder, the workspace has no .mem for the server's socket and marker: no
    call ever started one, each ran cold."""
    (ws.root / "solve" / "mem.toml").write_text(f'[index]\nuri = "{tmp_path / "elsewhere"}"\n'
                                               "[serve]\nidle_timeout = 60\n")
    assert mem(ws.root, "index").returncode == 0
    shutil.rmtree(ws.root / ".mem")
    first = mem(ws.root, "archive-search", "statement of a2")
    assert first.returncode == 0 and first.stdout.startswith("page 1 of")
    assert wait_for(lambda: ping(ws.root) is not None), (ws.root / ".mem" / "serve.log").read_text()
    assert mem(ws.root, "archive-search", "statement of a2").stdout == first.stdout


def test_calls_while_a_server_starts_never_start_a_second(ws):
    calls = [subprocess.Popen([sys.executable, "-m", "mem_retrieval.cli", "--workspace", str(ws.root),
                               "archive-search", "statement"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=env()) for _ in range(4)]
    assert all(call.wait(timeout=120) == 0 for call in calls)
    assert wait_for(lambda: ping(ws.root) is not None)
    time.sleep(2)
    servers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _serves(p, ws.root)]
    assert len(servers) == 1


def _serves(proc: Path, root: Path) -> bool:
    try:
        words = (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"serve" in words and str(root).encode() in words


def test_off_by_config_or_environment(ws):
    assert mem(ws.root, "archive-search", "statement", MEM_NO_SERVER="1").returncode == 0
    (ws.root / "solve" / "mem.toml").write_text("[serve]\nauto = false\n")
    assert mem(ws.root, "archive-search", "statement").returncode == 0
    time.sleep(3)
    assert ping(ws.root) is None and not (ws.root / ".mem" / "serve.starting").exists()


@pytest.mark.parametrize("name, value", [("MEM_NO_SERVER", "false"), ("MEM_NO_AUTOSTART", " Off ")])
def test_a_switch_set_to_false_no_or_off_leaves_the_server_on(ws, name, value):
    """Any value but empty or 0 turned it off: a CI template's ``MEM_NO_SERVER=false`` got no
    server, silently. Empty, 0, false, no and off (any case) are off; anything else is on."""
    assert mem(ws.root, "archive-search", "statement", **{name: value}).returncode == 0
    assert wait_for(lambda: ping(ws.root) is not None), (ws.root / ".mem" / "serve.log").read_text()


def test_a_config_from_a_pipe_is_not_read_again_to_start_a_server(ws):
    """The call read `--config /dev/stdin` (or `<(…)`); starting the server read it again: empty,
    so its `[serve] auto = false` was lost and a server started (a terminal waited for a second
    Ctrl-D after the answer)."""
    done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "--workspace", str(ws.root), "--config",
                           "/dev/stdin", "archive-search", "statement"], input="[serve]\nauto = false\n",
                          capture_output=True, text=True, timeout=120, env=env())
    assert done.returncode == 0
    time.sleep(3)
    assert ping(ws.root) is None and not (ws.root / ".mem" / "serve.starting").exists()


def test_stop_stops_it_and_status_says_none(ws):
    mem(ws.root, "archive-get", "alpha/a1")
    assert wait_for(lambda: ping(ws.root) is not None)
    stopped = mem(ws.root, "serve", "--stop")
    assert stopped.returncode == 0 and "stopped pid" in stopped.stdout
    assert ping(ws.root) is None
    status = mem(ws.root, "serve", "--status", MEM_NO_SERVER="1")
    assert status.returncode == 1 and status.stderr.startswith("mem: no server answers on ")


def test_an_index_an_upgrade_left_starts_none(ws):
    """An index of another format refuses every call until `mem index --full`: a server was started
    all the same, loaded the model and answered each call with that refusal."""
    meta = ws.root / ".mem" / "meta.json"
    meta.write_text(json.dumps(json.loads(meta.read_text()) | {"format": 7}))
    assert mem(ws.root, "archive-search", "statement").returncode == 2  # "run `mem index --full`"
    time.sleep(2)
    assert ping(ws.root) is None and not (ws.root / ".mem" / "serve.starting").exists()


def test_a_workspace_without_an_index_starts_none(tmp_path):
    workspace = build_workspace(tmp_path / "ws")
    assert mem(workspace.root, "archive-get", "alpha/a1").returncode == 0  # read from the files
    assert mem(workspace.root, "archive-search", "statement").returncode == 2  # "run `mem index`"
    time.sleep(2)
    assert ping(workspace.root) is None and not (workspace.root / ".mem" / "serve.starting").exists()


def test_an_index_on_an_object_store_gets_its_server_too(s3, tmp_path):
    """index.uri = s3://…: no local meta.json, yet the first read starts the server, which answers
    as the in-process call did."""
    workspace = build_workspace(tmp_path / "ws")
    config = s3.config(tmp_path / "s3.toml", f"s3://{s3.bucket()}/idx").read_text()
    (workspace.root / "solve" / "mem.toml").write_text(config + "\n[serve]\nidle_timeout = 30\n")
    assert mem(workspace.root, "index").returncode == 0
    assert not (workspace.root / ".mem" / "meta.json").exists()
    try:
        first = mem(workspace.root, "archive-search", "statement of a2")
        assert first.returncode == 0, first.stderr
        assert wait_for(lambda: ping(workspace.root) is not None), \
            (workspace.root / ".mem" / "serve.log").read_text()
        second = mem(workspace.root, "archive-search", "statement of a2")
        assert second.stdout == first.stdout and ping(workspace.root)["requests"] >= 1
    finally:
        assert mem(workspace.root, "serve", "--stop").returncode in (0, 1)
        assert wait_for(lambda: ping(workspace.root) is None, 15)


def test_a_call_a_live_server_declines_starts_no_other(ws):
    """A relative --config runs in-process even with a server up (its messages name the file as
    the caller wrote it): that call must not try to start a second server."""
    assert mem(ws.root, "archive-search", "statement").returncode == 0
    assert wait_for(lambda: ping(ws.root) is not None)
    (ws.root / "extra.toml").write_text("[search]\n")
    declined = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "--workspace", str(ws.root),
                               "--config", "extra.toml", "archive-search", "statement"], cwd=ws.root,
                              capture_output=True, text=True, timeout=120, env=env())
    assert declined.returncode == 0, declined.stderr
    time.sleep(3)
    servers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _serves(p, ws.root)]
    assert len(servers) == 1 and ping(ws.root)["requests"] == 0
    assert "already answers" not in (ws.root / ".mem" / "serve.log").read_text()


@pytest.mark.parametrize("entries", [None, "", "."], ids=["no-pythonpath", "empty-entry", "relative-entry"])
def test_the_started_server_imports_nothing_from_the_workspace(ws, entries):
    """The server ran with the workspace as its working folder and ``python -m``, which puts that
    folder first on the module path: a ``queue.py`` there (anyone who can write the workspace) ran
    as whoever searched it next. Started with ``-P``, it imports the standard library's. A
    PYTHONPATH entry that is empty (``export PYTHONPATH=$PYTHONPATH:/x`` with it unset) or relative
    named the server's folder, the workspace, until it was made the caller's."""
    marker = ws.root.parent / "imported"
    (ws.root / "queue.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                      "from importlib import import_module\n")
    path = os.environ.get("PYTHONPATH", "")
    extra = {} if entries is None else {"PYTHONPATH": os.pathsep.join([entries, path])}
    assert mem(ws.root, "archive-search", "statement", **extra).returncode == 0
    assert wait_for(lambda: ping(ws.root) is not None), (ws.root / ".mem" / "serve.log").read_text()
    assert not marker.exists()


def test_a_log_that_is_a_link_starts_no_server_and_is_not_written(ws):
    """serve.log a symbolic link (another user's, in their workspace) to a file of the caller's:
    the server's output was appended to it. The log is opened without following links."""
    target = ws.root.parent / "mine.txt"
    target.write_text("mine\n")
    (ws.root / ".mem" / "serve.log").symlink_to(target)
    assert mem(ws.root, "archive-search", "statement").returncode == 0
    time.sleep(3)
    assert ping(ws.root) is None and target.read_text() == "mine\n"


def test_a_log_that_is_a_pipe_starts_no_server_and_never_holds_the_call(ws):
    """serve.log a pipe nobody reads: the call printed its answer, then blocked for good opening the
    log to start the server (and so did every later call). The log is opened without waiting."""
    os.mkfifo(ws.root / ".mem" / "serve.log")
    for _ in range(2):
        done = mem(ws.root, "archive-search", "statement")  # its timeout: 120 s
        assert done.returncode == 0 and "statement" in done.stdout
    assert ping(ws.root) is None


def test_a_start_a_full_disk_stops_leaves_no_claim_behind(ws):
    """The claim's marker (.mem/serve.starting) made, then its pid not written (a full disk; here a
    file size limit of 0): the empty marker stayed, and for a minute no call started a server, even
    once there was room. Nothing stays; the next call starts one."""
    import resource

    def no_room() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))

    done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "--workspace", str(ws.root),
                           "archive-search", "statement"], capture_output=True, text=True, timeout=120,
                          env=env(), preexec_fn=no_room)
    assert done.returncode == 0 and "statement" in done.stdout, done.stderr
    assert not (ws.root / ".mem" / "serve.starting").exists() and ping(ws.root) is None
    assert mem(ws.root, "archive-search", "statement").returncode == 0
    assert wait_for(lambda: ping(ws.root) is not None)


def test_a_silent_listener_the_system_names_no_pid_for_is_never_signalled(tmp_path, monkeypatch):
    """`SO_PEERCRED` gives pid 0 for a listener in a pid namespace the caller cannot see (a server
    in another container sharing the workspace): `serve --stop` took it for a silent server and
    sent signal 0's meaning of a pid, its own process group, SIGTERM."""
    import socket

    from mem_retrieval.cli import forward

    path = str(tmp_path / "serve.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(4)  # never accepts: silent
    try:
        assert forward.ask(path, {"ping": True}, timeout=0.5) == (None, os.getpid())  # as the system says
        monkeypatch.setattr(forward, "_peer", lambda conn, path: (True, 0))  # as another namespace's
        assert forward.ask(path, {"ping": True}, timeout=0.5) == (None, None)
    finally:
        listener.close()


def test_a_server_naming_another_pid_is_not_believed(tmp_path):
    """The CLI took the pid a server named in its ping and sent it SIGTERM (`serve --stop`, and a
    retirement of a server of other code): whatever listened there could name any process. A server
    naming a pid other than its own (the socket's peer) is no server."""
    import socket
    import threading

    root = build_workspace(tmp_path / "ws").root
    (root / ".mem").mkdir()
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(root / ".mem" / "serve.sock"))
    listener.listen(4)

    def answer() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(1 << 16)
                conn.sendall(b'{"pid": %d, "requests": 0, "build": "x"}' % bystander.pid)

    threading.Thread(target=answer, daemon=True).start()
    try:
        assert ping(root) is None
        stopped = mem(root, "serve", "--stop", MEM_NO_SERVER="1")
        assert stopped.returncode == 1 and "no server answers" in stopped.stderr
        assert bystander.poll() is None  # alive
    finally:
        listener.close()
        bystander.kill()
