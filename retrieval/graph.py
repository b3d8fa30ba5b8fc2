"""The workspace's citation graph, as the graph-aware strategies read it: who cites whom, and what
each query may see of it.

Every steps row carries the keys of the steps it cites (``parent_keys``, kept by `mem index` with
the row). A ``CitationGraph`` reads them once per pinned table version into arrays: row ``i`` cites
rows ``targets[offsets[i]:offsets[i+1]]`` (a parent naming no step is dropped, and so is a step's
link to itself; a parent named twice, `X` and `run/X`, is one link: it was two votes and two
citations).

What a query may see (``visible``): memory as it stood for it. The step it hides (leave-one-out,
SPEC §10) is gone with every link from it, and so is what was written after it (``before``: its
run-mates its log names after it but those it cites, and the steps citing it or them, directly or
through others); with ``until``, only steps written by then (``records.workspace.first_written``).
Citation counts and neighbours are computed over what is visible only, so nothing a query may not
see informs its answer. The other filters (a run excluded because a run cannot reuse itself, a
kind, a setting) choose which steps may be *candidates*; the rest of memory still votes and counts."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from mem_retrieval.indexers.store import key

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

    from mem_retrieval.retrieval.query import Filters, Hidden

# The voted steps asked of the table, as a multiple of ``graph.voted``: the prefilter (a run
# excluded, a kind, the setting rule) is applied by the table, and the best ``graph.voted`` that pass
# it join, so that steps the query may not have do not use up the places.
OVERFETCH = 3
COLUMNS = ["key", "run_key", "named_ts", "named_seq", "parent_keys"]


@dataclass(frozen=True)
class CitationGraph:
    keys: "np.ndarray"          # row -> key (int64)
    run_keys: "np.ndarray"
    run_index: "np.ndarray"     # row -> its run's number (0 … runs - 1)
    named_ts: "np.ndarray"      # first naming event's time (micros), NEVER: never named
    named_seq: "np.ndarray"
    order: "np.ndarray"         # rows by key (argsort of keys)
    sorted_keys: "np.ndarray"   # keys[order]
    offsets: "np.ndarray"       # CSR: row i cites targets[offsets[i]:offsets[i + 1]]
    targets: "np.ndarray"
    cited: "np.ndarray"         # in-degree over every link

    @classmethod
    def scan(cls, table) -> "CitationGraph":
        """The graph of the pinned steps ``table`` (one scan of its key and link columns)."""
        return cls.of(table.search().select(COLUMNS).limit(max(table.count_rows(), 1)).to_arrow())

    @classmethod
    def of(cls, data) -> "CitationGraph":
        """The graph of a steps table read into Arrow ``data`` (at least ``COLUMNS``; row ``i`` of
        the graph is row ``i`` of ``data``)."""
        import numpy as np

        def column(name: str) -> "np.ndarray":
            return np.asarray(data[name].to_numpy(zero_copy_only=False), dtype=np.int64)

        keys = column("key")
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        parents = data.column("parent_keys")
        flat = np.concatenate([np.asarray(chunk.flatten().to_numpy(zero_copy_only=False), dtype=np.int64)
                               for chunk in parents.chunks] or [np.zeros(0, dtype=np.int64)])
        lengths = np.concatenate([chunk.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
                                  for chunk in parents.chunks] or [np.zeros(0, dtype=np.int64)])
        sources = np.repeat(np.arange(len(keys)), lengths)
        targets = _rows(sorted_keys, order, flat)
        known = (targets >= 0) & (targets != sources)  # a step citing itself cites nothing else
        sources, targets = sources[known], targets[known]
        links = np.unique(sources * max(len(keys), 1) + targets)  # one link a pair: a parent named
        sources, targets = links // max(len(keys), 1), links % max(len(keys), 1)  # twice (`X`, `r/X`)
        offsets = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum(np.bincount(sources, minlength=len(keys)), out=offsets[1:])
        run_keys = column("run_key")
        return cls(keys=keys, order=order, sorted_keys=sorted_keys, run_keys=run_keys,
                   run_index=np.unique(run_keys, return_inverse=True)[1].reshape(-1),
                   named_ts=column("named_ts"), named_seq=column("named_seq"), offsets=offsets,
                   targets=targets, cited=np.bincount(targets, minlength=len(keys)))

    def rows_of(self, gids: "Sequence[str]") -> "np.ndarray":
        """Each global id's row (-1: no such step), as ``rows`` gives it for their keys."""
        import numpy as np

        return self.rows(np.asarray([key(gid) for gid in gids], dtype=np.int64))

    def rows(self, keys: "np.ndarray") -> "np.ndarray":
        """The row of each key (-1: no such step)."""
        import numpy as np

        return _rows(self.sorted_keys, self.order, np.asarray(keys, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.keys)

    def parents(self, row: int) -> "np.ndarray":
        return self.targets[self.offsets[row]:self.offsets[row + 1]]

    @cached_property
    def _citing(self) -> tuple["np.ndarray", "np.ndarray"]:
        """The links reversed (CSR): row ``i`` is cited by ``sources[starts[i]:starts[i + 1]]``."""
        import numpy as np

        order = np.argsort(self.targets, kind="stable")
        sources = np.repeat(np.arange(len(self)), np.diff(self.offsets))[order]
        return sources, np.searchsorted(self.targets[order], np.arange(len(self) + 1))

    def before(self, gid: str) -> "Hidden":
        """What ``hide`` = ``gid`` resolves to (``query.Hidden``): the position in its run's log
        that cuts its run-mates written after it, and the step with every step citing it or one of
        those run-mates, directly or through others (all written after it: a citation points back
        in time). The step's own links date nothing (SPEC §10: nothing derived from the workspace
        reads them): a run-mate it cites that its log names later is cut like the others. The keys
        name only what the cut does not already hide."""
        import numpy as np

        from mem_retrieval.retrieval.query import Hidden

        row = int(self.rows(np.asarray([key(gid)]))[0])
        if row < 0:
            return Hidden.only(gid)
        seq = int(self.named_seq[row])
        cut = np.zeros(len(self), dtype=bool)  # run-mates its run's log names after it (or never)
        if seq >= 0:
            cut = (self.run_keys == self.run_keys[row]) & ~((self.named_seq >= 0) & (self.named_seq <= seq))
        sources, starts = self._citing
        later = cut.copy()
        later[row] = True  # it, the run-mates cut, and every step citing one of them
        later |= self._reach(np.flatnonzero(later), sources, starts)
        return Hidden(tuple(sorted(self.keys[later & ~cut].tolist())), int(self.run_keys[row]),
                      seq if seq >= 0 else None)

    def before_run(self, run: str) -> "Hidden":
        """What ``hide_run`` = ``run`` resolves to: memory as it stood before the run began (its
        Fix's Recall, the reuse test): none of its steps (``seq`` -1 cuts every run-mate), and every
        step of another run citing one of them, directly or through others (written after it)."""
        import numpy as np

        from mem_retrieval.retrieval.query import Hidden

        own = self.run_keys == key(run)
        sources, starts = self._citing
        later = self._reach(np.flatnonzero(own), sources, starts) & ~own
        return Hidden(tuple(sorted(self.keys[later].tolist())), key(run), -1)

    def _reach(self, rows: "np.ndarray", neighbours: "np.ndarray", starts: "np.ndarray",
               blocked: "np.ndarray | None" = None) -> "np.ndarray":
        """The rows reached from ``rows`` in one or more steps along a CSR adjacency (row ``i``'s
        neighbours are ``neighbours[starts[i]:starts[i + 1]]``), never entering a ``blocked`` row
        (a mask), as a mask; ``rows`` are in it only where a loop leads back to them."""
        import numpy as np

        reached = np.zeros(len(self), dtype=bool) if blocked is None else blocked.copy()
        frontier = rows
        while len(frontier):
            step = np.concatenate([neighbours[starts[r]:starts[r + 1]] for r in frontier.tolist()])
            frontier = np.unique(step[~reached[step]])
            reached[frontier] = True
        return reached if blocked is None else reached & ~blocked

    def visible(self, filters: "Filters") -> "np.ndarray | None":
        """The rows a query with these filters may see (None: every row): what its hidden step
        hides (``Hidden``) and what ``until`` had not named yet are not in memory for it
        (``Filters.memory``)."""
        return filters.memory().mask({"key": self.keys, "run_key": self.run_keys,
                                      "named_ts": self.named_ts, "named_seq": self.named_seq})

    def in_degree(self, seen: "np.ndarray | None") -> "np.ndarray":
        """How many visible steps cite each row (links from what is not visible do not count)."""
        return self.cited if seen is None else self.cited_by(seen, seen)

    def cited_by(self, citing: "np.ndarray", seen: "np.ndarray | None") -> "np.ndarray":
        """How many of the rows ``citing`` (a mask) cite each row; links to rows that are not
        visible (``seen``) are dropped."""
        import numpy as np

        sources = np.repeat(citing, np.diff(self.offsets))
        counts = np.bincount(self.targets[sources], minlength=len(self))
        return counts if seen is None else counts * seen

    def context(self, run: str, filters: "Filters", seen: "np.ndarray | None") -> "np.ndarray":
        """The rows of the query's own run ``run`` (the context, ``ArchiveQuery.context_run``)
        that the query may see (``seen``): when it hides a step of that run (leave-one-out), only
        those named before it in the run's log, what the run had cited when it came to that step
        (its batch-mates, named by the same event, are memory but not yet its run's citations;
        none when no event names the hidden step: nothing says what came before it)."""
        mates = self.run_keys == key(run)
        if seen is not None:
            mates &= seen
        hide = filters.hide
        if hide is not None and hide.run_key == key(run):
            mates &= (self.named_seq >= 0) & (self.named_seq < (-1 if hide.seq is None else hide.seq))
        return mates

    def affinity(self, context: "np.ndarray", counts: "np.ndarray") -> "np.ndarray":
        """Per run number: how often the ``context`` rows (``CitationGraph.context``, one run's)
        cite the rows of that run, ``counts`` being ``cited_by(context, …)``; their own run at 0,
        as what is asked is which other runs it draws on (an empty context cites nothing)."""
        import numpy as np

        runs = int(self.run_index.max(initial=-1)) + 1
        per_run = np.bincount(self.run_index, weights=counts, minlength=runs)
        per_run[self.run_index[np.flatnonzero(context)[:1]]] = 0.0
        return per_run

    def votes(self, voters: "np.ndarray", weights: "np.ndarray", seen: "np.ndarray | None") -> "np.ndarray":
        """Each row's vote: the summed weights of the ``voters`` (rows) citing it; links to rows
        that are not visible are dropped."""
        import numpy as np

        return self._per_cited(np.add, voters, weights, seen)

    def nearest_citing(self, voters: "np.ndarray", similarity: "np.ndarray",
                       seen: "np.ndarray | None") -> "np.ndarray":
        """Each row's best ``similarity`` among the ``voters`` (rows) citing it, 0 when none does
        (nor below 0: the best is taken from 0); links to rows that are not visible are dropped."""
        import numpy as np

        return self._per_cited(np.maximum, voters, similarity, seen)

    def _per_cited(self, reduce, voters: "np.ndarray", values: "np.ndarray",
                   seen: "np.ndarray | None") -> "np.ndarray":
        """Each row's ``values`` of the ``voters`` citing it, folded by the ufunc ``reduce`` from 0
        in voter order (rows no voter cites, and rows not ``seen``, stay 0)."""
        import numpy as np

        voters = np.asarray(voters, dtype=np.int64)
        starts = self.offsets[voters]
        lengths = self.offsets[voters + 1] - starts
        # the voters' links, voter by voter: link j of voter i is at starts[i] + j
        links = np.arange(int(lengths.sum())) + np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
        out = np.zeros(len(self), dtype=np.float64)
        reduce.at(out, self.targets[links], np.repeat(np.asarray(values, dtype=np.float64), lengths))
        return out if seen is None else out * seen


def _rows(sorted_keys: "np.ndarray", order: "np.ndarray", wanted: "np.ndarray") -> "np.ndarray":
    """The row holding each wanted key (``sorted_keys`` are the keys in row order ``order``), -1
    where none does."""
    import numpy as np

    if not len(sorted_keys) or not len(wanted):
        return np.full(len(wanted), -1, dtype=np.int64)
    at = np.minimum(np.searchsorted(sorted_keys, wanted), len(sorted_keys) - 1)
    return np.where(sorted_keys[at] == wanted, order[at], -1)


def graph_candidates(search, request, vector) -> list:
    """The candidates of a graph strategy, with their features.

    BM25's pool under the request's prefilter; then the voters: the best BM25 matches among the
    steps the query may see that cite something (``graph.voters`` of them, nearest first by cosine
    when the query is embedded), each voting for what it cites with its cosine to the query (or,
    without the model, its share of the best BM25 score) ** ``graph.vote_power``. A step's vote is
    damped by (1 + how often it is cited) ** ``graph.hub_damping``, so that a hub every step cites
    does not win every query. The ``graph.voted`` best voted steps BM25 did not find that pass the
    same prefilter (filters, setting rule) as any candidate join the pool (of the
    ``OVERFETCH * graph.voted`` best voted). Each candidate carries bm25 (0 when BM25 did not find
    it), cosine (``vector``: a future of the query vector), vote, expanded (with ``vector``: the
    best cosine to the query of the step itself and of the voters citing it, the step read with
    the steps that used it, as anchor text expands a web page; a step no voter cites keeps its own
    cosine; never below 0, as a voter less similar than nothing counts 0 in the votes too),
    prior = log(1 + cited), context = log(1 + how many steps of the query's own run cite
    it; 0 without ``request.context``: ``CitationGraph.context``) and affinity = log(1 + how many
    links go from those steps to the candidate's run; 0 for the query's own run:
    ``CitationGraph.affinity``), counted over what the query may see (``CitationGraph.visible``)."""
    import numpy as np

    config = search.config.graph
    pool = search.bm25(request)
    graph = search.graph()
    query_vector = vector.result() if vector is not None else None
    if graph is None:
        return _with_cosine(pool, query_vector)
    seen = graph.visible(request.filters)
    memory = request.memory()
    neighbours = pool if memory.where == request.where else search.bm25(memory)
    if not neighbours:
        return []
    voters, similarity = _voters(graph, neighbours, query_vector, config, seen)
    votes = graph.votes(voters, np.clip(similarity, 0.0, None) ** config.vote_power, seen)
    nearest = graph.nearest_citing(voters, similarity, seen) if query_vector is not None else None
    cited = graph.in_degree(seen).astype(np.float64)
    context = affinity = None
    if request.context is not None:
        mates = graph.context(request.context, request.filters, seen)
        counts = graph.cited_by(mates, seen)
        context, affinity = np.log1p(counts), np.log1p(graph.affinity(mates, counts))
    if config.hub_damping:
        votes = votes / (1.0 + cited) ** config.hub_damping
    rows = graph.rows_of([c.gid for c in pool])
    known = set(rows.tolist())
    order = np.lexsort((graph.keys, -votes))  # ties by key, not by where rows lie in the table
    voted = [int(row) for row in order[: OVERFETCH * config.voted + len(known)]
             if votes[row] > 0 and int(row) not in known][: OVERFETCH * config.voted]
    passed = search.steps_by_key([int(graph.keys[row]) for row in voted], request)
    place = {int(graph.keys[row]): i for i, row in enumerate(voted)}  # vote order
    passed.sort(key=lambda c: place[key(c.gid)])
    found = pool + passed[: config.voted]
    found_rows = graph.rows_of([c.gid for c in found])
    prior = np.log1p(cited)
    return [c.scored(0.0, bm25=c.bm25 or 0.0, vote=float(votes[row]) if row >= 0 else 0.0,
                     expanded=max(c.expanded, float(nearest[row])) if nearest is not None and row >= 0
                     else c.expanded,
                     prior=float(prior[row]) if row >= 0 else 0.0,
                     context=float(context[row]) if row >= 0 and context is not None else 0.0,
                     affinity=float(affinity[graph.run_index[row]]) if row >= 0 and affinity is not None
                     else 0.0)
            for c, row in zip(_with_cosine(found, query_vector), found_rows.tolist())]


def _voters(graph: CitationGraph, neighbours: list, query_vector, config, seen) -> tuple:
    """(rows, similarities) of the voters among ``neighbours`` (BM25 order): those citing
    something ``seen`` (the rows the query may see; a step citing only a hidden one would vote for
    nothing), nearest first by cosine when there is a query vector (their similarity: the cosine;
    else their share of the best BM25 score), the first ``config.voters``."""
    import numpy as np

    rows = graph.rows_of([c.gid for c in neighbours])
    citing = [i for i, row in enumerate(rows.tolist())  # a voter cites something the query may see
              if row >= 0 and graph.offsets[row + 1] > graph.offsets[row]
              and (seen is None or bool(seen[graph.parents(row)].any()))]
    if query_vector is not None and citing:
        similarity = np.asarray([neighbours[i].vector for i in citing], dtype=np.float32) @ query_vector
        order = np.argsort(-similarity, kind="stable")
        citing, similarity = [citing[i] for i in order], similarity[order]
    else:
        best = neighbours[0].bm25 or 1.0 if neighbours else 1.0
        similarity = np.asarray([neighbours[i].bm25 / best for i in citing], dtype=np.float64)
    chosen = slice(0, config.voters)
    return rows[citing][chosen], similarity[chosen]


def _with_cosine(candidates: list, query_vector) -> list:
    """The candidates with their cosine to the query, which is also their ``expanded`` until the
    voters citing them are read (unchanged without a query vector)."""
    import numpy as np

    if query_vector is None or not candidates:
        return candidates
    cosine = np.asarray([c.vector for c in candidates], dtype=np.float32) @ query_vector
    return [c.scored(c.score, cosine=float(value), expanded=float(value))
            for c, value in zip(candidates, cosine)]
