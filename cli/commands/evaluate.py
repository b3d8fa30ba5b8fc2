"""`mem eval …`: each evaluation lives in a module mem/commands/eval_<name>.py with its own
``register(subparsers, common)``."""

from __future__ import annotations

ORDER = 90


def register(subparsers, common) -> None:
    from mem_retrieval.cli.main import command_modules

    parser = subparsers.add_parser("eval", help="retrieval- and memory-quality evaluation",
                                   description="Retrieval- and memory-quality evaluation.")
    family = parser.add_subparsers(dest="eval_command", metavar="EVALUATION",
                                   parser_class=type(parser))
    family.required = True
    for module in command_modules("eval_"):
        module.register(family, common)
