"""What a query asks for beyond its words: ids named in it, filters, and an as-of point."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from mem_retrieval.records.errors import UsageError
from mem_retrieval.records.ids import ref_problem, split_gid
from mem_retrieval.records.types import KINDS, STATUSES

_SPLIT = re.compile(r"[\s,;{}\[\]()\"`]+")
_STRIP = ".:!?"


_ID_LIKE = re.compile(r"[0-9]|\w[-_.']\w")


def _words(query: str) -> list[str]:
    return [w for w in (w.strip(_STRIP) for w in _SPLIT.split(query.strip())) if w]


def _id_like(word: str) -> bool:
    """A global id, or a bare word with a digit or one of - _ . ' inside it (A5-7, log-sum)."""
    run, step = split_gid(word)
    return run is not None or bool(_ID_LIKE.search(step))


def ids_in_query(query: str) -> list[str]:
    """Candidate step ids or global ids written in a query, in order, without repeats.

    A query that is one word is always a candidate. Inside a longer query a bare word counts only
    when it looks like an id (a digit, or one of - _ . ' inside it) so that plain words such as
    'concave' do not jump the ranking; a global id (run/step) always counts."""
    words = _words(query)
    out: list[str] = []
    for word in words:
        if ref_problem(word) is None and (len(words) == 1 or _id_like(word)) and word not in out:
            out.append(word)
    return out


def exact_lookup(query: str) -> bool:
    """Whether the query is only ids that look like ids (``A5-7``, ``run/A5-7 A2-4``): an exact
    lookup, answered by the id hits alone (a one-word plain query such as 'concave' is also a text
    query)."""
    words = _words(query)
    return bool(words) and all(ref_problem(w) is None and _id_like(w) for w in words)


@dataclass(frozen=True)
class Until:
    """Memory as it stood at an event: events up to it, steps some event had named by then."""

    micros: int                 # the time cut (epoch microseconds)
    run: str | None = None      # with ``seq``: the run whose log position is exact
    seq: int | None = None


@dataclass(frozen=True)
class Filters:
    run: str | None = None
    kind: str | None = None
    status: str | None = None
    exclude_run: str | None = None
    hide: str | None = None     # a step's global id, invisible to the search (leave-one-out)
    until: Until | None = None
    library: bool = False       # only steps in solve/library.jsonl (the boolean column in_library)

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in KINDS:
            raise UsageError(f"--kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.status is not None and self.status not in STATUSES:
            raise UsageError(f"--status {self.status!r} is not one of {', '.join(STATUSES)}")

    def where(self, table: str, extra: list[str] | None = None) -> str | None:
        """The prefilter as SQL, built only from integer keys and the closed enums above."""
        from mem_retrieval.indexers.store import key

        parts = list(extra or [])
        if self.run is not None:
            parts.append(f"run_key = {key(self.run)}")
        if self.exclude_run is not None:
            parts.append(f"run_key != {key(self.exclude_run)}")
        if self.hide is not None and table == "steps":
            parts.append(f"key != {key(self.hide)}")
        if table == "steps":
            if self.kind is not None:
                parts.append(f"kind = '{KINDS[KINDS.index(self.kind)]}'")
            if self.status is not None:
                parts.append(f"status = '{STATUSES[STATUSES.index(self.status)]}'")
            if self.library:
                parts.append("in_library = true")
        if self.until is not None:
            cut = int(self.until.micros)
            if table == "steps":
                by_time = f"(named_ts >= 0 AND named_ts <= {cut})"
                if self.until.run is not None and self.until.seq is not None:
                    run_key = key(self.until.run)
                    parts.append(f"((run_key = {run_key} AND named_seq >= 0 AND named_seq <= "
                                 f"{int(self.until.seq)}) OR (run_key != {run_key} AND {by_time}))")
                else:
                    parts.append(by_time)
            else:
                if self.until.run is not None and self.until.seq is not None:
                    run_key = key(self.until.run)
                    parts.append(f"((run_key = {run_key} AND seq <= {int(self.until.seq)}) OR "
                                 f"(run_key != {run_key} AND ts <= {cut}))")
                else:
                    parts.append(f"ts <= {cut}")
        return " AND ".join(f"({p})" for p in parts) if parts else None


def parse_time_arg(value: str) -> datetime | None:
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError:
        return None
    if stamp.tzinfo is None:
        raise UsageError(f"--until {value!r}: a time needs a zone (Z or +hh:mm)")
    return stamp
