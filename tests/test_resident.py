"""The steps table held in memory (retrieval/resident.py): BM25 worked out by hand, over the whole
table and over a cut memory (against an index of those rows alone, on random texts), the prefilter
as a numpy mask agreeing with LanceDB's SQL filter row for row, and every strategy answering from
memory exactly as from the index (same hits, same order, scores within float32 rounding), with the
one-shot CLI call never paying for it."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest

import mem_retrieval.retrieval.search as search_module
from mem_retrieval.indexers.store import key
from mem_retrieval.memory import Memory
from mem_retrieval.retrieval.graph import CitationGraph
from mem_retrieval.retrieval.query import ArchiveQuery, Filters, Hidden, Until
from mem_retrieval.retrieval.bm25 import Bm25Index
from mem_retrieval.retrieval.resident import best
from mem_retrieval.retrieval.strategies import STRATEGIES, Request

RESIDENT_AFTER = search_module.RESIDENT_AFTER  # as shipped (the pair fixture raises it)

def lance_bm25(tf: int, df: int, n: int, length: int, average: float) -> float:
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    return idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / average))


def test_bm25_by_hand():
    index = Bm25Index.build(pa.array(["a b a", "b c", "c", ""]))
    # N = 4 documents, lengths 3, 2, 1, 0: average 1.5; a in 1 document, c in 2
    scores = index.scores("a c")
    assert scores[0] == pytest.approx(lance_bm25(2, 1, 4, 3, 1.5), rel=1e-6)
    assert scores[1] == pytest.approx(lance_bm25(1, 2, 4, 2, 1.5), rel=1e-6)
    assert scores[2] == pytest.approx(lance_bm25(1, 2, 4, 1, 1.5), rel=1e-6)
    assert scores[3] == 0.0
    # a word written twice counts twice (as in LanceDB); an unknown word counts for nothing
    assert index.scores("c c zzz")[2] == pytest.approx(2 * lance_bm25(1, 2, 4, 1, 1.5), rel=1e-6)
    assert not index.scores("zzz").any()


def test_bm25_over_memory_by_hand():
    """Document 1 is not in memory (written later, or hidden): N = 3, lengths 3, 1, 0 (average
    4/3), c in one document; a's share is the same as over a table without document 1."""
    index = Bm25Index.build(pa.array(["a b a", "b c", "c", ""]))
    scores = index.scores("a c", np.array([True, False, True, True]))
    assert scores[0] == pytest.approx(lance_bm25(2, 1, 3, 3, 4 / 3), rel=1e-6)
    assert scores[1] == 0.0
    assert scores[2] == pytest.approx(lance_bm25(1, 1, 3, 1, 4 / 3), rel=1e-6)
    assert not index.scores("a", np.zeros(4, dtype=bool)).any()


def test_bm25_over_memory_is_bm25_over_a_table_of_those_rows_alone():
    """Brute-force oracle: on random texts and random memories, the scores are those of an index
    built over the rows in memory alone (bit for bit), 0 elsewhere; all rows in memory is no cut."""
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(12)]
    for _ in range(30):
        texts = [" ".join(rng.choice(words, rng.integers(0, 9))) for _ in range(rng.integers(1, 40))]
        index = Bm25Index.build(pa.array(texts))
        memory = rng.random(len(texts)) < 0.6
        alone = Bm25Index.build(pa.array([t for t, kept in zip(texts, memory) if kept]))
        for query in (" ".join(rng.choice(words, 3)), "w1 w1 w2", "zzz"):
            scores = index.scores(query, memory)
            assert scores[memory].tolist() == alone.scores(query).tolist()
            assert not scores[~memory].any()
            whole = index.scores(query, np.ones(len(texts), dtype=bool))
            assert whole.tolist() == index.scores(query).tolist()


def test_best_cuts_ties_by_gid_order():
    scores = np.array([1.0, 3.0, 2.0, 2.0, 2.0, 0.0])
    tiebreak = np.array([5, 4, 3, 2, 1, 0])  # row 4 comes first among equals, then 3, then 2
    assert best(scores, None, 3, tiebreak).tolist() == [1, 4, 3]
    assert best(scores, None, 10, tiebreak).tolist() == [1, 4, 3, 2, 0]  # no zero score
    keep = np.array([True, True, True, False, True, True])
    assert best(scores, keep, 3, tiebreak).tolist() == [1, 4, 2]


@pytest.fixture(scope="module")
def pair(example, monkeypatch_module):
    """Two searchers of the example index: one that never holds the table in memory (the index
    answers), one that does."""
    monkeypatch_module.setattr(search_module, "RESIDENT_AFTER", 10**9)
    cold = Memory(example.workspace, example.config)
    warm = Memory(example.workspace, example.config)
    warm.retriever.searcher.warm()
    assert warm.retriever.searcher.resident() is not None
    return cold, warm


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def hidden_step(table) -> tuple[str, Hidden]:
    """The most cited step of ``table``, so one that hides others (its citers, and its run-mates
    named later), and what hiding it resolves to."""
    data = table.search().select(["gid"]).limit(10_000).to_arrow()
    graph = CitationGraph.scan(table)
    gid = data["gid"][int(np.argmax(graph.cited))].as_py()
    return gid, graph.before(gid)


def filter_cases(table, hidden: Hidden) -> list[Filters]:
    """Filters of every kind, with values taken from the example table itself (``hidden``: a
    resolved ``hide``, from ``hidden_step``)."""
    columns = ["run", "gid", "named_ts", "named_seq", "inserted_ts"]
    data = table.search().select(columns).limit(10_000).to_arrow()
    assert len(hidden.keys) > 1 and hidden.seq is not None  # the case tries every part of ``hide``
    runs = sorted(set(data["run"].to_pylist()))
    times = sorted(t for t in data["named_ts"].to_pylist() if t >= 0)
    middle = times[len(times) // 2]
    seqs = sorted(s for s, r in zip(data["named_seq"].to_pylist(), data["run"].to_pylist())
                  if r == runs[0] and s >= 0)
    inserted = sorted(set(t for t in data["inserted_ts"].to_pylist() if t >= 0))
    assert len(inserted) > 1  # some entries inserted before the cut, some at or after it
    graph = CitationGraph.scan(table)
    before_run = max((graph.before_run(run) for run in runs), key=lambda hidden: len(hidden.keys))
    later = tuple(key(gid) for gid, run, ts in zip(data["gid"].to_pylist(), data["run"].to_pylist(),
                                                  data["named_ts"].to_pylist())
                  if run != runs[0] and ts > middle)
    assert later
    assert before_run.keys  # steps of other runs cite the run: the case hides them too
    return [Filters(library=True, library_before=inserted[len(inserted) // 2]), Filters(hide=before_run),
            Filters(), Filters(run=runs[0]), Filters(exclude_run=runs[0]), Filters(kind="lemma"),
            Filters(status="proved"), Filters(library=True), Filters(hide=hidden),
            Filters(until=Until(micros=middle)),
            Filters(until=Until(micros=middle, run=runs[0], seq=seqs[len(seqs) // 2])),
            # and what runs[0]'s log has named of another run by then, written later by its clock
            Filters(until=Until(micros=middle, run=runs[0], seq=seqs[len(seqs) // 2], named=later)),
            Filters(exclude_run=runs[-1], kind="lemma", until=Until(micros=times[-1]))]


def test_mask_agrees_with_the_sql_prefilter(pair):
    _, warm = pair
    searcher = warm.retriever.searcher
    resident, table = searcher.resident(), searcher.table("steps")
    gids = np.asarray(resident.rows["gid"].to_pylist())
    rows = resident.rows.to_pydict()
    settings = sorted(set(zip(rows["setting"], map(tuple, rows["hyp"]))))
    from mem_retrieval.indexers.store import reuse_key

    for filters in filter_cases(table, hidden_step(table)[1]):
        for excluded in ((), (reuse_key(*settings[0]),)):
            request = Request("steps", "x", filters, excluded)
            scan = table.search()
            if request.where:
                scan = scan.where(request.where)
            by_sql = set(scan.select(["gid"]).limit(10_000).to_arrow()["gid"].to_pylist())
            mask = request.mask(resident.columns)
            by_mask = set(gids.tolist() if mask is None else gids[mask].tolist())
            assert by_mask == by_sql, (filters, excluded)
            assert by_sql != set(gids.tolist()) or (filters == Filters() and not excluded)


QUERIES = ["Frobenius fixed field", "satake-two-levels/A5-7 Hecke algebra Satake transform"]


def test_every_strategy_answers_from_memory_as_from_the_index(pair):
    cold, warm = pair
    table = cold.retriever.searcher.table("steps")
    hidden, resolved = hidden_step(table)
    cases = filter_cases(table, resolved)
    compared = 0
    for text in QUERIES:
        for strategy in STRATEGIES:
            for i, filters in enumerate(cases):
                for setting in (None, "F_q((t))")[i % 2:][:1 + (i == 0)]:  # both without filters
                    query = ArchiveQuery(text, setting=setting, strategy=strategy, run=filters.run,
                                         exclude_run=filters.exclude_run, kind=filters.kind,
                                         status=filters.status, library=filters.library,
                                         hide=hidden if filters.hide else None,
                                         until=filters.until)
                    a, b = cold.retriever.ranked(query), warm.retriever.ranked(query)
                    assert [c.gid for c in a] == [c.gid for c in b], query
                    assert [c.score for c in a] == pytest.approx([c.score for c in b], abs=1e-4)
                    compared += bool(a)
    assert compared > 100
    # the rows shown are read from memory, as from the index
    page = warm.retriever.archive_search(ArchiveQuery("A5-7"))
    assert page.hits == cold.retriever.archive_search(ArchiveQuery("A5-7")).hits


@pytest.mark.parametrize("limit", [1, 3, 40])
def test_a_cut_memory_found_a_few_rows_at_a_time_gives_the_best_that_pass_the_filters(pair, limit,
                                                                                       monkeypatch):
    """The index path of a search that cuts memory asks the table for its best BM25 hits a chunk at
    a time, until enough pass the other filters: with chunks of 4 × limit the run filter drops most
    of each, and the hits are still the best ``limit`` of that run, as the table in memory finds."""
    from mem_retrieval.retrieval import engines

    monkeypatch.setattr(engines, "FETCH_AT_LEAST", 1)
    _, warm = pair
    searcher = warm.retriever.searcher
    resident, table = searcher.resident(), searcher.table("steps")
    gid, hidden = hidden_step(table)
    runs = sorted(set(resident.rows["run"].to_pylist()))
    from mem_retrieval.text.tokenize import token_string

    tokens = token_string("Frobenius Hecke fixed field Satake Galois")
    compared = 0
    for run in runs:
        request = Request("steps", tokens, Filters(run=run, hide=hidden))
        memory = request.filters.memory().where("steps")
        found = engines.memory_bm25_candidates(table, "steps", tokens, memory, request.where, limit)
        want = resident.text(tokens, request, limit)
        assert [c.gid for c in found] == [c.gid for c in want]
        assert [c.bm25 for c in found] == pytest.approx([c.bm25 for c in want], rel=1e-6)
        compared += len(found)
    assert compared >= min(limit, 2) * len(runs) // 2, compared


def test_a_one_shot_call_never_reads_the_table_into_memory(example, monkeypatch):
    monkeypatch.setattr(search_module, "RESIDENT_AFTER", RESIDENT_AFTER)
    assert RESIDENT_AFTER == 3
    memory = Memory(example.workspace, example.config)
    searcher = memory.retriever.searcher
    for _ in range(RESIDENT_AFTER - 1):  # one CLI call searches at most this often
        memory.retriever.archive_search(ArchiveQuery("Frobenius fixed field", setting="F_q((t))"))
    assert searcher._resident is None
    memory.retriever.archive_search(ArchiveQuery("Frobenius fixed field"))
    assert searcher._resident is not None  # started on a worker thread
    searcher._resident.result()
    assert searcher.resident() is not None


def test_rank_bm25_engine_is_never_replaced(example):
    config = replace(example.config, bm25=replace(example.config.bm25, engine="rank-bm25"))
    searcher = Memory(example.workspace, config).retriever.searcher
    searcher.warm()
    assert searcher.resident() is None


def lance_scores(memory: Memory, tokens: str) -> dict[str, float]:
    from lancedb.query import MatchQuery

    table = memory.retriever.searcher.table("steps")
    data = (table.search(MatchQuery(tokens, "tokens"), query_type="fts").select(["gid", "_score"])
            .limit(1000).to_arrow())
    return dict(zip(data["gid"].to_pylist(), data["_score"].to_pylist()))


def gamma_workspace(root):
    """The toy workspace plus run gamma: six steps sharing words in different numbers, indexed."""
    from conftest import build_workspace, make_step

    ws = build_workspace(root)
    ws.add_run("gamma", [make_step(f"g{i}", statement=f"frobenius curve number {i} " + "word " * i)
                         for i in range(6)])
    Memory.open(ws.root).index(progress=False)
    return ws


def assert_bm25_exact(memory: Memory, queries) -> None:
    """LanceDB's full-text scores of each query equal BM25 computed afresh over the rows held."""
    for tokens in queries:
        lance, exact = lance_scores(memory, tokens), exact_scores(memory, tokens)
        assert lance.keys() == exact.keys()
        assert [lance[g] for g in exact] == pytest.approx(list(exact.values()), rel=1e-5)


def exact_scores(memory: Memory, tokens: str) -> dict[str, float]:
    """BM25 computed afresh over the rows the table holds now (the oracle)."""
    table = memory.retriever.searcher.table("steps")
    data = table.search().select(["gid", "tokens"]).limit(1000).to_arrow()
    scores = Bm25Index.build(data["tokens"]).scores(tokens)
    return {g: float(s) for g, s in zip(data["gid"].to_pylist(), scores) if s > 0}


def test_an_incremental_index_keeps_bm25_exact(tmp_path):
    """LanceDB's incremental update counts replaced rows in its statistics: `mem index` builds the
    full-text index again whenever rows change, so its scores stay those of the rows it holds (and
    a warm searcher's, computed in memory, agree with a one-shot call's)."""
    ws = gamma_workspace(tmp_path / "ws")
    ws.edit_step("gamma", "g1", statement="frobenius frobenius fixed field")
    ws.edit_step("gamma", "g2", statement="an unrelated statement about curves")
    tree = ws.tree("gamma")  # and one removed
    tree["steps"] = [s for s in tree["steps"] if s["id"] != "g3"]
    ws.save_tree("gamma", tree)
    memory = Memory.open(ws.root)
    memory.index(progress=False)
    assert_bm25_exact(memory, ("frobenius", "frobenius curve fixed", "statement"))


def test_a_run_stopped_before_its_full_text_rebuild_is_finished_by_the_next(tmp_path, monkeypatch):
    """A run that committed a deletion and stopped before it built the full-text index again (and
    before meta.json) leaves a table holding a commit no meta.json pins: the next run, which finds
    no row to change, still builds the index again, so BM25 is that of the rows held."""
    from mem_retrieval.indexers import writer

    ws = gamma_workspace(tmp_path / "ws")
    tree = ws.tree("gamma")
    tree["steps"] = [s for s in tree["steps"] if s["id"] not in ("g3", "g4")]
    ws.save_tree("gamma", tree)

    def stop(index, table, fresh, rewritten=False):
        raise KeyboardInterrupt  # the process ends here: the deletion is committed, nothing after

    with monkeypatch.context() as patch:
        patch.setattr(writer, "refresh_indexes", stop)
        with pytest.raises(KeyboardInterrupt):
            Memory.open(ws.root).index(progress=False)
    memory = Memory.open(ws.root)
    memory.index(progress=False)
    assert_bm25_exact(memory, ("frobenius", "frobenius curve word", "number"))


def test_a_tie_across_the_pool_cut_is_broken_by_gid_on_every_path(tmp_path, monkeypatch):
    """Twelve steps score alike and the pool holds 5: the index's full-text search, the warm
    searcher's resident index and the rank-bm25 engine all keep the 5 first by global id (the
    index kept the 5 its own storage order gave, so a one-shot call and a warm server differed),
    and so does the vector search (it kept its storage order's until 2026-12-04)."""
    from conftest import build_workspace, make_step

    ws = build_workspace(tmp_path / "ws")
    tied = [f"zeta/z{i:02d}" for i in range(1, 13)]
    ws.add_run("zeta", [make_step(gid.split("/")[1], statement="zircon lemma") for gid in reversed(tied)])
    (ws.root / "solve" / "mem.toml").write_text("[search]\npool = 5\n")
    Memory.open(ws.root).index(progress=False)
    (tmp_path / "rank.toml").write_text('[bm25]\nengine = "rank-bm25"\n')
    monkeypatch.setattr(search_module, "RESIDENT_AFTER", 10**9)
    cold, warm = Memory.open(ws.root), Memory.open(ws.root)
    warm.retriever.searcher.warm()
    assert warm.retriever.searcher.resident() is not None
    rank = Memory.open(ws.root, tmp_path / "rank.toml")
    for memory in (cold, warm, rank):
        hits = memory.retriever.ranked(ArchiveQuery("zircon", strategy="bm25"))
        assert [c.gid for c in hits] == tied[:5]
        assert len({c.bm25 for c in hits}) == 1
    # the index read the tie's gids alone, then the five rows it kept, whole (none of them among
    # the first six it gave: it holds them in the other order)
    hits = cold.retriever.searcher.bm25(Request("steps", "zircon", Filters()))
    assert [(c.gid, c.row.statement, c.vector is not None) for c in hits] == [
        (gid, "zircon lemma", True) for gid in tied[:5]]
    # the nearest vectors alike: twelve steps with one text, so one vector (an index built
    # incrementally lays rows out otherwise than a full one: the cut must not depend on it)
    hits = cold.retriever.ranked(ArchiveQuery("zircon lemma", strategy="vector"))
    assert [c.gid for c in hits] == tied[:5] and len({c.cosine for c in hits}) == 1


def test_a_session_holding_the_table_in_memory_says_no_index_once_the_index_is_deleted(tmp_path):
    """A long-lived ``Memory`` whose steps table was in memory went on answering archive_search
    from it after `.mem/` was deleted, with no note, while its recall_search (and the same session
    before the table was in memory, and a new call) said there is no index: now all say so, and
    the session answers again once `mem index` rebuilt it."""
    import shutil

    from mem_retrieval.indexers.store import IndexMismatch

    ws = gamma_workspace(tmp_path / "ws")
    Memory.open(ws.root).index(progress=False)
    held = Memory.open(ws.root)
    for _ in range(RESIDENT_AFTER + 1):  # as a session's searches put it there
        before = held.archive_search("frobenius")
    held.retriever.searcher.warm()
    assert held.retriever.searcher.resident() is not None
    assert held.archive_search("frobenius") == before
    assert before.total
    shutil.rmtree(ws.root / ".mem")
    said = []
    for ask in (lambda m: m.archive_search("frobenius"), lambda m: m.recall_search("audit")):
        for memory in (held, Memory.open(ws.root)):
            with pytest.raises(IndexMismatch) as caught:
                ask(memory)
            said.append(str(caught.value))
    assert len(set(said)) == 1 and "no index in" in said[0] and "run `mem index`" in said[0], said
    Memory.open(ws.root).index(progress=False)
    again = held.archive_search("frobenius")
    assert [h.id for h in again.hits] == [h.id for h in before.hits]
