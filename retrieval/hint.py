"""The hint against early stopping: how many relevant hits remain on later pages, from the scores.

Each hit of a ranked list gets a weight in [0, 1], read as the chance that it is relevant:

    weight(s) = clip((s - floor) / (top - floor), 0, 1)

where ``top`` is the best score of the list and ``floor`` the score of the last hit an agent would
read: the hit ending page ``search.hint_depth`` (10 pages of 5: the 50th hit), or the list's last
hit when the list is shorter. The best hit weighs 1; a hit no better than the floor weighs 0; in
between, linearly. The estimate after page ``p`` is the sum of the weights of the hits on the next
``window`` pages (pages p+1 … p+window, ``search.hint_window``). The rule uses only the list's own
scores, so it needs no training data and is the same for every scale (BM25, cosine,
reciprocal-rank sums). When the floor ties with the top (a listing whose hits all score alike:
``recall-search --id``, an exact id lookup), each hit scoring like the top weighs 1: every one is
as good as the best, and nothing in the scores says to stop.

The floor is a fixed depth, not the median of the list: how long a list is depends on the pool
(``search.pool``) and on how many steps match at all, not on relevance. With the median, a short list
(a small workspace: 25 hits) put its floor at its 13th hit and stopped agents after a page or two
(the example set: 1.60 pages, losing .180 of recall), while a long one (125 hits) put it past page
10. The floor at the last page an agent reads weighs the same hits the same in both.

The weights are not a calibrated probability: the estimate says how much of the list ahead scores
like its top, which grows with the relevant hits left but overstates their count when relevant
documents are rare (the paging report shows whether reading on by it pays: its ``vs fixed``).

It is computed on the list as the search returns it (up to ``search.pool`` hits), so the evaluator
asks its ranker for the same depth."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def relevance_weights(scores: Sequence[float], floor_rank: int) -> list[float]:
    """Each score's weight in [0, 1]: its height above the floor (the score ranked ``floor_rank``,
    counted in hits from 1, or the last when there are fewer), relative to the top's."""
    if floor_rank < 1:
        raise ValueError(f"floor rank {floor_rank}: out of range")
    if not scores:
        return []
    ranked = sorted(scores, reverse=True)
    top, floor = ranked[0], ranked[min(floor_rank, len(ranked)) - 1]
    if top <= floor:  # every hit down to the floor ties with the top
        return [1.0 if score >= top else 0.0 for score in scores]
    return [min(1.0, max(0.0, (score - floor) / (top - floor))) for score in scores]


@dataclass(frozen=True)
class Hint:
    """The rule: look ``window`` pages ahead (``search.hint_window``), each hit weighed against the
    score ending page ``depth`` (``search.hint_depth``); pages are counted as ``page`` is."""
    window: int
    depth: int

    def __post_init__(self) -> None:
        if self.window < 0 or self.depth < 1:
            raise ValueError(f"hint window {self.window}, depth {self.depth}: out of range")

    @classmethod
    def of(cls, search) -> "Hint":
        """The rule a ``SearchConfig`` sets."""
        return cls(search.hint_window, search.hint_depth)

    def remaining(self, scores: Sequence[float], page: int, page_size: int) -> float:
        """Estimated relevant hits on pages ``page+1 … page+window`` of the ranked ``scores``."""
        if page < 0 or page_size < 1:
            raise ValueError(f"page {page}, page_size {page_size}: out of range")
        start, stop = page * page_size, (page + self.window) * page_size
        return sum(relevance_weights(scores, self.depth * page_size)[start:stop])
