"""Paging through a ranked list: recall after each page, and simulated pagers that decide when to stop.

Pure functions over one query's ranked list and its relevant documents. A pager is asked, after
each page it has read, whether to read the next one; it never reads past the last page of the list
nor past ``max_pages``, and always reads page 1 (even an empty one: the search was made). The
simulated reader recognises a relevant hit when it reads one, so ``patience-1`` may use the
judgments of the pages already read, never of later ones.

- ``first-page``: reads page 1 only.
- ``fixed-k``: reads k pages (``fixed-2``).
- ``patience-1``: stops after the first page that brings no new relevant hit.
- ``score-drop``: stops after a page whose best score is below ``fraction`` (0.5) of the first
  hit's score (a list whose first score is not positive gives no scale: it stops after page 1).
- ``hint``: reads on while the page's estimate of relevant hits remaining on later pages
  (``retrieval.hint.Hint.remaining``) is at least 1.

Early-stop loss = recall after ``max_pages`` pages − recall where the pager stopped (never negative).

``fewest_pages`` is a bound, not a pager: the fewest mean pages that any stopping rule could read
on these lists with a mean loss of at most ``STOP_LOSS`` (0.02), found by a rule that knows where
every relevant hit is. A pager needing more is one a better stopping rule could beat; a target
below it is out of reach for this ranking, whatever the hint says."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from math import ceil

from mem_retrieval.configs import PAGES_LIMIT
from mem_retrieval.retrieval.hint import Hint
from mem_retrieval.retrieval.paging import shown_score

MAX_PAGES = 10
FIXED_K = 2
SCORE_DROP = 0.5
STOP_LOSS = 0.02


def check_pages(pages: int, param: str = "pages") -> None:
    """BadInput unless 1 ≤ ``pages`` ≤ ``PAGES_LIMIT`` (``--max-pages``, ``--pages``): lists are
    read that deep, and the bound's cost grows with the square (100,000 pages ran for hours)."""
    from mem_retrieval.records.errors import BadInput

    if not 1 <= pages <= PAGES_LIMIT:
        raise BadInput(f"{pages} is not a number of pages from 1 to {PAGES_LIMIT}", param=param)


@dataclass(frozen=True)
class RankedPages:
    """One query's ranked list cut into pages, with the documents that are relevant to it."""

    gids: tuple[str, ...]
    scores: tuple[float, ...]
    relevant: frozenset[str]
    page_size: int

    def __post_init__(self) -> None:
        if len(self.gids) != len(self.scores):
            raise ValueError(f"{len(self.gids)} ids but {len(self.scores)} scores")
        if self.page_size < 1:
            raise ValueError(f"page_size must be at least 1, not {self.page_size}")

    @classmethod
    def shown(cls, hits: Sequence, relevant: frozenset[str], page_size: int) -> "RankedPages":
        """A ranked list (``RankedHit``s, best first) as an agent's search pages show it: each gid
        at its first place, with the score its page shows (``shown_score``: the hint and the
        score-drop pager read what the agent reads, not the run's scores nudged apart for
        trec_eval)."""
        first: dict[str, float] = {}
        for hit in hits:
            first.setdefault(hit.gid, shown_score(hit.score))
        return cls(tuple(first), tuple(first.values()), relevant, page_size)

    @property
    def pages(self) -> int:
        """Pages the list fills (0 when it is empty)."""
        return ceil(len(self.gids) / self.page_size)

    def page_scores(self, page: int) -> tuple[float, ...]:
        return self.scores[(page - 1) * self.page_size:page * self.page_size]

    def found_by(self, page: int) -> set[str]:
        """Relevant documents among pages 1 … ``page``."""
        return self.relevant.intersection(self.gids[:page * self.page_size])

    def new_on(self, page: int) -> int:
        """Relevant documents first met on ``page``."""
        return len(self.found_by(page)) - len(self.found_by(page - 1))

    def recall_after(self, page: int) -> float:
        return len(self.found_by(page)) / len(self.relevant) if self.relevant else 0.0


Pager = Callable[[RankedPages, int], bool]
"""``pager(pages, page)``: having read ``page`` (1-based), read the next one?"""


@dataclass(frozen=True)
class Stop:
    """Where a pager stopped on one query: pages read and the recall reached."""

    pages: int
    recall: float


def first_page() -> Pager:
    return lambda ranked, page: False


def fixed(k: int = FIXED_K) -> Pager:
    if k < 1:
        raise ValueError(f"fixed-k needs k >= 1, not {k}")
    return lambda ranked, page: page < k


def patience(limit: int = 1) -> Pager:
    """Stops after ``limit`` pages in a row that bring no new relevant hit."""
    def read_on(ranked: RankedPages, page: int) -> bool:
        barren = 0
        while barren < page and ranked.new_on(page - barren) == 0:
            barren += 1
        return barren < limit
    return read_on


def score_drop(fraction: float = SCORE_DROP) -> Pager:
    def read_on(ranked: RankedPages, page: int) -> bool:
        first = ranked.scores[0] if ranked.scores else 0.0
        best = max(ranked.page_scores(page), default=float("-inf"))
        return first > 0 and best >= fraction * first
    return read_on


def hint(rule: Hint) -> Pager:
    return lambda ranked, page: rule.remaining(ranked.scores, page, ranked.page_size) >= 1


def standard_pagers(rule: Hint, k: int = FIXED_K, fraction: float = SCORE_DROP) -> dict[str, Pager]:
    """The pagers the evaluator reports, by name (``rule``: the hint's)."""
    return {"first-page": first_page(), f"fixed-{k}": fixed(k), "patience-1": patience(1),
            "score-drop": score_drop(fraction), "hint": hint(rule)}


def read(ranked: RankedPages, pager: Pager, max_pages: int = MAX_PAGES) -> Stop:
    """Simulate one pager on one query."""
    last = max(1, min(max_pages, ranked.pages))
    page = 1
    while page < last and pager(ranked, page):
        page += 1
    return Stop(page, ranked.recall_after(page))


def recall_by_page(ranked: RankedPages, max_pages: int = MAX_PAGES) -> list[float]:
    """Recall after pages 1 … ``max_pages``."""
    return [ranked.recall_after(page) for page in range(1, max_pages + 1)]


def recall_at(curve: Sequence[float], pages: float, fixed_pages: Sequence[float] | None = None) -> float:
    """Recall of fixed paging at a mean of ``pages`` pages (1 ≤ pages ≤ len(curve)): reading k or
    k + 1 pages, mixed to that mean, so ``curve`` (fixed-k's mean recall) interpolated linearly
    between the mean pages fixed-k reads (``fixed_pages``; without it, k: every list at least as
    long as the pages read). A list shorter than k pages ends early, for fixed-k as for every pager
    (``read``), so fixed-k reads fewer than k on average: past the last, the curve stays at its
    end. A pager beats fixed paging at equal cost when its recall exceeds this."""
    if not 1 <= pages <= len(curve):
        raise ValueError(f"pages {pages} outside 1 … {len(curve)}")
    points = list(fixed_pages) if fixed_pages is not None else [float(k) for k in range(1, len(curve) + 1)]
    if pages <= points[0]:
        return curve[0]
    for k in range(1, len(curve)):
        if pages <= points[k]:
            low, high = points[k - 1], points[k]
            if high == low:
                return curve[k]
            return curve[k - 1] + (pages - low) / (high - low) * (curve[k] - curve[k - 1])
    return curve[-1]


def fixed_pages(lists: Sequence[RankedPages], max_pages: int = MAX_PAGES) -> list[float]:
    """The mean pages fixed-k reads over ``lists``, k = 1 … ``max_pages``: k, or the list's last
    page where it ends sooner (and page 1 of an empty list), as ``read`` stops every pager."""
    count = len(lists) or 1
    last = [max(1, min(max_pages, ranked.pages)) for ranked in lists]
    return [sum(min(k, end) for end in last) / count for k in range(1, max_pages + 1)]


@dataclass(frozen=True)
class PagerSummary:
    """One pager over all queries: mean pages read, mean recall at stop, mean early-stop loss."""

    pages: float
    recall: float
    loss: float


def fewest_pages(curves: Sequence[Sequence[float]], loss: float = STOP_LOSS) -> PagerSummary:
    """The stops with the fewest mean pages whose mean early-stop loss is at most ``loss``, each
    query's stop chosen knowing its ``curve`` (recall after pages 1 … max_pages): exact, by dynamic
    programming over the total pages read (the least total loss for each total)."""
    import numpy as np

    if not curves:
        return PagerSummary(0.0, 0.0, 0.0)
    count = len(curves)
    width = max(len(curve) for curve in curves)
    least = np.zeros(1)  # least[t]: the least summed loss over the queries so far reading t pages
    for curve in curves:
        last = np.asarray(curve, dtype=np.float64)
        lost = last[-1] - last  # stopping after page p loses lost[p - 1]
        nxt = np.full(len(least) + width, np.inf)
        for page in range(1, len(curve) + 1):
            reach = slice(page, page + len(least))
            nxt[reach] = np.minimum(nxt[reach], least + lost[page - 1])
        least = nxt
    total = int(np.flatnonzero(least <= loss * count + 1e-9)[0])
    full = sum(curve[-1] for curve in curves) / count
    return PagerSummary(total / count, full - least[total] / count, least[total] / count)


@dataclass(frozen=True)
class PagingSummary:
    recall_by_page: list[float]
    pagers: dict[str, PagerSummary]
    bound: PagerSummary     # fewest_pages: what the best stopping rule would read
    fixed_pages: list[float]  # the mean pages fixed-k reads, k = 1 … max_pages (shorter lists end early)


def summarize(lists: Sequence[RankedPages], pagers: Mapping[str, Pager],
              max_pages: int = MAX_PAGES) -> PagingSummary:
    """Mean recall by page and each pager's summary over ``lists`` (one per judged query)."""
    if max_pages < 1:
        raise ValueError(f"max_pages must be at least 1, not {max_pages}")
    count = len(lists) or 1
    curves = [recall_by_page(ranked, max_pages) for ranked in lists]
    mean_curve = [sum(curve[page] for curve in curves) / count for page in range(max_pages)]
    summaries = {}
    for name, pager in pagers.items():
        stops = [read(ranked, pager, max_pages) for ranked in lists]
        pages = sum(stop.pages for stop in stops) / count
        recall = sum(stop.recall for stop in stops) / count
        loss = sum(curve[-1] - stop.recall for curve, stop in zip(curves, stops)) / count
        summaries[name] = PagerSummary(pages if lists else 0.0, recall, loss)
    return PagingSummary(mean_curve, summaries, fewest_pages(curves), fixed_pages(lists, max_pages))
