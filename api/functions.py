"""The memory functions as data: what each does and its parameters, the one source of both the
command line (``cli/arguments.py`` builds each command's argparse parser from it) and the MCP tools
(``cli/mcp.py`` publishes each tool's input schema from it). A parameter added or changed here shows
in both, and in their help.

Parameter names are the tools' argument names; the API's messages name them (``page 0 is not a page
number``); the command line spells them as its flags (``--page``) or, for arguments, as their
metavar. Types and closed choices are advertised in the schema; the values themselves are checked
once, by the API (``Memory``), so a bad value gets the same message on every path.

Light on purpose: imported at every CLI start-up (no lancedb, no torch)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from mem_retrieval.records.errors import BadInput, type_name
from mem_retrieval.records.types import KINDS, STATUSES
from mem_retrieval.records.validate import MAX_ARGUMENT_CHARS, said_not_whole, surrogate_problem

VALUE_TYPES = {"string": (str, "a string"), "integer": (int, "a whole number"),
               "boolean": (bool, "true or false"), "strings": (list, "a list of strings")}

@dataclass(frozen=True)
class Param:
    """One parameter of a memory function."""

    name: str
    type: str                        # string | integer | boolean | strings (a list of strings)
    help: str
    required: bool = False
    positional: bool = False         # on the command line: an argument, not a --flag
    default: Any = None
    choices: tuple[str, ...] = ()    # the closed set of values (advertised; the API checks them)
    minimum: int | None = None
    metavar: str | None = None       # the command line's name for its value
    dash_stdin: bool = False         # on the command line, '-' reads the value from standard input
    max_chars: int | None = MAX_ARGUMENT_CHARS  # a text's length, at most (None: bounded elsewhere)
    own_limit: bool = False          # max_chars is advertised, and checked where its message is said

    @property
    def flag(self) -> str:
        """How the command line spells it: ``--any-setting``, or the metavar of an argument."""
        return (self.metavar or self.name.upper()) if self.positional else "--" + self.name.replace("_", "-")

    def type_problem(self, value: Any) -> str | None:
        """Why ``value`` is not of this parameter's type (a bool is no number; a list of strings
        may be a tuple in Python; a string must be Unicode text), or None."""
        kind, said = VALUE_TYPES[self.type]
        if self.type == "strings":
            if not isinstance(value, (list, tuple)):
                return f"must be {said}, not {type_name(value)}"
            wrong = [item for item in value if not isinstance(item, str)]
            if wrong:
                return f"must be {said}, not a list holding {type_name(wrong[0])}"
            return next(filter(None, map(self._text_problem, value)), None)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            return f"must be {said}, not {said_not_whole(value) if kind is int else type_name(value)}"
        return self._text_problem(value) if isinstance(value, str) else None

    def _text_problem(self, text: str) -> str | None:
        """Why a text is not one this parameter takes: past its length (said without repeating
        it), or not Unicode text; or None."""
        if self.max_chars is not None and not self.own_limit and len(text) > self.max_chars:
            return f"is {len(text):,} characters long; at most {self.max_chars:,}"
        return surrogate_problem(text)

    def schema(self) -> dict[str, Any]:
        """The JSON Schema of its value."""
        if self.type == "strings":
            out: dict[str, Any] = {"type": "array", "items": {"type": "string"}}
        else:
            out = {"type": self.type}
        out["description"] = self.help
        if self.max_chars is not None and self.type in ("string", "strings") and not self.choices:
            (out["items"] if self.type == "strings" else out)["maxLength"] = self.max_chars
        if self.choices:
            out["enum"] = list(self.choices)
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.default is not None:
            out["default"] = self.default
        return out


@dataclass(frozen=True)
class Function:
    """One memory function: a `mem` command (``command``) and an MCP tool (``name``)."""

    name: str
    summary: str        # one line: the command's entry in `mem --help`, the tool's first sentence
    description: str    # what else a caller should know
    params: tuple[Param, ...]
    writes: bool = False

    @property
    def command(self) -> str:
        return self.name.replace("_", "-")

    @property
    def schema_name(self) -> str:
        """The name of its output's JSON Schema (``schemas/<command>.json``)."""
        return self.command

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)

    def check_types(self, values: dict[str, Any]) -> None:
        """BadInput naming the first of ``values`` (by parameter name) that is not of its
        parameter's type; None is "not given", refused for a required parameter."""
        for name, value in values.items():
            param = self.param(name)
            if value is None:
                if param.required:
                    raise BadInput("is missing", param=name)
                continue
            problem = param.type_problem(value)
            if problem:
                raise BadInput(problem, param=name)

    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of a tool call's arguments: every parameter, no other."""
        return {"type": "object", "properties": {p.name: p.schema() for p in self.params},
                "required": [p.name for p in self.params if p.required],
                "additionalProperties": False}

    def tool_description(self) -> str:
        return f"{self.summary}. {self.description}"

    def with_defaults(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """``arguments`` with every parameter present (its default when not given)."""
        empty = {"strings": [], "boolean": False}
        return {p.name: arguments[p.name] if p.name in arguments
                else p.default if p.default is not None else empty.get(p.type) for p in self.params}


def _strategies() -> tuple[str, ...]:
    from mem_retrieval.retrieval.strategies import STRATEGIES

    return tuple(STRATEGIES)


RUN_OF_ID = Param("run", "string", "the run of a bare step id (a global id run/step names its own, "
                  "whatever run says)",
                  metavar="RUN")
UNTIL = Param("until", "string", "memory as it stood at that event: a sequence number or event id "
              "(with run), an event hit's id (run#seq), or an ISO time with a zone",
              metavar="SEQ|TIME|EVENT")
PAGE = Param("page", "integer", "which page of hits (search.page_size a page, 5 by default; pages "
             "start at 1)", default=1, minimum=1, metavar="N")
LIST_ID = Param("list_id", "string", "the list_id the page before gave: when the result list has "
                "changed since (the index was updated between the calls), a note says so", metavar="ID")

FUNCTIONS: tuple[Function, ...] = (
    Function(
        "archive_search", "Steps of the runs and the library, a page at a time",
        "Ids first (a query naming A5-7 or run/A5-7 returns it as hit 1), then text candidates "
        "ranked by the strategy (default: BM25 candidates and the steps similar statements cite, "
        "scored with embeddings; the embedding never adds a candidate alone). With setting, hits "
        "whose setting or a hypothesis it does not imply (M3) are left out unless any_setting. Each "
        "hit: id, run, kind, statement, status, grade, setting, setting_match, score, in_library, "
        "unmet_hyp (its hypotheses the setting does not imply), via (id: the query named it; text: "
        "the search found it).",
        (Param("query", "string", "what to look for: words, a formula, or step ids (A5-7, run/A5-7)",
               required=True, positional=True, metavar="QUERY", own_limit=True),  # its own message
         Param("setting", "string", "the setting the hits will be used in (SPEC §8), e.g. F_q((t))",
               metavar="S", own_limit=True),
         Param("any_setting", "boolean", "keep hits the setting rule (M3) leaves out too"),
         Param("run", "string", "only steps of this run", metavar="R"),
         Param("kind", "string", "only steps of this kind", choices=KINDS, metavar="K"),
         Param("status", "string", "only steps with this status", choices=STATUSES, metavar="S"),
         Param("library", "boolean", "only steps in the library (solve/library.jsonl): the Recall "
               "step at Fix"),
         Param("context_run", "string", "the run asking: what its steps already cite, and the "
               "steps of the runs they cite, rank higher (the graph strategies; it leaves nothing "
               "out)", metavar="R"),
         UNTIL, PAGE, LIST_ID,
         Param("strategy", "string", "the ranking strategy (default: the config's search.strategy)",
               choices=_strategies(), metavar="S"))),
    Function(
        "archive_get", "One full step: statement, hypotheses, setting, proof, parents, status, audit",
        "Read from the workspace files (no index, no model); also a source (d2) by its id.",
        (Param("id", "string", "a global id run/step, or a step id (with run when several runs have it)",
               required=True, positional=True, metavar="ID"),
         RUN_OF_ID)),
    Function(
        "recall_search", "Events with their briefs and returns, a page at a time",
        "Give query (the events matching it, best first) or id (every event naming that step, in "
        "time order, each run's in log order), not both. Each hit carries its brief or return "
        "whole (body). Events written since the last `mem index` are not searched: a note says "
        "how many (of those until and id would keep), and the command that indexes them.",
        (Param("query", "string", "what to look for in the events, their briefs and returns",
               positional=True, metavar="QUERY", own_limit=True),
         Param("id", "string", "every event naming this step (a bare id with run: that run's), in "
               "time order", metavar="ID"),
         Param("run", "string", "only events of this run", metavar="R"),
         UNTIL, PAGE, LIST_ID)),
    Function(
        "core_set", "Rewrite one field of RUN/memory/core.md (W)",
        "A checkpoint event carrying the new text is appended to events.jsonl first; core.md is "
        "then replaced atomically. Refused when W would pass 2,000 tokens (M4).",
        (Param("run", "string", "the run whose W to write", required=True, positional=True,
               metavar="RUN"),
         Param("field", "string", "phase | portfolio | open gaps (or open-gaps) | next | inputs",
               required=True, positional=True, metavar="FIELD"),
         Param("text", "string", "the field's new text: ids and one line each", required=True,
               positional=True, metavar="TEXT", dash_stdin=True, max_chars=None)),  # M4 bounds it
        writes=True),
    Function(
        "archive_insert", "Copy one audited step to solve/library.jsonl",
        "Copied from its tree.json. Refused when M2 fails (status not final, not audited, or not "
        "passed and not repaired), when M3 would leave it out of record (it cites a reuse its run's "
        "setting does not allow, or rests on such a step), when its record does not hold together "
        "(a parent naming nothing, a circular proof: as check and record judge it), or when the id "
        "is already in the library. Index afterwards (or use record) to make it searchable.",
        (Param("id", "string", "a global id run/step, or a step id with run", required=True,
               positional=True, metavar="ID"),
         RUN_OF_ID),
        writes=True),
    Function(
        "check", "M1–M4 and the record's integrity; lists every violation",
        "One violation a line (file:line: code: message). Warnings (M3 settings unknown to the "
        "ontology) do not fail.",
        (Param("runs", "strings", "the runs to check (default: all)", positional=True,
               metavar="RUN"),)),
    Function(
        "record", "The Record step of a run: check it, admit its audited steps to the library, index",
        "Refused, listing them, on M1, M4 or integrity violations. Admits every step satisfying M2 "
        "not yet in the library, except steps citing a step the run's setting does not imply (M3) "
        "and steps resting on those through the run's own steps, in one all-or-nothing write; then "
        "indexes the run. Says what it admitted, left out and why. Idempotent: a second call admits "
        "nothing.",
        (Param("run", "string", "the run to record", required=True, positional=True, metavar="RUN"),
         Param("dry_run", "boolean", "show the plan; write nothing")),
        writes=True),
)

BY_NAME: dict[str, Function] = {f.name: f for f in FUNCTIONS}


@cache
def output_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of the ``--json`` output of the command ``name`` (``archive-search``,
    ``eval-paging``, ``error``…), shipped in the package under ``schemas/``."""
    from importlib.resources import files

    if name not in schema_names():  # (a path piece, or the function's API name, opened a file)
        raise KeyError(f"no output schema {name!r}; the schemas: {', '.join(schema_names())}")
    return json.loads((files("mem_retrieval") / "schemas" / f"{name}.json").read_text(encoding="utf-8"))


def schema_names() -> list[str]:
    """Every shipped output schema, by name."""
    from importlib.resources import files

    return sorted(entry.name.removesuffix(".json") for entry in (files("mem_retrieval") / "schemas").iterdir()
                  if entry.name.endswith(".json"))


__all__ = ["BY_NAME", "FUNCTIONS", "Function", "Param", "output_schema", "schema_names"]
