"""Pages partition the result list: no repeats, no gaps, stable; past the end says how many."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mem_retrieval.records.errors import Refused, BadInput
from conftest import make_step
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


def _list_id(ids) -> str:
    """The oracle: BLAKE2b, 8 bytes, over the ids in order, one a line."""
    import hashlib

    return hashlib.blake2b("\n".join(ids).encode(), digest_size=8).hexdigest()


def test_a_page_names_its_list_and_says_when_an_index_run_changed_it(workspace, mem):
    """An agent pages a list while an index run puts a new hit at its top: page 2 of the new list
    repeats page 1's last hit and the new top is never read. Each page names the whole list
    (``list_id``); given back, a note says the list has changed, and to read it from page 1.
    Before, page 2 said nothing (`notes: []`)."""
    import json

    from mem_retrieval.memory import Memory

    assert mem("index", "--no-progress")[0] == 0
    code, out, _ = mem("--json", "archive-search", "statement")
    first = json.loads(out)
    ids = [hit.id for hit in Memory.open(workspace.root).archive_hits("statement")]
    assert (first["list_id"], first["total"], first["notes"]) == (_list_id(ids), 6, [])
    text = mem("archive-search", "statement")[1]
    assert f"more: --page 2 --list-id {first['list_id']} (1 more hit)" in text
    same = json.loads(mem("--json", "archive-search", "statement", "--page", "2", "--list-id",
                          first["list_id"])[1])
    assert (same["list_id"], same["notes"]) == (first["list_id"], [])  # nothing changed
    workspace.add_step("alpha", make_step("a6", statement="statement, statement: the statement"))
    workspace.write_events("alpha", workspace.events("alpha") + [
        {"time": "2026-10-17T04:00:00Z", "actor": "A1", "kind": "return", "ids": ["a6"], "text": "a6"}])
    assert mem("index", "--no-progress")[0] == 0
    code, out, _ = mem("--json", "archive-search", "statement", "--page", "2", "--list-id", first["list_id"])
    after = json.loads(out)
    ids = [hit.id for hit in Memory.open(workspace.root).archive_hits("statement")]
    assert ids[0] == "alpha/a6" and after["total"] == 7 and after["list_id"] == _list_id(ids)
    assert after["notes"] == [f"--list-id {first['list_id']}: the result list is not the one that page "
                              "came from (the index was updated between the calls: `mem index`, `mem "
                              "record`; or it is another query's list); this is the list now "
                              f"({after['list_id']}): the pages read before may repeat or miss its hits, "
                              "so read it from page 1"]
    assert json.loads(mem("--json", "archive-search", "statement", "--page", "2")[1])["notes"] == []
    # that page goes on at page 1 of the list now: its page 3, offered before, read on in the new
    # list without a note, and its new top was never shown
    text = mem("archive-search", "statement", "--page", "2", "--list-id", first["list_id"])[1]
    assert text.endswith(f"more: --page 1 --list-id {after['list_id']} (the list changed: read it again "
                         "from page 1)\n")
    # page 1 of the list now is where to begin: it says so, and goes on to page 2
    code, text, err = mem("archive-search", "statement", "--list-id", first["list_id"])
    assert err.rstrip().endswith(f"this is page 1 of the list now ({after['list_id']}): the pages read "
                                 "before may repeat or miss its hits")
    assert f"more: --page 2 --list-id {after['list_id']} (2 more hits)" in text
    code, out, err = mem("archive-search", "statement", "--page", "3", "--list-id", first["list_id"])
    assert code == 1 and err.startswith(f"mem: --list-id {first['list_id']}: the result list is not the one")
    assert err.endswith("; page 3 of 2: there are only 2 pages (7 hits)\n")
    with pytest.raises(Refused, match=rf"^list_id {first['list_id']}: the result list .*; page 3 of 2: "):
        Memory.open(workspace.root).archive_search("statement", page=3, list_id=first["list_id"])
    code, out, err = mem("archive-search", "statement", "--list-id", "A5-7")
    assert (code, err) == (2, "mem: --list-id 'A5-7' is not a list_id a page gave (16 hex digits)\n")


def test_recall_pages_name_their_list_too(workspace, mem):
    import json

    assert mem("index", "--no-progress")[0] == 0
    first = json.loads(mem("--json", "recall-search", "steps")[1])
    workspace.write_events("beta", workspace.events("beta") + [
        {"time": "2026-10-18T02:00:00Z", "actor": "B1", "kind": "return", "ids": ["b1"],
         "text": "steps steps"}])
    assert mem("index", "--no-progress")[0] == 0
    after = json.loads(mem("--json", "recall-search", "steps", "--list-id", first["list_id"])[1])
    assert after["list_id"] != first["list_id"] and after["hits"][0]["id"] == "beta#2"
    assert after["notes"][0].startswith(f"--list-id {first['list_id']}: the result list is not the one")
