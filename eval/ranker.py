"""The ranker the paging evaluator calls: the real search, one strategy at a time."""

from __future__ import annotations

from mem_retrieval.configs import Config
from mem_retrieval.eval.judgments import Query
from mem_retrieval.eval.strategies import RankedHit, Ranker
from mem_retrieval.records.workspace import Workspace
from mem_retrieval.memory import Memory
from mem_retrieval.retrieval.query import Filters


def make_ranker(workspace: Workspace, config: Config) -> Ranker:
    """``ranker(strategy, query, depth)``: the search's result list for an evaluation query. The
    query's setting is the search setting; its run's own steps are never candidates (a run cannot
    reuse itself); a query naming its ``step`` is answered leave-one-out: that step is hidden."""
    memory = Memory(workspace, config)

    def ranker(strategy: str, query: Query, depth: int) -> list[RankedHit]:
        filters = Filters(exclude_run=query.run, hide=query.step)
        ranked = memory.ranked_steps(query.query, filters, query.setting, strategy=strategy)
        return [RankedHit(r.row["gid"], r.score) for r in ranked[:depth]]

    return ranker
