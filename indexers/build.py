"""`mem index`: bring the index up to date with the files, embedding only what changed.

Each row carries a content hash; a second run with nothing changed writes and embeds nothing. A
changed row is rewritten; its vector is reused whenever its embedding text is unchanged (or equals
another row's), so no text the index holds is embedded again (one it no longer holds, an edit put
back, is). Each table is updated in one LanceDB commit (upserts
and deletions together), so a crash leaves the previous version readable. Two `mem index` at once
on one machine are serialised by a lock on .mem/index.lock; writers on other machines (an index on
an object store) meet at meta.json, replaced by compare-and-swap (``store.publish_meta``), and
at the tables' stamps and lineage ids (``indexers/writer.py``, through which every commit goes).

The texts to embed go to the model in this process, or (``engine="ray"``) to a pool of Ray actors
(``indexers/distributed.py``); the commit is the same either way."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from datetime import timedelta
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mem_retrieval.configs import Config
from mem_retrieval.indexers import store, writer
from mem_retrieval.indexers.location import Location
from mem_retrieval.indexers.rows import Rows, build_rows, library_row, tokenize_rows
from mem_retrieval.indexers.schema import EMBEDDED_TABLES, SCHEMAS
from mem_retrieval.indexers.writer import Index
from mem_retrieval.records.errors import BadInput, InputError
from mem_retrieval.records.files import content_hash, stamp as file_stamp
from mem_retrieval.records.ids import split_gid
from mem_retrieval.records.parse import NotAFile
from mem_retrieval.records.types import LibraryEntry
from mem_retrieval.records.workspace import Workspace


@dataclass(frozen=True)
class TableReport:
    added: int = 0
    updated: int = 0
    removed: int = 0
    unchanged: int = 0


@dataclass(frozen=True)
class IndexReport:
    tables: dict[str, TableReport]
    embedded: int
    seconds: float
    full: bool
    version: dict[str, int] = field(default_factory=dict)
    searchable_seconds: float | None = None   # until rows and full-text index were committed
    engine: dict[str, Any] = field(default_factory=dict)  # name, workers, embedding seconds (busy: Ray)

    def total(self, name: str) -> int:
        return sum(getattr(t, name) for t in self.tables.values())

    def summary(self) -> str:
        counts = ", ".join(f"{self.total(n)} {n}" for n in ("added", "updated", "removed", "unchanged"))
        embedded = f"{self.embedded} texts embedded" if self.embedded else "nothing embedded"
        return f"indexed: {counts}; {embedded}; {self.seconds:.1f} s"

    def as_dict(self) -> dict[str, Any]:
        return {"tables": {name: asdict(report) for name, report in self.tables.items()},
                "added": self.total("added"), "updated": self.total("updated"),
                "removed": self.total("removed"), "unchanged": self.total("unchanged"),
                "embedded": self.embedded, "seconds": round(self.seconds, 3), "full": self.full,
                "searchable_seconds": None if self.searchable_seconds is None
                else round(self.searchable_seconds, 3), "engine": self.engine}


class Progress:
    """A tqdm bar on a terminal (stderr), silent otherwise."""

    def __init__(self, enabled: bool | None):
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.bar = None
        self.texts = self.done = 0  # texts to embed, texts embedded

    def start(self, texts: list[str], desc: str) -> None:
        """A bar over the characters of ``texts`` (what embedding time follows), counting texts."""
        if self.enabled and texts:
            from tqdm import tqdm

            self.texts, self.done = len(texts), 0
            self.bar = tqdm(total=sum(map(len, texts)), desc=desc, unit="char", unit_scale=True,
                            file=sys.stderr, leave=False)

    def update(self, texts: int, chars: int) -> None:
        if self.bar is not None:
            self.done += texts
            self.bar.set_postfix_str(f"{self.done:,}/{self.texts:,} texts", refresh=False)
            self.bar.update(chars)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


@dataclass(frozen=True)
class TablePlan:
    """What one table's commit will do: write ``changed`` (every row on a full build), delete
    ``removed``."""

    name: str
    changed: list[dict[str, Any]]
    removed: list[str]
    report: TableReport
    doubled: list[str] = field(default_factory=list)  # gids held twice: deleted, then written once


@dataclass(frozen=True)
class Plan:
    """The change plan of one index run, per table, and where reusable vectors are stored."""

    full: bool
    tables: dict[str, TablePlan]
    stored: dict[str, str]      # text hash -> a table holding its vector (same model)

    def texts_wanted(self) -> set[str]:
        """The text hashes the changed rows need vectors for."""
        return {row["text_hash"] for name in EMBEDDED_TABLES for row in self.tables[name].changed
                if row["text_hash"]}


KEEP = "keep"


def _check_temporary_folder() -> None:
    """LanceDB's updates spill to the temporary folder (``TMPDIR``, else /tmp): one missing or not
    writable failed the run as a damaged index, whose advice (`mem index --full`) rebuilt a whole
    index for nothing, and the next run failed again."""
    folder = os.environ.get("TMPDIR") or "/tmp"
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK | os.X_OK):
        why = ("does not exist" if not os.path.exists(folder) else
               "is not a folder" if not os.path.isdir(folder) else "is not writable")
        raise BadInput(f"the temporary folder {folder} (TMPDIR) {why}: LanceDB writes its temporary "
                       "files there; set TMPDIR to a folder you may write, or unset it")


def build_index(workspace: Workspace, config: Config, runs: list[str] | None = None,
                full: bool = False, progress: bool | None = None,
                on_message: Callable[[str], None] | None = None,
                tuned: dict[str, Any] | None | str = KEEP, engine: str | None = None,
                workers: int | None = None) -> IndexReport:
    """Index ``runs`` (default: all) and the library: plan, embed what changed, commit. Bad input
    raises InputError before any write; one `mem index` runs at a time on a machine
    (.mem/index.lock). ``tuned``: the model to embed with: ``KEEP`` the one the index records,
    None the configured model, or the provenance of a tuned copy (`mem tune`); a change of model
    re-embeds every text, so an index never mixes two. ``engine``: "local" or "ray" (default:
    ``index.engine``); ``workers``: Ray actors (default: ``ray.workers``)."""
    from filelock import FileLock, Timeout

    started = time.perf_counter()
    if (engine or config.index.engine) == "ray":
        from mem_retrieval.indexers.distributed import require_ray

        require_ray()
    scope_runs = workspace.check_runs(None if full else runs)
    _check_temporary_folder()
    location = Location.of(workspace, config)
    read_against = location.meta_version()  # the index as it stood when the files were read
    rows = build_rows(workspace, config, scope_runs)
    present = set(workspace.runs())
    lock = FileLock(str(location.lock_path))
    waited = False
    try:
        location.folder.mkdir(parents=True, exist_ok=True)
        try:
            lock.acquire(timeout=0.2)
        except Timeout:
            if on_message:
                on_message("another `mem index` is running; waiting for it to finish")
            lock.acquire()
            waited = True
    except OSError as error:  # a read-only file system or folder, a file in the way
        why = "it is not a folder; move it away" if location.blocked() else error.strerror or error
        raise BadInput(f"cannot write the index in {location.folder}: {why}") from None
    index = None
    try:
        if waited or location.meta_version() != read_against:  # another run held the lock, or
            # published while these files were read: its rows may be newer than these, which would
            # undo its change; read the files again
            rows, present = build_rows(workspace, config, scope_runs), set(workspace.runs())
        with _written_short(location, lambda: index), store.guard(location):
            location.trees_read()  # (a record this run could not read after its commit: refused first)
            index = open_index(location, config, full, tuned)
            overwritten = [name for name in index.rebuilt if name not in index.cut]
            if on_message and overwritten and not full:  # (asked to rebuild: it does anyway)
                on_message(f"the {', '.join(overwritten)} table{'s' if len(overwritten) > 1 else ''} of "
                           f"{location.uri} held a rebuild that was never published (a `mem index "
                           "--full` or `mem tune` that stopped, here or on another machine, or still "
                           "runs): writing on a copy of the versions meta.json pins")
            if on_message and index.cut and not full:
                on_message(f"the {', '.join(index.cut)} table{'s' if len(index.cut) > 1 else ''} of "
                           f"{location.uri} held commits that were never published and read back cut "
                           "short (a full disk or a file size limit stopped the run that wrote them): "
                           "writing on a copy of the versions meta.json pins")
            if on_message and (note := _outdated_export(index.spec)):
                on_message(note)
            narrowed = bool(runs) and not full
            if narrowed and index.full:  # RUN… narrows a rescan; a table built whole holds every run
                if on_message:
                    on_message(f"{'no index yet' if index.meta_token is None else 'the index is built whole'}"
                               f" (not only {', '.join(scope_runs)}): indexing every run")
                scope_runs, narrowed = workspace.check_runs(None), False
                rows = build_rows(workspace, config, scope_runs)
            drifted = library_drift(index, workspace, rows.library, scope_runs, present, config) \
                if narrowed else []
            if drifted:
                if on_message:
                    on_message(f"the library changed for {', '.join(drifted)} too: indexing "
                               f"{'it' if len(drifted) == 1 else 'them'} as well")
                scope_runs = [*scope_runs, *drifted]
                rows = build_rows(workspace, config, scope_runs)
            unfinished = pending_elsewhere(index, scope_runs, present) if narrowed else []
            if unfinished:
                waiting = f"the vectors of {', '.join(unfinished)} were left to compute by a run that stopped"
                try:
                    widened = build_rows(workspace, config, [*scope_runs, *unfinished])
                except InputError as error:  # theirs to mend: the runs asked for are indexed all the same
                    if on_message:
                        on_message(f"{waiting}; not now, as a file of theirs is bad input: {error}")
                else:
                    if on_message:
                        on_message(f"{waiting}: indexing {'it' if len(unfinished) == 1 else 'them'} as well")
                    scope_runs, rows = [*scope_runs, *unfinished], widened
            plan = plan_changes(index, rows, scope_runs if narrowed else None, present)
            known = _stored_vectors(index.tables, plan.stored, plan.texts_wanted() & set(plan.stored))
            known |= _pinned_vectors(index, plan.texts_wanted() - set(known))
            pending = sorted(plan.texts_wanted() - set(known), key=lambda h: (-len(rows.embed_text[h]), h))
            if pending and (engine or config.index.engine) == "ray":
                from mem_retrieval.indexers.distributed import RayEngine

                index.engine = RayEngine(index.spec, config, workers, on_message)
            bar = Progress(progress)
            if len(pending) <= config.index.vector_batch:  # one commit: vectors and rows together
                known.update(embed_texts(index, rows, pending, config, bar))
                versions = commit(index, plan, known, config)
                searchable = time.perf_counter() - started
            else:  # searchable first (BM25), the vectors after, in resumable batches
                versions = commit(index, plan, known, config, pending=set(pending))
                searchable = time.perf_counter() - started
                if on_message:
                    on_message(f"searchable (BM25 order) after {searchable:.1f} s; embedding "
                               f"{len(pending):,} texts in batches of {config.index.vector_batch:,}")
                versions = backfill(index, plan, rows, pending, config, bar)
            runs_now = workspace.runs()  # what searches name as written since it (trees_read)
            read_now = scope_runs if narrowed else runs_now
            location.record_trees(_trees_as_read(workspace, read_now), runs_now, not narrowed,
                                  _library_as_read(workspace), {run: rows.logs.get(run) for run in read_now})
            return IndexReport(tables={n: t.report for n, t in plan.tables.items()},
                               embedded=len(pending), seconds=time.perf_counter() - started,
                               full=plan.full, version=versions, searchable_seconds=searchable,
                               engine=index.engine_report())
    finally:
        if index is not None and index.engine is not None:
            index.engine.close()
        lock.release()


def _as_read(path: Path, was: tuple[int, int, int, int] | None) -> dict[str, Any] | None:
    """A file this run read (``was``: its stamp taken before the read) as read.json records it: that
    stamp and its hash, or None when it was written since (or never read): a stamp taken before
    the read still matches, and while it was hashed."""
    sha = content_hash(path) if was is not None else None
    return {"stamp": list(was), "sha256": sha} if sha is not None and file_stamp(path) == was else None


def _trees_as_read(workspace: Workspace, runs: list[str]) -> dict[str, dict[str, Any]]:
    """Each of ``runs``' tree.json as this run read it (``_as_read``); one written since is left
    out, and a search names it."""
    read = {run: _as_read(workspace.tree_path(run), workspace.tree_read_stamp(run)) for run in runs}
    return {run: was for run, was in read.items() if was is not None}


def _library_as_read(workspace: Workspace) -> dict[str, Any] | None:
    """The library as this run read it (``_as_read``; None: there was none then, nor is now): one
    written since it was read is recorded with neither stamp nor hash, so a search names it."""
    path, was = workspace.library_path, workspace.library_read_stamp()
    if was is None and file_stamp(path) is None:
        return None
    return _as_read(path, was) or {"stamp": None, "sha256": None}


@contextlib.contextmanager
def _written_short(location: Location, index_now: Callable[[], Index | None]) -> Iterator[None]:
    """Damage found after this run committed (``Index.wrote``) as the machine's refusal: a file it
    wrote reads back cut short, as LanceDB leaves one a full disk or a file size limit stopped
    (it reports no error). meta.json still pins the versions readers use, and the next run writes
    on a copy of them (``_at_pinned_if_rebuilt``): the index is as it was, not damaged."""
    try:
        yield
    except store.IndexDamaged as damage:
        index = index_now()
        if index is None or not index.wrote:
            raise
        raise store.IndexUnwritable(location, f"what this run wrote reads back cut short ({damage.detail}), "
                                              "as a full disk or a file size limit leaves it") from None


def open_index(location: Location, config: Config, full: bool,
               tuned: dict[str, Any] | None | str = KEEP) -> Index:
    """Check meta.json against the config (``--full`` replaces a corrupt one), open each table
    (``--full`` deletes one too damaged to open), choose the model, and decide whether this is a
    full build (it is when the model changes)."""
    asked = full  # `mem index --full`: the model's export is checked by its hashes (``_spec``)
    if full:
        location.clear_stray_meta()
    try:
        token = location.read_meta_bytes()[1]  # first: a meta.json published after it is merged with
    except (IsADirectoryError, FileNotFoundError, NotAFile):  # a folder, a pipe, a dead link: read_meta
        token = None  # says it in one line (a corrupt meta.json); a refusal (permission) is the machine's
    corrupt = False
    try:
        meta = store.read_meta(location)
    except store.IndexMismatch:
        if not full:
            raise
        meta, corrupt = None, True  # --full rebuilds from the files alone: a corrupt meta.json is replaced
    if meta is not None and not full:
        why = store.mismatch(meta, config)
        if why:
            raise store.IndexMismatch(why, location.meta_name)
    lance = Path(location.lance_uri)
    if full and not location.remote and lance.exists() and not lance.is_dir():
        lance.unlink()
    db = location.connect()
    tables = {name: writer.open_or_drop(db, location, name, full) for name in SCHEMAS}
    if meta is None and not corrupt:  # a first run's tables are stamped (one that never published)
        foreign = [name for name, table in tables.items()
                   if table is not None and store.stamp_of(table) is None]
        if foreign:  # another program's, at this prefix: neither read nor overwritten, --full neither
            raise store.NotAnIndex(location, foreign)
    rebuilt, cut = _at_pinned_if_rebuilt(tables, meta, full) if meta is not None else ((), ())
    if not full:  # write on a new creation holding the pinned rows (and their vectors)
        for name in rebuilt:
            tables[name] = writer.create(db, location, name, tables[name].to_arrow(),
                                         store.stamp_of(tables[name]))
    kept = tuned == KEEP  # not a copy `mem tune` has just saved (and hashed)
    if kept:
        tuned = store.kept_tuned(meta, config)
    model = store.build_params(config, tuned)["model"]
    model_same = meta is not None and meta.get("model") == model
    full = full or meta is None or any(t is None for t in tables.values()) or not model_same
    if full and model_same and model.get("quantized") and _by_cpu(location, meta):
        model_same = False  # --full: int8 vectors of an export before PORTABLE_SINCE are not reused
    ref = store.model_ref(location, {"model": model}, config)
    recorded = store.model_spec(location, meta, config) if model_same and not full else None
    reused = recorded is not None and (recorded.export or config.model.backend != "onnx")
    if kept and tuned and not reused:
        _check_tuned(ref, tuned, location)  # an export is made from its weights
    spec = recorded if reused else _spec(location, ref, config, asked)
    pinned = meta.get("versions", {}) if meta is not None else {}
    unpublished = frozenset(name for name, table in tables.items()
                            if table is not None and pinned.get(name) != table.version)
    # `is not None`, not truthiness: an empty Lance table is falsy
    lineage = {name: store.lineage_of(t) for name, t in tables.items() if t is not None}
    return Index(location, db, tables, full, model_same, tuned, spec, token,
                 unpublished=unpublished, rebuilt=rebuilt, cut=cut, lineage=lineage, pinned=dict(pinned),
                 tuned_unchecked=bool(kept and tuned and reused and not spec.export),
                 keep=timedelta(days=config.index.keep_versions_days))


def _at_pinned_if_rebuilt(tables: dict[str, Any], meta: dict[str, Any],
                          full: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The tables whose latest version is of another creation than the version meta.json pins:
    a `mem index --full` or `mem tune`, with any parameters, that overwrote them and never
    published (it stopped, here or on another machine, or still runs); and, of the same creation,
    those whose unpublished commits read back cut short (``cut``: a full disk or a file size limit
    stopped the run that wrote them, and LanceDB committed the file it cut; writing on them, even
    `--full` reading their vectors, would fail, and the run with them). Each is left checked out at
    the pinned version, so nothing of that rebuild is read: its rows are its machine's files (a
    run indexing its own runs would otherwise pin another machine's published rows away with it),
    its vectors maybe another model's. ``open_index`` then writes on a new creation holding the
    pinned rows, never on a restore of the pinned version: that would keep its creation's lineage,
    and a third machine's commit on it, made after the pinned version and overwritten by the
    rebuild, would pass for published. A table of an index format before 5 (no lineage) is read at
    the pinned version too, and is no rebuild."""
    rebuilt, cut = [], []
    for name, table in tables.items():
        version = meta.get("versions", {}).get(name)
        if table is None or version is None or table.version == version:
            continue
        latest = store.lineage_of(table)
        try:
            table.checkout(version)
        except ValueError:  # no such version: damage, which only --full repairs (from the files,
            if not full:    # with the latest version's vectors where its build is meta.json's)
                raise
            tables[name] = table if store.stamp_of(table) == store.stamp(meta) else None
            continue
        if latest is None:
            continue
        if store.lineage_of(table) != latest:
            rebuilt.append(name)
            continue
        table.checkout_latest()  # commits on the pinned creation: this run writes on them
        if not writer.reads_back(table):
            table.checkout(version)
            rebuilt.append(name)
            cut.append(name)
    return tuple(rebuilt), tuple(cut)


def _check_tuned(model: str, tuned: dict[str, Any], location: Location) -> None:
    """IndexMismatch unless the tuned copy's files are those its provenance hashed: its weights
    would embed (or export) otherwise than they did, and the index mix two models (weights changed
    in place keep their sizes, all a search checks). A remote index's copy in the local cache is
    fetched again instead (the store's is checked whole as it comes)."""
    if store.tuned_problem(Path(model), tuned) is None:
        return
    if not location.remote:
        raise store.tuned_changed(tuned, location)
    shutil.rmtree(model, ignore_errors=True)  # the local cache's copy: fetched again, and hashed
    store.fetch_tuned(location, tuned)


def _spec(location: Location, ref: str, config: Config, full: bool = False):
    """How this run embeds: on onnx, the model's export in models/onnx-<key>, keyed by its
    weights (linked from the per-user cache, or made once, in seconds, whenever the index has none
    yet; a remote index's is fetched). ``full`` (`mem index --full` asked, not a first index's,
    which would hash ~230 MB for every new workspace): the export and the cache's copy are
    checked against their manifest's hashes, not only its sizes, so a file changed in place (the
    same size, other bytes: onnxruntime cannot load it, or it computes another model) is made
    again, as the refusal that names it advises."""
    from mem_retrieval.text.embed import ModelSpec, model_dir

    if config.model.backend != "onnx":
        return ModelSpec(ref)
    from mem_retrieval.text.onnx import INT8, downloaded_problem, manifest_problem, place_export, source_key

    def problem(folder: Path) -> str | None:
        if config.model.quantize and not (folder / INT8).is_file():
            return "no int8 weights"
        return manifest_problem(folder, hashes=full)

    folder = store.fetch_model(location, f"models/onnx-{source_key(model_dir(ref))}", problem,
                               lambda f: problem(f) or downloaded_problem(f))
    if problem(folder) is not None:  # a tuned copy's export is the index's own, not the cache's
        place_export(model_dir(ref), folder, config.model.quantize, problem,
                     shared=ref == config.model.package)
    return ModelSpec(ref, str(folder), config.model.quantize)


def _export_before_portable(manifest: dict[str, Any] | None) -> bool | None:
    """Whether the export this manifest describes has int8 weights from before their uint8 form
    (``text.onnx.PORTABLE_SINCE``), which gave other vectors on other CPUs; None when no
    manifest says."""
    from mem_retrieval.text.onnx import PORTABLE_SINCE

    if manifest is None:
        return None
    number = str(manifest.get("export")).removeprefix("onnx-v")
    return not (number.isdigit() and int(number) >= PORTABLE_SINCE)


def _by_cpu(location: Location, meta: dict[str, Any]) -> bool:
    """Whether the index's stored int8 vectors came from an export whose products depended on
    the CPU (``_export_before_portable``, as the recorded export's manifest says: the local copy,
    or a remote index's manifest alone when this machine has none): `--full` embeds every text
    again rather than keep them."""
    from mem_retrieval.text.onnx import MANIFEST, parse_manifest

    path = store.export_of(meta)
    if not path:
        return False
    return bool(_export_before_portable(parse_manifest(location.read_bytes(f"{path}/{MANIFEST}"))))


def _outdated_export(spec) -> str | None:
    """A note when the index embeds with int8 weights of an export from before their uint8 form
    (``text.onnx.PORTABLE_SINCE``), whose 8-bit weights give other vectors on other CPUs
    (``text.onnx._unsigned_weights``); it keeps them, so that its vectors stay one model, until
    `mem index --full`. An index on a later export than that keeps it without a note: the same
    vectors on every CPU (one before ``EXPORT_VERSION`` lacks only the signed copy's speed)."""
    from mem_retrieval.text.onnx import EXPORT_VERSION, read_manifest

    if not (spec.export and spec.quantized):
        return None
    manifest = read_manifest(Path(spec.export))
    if _export_before_portable(manifest) is False:
        return None
    found = (manifest or {}).get("export")
    return (f"the index's int8 vectors come from an older ONNX export ({found or 'unknown'}), whose "
            f"8-bit weights give other vectors on CPUs without VNNI: `mem index --full` re-embeds "
            f"every text with {EXPORT_VERSION}, the same on every CPU")


def plan_changes(index: Index, rows: Rows, runs: list[str] | None, present: set[str]) -> Plan:
    """Per table: the rows added or changed (by content hash), tokenised for BM25, and the gids
    removed. Rows of ``runs`` (None: every run) and of runs no longer present are in scope for
    removal."""
    new_rows = {"steps": rows.steps, "events": rows.events, "sources": rows.sources}
    tables: dict[str, TablePlan] = {}
    stored: dict[str, str] = {}

    def scoped(run: str) -> bool:
        return index.full or runs is None or run in runs or run not in present

    for name in SCHEMAS:
        existing, doubled = _existing(index, name)
        if name in EMBEDDED_TABLES and index.model_same:
            for _, _, text_hash, embedded in existing.values():
                if text_hash and embedded:
                    stored.setdefault(text_hash, name)
        in_scope = {gid for gid, (run, *_) in existing.items() if scoped(run)}
        incoming = {row["gid"]: row for row in new_rows[name]}
        added = [row for gid, row in incoming.items() if gid not in existing]
        updated = [row for gid, row in incoming.items()
                   if gid in existing and existing[gid][1] != row["content_hash"]]
        unfinished = [row for gid, row in incoming.items()  # an interrupted backfill: finish it, and
                      if gid in existing and existing[gid][1] == row["content_hash"]  # write a row held
                      and (not existing[gid][3] or gid in doubled)]  # twice once (two machines at once)
        removed = sorted(in_scope - set(incoming))
        report = _report(incoming, existing, _published(index, name, existing), scoped)
        changed = list(incoming.values()) if index.full else added + updated + unfinished
        tokenize_rows(changed)
        tables[name] = TablePlan(name, changed, removed, report,
                                 [] if index.full else sorted(doubled & set(incoming)))
    return Plan(index.full, tables, stored)


def pending_elsewhere(index: Index, runs: list[str], present: set[str]) -> list[str]:
    """The runs besides ``runs`` whose rows a stopped backfill left without their vectors: `mem
    index RUN` finishes theirs too (the searches' note sends to `mem index`, and `record RUN`'s
    index left them in BM25 order for good; ``store.waiting``)."""
    found = {run for name in EMBEDDED_TABLES for run in store.waiting(index.tables[name], "run")}
    return sorted((found & present) - set(runs))


def library_drift(index: Index, workspace: Workspace, library: list[LibraryEntry], runs: list[str],
                  present: set[str], config: Config) -> list[str]:
    """The runs besides ``runs`` whose steps the index holds in the library otherwise than
    ``library`` (solve/library.jsonl, as the rows were read from it) has them: an entry inserted,
    removed or re-dated for another run's step, or an entry whose step its tree lacks (its row made
    from the entry alone) edited. `mem index RUN` rescans them too, or those rows stayed stale."""
    table = index.tables["steps"]
    if table is None:
        return []
    outside = present - set(runs)
    columns = ["gid", "run", "in_library", "inserted", "content_hash", "named_seq", "named_ts", "inserted_ts"]
    scanned = writer.scan(table, columns)
    held = {row[0]: row[3:] for row in zip(*(scanned[c].to_pylist() for c in columns))
            if row[2] and row[1] in outside}
    listed = {entry.gid: entry for entry in library if entry.run in outside}
    drifted = {gid for gid in held.keys() ^ listed.keys()}
    trees: dict[str, Any] = {}

    def alone(entry: LibraryEntry) -> bool:  # no inserted time: its row reads as an unnamed step's
        if entry.run not in trees:
            trees[entry.run] = workspace.tree(entry.run)
        return trees[entry.run].step(entry.id) is None

    for gid in held.keys() & listed.keys():
        inserted, content_hash, named_seq, named_ts, inserted_ts = held[gid]
        entry = listed[gid]
        if inserted != entry.inserted:
            drifted.add(gid)
        elif (named_seq, named_ts) == (store.NEVER, inserted_ts) \
                and (inserted_ts != store.NEVER or alone(entry)) \
                and library_row(entry, Rows(), config)["content_hash"] != content_hash:
            drifted.add(gid)  # the row of the entry alone, edited since
    return sorted({split_gid(gid)[0] for gid in drifted})


def _report(incoming: dict[str, dict], existing: dict[str, tuple], seen: dict[str, tuple],
            scoped: Callable[[str], bool]) -> TableReport:
    """What this run changes for readers: the table as it will be published (the ``incoming`` rows,
    and the rows it holds now, ``existing``, of the runs this run leaves alone: ``scoped(run)`` is
    false) against the rows ``seen`` at the version readers use (gid -> (run, content hash, …))."""
    after = {gid: content for gid, (run, content, *_) in existing.items() if not scoped(run)}
    after.update((gid, row["content_hash"]) for gid, row in incoming.items())
    added = len(after.keys() - seen.keys())
    updated = sum(1 for gid, content in after.items() if gid in seen and seen[gid][1] != content)
    removed = len(seen.keys() - after.keys())
    unchanged = sum(1 for gid, row in incoming.items() if gid in seen and seen[gid][1] == row["content_hash"])
    return TableReport(added=added, updated=updated, removed=removed, unchanged=unchanged)


def _published(index: Index, name: str, existing: dict[str, tuple]) -> dict[str, tuple]:
    """The rows of table ``name`` at the version meta.json pins (``existing`` holds the latest):
    they differ after a run that committed and was stopped before it published. Its rows are then
    written already, and this run publishes them: counted against the pinned version, they are
    added or updated for readers, not unchanged."""
    version = index.pinned.get(name)
    if name not in index.unpublished or name in index.rebuilt:
        return existing
    if version is None:  # meta.json pins none (a first run stopped before it published): readers
        return {}        # had no row of it, and every row this run publishes is added
    try:
        table = index.db.open_table(name)
        table.checkout(version)
        scanned = writer.scan(table, ["gid", "run", "content_hash"])
    except Exception:  # no such version any more, a damaged table (--full rebuilds it): only the
        return existing  # latest can be said, and a summary never fails the index
    return {gid: (run, content) for gid, run, content in
            zip(*(scanned[c].to_pylist() for c in ("gid", "run", "content_hash")))}


def _existing(index: Index, name: str) -> tuple[dict[str, tuple[str, str, str, bool]], set[str]]:
    """``gid -> (run, content hash, text hash, embedded)`` of the rows table ``name`` holds now
    (``embedded`` False: its vector is a placeholder an interrupted run left to fill), and the
    gids it holds more than once: two machines indexing one object-store prefix at once, each
    inserting the same new rows, both commit (Lance rebases one insert on the other)."""
    table = index.tables[name]
    if table is None:
        return {}, set()
    columns = ["gid", "run", "content_hash", "text_hash"]
    try:
        if name in EMBEDDED_TABLES and "embedded" in table.schema.names:  # an older format has none
            columns.append("embedded")
        scanned = writer.scan(table, columns)
    except BaseException as error:  # a damaged table: --full rebuilds it, else say so
        if not (index.full and store.is_damage(error, index.location)):
            raise
        store.drop_damaged(index.location, name, error)  # a store failing is no damage
        index.tables[name] = None
        return {}, set()
    values = [scanned[c].to_pylist() for c in columns]
    if len(values) == 4:
        values.append([True] * scanned.num_rows)
    existing = {gid: (run, content, text, bool(done)) for gid, run, content, text, done in zip(*values)}
    doubled = ({gid for gid, count in Counter(values[0]).items() if count > 1}
               if len(existing) < scanned.num_rows else set())
    return existing, doubled


def embed_texts(index: Index, rows: Rows, hashes: list[str], config: Config,
                progress: Progress) -> dict[str, Any]:
    """The vectors of the texts with these hashes, embedded once each (a library entry repeating
    its run's step shares its vector; stored vectors are reused before this is asked)."""
    if not hashes:
        return {}
    from mem_retrieval.text.embed import embed

    if index.tuned_unchecked:  # hashed only when it embeds: not on an index with nothing to do
        _check_tuned(index.spec.model, index.tuned, index.location)
        index.tuned_unchecked = False
    texts = [rows.embed_text[h] for h in hashes]
    progress.start(texts, "embedding")
    started = time.perf_counter()
    try:
        if index.engine is not None:
            matrix = index.engine.embed(texts, progress.update)
        else:
            matrix = embed(texts, index.spec, config.model.batch_size, progress.update)
    finally:
        index.embed_seconds += time.perf_counter() - started
        progress.close()
    _check_dim(matrix, config)
    return dict(zip(hashes, matrix))


def _check_dim(matrix, config: Config) -> None:
    if matrix.shape[1] != config.model.dim:
        raise config.fault("model.dim", f"{config.model.dim}, but model {config.model.name} gives "
                           f"{matrix.shape[1]}-dimensional vectors")


def _vector_batches(index: Index, rows: Rows, pending: list[str], config: Config):
    """``(hashes, vectors by hash)`` for the ``pending`` texts, ``index.vector_batch`` at a time:
    each batch embedded here, or, on Ray, streamed from one pipeline over them all (its actors
    load the model once, not once a batch)."""
    size = config.index.vector_batch
    if index.engine is None:
        for start in range(0, len(pending), size):
            batch = pending[start:start + size]
            yield batch, embed_texts(index, rows, batch, config, Progress(False))
        return
    started = time.perf_counter()
    for positions, matrix in index.engine.stream([rows.embed_text[h] for h in pending], size):
        index.embed_seconds += time.perf_counter() - started
        _check_dim(matrix, config)
        batch = [pending[i] for i in positions]
        yield batch, dict(zip(batch, matrix))
        started = time.perf_counter()


def backfill(index: Index, plan: Plan, rows: Rows, pending: list[str], config: Config,
             progress: Progress) -> dict[str, int]:
    """Embed the ``pending`` texts (longest first) in batches of ``index.vector_batch``; after
    each, rewrite the rows holding them with their vectors, build the full-text index again (BM25
    counted each replaced row twice until the last batch: scores drifted from batch to batch, and a
    run stopped after one published them so), and pin the new versions in meta.json. Killed
    half-way, the next run finds the rows still marked not embedded and does the rest."""
    holders: dict[str, dict[str, list]] = {name: {} for name in EMBEDDED_TABLES}  # table -> hash -> rows
    for name in EMBEDDED_TABLES:
        for row in plan.tables[name].changed:
            if row["text_hash"]:
                holders[name].setdefault(row["text_hash"], []).append(row)
    stamp = store.stamp(writer.params(index, config))
    progress.start([rows.embed_text[h] for h in pending], "embedding")
    versions: dict[str, int] = {}
    try:
        for batch, vectors in _vector_batches(index, rows, pending, config):
            progress.update(len(batch), sum(len(rows.embed_text[h]) for h in batch))
            for name, by_hash in holders.items():
                done = [row for text_hash in batch for row in by_hash.get(text_hash, ())]
                if done:  # never into another build's table (Lance refuses the upsert when one
                    table = writer.own_table(index, name, stamp)  # overwrites it after this check)
                    data = _arrow(TablePlan(name, done, [], TableReport()), vectors, config.model.dim)
                    with writer.following(index, name):
                        table.merge_insert("gid").when_matched_update_all().execute(data)
                    index.wrote = True  # the rewritten rows into the indexes, before readers see them
                    writer.refresh_indexes(index, index.db.open_table(name), fresh=False, rewritten=True)
            versions = writer.publish(index, config)
    finally:
        progress.close()
    return versions


def _pinned_vectors(index: Index, wanted: set[str]) -> dict[str, Any]:
    """The vectors of the ``wanted`` text hashes that the versions meta.json pins hold and the
    tables' latest do not: a run committed and never published (stopped, or its store refused
    meta.json); its rows replaced some the readers still read, and a text put back as they have it
    was embedded again."""
    found: dict[str, Any] = {}
    if not wanted or not index.model_same:
        return found
    for name in sorted((set(index.unpublished) & set(EMBEDDED_TABLES)) - set(index.rebuilt)):
        version = index.pinned.get(name)
        if version is None:
            continue
        try:
            table = index.db.open_table(name)
            table.checkout(version)
        except Exception:  # no such version any more: embedding again is all it costs
            continue
        missing = wanted - found.keys()
        found |= _stored_vectors({name: table}, dict.fromkeys(missing, name), missing, only_embedded=True)
    return found


def _stored_vectors(tables: dict[str, Any], stored: dict[str, str], wanted: set[str],
                    only_embedded: bool = False) -> dict[str, Any]:
    """The stored vectors of the ``wanted`` text hashes (hex digests made by rows.digest, so safe
    to quote in a filter), read in chunks from the tables holding them (``only_embedded``: of
    rows whose vector is computed, not a placeholder)."""
    found: dict[str, Any] = {}
    by_table: dict[str, list[str]] = {}
    for text_hash in sorted(wanted):
        if all(c in "0123456789abcdef" for c in text_hash):
            by_table.setdefault(stored[text_hash], []).append(text_hash)
    for name, hashes in by_table.items():
        rows = max(tables[name].count_rows(), 1)  # no smaller limit: one text's rows may fill it
        for start in range(0, len(hashes), 1000):
            chunk = hashes[start:start + 1000]
            where = ("embedded AND " if only_embedded else "") + \
                "text_hash IN (" + ", ".join(f"'{h}'" for h in chunk) + ")"
            data = (tables[name].search().where(where).select(["text_hash", "vector"])
                    .limit(rows).to_arrow())
            vectors = data["vector"].to_numpy(zero_copy_only=False)
            for text_hash, vector in zip(data["text_hash"].to_pylist(), vectors):
                found.setdefault(text_hash, vector)
    return found


def commit(index: Index, plan: Plan, vectors: dict[str, Any], config: Config,
           pending: set[str] = frozenset()) -> dict[str, int]:
    """Write each table in one commit (upserts and deletions together; a full build replaces it),
    refresh its indexes, then meta.json, written last and atomically: it pins the versions readers
    use, so a crash anywhere before leaves the old index readable, and the next run finishes the
    indexes of a table that holds commits meta.json does not pin (``Index.unpublished``). Rows
    whose text is ``pending`` get a placeholder vector and ``embedded`` false (``backfill`` fills
    them)."""
    stamp = store.stamp(writer.params(index, config))
    for name, table_plan in plan.tables.items():
        data = _arrow(table_plan, vectors, config.model.dim, pending)
        table = index.tables[name]
        if plan.full:
            table = writer.create(index.db, index.location, name, data, stamp)
            index.wrote = True
            index.lineage[name] = store.lineage_of(table)
        elif table_plan.changed or table_plan.removed:
            removed_keys = [store.key(gid) for gid in table_plan.removed]
            with writer.following(index, name):
                if table_plan.doubled:  # one commit more: the merge below writes each once
                    table.delete(store.in_list("key", [store.key(gid) for gid in table_plan.doubled]))
                if table_plan.changed:
                    merge = table.merge_insert("gid").when_matched_update_all().when_not_matched_insert_all()
                    if removed_keys:
                        merge = merge.when_not_matched_by_source_delete(store.in_list("key", removed_keys))
                    merge.execute(data)
                    index.wrote = True
                    _write_once(table, data)
                else:
                    table.delete(store.in_list("key", removed_keys))
                    index.wrote = True
        table = writer.refresh_indexes(index, table, fresh=plan.full,
                                 rewritten=bool(table_plan.changed or table_plan.removed)
                                 or name in index.unpublished)
        if not plan.full:
            writer.read_fts(table)
    return writer.publish(index, config)


def _write_once(table, data) -> None:
    """After an upsert of ``data``: the rows it wrote that the table now holds twice (another
    machine inserted them at the same moment on one object-store prefix, and Lance rebased one
    insert on the other) are deleted and written once, before meta.json pins the version. Two
    such repairs at once may still leave one twice: the next run writes it once (``_existing``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = [store.key(gid) for gid in data["gid"].to_pylist()]
    count = table.count_rows(store.in_list("key", keys)) if keys else 0
    if count <= len(keys):
        return
    held = table.search().where(store.in_list("key", keys)).select(["gid"]).limit(count)
    doubled = [gid for gid, times in Counter(held.to_arrow()["gid"].to_pylist()).items() if times > 1]
    table.delete(store.in_list("key", [store.key(gid) for gid in doubled]))
    table.add(data.filter(pc.is_in(data["gid"], value_set=pa.array(doubled, type=pa.string()))))


def _arrow(plan: TablePlan, vectors: dict[str, Any], dim: int, pending: set[str] = frozenset()):
    """The changed rows of ``plan`` as one Arrow table of its schema (vectors by text hash; a
    ``pending`` text gets zeros and ``embedded`` false)."""
    import numpy as np
    import pyarrow as pa

    schema = SCHEMAS[plan.name](dim)
    embedded = {"embedded": [row["text_hash"] not in pending for row in plan.changed]}
    arrays = [pa.array(embedded.get(f.name) or [row.get(f.name) for row in plan.changed], type=f.type)
              for f in schema if f.name != "vector"]
    if "vector" in schema.names:
        zero = np.zeros(dim, dtype=np.float32)
        flat = (np.vstack([zero if row["text_hash"] in pending else vectors[row["text_hash"]]
                           for row in plan.changed]).astype(np.float32).ravel()
                if plan.changed else np.zeros(0, dtype=np.float32))
        arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(flat), dim))
    return pa.Table.from_arrays(arrays, schema=schema)
