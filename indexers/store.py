"""The index: a LanceDB database at its location (``WORKSPACE/.mem`` by default, or an object store:
``indexers/location.py``), its tables, and what it was built with.

``meta.json`` records the index format, tokenizer version, BM25 parameters, text limits and model;
an index built with other values is refused in one line naming them (``mismatch``). Each table is
stamped with the parameters of the build that created it (``stamp``). It is replaced by
compare-and-swap (``publish_meta``): two writers never lose one another's update, and the versions
it pins never move backwards. Filters are built only from integer keys computed here (``key``),
never from user text."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from mem_retrieval.configs import LANCE_B, LANCE_K1, Config
from mem_retrieval.indexers.location import Location, StoreUnreachable, first_line, refuse_after_fork
from mem_retrieval.records.errors import InputError, Refused, resource_refusal
from mem_retrieval.records.parse import open_regular, read_at_most
from mem_retrieval.text.tokenize import VERSION as TOKENIZER_VERSION

FORMAT = 8  # 2: steps carry parent_keys (the citation graph); 3: rows say whether they are embedded;
# 4: steps carry inserted_ts (a library entry's insertion time: --library as of --until); 5: the text
# limits are recorded, and each table is stamped with the parameters of the build that wrote it;
# 6: setting_key keys a step's setting with its hypotheses (``reuse_key``), which the setting rule
# (M3) judges together, and meta.json lists those pairs; 7: a step its log never names is in memory
# from its library copy's insertion (named_seq/named_ts: ``records.workspace.first_written``), where
# 6 wrote "never" and a cut hid it; 8: "never" (NEVER) is below every time, where 7's -1 was above
# those before 1970 (negative microseconds), which no cut showed
NEVER = -(10 ** 18)  # named_seq, named_ts, inserted_ts of what no event names and no entry dates: below
# every time a record may hold (0001-01-01 is -6.2e16 microseconds), and a literal SQL reads
STAMP = b"mem.build"  # a table's schema metadata key: the stamp of the build that created it
LINEAGE = b"mem.lineage"  # and a key naming that creation (each overwrite of the table a new one)
STEPS, EVENTS, SOURCES = "steps", "events", "sources"
SWAP_TRIES = 8  # meta.json replaced by another writer this often in a row: give up, one line

class IndexMismatch(InputError):
    """The index was built with other parameters (or is missing or corrupt)."""

    def __init__(self, message: str, file: str = ".mem/meta.json"):
        super().__init__(file, None, None, message)


class NotAnIndex(InputError):
    """Where the index should be, a meta.json no `mem index` wrote (every one it writes names its
    ``format``): someone else's data at that prefix, which neither a search nor `--full` touches."""

    def __init__(self, location: "Location", tables: list[str] | None = None):
        if tables:  # no meta.json, and tables no build of mem stamped (every table it makes is)
            super().__init__(location.lance_uri, None, None,
                             f"{location.uri} holds LanceDB tables that no `mem index` wrote "
                             f"({', '.join(tables)}: no build stamp) and no meta.json: point index.uri "
                             "at a prefix of its own, or move them away (they were neither read nor "
                             "replaced)")
            return
        super().__init__(location.meta_name, None, None,
                         f"{location.uri} holds a meta.json that no `mem index` wrote (it names no index "
                         "format): point index.uri at a prefix of its own, or move that file away "
                         "(it was neither read nor replaced)")


def at(where: "Location | Path") -> Location:
    """``where`` as a Location (a folder path is a folder index)."""
    return where if isinstance(where, Location) else Location(str(where), Path(where))


def key(text: str) -> int:
    """A stable signed 64-bit key for an id, run, or setting text (the only values put in filters)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big",
                          signed=True)


def reuse_key(setting: str, hyp: Sequence[str]) -> int:
    """The ``setting_key`` of a step: the key of its setting and hypotheses, what the setting rule
    (M3) judges of it; meta.json's ``settings`` lists each distinct pair once."""
    return key(json.dumps([setting, list(hyp)], ensure_ascii=False))


def in_list(column: str, keys: list[int] | set[int]) -> str:
    """``column IN (k1, k2, …)`` from integer keys (never from user text)."""
    values = sorted({int(k) for k in keys})
    return f"{column} IN ({', '.join(str(v) for v in values)})" if values else "FALSE"


PARAMS = ("format", "tokenizer", "bm25", "model", "text")  # build_params' keys


def build_params(config: Config, tuned: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the index depends on: a difference means vectors or tokens would be mixed. ``tuned``:
    the provenance of a tuned copy of the configured model (`mem tune`) that embedded it."""
    model = {"name": config.model.name, "package": config.model_ref, "dim": config.model.dim,
             "quantized": config.model.quantize}
    if config.model_written:  # a folder: what it holds, so two folders of one name are two models
        model["files"] = folder_fingerprint(Path(config.model.package))
    return {
        "format": FORMAT,
        "tokenizer": TOKENIZER_VERSION,
        "bm25": {"k1": LANCE_K1, "b": LANCE_B},  # its full-text index's; bm25.k1/b (the rank-bm25
        # engine's) are read per query, and change nothing stored
        "model": model | ({"tuned": tuned} if tuned else {}),
        "text": {"max_chars": config.model.max_chars, "event_body_chars": config.index.event_body_chars,
                 "source_chars": config.index.source_chars},  # what rows hold and vectors embed
    }


def stamp(params: dict[str, Any]) -> str:
    """The stamp of a build with ``params`` (``build_params``, as meta.json records them): written
    into each table the build creates, so that a run finds a table another writer rebuilt with
    other parameters before it publishes over it (`mem index --full` overwrites). Not the export's
    path: an index keeps an older export of its model (its vectors are that model's)."""
    recorded = {name: params.get(name) for name in PARAMS}
    return hashlib.sha256(json.dumps(recorded, sort_keys=True).encode("utf-8")).hexdigest()[:32]


def stamp_of(table) -> str | None:
    """The stamp of the build that created ``table`` at its checked-out version (None: a table
    of an index format before 5)."""
    value = (table.schema.metadata or {}).get(STAMP)
    return value.decode("utf-8") if value else None


def lineage_of(table) -> str | None:
    """Which creation of ``table`` its checked-out version descends from: commits on a table keep
    it, an overwrite (`mem index --full`) gives a new one (None: before index format 5)."""
    value = (table.schema.metadata or {}).get(LINEAGE)
    return value.decode("utf-8") if value else None


def tuned_of(meta: dict[str, Any] | None) -> dict[str, Any] | None:
    """The tuned model's provenance an index records (None: the configured model itself)."""
    model = (meta or {}).get("model")
    return model.get("tuned") if isinstance(model, dict) else None


def export_of(meta: dict[str, Any] | None) -> str | None:
    """The folder of the ONNX export an index records, relative to its model folder (None: none)."""
    return ((meta or {}).get("export") or {}).get("path")


def kept_tuned(meta: dict[str, Any] | None, config: Config) -> dict[str, Any] | None:
    """The index's tuned copy when it was made from the configured model (a copy of another model
    stands for nothing the config names: `mem index --full` embeds with the configured one)."""
    tuned = tuned_of(meta)
    return tuned if tuned and tuned.get("base") == config.model_ref else None


def model_spec(where: Location | Path, meta: dict[str, Any] | None, config: Config):
    """How a search embeds its query for the index ``meta`` describes: the index's model (a tuned
    copy or the configured one), on the ONNX export the index recorded when the config's backend
    is onnx (checked to be whole), else on torch — only for fp32 weights, whose vectors the two
    backends share."""
    from mem_retrieval.text.embed import ModelSpec

    location = at(where)
    model = model_ref(location, meta, config)
    export = export_of(meta)
    quantized = bool(((meta or {}).get("model") or {}).get("quantized"))
    if config.model.backend == "onnx" and export:
        from mem_retrieval.text.onnx import downloaded_problem, manifest_problem

        folder = fetch_model(location, export, manifest_problem, downloaded_problem)
        problem = manifest_problem(folder)
        if problem is None:
            return ModelSpec(model, str(folder), quantized)
        if quantized and (changed := location.rejected(export)):
            raise IndexMismatch(f"the store's copy of the index's ONNX model {export} is not the "
                                f"one its manifest hashed ({changed}): run `mem index --full`, which "
                                "uploads this machine's own export over it", location.meta_name)
        if quantized:
            raise IndexMismatch(f"the index's ONNX model is damaged ({problem}): run `mem index --full`",
                                location.meta_name)
    if quantized:
        raise IndexMismatch("the index was embedded with int8 weights, which only the onnx backend "
                            "runs: set model.backend = \"onnx\", or run `mem index --full`",
                            location.meta_name)
    return ModelSpec(model)


def model_ref(where: Location | Path, meta: dict[str, Any] | None, config: Config) -> str:
    """The model that embedded the index, for the texts and queries still to embed: the tuned
    copy it records (checked to be there, file for file as it was saved: an index never mixes two
    models; a remote index's copy is fetched into the local cache), else the configured one."""
    tuned = tuned_of(meta)
    return fetch_tuned(at(where), tuned) if tuned else config.model.package


def fetch_tuned(location: Location, tuned: dict[str, Any]) -> str:
    """The local folder of the tuned copy ``tuned`` records, checked by its files' sizes; a remote
    index's copy is fetched into the local cache and checked whole (its sha256) as downloaded."""
    sizes = tuned.get("sizes", {})

    def problem(folder: Path) -> str | None:
        found = file_sizes(folder) if folder.is_dir() else {}
        if not sizes or any(found.get(name) != size for name, size in sizes.items()):
            return "missing or changed"
        return None

    folder = fetch_model(location, tuned["path"], problem, lambda f: tuned_problem(f, tuned))
    if problem(folder):
        raise tuned_changed(tuned, location)
    return str(folder)


def fetch_model(location: Location, relative: str, problem: Callable[[Path], str | None],
                verify: Callable[[Path], str | None]) -> Path:
    """``Location.fetch``, the machine's own refusals (a full disk, a read-only cache) said as
    such, naming the local folder (they are not the store's)."""
    try:
        return location.fetch(relative, problem, verify)
    except OSError as error:
        if why := refusal(error):
            raise IndexUnwritable(str(location.folder / relative), why) from None
        raise


def tuned_changed(tuned: dict[str, Any], location: Location) -> "IndexMismatch":
    if changed := location.rejected(tuned["path"]):
        return IndexMismatch(f"the store's copy of the tuned model {tuned['path']} is not the one its "
                             f"provenance hashed ({changed}): run `mem index --full` on a machine whose "
                             "copy is whole (the one that tuned it), which uploads it again, or "
                             "`mem tune --reset`", location.meta_name)
    return IndexMismatch(f"the index was embedded by the tuned model {tuned['path']}, whose files "
                         "are missing or changed: run `mem tune --reset` (the configured model embeds "
                         "it again; `mem tune` then tunes anew)",
                         location.meta_name)


def tuned_problem(folder: Path, tuned: dict[str, Any]) -> str | None:
    """Why ``folder`` is not, file for file, the tuned copy ``tuned`` records (its sha256), or None."""
    return None if model_digest(folder) == tuned.get("sha256") else "its sha256 differs"


def file_sizes(folder: Path) -> dict[str, int]:
    """Each file's size by its path in ``folder``, subfolders too (a tuned copy's ``sizes``: its
    pooling and normalising layers lie in ``1_Pooling/`` and ``2_Normalize/``)."""
    return {p.relative_to(folder).as_posix(): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


# What decides a sentence-transformers model's vectors, by name in its folder: its configurations,
# tokenizer and modules (each module's folder's config, as modules.json lists them); the weights by
# their sizes (hundreds of MB: not read at every command).
MODEL_FILES = ("config.json", "modules.json", "sentence_bert_config.json",
               "config_sentence_transformers.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "vocab.txt")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
FINGERPRINT_BYTES = 64 << 20  # a configuration or tokenizer file is read up to this


def folder_fingerprint(folder: Path) -> str:
    """What a model folder holds, as the index records it beside the folder's name: the bytes of
    ``MODEL_FILES`` and of each module's config.json, the sizes of ``WEIGHT_FILES`` (each followed
    where it is a link; one absent, or unreadable, counts as absent). A folder of the same name on
    another machine, or moved with its workspace, is the same model whatever else it holds (a
    .git, a download's cache, an editor's backup); one configured otherwise is not. Other weights
    of the same size put in place need `mem index --full`, as the README says."""
    def read(name: str) -> bytes | None:  # a regular file's first FINGERPRINT_BYTES (a pipe: none)
        try:
            with open_regular(folder / name) as handle:
                return read_at_most(handle, FINGERPRINT_BYTES)
        except (OSError, ValueError):  # a NUL in a name modules.json gives
            return None

    digest = hashlib.sha256()
    names = list(MODEL_FILES)
    try:
        modules = json.loads(read("modules.json") or b"[]")
        names += sorted({f"{m['path']}/config.json" for m in modules
                         if isinstance(m, dict) and isinstance(m.get("path"), str) and m["path"]})
    except (ValueError, TypeError, RecursionError):
        pass
    for name in names:
        data = read(name)
        digest.update(f"{name}\0".encode() + (hashlib.sha256(data).digest() if data is not None else b"-"))
    for name in WEIGHT_FILES:
        try:
            size = (folder / name).stat().st_size
        except OSError:
            size = -1
        digest.update(f"{name}\0{size}\0".encode())
    return digest.hexdigest()[:32]


def model_digest(folder: Path) -> str:
    """The sha256 of a model folder: each file's path in it and bytes, in path order (a tuned
    copy's provenance records it)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode())
        with path.open("rb") as file:
            while chunk := file.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()


def read_meta(where: Location | Path) -> dict[str, Any] | None:
    """meta.json, checked (None when there is none yet)."""
    location = at(where)
    try:
        data, _ = location.read_meta_bytes()
    except OSError as error:
        if why := refusal(error):  # (not a damaged index: `--full` cannot mend it)
            raise IndexUnwritable(refused_at(error, location), why, reading=True) from None
        raise IndexMismatch(f"the index in {location.uri} is corrupt (unreadable meta.json): "
                            "run `mem index --full`", location.meta_name) from None
    return None if data is None else _parse_meta(location, data)


VERSION_LIMIT = 1 << 63  # a table version is a 64-bit number: a larger one (a damaged meta.json) made
# LanceDB's checkout raise a TypeError, on every command and on `mem index --full` too


def _parse_meta(location: Location, data: bytes) -> dict[str, Any]:
    try:
        meta = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise IndexMismatch(f"the index in {location.uri} is corrupt (unreadable meta.json): "
                            "run `mem index --full`", location.meta_name) from None
    if isinstance(meta, dict) and "format" not in meta:  # an object, not ours: another program's
        raise NotAnIndex(location)
    versions = meta.get("versions", {}) if isinstance(meta, dict) else None
    settings = meta.get("settings", []) if isinstance(meta, dict) else None
    pending = (meta.get("pending") or 0) if isinstance(meta, dict) else None
    export = (meta.get("export") or {}) if isinstance(meta, dict) else None
    if (not isinstance(versions, dict) or not isinstance(settings, list)
            or not isinstance(export, dict) or not isinstance(export.get("path", ""), str)
            or not all(type(v) is int and 0 < v < VERSION_LIMIT for v in versions.values())
            or type(pending) is not int or pending < 0
            or not all(_setting_pair(s) for s in settings if meta.get("format") == FORMAT)):
        raise IndexMismatch(f"the index in {location.uri} is corrupt: run `mem index --full`",
                            location.meta_name)
    return meta


def _setting_pair(item: Any) -> bool:
    """Whether ``item`` is one of meta.json's ``settings``: [setting, [hypothesis, …]] (another
    format's index is refused for its format, by ``mismatch``)."""
    return (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
            and isinstance(item[1], list) and all(isinstance(h, str) for h in item[1]))


FIXED = ("format", "tokenizer", "bm25")  # what this version sets, not the config: only --full moves an index
# (bm25: LanceDB's k1 and b; until 2026-12-04 the config's were recorded, and read per query only)
FOLDER_OR_REBUILD = ("put the folder's model back, or run `mem index --full` to rebuild the index with this "
                     "one (then every machine sharing the index needs it)")
MATCH_OR_REBUILD = ("set the config to the index's, or run `mem index --full` to rebuild it with yours "
                    "(then every machine sharing the index needs your config)")


def full_needed(location: Location, config: Config) -> str | None:
    """Why `mem index` would refuse to bring the index at ``location`` up to date, asking for
    `--full` (built with another format, model or text limits; a corrupt meta.json), or None (no
    index yet, or one it extends). Reads meta.json alone; other failures (a store out of reach)
    are raised."""
    try:
        meta = read_meta(location)
    except IndexMismatch as err:
        return err.problem.message
    return mismatch(meta, config) if meta is not None else None


def mismatch(meta: dict[str, Any], config: Config) -> str | None:
    """Why an index built with ``meta`` cannot serve ``config`` (one line naming every value that
    differs, with the fix), or None."""
    want = build_params(config, kept_tuned(meta, config))  # a copy of the configured model is it
    found, folder_only = [], True  # folder_only: nothing differs but what a model folder holds
    unrecorded = False  # a model folder the index recorded no contents of: no config can match it
    for name, label in (("format", "index format differs"), ("tokenizer", "tokenizer differs"),
                        ("model", "model differs"), ("bm25", "BM25 parameters differ"),
                        ("text", "text limits differ")):
        have, wanted = meta.get(name), want[name]
        if have == wanted:
            continue
        if isinstance(have, dict) and isinstance(wanted, dict):  # the values that differ, each by its
            # name (a text limit: its config key); a dict where a number is read is a value like any other
            keys = [k for k in sorted(have.keys() | wanted.keys()) if have.get(k) != wanted.get(k)]
            if name == "model" and _folder_unrecorded(have, config):  # no config can give the index's
                unrecorded = True  # (no `files`), whatever else differs
                found.append((name, f"the index does not record what the model folder {have['package']!r} "
                                    "held when it was built (an older version of mem made it)"))
                continue
            if name == "model" and keys == ["files"] and "files" in have:  # the config is the same
                found.append((name, f"the model folder {config.model_ref!r} holds another model than the "
                                    "one the index was built with (its configuration, tokenizer or "
                                    "weights' size differ)"))
                continue
            if {"package", "files"} <= set(keys) and None in (have.get("files"), wanted.get("files")):
                keys.remove("files")  # a package and a folder: their names say it (no config key `files`)
            have, wanted = ({CONFIG_KEYS.get(k, k): _said(v.get(k)) for k in keys} for v in (have, wanted))
        folder_only = False
        reader = "this version of mem reads" if name in FIXED else "config wants"
        found.append((name, f"{label}: index has {have!r}, {reader} {wanted!r}"))
        if name == "format":  # what else meta.json records is another format's
            break
    if not found:
        return None
    fix = ("run `mem index --full`" if set(FIXED) & {n for n, _ in found} or unrecorded else
           FOLDER_OR_REBUILD if folder_only else MATCH_OR_REBUILD)
    return f"the index was built with other parameters ({'; '.join(w for _, w in found)}): {fix}"


def _folder_unrecorded(have: dict[str, Any], config: Config) -> bool:
    """Whether an index's model is a model folder recorded by its path alone: a meta.json an
    earlier version wrote (the path then absolute; a package is a module's name), with no
    ``files``, which no config can match."""
    package = have.get("package")
    return "files" not in have and isinstance(package, str) and (
        os.path.isabs(package) or bool(config.model_written) and package == config.model_ref)


# meta.json's values as the config names them (`[text] max_chars`, set as the message read, was
# refused as an unknown field)
CONFIG_KEYS = {"max_chars": "model.max_chars", "event_body_chars": "index.event_body_chars",
               "source_chars": "index.source_chars", "quantized": "model.quantize",
               "package": "model.package", "name": "model.name", "dim": "model.dim"}


def _said(value: Any) -> Any:
    """A value as a mismatch says it: a tuned copy by its path (its provenance, pairs and training
    parameters made the line ~1,500 characters long)."""
    if isinstance(value, dict) and "path" in value:
        return value.get("path")
    return value


def check_meta(where: Location | Path, config: Config) -> dict[str, Any]:
    """The meta of a usable index, or IndexMismatch naming the fix."""
    location = at(where)
    meta = read_meta(location)
    if meta is None:
        if location.blocked():  # `mem index` could not write there either
            raise IndexMismatch(f"no index: {location.folder} is not a folder; move it away, then run "
                                "`mem index`", location.meta_name)
        raise IndexMismatch(f"no index in {location.uri}: run `mem index`", location.meta_name)
    why = mismatch(meta, config)
    if why:
        raise IndexMismatch(why, location.meta_name)
    return meta


class MetaConflict(Refused):
    """Another writer's meta.json cannot be merged with this run's (or kept replacing it)."""


def publish_meta(where: Location | Path,
                 make: Callable[[dict[str, Any] | None, str | None], dict[str, Any]]) -> dict[str, Any]:
    """Replace meta.json by ``make(current, token)`` by compare-and-swap: read it with the token
    naming its version, build the new one from it, write it only if no other writer replaced it
    meanwhile, else read again and rebuild. ``make`` merges (the versions never move backwards) or
    raises MetaConflict. Returns the meta written, or the current one when the new one differs
    from it only in when it was built (then nothing is written)."""
    location = at(where)
    for _ in range(SWAP_TRIES):
        data, token = location.read_meta_bytes()
        try:
            current = None if data is None else _parse_meta(location, data)
        except IndexMismatch:
            current = None  # a corrupt meta.json (only `--full` gets here): replaced whole
        meta = make(current, token)
        if current is not None and _but_built(meta) == _but_built(current):
            return current  # nothing changed: nothing written (a second `mem index`)
        if location.swap_meta((json.dumps(meta, indent=1, sort_keys=True) + "\n").encode("utf-8"), token):
            return meta
    raise MetaConflict(f"{location.meta_name} was replaced by other writers {SWAP_TRIES} times while "
                       "this run published its versions: run `mem index` again")


def _but_built(meta: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in meta.items() if name != "built"}


class IndexDamaged(InputError):
    """A LanceDB file or table of the index is missing, truncated or garbled."""

    def __init__(self, where: Location | Path | str, detail: str):
        super().__init__(where.uri if isinstance(where, Location) else str(where), None, None,
                         f"the index is damaged ({detail}): run `mem index --full`")
        self.detail = detail


_DAMAGE_WORDS = ("LanceError(IO)", "Not found", "no longer exists", "corrupt", "does not exist")
# The machine refusing, not the index damaged: nothing to delete (a full disk read as damage made
# `mem index --full` delete the intact tables, then fail to write them again).
_REFUSALS = {errno.ENOSPC: "No space left on device", errno.EDQUOT: "Disk quota exceeded",
             errno.EROFS: "Read-only file system", errno.EACCES: "Permission denied",
             errno.EMFILE: "Too many open files", errno.ENFILE: "Too many open files in system",
             errno.EPERM: "Operation not permitted", errno.EFBIG: "File too large"}


class IndexUnwritable(InputError):
    """The machine refused a write or read of the index (a full disk, a read-only or forbidden
    folder): the index is as it was. ``reading``: what was refused is a read (a search's, or
    meta.json or read.json as an index run reads them first)."""

    def __init__(self, where: Location | Path | str, why: str, reading: bool = False):
        super().__init__(where.uri if isinstance(where, Location) else str(where), None, None,
                         f"{why}: " + ("the index cannot be read" if reading else
                                       "the index is kept as it was") + " (mend that, then run it again)")


def refused_at(error: BaseException, location: Location) -> str:
    """The file or folder of the index ``error`` (a refusal) names: an OSError's (or the folder
    above it this process may not search); else the longest
    path under the index's folder that lance's message gives, or what of it is there (lance names
    paths it only probed); else the first file or folder there this process may not read; else the
    index's place."""
    folder = str(location.folder)
    if isinstance(error, OSError) and isinstance(error.filename, str) and error.filename:
        path = error.filename  # (or the folder above it this process may not search)
        while len(path) > len(folder) and not os.access(os.path.dirname(path), os.X_OK, effective_ids=True):
            path = os.path.dirname(path)
        return path
    if location.remote:
        return location.uri
    paths = re.findall(re.escape(folder) + r"[^\s:,;)'\"]*", str(error))
    if paths:
        path = max(paths, key=len).rstrip(".")
        while len(path) > len(folder) and not os.path.lexists(path):
            path = os.path.dirname(path)
        return path
    return _first_unreadable(location.folder) or location.uri


def _first_unreadable(folder: Path, limit: int = 10_000) -> str | None:
    """The first folder under ``folder`` (it too) this process may not list, or file it may not
    open for reading, breadth first, of the first ``limit`` entries; None when there is none."""
    waiting, seen = [str(folder)], 0
    while waiting and seen < limit:
        path = waiting.pop(0)
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    seen += 1
                    if entry.is_dir(follow_symlinks=False):
                        waiting.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        try:
                            os.close(os.open(entry.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
                        except PermissionError:
                            return entry.path
                        except OSError:
                            pass
        except PermissionError:
            return path
        except OSError:
            pass
    return None


def refusal(error: BaseException, where: Location | None = None) -> str | None:
    """The machine's refusal ``error`` reports (by its errno, or in lance's message, read without
    the index's own path, ``where``: a workspace in a folder named "Permission denied" is no
    refusal; memory or a thread refused, ``resource_refusal``), or None."""
    if isinstance(error, OSError) and error.errno in _REFUSALS:
        return _REFUSALS[error.errno]
    text = str(error)
    for path in () if where is None else (where.uri, str(where.folder)):
        text = text.replace(path, "").replace(path.lstrip("/"), "")
    return next((why for why in _REFUSALS.values() if why in text), None) or resource_refusal(error, text)


def is_conflict(error: BaseException) -> bool:
    """Whether a Lance commit lost a race with another writer's: a retryable conflict, or a
    transaction (an upsert, an index build) planned on a version another writer's overwrite or
    rebuild has since replaced. Never damage: the other writer's commit is whole."""
    text = str(error).lower()
    return (type(error).__name__ == "CommitConflictError"
            or any(words in text for words in ("commit conflict", "incompatible transaction")))


def conflict_detail(error: BaseException) -> str:
    """A lost commit's reason, in a line (without lance's prefix and Rust source path)."""
    return first_line(str(error).strip().removeprefix("lance error: "), 160)


def is_damage(error: BaseException, where: Location | None = None) -> bool:
    """Whether ``error`` was raised inside lancedb/lance/pyarrow because a file of the index is
    missing, truncated or garbled (rather than by a bug: those are not hidden; nor by the machine
    refusing, ``refusal``, read without the index's own path ``where``)."""
    if refusal(error, where):
        return False
    frames, tb = [], error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_globals.get("__name__", ""))
        tb = tb.tb_next
    if not any(name.split(".")[0] in ("lancedb", "lance", "pyarrow") for name in frames):
        return False
    if isinstance(error, (OSError, RuntimeError)) or type(error).__name__ == "PanicException":
        return True
    return isinstance(error, ValueError) and any(w in str(error) for w in _DAMAGE_WORDS)


@contextlib.contextmanager
def guard(where: Location | Path, reading: bool = False) -> Iterator[None]:
    """Report an error from a damaged index as one line naming the fix (IndexDamaged); on an
    object store, first ask whether the store answers at all (StoreUnreachable: no `--full`
    advice for a network failure); the machine's refusal, naming the file refused
    (IndexUnwritable; ``reading``: the command only reads the index)."""
    location = at(where)
    refuse_after_fork()  # a table the parent opened: every read waited for ever
    try:
        yield
    except BaseException as error:  # lance reports a Rust panic as a BaseException
        if isinstance(error, (InputError, Refused)):
            raise
        if not isinstance(error, (KeyboardInterrupt, SystemExit)) and (why := refusal(error, location)):
            raise IndexUnwritable(refused_at(error, location), why, reading) from None  # (a Rust
            # panic too: a thread not spawned)
        if isinstance(error, Exception) and is_conflict(error):  # two `--full` at once on one store
            raise MetaConflict(f"another writer changed the index in {location.uri} while this run "
                               f"indexed ({conflict_detail(error)}): run `mem index` again") from None
        if not is_damage(error, location):
            raise
        detail = first_line(str(error), 200)
        if location.remote:
            location.probe()
            if _transient(str(error)):
                raise StoreUnreachable(location.uri, detail) from None
        raise IndexDamaged(location, f"{type(error).__name__}: {detail}") from None


_STORE_FAILING = re.compile(
    r"error sending request|Connection refused|timed out|dns error|Failed to connect"
    r"|NoSuchBucket|InvalidAccessKeyId|SignatureDoesNotMatch|AccessDenied|403 Forbidden"
    r"|after \d+ retries|failed after|status code: (?:429|5\d\d)|SlowDown|Service Unavailable")


def _transient(message: str) -> bool:
    """Whether an error from an object store reads as the store failing (not answering, refusing
    the credentials, or answering a request with a server error, 429 or 5xx, until the client gave
    up retrying: ``failed after``, ``after 3 retries``), not as damage: a file of the index that is
    missing or garbled answers 404 or reads wrong, at once."""
    return _STORE_FAILING.search(message) is not None


def drop_damaged(location: Location, name: str, error: BaseException) -> None:
    """Delete table ``name``'s files, too damaged to be read or replaced (``--full`` builds it
    afresh), unless the store is what failed: one that does not answer, or answers ``error``'s
    request with a server error, is StoreUnreachable, and nothing is deleted (a 503 on a PUT deleted
    the published steps table, and every reader lost it)."""
    location.probe()
    if location.remote and _transient(str(error)):
        raise StoreUnreachable(location.uri, first_line(str(error), 200)) from None
    location.drop_table_files(name)


def connect(where: Location | Path):
    """The LanceDB connection at the index's location (lancedb imported on first use)."""
    return at(where).connect()


def open_table(db, name: str):
    """A table, or None when it does not exist yet."""
    try:
        return db.open_table(name)
    except (FileNotFoundError, ValueError):
        return None


def waiting(table, column: str) -> list:
    """``column`` of each row of ``table`` (None: no table) still waiting for its vector: what a
    running or stopped backfill left with ``embedded`` false. A constant filter: no user text."""
    if table is None or "embedded" not in table.schema.names or not table.count_rows("embedded = false"):
        return []
    rows = table.search().where("embedded = false").select([column])
    return rows.limit(table.count_rows()).to_arrow()[column].to_pylist()
