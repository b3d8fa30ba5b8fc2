"""The hint against early stopping: how many relevant hits remain on later pages, from the scores.

Each hit of a ranked list gets a weight in [0, 1], read as the chance that it is relevant:

    weight(s) = clip((s - median) / (top - median), 0, 1)

where ``top`` is the best score of the list and ``median`` the median score of the whole list (the
score of a typical candidate, which is almost always not relevant). The best hit weighs 1; a hit no
better than the typical candidate weighs 0; in between, linearly. The estimate after page ``p`` is
the sum of the weights of the hits on the next ``window`` pages (pages p+1 … p+window). The rule
uses only the list's own scores, so it needs no training data and is the same for every scale
(BM25, cosine, reciprocal-rank sums); its one parameter is the look-ahead ``window``
(``search.hint_window``, like the page size, from the config). A list whose scores are all equal carries no evidence and estimates 0.

The weights are not a calibrated probability: the estimate says how much of the list ahead scores
like its top, which grows with the relevant hits left but overstates their count when relevant
documents are rare (the paging report shows whether reading on by it pays: its ``vs fixed``).

It is computed on the list as the search returns it (up to ``search.pool`` hits), so the evaluator
asks its ranker for the same depth."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median



def relevance_weights(scores: Sequence[float]) -> list[float]:
    """Each score's weight in [0, 1]: its height above the list's median, relative to the top's."""
    if not scores:
        return []
    top, typical = max(scores), median(scores)
    if top <= typical:
        return [0.0] * len(scores)
    return [min(1.0, max(0.0, (score - typical) / (top - typical))) for score in scores]


def estimate_remaining(scores: Sequence[float], page: int, page_size: int, window: int) -> float:
    """Estimated relevant hits on pages ``page+1 … page+window`` of the ranked ``scores``."""
    if page < 0 or page_size < 1 or window < 0:
        raise ValueError(f"page {page}, page_size {page_size}, window {window}: out of range")
    start, stop = page * page_size, (page + window) * page_size
    return sum(relevance_weights(scores)[start:stop])
