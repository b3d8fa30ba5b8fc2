"""What travels the query path: typed rows read from the index, and candidates carrying their
feature scores until one final score orders them.

A ``Candidate`` is frozen; each stage that scores it makes a new one (``scored``). A candidate from
the in-memory id map is *light* (``row`` None, ``row_id`` set): only the rows a page shows are read
in full (``Searcher.complete``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True, slots=True)
class StepRow:
    """The columns of a steps row a hit shows, and its hypotheses (the setting rule weighs them)."""

    COLUMNS: ClassVar[tuple[str, ...]] = ("gid", "run", "sid", "kind", "statement", "status",
                                          "grade", "setting", "in_library", "inserted_ts", "hyp")

    gid: str
    run: str
    sid: str
    kind: str
    statement: str
    status: str
    grade: str | None
    setting: str
    in_library: bool
    inserted_ts: int    # its library entry's insertion (epoch micros; NEVER: none)
    hyp: tuple[str, ...]

    @classmethod
    def of(cls, row: dict[str, Any]) -> "StepRow":
        return cls(row["gid"], row["run"], row["sid"], row["kind"], row["statement"], row["status"],
                   row["grade"], row["setting"], bool(row["in_library"]), int(row["inserted_ts"]),
                   tuple(row["hyp"] or ()))


@dataclass(frozen=True, slots=True)
class EventRow:
    """The columns of an events row a hit shows."""

    COLUMNS: ClassVar[tuple[str, ...]] = ("gid", "run", "seq", "time", "actor", "kind", "ids",
                                          "text", "path", "body")

    gid: str
    run: str
    seq: int
    time: str
    actor: str
    kind: str
    ids: tuple[str, ...]
    text: str
    path: str
    body: str

    @classmethod
    def of(cls, row: dict[str, Any]) -> "EventRow":
        return cls(row["gid"], row["run"], row["seq"], row["time"], row["actor"], row["kind"],
                   tuple(row["ids"]), row["text"], row["path"], row["body"])


ROW_TYPES: dict[str, type[StepRow] | type[EventRow]] = {"steps": StepRow, "events": EventRow}


@dataclass(frozen=True, slots=True, eq=False)
class Candidate:
    """One entry of a result list: the row, its feature scores, the final score, how it was found
    (``id``: the query named it; ``text``: the text search found it)."""

    gid: str
    row: StepRow | EventRow | None = None
    row_id: int | None = None
    vector: "np.ndarray | None" = None
    bm25: float | None = None
    cosine: float | None = None
    vote: float | None = None       # the similarity-weighted votes of the steps citing it
    expanded: float | None = None   # the best cosine of it and of the voters citing it
    prior: float | None = None      # log(1 + how many visible steps cite it)
    context: float | None = None    # log(1 + how many steps of the query's own run cite it)
    affinity: float | None = None   # log(1 + how many links go from those steps to its run)
    score: float = 0.0
    via: str = "text"

    def scored(self, score: float, **features: float) -> "Candidate":
        return replace(self, score=score, **features)


def from_arrow(data, table: str, vectors: "np.ndarray | None" = None,
               scores: list[float] | None = None) -> list[Candidate]:
    """Candidates from an Arrow result of ``table`` (its row columns, and ``vector`` when
    selected); vectors are sliced from one numpy block. ``vectors`` and ``scores`` (read into
    ``bm25``) give them from elsewhere (a table held in memory), row for row."""
    row_type = ROW_TYPES[table]
    rows = data.select([c for c in row_type.COLUMNS]).to_pylist()
    if vectors is None and "vector" in data.column_names and data.num_rows:
        column = data["vector"].combine_chunks()
        vectors = column.flatten().to_numpy().reshape(len(column), -1)
    return [Candidate(row["gid"], row_type.of(row), vector=None if vectors is None else vectors[i],
                      bm25=None if scores is None else float(scores[i]))
            for i, row in enumerate(rows)]


def in_gid_order(data) -> tuple:
    """The ``gid`` column of an Arrow table as an array, and each gid's place in gid order (what
    a tie of scores is broken by, on every path)."""
    import numpy as np

    gids = np.asarray(data["gid"].to_pylist(), dtype=object)
    rank = np.empty(len(gids), dtype=np.int64)
    rank[np.argsort(gids, kind="stable")] = np.arange(len(gids))
    return gids, rank
