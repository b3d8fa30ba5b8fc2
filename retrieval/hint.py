"""The hint against early stopping: how many relevant hits remain on later pages.

Estimated from the score distribution alone (no judgments at query time): each later hit counts
in proportion to how close its score is to the best score of the result list,
``sum(max(0, (s - floor) / (top - floor)))`` over the next ``window`` pages, where ``floor`` is the
lowest score in the list. A flat tail (hits as good as the first ones) says 'keep paging'; a steep
drop says the rest is noise."""

from __future__ import annotations


def estimate_remaining(scores: list[float], page: int, page_size: int, window: int) -> float | None:
    if not scores:
        return None
    top, floor = max(scores), min(scores)
    later = scores[page * page_size:(page + window) * page_size]
    if top <= floor:
        return float(len(later))
    return round(sum(max(0.0, (s - floor) / (top - floor)) for s in later), 3)
