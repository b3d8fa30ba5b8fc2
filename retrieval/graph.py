"""The workspace's citation graph, as the graph-aware strategies read it: who cites whom, and what
each query may see of it.

Every steps row carries the keys of the steps it cites (``parent_keys``, kept by `mem index` with
the row). A ``CitationGraph`` reads them once per pinned table version into arrays: row ``i`` cites
rows ``targets[offsets[i]:offsets[i+1]]`` (a parent naming no step is dropped).

What a query may see (``visible``): memory as it stood for it. The step it hides (leave-one-out,
SPEC §10) is gone with every link from it; a run it excludes is gone (a run cannot reuse itself,
nor vote for itself); with ``until``, only steps some event had named by then. Citation counts and
neighbours are computed over what is visible only, so nothing a query may not see informs its
answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mem_retrieval.indexers.store import key

if TYPE_CHECKING:
    import numpy as np

    from mem_retrieval.retrieval.query import Filters

COLUMNS = ["key", "gid", "run_key", "named_ts", "named_seq", "parent_keys"]


@dataclass(frozen=True)
class CitationGraph:
    keys: "np.ndarray"          # row -> key (int64)
    gids: list[str]             # row -> global id
    run_keys: "np.ndarray"
    named_ts: "np.ndarray"      # first naming event's time (micros), -1: never named
    named_seq: "np.ndarray"
    order: "np.ndarray"         # rows by key (argsort of keys)
    offsets: "np.ndarray"       # CSR: row i cites targets[offsets[i]:offsets[i + 1]]
    targets: "np.ndarray"
    cited: "np.ndarray"         # in-degree over every link

    @classmethod
    def scan(cls, table) -> "CitationGraph":
        """The graph of the pinned steps ``table`` (one scan of its key and link columns)."""
        import numpy as np

        data = table.search().select(COLUMNS).limit(max(table.count_rows(), 1)).to_arrow()

        def column(name: str) -> "np.ndarray":
            return np.asarray(data[name].to_numpy(zero_copy_only=False), dtype=np.int64)

        keys = column("key")
        order = np.argsort(keys, kind="stable")
        parents = data["parent_keys"].combine_chunks()
        flat = np.asarray(parents.flatten().to_numpy(zero_copy_only=False), dtype=np.int64)
        lengths = parents.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
        sources = np.repeat(np.arange(len(keys)), lengths)
        targets = _rows(keys, order, flat)
        known = targets >= 0
        sources, targets = sources[known], targets[known]
        offsets = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum(np.bincount(sources, minlength=len(keys)), out=offsets[1:])
        return cls(keys=keys, order=order, gids=data["gid"].to_pylist(), run_keys=column("run_key"),
                   named_ts=column("named_ts"), named_seq=column("named_seq"), offsets=offsets,
                   targets=targets, cited=np.bincount(targets, minlength=len(keys)))

    def rows(self, keys: "np.ndarray") -> "np.ndarray":
        """The row of each key (-1: no such step)."""
        import numpy as np

        return _rows(self.keys, self.order, np.asarray(keys, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def has_parents(self) -> "np.ndarray":
        import numpy as np

        return np.diff(self.offsets) > 0

    def parents(self, row: int) -> "np.ndarray":
        return self.targets[self.offsets[row]:self.offsets[row + 1]]

    def visible(self, filters: "Filters") -> "np.ndarray | None":
        """The rows a query with these filters may see (None: every row): its hidden step, its
        excluded run and what ``until`` had not named yet are not in memory for it."""
        import numpy as np

        if filters.hide is None and filters.exclude_run is None and filters.until is None:
            return None
        seen = np.ones(len(self), dtype=bool)
        if filters.hide is not None:
            hidden = self.rows(np.asarray([key(filters.hide)]))[0]
            if hidden >= 0:
                seen[hidden] = False
        if filters.exclude_run is not None:
            seen &= self.run_keys != key(filters.exclude_run)
        until = filters.until
        if until is not None:
            named = (self.named_ts >= 0) & (self.named_ts <= until.micros)
            if until.run is not None and until.seq is not None:
                own = self.run_keys == key(until.run)
                named = np.where(own, (self.named_seq >= 0) & (self.named_seq <= until.seq), named)
            seen &= named
        return seen

    def in_degree(self, seen: "np.ndarray | None") -> "np.ndarray":
        """How many visible steps cite each row (links from what is not visible do not count)."""
        import numpy as np

        if seen is None:
            return self.cited
        sources = np.repeat(seen, np.diff(self.offsets))
        return np.bincount(self.targets[sources], minlength=len(self)) * seen

    def votes(self, voters: "np.ndarray", weights: "np.ndarray", seen: "np.ndarray | None") -> "np.ndarray":
        """Each row's vote: the summed weights of the ``voters`` (rows) citing it; links to rows
        that are not visible are dropped."""
        import numpy as np

        total = np.zeros(len(self), dtype=np.float64)
        for row, weight in zip(voters.tolist(), weights.tolist()):
            np.add.at(total, self.parents(row), weight)
        return total if seen is None else total * seen


def _rows(keys: "np.ndarray", order: "np.ndarray", wanted: "np.ndarray") -> "np.ndarray":
    """The row holding each wanted key in ``keys`` (sorted by ``order``), -1 where none does."""
    import numpy as np

    if not len(keys) or not len(wanted):
        return np.full(len(wanted), -1, dtype=np.int64)
    sorted_keys = keys[order]
    at = np.minimum(np.searchsorted(sorted_keys, wanted), len(keys) - 1)
    return np.where(sorted_keys[at] == wanted, order[at], -1)
