"""The commands of the memory functions, built from their definitions (``mem_retrieval.functions``,
which the MCP tools' schemas come from too): one parser each, and one handler that calls the
function (``cli.calls``) and prints its answer."""

from __future__ import annotations

import argparse
import functools
import sys

from mem_retrieval.cli.outputs import integer
from mem_retrieval.functions import BY_NAME, Function, Param
from mem_retrieval.records.errors import one_line


def register_functions(subparsers, common, names: list[str]) -> None:
    """Add the commands of the functions ``names``, in that order."""
    for name in names:
        function = BY_NAME[name]
        parser = subparsers.add_parser(function.command, parents=[common], help=function.summary,
                                       description=f"{function.summary}. {function.description}")
        for param in function.params:
            add_param(parser, param)
        parser.set_defaults(handler=functools.partial(run_function, function), function=function)


def add_param(parser: argparse.ArgumentParser, param: Param) -> None:
    """The parameter as an argparse argument (values are checked by the API, not here)."""
    help_text = param.help + ("; '-' reads standard input" if param.dash_stdin else "")
    if param.default is not None and param.type != "boolean":
        help_text += f" (default {param.default})"
    if param.type == "boolean":
        parser.add_argument(param.flag, dest=param.name, action="store_true", help=help_text)
        return
    kind = integer if param.type == "integer" else None
    if param.positional:
        nargs = "*" if param.type == "strings" else None if param.required else "?"
        parser.add_argument(param.name, metavar=param.metavar, nargs=nargs, type=kind, help=help_text)
    else:
        parser.add_argument(param.flag, dest=param.name, metavar=param.metavar, type=kind,
                            default=param.default, help=help_text)


def run_function(function: Function, args: argparse.Namespace, ctx) -> int:
    """Call the function with the parsed arguments and print its answer; its exit status."""
    from mem_retrieval.cli.calls import call
    from mem_retrieval.cli.main import flag

    arguments = {param.name: _text(getattr(args, param.name)) for param in function.params}
    for param in function.params:
        if param.dash_stdin and arguments[param.name] == "-":
            arguments[param.name] = _standard_input()
    def say(note: str) -> None:  # one printable line: an id's zero-width space shows escaped (JSON keeps it)
        ctx.note(one_line(f"mem: {note}"))

    answer = call(ctx.memory(), function.name, arguments, spell=functools.partial(flag, function=function),
                  progress=None, live=say)
    for note in answer.notes:
        say(note)
    ctx.emit(answer.data, answer.text)
    return answer.status


def _text(value):
    """A memory function's argument as text (``cli.main.as_text``): none of them is a path."""
    from mem_retrieval.cli.main import as_text

    if isinstance(value, list):
        return [as_text(item) for item in value]
    return as_text(value) if isinstance(value, str) else value


def _standard_input() -> str:
    """Standard input as UTF-8 text: bytes that are not are one line naming where (as an argument's
    are), not a string of lone surrogates that fails deeper down."""
    from mem_retrieval.records.errors import BadInput
    from mem_retrieval.records.parse import decode_utf8

    if sys.stdin is None:  # started with it closed (`<&-`): nothing to read, not an empty text
        raise BadInput("'-' reads the text from standard input, which is closed")
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text stream put there in-process (tests, an embedding program)
        return sys.stdin.read()
    return decode_utf8(stream.read(), "standard input")
