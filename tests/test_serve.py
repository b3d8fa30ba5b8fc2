"""`mem serve` and forwarding: a real server process on a copy of the example workspace, real `mem`
client processes. Each forwarded call is checked against the server's request counter (so an
identical answer cannot come from a silent fallback), and against the in-process path."""

from __future__ import annotations

import io
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mem_retrieval.cli.main import run as run_cli
from mem_retrieval.cli.forward import MAX_MESSAGE, code_version, exchange, read_command
from mem_retrieval.memory import Memory

pytestmark = pytest.mark.slow  # real processes: run with --slow (CI does)

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "workspace"
NOT_COPIED = shutil.ignore_patterns("serve.sock", "index.lock")


class Servers:
    """`mem serve` processes started by a test; all are stopped at teardown."""

    def __init__(self, logs: Path):
        self.logs = logs
        self.procs: list[subprocess.Popen] = []

    def start(self, root: Path, *flags: str, expect_ready: bool = True) -> subprocess.Popen:
        log = open(self.logs / f"serve-{len(self.procs)}.err", "w")
        proc = subprocess.Popen([sys.executable, "-m", "mem_retrieval.cli", "-w", str(root), "serve", *flags],
                                cwd=REPO, stdout=subprocess.PIPE, stderr=log, text=True,
                                env=client_env())
        self.procs.append(proc)
        if expect_ready:
            self.wait_ready(proc)
        return proc

    def wait_ready(self, proc: subprocess.Popen) -> None:
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        line = proc.stdout.readline() if ready else ""
        assert line.startswith("mem serve: ready on "), (line, self.log(proc))

    def log(self, proc: subprocess.Popen) -> str:
        return (self.logs / f"serve-{self.procs.index(proc)}.err").read_text()

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            proc.stdout.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A warm server on a copy of the example workspace, indexed (in this process) while the server
    warms up; stopped at the end of the module."""
    root = tmp_path_factory.mktemp("serve") / "ws"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".mem"))
    servers = Servers(tmp_path_factory.mktemp("logs"))
    try:
        proc = servers.start(root, expect_ready=False)
        Memory.open(root).index(progress=False)
        servers.wait_ready(proc)
        yield root
    finally:
        servers.stop_all()


@pytest.fixture
def indexed(server) -> Path:
    return server


@pytest.fixture
def servers(tmp_path):
    started = Servers(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture
def spare(indexed, tmp_path) -> Path:
    """A copy of the indexed workspace for tests that start, kill or stop their own server."""
    root = tmp_path / "spare"
    shutil.copytree(indexed, root, ignore=NOT_COPIED)
    return root


def client_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MEM_NO_SERVER", "MEM_WORKSPACE")}
    env.update(extra)
    return env


def mem(*argv: str, cwd: Path = REPO, **env: str) -> tuple[int, str, str]:
    """A `mem` client process: (exit status, stdout, stderr)."""
    done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", *argv], cwd=cwd, env=client_env(**env),
                          capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


def in_process(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_cli(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def sock(root: Path) -> str:
    return str(root / ".mem" / "serve.sock")


def served(root: Path) -> int:
    """How many requests the server of ``root`` has run."""
    answer = exchange(sock(root), {"ping": True})
    assert answer is not None, "no server answers"
    return answer["requests"]


def forwarded(root: Path, *argv: str, cwd: Path = REPO, **env: str) -> tuple[int, str, str]:
    """A client call that must have been answered by the server (its counter moves by one)."""
    before = served(root)
    result = mem(*argv, cwd=cwd, **env)
    assert served(root) == before + 1, f"not forwarded: {argv}"
    return result


CASES = [
    ("archive-search", "GL2m/Sp2m generation", "--setting", "F_q((t))"),
    ("--json", "archive-search", "GL2m/Sp2m generation", "--setting", "F_q((t))"),
    ("archive-search", "Satake transform generation", "--page", "2"),
    ("archive-search", "GL2m", "--page", "99"),                       # past the last page: exit 1
    ("--json", "archive-search", "GL2m", "--page", "99"),
    ("archive-search", "GL2m", "--kind", "nonsense"),                  # bad input: exit 2
    ("archive-search",),                                               # usage error: exit 2
    ("archive-search", "A5-7"),                                        # an exact id lookup
    ("archive-get", "satake-two-levels/A5-7"),
    ("--json", "archive-get", "A3-2", "--run", "iwahori-two-levels"),
    ("archive-get", "Z9-9"),                                           # not found, with suggestions
    ("recall-search", "audit of the Satake step"),
    ("recall-search", "--id", "A5-7", "--json"),
    ("recall-search", "audit", "--page", "2"),
    ("archive-search", "GL2m", "--page", "2", "--list-id", "0123456789abcdef"),  # another list's id
]


@pytest.mark.parametrize("argv", CASES, ids=" ".join)
def test_a_forwarded_read_answers_exactly_as_in_process(server, argv):
    code, out, err = forwarded(server, "-w", str(server), *argv)
    assert (code, out, err) == in_process("-w", str(server), *argv)
    assert out or err


def test_a_forwarded_answer_with_notes_reads_alike_with_its_streams_merged(server):
    """Merged (`2>&1`), a forwarded call printed its JSON and then its note, in-process the note
    first (stdout is buffered to the end): the client writes the notes first too."""
    def merged(**env: str) -> bytes:
        variables = client_env(**env)
        variables.pop("PYTHONUNBUFFERED", None)
        return subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "-w", str(server), "--json",
                               "archive-search", "GL2m generation", "--setting", "zorbly field"],
                              cwd=REPO, env=variables, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=120).stdout

    alone = merged(MEM_NO_SERVER="1")
    assert alone.startswith(b"mem: --setting 'zorbly field'")
    before = served(server)
    assert merged() == alone
    assert served(server) == before + 1


def test_a_stderr_that_cannot_take_the_notes_loses_them_not_the_answer(server):
    """stderr on a full disk: in-process the note ended the command (exit 1, no answer), and a
    forwarded call, writing the notes first, dropped the answer with them (exit 2): the answer
    is written and the status is its own."""
    argv = ("--json", "archive-search", "GL2m generation", "--setting", "zorbly field")

    def err_full(**env: str) -> tuple[int, str]:
        with open("/dev/full", "w") as full:
            done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "-w", str(server), *argv],
                                  cwd=REPO, env=client_env(**env), stdout=subprocess.PIPE, stderr=full,
                                  text=True, timeout=120)
        return done.returncode, done.stdout

    code, out, err = in_process("-w", str(server), *argv)
    assert code == 0 and err.startswith("mem: --setting 'zorbly field'")
    assert err_full(MEM_NO_SERVER="1") == (0, out)
    before = served(server)
    assert err_full() == (0, out)
    assert served(server) == before + 1


def test_the_cases_cover_success_not_found_and_bad_input(indexed):
    assert {in_process("-w", str(indexed), *argv)[0] for argv in CASES} == {0, 1, 2}


def test_no_server_env_runs_in_process_with_the_same_output(server):
    argv = ("-w", str(server), "archive-get", "satake-two-levels/A5-7")
    before = served(server)
    alone = mem(*argv, MEM_NO_SERVER="1")
    assert served(server) == before
    assert alone == forwarded(server, *argv) and alone[0] == 0


def test_an_answer_standard_output_cannot_take_is_one_line_in_process_and_forwarded(server):
    """Standard output on a full disk (``/dev/full``) ended in a traceback (exit 1), or, buffered
    (no PYTHONUNBUFFERED, as in an agent's shell), in "Exception ignored" at exit (120): the
    answer that cannot be written is one line on stderr, exit 2, forwarded or not, buffered or
    not, text or --json; a --json error goes to stderr with its own status, forwarded too."""
    def to_full(*argv: str, buffered: bool, **env: str) -> tuple[int, str]:
        variables = client_env(**env)
        variables.pop("PYTHONUNBUFFERED", None)
        with open("/dev/full", "w") as full:
            done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "-w", str(server), *argv],
                                  cwd=REPO, env=variables | ({} if buffered else {"PYTHONUNBUFFERED": "1"}),
                                  stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
        return done.returncode, done.stderr

    unwritten = (2, "mem: cannot write the output: No space left on device\n")
    not_found = (1, "mem: no step 'Z9-9' in run 'satake-two-levels'; nearest: satake-two-levels/A5-9, "
                    "satake-two-levels/A3-9, satake-two-levels/A1-9\n")
    for buffered in (False, True):
        for argv, said in ((("archive-get", "satake-two-levels/A5-7"), unwritten),
                           (("--json", "archive-get", "A5-7"), unwritten),
                           (("archive-search", "GL2m/Sp2m generation"), unwritten),
                           (("--json", "archive-get", "Z9-9", "--run", "satake-two-levels"), not_found)):
            assert to_full(*argv, buffered=buffered, MEM_NO_SERVER="1") == said, (argv, buffered)
            before = served(server)
            assert to_full(*argv, buffered=buffered) == said, (argv, buffered)
            assert served(server) == before + 1  # forwarded
        # unbuffered, argparse dropped a help it could not write: exit 0, nothing said
        for argv in (("check",), ("--help",), ("archive-search", "--help")):
            assert to_full(*argv, buffered=buffered, MEM_NO_SERVER="1") == unwritten, (argv, buffered)
    env = client_env(MEM_NO_SERVER="1")
    env.pop("PYTHONUNBUFFERED", None)
    done = subprocess.run(f"'{sys.executable}' -m mem_retrieval.cli -w '{server}' check | true; "
                          "echo \"status=${PIPESTATUS[0]}\"", shell=True, executable="/bin/bash", cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120)
    assert (done.stdout, done.stderr) == ("status=0\n", "")  # a reader that closed: no error


def test_the_workspace_is_found_from_the_folder_or_the_environment(server, tmp_path):
    argv = ("archive-search", "E6/F4 generation")
    expected = in_process("-w", str(server), *argv)
    assert forwarded(server, *argv, cwd=server) == expected
    assert forwarded(server, *argv, cwd=tmp_path, MEM_WORKSPACE=str(server)) == expected


def test_a_forwarded_call_imports_neither_lancedb_nor_torch(server):
    probe = ("import sys\nfrom mem_retrieval.cli.main import main\ncode = main(sys.argv[1:])\n"
             "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'lancedb', 'torch', "
             "'sentence_transformers', 'pyarrow', 'retrieval', 'indexers'})\n"
             "print('HEAVY', heavy, file=sys.stderr)\nraise SystemExit(code)\n")
    before = served(server)
    done = subprocess.run([sys.executable, "-c", probe, "-w", str(server), "archive-search",
                           "GL2m/Sp2m generation"], cwd=REPO, env=client_env(),
                          capture_output=True, text=True, timeout=60)
    assert served(server) == before + 1
    assert done.returncode == 0 and done.stdout.startswith("page 1 of ")
    assert "HEAVY []" in done.stderr


def test_only_read_commands_are_forwarded():
    assert read_command(["-w", "ws", "archive-search", "q"]) == ("archive-search", "ws")
    assert read_command(["--json", "--config", "c.toml", "archive-get", "A1-1", "-wx"]) == \
        ("archive-get", "x")
    assert read_command(["recall-search", "--id", "A1-1", "--workspace=w"]) == ("recall-search", "w")
    for argv in (["index"], ["-w", "ws", "core-set", "r", "phase", "x"], ["archive-insert", "r/A1-1"],
                 ["check"], ["serve"], ["eval", "paging"], ["archive-search", "q", "--help"],
                 ["archive-search", "q", "--he"], ["archive-get", "A1-1", "--h"],  # argparse's abbreviations
                 ["--conf", "c.toml", "archive-get", "A1-1"], ["--config", "archive-get"], []):
        assert read_command(argv) is None, argv


def test_bad_requests_are_answered_and_the_server_lives_on(server):
    path = sock(server)
    before = served(server)
    write = {"argv": ["-w", str(server), "index"], "cwd": str(server), "env": {}}
    assert "error" in exchange(path, write)
    assert "error" in exchange(path, {"argv": "archive-get A5-7", "cwd": "/", "env": {}})
    assert "error" in exchange(path, {"argv": ["archive-get", "A5-7"], "cwd": "/nonexistent/x",
                                      "env": {}})
    for raw in (b"not json", b"[1, 2]", b"{" * 10, b"x" * (MAX_MESSAGE + 10),
                b"[" * 100_000 + b"]" * 100_000):  # json's decoder recursed past Python's limit: no answer
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(20)
            conn.connect(path)
            try:
                conn.sendall(raw)
                conn.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # the server may stop reading an oversized request early
            reply = b"".join(iter(lambda: conn.recv(65536), b""))
        assert "error" in json.loads(reply)
    assert served(server) == before  # none of them ran
    assert forwarded(server, "-w", str(server), "archive-get", "A5-7", "--run",
                     "satake-two-levels")[0] == 0


def test_a_request_sent_a_byte_at_a_time_is_cut_off_when_its_time_is_up(server):
    """The time a client has to send its request (5 s) ran afresh at each byte: one sending a
    space every second held a worker for as long as it went on, and eight held them all (each
    caller then waited 30 s). The server answers it before it is done."""
    from mem_retrieval.cli.server import READ_TIMEOUT

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(sock(server))
        conn.settimeout(1.0)
        reply = b""
        for sent in range(int(READ_TIMEOUT) * 3):
            try:
                conn.sendall(b" ")
                reply = conn.recv(65536)
            except TimeoutError:
                continue
            except OSError:  # the server closed it: its answer is read below
                pass
            break
        conn.settimeout(20)
        reply += b"".join(iter(lambda: conn.recv(65536), b""))
    assert sent < READ_TIMEOUT * 3 - 1, "the server waited for the whole request"
    assert json.loads(reply)["error"] == f"bad request: not sent whole within {READ_TIMEOUT:g} s"


def test_a_reindex_is_served_without_restarting(server):
    argv = ("-w", str(server), "archive-search", "zorbification")
    tree_path = server / "satake-two-levels" / "tree.json"
    tree = json.loads(tree_path.read_text(encoding="utf-8"))
    step = next(s for s in tree["steps"] if s["id"] == "A5-8")
    assert forwarded(server, *argv)[0] == 1                   # no hit
    step["statement"] = "zorbification: " + step["statement"]
    tree_path.write_text(json.dumps(tree, ensure_ascii=False), encoding="utf-8")
    assert forwarded(server, *argv)[0] == 1                   # not indexed yet: the index is read
    Memory.open(server).index(progress=False)                 # in another process than the server
    code, out, err = forwarded(server, *argv)
    assert code == 0 and "1. satake-two-levels/A5-8" in out and "zorbification" in out
    assert (code, out, err) == in_process(*argv)


def _delete_manifests(root: Path) -> None:
    for manifest in (root / ".mem" / "lance" / "steps.lance" / "_versions").glob("*.manifest"):
        manifest.unlink()


def _truncate_model(root: Path) -> None:
    model = max((root / ".mem" / "models").rglob("*.onnx"), key=lambda p: p.stat().st_size)
    with model.open("r+b") as handle:
        handle.truncate(model.stat().st_size // 2)


@pytest.mark.parametrize("damage", [
    lambda root: [shutil.rmtree(e) for e in (root / ".mem" / "models").iterdir()],
    lambda root: [shutil.rmtree(e) for e in (root / ".mem" / "lance").iterdir()],
    _delete_manifests, _truncate_model], ids=["models", "tables", "manifests", "model-file"])
def test_a_model_or_table_deleted_under_a_warm_server_is_said_as_in_process(spare, servers, damage):
    """The server kept answering (exit 0, a page of hits) from what it had loaded after the index's
    ONNX export, a model file, its tables or a table's manifests were deleted or cut, where a new
    process says the index is damaged (exit 2): it now keys its cache on those files too
    (Location.files_version)."""
    servers.start(spare)
    argv = ("-w", str(spare), "archive-search", "GL2m/Sp2m generation")
    assert forwarded(spare, *argv)[0] == 0
    damage(spare)
    code, out, err = forwarded(spare, *argv)
    assert (code, out, err) == in_process(*argv) and code == 2
    assert "run `mem index --full`" in err


def test_a_caller_of_another_environment_runs_in_process(server, spare, servers):
    """The server answered with the environment of the call that started it: another caller's
    HOME (`~` in index.uri) or model cache were not its own. Such a call now runs in-process, and
    does not keep the server alive; AWS_* count only for an index on an object store
    (test_object_store.py), and other variables not at all."""
    argv = ("-w", str(server), "archive-get", "satake-two-levels/A5-7")  # a server with no idle timeout
    before = served(server)
    for name in ("MEM_CACHE_DIR", "HOME", "XDG_CACHE_HOME"):
        assert mem(*argv, **{name: "/elsewhere"}) == in_process(*argv)
    assert served(server) == before
    assert forwarded(server, *argv, AWS_PROFILE="dev", MEM_TRACE="1") == in_process(*argv)
    proc = servers.start(spare, "--lazy", "--idle-timeout", "3")  # now only what idles it out
    argv = ("-w", str(spare), "archive-get", "satake-two-levels/A5-7")
    other = {"argv": list(argv), "cwd": str(REPO),
             "env": {"MEM_WORKSPACE": None, "vars": {"HOME": "/elsewhere"}}, "build": code_version()}
    deadline = time.monotonic() + 20
    while proc.poll() is None and time.monotonic() < deadline:  # sent back each time: it idles out
        assert "error" in (exchange(sock(spare), other) or {"error": "stopped meanwhile"})
        time.sleep(0.3)
    assert proc.poll() == 0 and "idle for 3 s" in servers.log(proc)


def test_a_server_stopping_says_how_many_requests_it_answered_in_words_that_agree(spare, servers):
    """The line `mem serve` leaves when it stops read "after 1 requests" (`--status` said it
    right): one request is "1 request", two are "2 requests"."""
    argv = ("-w", str(spare), "archive-get", "satake-two-levels/A5-7")
    for count in (1, 2):
        proc = servers.start(spare, "--lazy", "--idle-timeout", "3")
        for _ in range(count):
            assert forwarded(spare, *argv)[0] == 0
        assert proc.wait(30) == 0
        assert servers.log(proc).splitlines()[-1] == \
            f"mem serve: stopped (idle for 3 s) after {count} request{'s' if count > 1 else ''}"


def test_a_server_of_other_code_is_stopped_and_the_call_runs_in_process(spare, servers):
    """A server left running by an upgrade (a new index format its code refuses, fixes it lacks)
    answered the new clients as its code did, until it idled out: a client of other code now gets
    no answer from it, stops it, and runs in-process; the next call starts a server of its code."""
    proc = servers.start(spare, "--lazy")
    argv = ["-w", str(spare), "archive-get", "satake-two-levels/A5-7"]
    assert exchange(sock(spare), {"ping": True})["build"] == code_version()
    other = ("import sys\nimport mem_retrieval.cli.forward as forward\n"
             "forward.code_version = lambda: 'other'\n"
             "from mem_retrieval.cli.main import main\nraise SystemExit(main())\n")
    done = subprocess.run([sys.executable, "-c", other, *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env=client_env(MEM_NO_AUTOSTART="1"))
    assert (done.returncode, done.stdout, done.stderr) == in_process(*argv)
    assert proc.wait(30) == 0 and "stopped (SIGTERM)" in servers.log(proc)


def test_status_names_a_server_of_other_code_and_serve_takes_its_place(spare, servers):
    """After an upgrade, `mem serve --status` called the old server healthy and `mem serve` refused
    to start ("a server already answers"), where any read command would have stopped it."""
    proc = servers.start(spare, "--lazy")
    other = ("import sys\nimport mem_retrieval.cli.forward as forward\n"
             "forward.code_version = lambda: 'other'\n"
             "from mem_retrieval.cli.main import main\nraise SystemExit(main())\n")

    def mem_of_other_code(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", other, "-w", str(spare), *argv], cwd=REPO, text=True,
                              capture_output=True, timeout=120, env=client_env(MEM_NO_AUTOSTART="1"))

    status = mem_of_other_code("serve", "--status")
    assert status.returncode == 0 and status.stdout.rstrip().endswith(
        "it runs other code than this mem (left by an upgrade?): the next read command stops it, "
        "`mem serve --stop` now")
    assert "other code" not in mem("-w", str(spare), "serve", "--status")[1]  # its own code's
    taking = subprocess.Popen([sys.executable, "-c", other, "-w", str(spare), "serve", "--lazy",
                               "--idle-timeout", "3"], cwd=REPO, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=client_env(MEM_NO_AUTOSTART="1"))
    assert proc.wait(30) == 0 and "stopped (SIGTERM)" in servers.log(proc)
    out, err = taking.communicate(timeout=60)
    assert taking.returncode == 0 and "mem serve: ready on " in out, err


def test_the_code_identity_changes_with_any_file_the_code_reads_and_any_rewrite(tmp_path):
    """code_version, on an installed copy of the package: it read only the modules' stats, so an
    edit of configs/default.toml (weights, page size) left a running server answering with the old
    defaults, and a file of another text but the same size and modification time (a build that
    fixes every file's time) looked the same. Each change below gives another identity; a file
    merely read does not, nor the package's path through a link to its folder."""
    import importlib.util

    def identity(package: Path) -> str:
        done = subprocess.run([sys.executable, "-c", "from mem_retrieval.cli.forward import "
                               "code_version; print(code_version())"], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(package.parent)}, timeout=60, check=True)
        return done.stdout.strip()

    installed = Path(importlib.util.find_spec("mem_retrieval").origin).parent  # api/ when editable
    package = tmp_path / "site" / "mem_retrieval"
    shutil.copytree(installed, package, ignore=shutil.ignore_patterns("__pycache__"))
    for layer in ("records", "configs", "text", "indexers", "retrieval", "eval", "cli"):
        if not (package / layer).exists():
            shutil.copytree(REPO / layer, package / layer, ignore=shutil.ignore_patterns("__pycache__"))
    seen = [identity(package)]
    assert identity(package) == seen[0]
    (package / "configs" / "default.toml").read_bytes()
    assert identity(package) == seen[0]
    (tmp_path / "link").symlink_to(tmp_path / "site")  # one installation reached by two paths: each
    assert identity(tmp_path / "link" / "mem_retrieval") == seen[0]  # call stopped the other's server

    def same_size_and_time(path: Path, old: bytes, new: bytes) -> None:
        stat = path.stat()
        text = path.read_bytes()
        assert old in text and len(old) == len(new)
        path.write_bytes(text.replace(old, new, 1))
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns

    same_size_and_time(package / "configs" / "default.toml", b"page_size = 5 ", b"page_size = 3 ")
    seen.append(identity(package))
    same_size_and_time(package / "cli" / "forward.py", b"(1 ms)", b"(2 ms)")
    seen.append(identity(package))
    for data in ("schemas", "skills"):
        (package / data / "extra.txt").write_text("x")
        seen.append(identity(package))
    assert len(set(seen)) == len(seen)


def test_the_warm_up_of_a_server_opens_the_index_as_its_first_search_would(spare):
    """Server.warm runs a search as a caller of its own environment: with none given it was sent
    back (the caller's HOME differed), so no model or table was loaded and the first request was
    cold (1.6 s, against 0.15 s)."""
    from mem_retrieval.cli.main import Caller
    from mem_retrieval.cli.warm import WarmMemories
    from mem_retrieval.records.workspace import Workspace

    memories = WarmMemories()
    out, err = io.StringIO(), io.StringIO()
    argv = ["-w", str(spare), "archive-search", "warm up", "--strategy", "bm25"]
    assert run_cli(argv, out=out, err=err, caller=Caller(spare, None, memories)) in (0, 1)
    assert err.getvalue() == "" and memories.get(Workspace.open(spare)).retriever._searcher is not None


@pytest.mark.parametrize("through", ["in-process", "server"])
def test_a_read_command_started_with_standard_error_closed_exits_with_its_status(spare, servers, through):
    """The exit at once flushed sys.stderr, and the client wrote the server's stderr to it: None
    when descriptor 2 was closed, so exit 1 after the answer."""
    if through == "server":
        servers.start(spare, "--lazy")
    before = served(spare) if through == "server" else 0
    done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "-w", str(spare), "archive-get",
                           "satake-two-levels/A5-7"], cwd=REPO, capture_output=False, stdout=subprocess.PIPE,
                          text=True, timeout=120,
                          env=client_env(**({"MEM_NO_AUTOSTART": "1"} if through == "server" else
                                            {"MEM_NO_SERVER": "1"})),
                          preexec_fn=lambda: os.close(2))
    assert done.returncode == 0 and "satake-two-levels/A5-7" in done.stdout
    assert through == "in-process" or served(spare) == before + 1


@pytest.mark.parametrize("through", ["in-process", "server"])
def test_a_read_command_started_with_standard_output_closed_says_its_error_and_exits_with_its_status(
        spare, servers, through):
    """With descriptor 1 closed (`>&-`) a search ended in a traceback (exit 1, a success's too), and
    through a server without its one-line error."""
    if through == "server":
        servers.start(spare, "--lazy")
    env = client_env(**({"MEM_NO_AUTOSTART": "1"} if through == "server" else {"MEM_NO_SERVER": "1"}))
    for ref, status in (("satake-two-levels/A5-7", 0), ("satake-two-levels/Z9-9", 1)):
        argv = [sys.executable, "-m", "mem_retrieval.cli", "-w", str(spare), "archive-get", ref]
        done = subprocess.run(argv, cwd=REPO, stderr=subprocess.PIPE, text=True, timeout=120, env=env,
                              preexec_fn=lambda: os.close(1))
        assert done.returncode == status and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.startswith("mem: no step 'satake-two-levels/Z9-9'") == bool(status)


def test_a_workspace_deeper_than_a_socket_name_may_be_is_served(spare, servers, tmp_path):
    """A Unix socket's name holds 108 bytes: a workspace 92 characters deep got "AF_UNIX path too
    long", no server, and every call ran cold (each starting a server that failed so again)."""
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "ws"
    shutil.copytree(spare, deep, ignore=NOT_COPIED)
    assert len(sock(deep).encode()) > 108
    servers.start(deep, "--lazy")
    assert exchange(sock(deep), {"ping": True})["peak"] == 0  # pings are no requests at work
    assert forwarded(deep, "-w", str(deep), "archive-get", "satake-two-levels/A5-7")[0] == 0
    assert exchange(sock(deep), {"ping": True})["peak"] == 1
    assert mem("-w", str(deep), "serve", "--stop")[0] == 0 and not Path(sock(deep)).exists()


def test_a_config_read_from_a_pipe_runs_in_process(spare, servers):
    """`--config /dev/stdin` or `--config <(…)` names the caller's own pipe: the server read its own
    standard input (the setting silently lost) or found no such file (exit 2)."""
    servers.start(spare, "--lazy")
    argv = ["-w", str(spare), "--config", "/dev/stdin", "archive-search", "GL2m generation"]
    before = served(spare)
    done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", *argv], cwd=REPO, env=client_env(),
                          input="[search]\npage_size = 2\n", capture_output=True, text=True, timeout=120)
    assert served(spare) == before
    assert done.returncode == 0 and done.stdout.startswith("page 1 of ") and "\n3. " not in done.stdout
    assert "\n2. " in done.stdout


def test_a_killed_server_leaves_a_socket_that_changes_nothing(spare, servers):
    proc = servers.start(spare, "--lazy")
    argv = [("-w", str(spare), "archive-get", "satake-two-levels/A5-7"),
            ("-w", str(spare), "archive-search", "GL2m", "--strategy", "bm25", "--page", "99")]
    alive = [forwarded(spare, *a) for a in argv]
    proc.send_signal(signal.SIGKILL)
    proc.wait(20)
    assert Path(sock(spare)).exists() and exchange(sock(spare), {"ping": True}) is None
    assert [mem(*a) for a in argv] == alive


def test_a_stale_socket_is_replaced_a_live_server_refused_and_sigterm_cleans_up(spare, servers):
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    (spare / ".mem").mkdir(exist_ok=True)
    stale.bind(sock(spare))
    stale.close()                                  # the file stays, nobody listens
    first = servers.start(spare, "--lazy")
    assert served(spare) == 0
    second = servers.start(spare, "--lazy", expect_ready=False)
    assert second.wait(60) == 1 and "already answers" in servers.log(second)
    assert served(spare) == 0                      # the first one is untouched
    first.send_signal(signal.SIGTERM)
    assert first.wait(20) == 0
    assert not Path(sock(spare)).exists()
    assert "stopped (SIGTERM)" in servers.log(first)


def test_another_users_live_socket_is_neither_replaced_nor_called_absent(spare):
    """On a workspace users share, connecting to another user's socket (0600) is refused, which
    `mem serve` (and a start) read as a stale socket: each user's server deleted the other's live
    one in turn, and `--status` said no server answers. Another user stands in here as a socket
    of another uid, reached without root's override of modes."""
    from conftest import without_root_override

    if os.geteuid() != 0:
        pytest.skip("a socket of another user needs root to make")
    (spare / ".mem").mkdir(exist_ok=True)
    path = sock(spare)
    theirs = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        theirs.bind(path)
        theirs.listen(1)
        os.chown(path, 65534, 65534)
        os.chmod(path, 0o600)
        before = os.lstat(path).st_ino
        said = (f"mem: {path} is the socket of another user's server (uid 65534), which this user may "
                "not reach: that user's `mem serve --stop` stops it (or remove the file, if their server "
                "is gone)\n")
        for argv in (["serve", "--lazy"], ["serve", "--status"]):
            done = subprocess.run(without_root_override([sys.executable, "-m", "mem_retrieval.cli",
                                                         "--workspace", str(spare), *argv]),
                                  capture_output=True, text=True, timeout=60, env=client_env())
            assert (done.returncode, done.stdout, done.stderr) == (1, "", said)
        assert os.lstat(path).st_ino == before  # theirs, still bound
    finally:
        theirs.close()


def test_a_socket_of_this_users_own_its_mode_changed_is_stale(spare, servers):
    """Taking a socket this user may not reach as live (another user's) took this user's own, its
    mode changed (no server of ours binds one so), as live too: `mem serve` said a server answers,
    and `--stop` that none does. It is stale, and replaced."""
    from conftest import without_root_override

    (spare / ".mem").mkdir(exist_ok=True)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(sock(spare))
    stale.close()
    os.chmod(sock(spare), 0)
    argv = [sys.executable, "-m", "mem_retrieval.cli", "--workspace", str(spare), "serve", "--lazy",
            "--idle-timeout", "30"]
    proc = subprocess.Popen(without_root_override(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=client_env())
    try:
        assert proc.stdout.readline().startswith("mem serve: ready on ")
        assert served(spare) == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)


def test_a_server_that_does_not_answer_is_named_by_status_and_stopped_by_stop(spare, servers, tmp_path):
    """A stopped or stuck server holds the socket and answers nothing: `--status` and `--stop` said
    "no server answers", `mem serve` refused to start beside it and each call waited 30 s."""
    proc = servers.start(spare, "--lazy")
    proc.send_signal(signal.SIGSTOP)
    code, out, err = mem("-w", str(spare), "serve", "--status")
    assert (code, out) == (1, "") and err == (f"mem: the server on {sock(spare)} (pid {proc.pid}) does not "
                                              "answer: `mem serve --stop` stops it\n")
    code, out, err = mem("-w", str(spare), "--json", "serve", "--stop")
    assert (code, err, json.loads(out)) == (0, "", {"stopped": proc.pid})
    assert proc.wait(20) == 0 and "stopped (SIGTERM)" in servers.log(proc)  # SIGCONT let it go cleanly
    assert not Path(sock(spare)).exists()
    # one that ignores SIGTERM and never accepts: killed, and its socket removed
    stuck = subprocess.Popen([sys.executable, "-c", (
        "import signal, socket, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(); print('up', flush=True); "
        "time.sleep(600)"), sock(spare)], stdout=subprocess.PIPE, text=True)
    assert stuck.stdout.readline() == "up\n"
    code, out, err = mem("-w", str(spare), "serve", "--stop")
    assert (code, out, err) == (0, f"mem serve: stopped pid {stuck.pid}, which did not answer\n", "")
    assert stuck.wait(20) == -signal.SIGKILL and not Path(sock(spare)).exists()
    stuck.stdout.close()
    assert mem("-w", str(spare), "serve", "--stop")[2] == f"mem: no server answers on {sock(spare)}\n"


def test_an_idle_server_stops_by_itself(spare, servers):
    proc = servers.start(spare, "--lazy", "--idle-timeout", "1")
    started = time.monotonic()
    assert proc.wait(30) == 0 and time.monotonic() - started < 10
    assert not Path(sock(spare)).exists()
    assert "idle for 1 s" in servers.log(proc)


@pytest.mark.parametrize("in_the_way", [".mem/serve.sock", ".mem"])
def test_a_socket_path_that_cannot_be_a_socket_is_one_line(spare, in_the_way):
    """A folder where the socket goes (or a file where .mem goes): one line, no traceback."""
    if in_the_way == ".mem":
        shutil.rmtree(spare / ".mem")
        (spare / ".mem").write_text("")
    else:
        (spare / in_the_way).mkdir()
    out, err = io.StringIO(), io.StringIO()
    code = run_cli(["-w", str(spare), "serve", "--lazy"], out=out, err=err)
    assert code == 1 and out.getvalue() == "" and err.getvalue().count("\n") == 1
    assert err.getvalue().startswith(f"mem: cannot listen on {sock(spare)}: ")


def test_serve_refuses_a_config_of_its_own_and_a_bad_workspace_config_at_start(spare):
    """`mem serve --config X` said ready and never read X (each call is served with the --config
    it names); a bad solve/mem.toml was ready too, then refused every call."""
    (spare / "other.toml").write_text("[search]\npage_size = 2\n")
    assert in_process("-w", str(spare), "--config", str(spare / "other.toml"), "serve", "--lazy") == (
        2, "", "mem: mem serve answers each call with the configuration that call names (its --config, "
               "and the workspace's solve/mem.toml): give --config to the calls\n")
    (spare / "solve" / "mem.toml").write_text("[search]\npage_size = 0\n")
    assert in_process("-w", str(spare), "serve", "--lazy") == (
        2, "", f"mem: {spare / 'solve' / 'mem.toml'}:2: search.page_size: must be at least 1, not 0\n")
    assert not (spare / ".mem" / "serve.sock").exists()


SIGNALLED_AT = ("import os, signal, sys\n"
                "import mem_retrieval.cli.server as server\n"
                "from mem_retrieval.cli.main import main\n"
                "root, name, caller, nth, when, number, *flags = sys.argv[1:]\n"
                "owner = {'signal': signal, 'chdir': os, 'socket_path': server}[name]\n"
                "real, calls = getattr(owner, name), []\n"
                "def call(*args, **kwargs):\n"
                "    if sys._getframe(1).f_code.co_filename.endswith(caller):\n"
                "        calls.append(1)\n"
                "    now = len(calls) == int(nth) and sys._getframe(1).f_code.co_filename.endswith(caller)\n"
                "    if now and when == 'before':\n"
                "        signal.raise_signal(getattr(signal, number))  # its handler runs here\n"
                "    result = real(*args, **kwargs)\n"
                "    if now and when == 'after':\n"
                "        signal.raise_signal(getattr(signal, number))\n"
                "    return result\n"
                "setattr(owner, name, call)\n"
                "sys.argv = ['mem', '-w', root, 'serve', '--lazy', '--started', *flags]\n"
                "raise SystemExit(main())\n")
SERVER, COMMAND = os.path.join("cli", "server.py"), os.path.join("commands", "serve.py")


@pytest.mark.parametrize("where, status, said", [  # said on stderr; stopping, it was ready (stdout)
    (("socket_path", COMMAND, 1, "after", "SIGTERM"), 143, "mem: terminated (SIGTERM)\n"),
    (("chdir", COMMAND, 1, "after", "SIGTERM"), 143, "mem: terminated (SIGTERM)\n"),
    (("signal", SERVER, 1, "after", "SIGTERM"), 0, "mem serve: stopped (SIGTERM) after 0 requests\n"),
    (("signal", SERVER, 3, "before", "SIGTERM", "--idle-timeout", "1"), 143, "mem: terminated (SIGTERM)\n"),
    (("signal", SERVER, 3, "before", "SIGINT", "--idle-timeout", "1"), 130, "mem: interrupted\n"),
    (("signal", SERVER, 4, "before", "SIGTERM", "--idle-timeout", "1"), 143, "mem: terminated (SIGTERM)\n"),
], ids=["retiring", "bound", "setting-handlers", "stopping-sigterm", "stopping-sigint", "stopping-late"])
def test_a_signal_as_the_server_starts_or_stops_removes_its_socket_and_its_claim_in_one_line(tmp_path, where,
                                                                                             status, said):
    """A SIGTERM as `mem serve` set its handlers ended in a traceback, exit 1; one before it served
    (as it retired a server of other code, which may take seconds, or once bound) was one line, but
    all left the socket, or the claim on the next start (`.mem/serve.starting`, which autostart
    waits on for 60 s); a signal as it stopped (an agent's timeout sends two) was a traceback."""
    root = tmp_path / "ws"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".mem"))
    (root / ".mem").mkdir()
    (root / ".mem" / "serve.starting").write_text("")
    argv = [sys.executable, "-c", SIGNALLED_AT, str(root), *map(str, where)]
    done = subprocess.run(argv, cwd=REPO, env=client_env(), capture_output=True, text=True, timeout=120)
    ready = f"mem serve: ready on {root / '.mem' / 'serve.sock'} (pid " if "--idle-timeout" in where else ""
    assert (done.returncode, done.stdout[:len(ready)], done.stderr) == (status, ready, said)
    assert done.stdout.count("\n") == bool(ready)
    assert sorted(path.name for path in (root / ".mem").iterdir()) == []


TWO_SIGTERMS = ("import os, signal, sys, threading, time\n"
                "import mem_retrieval.cli.server as server\n"
                "from mem_retrieval.cli.main import main\n"
                "real_signal, real_close, real_read = signal.signal, server.Server.close, os.read\n"
                "calls = []\n"
                "def read(fd, size):  # the watcher, woken, runs a moment later\n"
                "    data = real_read(fd, size)\n"
                "    if threading.current_thread().name == 'mem-sigterm':\n"
                "        time.sleep(0.1)\n"
                "    return data\n"
                "os.read = read\n"
                "def set_handler(*args):\n"
                "    result = real_signal(*args)\n"
                "    if sys._getframe(1).f_code.co_filename.endswith(os.path.join('cli', 'server.py')):\n"
                "        calls.append(args[0])\n"
                "        if len(calls) == 2:  # the server's handlers set: a SIGTERM they take\n"
                "            signal.raise_signal(signal.SIGTERM)\n"
                "    return result\n"
                "def close(self):\n"
                "    if not calls[2:]:\n"
                "        return real_close(self)\n"
                "    calls.clear()  # on its way out: a second SIGTERM, taken by another thread\n"
                "    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # while the main one\n"
                "    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()  # runs no Python\n"
                "    time.sleep(1)\n"
                "    return real_close(self)\n"
                "signal.signal, server.Server.close = set_handler, close\n"
                "sys.argv = ['mem', '-w', sys.argv[1], 'serve', '--lazy', '--started']\n"
                "raise SystemExit(main())\n")


def test_two_sigterms_as_the_server_stops_are_one_stop_that_removes_its_socket(tmp_path):
    """`mem`'s SIGTERM watcher (a thread woken by each signal, for commands stuck in native code)
    read the first signal, which the server's own handler had taken, once the handler before was
    put back, and counted it: at the second (an agent's timeout sends two, 1 ms apart) it exited at
    once, before the socket was removed (2 of 15 such double kills). Here the watcher reads a moment
    after it is woken, and the second comes as the server's way out is about to remove its socket,
    while the main thread runs no Python."""
    root = tmp_path / "ws"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".mem"))
    (root / ".mem").mkdir()
    (root / ".mem" / "serve.starting").write_text("")
    done = subprocess.run([sys.executable, "-c", TWO_SIGTERMS, str(root)], cwd=REPO, env=client_env(),
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (143, "", "mem: terminated (SIGTERM)\n")
    assert sorted(path.name for path in (root / ".mem").iterdir()) == []
