"""Files and folders a command writes where its flags say (``--trec-out``, ``--report``,
``--plot``, ``--write-queries``): checked before the (long) work that fills them, so a path that
can never be written is refused at once, and a write that fails anyway is one line (exit 2) naming
the flag and the path, not a traceback after the work is done. And the one check of every path
(or run) a command-line option names: ``named`` refuses "" at parsing; of every integer one:
``integer``, and of every decimal one: ``number``."""

from __future__ import annotations

import os
import tempfile
import contextlib
from collections.abc import Callable
from pathlib import Path

from mem_retrieval.records.files import writing as _writing
from mem_retrieval.records.errors import BadInput


def named(text: str) -> str:
    """The argparse ``type`` of an option naming a file, a folder or a run: "" read as not given
    (`--config ""` used no file, `--memory-from ""` scored no run, `tune --holdout-queries ""`
    held out nothing) or as the current folder. Only command-line options take it: the values the
    memory functions take (``setting``, ``run``, ``until``…) are the API's to judge, alike on every
    path."""
    import argparse

    if not text:
        raise argparse.ArgumentTypeError("is empty")
    return text


def integer(text: str) -> int:
    """The argparse ``type`` of an integer option (``--page``, ``--pages``, ``--max-pairs``…): an
    optional sign and ASCII digits, as typed. ``int`` also read ``1_0`` as 10, ``٣`` and ``２`` as
    3 and 2, and `` 2`` as 2 (an MCP client's integer is a JSON number, never text)."""
    import argparse
    import re

    if not re.fullmatch(r"[-+]?[0-9]+", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer (digits 0-9)")
    return int(text)


def number(text: str) -> float:
    """The argparse ``type`` of a decimal option (``--idle-timeout``, ``eval fusion --step``): a
    sign, ASCII digits, a point, an exponent, as ``integer`` reads digits (``float`` read ``١٠``
    and ``1_0`` as 10, and ``nan`` and ``inf`` too)."""
    import argparse
    import re

    if not re.fullmatch(r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (digits 0-9, a point)")
    return float(text)


def _writable_folder(folder: Path, param: str, given: str) -> None:
    """``folder`` can be written, or created under its nearest existing ancestor."""
    for ancestor in (folder, *folder.parents):
        if ancestor.exists():
            if not ancestor.is_dir():
                raise BadInput(f"{given!r}: {str(ancestor)!r} is not a folder", param=param)
            try:  # the one sure test, for root and read-only mounts alike: make a folder there
                os.rmdir(tempfile.mkdtemp(prefix=".mem-probe-", dir=ancestor))
            except OSError as err:
                raise BadInput(f"{given!r}: cannot write in {str(ancestor)!r}: {err.strerror or err}",
                               param=param) from None
            return


def _fits(file: str, param: str, given: str) -> None:
    """Nothing stands at ``file`` that a written file could not replace: a folder, or a device,
    pipe or socket (the file replaces what stands there, and as root that could be /dev/null)."""
    target, where = Path(file), "" if file == given else f"{file!r}, a file it writes, "
    if file.endswith(os.sep) or os.path.basename(file) in (".", ".."):  # Path drops `/` and `/.`:
        raise BadInput(f"{given!r}: {where}names a folder (it ends in {os.sep!r}, '.' or '..'), not a file",
                       param=param)
    with writing(given, param, tried=""):  # a name too long, a loop of links
        if target.is_dir():
            raise BadInput(f"{given!r}: {where}is a folder, not a file", param=param)
        if target.exists() and not target.is_file():
            raise BadInput(f"{given!r}: {where}is not a regular file (a device, a pipe or a socket)",
                           param=param)


def check_file(path: str | None, param: str) -> None:
    """A file to be written: nothing in its way (``_fits``), and its folder writable or
    creatable."""
    if path is None:
        return
    _fits(path, param, path)
    with writing(path, param, tried=""):
        _writable_folder(Path(path).absolute().parent, param, path)


def check_apart(writes: dict[str, tuple[str | None, list]], reads: dict[str, str | None],
                workspace=None) -> None:
    """Refuse, before the work, an output that would replace what the command reads, what
    another output writes, or one of ``workspace``'s records (``Workspace.record_at``: the library,
    a run's tree.json or log, the index). ``writes``: each output's parameter, its value as given,
    and the files it will write (a folder's files under it: each must be free to be written,
    ``_fits``); ``reads``: each input's parameter and
    its file. Paths are compared as they resolve (links, ``..``)."""
    from mem_retrieval.cli.main import flag

    written: dict[str, tuple[str, str]] = {}  # resolved path -> (the parameter writing it, as given)
    for param, (given, files) in writes.items():
        if given is None:
            continue
        for file in map(str, files):
            _fits(file, param, given)  # a folder where a report's file goes: refused before the work
            real = os.path.realpath(file)
            where = "it" if file == given else repr(file)
            record = workspace.record_at(file) if workspace is not None else None
            if record is not None:
                raise BadInput(f"{given!r}: would write {where} into {record}, the workspace's records",
                               param=param)
            for read, path in reads.items():
                if path is not None and os.path.realpath(path) == real:
                    raise BadInput(f"{given!r}: would replace {where}, the {flag(read)} file this reads",
                                   param=param)
            for other, (by, by_given) in written.items():
                if by != param and (real == other or other.startswith(real + os.sep)
                                    or real.startswith(other + os.sep)):
                    raise BadInput(f"{given!r}: {flag(by)} {by_given!r} writes there too", param=param)
            written[real] = (param, given)


def check_folder(path: str | None, param: str) -> None:
    """A folder to write files into: a folder, or creatable (the files it will hold are checked
    by ``check_apart``)."""
    if path is None:
        return
    target = Path(path)
    with writing(path, param, tried=""):
        if target.exists() and not target.is_dir():
            raise BadInput(f"{path!r}: exists and is not a folder", param=param)
        _writable_folder(target.absolute(), param, path)


def writing(path: str, param: str,
            tried: str = "cannot write it: ") -> contextlib.AbstractContextManager[None]:
    """Writes to ``path`` (for ``param``), or looks at it (``tried`` ""): an OSError becomes the
    one-line BadInput."""
    return _writing(repr(path), param, tried)


def write_all(ctx, files: list[tuple[Path, Callable[[Path], None], str]]) -> None:
    """Write ``files`` ((path, writer, the option naming it)) all or none (``files.replace_all``),
    each then said on stderr: a write the machine refuses is one line naming the option whose file
    or folder it was, with nothing written (a `--report` that failed once `--trec-out` had replaced
    its file left the new run file and an empty folder, exit 2)."""
    from mem_retrieval.records.files import replace_all

    try:
        replace_all([(path, write) for path, write, _ in files])
    except OSError as error:
        path, _, param = files[error.index]  # the file it was for (or whose folder it was making)
        placed = error.placed
        more = f" ({len(placed)} of {len(files)} files were written)" if placed else ""
        raise BadInput(f"{str(path)!r}: cannot write it: {error.strerror or error}{more}",
                       param=param) from None
    for path, _, _ in files:
        ctx.note(f"wrote {path}")
