"""`mem core-set`, `mem archive-insert`, `mem check`: the memory functions that write, and M1–M4.
A thin shell over records.writes and records.invariants."""

from __future__ import annotations

import sys

ORDER = 30


def register(subparsers, common) -> None:
    parser = subparsers.add_parser(
        "core-set", parents=[common], help="rewrite one field of RUN/memory/core.md (W)",
        description="Rewrite one field of W (phase, portfolio, open gaps, next, inputs). A checkpoint "
                    "event carrying the new text is appended to events.jsonl first; core.md is then "
                    "replaced atomically. Refused (exit 1) when W would pass 2,000 tokens (M4).")
    parser.add_argument("run", metavar="RUN")
    parser.add_argument("field", metavar="FIELD",
                        help="phase | portfolio | 'open gaps' (or open-gaps) | next | inputs")
    parser.add_argument("text", metavar="TEXT", help="the field's new text; '-' reads standard input")
    parser.set_defaults(handler=core_set)

    parser = subparsers.add_parser(
        "archive-insert", parents=[common], help="copy one audited step to solve/library.jsonl",
        description="Append one step to the library, copied from its tree.json. Refused (exit 1) when "
                    "M2 fails (status not final, not audited, or not passed and not repaired) or "
                    "when the id is already in the library.")
    parser.add_argument("id", metavar="ID", help="a global id RUN/STEP, or a step id with --run")
    parser.add_argument("--run", metavar="RUN", help="the run of a bare step id")
    parser.set_defaults(handler=archive_insert)

    parser = subparsers.add_parser(
        "check", parents=[common], help="M1–M4 and the record's integrity; lists every violation",
        description="List every violation, one a line (file:line: code: message); exit 1 if any, 2 if "
                    "a file cannot be read. Warnings (M3 settings unknown to the ontology) do not fail.")
    parser.add_argument("runs", metavar="RUN", nargs="*", help="runs to check (default: all)")
    parser.set_defaults(handler=check)


def core_set(args, ctx) -> int:
    from mem_retrieval.records.tokens import CORE_TOKEN_LIMIT

    text = sys.stdin.read() if args.text == "-" else args.text
    done = ctx.memory().core_set(args.run, args.field, text)
    event = done.event
    ctx.emit({"run": done.run, "field": done.field, "tokens": done.tokens, "limit": CORE_TOKEN_LIMIT,
              "event": {"seq": event.seq, "time": event.time, "ids": list(event.ids)}},
             f"{done.run}/memory/core.md: {done.field} set; W is {done.tokens:,} of "
             f"{CORE_TOKEN_LIMIT:,} tokens (checkpoint event {event.seq}, {event.time})")
    return 0


def archive_insert(args, ctx) -> int:
    entry = ctx.memory().archive_insert(args.id, args.run)
    ctx.emit({"inserted": entry.gid, "line": entry.line, "status": entry.status,
              "grade": entry.grade, "repair": entry.repair, "time": entry.inserted},
             f"{entry.gid} ({entry.status}, grade {entry.grade}) inserted into solve/library.jsonl "
             f"line {entry.line}")
    return 0


def check(args, ctx) -> int:
    memory = ctx.memory()
    ctx.warn_if_no_runs(memory.workspace)
    report = memory.check(args.runs or None)
    lines = [str(v) for v in report.violations] + [report.summary()]
    ctx.emit({"ok": not report.errors, "summary": report.summary(), "counts": dict(report.counts),
              "violations": [{"file": v.file, "line": v.line, "code": v.code, "message": v.message,
                              "severity": v.severity} for v in report.violations]},
             "\n".join(lines))
    if report.unreadable:
        return 2
    return 1 if report.errors else 0
