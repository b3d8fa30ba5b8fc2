"""What a long-lived process (`mem serve`, `mem mcp`) keeps between calls: a ``Memory`` per
workspace, configuration and index version, and each thread's own standard output.

A ``Memory`` opens the table versions ``.mem/meta.json`` (or ``index.uri``'s) pins on its first
search and keeps them (its id map included), so it is reused only while meta.json, the table
folders and model files, the configuration files and the settings ontology are the files it was
built from: a `mem index` run meanwhile (a new meta.json, written by rename) gives the next call a
new ``Memory`` on the new versions, and a table or model deleted or changed one that finds it so.
Calls may come from several threads at once; the cache is guarded by a lock, and a ``Memory``'s
read path is safe to share (embedding is serialised in text.embed, LanceDB tables are safe to read
concurrently)."""

from __future__ import annotations

import io
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mem_retrieval.records.files import stamp

KEPT = 4  # Memory objects kept: one per workspace and config file (the newest index version)
UNREACHED = "unreached"  # the index version of a store that did not answer


def _index_version(root: Path, config_file: Path | None) -> Any:
    """The version of the meta.json the workspace's index is read through, wherever ``index.uri``
    puts it (``.mem/meta.json``'s stat, or an object store's ETag), and of the table and model
    files a search's opening checks (``Location.files_version``)."""
    from mem_retrieval.configs import load_config
    from mem_retrieval.indexers.location import Location
    from mem_retrieval.records.errors import MemError
    from mem_retrieval.records.workspace import Workspace

    try:
        config = load_config(root, config_file)
    except MemError:  # the Memory built for this call reports it
        return stamp(root / ".mem" / "meta.json")
    try:
        location = Location.of(Workspace(root), config)
        return location.meta_version(), location.files_version()
    except MemError:  # a bad index.uri, a store out of reach: the Memory built for this call says
        # so when the call needs the index (archive-get reads the files alone, as in-process)
        return UNREACHED


class WarmMemories:
    """``get(workspace, config_file)``: the Memory of that workspace and configuration, for the
    index version meta.json pins now."""

    def __init__(self, kept: int = KEPT):
        self.kept = kept
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple, Any] = OrderedDict()
        self.built = 0  # Memory objects built (tests count them)

    def key(self, root: Path, config_file: Path | None) -> tuple:
        from mem_retrieval.configs import WORKSPACE_CONFIG

        files = [root / WORKSPACE_CONFIG, root / "solve" / "settings.toml"]
        if config_file is not None:
            files.append(Path(config_file))
        return (str(root), str(config_file), _index_version(root, config_file),
                *(stamp(f) for f in files))

    def fresh(self, workspace, config_file: Path | None = None):
        """A Memory of its own, not shared: for a write (``record`` reindexes, and reopens its
        Memory's searcher, which a search running in another thread may be using)."""
        from mem_retrieval.configs import load_config
        from mem_retrieval.memory import Memory

        return Memory(workspace, load_config(workspace.root, config_file))

    def get(self, workspace, config_file: Path | None = None):
        from mem_retrieval.configs import load_config
        from mem_retrieval.memory import Memory

        key = self.key(workspace.root, config_file)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        memory = Memory(workspace, load_config(workspace.root, config_file))  # may raise: not kept
        with self._lock:
            for older in [k for k in self._cache if k[:2] == key[:2] and k != key]:
                del self._cache[older]  # an older index version or config: never asked for again
            memory = self._cache.setdefault(key, memory)
            self._cache.move_to_end(key)
            self.built += 1
            while len(self._cache) > self.kept:
                self._cache.popitem(last=False)
        return memory


def warm_model(memory) -> None:
    """Load and run the model ``memory``'s index is searched with (its ONNX export, a tuned copy or
    the configured model, as meta.json says), as a first search would."""
    memory.retriever.searcher.query_vector("warm up")


class PerThreadStream(io.TextIOBase):
    """A stand-in for ``sys.stdout``/``sys.stderr`` that writes to the stream the current thread
    chose (``to``), else to the original: what a library prints while a request runs reaches that
    request's output, as it would in-process, and never another request's."""

    def __init__(self, original):
        self.original = original
        self._local = threading.local()

    def _target(self):
        return getattr(self._local, "stream", None) or self.original

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self._target().isatty()

    def fileno(self) -> int:
        return self.original.fileno()

    @property
    def encoding(self):  # type: ignore[override]
        return getattr(self.original, "encoding", "utf-8")

    @contextmanager
    def to(self, stream) -> Iterator[None]:
        previous = getattr(self._local, "stream", None)
        self._local.stream = stream
        try:
            yield
        finally:
            self._local.stream = previous


@contextmanager
def per_thread_output() -> Iterator[tuple[PerThreadStream, PerThreadStream]]:
    """Install per-thread ``sys.stdout`` and ``sys.stderr`` while the block runs."""
    saved = sys.stdout, sys.stderr
    out, err = PerThreadStream(sys.stdout), PerThreadStream(sys.stderr)
    sys.stdout, sys.stderr = out, err
    try:
        yield out, err
    finally:
        sys.stdout, sys.stderr = saved
