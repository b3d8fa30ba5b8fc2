"""Where an index lives: a folder (by default ``WORKSPACE/.mem``) or an object store
(``index.uri = "s3://bucket/prefix"``).

Everything a reader needs lives at the location: the LanceDB tables (``lance/``), ``meta.json``
(the table versions readers use) and the model files it names (``models/``: ONNX exports and tuned
models, in folders named by the hash of what they hold, so never rewritten). A remote index's model
files are fetched on first use into ``WORKSPACE/.mem/models/`` (a cache, same layout) and checked
there; the parts that are local by nature stay in ``WORKSPACE/.mem`` whatever the location: the
writers' lock of one machine (``index.lock``) and `mem serve`'s socket.

Object-store files go through obstore (the Rust ``object_store`` crate that LanceDB itself uses):
the same storage options, and the same standard ``AWS_*`` environment variables, reach both.
``meta.json`` is replaced by compare-and-swap: a conditional PUT (If-Match its ETag, or
If-None-Match for the first), so two writers on two machines never lose one another's update."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

from mem_retrieval.configs import Config
from mem_retrieval.records.errors import BadInput, InputError, Refused
from mem_retrieval.records.files import content_hash, replace_folder, stamp, write_atomic
from mem_retrieval.records.parse import open_regular, read_at_most

META = "meta.json"
LOCK = "index.lock"
READ = "read.json"  # what this machine's index runs last read of each run's tree.json and log
READ_LIMIT = 64 << 20  # bytes of it read: ~350 a run
_UNSAID = object()  # a read.json an older version wrote says nothing of the library
SCHEMES = ("s3",)
STORAGE_KEYS = {  # config key -> LanceDB's (object_store's) storage option
    "endpoint": "aws_endpoint", "region": "aws_region", "access_key_id": "aws_access_key_id",
    "secret_access_key": "aws_secret_access_key", "session_token": "aws_session_token",
    "allow_http": "allow_http"}
CLIENT_KEYS = {"allow_http"}  # options obstore takes as client options, not store config
RETRY = {"max_retries": 3, "retry_timeout": timedelta(seconds=30)}  # as LanceDB's own client
# Lance's own retries of a table's requests, as ``RETRY`` (each try keeps object_store's 30 s
# timeout, so a stuck store is said in about 2 minutes): at Lance's defaults, 10 retries over 180 s,
# a store answering meta.json but hanging on the tables kept a search, or an index run holding its
# lock, waiting for more than 8 minutes
LANCE_RETRY = {"client_max_retries": str(RETRY["max_retries"]),
               "client_retry_timeout": str(int(RETRY["retry_timeout"].total_seconds()))}


_AWS_VALUES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
               "AWS_DEFAULT_REGION")  # the variables object_store puts in a request's headers


def _is_url(value: str) -> bool:
    """Whether an endpoint is a URL object_store takes: http(s), a host, a port if any in range, no
    white space (it panicked on `nonsense`, `http://127.0.0.1:99999`, `http://ho st`)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (raises ValueError when out of range or not a number)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and not any(c.isspace() for c in value)


def _as_read(read: dict[str, Any], whole: bool = False) -> dict[str, Any]:
    """A file as read.json records an index run read it: its stamp (four integers) and hash, each
    None where the run could not take it (the file was written while it read), but for a
    ``whole`` record (a log's, which has its ``size`` too: the bytes read). A ValueError for
    anything else: a record no index run wrote."""
    found, sha = read["stamp"], read["sha256"]
    if found is not None and not (isinstance(found, list) and len(found) == 4
                                  and all(type(part) is int for part in found)):
        raise ValueError(f"stamp {found!r}")
    if (sha is not None and not isinstance(sha, str)) or (whole and (found is None or sha is None)):
        raise ValueError(f"sha256 {sha!r}")
    if not whole:
        return {"stamp": None if found is None else tuple(found), "sha256": sha}
    if type(size := read["size"]) is not int or size < 0:
        raise ValueError(f"size {size!r}")
    return {"stamp": tuple(found), "size": size, "sha256": sha}


class StoreUnreachable(Refused):
    """The object store holding the index cannot be reached (network, bucket, credentials)."""

    def __init__(self, uri: str, detail: str):
        super().__init__(f"the index store {uri} cannot be reached ({first_line(detail)}); check "
                         "index.uri, the [index.storage] keys and the AWS_* environment variables")


def first_line(text: str, limit: int = 240) -> str:
    """A lance or object-store error's first useful line (without the Rust debug dump or source
    paths), at most ``limit`` characters: a longer one ends at a word's end, with "…"."""
    line = str(text).strip().split("\n")[0].split(", /")[0]
    if len(line) <= limit:
        return line
    cut = line[:limit - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut) + "…"


URL_SPECIAL = "#?%"  # what a URL reads otherwise than a key: an object store prefix holds none
CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # what no path of LanceDB's (object_store's) may hold: a
# workspace whose folder's name held a tab could never be indexed, and `mem index` ended in a traceback


@dataclass(frozen=True)
class Location:
    """The index of one workspace: ``uri`` (a folder path or ``s3://bucket/prefix``), its storage
    options, and ``local``: the workspace's own ``.mem`` folder (lock, socket, model cache)."""

    uri: str
    local: Path
    options: tuple[tuple[str, str], ...] = ()
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    # model folders whose download ``fetch`` found changed on the store, and why (``rejected``)
    _rejected: dict[str, str] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @classmethod
    def of(cls, workspace, config: Config) -> "Location":
        """The configured location of ``workspace``'s index: ``index.uri`` ("" = ``.mem``; a
        relative folder is taken from the workspace root, ``~`` is the home folder; a file is
        refused). An evaluation's scratch index
        (``workspace.index_root``) is always that folder."""
        local = workspace.root / ".mem"
        uri = config.index.uri.strip()
        if workspace.index_root is not None or not uri:
            if held := CONTROL.search(str(workspace.index_dir)):
                raise BadInput(f"workspace {str(workspace.root)!r}: its path holds a control character "
                               f"({held.group()!r}), which no index path may (LanceDB refuses it): move the "
                               "workspace to a folder without one, or set index.uri to one")
            return cls(str(workspace.index_dir), workspace.index_dir)
        if held := CONTROL.search(uri):
            raise config.fault("index.uri", f"{uri!r} holds a control character ({held.group()!r}), which no "
                               "index path may (LanceDB refuses it): choose one without")
        if "://" not in uri:
            if re.match(r"[A-Za-z][A-Za-z0-9+.-]+:", uri):  # `s3:/bucket/x`: a URI lacking `//` (a
                # drive letter, `C:`, is one letter); read as a folder, the index stayed on this machine
                raise config.fault("index.uri", f"{uri!r} reads as a URI without '//' after its scheme: "
                                   f"write s3://bucket/prefix, or ./{uri} for a folder so named")
            try:
                folder = (workspace.root / Path(uri).expanduser()).resolve()
                if folder.exists() and not folder.is_dir():
                    raise config.fault("index.uri", f"{uri!r} names a file ({folder}), not a folder")
            except OSError as error:  # a name too long, a loop of links
                raise config.fault("index.uri", f"{uri!r}: {error.strerror or error}") from None
            except RuntimeError:  # `~nosuchuser/x`: expanduser knows no such home
                home = uri.split("/")[0]
                raise config.fault("index.uri", f"{uri!r}: {home!r} names no home folder here (no such "
                                   "user)") from None
            if held := CONTROL.search(str(folder)):  # a relative one, under a workspace so named
                raise config.fault("index.uri", f"{uri!r} is the folder {str(folder)!r}, whose path holds a "
                                   f"control character ({held.group()!r}), which no index path may (LanceDB "
                                   "refuses it): choose one without")
            return cls(str(folder), local)
        scheme, _, rest = uri.partition("://")
        if scheme.lower() not in SCHEMES or not rest.split("/")[0]:
            raise config.fault("index.uri", f"{uri!r} is not a folder or an s3://bucket/prefix URI")
        if odd := sorted(set(rest) & set(URL_SPECIAL)):  # LanceDB reads the URI as a URL: `#x` a
            # fragment, `?x` a query, `%41` an escape; its tables and meta.json then parted ways
            raise config.fault("index.uri", f"{uri!r}: a prefix with {' or '.join(map(repr, odd))} is "
                               "read as a URL's fragment, query or escape by LanceDB: choose a prefix "
                               f"without {' or '.join(map(repr, odd))}")
        if odd := [s for s in rest.rstrip("/").split("/")[1:] if s in ("", ".", "..")]:
            raise config.fault("index.uri", f"{uri!r}: a prefix with an empty, '.' or '..' part "
                               f"({odd[0]!r}) names no object key (object keys have none): write the "
                               "prefix without such parts")
        storage = config.index.storage
        for name in STORAGE_KEYS:  # found here, not by a panic in object_store's Rust code
            value = getattr(storage, name)
            if held := CONTROL.search(value):
                raise config.fault(f"index.storage.{name}", f"holds a control character ({held.group()!r}), "
                                   "which no request to the store may carry")
        if storage.endpoint and not _is_url(storage.endpoint):
            raise config.fault("index.storage.endpoint", f"{storage.endpoint!r} is not a URL: write "
                               "http://host:port (with allow_http = \"true\") or https://host")
        for variable in () if storage.endpoint else ("AWS_ENDPOINT_URL", "AWS_ENDPOINT"):
            if (value := os.environ.get(variable)) and not _is_url(value):
                raise BadInput(f"{variable}={value!r} is not a URL (index.uri {uri!r} would be reached "
                               "through it): write http://host:port or https://host, or unset it")
        for variable in _AWS_VALUES:  # a line break in a header panicked in object_store's Rust code
            if (value := os.environ.get(variable)) and (held := CONTROL.search(value)):
                raise BadInput(f"{variable} holds a control character ({held.group()!r}), which no request "
                               f"to the store may carry (index.uri {uri!r} would be reached with it)")
        options = tuple((STORAGE_KEYS[name], getattr(storage, name)) for name in STORAGE_KEYS
                        if getattr(storage, name))
        return cls(f"{scheme.lower()}://{rest.rstrip('/')}", local, options)

    # ---- where things are
    @property
    def remote(self) -> bool:
        return "://" in self.uri

    @property
    def folder(self) -> Path:
        """The folder model files are read from: the index folder itself, or (remote) the local
        cache ``WORKSPACE/.mem``, laid out the same way."""
        return self.local if self.remote else Path(self.uri)

    @property
    def lock_path(self) -> Path:
        """One writer at a time on this machine: beside a folder index, else in the local .mem."""
        return self.folder / LOCK

    @property
    def read_path(self) -> Path:
        """Local, as the lock: the tree.json files this machine's index runs read (another
        machine's runs read files of their own)."""
        return self.folder / READ

    def trees_read(self) -> tuple[dict[str, dict[str, Any]], bool] | None:
        """Per run, its tree.json as the last index run reading it read it (``{"stamp": files.stamp,
        "sha256": …}``: a search names the trees written since), and whether every run was read
        since the record began (else a run it lacks may be indexed, by a version that kept no
        record); None: no record (an index of an older version, or one that could not be written).
        Read again only when the file changed: every search asks."""
        record = self._read_record()
        return None if record is None else (record[0], record[1])

    def library_read(self) -> tuple[bool, dict[str, Any] | None]:
        """solve/library.jsonl as the last index run read it (every run reads it): (True, its
        ``{"stamp", "sha256"}``, or None when there was none); (False, None) when the record says
        nothing of it (none, or one an older version wrote)."""
        record = self._read_record()
        return (False, None) if record is None or record[2] is _UNSAID else (True, record[2])

    def logs_read(self) -> dict[str, dict[str, Any]]:
        """Per run, its events.jsonl as the last index run reading it read it
        (``Workspace.events``' ``{"stamp", "size", "sha256"}``): a search names a log changed
        since otherwise than by appending. None recorded (an index of an older version): empty."""
        record = self._read_record()
        return {} if record is None else record[3]

    def _read_record(self) -> tuple[dict[str, dict[str, Any]], bool, Any, dict[str, dict[str, Any]]] | None:
        found = stamp(self.read_path)
        if found is None or found[2] > READ_LIMIT:  # (its size) no index run writes one so large
            return None
        kept = self._cache.get(READ)
        if kept is None or kept[0] != found:
            kept = self._cache[READ] = (found, self._read_trees())
        return kept[1]

    def _read_trees(self) -> tuple[dict[str, dict[str, Any]], bool, Any, dict[str, dict[str, Any]]] | None:
        try:
            with open_regular(self.read_path) as handle:
                data = read_at_most(handle, READ_LIMIT)
            if len(data) > READ_LIMIT:  # grown since it was looked at
                return None
            found = json.loads(data)
            trees = {str(run): _as_read(read) for run, read in found["trees"].items()}
            library = found.get("library", _UNSAID)
            library = library if library in (None, _UNSAID) else _as_read(library)
            logs = {str(run): _as_read(read, whole=True) for run, read in found.get("logs", {}).items()}
            return trees, found["complete"] is True, library, logs
        except PermissionError as error:  # refused, as meta.json is: its notes would go unsaid, and
            from mem_retrieval.indexers.store import IndexUnwritable  # `mem index` keeps its mode

            raise IndexUnwritable(self.read_path, error.strerror or str(error), reading=True) from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            return None  # a record no index run wrote: nothing to say (the next run replaces it)

    def record_trees(self, read: dict[str, dict[str, Any]], runs: list[str], every: bool,
                     library: dict[str, Any] | None, logs: dict[str, dict[str, Any]]) -> None:
        """Record ``read`` (run: its tree.json as an index run read it; ``every``: it read every
        run), keeping what earlier runs read of the other ``runs`` (the workspace's), and
        ``library``, the library as it read it (None: there was none), and ``logs`` (each run it
        read: its events.jsonl as read, ``Workspace.events``' record, or None: there was none),
        replacing what earlier runs read of those. A record that cannot be written is removed: a
        search then says nothing rather than name a file read since as unread."""
        before, complete = self.trees_read() or ({}, False)
        kept = {run: was for run, was in before.items() if run in runs} | read
        kept = {run: {"stamp": was["stamp"] and list(was["stamp"]), "sha256": was["sha256"]}
                for run, was in kept.items()}
        logs = {run: was for run, was in self.logs_read().items() if run in runs and run not in logs} | logs
        logs = {run: {"stamp": list(was["stamp"]), "size": was["size"], "sha256": was["sha256"]}
                for run, was in logs.items() if was is not None}
        library = None if library is None else {"stamp": library["stamp"] and list(library["stamp"]),
                                                "sha256": library["sha256"]}
        try:
            if self.read_path.is_dir() and not self.read_path.is_symlink():  # in the way: replaced
                shutil.rmtree(self.read_path)
            write_atomic(self.read_path, json.dumps({"complete": every or complete, "trees": kept,
                                                     "library": library, "logs": logs},
                                                    sort_keys=True) + "\n",
                         follow=False)  # a link to elsewhere is replaced, not written through: nothing
            # outside .mem is touched
        except OSError:
            try:
                self.read_path.unlink(missing_ok=True)
            except OSError:
                pass

    def written_since(self, path: str, now: tuple[int, int, int, int] | None,
                      was: dict[str, Any] | None) -> bool:
        """Whether the file at ``path`` (a tree.json, the library), of ``files.stamp`` ``now`` (its
        caller has it: a search lists the runs with their trees' stamps), differs from ``was``
        (``trees_read``'s or ``library_read``'s; None: there was none, or it was not read): by its
        stamp, else (a copied folder: new inodes) by its bytes; one removed since it was read
        differs too. A ``was`` of no stamp and no hash (written while the index run read it)
        differs from any file."""
        if now is None or was is None:
            return (now is None) != (was is None)
        return now != was["stamp"] and content_hash(path) != was["sha256"]

    @property
    def lance_uri(self) -> str:
        return f"{self.uri}/lance" if self.remote else str(Path(self.uri) / "lance")

    @property
    def meta_name(self) -> str:
        """meta.json as messages name it."""
        return f"{self.uri}/{META}" if self.remote else str(Path(self.uri) / META)

    def storage_options(self) -> dict[str, str]:
        """LanceDB's storage options: the config's keys (the environment supplies the rest), and
        for a store, its retries bounded (``LANCE_RETRY``)."""
        return {**LANCE_RETRY, **dict(self.options)} if self.remote else dict(self.options)

    def store(self):
        """The obstore store at ``uri`` (remote only), made once: config keys over the
        environment's AWS_* variables (obstore reads them, as LanceDB does). Its runtime does not
        survive a fork either (``_forked``: a read of meta.json waited for ever in the child)."""
        global _CONNECTED
        refuse_after_fork()
        _CONNECTED = True
        if "store" not in self._cache:
            from obstore.store import from_url

            config = {k: v for k, v in self.options if k not in CLIENT_KEYS}
            client = {k: v for k, v in self.options if k in CLIENT_KEYS}
            with self._reaching():
                self._cache["store"] = from_url(self.uri, config=config or None,
                                                client_options=client or None, retry_config=RETRY)
        return self._cache["store"]

    # ---- reachability
    def _reaching(self, missing_ok: bool = False, conflicts_ok: bool = False) -> "_Reaching":
        """Turn an object-store failure into one line (StoreUnreachable)."""
        return _Reaching(self.uri, missing_ok, conflicts_ok)

    def probe(self) -> None:
        """Raise StoreUnreachable when the store does not answer a listing (remote only)."""
        if not self.remote:
            return
        import obstore

        with self._reaching():
            next(iter(obstore.list(self.store(), META, chunk_size=1)), None)

    # ---- meta.json: read, and compare-and-swap
    def read_meta_bytes(self) -> tuple[bytes | None, str | None]:
        """meta.json's bytes and a token naming that version of it (None, None when absent)."""
        if not self.remote:
            path = Path(self.uri) / META
            try:
                os.lstat(path)  # (an index folder it may not search is refused, not absent)
            except (FileNotFoundError, NotADirectoryError):
                return None, None
            with open_regular(path) as handle:  # an OSError for a folder, a pipe, a device or a
                data = handle.read()  # dead link there: no index reads it
            return data, hashlib.sha256(data).hexdigest()
        return self._get(META) or (None, None)

    def blocked(self) -> bool:
        """Whether something other than a folder (a file, a pipe) stands where the index's local
        folder goes: nothing can be written there, and no index read."""
        return self.folder.exists() and not self.folder.is_dir()

    def clear_stray_meta(self) -> None:
        """Remove what stands where a folder index's meta.json goes when it is not a file (a
        folder, a dead link): ``mem index --full`` writes it anew, as it replaces a corrupt one."""
        path = Path(self.uri) / META
        if self.remote or path.is_file() or not os.path.lexists(path):
            return
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()

    def _get(self, key: str) -> tuple[bytes, str] | None:
        """A remote index's object ``key`` (relative to the URI) and its ETag; None: absent."""
        import obstore

        try:
            with self._reaching(missing_ok=True):
                found = obstore.get(self.store(), key)
                return bytes(found.bytes()), found.meta["e_tag"]
        except FileNotFoundError:
            return None

    def meta_version(self) -> Any:
        """A cheap token that changes whenever meta.json is replaced (a warm server keys its
        cache on it): the file's stat, or the object's ETag (one HEAD request); None: none yet."""
        if not self.remote:
            return stamp(Path(self.uri) / META)
        import obstore

        try:
            with self._reaching(missing_ok=True):
                return obstore.head(self.store(), META)["e_tag"]
        except FileNotFoundError:
            return None

    def files_version(self) -> tuple:
        """A cheap token of the files a search's opening checks besides meta.json: this machine's
        model files (the export, a tuned copy) and, for a folder index, its table folders (whose
        stats change when a file in them is added or deleted: a data file, a version's manifest,
        an index part). A warm server keys its cache on it with ``meta_version``: a model file
        deleted or changed, a table's file deleted, is then found as a new process finds it (one
        line naming the fix), not answered from what it loaded. Stats alone (0.3 ms for an index
        of three tables and one export); a table file changed in place goes unseen."""
        folders = [self.folder / "models"]
        if not self.remote:
            lance = Path(self.lance_uri)
            tables = sorted(lance.glob("*.lance"))
            folders += [lance, *tables, *(table / part for table in tables
                                          for part in ("data", "_versions", "_indices"))]
            folders += sorted(part for table in tables for part in (table / "_indices").glob("*"))
        found = [(str(folder), stamp(folder)) for folder in folders]
        for root, _, names in os.walk(folders[0]):
            found += [(os.path.join(root, name), stamp(Path(root) / name)) for name in sorted(names)]
        return tuple(found)

    def swap_meta(self, data: bytes, token: str | None) -> bool:
        """Replace meta.json by ``data`` if it is still the version ``token`` names (None: if
        there is none yet); False when another writer replaced it first. A folder index is written
        atomically (temporary file, rename) under the writers' lock; an object store by one
        conditional PUT, atomic by itself."""
        if not self.remote:
            if self.read_meta_bytes()[1] != token:
                return False
            write_atomic(Path(self.uri) / META, data.decode("utf-8"), follow=False)  # a link there is
            return True  # replaced, never written through: `mem index` writes only in .mem/
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        mode: Any = "create" if token is None else {"e_tag": token}
        try:
            with self._reaching(conflicts_ok=True):
                obstore.put(self.store(), META, data, mode=mode)
        except (AlreadyExistsError, PreconditionError):
            return False
        return True

    # ---- model files (named by their hash: written once, never changed)
    def read_bytes(self, relative: str) -> bytes | None:
        """The bytes of the index's model file ``relative`` (``models/onnx-…/export.json``): the
        local copy when there is one, else a remote index's object, alone (its folder is not
        fetched); None when neither holds it."""
        local = self.folder / relative
        if local.is_file():
            return local.read_bytes()
        found = self._get(relative) if self.remote else None
        return found[0] if found is not None else None

    def fetch(self, relative: str, problem: Callable[[Path], str | None],
              verify: Callable[[Path], str | None] | None = None) -> Path:
        """The local folder of the index's files under ``relative`` (``models/onnx-…``). A remote
        index's folder is downloaded when the cache lacks it or ``problem`` finds it incomplete
        (files of another size); the caller checks the result again. ``verify`` (hashes, once per
        download) keeps a download it finds changed out of the cache: the caller then finds the
        folder missing, and ``rejected`` says why. A copy another process put in place meanwhile
        is kept (it may be reading it); the machine's own refusals (a full disk, a read-only
        folder) are raised as the OSError they are, not as the store's."""
        target = self.folder / relative
        if not self.remote or (target.is_dir() and problem(target) is None):
            return target
        import obstore

        def download(scratch: Path) -> None:
            with self._reaching():
                keys = [entry["path"] for chunk in obstore.list(self.store(), relative + "/")
                        for entry in chunk]
            for key in keys:
                name = key[len(relative) + 1:]
                if not name or any(part.startswith(".") for part in name.split("/")):
                    continue
                with self._reaching():
                    data = bytes(obstore.get(self.store(), key).bytes())
                (scratch / name).parent.mkdir(parents=True, exist_ok=True)
                (scratch / name).write_bytes(data)
            why = verify(scratch) if verify is not None and scratch.is_dir() else None
            if why is not None:
                self._rejected[relative] = why.replace(str(scratch), relative)  # not a scratch path
                shutil.rmtree(scratch)  # the store's copy changed since it was written: not cached

        self._rejected.pop(relative, None)
        if target.is_symlink() or target.is_file():  # what stands there is no copy
            target.unlink()
        elif target.is_dir():
            if problem(target) is None:  # another process put it there meanwhile
                return target
            shutil.rmtree(target)  # a damaged copy
        replace_folder(target, download, tag="download", keep_existing=True)
        return target

    def rejected(self, relative: str) -> str | None:
        """Why the store's copy of ``relative`` was not taken into the cache by this process's
        last ``fetch`` of it (it failed ``verify``), or None."""
        return self._rejected.get(relative)

    def push(self, relative: str, last: str | None = None,
             whole: Callable[[Path], str | None] | None = None) -> None:
        """Upload the local folder ``relative`` to a remote index (files already there, of the
        same size, are skipped: the folder's name is the hash of its content); ``last`` goes
        after the others (a manifest: a half-uploaded folder is seen incomplete). ``whole`` (a
        full build: hashes) checks the local copy first; when it is whole every file is uploaded,
        so that a store copy changed at the same size, which no reader takes, is mended."""
        if not self.remote:
            return
        import obstore

        source = self.folder / relative
        files = sorted((p for p in source.rglob("*") if p.is_file()),
                       key=lambda p: (p.relative_to(source).as_posix() == last, p.as_posix()))
        every = whole is not None and whole(source) is None
        with self._reaching():
            there = {entry["path"]: entry["size"] for chunk in obstore.list(self.store(), relative + "/")
                     for entry in chunk}
            for path in files:
                key = f"{relative}/{path.relative_to(source).as_posix()}"
                if every or there.get(key) != path.stat().st_size:
                    obstore.put(self.store(), key, path)

    # ---- tables
    def drop_table_files(self, name: str) -> None:
        """Delete a damaged table's files (``mem index --full`` then builds it afresh)."""
        if not self.remote:
            shutil.rmtree(Path(self.uri) / "lance" / f"{name}.lance", ignore_errors=True)
            return
        import obstore

        with self._reaching():
            paths = [entry["path"] for chunk in obstore.list(self.store(), f"lance/{name}.lance/")
                     for entry in chunk]
            for start in range(0, len(paths), 500):
                obstore.delete(self.store(), paths[start:start + 500])

    def connect(self):
        """The LanceDB connection (lancedb imported here, on first use)."""
        global _CONNECTED
        refuse_after_fork()
        _CONNECTED = True
        os.environ.setdefault("LANCEDB_LOG", "error")
        from mem_retrieval.indexers.lancedb_import import import_lancedb

        lancedb = import_lancedb()

        if not self.remote:
            return lancedb.connect(self.lance_uri)
        try:
            return lancedb.connect(self.lance_uri, storage_options=self.storage_options())
        except (OSError, ValueError, RuntimeError) as error:
            self.probe()
            raise StoreUnreachable(self.uri, str(error)) from None


_CONNECTED = False  # this process opened a LanceDB connection or an object store
_FORKED_FROM: int | None = None  # the process that had, this one (or an ancestor) forked from


def _forked() -> None:
    """In a child forked from a process that had opened LanceDB, or obstore's store: its tables,
    and their runtimes' state, are the parent's. A read of a table the parent read waited for ever
    in lancedb's background loop, and a fresh connection crashed the child (SIGSEGV): none is tried."""
    global _FORKED_FROM
    if _CONNECTED and _FORKED_FROM is None:
        _FORKED_FROM = os.getppid()


os.register_at_fork(after_in_child=_forked)


def refuse_after_fork() -> None:
    """BadInput in a process forked after its parent opened an index (``_forked``)."""
    if _FORKED_FROM is not None:
        raise BadInput(f"this process was forked from process {_FORKED_FROM} after that one opened an "
                       "index: LanceDB does not survive a fork (a read hangs or crashes): fork before "
                       "the first search or index, or use multiprocessing's spawn or forkserver start "
                       "method")


class _Reaching:
    """A context turning obstore errors into StoreUnreachable; a missing object (``missing_ok``)
    and a failed precondition (``conflicts_ok``) pass through, for the caller to handle."""

    def __init__(self, uri: str, missing_ok: bool = False, conflicts_ok: bool = False):
        self.uri, self.missing_ok, self.conflicts_ok = uri, missing_ok, conflicts_ok

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, tb) -> bool:
        if error is None or isinstance(error, (Refused, InputError)):
            return False
        module = type(error).__module__ or ""
        panic = type(error).__name__ == "PanicException"  # object_store's Rust code, on what it was
        # given (AWS_ENDPOINT_URL=nonsense): pyo3 raises it as a BaseException
        if not (module.startswith("obstore") or panic or isinstance(error, (OSError, ValueError))):
            return False
        if self.missing_ok and isinstance(error, FileNotFoundError) and "NoSuchBucket" not in str(error):
            return False
        if self.conflicts_ok and type(error).__name__ in ("AlreadyExistsError", "PreconditionError"):
            return False
        raise StoreUnreachable(self.uri, str(error)) from None
