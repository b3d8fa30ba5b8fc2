"""Evaluation files in the community's formats (SPEC §10): queries JSONL, TREC qrels, TREC runs.

A run is ``{qid: {doc_id: score}}`` and qrels ``{qid: {doc_id: grade}}``, as BEIR, ranx and
ir_measures take them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mem_retrieval.records.errors import InputError
from mem_retrieval.records.parse import read_text

Run = dict[str, dict[str, float]]
Qrels = dict[str, dict[str, int]]


@dataclass(frozen=True)
class Query:
    qid: str
    query: str
    setting: str | None = None
    run: str | None = None
    step: str | None = None     # the step the query is (SPEC §10): hidden, leave-one-out


def read_queries(path: Path) -> list[Query]:
    """Queries JSONL: ``{"qid", "query", "setting"?, "run"?, "step"?}`` a line; qids unique."""
    file = str(path)
    queries: list[Query] = []
    seen: set[str] = set()
    for number, line in enumerate(read_text(Path(path)).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(file, number, None, f"invalid JSON: {err.msg}") from None
        if not isinstance(obj, dict):
            raise InputError(file, number, None, "must be a JSON object")
        for key in ("qid", "query"):
            if not isinstance(obj.get(key), str) or not obj[key].strip():
                raise InputError(file, number, key, "missing or not a non-empty string")
        for key in ("setting", "run", "step"):
            if obj.get(key) is not None and not isinstance(obj[key], str):
                raise InputError(file, number, key, "must be a string")
        if obj.get("step") is not None and "/" not in obj["step"]:
            raise InputError(file, number, "step", f"{obj['step']!r} is not a global id (run/step)")
        unknown = set(obj) - {"qid", "query", "setting", "run", "step"}
        if unknown:
            raise InputError(file, number, sorted(unknown)[0], "unknown field")
        if obj["qid"] in seen:
            raise InputError(file, number, "qid", f"duplicate qid {obj['qid']!r}")
        seen.add(obj["qid"])
        queries.append(Query(obj["qid"], obj["query"], obj.get("setting") or None, obj.get("run") or None,
                             obj.get("step") or None))
    return queries


def read_qrels(path: Path) -> Qrels:
    """TREC qrels: ``qid 0 doc_id grade`` a line."""
    file = str(path)
    qrels: Qrels = {}
    for number, line in enumerate(read_text(Path(path)).splitlines(), start=1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 4:
            raise InputError(file, number, None, f"expected 'qid 0 doc_id grade', got {len(parts)} fields")
        qid, _, doc, grade = parts
        try:
            value = int(grade)
        except ValueError:
            raise InputError(file, number, "grade", f"{grade!r} is not an integer") from None
        qrels.setdefault(qid, {})[doc] = value
    return qrels


def write_trec_run(path: Path, runs: dict[str, Run]) -> None:
    """Rankings as TREC run lines ``qid Q0 doc rank score tag``, one tag per strategy."""
    with Path(path).open("w", encoding="utf-8") as out:
        for tag, run in runs.items():
            for qid in sorted(run):
                ranked = sorted(run[qid].items(), key=lambda item: (-item[1], item[0]))
                for rank, (doc, score) in enumerate(ranked, start=1):
                    out.write(f"{qid} Q0 {doc} {rank} {score:.6f} {tag}\n")
