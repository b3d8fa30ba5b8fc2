"""`mem index --engine ray`: the texts an index run must embed, embedded by a pool of Ray actors.

The change plan is the local engine's (``build.plan_changes``: only what changed is embedded, each
text once). Those texts, longest first, go to Ray Data as blocks of ``ray.batch_size``;
``map_batches`` runs them through a pool of ``workers`` actors, one CPU each, each loading the model
once (the model's files travel once through Ray's object store, so a worker on another machine
needs only this package installed, not the index). The vectors stream back to the driver, which
commits exactly as the local engine does: one LanceDB commit per table (upserts and deletions
together), then meta.json.

Why the driver commits rather than the workers writing Lance fragments: an index run is an upsert
(merge on gid, with deletions) and Lance fragments written by workers can only be appended. Upserts
done by workers against one read version either conflict (two keys in one fragment) or, for a key
two workers both insert, leave it twice; so workers compute vectors and one process merges. The
commit is one step either way, and cheap beside the embedding (1.5 KB of vector per text: a million
texts are 1.5 GB streamed to the driver, against hours of model time). Ray Data's own
``write_lance`` sink also fails with current pylance (it passes an argument pylance 14 dropped).

Ray is imported only here (and by the scale benchmark, ``eval/bench_scale.py``), and only when this
engine is asked for."""

from __future__ import annotations

import hashlib
import os
import re
import warnings
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mem_retrieval.configs import Config
from mem_retrieval.records.errors import BadInput, Refused, install_hint, installed
from mem_retrieval.records.files import replace_folder


NO_RAY = "--engine ray needs Ray: "


def require_ray() -> None:
    """BadInput unless Ray is installed, found without importing it (seconds): `mem index` asks
    before it reads or writes anything (it refused only once the model was exported, leaving the
    export and an empty index behind)."""
    if not installed("ray"):
        raise BadInput(NO_RAY + install_hint("distributed"))


def _ray():
    try:
        import ray
    except ImportError:
        raise BadInput(NO_RAY + install_hint("distributed")) from None
    return ray


def _files(folder: Path, names: set[str] | None = None) -> dict[str, bytes]:
    """The files of ``folder`` (relative path -> bytes), only ``names`` when given."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and (names is None or p.name in names)}


def pack_model(spec) -> dict[str, Any]:
    """What an actor needs to rebuild ``spec`` (``text.embed.ModelSpec``) on any machine: the
    files it reads (an ONNX export's graph and tokenizer; a tuned model's folder for torch), keyed
    by a hash of their bytes."""
    from mem_retrieval.text.onnx import FP32, INT8, MANIFEST, PROBE, SIGNED

    pack: dict[str, Any] = {"model": spec.model, "quantized": spec.quantized,
                            "export": None, "model_files": None}
    if spec.export is not None:  # int8: each actor's CPU chooses between the two (OnnxEmbedder)
        wanted = {INT8, SIGNED, PROBE} if spec.quantized else {FP32}
        wanted |= {"tokenizer.json", MANIFEST}
        pack["export"] = _files(Path(spec.export), wanted)
    elif Path(spec.model).is_dir():
        pack["model_files"] = _files(Path(spec.model))
    digest = hashlib.sha256(repr((spec.model, spec.quantized)).encode())
    for files in (pack["export"] or {}, pack["model_files"] or {}):
        for name, data in files.items():
            digest.update(name.encode())
            digest.update(data)
    pack["key"] = digest.hexdigest()[:16]
    return pack


def unpack_model(pack: dict[str, Any], root: Path | None = None):
    """The ModelSpec of ``pack``, its files written once under ``root`` (default: this machine's
    temporary folder) in a folder named by their hash (actors on one machine share it)."""
    from mem_retrieval.text.embed import ModelSpec

    base = (root or _own_folder(f"mem-ray-models-{os.getuid()}")) / pack["key"]
    _forget_old(base)

    def place(name: str, files: dict[str, bytes] | None) -> str | None:
        if files is None:
            return None
        def write(scratch: Path) -> None:
            for relative, data in files.items():
                (scratch / relative).parent.mkdir(parents=True, exist_ok=True)
                (scratch / relative).write_bytes(data)

        target = base / name
        if not target.is_dir():  # another actor may place it first: then it stays as placed
            replace_folder(target, write, keep_existing=True)
        return str(target)

    model = place("model", pack["model_files"]) or pack["model"]
    return ModelSpec(model, place("export", pack["export"]), pack["quantized"])


def _own_folder(name: str) -> Path:
    """``name`` in this machine's temporary folder, made by this user and writable by no other
    (``records.files.private``): the actors of one user share it. One someone else made first
    (its name is predictable) may hold their model: then the user's export cache's ``name``
    (``text.onnx.cache_dir``); where neither is the user's own, PermissionError naming them (a
    fresh temporary folder a run would be left behind by every actor of every run)."""
    from mem_retrieval.records.files import private
    from mem_retrieval.text.onnx import cache_dir

    cache = cache_dir()
    temporary = Path(tempfile.gettempdir()) / name
    for folder, below in ((temporary, temporary), *([(cache / name, cache)] if cache is not None else [])):
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:
            continue
        if private(folder, below):
            return folder
    other = "" if cache is None else f", nor is {cache / name}"
    raise PermissionError(f"{temporary} is not a folder of this user's own (another user made it, or "
                          f"a file stands there){other}: set TMPDIR or MEM_CACHE_DIR to one")


def _forget_old(base: Path, days: float = 1.0) -> None:
    """Drop the folders of other models not used for ``days`` (the cache does not grow forever);
    mark ``base`` used."""
    if base.parent.is_dir():
        for old in base.parent.iterdir():
            if old != base and not old.name.startswith(".") and time.time() - old.stat().st_mtime > days * 86400:
                shutil.rmtree(old, ignore_errors=True)
    if base.is_dir():
        os.utime(base)


class Embedder:
    """One actor of the pool: the model loaded once (in ``__init__``), then a block of texts at a
    time to vectors, on one thread (the actor owns one CPU); ``batch_size`` is the model's
    (``model.batch_size``, read by torch: a block of ``ray.batch_size`` is no padded batch)."""

    def __init__(self, pack: list, batch_size: int):
        import ray

        from mem_retrieval.text.embed import embed

        self.spec = unpack_model(ray.get(pack[0]))
        self.batch_size = batch_size
        embed(["warm"], self.spec, 1, workers=1)  # load now: the first batch is timed like the rest

    def __call__(self, batch):
        import pyarrow as pa

        from mem_retrieval.text.embed import embed

        started = time.perf_counter()
        matrix = embed(batch["text"].to_pylist(), self.spec, self.batch_size, workers=1)
        busy = (time.perf_counter() - started) / max(1, len(matrix))  # model seconds, per text
        vectors = pa.FixedSizeListArray.from_arrays(pa.array(matrix.ravel()), matrix.shape[1])
        return pa.table({"i": batch["i"], "vector": vectors, "busy": pa.array([busy] * len(matrix))})


_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b.*")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _term_as_interrupt(before: Any) -> None:
    """Make SIGTERM stop this process as Ctrl-C does (``KeyboardInterrupt``: the index is left as
    an interrupted run leaves it, the engine closes), in place of the handlers ``ray.init`` and
    Ray's core worker install, which printed a 9-line stack dump and aborted (exit 134): the
    caller's own handler ``before`` where it had one (the command line's: `mem: terminated`, exit
    143), else one raising KeyboardInterrupt. Only on the main thread, where a handler can be set."""
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, before if callable(before) else interrupt)


# What an HTTP/2 client sends first (its preface, then its settings): a gRPC server, as Ray's GCS
# is, answers with its own settings frame (a 9-byte frame header, type 4)
_HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _answers(address: str) -> None:
    """Refused unless Ray's GCS answers at a cluster's ``HOST:PORT`` (``ray.address``, or
    ``RAY_ADDRESS`` for "auto"), as a gRPC server does (``_HTTP2_HELLO``): ``ray.init`` retried
    one where nothing listens for good, printing Ray's log lines, and one where another server
    listens (a web server) inside Ray's own code, where Ctrl-C is not heard: the index run never
    ended. Each within 5 seconds."""
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS", "")
    host, colon, port = address.removeprefix("ray://").rpartition(":")  # a Ray Client server is one too
    if not colon or "://" in host or not port.isdigit() or not host:
        return  # "local", or none named: Ray says what it finds, at once
    try:
        conn = socket.create_connection((host.strip("[]"), int(port)), timeout=5)
    except OSError as error:
        raise Refused(f"cannot start or reach Ray at {address}: nothing answers there "
                      f"({error.strerror or error})") from None
    head, deadline = b"", time.monotonic() + 5
    with conn:
        try:
            conn.sendall(_HTTP2_HELLO)
            while len(head) < 9 and (left := deadline - time.monotonic()) > 0:
                conn.settimeout(left)  # 5 s for the whole answer, however it trickles in
                if not (part := conn.recv(9 - len(head))):
                    break
                head += part
        except OSError:  # no answer in time, or the connection dropped: no GCS
            pass
    if len(head) < 9 or head[3] != 4:
        raise Refused(f"cannot start or reach Ray at {address}: what answers there is not Ray "
                      + ("(its client server answers as a gRPC server; is this its port, 10001?)"
                         if address.startswith("ray://") else
                         "(its GCS answers as a gRPC server; is this the head node's GCS port, 6379?)"))


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _one_line_errors(batches: Iterator[Any]) -> Iterator[Any]:
    """``batches``, an actor's error (which Ray wraps in screens of tracebacks: the model's folder
    not writable, say) raised as one line naming the error at its root."""
    import ray

    try:
        yield from batches
    except ray.exceptions.RayError as error:
        lines = [line.strip() for line in _ANSI.sub("", str(error)).splitlines() if line.strip()]
        root = [line for line in lines if _ERROR_LINE.match(line)]
        cause = (root or lines or [type(error).__name__])[-1]
        raise Refused(f"an embedding actor of Ray failed: {cause[:300]}") from None


class RayEngine:
    """A pool of Ray actors embedding texts for one index run. Uses the Ray the caller already
    initialised; else starts a local instance (``ray.address`` "": a new one, even where
    ``RAY_ADDRESS`` or ``ray start`` names a cluster) or joins a cluster (``ray.address``: "auto",
    which reads ``RAY_ADDRESS``, or ``ray://HOST:10001``), and leaves it again in ``close``."""

    def __init__(self, spec, config: Config, workers: int | None = None,
                 on_message: Callable[[str], None] | None = None):
        self.started = False  # this engine started the instance: ``close`` shuts it down
        self._terminate: Any = None  # the SIGTERM handler to put back in ``close``
        try:
            self._start(spec, config, workers, on_message)
        except BaseException:  # refused, or stopped (Ctrl-C) as Ray started: no process of it stays
            self.close()  # (the caller's ``close`` never ran: the engine was not made; Ray's agents
            raise  # were left for minutes)

    def _start(self, spec, config: Config, workers: int | None,
               on_message: Callable[[str], None] | None) -> None:
        ray = _ray()
        wanted = (config.ray.workers if workers is None else workers) or None  # 0: one per CPU
        if not ray.is_initialized():
            address = config.ray.address or "local"  # "local": a new instance, whatever cluster
            # RAY_ADDRESS or a `ray start` on this machine names (joining one refuses num_cpus)
            options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                       "logging_level": "ERROR"}
            if address == "local":  # a local instance has this machine's CPUs, however many are wanted
                options["num_cpus"] = min(wanted or os.cpu_count() or 1, os.cpu_count() or 1)
            _answers(address)
            if _main_thread():  # the caller's, put back in ``close`` (ray.init installs its own)
                self._terminate = signal.getsignal(signal.SIGTERM)
            self.started = True  # from here: what ray.init started is shut down, even stopped midway
            try:
                with warnings.catch_warnings():  # Ray forks its processes; they never touch lancedb
                    warnings.filterwarnings("ignore", message="lancedb fork")
                    ray.init(address=address, **options)
            except (ConnectionError, RuntimeError, ValueError) as error:
                where = "a local instance" if address == "local" else address
                raise Refused(f"cannot start or reach Ray at {where}: "
                              f"{str(error).splitlines()[0][:200]}") from None
            if self._terminate is not None:
                _term_as_interrupt(self._terminate)
            # Ray prints every error a worker raises (a retried task, an actor that died) to this
            # process's stdout, from a thread of its own, tracebacks and all: a `--json` caller read
            # 200 lines of them before its JSON. The driver's logs are Ray's; errors reach the
            # caller from ``stream``, in one line. (No public switch: this is the flag
            # ``print_worker_logs`` reads; tests/test_ray_engine.py checks stdout stays clean.)
            ray._private.worker._worker_logs_enabled = False
        import logging

        try:
            import ray.data  # configures its logger on import: quieted after
        except ImportError as error:  # Ray without its extra [data] (what it needs: `error.name`)
            raise BadInput(f"--engine ray needs Ray Data ({error.name or error}): "
                           f"{install_hint('distributed')}") from None

        logging.getLogger("ray.data").setLevel(logging.CRITICAL)  # its log file keeps the details; an
        # actor's error reaches the caller as one line (``stream``)
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.workers = min(wanted or cpus, cpus)
        if wanted and wanted > cpus and on_message:
            on_message(f"Ray has {cpus} CPUs: {self.workers} embedding actors, not {wanted}")
        self.batch_size = config.ray.batch_size  # texts a block, sent to an actor at a time
        self.model_batch = config.model.batch_size  # texts the model pads to one length (torch)
        self.model = ray.put(pack_model(spec))
        self.sent = 0  # texts sent to the actors (tests check only the changed ones are)
        self.busy = 0.0  # the actors' seconds in the model, summed (the benchmark's per-worker rate)

    def stream(self, texts: list[str], chunk: int,
               progress: Callable[[int, int], None] | None = None) -> Iterator[tuple[list[int], Any]]:
        """``(positions, vectors)`` for ``texts``, about ``chunk`` at a time, as the pool
        finishes them (in no fixed order; positions index ``texts``)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute  # noqa: F401  (pa.compute)

        ray = _ray()
        if not texts:
            return
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # longest first, as locally
        table = pa.table({"i": pa.array(order, pa.int64()), "text": pa.array([texts[i] for i in order])})
        size = max(1, min(self.batch_size, -(-len(texts) // self.workers)))  # every actor gets work
        blocks = [table.slice(start, size) for start in range(0, len(order), size)]
        self.sent += len(texts)
        dataset = ray.data.from_arrow(blocks).map_batches(
            Embedder, fn_constructor_kwargs={"pack": [self.model], "batch_size": self.model_batch},
            compute=ray.data.ActorPoolStrategy(size=min(self.workers, len(blocks))), num_cpus=1,
            batch_size=size,
            batch_format="pyarrow")
        positions: list[int] = []
        parts: list[Any] = []
        for batch in _one_line_errors(dataset.iter_batches(batch_format="pyarrow", batch_size=None)):
            self.busy += float(pa.compute.sum(batch["busy"]).as_py() or 0.0)
            index = batch["i"].to_pylist()
            column = batch["vector"]
            if isinstance(column, pa.ChunkedArray):
                column = column.combine_chunks()
            flat = column.flatten().to_numpy(zero_copy_only=False)  # flatten: respects a slice
            parts.append(flat.reshape(len(index), column.type.list_size))
            positions += index
            if progress is not None:
                progress(len(index), sum(len(texts[i]) for i in index))
            if len(positions) >= chunk:
                yield positions, np.vstack(parts).astype(np.float32, copy=False)
                positions, parts = [], []
        if positions:
            yield positions, np.vstack(parts).astype(np.float32, copy=False)

    def embed(self, texts: list[str], progress: Callable[[int, int], None] | None = None):
        """One unit vector per text, in the order given."""
        import numpy as np

        out = None
        for positions, matrix in self.stream(texts, len(texts), progress):
            if out is None:
                out = np.empty((len(texts), matrix.shape[1]), dtype=np.float32)
            out[positions] = matrix
        return out

    def close(self) -> None:
        """Leave Ray: shut down the instance this engine started (none of its processes stay)."""
        if self.started:
            _ray().shutdown()
            self.started = False
            if self._terminate is not None:
                signal.signal(signal.SIGTERM, self._terminate)
                self._terminate = None
