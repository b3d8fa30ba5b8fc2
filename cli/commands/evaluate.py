"""`mem eval …`: each evaluation lives in a module cli/commands/eval_<name>.py with its own
``register(subparsers, common)``."""

from __future__ import annotations

ORDER = 90

# the files of SPEC §10, said in the help too: the SPEC does not ship with the package
QUERIES_HELP = ('queries JSONL (SPEC §10): {"qid", "query"} a line, and optionally "setting", "run" (the '
                'run it is asked from: its steps are no candidates) and "step" (the global id of the '
                'step the query stands for: hidden, with its links, leave-one-out)')
QRELS_HELP = "TREC qrels (SPEC §10): `qid 0 run/step grade` a line, grade 0 not relevant"


def register(subparsers, common) -> None:
    from mem_retrieval.cli.main import command_modules

    parser = subparsers.add_parser("eval", help="retrieval- and memory-quality evaluation",
                                   description="Retrieval- and memory-quality evaluation.")
    family = parser.add_subparsers(dest="eval_command", metavar="EVALUATION",
                                   parser_class=type(parser))
    family.required = True
    for module in command_modules("eval_"):
        module.register(family, common)
