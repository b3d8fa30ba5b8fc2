"""Pages of a fixed result list: they partition it (no repeats, no gaps) in order."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import TypeVar

from mem_retrieval.records.errors import BadInput, Refused, plural

T = TypeVar("T")


def shown_score(score: float) -> float:
    """The score a hit shows on its page, and the one the paging hint reads: four decimals."""
    return round(score, 4)


def page_count(total: int, page_size: int) -> int:
    return math.ceil(total / page_size) if total else 0


def check_page(page: int) -> int:
    """``page`` when it can be a page number, else BadInput: checked before a search runs too."""
    if page < 1:
        raise BadInput(f"{page} is not a page number (pages start at 1)", param="page")
    return page


LIST_ID = re.compile(r"[0-9a-f]{16}")


def list_id(ids: Iterable[str]) -> str:
    """The name of a whole result list: 16 hex digits of BLAKE2b over its hits' ids in order. A
    page carries it; given back with the next page's call, it says whether the list is still the
    one the pages before came from (an index run between the calls changes the list, and pages
    cut from two lists repeat or skip hits)."""
    import hashlib

    return hashlib.blake2b("\n".join(ids).encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def check_list_id(value: str | None) -> str | None:
    """``value`` when it can be a ``list_id`` (or None), else BadInput."""
    if value is not None and not LIST_ID.fullmatch(value):
        raise BadInput(f"{value!r} is not a list_id a page gave (16 hex digits)", param="list_id")
    return value


def list_changed(given: str | None, current: str, page: int = 2) -> str | None:
    """What to say when ``given`` (the list_id of a page read before) is not the list now, on
    ``page`` of it (page 1: what it shows is where to begin)."""
    if given is None or given == current:
        return None
    said = (f"{given}: the result list is not the one that page came from (the index was updated "
            f"between the calls: `mem index`, `mem record`; or it is another query's list); ")
    if page == 1:
        return said + (f"this is page 1 of the list now ({current}): the pages read before may repeat or "
                       "miss its hits")
    return said + (f"this is the list now ({current}): the pages read before may repeat or miss its hits, "
                   "so read it from page 1")


def page_slice(items: Sequence[T], page: int, page_size: int, noun: str = "hit") -> tuple[T, ...]:
    """Items of ``page`` (1-based). Past the last page: Refused saying how many pages there are
    (and how many items, each a ``noun``)."""
    check_page(page)
    pages = page_count(len(items), page_size)
    if page > max(pages, 1):
        if not pages:
            raise Refused(f"page {page}: no {noun}s, so no page past the first (an empty page 1)")
        raise Refused(f"page {page} of {pages}: there {'is' if pages == 1 else 'are'} only "
                      f"{plural(pages, 'page')} ({plural(len(items), noun)})")
    start = (page - 1) * page_size
    return tuple(items[start:start + page_size])
