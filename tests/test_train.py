"""`mem tune`'s training without the model: the batches (every pair once an epoch, no text twice in
a batch, which would ask a text to score below itself; seeded), the parameters' checks, and the
rate the report gives. The chunked encoding needs the model: test_tune.py (slow)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mem_retrieval.text.train import Pair, Training, batches


def texts_of(batch):
    return [text for pair in batch for text in pair.texts()]


def test_distinct_pairs_fill_every_batch_but_the_last():
    pairs = [Pair(f"a{i}", f"p{i}", f"n{i}") for i in range(10)]
    cut = batches(pairs, 4, random.Random(0))
    assert [len(b) for b in cut] == [4, 4, 2]
    assert [p for b in cut for p in b] != pairs  # shuffled


def test_a_shared_positive_waits_for_the_next_batch():
    # two steps cite p: the second pair waits, and z's pair fills the first batch
    xp, yp, zq = Pair("x", "p"), Pair("y", "p"), Pair("z", "q")
    for seed in range(10):
        cut = batches([xp, yp, zq], batch_size=2, order=random.Random(seed))
        assert sorted(len(b) for b in cut) == [1, 2]
        assert not any(xp in b and yp in b for b in cut)


def test_an_anchor_that_is_another_pairs_positive_is_kept_apart():
    # a2 cites a1 and a4 cites a2: a2 would be an anchor and a negative document in one batch
    pairs = [Pair("a2", "a1", "n"), Pair("a4", "a2", "m")]
    assert sorted(map(len, batches(pairs, 16, random.Random(0)))) == [1, 1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6), st.none() | st.integers(0, 6)),
                max_size=40),
       st.integers(1, 6), st.integers(0, 3))
def test_every_pair_once_and_no_text_twice_in_a_batch(raw, batch_size, seed):
    # texts from a small alphabet, so repeats are the rule; the brute-force oracle counts them
    pairs = [Pair(f"t{a}" * (a + 1), f"t{p}" * (p + 1), None if n is None else f"t{n}" * (n + 1))
             for a, p, n in raw]
    cut = batches(pairs, batch_size, random.Random(seed))
    assert Counter(pair for batch in cut for pair in batch) == Counter(pairs)
    for batch in cut:
        assert 1 <= len(batch) <= batch_size
        assert all(not (a.texts() & b.texts()) for i, a in enumerate(batch) for b in batch[i + 1:])
    assert cut == batches(pairs, batch_size, random.Random(seed))   # seeded


def test_training_parameters_are_checked():
    with pytest.raises(ValueError, match="chunk 0"):
        Training(chunk=0)
    with pytest.raises(ValueError, match="precision 'fp16': one of auto, bf16, fp32"):
        Training(precision="fp16")


def test_a_named_precision_is_kept():
    assert Training(precision="fp32").resolved() == Training(precision="fp32")
    assert Training(precision="bf16").resolved() == Training(precision="bf16")


@pytest.mark.slow  # torch imported (2 to 5 s) to ask the CPU
def test_auto_precision_is_decided():
    decided = Training(epochs=2).resolved()
    assert decided.precision in ("bf16", "fp32")
    assert decided == Training(epochs=2, precision=decided.precision)


def test_the_training_rate_counts_every_epoch():
    from mem_retrieval.tune import TuneReport

    model = {"path": "models/tuned-abc", "base": "base", "sha256": "abc" * 8, "training": {"epochs": 3}}
    report = TuneReport(pairs=10, steps=5, seconds=4.0, loss=0.5, model=model)
    assert report.pairs_per_second == 7.5   # 30 pairs trained in 4 s
    assert report.text().startswith("tuned on 10 pairs from 5 steps, 3 epochs, in 4 s (7.5 pairs/s)")
    one = TuneReport(10, 5, 4.0, 0.5, {**model, "training": {"epochs": 1}})
    assert one.as_dict()["pairs_per_second"] == 2.5 and "epochs" not in one.text()


def test_mem_tune_refuses_an_unknown_precision_in_one_line(mem):
    code, out, err = mem("tune", "--precision", "fp16")
    assert (code, out, err) == (2, "", "mem: --precision 'fp16' is not one of auto, bf16, fp32\n")
