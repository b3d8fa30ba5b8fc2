"""Pages of a fixed result list: they partition it (no repeats, no gaps) in order."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

from mem_retrieval.records.errors import NotFound, UsageError

T = TypeVar("T")


def page_count(total: int, page_size: int) -> int:
    return math.ceil(total / page_size) if total else 0


def page_slice(items: Sequence[T], page: int, page_size: int) -> tuple[T, ...]:
    """Items of ``page`` (1-based). Past the last page: NotFound saying how many pages there are."""
    if page < 1:
        raise UsageError(f"page must be 1 or more, not {page}")
    pages = page_count(len(items), page_size)
    if page > max(pages, 1):
        raise NotFound(f"page {page} of {pages}: there {'is' if pages == 1 else 'are'} only "
                       f"{pages} page{'s' if pages != 1 else ''} ({len(items)} hits)")
    start = (page - 1) * page_size
    return tuple(items[start:start + page_size])
