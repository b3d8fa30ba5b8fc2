"""`mem [--workspace DIR] [--json] [--config FILE] COMMAND …` (SPEC §9).

Exit status: 0 done; 1 refused, not found, or a check failed; 2 bad usage or bad input. Errors are one
line on stderr (with --json, ``{"error": …}`` on stdout); never a traceback for bad input. Heavy
modules (lancedb, torch) are imported by the commands that need them, never here."""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import re
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from mem_retrieval.cli.forward import forward, read_command, stdout_gone, unwritten
from mem_retrieval.cli.outputs import named
from mem_retrieval.records.errors import BadInput, MemError, one_line, plural, resource_refusal, terminal_safe


EXIT_OK = 0  # the others are each error's own (records.errors: MemError.exit_status)
_SURROGATE = re.compile("[\ud800-\udfff]")  # what Python makes of argument bytes that are not UTF-8


class Terminated(KeyboardInterrupt):
    """SIGTERM (an agent's timeout, `kill`), raised where Ctrl-C raises KeyboardInterrupt: what an
    interrupted command cleans up (a tuning scratch folder, staged output files) is cleaned up, and
    it says so in one line (exit 143). A second SIGTERM kills at once, as the default does."""


GRACE = 10.0  # seconds a SIGTERM waits for the main thread to stop the command, stuck in native code


def _terminate(signum: int, frame: Any) -> None:
    _HANDLED.set()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise Terminated


_HANDLED = threading.Event()  # a SIGTERM reached the command (its handler ran in the main thread)


def _watch_terminations() -> None:
    """A Python handler runs only when the main thread runs Python: one blocked for good in native
    code ignored every SIGTERM, where the default disposition had killed it. The signal also
    wakes a thread (``signal.set_wakeup_fd``): while the handler has not run, it ends the process
    ``GRACE`` seconds after the first SIGTERM, or at once at the second. It needs the interpreter's
    lock, so a call blocked while holding it (LanceDB's, under `ulimit -v`) is not ended: the read
    commands, where such hangs were seen and nothing is to clean up, keep the default (``main``)."""
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)

    def leave() -> None:
        if not _HANDLED.is_set() and signal.getsignal(signal.SIGTERM) is _terminate:
            os.write(2, b"mem: terminated (SIGTERM)\n")
            os._exit(143)

    def watch() -> None:
        seen = 0
        while data := os.read(read, 64):
            for number in data:
                if number != signal.SIGTERM or signal.getsignal(signal.SIGTERM) is not _terminate:
                    continue  # Ctrl-C, or a SIGTERM `mem serve` or `mem mcp` handles its own way
                seen += 1
                if seen > 1:
                    leave()
                timer = threading.Timer(GRACE, leave)
                timer.daemon = True  # a command that stops in time is not kept waiting for it
                timer.start()

    threading.Thread(target=watch, name="mem-sigterm", daemon=True).start()


def _resend_swallowed(unraisable: Any) -> None:
    """``sys.unraisablehook``: a stop raised where Python can only ignore it (a finalizer, a weak
    reference's callback, as a collection runs) is sent again, to be raised where it stops the
    command: an agent's SIGTERM was lost so, the command running on to exit 0."""
    if not isinstance(unraisable.exc_value, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)
        return
    if isinstance(unraisable.exc_value, Terminated):
        signal.signal(signal.SIGTERM, _terminate)
        again = functools.partial(os.kill, os.getpid(), signal.SIGTERM)
    else:
        import _thread

        again = _thread.interrupt_main
    try:  # from another thread, a moment on: sent from here, it was handled here, and ignored again
        timer = threading.Timer(0.02, again)
        timer.daemon = True
        timer.start()
    except RuntimeError:  # the interpreter is shutting down: the command has ended
        pass


def _catch_stop_signals() -> None:
    """SIGTERM as ``Terminated``, and a stop Python would swallow sent again (in the main thread,
    where a handler can be set: `mem serve`, `mem mcp` and Ray set their own after). The handler
    comes last, once what it relies on is set up (a SIGTERM as the watching thread started raised
    ``Terminated`` out of ``threading``), and is called in ``main``'s try."""
    if threading.current_thread() is threading.main_thread():
        sys.unraisablehook = _resend_swallowed
        _watch_terminations()
        signal.signal(signal.SIGTERM, _terminate)


def _stopped(error: KeyboardInterrupt) -> tuple[str, int]:
    """What an interrupted command says, and its exit status (128 + the signal's number). The
    coroutines an interrupted LanceDB call leaves are let go without a warning each: the stop is
    said in one line."""
    import warnings

    warnings.filterwarnings("ignore", message="coroutine .* was never awaited", category=RuntimeWarning)
    return ("terminated (SIGTERM)", 143) if isinstance(error, Terminated) else ("interrupted", 130)


def _closed_input() -> None:
    """A process started with standard input closed (`<&-`): the null device takes descriptor 0,
    so no file opened later (`mem mcp`'s signal pipe read itself as its requests) gets it;
    ``sys.stdin`` stays None, so `-` for standard input is refused as closed."""
    try:
        os.fstat(0)
    except OSError:
        fd = os.open(os.devnull, os.O_RDONLY)
        if fd != 0:
            os.dup2(fd, 0)
            os.close(fd)


class InProcessOnly(Exception):
    """A request a warm server must not answer: the caller runs it in-process (``reason``)."""


def _own_environment() -> dict[str, str]:
    from mem_retrieval.cli.forward import environment

    return environment()


@dataclass(frozen=True)
class Caller:
    """The process a command runs for when it is not this one (a request to `mem serve`): its
    current folder and ``$MEM_WORKSPACE``, and the warm server's cache of Memory objects
    (cli.warm.WarmMemories). Nothing process-wide (the current folder, the environment) changes,
    so requests can run at once in threads."""

    cwd: Path
    workspace_env: str | None
    memories: Any = None
    environment: dict[str, str] = field(default_factory=_own_environment)  # its cli.forward.environment()


@dataclass
class Context:
    """What every command gets: the chosen workspace, output mode and where to write."""

    workspace_arg: str | None
    json: bool
    config_path: Path | None
    out: Any = None  # None: sys.stdout as it is when the context is made (`main` replaces a closed one)
    err: Any = None
    caller: Caller | None = None

    def __post_init__(self) -> None:
        self.out = self.out or sys.stdout
        self.err = self.err or sys.stderr

    def workspace(self):
        from mem_retrieval.records.workspace import Workspace

        if self.caller is None:
            return Workspace.open(self.workspace_arg)
        env = {} if self.caller.workspace_env is None else {"MEM_WORKSPACE": self.caller.workspace_env}
        return Workspace.open(self.workspace_arg, base=self.caller.cwd, environ=env)

    def config(self, workspace=None):
        from mem_retrieval.configs import load_config

        return load_config(workspace.root if workspace else None, self.config_path)

    def memory(self):
        """The workspace's Memory, with its configuration (a warm server's cached one, for the
        index version meta.json pins now)."""
        from mem_retrieval.memory import Memory

        workspace = self.workspace()
        if self.caller is not None and self.caller.memories is not None:
            from mem_retrieval.cli.forward import environment_differs

            memory = self.caller.memories.get(workspace, self.config_path)
            try:
                remote = memory.retriever.location.remote
            except MemError:  # a bad index.uri, said as in-process says it: every variable compared
                remote = True
            differ = environment_differs(self.caller.environment, remote)
            if differ:  # the server reads its own (an s3:// endpoint and keys, the model cache)
                raise InProcessOnly(f"the caller's {', '.join(differ)} differ from the server's")
            return memory
        return Memory(workspace, self.config(workspace))

    def warn_if_no_runs(self, workspace) -> None:
        """Say so when the folder holds no run (often the wrong --workspace)."""
        from mem_retrieval.cli.calls import no_runs_note

        note = no_runs_note(workspace)
        if note:
            self.note(f"mem: {note}")

    def warn_if_unknown_steps(self, memory, steps: list[str], source: str) -> None:
        """Say so when queries of ``source`` name a ``step`` the index does not hold (a misspelt
        id, or the wrong workspace): leave-one-out then hides that id alone, not the step meant."""
        unknown = memory.retriever.unknown_steps(list(dict.fromkeys(steps)))  # each named once
        if unknown:
            self.note(f"mem: warning: {source} names {plural(len(unknown), 'step')} the index does not "
                      f"hold ({_first_three(unknown)}): leave-one-out hides nothing else for those "
                      "queries, so a misspelt id leaves the step it meant visible")

    def warn_if_tuned_on(self, memory, steps: list[str]) -> None:
        """Say so when the model was tuned (`mem tune`) on the links of one of the queries' ``steps``,
        or of work written after it: the model has seen its gold (`mem tune --holdout-queries`
        keeps them out), and every figure asked of it (`eval paging`, `eval fusion`, `eval reuse
        --per-step`) is optimistic."""
        from mem_retrieval.indexers.store import read_meta
        from mem_retrieval.tune import trained_on_answers, trained_steps

        location = memory.retriever.location
        trained = trained_steps(location, read_meta(location))
        seen = trained_on_answers(memory.retriever, trained, steps) if trained else []
        if seen:
            self.note(f"mem: warning: the model was tuned on the links of {len(seen)} of these queries' "
                      "steps or of work written after them: their figures are optimistic "
                      "(mem tune --holdout-queries, or mem tune --eval)")

    def warn_if_unknown_judged(self, memory, qrels, queries, source: str) -> None:
        """Say so when ``source`` judges relevant, for one of ``queries``, an id the index does not
        hold (a bare step id, a misspelt run, the wrong workspace), or one its query leaves out
        (a step of its own ``run``, or its ``step``): no search can find it, so it costs recall
        silently."""
        from mem_retrieval.eval.ranker import left_out_by_their_query

        judged = [doc for query in queries for doc, grade in qrels.get(query.qid, {}).items() if grade > 0]
        unknown = memory.retriever.unknown_steps(list(dict.fromkeys(judged)))
        if unknown:
            self.note(f"mem: warning: {source} judges relevant {plural(len(unknown), 'id')} the index "
                      f"does not hold ({_first_three(unknown)}): no search finds them, and they count "
                      "as missed (judgments name steps by global id, run/step)")
        missing = set(unknown)  # said above: no step, whichever query judges it
        own = [left for left in left_out_by_their_query(memory.retriever, queries, qrels)
               if left.split(": ", 1)[1] not in missing]
        if own:
            self.note(f"mem: warning: {source} judges relevant {plural(len(own), 'step')} their query "
                      f"leaves out ({_first_three(own)}): a query's `run` leaves that run's steps out of "
                      "the search, and its `step` hides itself, what cites it and its run-mates written "
                      "after it (leave-one-out), so no search finds them, and they count as missed")

    def warn_if_outside_library(self, outside: list[str], source: str) -> None:
        """Say so when ``source`` judges relevant ids that no library entry has (`eval frontier`:
        its events are the library's entries), which answer no memory: its figures leave them out."""
        if outside:
            self.note(f"mem: warning: {source} judges relevant {plural(len(outside), 'id')} no library "
                      f"entry has ({_first_three(outside)}): no memory answers with them (judgments "
                      "name library steps by global id, run/step)")

    def warn_if_unknown_settings(self, memory, settings: list[str], source: str) -> None:
        """Say so when queries of ``source`` give a ``setting`` with a clause the settings ontology
        does not know (as `archive-search --setting` notes it): a step matches it only by the same
        text, so a misspelt setting leaves out hits whose setting implies the one meant (M3)."""
        unknown = list(dict.fromkeys(c for s in settings for c in memory.retriever.unknown_clauses(s)))
        if unknown:
            self.note(f"mem: warning: {source} gives {plural(len(unknown), 'setting clause')} the "
                      f"settings ontology does not know ({_first_three(unknown)}): a step matches "
                      "those only by the same text")

    def warn_if_unknown_runs(self, memory, runs: list[str], source: str) -> None:
        """Say so when queries of ``source`` name a ``run`` the workspace does not hold: a query
        leaves out its own run's steps (a run cannot reuse itself), so a misspelt run leaves
        them in."""
        unknown = [run for run in dict.fromkeys(runs) if memory.retriever.unknown_run("run", run)]
        if unknown:
            self.note(f"mem: warning: {source} names {plural(len(unknown), 'run')} the workspace does "
                      f"not hold ({_first_three(unknown)}): those queries leave out no run's own steps, "
                      "and are ranked as asked from no run")

    def emit(self, data: dict, text: str | None) -> None:
        """Data to stdout: JSON with --json, else the text form; one that cannot be written (a full
        disk) is BadInput, as a file a flag names (``cli.outputs``), not a traceback."""
        try:
            if self.json:
                self.out.write(json.dumps(data, ensure_ascii=False) + "\n")
            elif text is not None:  # the records' text, escaped where a terminal would obey it
                text = terminal_safe(text)
                self.out.write(text if text.endswith("\n") else text + "\n")
        except BrokenPipeError:  # a reader that closed: not an error (``run``)
            raise
        except OSError as error:
            raise BadInput(unwritten(error)) from None

    def note(self, message: str) -> None:
        """A message for the person (stderr), never mixed with data; a stderr that cannot take it
        (a full disk, a reader that closed) loses the note, not the answer (it ended the command,
        exit 1, before its answer was written)."""
        try:
            self.err.write(message + "\n")
        except OSError:
            pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse's default prints usage)
        raise BadInput(f"{message} (see `{self.prog} --help`)")

    def _print_message(self, message, file=None) -> None:
        """As argparse's, which drops a message its stream refuses: `mem --help > /dev/full`,
        unbuffered, exited 0 with nothing written. A help standard output cannot take is the one
        line an answer gets (exit 2); a reader that closed is none of its business, as before."""
        if not message:
            return
        file = file or sys.stderr
        try:
            file.write(message)
        except BrokenPipeError:
            pass
        except OSError as error:
            if file is not sys.stderr:
                raise BadInput(unwritten(error)) from None

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but an argument no parser knows sends to the help of the command it
        followed (`mem archive-search x --bogus` sent to `mem --help`, which lists no option of it)."""
        words = sys.argv[1:] if args is None else list(args)
        try:
            parsed, extras = self.parse_known_args(args, namespace)
        except BadInput as error:  # an id or a query starting with '-' (`-x1`, `-adic`) read as a flag
            raise BadInput(error.message + _dash_hint(words, error.message)) from None
        if extras:
            words = [getattr(parsed, name, None) for name in ("command", "eval_command", "skill_command")]
            where = " ".join([self.prog, *filter(None, words)])
            message = f"unrecognized arguments: {' '.join(extras)} (see `{where} --help`)"
            missing = any(getattr(parsed, name, "") is None for name in POSITIONAL)  # its argument not given
            raise BadInput(message + (_dash_hint(extras, "required: ID") if missing else ""))
        return parsed


_NEEDS_A_VALUE = re.compile(r"argument (--[\w-]+)(?:/(-\w))?: expected one argument")


def _dash_hint(words: list[str], message: str) -> str:
    """What to add to a usage error argparse made of a value starting with '-' (a step id `-x1`,
    a query word `-adic`: argparse takes any such word for an option): an option's value is given
    as `--option=-x1`; a command's own argument goes after `--`. Nothing for any other error."""
    if (needs := _NEEDS_A_VALUE.match(message)) is not None:
        flag = needs[1]
        given = [words[i + 1] for i, word in enumerate(words[:-1]) if word in (flag, needs[2])]
        value = next((w for w in given if w.startswith("-") and w != "--"), None)
        return "" if value is None else f"; a value starting with '-' is given as `{flag}={value}`"
    if "required" not in message or not any(name in message for name in POSITIONAL.values()):
        return ""  # (a missing command is no value)
    value = next((w for w in words if w.startswith("-") and w != "--" and not w.startswith("--")
                  and w[1:2] not in ("w", "h", "")), None)
    return "" if value is None else f"; a value starting with '-' goes after `--`: `… -- {value}`"


def _global_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument("--workspace", "-w", metavar="DIR", default=default, type=named,
                        help="workspace folder (default: $MEM_WORKSPACE, else the current folder)")
    parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS if suppress else False,
                        help="machine-readable output on stdout")
    parser.add_argument("--config", metavar="FILE", default=default, type=named,
                        help="a TOML file overriding configs/default.toml")


@functools.lru_cache(maxsize=1)
def _parser() -> argparse.ArgumentParser:
    """``build_parser``'s parser, built once a process: `mem serve` and the Python callers of ``run``
    built it at every call (~10 ms). Parsing changes nothing in it, so calls share it, threads too."""
    return build_parser()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mem", description="Memory retrieval for research agents (ids, BM25, "
                     "embedding rerank over LanceDB).")
    _global_options(parser, suppress=False)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    subparsers.required = True
    common = _Parser(add_help=False)
    _global_options(common, suppress=True)
    for module in command_modules(""):
        module.register(subparsers, common)
    return parser


def command_modules(prefix: str) -> list[Any]:
    """The modules of cli/commands named ``prefix…`` (``eval_…`` are the ``mem eval`` family), in
    their ``ORDER``. Each must import only light modules at import time."""
    import pkgutil

    import mem_retrieval.cli.commands as package

    names = [info.name for info in pkgutil.iter_modules(package.__path__)
             if info.name.startswith(prefix) and (prefix or not info.name.startswith("eval_"))]
    modules = [importlib.import_module(f"mem_retrieval.cli.commands.{name}") for name in names]
    return sorted(modules, key=lambda module: (getattr(module, "ORDER", 50), module.__name__))


def run(argv: list[str] | None = None, out: Any = None, err: Any = None,
        caller: Caller | None = None) -> int:
    """Run one `mem` command; its exit status. ``caller``: run it for another process (`mem
    serve`), whose folder and ``$MEM_WORKSPACE`` count instead of this process's."""
    out = out or sys.stdout
    err = err or sys.stderr
    json_mode = "--json" in (argv if argv is not None else sys.argv[1:])
    ctx = Context(None, json_mode, None, out, err, caller)
    args = None
    try:
        for arg in sys.argv[1:] if argv is None else argv:
            if as_text(arg) is None:
                raise BadInput(f"argument {_shown(arg)} is not valid UTF-8")
        args = _parser().parse_args(argv)
        if caller is not None and args.config and not Path(args.config).is_absolute():
            # its messages name the file as given, relative to the caller's folder: run it there
            raise InProcessOnly("a relative --config runs in-process")
        if caller is not None and args.config and not os.path.isfile(args.config):
            # /dev/stdin, <(…) (/dev/fd/N): the caller's own pipe, which the server cannot read
            raise InProcessOnly("a --config that is no file (a pipe, /dev/stdin) runs in-process")
        ctx = Context(args.workspace, args.json, Path(args.config) if args.config else None, out, err,
                      caller)
        return int(args.handler(args, ctx) or 0)
    except MemError as error:
        more = [str(p) for p in getattr(error, "problems", ())[1:]]
        return _fail(ctx, cli_message(error, getattr(args, "function", None)), error.exit_status, more)
    except KeyboardInterrupt as stopped:
        return _fail(ctx, *_stopped(stopped))
    except BrokenPipeError:
        return EXIT_OK
    except FileNotFoundError:  # a relative path made absolute (os.path.abspath) with no folder to do it from
        from mem_retrieval.records.workspace import CURRENT_FOLDER_GONE, current_folder_exists

        if caller is not None or current_folder_exists():
            raise
        return _fail(ctx, CURRENT_FOLDER_GONE, 2)
    except BaseException as error:  # lance reports a Rust panic as a BaseException
        if isinstance(error, (SystemExit, GeneratorExit)) or not (why := resource_refusal(error)):
            raise
        return _fail(ctx, f"{why}: the machine refused this command ({type(error).__name__}; a limit "
                     "such as `ulimit -v`?): it stopped, and what it writes is written whole or not "
                     "at all", 2)


def _first_three(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", …" if len(names) > 3 else "")


POSITIONAL = {"query": "QUERY", "id": "ID", "text": "TEXT", "field": "FIELD", "run_name": "RUN",
              "file": "FILE"}


def flag(param: str, function=None) -> str:
    """An API parameter as the command line spells it: ``any_setting`` -> ``--any-setting``; for
    a memory function's command (``function``, mem_retrieval.functions), as that command has it
    (``record``'s ``run`` is its argument RUN)."""
    if function is not None and any(p.name == param for p in function.params):
        return function.param(param).flag
    return POSITIONAL.get(param) or "--" + param.replace("_", "-")


def cli_message(error: MemError, function=None) -> str:
    """The error's one line, its parameter named as the command line spells it (``--kind``)."""
    return str(error) if error.param is None else f"{flag(error.param, function)} {error.message}"


def as_text(arg: str) -> str | None:
    """An argument as the text its bytes spell in UTF-8 (None: they spell none). The system gives
    them decoded by the file system's encoding, bytes it cannot read as lone surrogates: UTF-8 on
    most systems, but ASCII without UTF-8 mode in the C locale (every non-ASCII byte a surrogate,
    and `é` was refused as not UTF-8) or Latin-1 in such a locale (`é` read as `Ã©`). An argument
    made in-process (not from the system's bytes) is text already. Paths are opened as given: the
    system reads them back to its own bytes."""
    try:
        raw = os.fsencode(arg)
    except UnicodeEncodeError:  # a character the file system's encoding has no byte for
        return None if _SURROGATE.search(arg) else arg
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _shown(arg: str) -> str:
    """An argument holding bytes that are not UTF-8, as those bytes."""
    try:
        return ascii(os.fsencode(arg))[1:]
    except UnicodeEncodeError:
        return ascii(arg)


def _fail(ctx: Context, message: str, status: int, more: list[str] | None = None) -> int:
    """The error as one line (stderr; with --json, ``{"error": …}`` on stdout); ``more``: further
    problems of the same input, one line each after it (``"problems"`` in JSON)."""
    lines = [one_line(line) for line in [message, *(more or [])]]
    if ctx.json:
        data = {"error": lines[0]} | ({"problems": lines} if more else {})
        try:
            ctx.out.write(json.dumps(data, ensure_ascii=False) + "\n")
            ctx.out.flush()  # (a full disk fails here when the stream is buffered)
            return status
        except BrokenPipeError:
            stdout_gone(ctx.out)
            return status
        except OSError:  # standard output cannot be written (a full disk): said on stderr
            stdout_gone(ctx.out)
    try:
        ctx.err.write("".join(f"mem: {line}\n" for line in lines))
    except OSError:  # stderr cannot take it either: the status says it
        pass
    return status


def _flushed(code: int) -> int:
    """``code`` once standard output is flushed: an answer it could not take (the last of it held
    in its buffer) is said on stderr, exit 2, as when a write fails (``Context.emit``); a reader
    that closed is no error. Either way what is left goes to the null device (``stdout_gone``)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_gone()
    except ValueError:  # closed
        pass
    except OSError as error:
        stdout_gone()
        try:
            sys.stderr.write(f"mem: {unwritten(error)}\n")
        except OSError:
            pass
        return 2
    return code


M_ARENA_MAX = -8  # glibc's mallopt parameters
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 64 * 1024  # a read command's blocks of 64 KiB and more are mapped, and unmapped when freed


def _fewer_malloc_arenas(arenas: int = 2) -> None:
    """As ``MALLOC_ARENA_MAX=2`` (unless the user set it): glibc gives threads that allocate
    arenas of their own, up to 8 per core, and LanceDB's runtime alone runs about 50 threads; a cold
    search's peak memory at 100,000 steps measured 13 MB lower with two. Not glibc: nothing."""
    _mallopt(M_ARENA_MAX, arenas, "MALLOC_ARENA_MAX")


def _mallopt(parameter: int, value: int, variable: str) -> None:
    """glibc's ``mallopt(parameter, value)``, unless the user set its environment ``variable``."""
    if not sys.platform.startswith("linux") or variable in os.environ:
        return
    import ctypes

    try:
        ctypes.CDLL(None).mallopt(parameter, value)
    except (OSError, AttributeError):  # a libc without mallopt (musl)
        pass


class _WithoutPandas:
    """An import finder refusing pandas (as if it were not installed) while a one-shot read command
    runs: pyarrow's dataset module, which lancedb imports, asks for pandas at import (with pandas
    3, ~53 MB and ~0.2 s here: a sixth of a cold search's memory), and pyarrow then takes it as
    missing for the rest of the process. Nothing a read command runs converts to or from pandas
    (lancedb treats it as optional); a library user, the server and every other command keep it."""

    def find_spec(self, name: str, path=None, target=None):
        """A spec whose import fails (not an error here: ``importlib.util.find_spec('pandas')``,
        which torch's dynamo calls at import, must answer; a spec with no origin tells it nothing
        is there to skip)."""
        if name == "pandas" or name.startswith("pandas."):
            import importlib.machinery

            return importlib.machinery.ModuleSpec(name, _NoPandas())
        return None


class _NoPandas:
    """The loader of ``_WithoutPandas``'s specs: importing pandas fails as if it were missing."""

    def create_module(self, spec):
        raise ModuleNotFoundError(f"no module named {spec.name!r} (not needed by a read command)", name=spec.name)

    def exec_module(self, module) -> None:  # never reached: create_module raised
        raise ModuleNotFoundError(module.__name__)


def _run_one_shot(argv: list[str] | None, words: list[str]) -> int:
    """``run(argv)``; a read command (cli/forward.py) runs without pandas (``_WithoutPandas``) and
    with a fixed 64 KiB malloc mmap threshold (``_mallopt``): a cold search at 100,000 steps peaks
    at ~297 MB instead of ~341 (5 runs each, same queries; 35 MB of it pandas)."""
    if read_command(words) is None:
        return run(argv)
    _mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_")
    if "pandas" in sys.modules:
        return run(argv)
    finder = _WithoutPandas()
    sys.meta_path.insert(0, finder)
    try:
        return run(argv)
    finally:
        sys.meta_path.remove(finder)


def _as_json_escapes(error: UnicodeEncodeError) -> tuple[str, int]:
    """The characters a stream cannot encode as ``\\uXXXX`` (a surrogate pair past U+FFFF): valid
    escapes inside the JSON strings that hold them, and readable in text."""
    out = []
    for char in error.object[error.start:error.end]:
        code = ord(char)
        if code > 0xFFFF:
            code -= 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            out.append(f"\\u{code:04x}")
    return "".join(out), error.end


def _escape_what_cannot_be_encoded() -> None:
    """Standard output and error in an encoding that lacks some characters (``PYTHONIOENCODING=
    ascii``, a C locale) escape those characters instead of failing with a traceback mid-write."""
    import codecs

    codecs.register_error("mem-json-escape", _as_json_escapes)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="mem-json-escape")
        except (AttributeError, ValueError):  # not a text file, or already closed
            pass


def main(argv: list[str] | None = None) -> int:
    """The `mem` command: a read command goes to the workspace's warm `mem serve` when one answers
    (cli/forward.py, checked before any parser is built), else runs here and then starts one in the
    background for the next call (cli/autostart.py)."""
    words = sys.argv[1:] if argv is None else argv
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:  # started with the descriptor closed (`>&-`): what it would
            # say goes nowhere, not into a traceback (it took a successful search's exit status)
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))
    _escape_what_cannot_be_encoded()
    _closed_input()
    try:  # a stop anywhere from here (the command's own try is not entered yet, or is left) is one line
        if argv is None and read_command(words) is None:  # a read command writes nothing to clean up:
            _catch_stop_signals()  # SIGTERM ends it at once, even blocked in native code holding the GIL
        return _main(argv, words)
    except KeyboardInterrupt as stopped:
        return _fail(Context(None, "--json" in words, None), *_stopped(stopped))


def _main(argv: list[str] | None, words: list[str]) -> int:
    """``main`` once the process is set up: forwarded to a warm server, else run here."""
    code = forward(words)
    if code is not None:
        return code
    _fewer_malloc_arenas()
    try:
        code = _run_one_shot(argv, words)
    except SystemExit as done:  # --help, --version: printed, then flushed as any answer
        if not isinstance(done.code, (int, type(None))):
            raise
        code = done.code or 0
    code = _flushed(code)
    try:  # no server answered: start one for the next call (cli/autostart.py), in silence
        from mem_retrieval.cli.autostart import start_if_wanted

        start_if_wanted(words)
    except Exception:  # noqa: BLE001 (its import refused memory: the answer stands, said once)
        pass
    if argv is None and read_command(words) is not None:
        _leave(code)
    return code


def _leave(code: int) -> NoReturn:
    """End the process of a read command run from the command line at once, its output flushed:
    the interpreter's teardown (lancedb's modules and threads) took 0.14–0.2 s (0.6 s on busy
    cores) after the answer was printed, on every cold search, and the agent waits for the exit.
    A read command has nothing left to write; a call in-process (``main(argv)``) returns."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None: the process was started with that descriptor closed
                stream.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass
    os._exit(code)
