"""Pages of a fixed result list: they partition it (no repeats, no gaps) in order."""

from __future__ import annotations

import math
from collections.abc import Sequence
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
