"""The Python API: one workspace's memory, through the design's functions.

    memory = Memory.open("examples/workspace")
    memory.index()
    page = memory.archive_search("GL2m/Sp2m generation", setting="F_q((t))")

``archive_search``, ``recall_search`` and ``archive_get`` read (``retrieval.retriever.Retriever``);
``core_set`` and ``archive_insert`` write (``records.writes``); ``record`` is the design's Record
step (``records.record``, then an index run); ``check`` verifies M1–M4 (``records.invariants``); ``index`` brings the index up to date (``indexers.build``). The command
line is a thin shell over this class."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from mem_retrieval.configs import ENGINES, Config, load_config
from mem_retrieval.functions import BY_NAME, Param
from mem_retrieval.records.errors import BadInput, InputError, MemError, Refused, type_name
from mem_retrieval.records.ids import typed_run
from mem_retrieval.records.types import LibraryEntry
from mem_retrieval.records.validate import said_not_whole
from mem_retrieval.records.workspace import Workspace
from mem_retrieval.retrieval.paging import check_list_id, check_page
from mem_retrieval.retrieval.query import ArchiveQuery, RecallQuery, Until
from mem_retrieval.retrieval.retriever import Retriever, SourceView, StepView
from mem_retrieval.retrieval.strategies import check_strategy
from mem_retrieval.retrieval.types import EventHit, Hit, Page


class Memory:
    """Memory of one workspace: index it, search its steps and events, read and write it."""

    def __init__(self, workspace: Workspace, config: Config):
        self.workspace = workspace
        self.config = config
        self.retriever = Retriever(workspace, config)

    @classmethod
    def open(cls, workspace: str | os.PathLike[str] | Workspace | None = None,
             config: Config | str | os.PathLike[str] | None = None) -> "Memory":
        """The memory of ``workspace`` (default: ``$MEM_WORKSPACE``, else the current folder), with
        configs/default.toml overridden by its solve/mem.toml and by ``config`` (a file)."""
        for name, value in (("workspace", workspace), ("config", config)):  # as --workspace, --config
            own = Workspace if name == "workspace" else Config
            if not isinstance(value, (str, os.PathLike, type(None), own)):
                raise BadInput(f"must be a folder's path, not {type_name(value)}" if name == "workspace"
                               else f"must be a file's path or a Config, not {type_name(value)}", param=name)
            if isinstance(value, (str, os.PathLike)) and not os.fspath(value):
                raise BadInput("is empty (leave it out for the default)", param=name)
        ws = workspace if isinstance(workspace, Workspace) else Workspace.open(workspace)
        if not isinstance(config, Config):
            config = load_config(ws.root, Path(config) if config is not None else None)
        return cls(ws, config)

    # ---- indexing
    def index(self, runs: list[str] | None = None, full: bool = False, progress: bool | None = None,
              on_message: Callable[[str], None] | None = None, engine: str | None = None,
              workers: int | None = None):
        """Bring the index up to date with the files (``indexers.build.IndexReport``); ``engine``
        "ray" embeds the changed texts on a Ray actor pool (``workers`` actors; default: the
        config's ``index.engine`` and ``ray.workers``)."""
        from mem_retrieval.indexers.build import build_index

        _typed("check", runs=runs)  # the same list of run names
        _index_options(full, progress, self.config.index.engine if engine is None else engine, workers)
        self.reopen()
        try:
            return build_index(self.workspace, self.config, runs, full, progress, on_message,
                               engine=engine, workers=workers)
        finally:  # a search meanwhile (another thread's) opened the version before the commit
            self.reopen()

    def reopen(self) -> None:
        """Read the index as it is now from the next search on. A ``Memory`` is a session: its
        searches read the table versions it opened on its first search (one consistent view, even
        while another process reindexes), until its own ``index`` or this."""
        self.retriever.reopen()

    # ---- the read functions
    def archive_search(self, query: str | ArchiveQuery, setting: str | None = None, *, page: int = 1,
                       list_id: str | None = None, **options: Any) -> Page[Hit]:
        """Steps of the runs and the library, a page at a time (SPEC §9). ``options`` are the
        fields of ``ArchiveQuery`` (run, kind, status, until, any_setting, strategy, library, context_run,
        exclude_run, hide, hide_run, library_before). ``list_id``: the one the page before gave (its
        ``Page.list_id``): a note says when the list has changed since."""
        page, list_id = _page("archive_search", page, list_id)
        return self.retriever.archive_search(self._cut(self._archive_query(query, setting, options)), page,
                                             list_id)

    def archive_hits(self, query: str | ArchiveQuery, setting: str | None = None,
                     **options: Any) -> list[Hit]:
        """The whole result list of ``archive_search``, before paging."""
        return self.retriever.archive_hits(self._cut(self._archive_query(query, setting, options)))

    def recall_search(self, query: str | None = None, *, id: str | None = None,
                      run: str | None = None, until: str | Until | None = None,
                      page: int = 1, list_id: str | None = None) -> Page[EventHit]:
        """Events with their briefs and returns: every event naming ``id`` in time order, or the
        events matching ``query``, a page at a time (``list_id`` as ``archive_search`` takes it)."""
        page, list_id = _page("recall_search", page, list_id)
        return self.retriever.recall_search(self._cut(self._recall_query(query, id, run, until)), page,
                                            list_id)

    def recall_hits(self, query: str | None = None, *, id: str | None = None,
                    run: str | None = None, until: str | Until | None = None) -> list[EventHit]:
        """The whole result list of ``recall_search``, before paging."""
        return self.retriever.recall_hits(self._cut(self._recall_query(query, id, run, until)))

    def archive_get(self, ref: str, run: str | None = None) -> StepView | SourceView:
        """One full step (or source), read from the files: no index, no model."""
        _typed("archive_get", id=ref, run=run)
        return self.retriever.archive_get(ref, run)

    # ---- the write functions and the check
    def core_set(self, run: str, field: str, text: str):
        """Rewrite one field of ``run``'s W (``records.writes.CoreSet``); refused past 2,000 tokens."""
        from mem_retrieval.records.writes import core_set

        _typed("core_set", run=run, field=field, text=text)
        return core_set(self.workspace, run, field, text, self.config.model.package)

    def archive_insert(self, ref: str, run: str | None = None) -> LibraryEntry:
        """Append one audited step to the library; refused when M2 fails or it is already there."""
        from mem_retrieval.records.writes import archive_insert

        _typed("archive_insert", id=ref, run=run)
        return archive_insert(self.workspace, ref, run)

    def record(self, run: str, dry_run: bool = False, *, progress: bool | None = False,
               on_message: Callable[[str], None] | None = None):
        """The Record step of ``run`` (``records.record.Record``): check it (refused on M1, M4 or
        integrity violations), admit every M2-admissible step not yet in the library except those
        with an M3 problem, in one all-or-nothing write, then index incrementally. Idempotent, and
        safe to rerun after a crash. ``dry_run``: the plan, nothing written. Refused before it writes
        while a file of any run is bad input (the index step may read every run). Should the index
        step fail after the write, the error (of the index's kind) starts with what was written."""

        from mem_retrieval.indexers import store
        from mem_retrieval.indexers.location import Location, refuse_after_fork
        from mem_retrieval.indexers.rows import read_records
        from mem_retrieval.records.record import admit, plan_record

        _typed("record", run=run, dry_run=dry_run)
        run = typed_run(run)  # a look-alike dash, as archive-insert and the searches read it
        plan = plan_record(self.workspace, run, self.config.model.package)
        try:  # every run, as the index step reads them all when there is no index yet (or when the
            read_records(self.workspace, self.config, self.workspace.check_runs(None))  # library changed
        except InputError as err:  # for them): their bad input refuses it before it writes
            first = err.problem
            raise InputError.many([replace(first, message=f"{first.message} (record {run} refused: nothing "
                                           "was admitted; its index step may read this file)"),
                                   *err.problems[1:]]) from err
        def before_write(check: Callable[[], None]) -> None:  # its index step's refusal, said first
            try:
                check()
            except BadInput as err:
                raise BadInput(f"{err} (record {run} refused: nothing was admitted)") from None

        location = Location.of(self.workspace, self.config)  # a path LanceDB refuses: before the write
        if not dry_run:  # a process forked after its parent opened an index
            before_write(refuse_after_fork)
        if why := store.full_needed(location, self.config):  # and an index `mem index` would not extend
            raise store.IndexMismatch(f"{why} (record {run} refused: nothing was admitted)",
                                      location.meta_name)
        if self.config.index.engine == "ray":  # an engine not installed
            from mem_retrieval.indexers.distributed import require_ray

            before_write(require_ray)
        if dry_run:  # the plan, where the run itself would write it
            return plan
        done = admit(self.workspace, plan)
        try:
            index = self.index([run], progress=progress, on_message=on_message)
        except MemError as err:  # the library is written: say so, and that an index is owed
            failed = BadInput if err.exit_status == BadInput.exit_status else Refused
            wrote = ", written to the library" if done.admitted else ""
            raise failed(f"{done.summary()}{wrote}; indexing it failed: {err}") from err
        return replace(done, index=index)

    def index_refusal(self, reach: bool = True) -> str | None:
        """Why `mem index` would refuse to bring the index up to date, asking for `--full` (built
        with another model, other text limits or another format; a corrupt meta.json), or None
        (none yet, or one it extends). Reads meta.json alone; ``reach`` False: None for an index on
        an object store, which is not asked. Other errors (a path LanceDB refuses, a store out of
        reach) are raised."""
        from mem_retrieval.indexers import store
        from mem_retrieval.indexers.location import Location

        location = Location.of(self.workspace, self.config)
        return None if location.remote and not reach else store.full_needed(location, self.config)

    def check(self, runs: list[str] | None = None):
        """M1–M4 and the record's integrity (``records.invariants.Report``)."""
        from mem_retrieval.records.invariants import check

        _typed("check", runs=runs)
        return check(self.workspace, runs and [typed_run(run) for run in runs], self.config.model.package)

    def _cut(self, query: ArchiveQuery | RecallQuery):
        """``query`` with its ``until`` resolved against the workspace's files, before the search
        opens the index: a bad value is refused without importing lancedb."""
        return replace(query, until=self.retriever.resolve(query.until, query.run))

    @staticmethod
    def _archive_query(query: str | ArchiveQuery, setting: str | None,
                       options: dict[str, Any]) -> ArchiveQuery:
        if isinstance(query, ArchiveQuery):
            if setting is not None or options:
                raise TypeError("give an ArchiveQuery alone, or a query text with options")
            return query
        _typed("archive_search", query=query, setting=setting,
               **{name: value for name, value in options.items() if name in _SEARCH_PARAMS})
        for param in _QUERY_ONLY:
            problem = options.get(param.name) is not None and param.type_problem(options[param.name])
            if problem:
                raise BadInput(problem, param=param.name)
        if options.get("strategy") is not None:  # before the search: a bad value opens no index
            check_strategy(options["strategy"])
        return ArchiveQuery(query, setting, **options)

    @staticmethod
    def _recall_query(query: str | None, id: str | None, run: str | None,
                      until: str | Until | None) -> RecallQuery:
        _typed("recall_search", query=query, id=id, run=run, until=until)
        return RecallQuery(query, id, run, until)


_SEARCH_PARAMS = frozenset(p.name for p in BY_NAME["archive_search"].params)  # the rest: ArchiveQuery's own
_QUERY_ONLY = (Param("exclude_run", "string", "a run left out"),  # no tool has them; checked alike
               Param("hide", "string", "a step's global id: memory before it"),
               Param("hide_run", "string", "a run: memory before it began"))


def _index_options(full: Any, progress: Any, engine: Any, workers: Any) -> None:
    """BadInput for a value of ``Memory.index`` that `mem index` would refuse (``full="no"`` asked
    for a full build; ``engine="foo"`` indexed with the local engine; ``workers=-1``, and
    ``workers`` where no Ray actor embeds, which were taken and dropped in silence)."""
    for name, value, none in (("full", full, False), ("progress", progress, True)):
        if not isinstance(value, bool) and not (none and value is None):
            raise BadInput(f"must be true or false, not {type_name(value)}", param=name)
    if engine is not None and engine not in ENGINES:
        raise BadInput(f"{engine!r} is not one of {', '.join(ENGINES)}", param="engine")
    whole = isinstance(workers, int) and not isinstance(workers, bool)
    if workers is not None and (not whole or workers < 0):
        said = workers if whole else said_not_whole(workers)
        raise BadInput(f"must be a whole number (0: one per CPU), not {said}", param="workers")
    if workers is not None and engine != "ray":
        raise BadInput(f"{workers}: only Ray actors are counted, and this index embeds in this process "
                       "(--engine ray, or index.engine = \"ray\")", param="workers")


def _page(function: str, page: int | None, list_id: str | None) -> tuple[int, str | None]:
    """``page`` and ``list_id`` checked (before the search: a bad value opens no index); a page of
    None (not given, as a tool's null) is page 1."""
    _typed(function, page=page, list_id=list_id)
    return 1 if page is None else check_page(page), check_list_id(list_id)


def _typed(function: str, **values: Any) -> None:
    """BadInput when a value is not of the type the function's parameter has (``functions``: the
    same check, and message, as a tool call's); an ``Until`` stands for its ``until`` string."""
    BY_NAME[function].check_types({name: value for name, value in values.items()
                                   if not isinstance(value, Until)})
