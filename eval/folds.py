"""Folds for cross-validation that hold groups of queries whole (their runs, or their settings), so
that nothing is chosen on the group it is scored on (`mem eval fusion`, `mem tune --eval`)."""

from __future__ import annotations

from collections.abc import Sequence

FOLDS_BY = ("run", "setting")     # what a fold of `mem eval fusion` holds whole


def group_folds(groups: Sequence[str], count: int) -> list[int]:
    """A fold for each query, given its group (its run, or its setting): groups go whole to the
    fold holding fewest queries so far (largest first, ties by name), so folds are balanced and no
    group straddles two."""
    sizes: dict[str, int] = {}
    for group in groups:
        sizes[group] = sizes.get(group, 0) + 1
    load = [0] * count
    fold_of: dict[str, int] = {}
    for group in sorted(sizes, key=lambda g: (-sizes[g], g)):
        fold = min(range(count), key=lambda f: (load[f], f))
        fold_of[group] = fold
        load[fold] += sizes[group]
    return [fold_of[group] for group in groups]
