"""The one interface the evaluators need from search: a *ranker* turns an evaluation query into a
ranked list of global ids with scores, for a named strategy (``retrieval.strategies``).
``make_ranker`` builds it over the real search; everything else in eval/ works on its output
alone, so the evaluation is pure over (ranked lists, qrels)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from mem_retrieval.eval.judgments import Qrels, Query
from mem_retrieval.records.ids import plain, split_gid
from mem_retrieval.retrieval.query import ArchiveQuery
from mem_retrieval.retrieval.retriever import Retriever


@dataclass(frozen=True)
class RankedHit:
    """One hit of a ranked list: a global id (``<run>/<step id>``) and the strategy's score."""

    gid: str
    score: float


class Ranker(Protocol):
    """``ranker(strategy, query, depth)`` → at most ``depth`` hits, already in final order (best
    first), each global id once.

    The ranker must honour the query: ``query.setting`` is passed to the search as its setting, and
    when ``query.run`` is set no step of that run is a candidate (a run cannot reuse itself). Scores
    only need to be comparable within one list (they feed the ``score-drop`` pager and the hint)."""

    def __call__(self, strategy: str, query: Query, depth: int) -> list[RankedHit]: ...


def make_ranker(retriever: Retriever, *, library: bool = False, until=None,
                starts: Mapping[str, datetime | None] | None = None) -> Ranker:
    """``ranker(strategy, query, depth)``: the search's result list for an evaluation query. The
    query's setting is the search setting; its run's own steps are never candidates (a run cannot
    reuse itself) and it is the query's context (what the run's steps cite guides the graph
    strategies); a query naming its ``step`` is answered leave-one-out: that step is hidden, and
    so are the words of its text naming the step's links. ``library``: only library steps are
    candidates; ``until``: memory as it stood then; ``starts`` (with ``library``, per run): only
    the entries inserted before the query's run started are candidates (the library as the run
    met it, ``eval reuse --runs-before``; a run without a start keeps them all)."""

    def ranker(strategy: str, query: Query, depth: int) -> list[RankedHit]:
        before = (starts or {}).get(query.run) if query.run is not None else None
        search = archive_query(retriever, query, strategy, library=library, until=until,
                               library_before=before)
        return [] if search is None else [RankedHit(c.gid, c.score) for c in retriever.ranked(search)[:depth]]

    return ranker


def archive_query(retriever: Retriever, query: Query, strategy: str, **options) -> ArchiveQuery | None:
    """The search an evaluation query stands for (what ``make_ranker`` and the fusion tuner both
    ask): its setting; its run left out of the candidates and taken as its context; its ``step``
    hidden (leave-one-out), with the words of its text that name the step's links, its parents and
    the steps its proof names (``\\Cref{A2-4}``: the statement was written once its inputs were
    found; an id lookup would answer with its judgments, ``derived.without_links``). None when
    nothing else is left to ask."""
    from mem_retrieval.eval.derived import step_links, without_links
    from mem_retrieval.records.types import Step

    text = query.query
    workspace = retriever.workspace
    step = workspace.step(query.step) if query.step is not None else None
    if isinstance(step, Step):  # (a library entry without its run has no links)
        sources = frozenset(source.id for source in workspace.tree(step.run).sources)
        links = step_links(workspace, step, sources)  # its parents and its proof's, as derive takes them
        text = without_links(text, links) if links else text
    if not plain(text).strip():  # (empty only where it names its step: ``judgments.read_queries``)
        return None
    return ArchiveQuery(text, query.setting, exclude_run=query.run, hide=query.step,
                        strategy=strategy, context_run=query.run, **options)


def left_out_by_their_query(retriever: Retriever, queries: Sequence[Query], qrels: Qrels) -> list[str]:
    """The ids judged relevant for a query that the query itself leaves out of its search
    (``archive_query``), as ``qid: id``: a step of its own ``run`` (a run cannot reuse itself), and
    what its ``step`` hides (the step, what cites it, its run-mates written after it:
    ``Retriever.hidden_of``). No search finds them: they count as missed."""
    left = []
    for query in queries:
        judged = [doc for doc, grade in qrels.get(query.qid, {}).items() if grade > 0]
        hidden = set(retriever.hidden_of(query.step, judged)) if query.step is not None and judged else set()
        left += [f"{query.qid}: {doc}" for doc in judged
                 if doc in hidden or doc == query.step
                 or (query.run is not None and split_gid(doc)[0] == query.run)]
    return left
