"""`mem serve [--idle-timeout SECONDS] [--lazy] [--status | --stop] [--started]`: a warm process
answering the read commands of its workspace over ``WORKSPACE/.mem/serve.sock`` (cli/server.py; the
client side is cli/forward.py)."""

from __future__ import annotations

ORDER = 80


def register(subparsers, common) -> None:
    parser = subparsers.add_parser(
        "serve", parents=[common], help="keep the index and model loaded; `mem` forwards searches here",
        description="Keep lancedb and the embedding model loaded and answer archive-search, "
                    "archive-get and recall-search sent by `mem` over WORKSPACE/.mem/serve.sock, "
                    "with output identical to running them in-process. Stops on SIGTERM/SIGINT "
                    "(removing the socket) or after --idle-timeout.")
    parser.add_argument("--idle-timeout", type=_seconds, metavar="SECONDS",
                        help="stop after this long without a request (default: never)")
    parser.add_argument("--lazy", action="store_true",
                        help="load the embedding model on the first search instead of at start")
    control = parser.add_mutually_exclusive_group()
    control.add_argument("--status", action="store_true",
                         help="say whether a server answers for the workspace (pid, requests); exit 1 if none")
    control.add_argument("--stop", action="store_true",
                         help="stop the workspace's server (SIGTERM) and wait for it to go")
    parser.add_argument("--started", action="store_true",
                        help="started by a read command that found no server (serve.auto): clears "
                             ".mem/serve.starting once up")
    parser.set_defaults(handler=serve)


def _seconds(text: str) -> float:
    import argparse

    from mem_retrieval.cli.outputs import number

    value = number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"not a positive number of seconds: {text!r}")
    return value


def serve(args, ctx) -> int:
    import os

    from mem_retrieval.cli.autostart import started
    from mem_retrieval.cli.server import Server, Stop, socket_path

    from mem_retrieval.records.errors import BadInput

    workspace = ctx.workspace()
    if args.status or args.stop:
        return _control(ctx, socket_path(workspace.root), args.stop)
    if ctx.config_path is not None:  # it was dropped, unsaid: the server never read it
        raise BadInput("mem serve answers each call with the configuration that call names (its "
                       "--config, and the workspace's solve/mem.toml): give --config to the calls")
    ctx.config(workspace)  # a bad solve/mem.toml: refused now, in one line, rather than per call
    claimed = args.started  # .mem/serve.starting, ours to remove once up or given up

    def ready() -> None:
        nonlocal claimed
        if claimed:
            started(workspace.root)
            claimed = False
        ctx.emit({"socket": str(server.path), "pid": os.getpid()},
                 f"mem serve: ready on {server.path} (pid {os.getpid()})")
        ctx.out.flush()

    server = None
    try:
        _retire_other_code(socket_path(workspace.root))  # (may wait 5 s on a server that is stuck)
        server = Server.bind(workspace.root, args.idle_timeout)
        os.chdir(workspace.root)
        reason = server.serve(model=not args.lazy, on_ready=ready)
    except BaseException as error:  # another server answers, or none can; or a SIGTERM before serving
        if server is not None:  # (Terminated: it left the socket; serving, the server removes it)
            server.close()
        if isinstance(error, Stop):  # a second signal as the first's stop ran: as any command's
            from mem_retrieval.cli.main import Terminated

            raise (Terminated() if str(error) == "SIGTERM" else KeyboardInterrupt()) from None
        raise
    finally:
        if claimed:  # let the next call try; not once ready: by now the claim may be another start's
            started(workspace.root)  # (left, a start waited 60 s on it)
    from mem_retrieval.records.errors import plural

    ctx.note(f"mem serve: stopped ({reason}) after {plural(server.requests, 'request')}")
    return 0


def _control(ctx, path, stop: bool) -> int:
    """``--status`` and ``--stop``: ping the socket; stop the server it names. A server that takes
    the ping and sends nothing back (stopped by a signal, or stuck) is named by the pid the system
    gives for the socket's listener (``forward.ask``); ``--stop`` stops it all the same."""
    import os
    import signal
    import time

    from mem_retrieval.cli.forward import ask
    from mem_retrieval.records.errors import Refused, plural

    answer, silent = ask(str(path), {"ping": True}, timeout=5.0) if path.exists() else (None, None)
    if silent is not None:
        if not stop:
            raise Refused(f"the server on {path} (pid {silent}) does not answer: `mem serve --stop` "
                          "stops it")
        _stop_silent(path, silent)
        ctx.emit({"stopped": silent}, f"mem serve: stopped pid {silent}, which did not answer")
        return 0
    if not answer or not isinstance(answer.get("pid"), int):
        from mem_retrieval.cli.forward import foreign

        raise Refused(foreign(str(path)) or f"no server answers on {path}")
    if not stop:
        from mem_retrieval.cli.forward import code_version

        other = answer.get("build") != code_version()  # left by an upgrade: never forwarded to
        ctx.emit(answer | {"other_code": other},
                 f"mem serve: pid {answer['pid']} on {path}; {plural(answer['requests'], 'request')} "
                 f"answered, at most {answer.get('peak', 0)} at once" + (
                     "; it runs other code than this mem (left by an upgrade?): the next read command "
                     "stops it, `mem serve --stop` now" if other else ""))
        return 0
    os.kill(answer["pid"], signal.SIGTERM)
    deadline = time.monotonic() + 15
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    if path.exists():
        raise Refused(f"the server (pid {answer['pid']}) did not stop within 15 s")
    ctx.emit({"stopped": answer["pid"]}, f"mem serve: stopped pid {answer['pid']}")
    return 0


def _retire_other_code(path) -> None:
    """Stop a server of other code on ``path`` (left by an upgrade, which a read command would
    stop too, `cli.forward.retire`) and wait, at most 15 s, for its socket to go: `mem serve` then
    takes the socket, where it said "a server already answers"."""
    import time

    from mem_retrieval.cli.forward import code_version, retire

    if not path.exists():
        return
    retire(str(path), code_version())
    deadline = time.monotonic() + 15
    while path.exists() and time.monotonic() < deadline and _other_code_answers(path):
        time.sleep(0.1)


def _other_code_answers(path) -> bool:
    from mem_retrieval.cli.forward import code_version, exchange

    answer = exchange(str(path), {"ping": True}, timeout=5.0)
    return answer is not None and answer.get("build") != code_version()


def _stop_silent(path, pid: int) -> None:
    """Stop the server ``pid`` that holds the socket ``path`` and answers nothing: SIGTERM (with
    SIGCONT, for one stopped by a signal), then SIGKILL if the socket is still there after 15 s
    (as long as ``--stop`` waits for one that answers: a server too busy to answer a ping in 5 s
    stops by its SIGTERM), and its socket file removed once nothing listens on it."""
    import os
    import signal
    import time

    from mem_retrieval.cli.forward import answers
    from mem_retrieval.records.errors import Refused

    def wait(done, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while not done() and time.monotonic() < deadline:
            time.sleep(0.1)
        return done()

    try:
        inode = path.stat().st_ino
        for sent in (signal.SIGTERM, signal.SIGCONT):
            os.kill(pid, sent)
        if wait(lambda: not path.exists(), 15):
            return
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    except FileNotFoundError:  # it removed its socket meanwhile
        return
    except PermissionError as error:
        raise Refused(f"the server (pid {pid}) does not answer and cannot be stopped: {error}") from None
    if not wait(lambda: not answers(str(path)), 5):
        raise Refused(f"the server (pid {pid}) does not answer and did not stop within 20 s")
    try:
        if path.stat().st_ino == inode:  # no server bound another meanwhile
            path.unlink()
    except FileNotFoundError:
        pass
