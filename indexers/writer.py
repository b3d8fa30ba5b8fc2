"""What one `mem index` run writes through: its open index (``Index``), each table's commit made
safe against other writers (created stamped with the build's parameters and a lineage id, upserts
that cannot follow a concurrent rebuild, index builds retried after a concurrent commit), the
tables' full-text and id indexes, and the publishing of meta.json, which pins only versions of the
creation this run wrote on (``publish``). ``indexers/build.py`` plans, embeds and commits through
these."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from mem_retrieval.configs import Config
from mem_retrieval.indexers import store
from mem_retrieval.indexers.location import Location
from mem_retrieval.indexers.schema import EMBEDDED_TABLES, SCHEMAS
from mem_retrieval.records.ids import id_shape


def scan(table, columns: list[str]):
    """All rows of ``table``, only ``columns``, as an Arrow table."""
    return table.search().select(columns).limit(max(table.count_rows(), 1)).to_arrow()


def read_back(table) -> None:
    """Read every row's key of ``table`` at its checked-out version, which opens each data and
    deletion file the version holds: one cut short raises here. LanceDB commits a version whose
    file a full disk or a file size limit cut part-way (its write reports no error), so a version
    is read back before meta.json pins it, and an unpublished one before a run writes on it."""
    scan(table, ["key"])


def reads_back(table) -> bool:
    """Whether ``read_back`` reads ``table`` whole; False only for damage (``store.is_damage``):
    a store failing or refusing raises."""
    try:
        read_back(table)
    except BaseException as error:
        if not store.is_damage(error):
            raise
        return False
    return True


@dataclass
class Index:
    """The open index of one run: its location, connection, tables (None: absent or to rebuild)."""

    location: Location
    db: Any
    tables: dict[str, Any]
    full: bool                  # rebuild every table from the rows (asked, nothing usable, new model)
    model_same: bool            # stored vectors were made by the model embedding now
    tuned: dict[str, Any] | None  # the tuned copy's provenance, recorded in meta.json
    spec: Any                   # text.embed.ModelSpec: how it runs (an ONNX export, or torch)
    meta_token: str | None = None  # the version of meta.json this run started from
    engine: Any = None          # a distributed embedder (indexers.distributed.RayEngine), or None
    embed_seconds: float = 0.0  # spent waiting for vectors (the embedding phase)
    unpublished: frozenset[str] = frozenset()  # tables holding commits meta.json does not pin: a
                                # run stopped between its commit and its publish (its full-text
                                # index may not have been built again), or another writer's
    pinned: dict[str, int] = field(default_factory=dict)  # each table's version meta.json pinned
                                # when this run began: readers use it until this run publishes
    tuned_unchecked: bool = False  # the tuned copy's weights will embed, unhashed yet (torch)
    rebuilt: tuple[str, ...] = ()  # tables a rebuild overwrote and never published, or whose
                                # unpublished commits read back cut short (``cut``): written on a
                                # new creation holding the pinned version's rows (a full build: read
                                # at the pinned version)
    cut: tuple[str, ...] = ()   # of ``rebuilt``, those whose unpublished commits read back cut short
    wrote: bool = False         # this run has committed to a table (``commit``, ``backfill``)
    lineage: dict[str, str | None] = field(default_factory=dict)  # each table's creation this run
                                # writes on (store.lineage_of): another one there means an overwrite
    keep: timedelta = timedelta(days=7)  # index.keep_versions_days: older versions are pruned
    checked: dict[str, int] = field(default_factory=dict)  # each table's version up to which this
                                # run weighed its versions for an optimize (``_optimize``)

    def engine_report(self) -> dict[str, Any]:
        if self.engine is None:
            import os

            return {"name": "local", "workers": os.cpu_count() or 1,
                    "embed_seconds": round(self.embed_seconds, 3)}
        return {"name": "ray", "workers": self.engine.workers, "embed_seconds": round(self.embed_seconds, 3),
                "busy_seconds": round(self.engine.busy, 3)}

    @property
    def folder(self) -> Path:
        """Where model files are read and written locally (the index folder, or the cache)."""
        return self.location.folder


KEY_COLUMNS = {store.STEPS: ("key", "sid_key"), store.EVENTS: ("key",), store.SOURCES: ("key",)}


def open_or_drop(db, location: Location, name: str, full: bool):
    """Table ``name`` (None when absent). With ``full``, a table too damaged to open is deleted, to
    be built afresh; otherwise the damage is reported (store.guard)."""
    try:
        return store.open_table(db, name)
    except BaseException as error:
        if not (full and store.is_damage(error, location)):
            raise
        store.drop_damaged(location, name, error)  # a store failing is no damage: nothing is deleted
        return None


def create(db, location: Location, name: str, data, stamp: str):
    """Replace table ``name`` by ``data`` in one commit (readers of older versions are unaffected),
    stamped with the build's parameters (``store.stamp``); a table too damaged to be replaced is
    deleted and created afresh."""
    marks = {store.STAMP: stamp.encode(), store.LINEAGE: uuid.uuid4().hex.encode()}
    data = data.replace_schema_metadata({**(data.schema.metadata or {}), **marks})
    schema = data.schema
    try:
        return db.create_table(name, data=data, schema=schema, mode="overwrite")
    except BaseException as error:
        if not store.is_damage(error, location) or store.is_conflict(error):
            raise
        store.drop_damaged(location, name, error)
        return db.create_table(name, data=data, schema=schema, mode="overwrite")


CONFLICT_TRIES = 8


@contextlib.contextmanager
def following(index: Index, name: str):
    """A commit that cannot follow another writer's (Lance refuses an upsert planned before a
    concurrent rebuild of the table, rather than mix the two): one line, nothing written."""
    try:
        yield
    except (RuntimeError, OSError, ValueError) as error:
        if not store.is_conflict(error):
            raise
        detail = store.conflict_detail(error)
        raise store.MetaConflict(f"another writer changed the {name} table of {index.location.uri} "
                                 f"while this run indexed ({detail}): run `mem index` again") from None


def retrying(index: Index, table, step: Callable[[Any], None]):
    """Run ``step(table)``; when another writer's commit preempted it (an optimize or index
    build from a stale version), reopen the table at its latest version and run it again."""
    for attempt in range(CONFLICT_TRIES):
        try:
            step(table)
            return table
        except (RuntimeError, OSError, ValueError) as error:
            if not store.is_conflict(error) or attempt == CONFLICT_TRIES - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
            table = index.db.open_table(table.name)
            if store.lineage_of(table) != index.lineage.get(table.name):  # no index build or
                raise rebuilt_meanwhile(index, table.name, other=False)  # optimize on a rebuild
    return table


def read_fts(table) -> None:
    """Query the full-text index once: a damaged index fails `mem index` now (store.guard names
    the fix, `mem index --full`) instead of the next search."""
    from lancedb.query import MatchQuery

    if table.count_rows():
        table.search(MatchQuery("probe", "tokens"), query_type="fts").limit(1).to_arrow()


def _prunable(index: Index, table) -> timedelta:
    """How old a version must be for ``optimize`` to delete it: ``index.keep`` (the config's
    ``index.keep_versions_days``; a week, lancedb's own default), but never as young
    as the version meta.json pins (the one every reader opens until this run publishes, and a
    crash before that leaves readable). Pruned by age alone, a week-old index lost its pinned
    version to the reindex's first optimize: searches during the reindex, and after a crash
    before its publish, failed as "damaged"."""
    pinned = index.pinned.get(table.name)
    for version in table.list_versions() if pinned is not None else ():
        if version["version"] == pinned:
            stamp = version["timestamp"]
            return max(index.keep, datetime.now(stamp.tzinfo) - stamp + timedelta(hours=1))
    return index.keep


# When a run optimizes a table (LanceDB's advice: after about 20 modifications). Compacting merges
# its fragments into one file, so at every run it rewrote the whole table, a copy pruning keeps for
# index.keep_versions_days: now past COMPACT_AT fragments (a commit adding rows adds one), and at
# least once every PRUNE_EVERY versions (edits and deletions add none: their versions, and each run's
# full-text index, were never pruned). A run makes two versions or more (its commit, the index).
COMPACT_AT = 16
PRUNE_EVERY = 48


def _optimize(table, index: Index) -> None:
    """Once the table holds more than ``COMPACT_AT`` fragments, or its versions since it was last
    weighed pass a multiple of ``PRUNE_EVERY`` (first, those after the one meta.json pinned when the
    run began; up to the full-text index's, made after this: one more; a run's backfill batches
    each weigh their own, or every batch after the first crossing optimized again),
    ``table.optimize``: compact it, fold new rows into its scalar indexes (until then a lookup scans
    the rows they lack, as LanceDB does for any unindexed rows) and delete the versions older than
    ``_prunable`` says (lancedb prunes only so, without pylance; its list of versions is read then
    alone: a store's is a read of each). At 0 (`keep_versions_days = 0`, a valid setting) lancedb
    warns that every version but the latest goes, on stderr across the progress line:
    ``_prunable`` keeps the version readers use, so the warning says nothing."""
    import warnings

    since = index.checked.get(table.name, index.pinned.get(table.name))
    if (table.stats()["fragment_stats"]["num_fragments"] > COMPACT_AT
            or since is not None and (table.version + 1) // PRUNE_EVERY != since // PRUNE_EVERY):
        older = _prunable(index, table)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"optimize\(cleanup_older_than=0\)",
                                    category=UserWarning)
            table.optimize(cleanup_older_than=older)
    index.checked[table.name] = table.version + 1


def refresh_indexes(index: Index, table, fresh: bool, rewritten: bool = False):
    """Create the full-text index once the table has rows (an FTS index built on an empty table
    misses later rows, lance #4780). Afterwards, when rows were added, rewritten or removed
    (``rewritten``, or rows the index lags), fold them into the other indexes (``optimize``, which
    also compacts the files) and build the full-text index again whole: LanceDB's incremental
    update keeps counting replaced rows in its BM25 statistics (documents, document frequencies,
    average length), so scores would drift from the rows' own, and from the exact BM25 a warm
    searcher computes in memory (retrieval/resident.py); building it costs ~0.4 s at 100,000 steps.
    Runs whenever the index is missing or lags the data, so an index build interrupted by a crash is
    finished next time. Returns the table (reopened when another writer's commit came first)."""
    from lancedb.index import FTS, BTree

    if table.count_rows() == 0:
        return table

    def full_text(t) -> None:
        t.create_index("tokens", config=FTS(
            base_tokenizer="whitespace", lower_case=False, stem=False, remove_stop_words=False,
            ascii_folding=False, max_token_length=None, with_position=False), replace=True)

    names = {found.name for found in table.list_indices()}
    if not fresh and "tokens_idx" in names:
        if not rewritten and table.index_stats("tokens_idx").num_unindexed_rows == 0:
            return table
        table = retrying(index, table, lambda t: _optimize(t, index))
        return retrying(index, table, full_text)

    def build(t) -> None:
        full_text(t)
        for column in KEY_COLUMNS.get(t.name, ()):
            t.create_index(column, config=BTree(), replace=True)  # id lookups without a scan

    table = retrying(index, table, build)
    if fresh and table.name in index.pinned:  # a rebuild over the table (`--full`): its versions
        table = retrying(index, table, lambda t: _optimize(t, index))  # run on, each a copy: pruned
    return table


def publish(index: Index, config: Config) -> dict[str, int]:
    """Pin the tables' current versions in meta.json, with the distinct step settings and how
    many texts still wait for their vectors (both read from the tables at those versions, so a run
    indexing some runs never hides another's unfinished backfill); returns the versions pinned.
    The model files meta.json names are put at the index's location first. Only versions of the
    creation this run wrote on, with its stamp, are pinned (``own_table``), else MetaConflict.
    meta.json is replaced by compare-and-swap: when another writer (another machine) published
    since this run began, the two are merged, each table at the later of the two versions, so no
    update is lost and no pinned version moves backwards. That holds when their version is of the
    creation this run wrote on (a later version of one creation holds every earlier commit), which
    is checked: a rebuild, or this run's copy of an older version (``Index.rebuilt``), does not
    hold it (MetaConflict); nor does a writer that changed the parameters meanwhile."""
    from mem_retrieval.text.onnx import MANIFEST, downloaded_problem

    mine_meta = params(index, config)
    stamp = store.stamp(mine_meta)
    mine = _own_versions(index, stamp)
    export = store.export_of(mine_meta)
    if index.tuned:  # a full build uploads whole copies whole (a store copy changed is mended)
        tuned = index.tuned
        index.location.push(tuned["path"],
                            whole=(lambda f: store.tuned_problem(f, tuned)) if index.full else None)
    if export:
        index.location.push(export, last=MANIFEST, whole=downloaded_problem if index.full else None)

    def make(current: dict[str, Any] | None, token: str | None) -> dict[str, Any]:
        versions = dict(mine)
        if current is not None and token != index.meta_token:  # another writer published meanwhile
            theirs = {key: current.get(key) for key in mine_meta}
            if theirs != mine_meta:
                raise store.MetaConflict(
                    f"another writer republished {index.location.meta_name} with other parameters "
                    "(model or its export, tokenizer, BM25 or text limits) while this run indexed: "
                    f"{store.MATCH_OR_REBUILD}")
            their_versions = current.get("versions", {})
            versions = {name: max(v, int(their_versions.get(name, 0))) for name, v in mine.items()}
            for name, version in versions.items():  # each version another writer published
                their = int(their_versions.get(name, 0))  # since this run read meta.json must be
                if their in (0, index.pinned.get(name)) or (index.full and version == mine[name]):
                    continue  # of the creation this run wrote on (a full build replaces theirs)
                if store.lineage_of(_at(index, name, their)) != index.lineage.get(name):
                    raise copy_stale(index, name) if name in index.rebuilt and not index.full \
                        else rebuilt_meanwhile(index, name, other=False)
        return mine_meta | {"versions": versions, "built": time.time(),
                            # each table's creation: tables deleted and built again at the same versions
                            # are another index (a kept session's table files are gone), which meta.json
                            # must say, or nothing written told a reader to reopen
                            "lineage": {name: index.lineage[name] for name in sorted(versions)
                                        if index.lineage.get(name)},
                            "settings": _settings(index, versions[store.STEPS]),
                            "id_shapes": _id_shapes(index, versions[store.STEPS]),
                            "pending": _waiting(index, versions)}

    meta = store.publish_meta(index.location, make)
    drop_exports(index.folder, export)
    return meta["versions"]


def params(index: Index, config: Config) -> dict[str, Any]:
    """What meta.json records of this build: its parameters and the export it embeds with."""
    export = Path(index.spec.export).relative_to(index.folder).as_posix() if index.spec.export else None
    return store.build_params(config, index.tuned) | {"export": {"path": export} if export else None}


def _own_versions(index: Index, stamp: str) -> dict[str, int]:
    """Each table's latest version, to be pinned, read back whole when it is not the version
    pinned already (``read_back``); MetaConflict when one is another writer's rebuild with other
    parameters (a `mem index --full` overwrites a table whole, so the latest version would hold
    its rows and vectors alone, under this run's meta.json)."""
    versions = {}
    for name in SCHEMAS:
        table = own_table(index, name, stamp)
        if table.version != index.pinned.get(name):
            read_back(table)
        versions[name] = table.version
    return versions


def own_table(index: Index, name: str, stamp: str, version: int | None = None):
    """Table ``name`` at ``version`` (default: its latest), which must descend from the creation
    this run wrote on, with this run's ``stamp``; else MetaConflict: another writer rebuilt it
    meanwhile (a later version holds none of this run's commits, or another build's parameters)."""
    table = _at(index, name, version)
    other = store.stamp_of(table) != stamp
    if other or store.lineage_of(table) != index.lineage.get(name):
        raise rebuilt_meanwhile(index, name, other)
    return table


def rebuilt_meanwhile(index: Index, name: str, other: bool) -> store.MetaConflict:
    """The refusal of a run that finds table ``name`` overwritten by another writer's rebuild
    (``other``: with other build parameters) since it opened or created it."""
    how = ("with other parameters (model, tokenizer, BM25 or text limits)" if other
           else "(`mem index --full`)")
    return store.MetaConflict(
        f"another writer rebuilt the {name} table of {index.location.uri} {how} while this run "
        "indexed: this run wrote nothing on that rebuild and pinned none of it; run "
        f"`mem index{' --full' if index.full else ''}` again")


def copy_stale(index: Index, name: str) -> store.MetaConflict:
    """The refusal of a run that copied table ``name`` from the version meta.json pinned when it
    began (``Index.rebuilt``) while another writer published a commit on that version's creation:
    the copy lacks it."""
    return store.MetaConflict(
        f"another writer published the {name} table of {index.location.uri} while this run copied "
        "the version meta.json pinned before (a rebuild that was never published had overwritten "
        "the table): the copy lacks that commit, and this run pinned none of it; run `mem index` again")


def _at(index: Index, name: str, version: int | None = None):
    """Table ``name``, checked out at ``version`` (default: its latest)."""
    table = index.db.open_table(name)
    if version is not None and table.version != version:
        table.checkout(version)
    return table


def _settings(index: Index, version: int) -> list[list]:
    """The distinct [setting, hypotheses] of the steps table at ``version`` (``store.reuse_key``)."""
    steps = _at(index, store.STEPS, version)
    if not steps.count_rows():
        return []
    rows = scan(steps, ["setting", "hyp"]).to_pydict()
    return [[s, list(h)] for s, h in sorted(set(zip(rows["setting"], map(tuple, rows["hyp"]))))]


MAX_SHAPES = 1000  # past this many, meta.json says null and a search reads the ids itself


def _id_shapes(index: Index, version: int) -> list[str] | None:
    """The distinct shapes (``records.ids.id_shape``) of the step ids of the steps table at
    ``version``, by which a search tells a mistyped id from a symbol (``E6``), read here once a
    build rather than by every search (0.4 s at 100,000 steps)."""
    steps = _at(index, store.STEPS, version)
    shapes = sorted({id_shape(sid) for sid in scan(steps, ["sid"])["sid"].to_pylist()}) \
        if steps.count_rows() else []
    return shapes if len(shapes) <= MAX_SHAPES else None


def _waiting(index: Index, versions: dict[str, int]) -> int:
    """How many distinct texts still wait for their vectors at ``versions``: the rows a running or
    interrupted backfill left with ``embedded`` false (``store.waiting``)."""
    return len({text for name in EMBEDDED_TABLES
                for text in store.waiting(_at(index, name, versions[name]), "text_hash")})


def drop_exports(folder: Path, keep: str | None) -> None:
    """Delete ONNX exports the index no longer uses (a tuned model replaced, a reset); of an
    index on an object store, only the local cache's copies (a reader of an older meta.json may
    still need the store's)."""
    import shutil

    for old in (folder / "models").glob("onnx-*") if (folder / "models").is_dir() else ():
        if f"models/{old.name}" != keep:
            shutil.rmtree(old, ignore_errors=True)
