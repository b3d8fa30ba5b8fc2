"""One memory function called on a ``Memory``, as every front end shows it: the ``--json`` data, the
text rendering, the exit status and notes for the person. The command line (``cli/arguments.py``)
prints an ``Answer``; the MCP server (``cli/mcp.py``) returns it as a tool result. So both show the
same data and the same text.

``spell`` turns an API parameter name into the front end's own spelling (``--kind`` on the command
line, ``kind`` for a tool) in the notes."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mem_retrieval.functions import BY_NAME
from mem_retrieval.records.errors import MemError, plural
from mem_retrieval.retrieval.types import EXCERPT_CHARS


@dataclass(frozen=True)
class Answer:
    """What a call gives: ``data`` (the --json object), ``text``, ``status`` (the exit status: 1
    for a search with no hit or a failed check) and ``notes`` for the person (stderr)."""

    data: dict[str, Any]
    text: str
    status: int = 0
    notes: tuple[str, ...] = ()


Spell = Callable[[str], str]
Say = Callable[[str], None]  # where a note goes
Args = dict[str, Any]  # a call's arguments, every one given (its defaults filled in)


def call(memory, name: str, arguments: dict[str, Any], spell: Spell = str,
         progress: bool | None = False, live: Say | None = None) -> Answer:
    """Run the memory function ``name`` with ``arguments`` (missing ones take their defaults).
    ``live``: where a note said while the call works goes at once (the command line's stderr: a
    ``record`` waiting for another `mem index` says so then, not when it ends); without it such a
    note is one of the answer's ``notes`` (MCP, which answers once)."""
    given = BY_NAME[name].with_defaults(arguments)
    return CALLS[name](memory, given, spell, progress, live)


def no_runs_note(workspace) -> str | None:
    """A note when the folder holds no run (often the wrong workspace)."""
    if workspace.runs():
        return None
    library = workspace.library_path.is_file()
    return (f"no runs in {workspace.root} (a run is a folder holding tree.json)"
            + ("; only solve/library.jsonl is read" if library else ""))


_SPACE = re.compile(r"\s")  # where textwrap splits words (its white space, and str.split's)


def _excerpt(text: str, width: int = 300) -> str:
    """``textwrap.shorten(text, width)``, read from a prefix of ``text`` long enough to give the
    same (one whose white space collapsed is past ``width``): shortening a 50 MB statement whole
    took 6 s of an 8 s search to print 300 characters of it."""
    cut = 4 * width
    while cut < len(text) and len(" ".join(text[:cut].split())) <= width:
        cut *= 4
    if cut < len(text):  # to the end of the word it cuts, or width + 1 further: a word longer than
        end = _SPACE.search(text, cut, cut + width + 2)  # the room is broken, a shorter one dropped
        cut = end.start() if end else cut + width + 1
    return textwrap.shorten(text[:cut], width, placeholder=" …")


def _footer(page, spell: Spell) -> str:
    """Where the list goes on. The hint is shown only when it says 'read on': an estimate near 0
    is not reliable enough to tell an agent to stop (see README, `mem eval paging`). A page past
    the first of a list other than the one its caller paged (a ``list_id`` note) goes on at page 1
    of the list now: its next page, offered before, skipped the new top hits and repeated others,
    against the note's own advice."""
    if page.page > 1 and any(note.param == "list_id" for note in page.notes):
        return (f"more: {_arg(spell, 'page', 1)} {_arg(spell, 'list_id', page.list_id)} (the list changed: "
                "read it again from page 1)")
    if page.page < page.pages:
        hint = (f" · about {plural(round(page.remaining), 'relevant-looking hit')} ahead"
                if page.remaining is not None and page.remaining >= 1 else "")
        return (f"more: {_arg(spell, 'page', page.page + 1)} {_arg(spell, 'list_id', page.list_id)} "
                f"({plural(page.left, 'more hit')}){hint}")
    return "last page"


def _arg(spell: Spell, name: str, value) -> str:
    shown = spell(name)
    return f"{shown} {value}" if shown.startswith("--") else f"{shown}={value}"


def archive_search(memory, a: Args, spell: Spell, progress: bool | None, live: Say | None) -> Answer:
    page = memory.archive_search(
        a["query"], a["setting"], run=a["run"], kind=a["kind"], status=a["status"], page=a["page"],
        any_setting=a["any_setting"], library=a["library"], until=a["until"], strategy=a["strategy"],
        context_run=a["context_run"], list_id=a["list_id"])
    notes = tuple(note.render(spell) for note in page.notes)
    data = page.as_dict() | {"notes": list(notes)}  # the JSON and MCP's structured content say them too
    if not page.total:
        return Answer(data, "no hits", 1, notes)
    lines = [f"page {page.page} of {page.pages} · {plural(page.total, 'hit')}"
             + (f" · setting {page.setting}" if page.setting else "")
             + (" · BM25 order: vectors not computed yet" if page.pending else "")]
    for rank, hit in enumerate(page.hits, start=page.first_rank):
        grade = hit.grade or "not audited"
        unmet = f"; hyp {', '.join(map(repr, hit.unmet_hyp))} not implied" if hit.unmet_hyp else ""
        match = f" ({hit.setting_match}{unmet})" if hit.setting_match else ""
        lib = " · library" if hit.in_library else ""
        lines.append(f"{rank}. {hit.id}  {hit.kind} · {hit.status} · {grade}{lib} · "
                     f"setting: {hit.setting or '—'}{match} · {hit.score:.3f}"
                     + ("  [id]" if hit.via == "id" else ""))
        lines.append(_excerpt(hit.statement).join(["   ", ""]))
    lines.append(_footer(page, spell))
    return Answer(data, "\n".join(lines), 0, notes)


def archive_get(memory, a: Args, spell: Spell, progress: bool | None, live: Say | None) -> Answer:
    data = memory.archive_get(a["id"], run=a["run"]).as_dict()
    if data["kind"] == "source":
        return Answer(data, "\n".join(f"{k:<10} {v}" for k, v in data.items() if v))
    audit = data["audit"]
    audit_text = "not audited" if audit is None else (
        f"{audit['grade']}" + (f" by {audit['by']}" if audit["by"] else "")
        + (f": {audit['note']}" if audit["note"] else "") + (" (repaired)" if audit["repaired"] else ""))
    rows = [("id", data["id"]), ("kind", data["kind"]), ("statement", data["statement"]),
            ("hyp", "; ".join(data["hyp"]) or "—"), ("setting", data["setting"] or "—"),
            ("parents", ", ".join(data["parents"]) or "—"), ("proof", data["proof"] or "—"),
            ("status", data["status"]), ("audit", audit_text)]
    if data["missing"]:
        rows.append(("missing", data["missing"]))
    if data["failed_input"]:
        rows.append(("failed", data["failed_input"]))
    if data["in_library"]:
        rows.append(("library", f"inserted {data['inserted'] or '—'}"))
    return Answer(data, "\n".join(f"{k:<10} {v}" for k, v in rows))


def recall_search(memory, a: Args, spell: Spell, progress: bool | None, live: Say | None) -> Answer:
    page = memory.recall_search(a["query"], id=a["id"], run=a["run"], page=a["page"], until=a["until"],
                                list_id=a["list_id"])
    notes = tuple(note.render(spell) for note in page.notes)
    data = page.as_dict() | {"notes": list(notes)}
    if not page.total:
        return Answer(data, "no events", 1, notes)
    lines = [f"page {page.page} of {page.pages} · {plural(page.total, 'event')}"
             + (" · BM25 order: vectors not computed yet" if page.pending else "")]
    for hit in page.hits:
        ids = f" [{', '.join(hit.ids)}]" if hit.ids else ""
        lines.append(f"{hit.run} #{hit.seq}  {hit.time} · {hit.actor} · {hit.kind}{ids}")
        lines.append(textwrap.indent(hit.text, "   "))  # the event, whole; its file's start:
        if hit.excerpt:
            lines.append(f"   | {hit.excerpt}")
        elif hit.path and hit.body is None:  # gone, or swapped for what is not read, since `mem index`
            lines.append(f"   | ({hit.run}/{hit.path} cannot be read now: gone, no longer a file in the "
                         "run, or not UTF-8)")
        if hit.body is not None and len(hit.body) > EXCERPT_CHARS:  # the excerpt showed it whole
            output = spell("json")  # `--json` on the command line; an MCP tool has no such flag
            where = f"the {output} output" if output != "json" else "the structured content"
            lines.append(f"   | ({len(hit.body):,} characters: {hit.run}/{hit.path}; whole as body in "
                         f"{where})")
    lines.append(_footer(page, spell))
    return Answer(data, "\n".join(lines), 0, notes)


def core_set(memory, a: Args, spell: Spell, progress: bool | None, live: Say | None) -> Answer:
    from mem_retrieval.records.tokens import CORE_TOKEN_LIMIT

    done = memory.core_set(a["run"], a["field"], a["text"])
    event = done.event
    return Answer({"run": done.run, "field": done.field, "tokens": done.tokens, "limit": CORE_TOKEN_LIMIT,
                   "event": {"seq": event.seq, "time": event.time, "ids": list(event.ids)}},
                  f"{done.run}/memory/core.md: {done.field} set; W is {done.tokens:,} of "
                  f"{CORE_TOKEN_LIMIT:,} tokens (checkpoint event {event.seq}, {event.time})")


def archive_insert(memory, a: Args, spell: Spell, progress: bool | None, live: Say | None) -> Answer:
    entry = memory.archive_insert(a["id"], a["run"])
    try:  # `mem index RUN` would ask for --full: say that one (written now: nothing may fail it)
        full = memory.index_refusal(reach=False) is not None
    except MemError:  # the index cannot be opened at all: `mem index` says why
        full = False
    index = "mem index --full" if full else f"mem index {entry.run}"
    return Answer({"inserted": entry.gid, "line": entry.line, "status": entry.status,
                   "grade": entry.grade, "repair": entry.repair, "time": entry.inserted},
                  f"{entry.gid} ({entry.status}, grade {entry.grade}) inserted into solve/library.jsonl "
                  f"line {entry.line}; searches see it there after `{index}`")


def check(memory, a: Args, spell: Spell, progress: bool | None, live: Say | None) -> Answer:
    note = no_runs_note(memory.workspace)
    report = memory.check(a["runs"] or None)
    lines = [str(v) for v in report.violations] + [report.summary()]
    data = {"ok": not report.errors, "summary": report.summary(), "counts": report.counted(),
            "violations": [{"file": v.file, "line": v.line, "code": v.code, "message": v.message,
                            "severity": v.severity} for v in report.violations]}
    status = 2 if report.unreadable else 1 if report.errors else 0
    return Answer(data, "\n".join(lines), status, (note,) if note else ())


def record(memory, a: Args, spell: Spell, progress: bool | None, live: Say | None) -> Answer:
    said: list[str] = []  # what its index step tells (other runs it indexes too, and why; a wait)
    done = memory.record(a["run"], dry_run=a["dry_run"], progress=progress,
                         on_message=live or said.append)
    verb = "would admit" if done.dry_run else "admitted"
    lines = [done.summary()]
    for item in done.admitted:
        where = f" → solve/library.jsonl:{item.line}" if not done.dry_run else ""
        lines.append(f"{verb}  {item.gid} ({item.status}, {item.grade}){where}")
    lines += [f"left out  {item.id}: {item.code}: {item.reason}" for item in done.left_out]
    lines += [f"warning   {warning}" for warning in done.warnings]
    if done.index is not None:
        lines.append(done.index.summary())
    return Answer(done.as_dict(), "\n".join(lines), 0, tuple(said))


CALLS: dict[str, Callable[[Any, Args, Spell, bool | None, Say | None], Answer]] = {
    "archive_search": archive_search, "archive_get": archive_get, "recall_search": recall_search,
    "core_set": core_set, "archive_insert": archive_insert, "check": check, "record": record,
}

__all__ = ["Answer", "CALLS", "call", "no_runs_note"]
