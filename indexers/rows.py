"""Records -> index rows. Steps of every run and of the library become one row per global id (a
library entry and the step it was copied from are one record); events carry the text of the brief
or return they point to; sources carry their snapshot text for BM25 only (never embedded)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mem_retrieval.configs import Config
from mem_retrieval.indexers.store import NEVER, key, reuse_key
from mem_retrieval.records.errors import InputError
from mem_retrieval.records.ids import split_gid
from mem_retrieval.records.parse import iso_time, micros, read_text, source_file
from mem_retrieval.records.types import Event, LibraryEntry, Step, Tree
from mem_retrieval.records.workspace import Workspace, by_run, first_written, library_as_step
from mem_retrieval.text.embed import prepare
from mem_retrieval.text.tokenize import token_string

def digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def step_embed_text(row: dict[str, Any]) -> str:
    text = row["statement"]
    if row["missing"]:
        text += f" Missing: {row['missing']}"
    if row["failed_input"]:
        text += f" Failed input: {row['failed_input']}"
    return text


def step_search_text(row: dict[str, Any]) -> str:
    """What BM25 sees of a step: its id, statement, hypotheses, setting, missing/failed input."""
    return " ".join([row["sid"], row["statement"], " ".join(row["hyp"]), row["setting"],
                     row["missing"], row["failed_input"]])


@dataclass
class Rows:
    """Rows for each table (without vectors), and the text to embed for each embedded row."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)
    embed_text: dict[str, str] = field(default_factory=dict)  # text_hash -> text
    library: list[LibraryEntry] = field(default_factory=list)  # solve/library.jsonl as read
    logs: dict[str, dict[str, Any] | None] = field(default_factory=dict)  # run: RunRecords.log


def _finish(row: dict[str, Any], rows: Rows, text: str | None, search: str, config: Config) -> dict[str, Any]:
    """Add content and text hashes; register the embedding text; keep ``search``, the text BM25
    sees, for ``tokenize_rows``. The content hash covers the row's fields, which ``search`` is
    made of, and not the tokens: the tokeniser's output is fixed by its version, which the index
    records (a new one means `mem index --full`), so an unchanged row is never tokenised again."""
    if text is not None:
        text = prepare(text, config.model.max_chars)
        row["text_hash"] = digest([config.model.name, text])
        rows.embed_text[row["text_hash"]] = text
    else:
        row["text_hash"] = ""
    row["content_hash"] = digest(row)
    row["search"] = search
    return row


def tokenize_rows(changed: list[dict[str, Any]]) -> None:
    """Give the rows about to be written their BM25 tokens (a third of reading a workspace's
    records went to tokenising every row, changed or not)."""
    for row in changed:
        if "tokens" not in row:
            row["tokens"] = token_string(row["search"])


def inserted_micros(entry: LibraryEntry | None) -> int:
    """When a library entry was inserted (microseconds), NEVER when it was not, or says not when."""
    return micros(iso_time(entry.inserted)) if entry and entry.inserted else NEVER


def step_row(step: Step, entry: LibraryEntry | None, named: tuple[int, int] | None,
             sources: frozenset[str] = frozenset()) -> dict[str, Any]:
    audit = step.audit
    row = {
        "gid": step.gid, "key": key(step.gid), "run": step.run, "run_key": key(step.run),
        "sid": step.id, "sid_key": key(step.id), "kind": step.kind, "statement": step.statement,
        "hyp": list(step.hyp), "setting": step.setting, "setting_key": reuse_key(step.setting, step.hyp),
        "parents": list(step.parents), "parent_keys": [key(g) for g in step.cited(sources)],
        "proof": step.proof, "status": step.status,
        "grade": audit.grade if audit else None, "audit_by": audit.by if audit else "",
        "audit_note": audit.note if audit else "", "repaired": bool(audit and audit.repaired),
        "missing": step.missing, "failed_input": step.failed_input, "agent": step.agent,
        "in_library": entry is not None, "inserted": entry.inserted if entry else "",
        "inserted_ts": inserted_micros(entry),
        "named_seq": named[0] if named else NEVER, "named_ts": named[1] if named else NEVER,
    }
    return row


def event_body(event: Event, run_dir: Path, config: Config) -> str:
    """The text of the brief or return an event points to, as far as the index keeps it ("" for
    none); a file that is not UTF-8 text is bad input."""
    return read_text(run_dir / event.path)[: config.index.event_body_chars] if event.path else ""


def event_row(event: Event, body: str) -> dict[str, Any]:
    gids = event.step_gids
    row = {
        "gid": event.gid, "key": key(event.gid), "run": event.run, "run_key": key(event.run),
        "seq": event.seq, "time": event.time, "ts": micros(event.timestamp), "actor": event.actor,
        "kind": event.kind, "ids": list(event.ids), "id_keys": sorted({key(g) for g in gids}),
        "sid_keys": sorted({key(split_gid(r)[1]) for r in event.ids}), "text": event.text,
        "path": event.path or "", "body": body,
    }
    return row


def event_search_text(row: dict[str, Any]) -> str:
    """What BM25 sees of an event: its actor, kind, ids, text and the brief or return's text."""
    return " ".join([row["actor"], row["kind"], " ".join(row["ids"]), row["text"], row["body"]])


@dataclass(frozen=True)
class RunRecords:
    """What the index reads of one run: its tree, its events and their briefs' and returns' text."""

    tree: Tree
    events: list[Event]
    bodies: list[str]  # event_body of each event, in order
    log: dict[str, Any] | None  # what was read of its log (``Workspace.events``), None: none


def read_records(workspace: Workspace, config: Config, runs: list[str]) -> tuple[list[LibraryEntry],
                                                                                 dict[str, RunRecords]]:
    """Parse and validate ``runs`` and the library as the index reads them, making no rows: raises
    the InputError ``build_rows`` would (`mem record` asks it of every run before it writes)."""
    workspace.ontology  # validated here too: a bad settings.toml fails the index, not a later search
    library = workspace.library()
    for problem in [*workspace.misnamed_runs(), *workspace.lost_records().values()]:
        raise InputError.of(problem)  # a run no search would ever see: bad input
    read = {}
    for run in runs:
        tree = workspace.tree(run)
        workspace.core(run)  # not indexed, but validated: bad input is reported at index time
        log: dict[str, Any] = {}
        events = list(workspace.events(run, log))
        read[run] = RunRecords(tree, events, [event_body(e, workspace.run_dir(run), config) for e in events],
                               log[run])
    return library, read


def build_rows(workspace: Workspace, config: Config, runs: list[str]) -> Rows:
    """Parse and validate ``runs`` and the library into rows. Raises InputError before anything
    is written, so bad input never reaches the index."""
    rows = Rows()
    rows.library, read = read_records(workspace, config, runs)
    library = {entry.gid: entry for entry in rows.library}
    in_workspace, entries = set(workspace.runs()), by_run(rows.library)
    for run, records in read.items():
        rows.logs[run] = records.log
        tree, events, run_dir = records.tree, records.events, workspace.run_dir(run)
        named = {step: (seq, micros(stamp)) for step, (seq, stamp) in
                 first_written(events, run, entries.get(run, ())).items()}
        sources = frozenset(source.id for source in tree.sources)
        for step in tree.steps:
            row = step_row(step, library.get(step.gid), named.get(step.id), sources)
            rows.steps.append(_finish(row, rows, step_embed_text(row), step_search_text(row), config))
        for event, body in zip(events, records.bodies):
            row = event_row(event, body)
            text = " ".join(part for part in (event.text, row["body"]) if part)
            rows.events.append(_finish(row, rows, text, event_search_text(row), config))
        for source in tree.sources:
            path = source_file(run_dir, source)
            text = path.read_bytes()[: config.index.source_chars * 4].decode("utf-8", "replace") if path else ""
            row = {"gid": source.gid, "key": key(source.gid), "run": run, "run_key": key(run),
                   "sid": source.id, "origin": source.origin, "retrieved": source.retrieved,
                   "hash": source.hash, "path": source.path, "text": text[: config.index.source_chars]}
            rows.sources.append(_finish(row, rows, None, " ".join([source.id, source.origin, row["text"]]),
                                        config))
    from_trees = {row["gid"] for row in rows.steps}
    for gid, entry in library.items():
        if gid in from_trees or (entry.run in in_workspace and entry.run not in runs):
            continue  # merged into its step's row, or owned by a run not being indexed now
        rows.steps.append(library_row(entry, rows, config))
    return rows


def library_row(entry: LibraryEntry, rows: Rows, config: Config) -> dict[str, Any]:
    """The steps row of a library entry whose step its run's tree.json does not hold: no event
    names it (``named_seq`` NEVER), and it counts as written when it was inserted (``named_ts``
    its ``inserted_ts``), so ``--until`` cuts it as the library."""
    stamp = (NEVER, inserted_micros(entry)) if entry.inserted else None
    row = step_row(library_as_step(entry), entry, stamp)
    return _finish(row, rows, step_embed_text(row), step_search_text(row), config)
