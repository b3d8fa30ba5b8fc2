"""Whole-process measurements for the speed benchmark: a `mem` command run as a fresh process, timed
from spawn to exit, with its peak memory; and `mem serve` started, waited for and stopped around the
calls that should reach it.

Peak memory is the child's ``ru_maxrss`` (``os.wait4``). Linux counts in it the resident size of the
process it was forked from (the high-water mark survives fork and exec), and the benchmark process
holds the model, so each command is started by a small timer process (``TIMER``): it forks the
command, times it from spawn to exit and reports its exit status, seconds and peak memory."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SERVER_WAIT_S = 300.0  # seconds for `mem serve` to load the index and the model


# Run by a fresh interpreter: argv = [result file, command...]. SIGTERM is passed on to the command.
TIMER = """
import json, os, signal, subprocess, sys, time
started = time.perf_counter()
child = subprocess.Popen(sys.argv[2:])
signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
_, status, usage = os.wait4(child.pid, 0)
seconds = time.perf_counter() - started
with open(sys.argv[1], "w") as out:
    json.dump({"returncode": os.waitstatus_to_exitcode(status), "seconds": seconds,
               "peak_mb": usage.ru_maxrss / 1024}, out)
"""


@dataclass(frozen=True)
class Child:
    """One finished process: exit status, wall seconds, peak resident memory, its output."""

    returncode: int
    seconds: float
    peak_mb: float
    stdout: str
    stderr: str

    def json(self) -> dict[str, Any]:
        return json.loads(self.stdout)

    def check(self, what: str) -> "Child":
        if self.returncode != 0:
            tail = (self.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise RuntimeError(f"{what} exited with status {self.returncode}: {tail}")
        return self


def child_env(server: bool = False) -> dict[str, str]:
    """The environment for `mem` children: this repository importable, no stray workspace, and
    forwarding to `mem serve` off unless ``server``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.pop("MEM_WORKSPACE", None)
    env.pop("MEM_NO_SERVER", None)
    if not server:
        env["MEM_NO_SERVER"] = "1"
    return env


def mem_argv(workspace: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "mem_retrieval.cli", "--workspace", str(workspace), *args]


def _timed(argv: list[str], result: Path, stdout, stderr, server: bool = False) -> subprocess.Popen:
    """Start ``argv`` under the timer, in its own process group."""
    return subprocess.Popen([sys.executable, "-c", TIMER, str(result), *argv], cwd=ROOT,
                            env=child_env(server), stdin=subprocess.DEVNULL, stdout=stdout,
                            stderr=stderr, start_new_session=True)


def _result(proc: subprocess.Popen, result: Path, out, err) -> Child:
    try:
        timed = json.loads(result.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        timed = {"returncode": proc.returncode or -1, "seconds": float("nan"), "peak_mb": float("nan")}
    out.seek(0)
    err.seek(0)
    return Child(timed["returncode"], timed["seconds"], timed["peak_mb"],
                 out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace"))


def run_child(argv: list[str], show_stderr: bool = False, server: bool = False) -> Child:
    """Run ``argv`` to completion; ``show_stderr`` passes its stderr through (progress bars);
    ``server``: a read command may be forwarded to `mem serve` (else MEM_NO_SERVER=1)."""
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryFile() as out, \
            tempfile.TemporaryFile() as err:
        result = Path(tmp) / "timed.json"
        proc = _timed(argv, result, out, None if show_stderr else err, server)
        proc.wait()
        return _result(proc, result, out, err)


def serve_available() -> bool:
    """Whether this checkout has `mem serve` (``python -m mem serve --help`` succeeds)."""
    return run_child([sys.executable, "-m", "mem_retrieval.cli", "serve", "--help"]).returncode == 0


class Server:
    """`mem serve` on a workspace: started, waited for until it says it is ready (its ``--json``
    line naming the socket, printed once the model is loaded), stopped with SIGTERM."""

    def __init__(self, workspace: Path):
        self.workspace = workspace
        self.tmp = tempfile.TemporaryDirectory()
        self.out = tempfile.TemporaryFile()
        self.err = tempfile.TemporaryFile()
        self.proc: subprocess.Popen | None = None
        self.peak_mb: float | None = None
        self.start_seconds: float | None = None
        self.requests: int | None = None  # as the server reports when it stops

    def __enter__(self) -> "Server":
        started = time.perf_counter()
        self.proc = _timed(mem_argv(self.workspace, "--json", "serve"),
                           Path(self.tmp.name) / "timed.json", self.out, self.err)
        while time.perf_counter() - started < SERVER_WAIT_S:
            if self.proc.poll() is not None:
                raise RuntimeError(f"`mem serve` exited with status {self.proc.returncode}: "
                                   f"{_tail(self.err)}")
            if '"socket"' in _text(self.out):
                self.start_seconds = time.perf_counter() - started
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"`mem serve` was not ready in {SERVER_WAIT_S:.0f} s")

    def stop(self) -> None:
        """SIGTERM to the server (through its timer); SIGKILL to the group after 15 s."""
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        with tempfile.TemporaryFile() as empty:
            self.peak_mb = _result(self.proc, Path(self.tmp.name) / "timed.json", empty, empty).peak_mb
        said = re.search(r"after (\d+) requests", _text(self.err))
        self.requests = int(said.group(1)) if said else None

    def __exit__(self, *exc) -> None:
        self.stop()
        self.out.close()
        self.err.close()
        self.tmp.cleanup()


def _text(handle) -> str:
    handle.seek(0)
    return handle.read().decode("utf-8", "replace")


def _tail(handle) -> str:
    lines = _text(handle).strip().splitlines()
    return lines[-1] if lines else "(no output)"
