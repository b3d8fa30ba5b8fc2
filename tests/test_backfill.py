"""Searchable before the vectors are done: with more texts to embed than ``index.vector_batch``,
`mem index` commits the rows and the full-text index first (search works, in BM25 order, and says
so), then the vectors in batches; interrupted, the next run embeds only what is left."""

from __future__ import annotations

import io
import json

import pytest

from conftest import build_workspace, make_step
from mem_retrieval.cli.main import run as run_cli
from mem_retrieval.indexers import build
from mem_retrieval.memory import Memory
from mem_retrieval.retrieval.retriever import NEWER_INDEX
from mem_retrieval.text import embed


@pytest.fixture
def small_batches(tmp_path):
    ws = build_workspace(tmp_path / "ws")
    (ws.root / "solve" / "mem.toml").write_text("[index]\nvector_batch = 4\n")
    return ws


def test_a_full_index_in_batches_equals_one_in_a_single_commit(small_batches, tmp_path):
    messages = []
    memory = Memory.open(small_batches.root)
    report = memory.index(progress=False, on_message=messages.append)
    assert report.searchable_seconds is not None and report.searchable_seconds <= report.seconds
    assert messages and messages[0].startswith("searchable (BM25 order) after")
    meta = json.loads((small_batches.root / ".mem" / "meta.json").read_text())
    assert meta["pending"] == 0
    steps = memory.retriever.searcher.table("steps").to_arrow()
    assert all(steps["embedded"].to_pylist())
    # the oracle: the same workspace indexed in one commit has the same vectors, row for row
    other = build_workspace(tmp_path / "one")
    one = Memory.open(other.root)
    one.index(progress=False)
    theirs = {r["gid"]: r["vector"] for r in one.retriever.searcher.table("steps").to_arrow().to_pylist()}
    for row in steps.to_pylist():
        assert row["vector"] == pytest.approx(theirs[row["gid"]], abs=1e-6)


def test_search_during_the_backfill_says_bm25_and_a_rerun_finishes_only_what_is_left(small_batches, monkeypatch):
    real = build.embed_texts
    calls = []

    def interrupted(index, rows, hashes, config, progress):
        calls.append(len(hashes))
        if len(calls) == 2:  # the second batch of the backfill: Ctrl-C
            raise KeyboardInterrupt
        return real(index, rows, hashes, config, progress)

    monkeypatch.setattr(build, "embed_texts", interrupted)
    memory = Memory.open(small_batches.root)
    with pytest.raises(KeyboardInterrupt):
        memory.index(progress=False)
    meta = json.loads((small_batches.root / ".mem" / "meta.json").read_text())
    assert calls[0] == 4 and meta["pending"] > 0
    assert meta["pending"] == len(waiting(small_batches.root))
    out, err = io.StringIO(), io.StringIO()
    code = run_cli(["--workspace", str(small_batches.root), "archive-search", "statement of a2"], out=out, err=err)
    assert code == 0 and "BM25 order: vectors not computed yet" in out.getvalue().splitlines()[0]
    assert "'rerank-graph' answered as 'graph'" in err.getvalue()
    # no index is running now: the note does not say one is, and says what finishes them
    assert "not computed yet (BM25 order until then): `mem index` computes them, the one running or, " \
           "if it was stopped, the next" in err.getvalue()
    monkeypatch.setattr(build, "embed_texts", real)
    held = Memory.open(small_batches.root)  # a session that read the index before the vectors
    pending = held.archive_search("statement of a2").pending
    assert 0 < pending <= meta["pending"]
    before = embed.EMBEDDED["texts"]
    report = Memory.open(small_batches.root).index(progress=False)
    assert embed.EMBEDDED["texts"] - before == meta["pending"] == report.embedded  # not the first 4 again
    # the held session still reads its version: its note says what brings the vectors, not `mem index`
    page = held.archive_search("statement of a2")
    assert page.pending == pending and [n.message.split(": ", 2)[2] for n in page.notes] == \
        [NEWER_INDEX]
    held.reopen()
    page = held.archive_search("statement of a2")
    assert page.pending == 0 and page.notes == ()
    assert json.loads((small_batches.root / ".mem" / "meta.json").read_text())["pending"] == 0
    code = run_cli(["--workspace", str(small_batches.root), "archive-search", "statement of a2"],
                   out=(out := io.StringIO()), err=(err := io.StringIO()))
    assert code == 0 and "BM25 order" not in out.getvalue() and err.getvalue() == ""
    total = len(texts(small_batches.root))  # every distinct text the index holds, embedded once
    assert total == report.embedded + 4
    assert waiting(small_batches.root) == set()


def test_each_table_answers_in_bm25_order_only_while_its_own_vectors_wait(small_batches, monkeypatch):
    """A backfill of step texts left `recall-search` answering in BM25 order, every event embedded,
    and saying nothing of it (pending_vectors 0, no note). Each table's search is degraded while
    its own texts wait, and its page says so: steps first, then events (a stopped backfill each)."""
    real = build.embed_texts
    Memory.open(small_batches.root).index(progress=False)

    def stopped(index, rows, hashes, config, progress):
        raise KeyboardInterrupt

    def interrupted_index():
        monkeypatch.setattr(build, "embed_texts", stopped)
        with pytest.raises(KeyboardInterrupt):
            Memory.open(small_batches.root).index(progress=False)
        monkeypatch.setattr(build, "embed_texts", real)

    def cli(*argv):
        out, err = io.StringIO(), io.StringIO()
        code = run_cli(["--workspace", str(small_batches.root), *argv], out=out, err=err)
        return code, out.getvalue().splitlines()[0], err.getvalue()

    for n in range(6):  # 6 new step texts: more than a batch of 4, committed before any vector
        small_batches.add_step("beta", make_step(f"w{n}", statement=f"wombat lemma {n}"))
    interrupted_index()
    code, head, err = cli("archive-search", "wombat lemma")
    assert code == 0 and head.endswith("· BM25 order: vectors not computed yet")
    assert "'rerank-graph' answered as 'graph': the vectors of 6 texts are not computed yet" in err
    searcher = Memory.open(small_batches.root).retriever.searcher
    assert (searcher.pending_in("steps"), searcher.pending_in("events")) == (6, 0)
    assert searcher.degraded("rerank", "events") is None  # recall reranks: its vectors are all there
    assert searcher.degraded("rerank", "steps") == ("rerank", "bm25")
    code, head, err = cli("recall-search", "five steps")  # every event embedded: reranked, no note
    assert (code, err) == (0, "") and "BM25" not in head
    assert json.loads("".join(cli("--json", "recall-search", "five steps")[1]))["pending_vectors"] == 0
    Memory.open(small_batches.root).index(progress=False)
    with small_batches.events_path("alpha").open("a", encoding="utf-8") as log:
        for n in range(6):
            log.write(json.dumps({"time": f"2026-10-18T0{n}:00:00Z", "actor": "root", "kind": "audit",
                                  "ids": [], "text": f"numbat verdict {n}"}) + "\n")
    interrupted_index()
    code, head, err = cli("recall-search", "numbat verdict")
    assert code == 0 and head.endswith("· BM25 order: vectors not computed yet")
    assert err == ("mem: 'rerank' answered as 'bm25': the vectors of 6 texts are not computed yet (BM25 "
                   "order until then): `mem index` computes them, the one running or, if it was "
                   "stopped, the next\n")
    code, head, err = cli("archive-search", "wombat lemma")  # every step embedded now
    assert (code, err) == (0, "") and "BM25" not in head
    code, head, err = cli("recall-search", "--id", "a1", "--run", "alpha")  # a listing: no vectors
    assert (code, err) == (0, "") and "BM25" not in head


def texts(root, embedded: bool | None = None) -> set[str]:
    """The distinct texts of the embedded tables at the versions meta.json pins (``embedded``:
    only those whose vectors are done, or only those still waiting)."""
    searcher = Memory.open(root).retriever.searcher
    found = set()
    for name in ("steps", "events"):
        rows = searcher.table(name).to_arrow().to_pylist()
        found |= {r["text_hash"] for r in rows if embedded is None or r["embedded"] == embedded}
    return found


def waiting(root) -> set[str]:
    return texts(root, embedded=False)


def interrupt_at_batch(monkeypatch, root, batch: int) -> None:
    """`mem index` of ``root`` stopped (Ctrl-C) as it embeds its ``batch``-th batch of vectors."""
    real, calls = build.embed_texts, []

    def interrupted(index, rows, hashes, config, progress):
        calls.append(len(hashes))
        if len(calls) == batch:
            raise KeyboardInterrupt
        return real(index, rows, hashes, config, progress)

    monkeypatch.setattr(build, "embed_texts", interrupted)
    with pytest.raises(KeyboardInterrupt):
        Memory.open(root).index(progress=False)
    monkeypatch.setattr(build, "embed_texts", real)


def test_indexing_some_runs_finishes_another_runs_unfinished_vectors_and_says_so(small_batches, monkeypatch):
    """An interrupted backfill, then `mem index beta` (or `record beta`): alpha's rows kept waiting
    for good, searches answering in BM25 order and sending to `mem index`; the narrowed run embeds
    them too, as it rescans a run whose library entries drifted."""
    interrupt_at_batch(monkeypatch, small_batches.root, 2)
    left = waiting(small_batches.root)
    assert left
    messages: list[str] = []
    report = Memory.open(small_batches.root).index(["beta"], progress=False, on_message=messages.append)
    assert "the vectors of alpha were left to compute by a run that stopped: indexing it as well" in messages
    assert waiting(small_batches.root) == set() and report.embedded == len(left)
    assert json.loads((small_batches.root / ".mem" / "meta.json").read_text())["pending"] == 0
    messages.clear()
    Memory.open(small_batches.root).index(["beta"], progress=False, on_message=messages.append)
    assert not any("left to compute" in m for m in messages)  # nothing waits now: beta alone


def test_a_record_says_which_other_runs_its_index_finishes_and_a_bad_one_stops_none(small_batches,
                                                                                     monkeypatch):
    """`record RUN` embedded the other runs' waiting rows and said nothing (its index's messages
    were dropped); a waiting run whose tree.json is bad input (an agent mid-write) refused `mem
    index RUN` of a sound run, whose changes then went unindexed."""
    interrupt_at_batch(monkeypatch, small_batches.root, 2)
    assert waiting(small_batches.root)
    tree = small_batches.root / "alpha" / "tree.json"
    good = tree.read_text(encoding="utf-8")
    tree.write_text('{"run": "alpha", broken', encoding="utf-8")
    small_batches.edit_step("beta", "b1", statement="zorblax lemma")
    out, err = io.StringIO(), io.StringIO()
    assert run_cli(["--workspace", str(small_batches.root), "index", "beta", "--no-progress"],
                   out=out, err=err) == 0
    assert err.getvalue().startswith("the vectors of alpha were left to compute by a run that stopped; not "
                                     f"now, as a file of theirs is bad input: {tree}:1: invalid JSON")
    assert [h.id for h in Memory.open(small_batches.root).archive_search("zorblax", strategy="bm25").hits] \
        == ["beta/b1"]
    assert waiting(small_batches.root)  # alpha's still wait
    tree.write_text(good, encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    assert run_cli(["--workspace", str(small_batches.root), "record", "beta"], out=out, err=err) == 0
    assert "mem: the vectors of alpha were left to compute by a run that stopped: indexing it as well\n" \
        in err.getvalue()
    assert waiting(small_batches.root) == set()


def test_bm25_reads_a_published_batch_as_the_whole_index_does(small_batches, monkeypatch, tmp_path):
    """The rows each batch rewrote with their vectors were counted again in BM25's statistics
    until the last batch (the full-text index was built again only then): a search in BM25 order
    during the backfill, or after a run stopped, scored otherwise than the same texts indexed whole.
    Oracle: the same workspace indexed in one commit, `--strategy bm25`, score for score."""
    interrupt_at_batch(monkeypatch, small_batches.root, 2)  # the first batch published
    assert waiting(small_batches.root)
    whole = build_workspace(tmp_path / "whole")
    Memory.open(whole.root).index(progress=False)

    def bm25(root, query):
        page = Memory.open(root).archive_search(query, strategy="bm25", page=1)
        return [(hit.id, round(hit.score, 6)) for hit in page.hits], page.total

    for query in ("statement of a2", "proof", "statement", "a4 a1 statement of b1"):
        assert bm25(small_batches.root, query) == bm25(whole.root, query), query
