"""Small immutable results: a Hit (a step), an EventHit (an event), a Page of either."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Generic, TypeVar


@dataclass(frozen=True, slots=True)
class Hit:
    """One step found by archive_search (SPEC §9)."""

    id: str             # global id run/step
    run: str
    kind: str
    statement: str
    status: str
    grade: str | None
    setting: str
    setting_match: str | None  # same | implied | unknown | incompatible; None without a query setting
    score: float
    in_library: bool = False
    via: str = "text"   # "id" when the query named it, else "text"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class EventHit:
    """One event found by recall_search, with an excerpt of its brief or return."""

    id: str             # run#seq
    run: str
    seq: int
    time: str
    actor: str
    kind: str
    ids: tuple[str, ...]
    text: str
    path: str
    excerpt: str
    score: float

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ids"] = list(self.ids)
        return data


H = TypeVar("H", Hit, EventHit)


@dataclass(frozen=True, slots=True)
class Page(Generic[H]):
    """Page ``page`` of ``pages`` (5 hits a page) over ``total`` hits."""

    hits: tuple[H, ...]
    page: int
    pages: int
    total: int
    query: str | None = None
    setting: str | None = None
    remaining: float | None = None  # estimated relevant hits on later pages (see retrieval.hint)

    def as_dict(self) -> dict[str, Any]:
        return {"query": self.query, "setting": self.setting, "page": self.page, "pages": self.pages,
                "total": self.total, "remaining": self.remaining,
                "hits": [hit.as_dict() for hit in self.hits]}
