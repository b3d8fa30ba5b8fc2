"""Small immutable results: a Hit (a step), an EventHit (an event), a Page of either."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from collections.abc import Callable
from typing import Any, Generic, TypeVar

EXCERPT_CHARS = 300  # an event hit's excerpt: the first characters of its brief or return


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
    unmet_hyp: tuple[str, ...] = ()  # its hypotheses the query's setting does not imply (M3 refuses
    # it then, whatever its setting_match: only a hit named by id or asked with any_setting has any)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"unmet_hyp": list(self.unmet_hyp)}


@dataclass(frozen=True, slots=True)
class EventHit:
    """One event found by recall_search, with its brief or return: an excerpt, and whole."""

    id: str             # run#seq
    run: str
    seq: int
    time: str
    actor: str
    kind: str
    ids: tuple[str, ...]
    text: str
    path: str
    excerpt: str        # the first EXCERPT_CHARS of the brief or return, white space folded
    body: str | None    # the brief or return, whole, as the file stands (None: the event has none)
    score: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"ids": list(self.ids)}


H = TypeVar("H", Hit, EventHit)


@dataclass(frozen=True, slots=True)
class Note:
    """Something to know about a result: why it is empty, or what a parameter did. ``message``
    starts with the value of ``param`` (none: "", a note on the result as a whole); ``see`` names
    a parameter that would show more. The API spells parameters by name, the command line as its
    flags (``render(spell)``)."""

    param: str
    message: str
    see: str | None = None

    def render(self, spell: "Callable[[str], str]" = str) -> str:
        text = f"{spell(self.param)} {self.message}" if self.param else self.message
        return text + (f" ({spell(self.see)} shows them)" if self.see else "")


@dataclass(frozen=True, slots=True)
class Page(Generic[H]):
    """Page ``page`` of ``pages`` (``page_size`` hits a page) over ``total`` hits."""

    hits: tuple[H, ...]
    page: int
    pages: int
    total: int
    page_size: int
    query: str | None = None
    setting: str | None = None
    remaining: float | None = None  # estimated relevant hits on later pages (see retrieval.hint)
    notes: tuple[Note, ...] = ()    # why the list is empty, or what a parameter did
    pending: int = 0                # texts still waiting for their vectors: BM25 order meanwhile
    list_id: str | None = None      # the whole list's name (``paging.list_id``), for the next page's call

    @property
    def first_rank(self) -> int:
        """The rank (1-based, in the whole result list) of this page's first hit."""
        return (self.page - 1) * self.page_size + 1

    @property
    def left(self) -> int:
        """Hits on the pages after this one."""
        return max(self.total - (self.first_rank - 1) - len(self.hits), 0)

    def as_dict(self) -> dict[str, Any]:
        return {"query": self.query, "setting": self.setting, "page": self.page, "pages": self.pages,
                "total": self.total, "remaining": self.remaining, "pending_vectors": self.pending,
                "list_id": self.list_id, "hits": [hit.as_dict() for hit in self.hits],
                "notes": [note.render() for note in self.notes]}  # the front ends spell them their way
