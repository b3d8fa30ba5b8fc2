"""Pages partition the result list: no repeats, no gaps, stable; past the end says how many."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mem_retrieval.records.errors import Refused, BadInput
from mem_retrieval.retrieval.paging import page_count, page_slice


@given(st.integers(min_value=0, max_value=60), st.integers(min_value=1, max_value=7))
def test_pages_partition_the_list(total, size):
    items = list(range(total))
    pages = page_count(total, size)
    seen = [x for p in range(1, pages + 1) for x in page_slice(items, p, size)]
    assert seen == items  # brute-force oracle: concatenated pages are the list itself
    assert all(0 < len(page_slice(items, p, size)) <= size for p in range(1, pages + 1))


def test_asking_past_the_last_page_says_how_many():
    with pytest.raises(Refused, match="only 2 pages .7 hits"):
        page_slice(list(range(7)), 3, 5)
    with pytest.raises(BadInput):
        page_slice(list(range(7)), 0, 5)


def test_an_empty_list_has_an_empty_first_page():
    assert page_slice([], 1, 5) == ()
    assert page_count(0, 5) == 0
