"""A workspace on disk (SPEC §1): where each file lives, and loading it into records."""

from __future__ import annotations

import bisect
import codecs
import hashlib
import os
import stat
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from itertools import accumulate
from pathlib import Path
from typing import Any

from mem_retrieval.records.errors import BadInput, InputError, Problem, Refused, listed
from mem_retrieval.records.files import stamp, stamp_of
from mem_retrieval.records.ids import first_naming, is_run_slug, slug_run, split_gid
from mem_retrieval.records.parse import (event_last, events_after, iso_time, iter_events, iter_library,
                                         lines_after, parse_core, parse_tree, present, sha256_head,
                                         standing)
from mem_retrieval.records.settings import Ontology, load_ontology
from mem_retrieval.records.types import Audit, CoreMemory, Event, LibraryEntry, Step, Tree

LIBRARY = Path("solve") / "library.jsonl"
INDEX_DIR = ".mem"
TREE = "tree.json"  # a run's record G
RUN_RECORDS = (TREE, "memory", "briefs", "returns", "sources")  # what a run folder holds (SPEC §1)


CURRENT_FOLDER_GONE = ("the current folder no longer exists: change to one that does, or name the "
                       "workspace and every file by an absolute path")


def current_folder_exists() -> bool:
    """Whether this process's current folder still exists (a relative path is read from it)."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return False
    return True


def resolve_workspace(path: str | os.PathLike[str] | None, base: Path | None = None,
                      environ: Mapping[str, str] | None = None) -> Path:
    """``--workspace``, else ``$MEM_WORKSPACE``, else the current directory. ``base`` and
    ``environ`` stand for the current directory and the environment of a caller other than this
    process (a request to `mem serve`); a relative path is taken from ``base``."""
    env = os.environ if environ is None else environ
    chosen = Path(path or env.get("MEM_WORKSPACE") or ".")
    where = chosen if base is None else Path(base) / chosen
    if not where.is_absolute() and not current_folder_exists():
        raise BadInput(CURRENT_FOLDER_GONE)
    try:
        if not where.is_dir():
            raise BadInput(f"workspace {str(chosen)!r} is not a folder")
        root = where.resolve()
    except OSError as err:  # a name too long, a loop of links
        raise BadInput(f"workspace {str(chosen)!r}: {err.strerror or err}") from None
    # a run's folder, or one of its own (memory/, briefs/, …), where a script `cd`s: an index made
    # there would hold nothing, and `check` pass on no run
    run = root if os.path.isfile(root / TREE) else \
        root.parent if root.name in RUN_RECORDS and os.path.isfile(root.parent / TREE) else None
    if run is not None:
        what = f"a run (it holds {TREE})" if run == root else \
            f"a folder of run {run.name} (which holds {TREE})"
        raise BadInput(f"workspace {str(chosen)!r} is {what}, not a workspace: the workspace is the folder "
                       f"that holds its runs, {run.parent}")
    # the index's paths go to LanceDB, which reads a path as UTF-8: bytes that are not (lone
    # surrogates here) name no path there, nor does a path decoded by another encoding (the C
    # locale without UTF-8 mode: ASCII; or Latin-1, where `é` reads `Ã©`)
    if not str(root).isascii() and codecs.lookup(sys.getfilesystemencoding()).name != "utf-8":
        raise BadInput(f"workspace {os.fsencode(root)!r}: a path past ASCII needs Python's UTF-8 mode "
                       f"where the file system's encoding is {sys.getfilesystemencoding()} (set "
                       "PYTHONUTF8=1, or a UTF-8 locale)")
    try:
        str(root).encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput(f"workspace {str(root).encode('utf-8', 'surrogateescape')!r}: the path is "
                       "not valid UTF-8") from None
    return root


def _record_lost(folder: str) -> bool:
    """Whether a run folder holds memory/ but no tree.json that is a file, or is one whose tree.json
    this user may not look at (``runs_without_tree``): read as no run, it was dropped from the
    index in silence, and `check` said OK."""
    tree = os.path.join(folder, TREE)
    try:
        os.stat(tree)
    except PermissionError:
        return True
    except (OSError, ValueError):
        pass
    return os.path.isdir(os.path.join(folder, "memory")) and not os.path.isfile(tree)


def _tree_stamp(path: str) -> tuple[int, int, int, int] | None:
    """The ``stamp`` of the tree.json at ``path`` when it is a file (a link to one is followed), else
    None: what makes its folder a run (``Workspace.holds``, ``run_trees``), told by one stat."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):  # (as ``os.path.isfile``: a name with a NUL byte is no file)
        return None
    return stamp_of(info) if stat.S_ISREG(info.st_mode) else None


@dataclass
class Workspace:
    root: Path
    index_root: Path | None = None  # the index folder, when not ROOT/.mem (an evaluation's scratch index)

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None, base: Path | None = None,
             environ: Mapping[str, str] | None = None) -> "Workspace":
        return cls(resolve_workspace(path, base, environ))

    # ---- where things are
    @property
    def index_dir(self) -> Path:
        return self.index_root or self.root / INDEX_DIR

    @property
    def library_path(self) -> Path:
        return self.root / LIBRARY

    def run_dir(self, run: str) -> Path:
        return self.root / run

    def tree_path(self, run: str) -> Path:
        return self.root / run / TREE

    def events_path(self, run: str) -> Path:
        return self.root / run / "memory" / "events.jsonl"

    def core_path(self, run: str) -> Path:
        return self.root / run / "memory" / "core.md"

    def record_at(self, path: str | os.PathLike[str]) -> str | None:
        """Which of the workspace's records ``path`` is or lies in, as it resolves (links,
        ``..``): the library's folder ``solve/``, the index, or a run's tree.json, memory/,
        briefs/, returns/ or sources/; None when it is none of them (an output may go there)."""
        real = Path(os.path.realpath(path))
        for folder, what in ((self.root / LIBRARY.parent, "the library's folder"),
                             (self.index_dir, "the index")):
            held = Path(os.path.realpath(folder))
            if real == held or held in real.parents:
                return f"{what} {str(folder)!r}"
        try:
            parts = real.relative_to(Path(os.path.realpath(self.root))).parts
        except ValueError:
            return None
        if len(parts) >= 2 and is_run_slug(parts[0]) and parts[1] in RUN_RECORDS:
            return f"run {parts[0]}'s {parts[1]}"
        return None

    # ---- what is there
    def runs(self) -> list[str]:
        """Every run folder (a slug holding a tree.json), sorted."""
        return list(self.run_trees())

    def run_trees(self) -> dict[str, tuple[int, int, int, int]]:
        """Every run (as ``runs``, in name order) with its tree.json's ``stamp``: one stat a run
        tells both (plain strings: every search lists the runs, and a search's notes ask whether
        each tree.json was written since the last `mem index`; 2,000 runs took ~10 ms a list)."""
        trees = {}
        for name, folder in sorted(self._slug_folders()):
            if (found := _tree_stamp(os.path.join(folder, TREE))) is not None:
                trees[name] = found
        return trees

    def runs_without_tree(self) -> list[str]:
        """Run folders (a slug holding memory/) whose tree.json is missing or not a file, or whose
        tree.json this user may not look at: a run whose record was lost, which ``runs`` cannot
        list."""
        return sorted(name for name, folder in self._slug_folders() if _record_lost(folder))

    def record_lost(self, run: str) -> bool:
        """Whether ``run`` is one of ``runs_without_tree`` (which `mem index` refuses)."""
        return is_run_slug(run) and _record_lost(os.path.join(self.root, run))

    def lost_records(self) -> dict[str, Problem]:
        """Why each of ``runs_without_tree`` has no record, by run: its tree.json is missing, or
        not a file (as every reader says it), or cannot be looked at. `check` reports it, `mem
        index` refuses it: a run no search would see."""
        lost = {}
        for run in self.runs_without_tree():
            path = self.tree_path(run)
            if standing(path) == "unreadable":  # (the folder's mode: what it holds is not known)
                lost[run] = Problem(str(path), None, None, "cannot be looked at: Permission denied: the "
                                    "run folder may hold a record this user may not read")
                continue
            try:
                present(path)  # not a file (the run would be listed): nothing there, or it raises
                what = "is missing"
            except InputError as error:  # a folder, a dead link: as every reader says it
                what = error.problem.message
            lost[run] = Problem(str(path), None, None, f"{what}: the run folder holds memory/ but not "
                                "its record")
        return lost

    def holds(self, run: str) -> bool:
        """Whether ``run`` is a run (a slug holding a tree.json), without listing them all (a
        question asked once a step or a run listed every run folder: runs × runs)."""
        return is_run_slug(run) and _tree_stamp(os.path.join(self.root, run, TREE)) is not None

    def readable_trees(self, runs: Iterable[str]) -> dict[str, Tree]:
        """The trees of those of ``runs`` the workspace holds, in name order; one whose tree.json
        cannot be read is left out (``check`` names it)."""
        trees: dict[str, Tree] = {}
        if not self.root.is_dir():
            raise BadInput(self.gone())
        for run in sorted(run for run in set(runs) if self.holds(run)):
            try:
                trees[run] = self.tree(run)
            except InputError:
                continue
        return trees

    def misnamed_runs(self) -> list[Problem]:
        """Why each folder holding a tree.json under a name that is not a run slug is no run (SPEC
        §1: its tree.json's ``run``, as parsing it says), in name order: such a run would be
        passed over in silence, its steps and events never read."""
        problems = []
        for entry in sorted(os.scandir(self.root), key=lambda entry: entry.name):
            if entry.name.startswith(".") or is_run_slug(entry.name) or not entry.is_dir() \
                    or not (Path(entry.path) / TREE).is_file():
                continue
            path = self.tree_path(entry.name)
            try:
                parse_tree(path, entry.name, [])
            except InputError as error:
                problems.append(error.problem)
                continue
            problems.append(Problem(str(path), None, "run", f"its folder {entry.name!r} is not a run slug"))
        return problems

    def _slug_folders(self) -> list[tuple[str, str]]:
        """(name, path) of each folder whose name is a run slug."""
        try:
            entries = list(os.scandir(self.root))
        except (FileNotFoundError, NotADirectoryError):
            raise BadInput(self.gone()) from None
        return [(entry.name, entry.path) for entry in entries if entry.is_dir() and is_run_slug(entry.name)]

    def gone(self) -> str:
        """What is said when the workspace folder is no longer there: a ``Memory`` or a warm server
        kept open while it was moved or deleted (a raw FileNotFoundError, or "run `mem index`")."""
        return f"workspace {str(self.root)!r} is not a folder (moved or deleted since it was opened)"

    def check_runs(self, runs: list[str] | None, param: str | None = None) -> list[str]:
        """``runs`` (None or empty: every run), each once, in the order given, each as typed
        (``typed_run``: a look-alike dash, as ``--run`` reads it); BadInput for a name that cannot
        be a run (not a slug; ``param``: the argument that gave it), Refused naming the first that
        is no run here."""
        runs = runs and [slug_run(run, param) for run in runs]
        known = self.runs()
        if not runs:
            return known
        for run in runs:
            if run not in known:
                raise Refused(self.no_run(run, known))
        return list(dict.fromkeys(runs))

    def no_run(self, run: str, known: list[str] | None = None) -> str:
        """That ``run`` is no run here, what would make it one (a folder is a run once it holds its
        tree.json: an agent starting a run wrote core.md first, and was told only "no run"), and
        the runs there are (``known``, or read)."""
        runs = listed(self.runs() if known is None else known)
        try:
            os.lstat(self.tree_path(run))  # a folder, a link to nothing: as `check` names it
            return f"no run {run!r} in {self.root}: {run}/tree.json is not a file (a run is a folder " \
                   f"holding its tree.json; runs: {runs})"
        except OSError:  # none, or a name too long for a file
            pass
        if os.path.isdir(self.root / run):
            return f"no run {run!r} in {self.root}: {run}/ holds no tree.json (a run is a folder holding " \
                   f"its tree.json; runs: {runs})"
        return f"no run {run!r} in {self.root} (a run is a folder holding its tree.json; runs: {runs})"

    @property
    def ontology(self) -> Ontology:
        """The settings ontology as the files stand now: a workspace kept open (an MCP server, a
        ``Memory``) sees an edited ``solve/settings.toml`` at its next call (read again only when
        the file changed, ``load_ontology``)."""
        return load_ontology(self.root)

    # ---- loading (validated; InputError on bad input)
    def tree(self, run: str) -> Tree:
        """The run's parsed tree.json (``read_tree``'s, where it found nothing wrong)."""
        path = self.tree_path(run)
        if stamp(path) is None:
            raise Refused(self.no_run(run))
        tree, problems = self.read_tree(run)
        if tree is not None and not problems:
            return tree
        return parse_tree(path, run)  # raises what is wrong, as a read that records nothing says it

    def read_tree(self, run: str) -> tuple[Tree | None, tuple[Problem, ...]]:
        """``run``'s tree as `check` reads it, and what is wrong with it: a step repeating an id is
        left out and named (the tree is read), a file that cannot be parsed is no tree (None).
        Cached while the file is unchanged (``files.stamp``): `archive-insert` and `record` read
        the tree of their run, and every run as check does, once."""
        cache = self.__dict__.setdefault("_trees", {})
        path = self.tree_path(run)
        found = stamp(path)
        if found is not None and run in cache and cache[run][0] == found:
            return cache[run][1]
        problems: list[Problem] = []
        try:
            read = parse_tree(path, run, problems), tuple(problems)
        except InputError as error:
            read = None, (*problems, *error.problems)
        if found is not None:
            cache[run] = (found, read)
        return read

    def tree_read_stamp(self, run: str) -> tuple[int, int, int, int] | None:
        """The ``files.stamp`` of ``run``'s tree.json when it was last read (``read_tree``), taken
        before the read: a file written during it reads as written since; None: never read."""
        return self.__dict__.get("_trees", {}).get(run, (None,))[0]

    def events(self, run: str, read: dict[str, Any] | None = None) -> Iterator[Event]:
        """The run's events, streamed. With ``read``, once they are read to the end, ``read[run]``
        is what was read of the log: its ``files.stamp`` taken before the read, how many bytes it
        read and their hash (``{"stamp", "size", "sha256"}``, which bytes appended while or after
        it read leave as they were), or None: there was none. Kept by the caller (`mem index`),
        not here: a search reading the log meanwhile (another thread's) changes nothing of it."""
        path = self.events_path(run)
        if not present(path):
            if read is not None:
                read[run] = None
            return
        if read is None:
            yield from iter_events(path, run, self.run_dir(run))
            return
        before, digest, size = stamp(path), hashlib.sha256(), [0]

        def seen(raw: bytes) -> None:
            digest.update(raw)
            size[0] += len(raw)
        yield from iter_events(path, run, self.run_dir(run), seen=seen)
        read[run] = None if before is None else {"stamp": before, "size": size[0],
                                                 "sha256": digest.hexdigest()}

    def logs_rewritten(self, read: Mapping[str, Mapping], runs: Iterable[str], looked: bool) -> list[str]:
        """Those of ``runs`` whose events.jsonl, as ``read`` records an index run read it (run:
        ``events``' ``{"stamp", "size", "sha256"}``), was since changed otherwise than by
        appending (SPEC §4: a log is appended only): its first ``size`` bytes hash otherwise, or it
        is gone. ``looked``: ``logged_after`` has just looked at each (a search asks it first),
        and the stamp it took is used, else each is looked at here; the hash is cached while both
        stamps stay the same. One loop over every run: a search asks of each (~1 µs a run)."""
        logged = self.__dict__.get("_logged", {}) if looked else {}
        cache = self.__dict__.setdefault("_rewritten", {})
        changed = []
        for run in runs:
            if (record := read.get(run)) is None:
                continue
            kept, was = logged.get(run), record["stamp"]
            now = kept[1] if kept is not None else stamp(self.events_path(run))
            if now == was:
                continue
            key = (now, was, record["size"], record["sha256"])
            if (found := cache.get(run)) is None or found[0] != key:
                gone = now is None or sha256_head(self.events_path(run), key[2]) != key[3]
                found = cache[run] = (key, gone)
            if found[1]:
                changed.append(run)
        return changed

    def logged_after(self, run: str, seq: int) -> int:
        """How many events the run's events.jsonl holds after the one numbered ``seq`` (0 for
        none), the lines not parsed; cached while the file is unchanged (``files.stamp``)."""
        cache = self.__dict__.setdefault("_logged", {})
        kept = cache.get(run)  # (its path kept: building one took ~10 µs, and a search asks of every run)
        path = self.events_path(run) if kept is None else kept[0]
        found = stamp(path)
        if kept is None or kept[1:3] != (found, seq):  # (this call's own count, whatever other threads do)
            kept = cache[run] = (path, found, seq, lines_after(path, seq) if found else 0)
        return kept[3]

    def events_after(self, run: str, seq: int, after: int | None = None) -> Iterator[Event]:
        """The run's events after the one numbered ``seq``, those ``logged_after`` counts; a line
        that is not a whole event is passed over, but one whose brief or return is missing or
        leaves the run folder is counted (its ``path`` None: ``mem index`` will refuse it, and the
        word search's count holds it too). ``after``: the time event ``seq`` is dated by
        (``parse.events_after``)."""
        yield from events_after(self.events_path(run), seq, run, None, after)

    def core(self, run: str) -> CoreMemory | None:
        path = self.core_path(run)
        return parse_core(path, run) if present(path) else None

    def library(self) -> list[LibraryEntry]:
        """solve/library.jsonl's entries, strictly read (a bad line raises); none without one.
        Cached while the file is unchanged (``files.stamp``): a warm server's `archive-get` read
        the whole library at each call, and `record` read it three times. The writers read it
        again under their lock."""
        return list(self._library_read()[1])

    def library_index(self) -> dict[str, LibraryEntry]:
        """``library()`` by global id, cached with it: not to be changed (a lookup per step of an
        evaluation built it anew each time, ~37,000 entries at 80,000 steps)."""
        return self._of_library("_library_index", lambda entries: {entry.gid: entry for entry in entries})

    def library_runs(self) -> frozenset[str]:
        """The runs ``library()``'s entries belong to, cached with it."""
        return self._of_library("_library_runs", lambda entries: frozenset(entry.run for entry in entries))

    def _of_library(self, name: str, make):
        """``make(entries)`` of the library, kept under ``name`` while its file is unchanged."""
        found, entries = self._library_read()
        held = self.__dict__.get(name)
        if held is not None and held[0] == found and found is not None:
            return held[1]
        made = make(entries)
        self.__dict__[name] = (found, made)
        return made

    def _library_read(self) -> tuple[object, tuple[LibraryEntry, ...]]:
        """(the library file's stamp, its entries), read again only when the stamp changed."""
        path = self.library_path
        if not present(path):
            return None, ()
        found, cached = stamp(path), self.__dict__.get("_library")
        if found is not None and cached is not None and cached[0] == found:
            return cached
        entries = tuple(iter_library(path))
        if found is not None:
            self.__dict__["_library"] = (found, entries)
        return found, entries

    def library_read_stamp(self) -> tuple[int, int, int, int] | None:
        """The ``files.stamp`` of solve/library.jsonl when it was last read (``library``), taken
        before the read; None: never read, or there was none."""
        return self.__dict__.get("_library", (None,))[0]

    def step(self, ref: str, run: str | None = None) -> Step | LibraryEntry | None:
        """A step by global id, or by bare id in ``run``; library entries for runs not present."""
        ref_run, step_id = split_gid(ref)
        run = ref_run or run
        if run is None:
            return None
        if present(self.tree_path(run)):  # a folder there is bad input, not a run to read from the library
            return self.tree(run).step(step_id)
        for entry in self.library():
            if entry.run == run and entry.id == step_id:
                return entry
        return None


def by_run(library: Iterable[LibraryEntry]) -> dict[str, list[LibraryEntry]]:
    """The library's entries by their run, in file order: what ``first_written`` reads of it for
    one run (a caller asking for every run passes each its own: the whole library for each was
    runs × entries)."""
    runs: dict[str, list[LibraryEntry]] = {}
    for entry in library:
        runs.setdefault(entry.run, []).append(entry)
    return runs


def first_written(events: Iterable[Event], run: str,
                  library: Iterable[LibraryEntry]) -> dict[str, tuple[int, datetime]]:
    """When each step of ``run`` counts as written, as (log position, time): at the first event
    naming it, or at its library copy's insertion time in ``library`` if that is earlier (the
    entry and its step are one record: an event naming the step only later hid an entry from the
    times it was in the library, and so changed past answers), in the log at the first event whose
    instant reaches it (``event_last``: an event written to the second covers that second, in which
    `mem` may have inserted the entry to the millisecond; inserted after the last: past the log's
    end, where no sequence-number cut reaches). What "written by then" means everywhere: the
    index's as-of cut (``named_seq``, ``named_ts``) and the reuse test's ``--until``. A step
    neither names nor dates is in memory as of no cut."""
    events = list(events)
    written = {step: (event.seq, event.timestamp) for step, event in first_naming(events, run).items()}
    reached = None  # the latest instant the log reaches by each event: never decreasing
    end = events[-1].seq + 1 if events else 1
    for entry in library:
        if entry.run != run or not entry.inserted:
            continue
        inserted = iso_time(entry.inserted)
        named = written.get(entry.id)
        if named is None or inserted < named[1]:
            if reached is None:
                reached = list(accumulate(map(event_last, events), max))
            at = bisect.bisect_left(reached, inserted)  # the first event whose instant reaches it
            seq = events[at].seq if at < len(events) else end
            written[entry.id] = (seq if named is None else min(seq, named[0]), inserted)
    return written


def library_as_step(entry: LibraryEntry) -> Step:
    """A library entry whose run is not in the workspace, as a step (no proof, no parents; its
    audit's note is the entry's ``repair``, which archive-insert wrote from it)."""
    audit = Audit(grade=entry.grade, note=entry.repair or "", repaired=entry.repaired) if entry.grade else None
    return Step(run=entry.run, id=entry.id, kind=entry.kind, statement=entry.statement,
                status=entry.status, hyp=entry.hyp, setting=entry.setting, audit=audit,
                missing=entry.missing, failed_input=entry.failed_input, line=entry.line)


__all__ = ["Workspace", "library_as_step", "resolve_workspace"]
