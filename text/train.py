"""Contrastive fine-tuning of the embedding model on a workspace's own citation pairs.

Each example is (a step's statement, the statement of a step it cites, a hard negative: a step BM25
ranks high for it that it does not cite). The loss is the multiple-negatives ranking loss: for each
anchor, its positive must score above every other positive and negative of the batch (in-batch
negatives) — cross-entropy over ``scale · cosine``. Plain torch on the CPU, seeded: the same pairs
and parameters give the same model. torch and sentence_transformers are imported only when training
runs (and by ``embed`` and ``onnx``, never at import time).

The batches (``batches``) hold no text twice. A step citing three steps makes three pairs with one
anchor and one hard negative, and a basic step is the positive of many pairs (up to 14 on the
development set), so in a plain shuffle 219 of the development set's 772 pairs (mean of 200
shuffles) shared a text with another pair of their batch: the loss then asked an anchor to score
its own step's other citation below its positive, or a text below itself. A pair that would repeat
a text waits for the next batch (sentence-transformers' no-duplicates sampler does the same).

A batch's texts are encoded ``chunk`` at a time, sorted by length, each chunk padded only to its own
longest text (``_encode``). Each text's embedding depends on its own word pieces alone, so the loss
and its gradient are those of one padded call; but one call pads every text to the batch's longest,
nearly always the model's 256 word pieces, while the development set's texts average 92. There,
chunks of 8 run 333 word pieces a pair where one call per side ran 701.

The texts are encoded in bfloat16 where the CPU computes it natively (``Training.precision``
"auto"; AVX-512 BF16 or AMX): torch's autocast runs the model's matrix products in bfloat16, while
the weights, the optimiser, the cosines and the loss stay float32. On the development set's pairs
that trains 1.4–1.9 times as fast, to the same quality within the noise of a few hundred pairs
(README). Elsewhere bfloat16 is emulated and slower, so "auto" keeps float32 there."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path


@dataclass(frozen=True)
class Pair:
    anchor: str
    positive: str
    negative: str | None = None

    def texts(self) -> set[str]:
        return {self.anchor, self.positive} | ({self.negative} if self.negative else set())


@dataclass(frozen=True)
class Training:
    epochs: int = 1
    batch_size: int = 16
    learning_rate: float = 2e-5
    scale: float = 20.0         # the cosine's temperature in the loss (sentence-transformers' default)
    warmup: float = 0.1         # share of the steps with a linearly rising learning rate
    seed: int = 0
    chunk: int = 8              # texts encoded in one call, by length (the loss is the same for any)
    precision: str = "auto"     # the encoding's: "bf16", "fp32", or "auto" (bf16 where native)

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.chunk < 1:
            raise ValueError(f"epochs {self.epochs}, batch size {self.batch_size}, chunk "
                             f"{self.chunk}: each must be at least 1")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision {self.precision!r}: one of {', '.join(PRECISIONS)}")

    def resolved(self) -> "Training":
        """These parameters with ``precision`` "auto" made "bf16" or "fp32" for this machine."""
        if self.precision != "auto":
            return self
        return replace(self, precision="bf16" if native_bf16() else "fp32")


PRECISIONS = ("auto", "bf16", "fp32")


def native_bf16() -> bool:
    """Whether this CPU computes bfloat16 products natively (torch's oneDNN check: AVX-512 BF16 or
    AMX); where it does not, bfloat16 is emulated and slower than float32."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch without the check, or without oneDNN
        return False


def batches(pairs: Sequence[Pair], batch_size: int, order: random.Random) -> list[list[Pair]]:
    """One epoch, in an order drawn from ``order``: every pair once, in batches of at most
    ``batch_size`` that hold no text twice (a pair that would repeat one waits for the next)."""
    shuffled = list(pairs)
    order.shuffle(shuffled)
    waiting: deque[Pair] = deque(shuffled)
    cut: list[list[Pair]] = []
    while waiting:
        batch: list[Pair] = []
        seen: set[str] = set()
        passed: list[Pair] = []
        while waiting and len(batch) < batch_size:
            pair = waiting.popleft()
            texts = pair.texts()
            if texts & seen:
                passed.append(pair)     # waits for the next batch, first in line
            else:
                batch.append(pair)
                seen |= texts
        waiting.extendleft(reversed(passed))
        cut.append(batch)
    return cut


def train(model: str, pairs: Sequence[Pair], out: Path, training: Training = Training(),
          progress: Callable[[int], None] | None = None,
          on_start: Callable[[], None] | None = None) -> float:
    """Fine-tune ``model`` (a package or folder, ``text.embed.model_dir``) on ``pairs`` and save it
    to ``out`` (a sentence-transformers folder). Returns the last batch's mean loss. ``on_start``
    is called once the model is loaded, as the first batch starts (a rate of pairs/s starts
    there: loading took 5-14 s of a few pairs' tune)."""
    import torch

    from mem_retrieval.text.embed import model_dir, offline

    offline()
    from sentence_transformers import SentenceTransformer

    training = training.resolved()
    torch.manual_seed(training.seed)
    order = random.Random(training.seed)
    encoder = SentenceTransformer(str(model_dir(model)), device="cpu")
    encoder.train()
    optimiser = torch.optim.AdamW(encoder.parameters(), lr=training.learning_rate)
    epochs = [batches(pairs, training.batch_size, order) for _ in range(training.epochs)]
    steps = sum(len(epoch) for epoch in epochs)
    warm = max(1, int(steps * training.warmup))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: (s + 1) / warm if s < warm else max(0.0, (steps - s) / max(1, steps - warm)))
    loss_value = 0.0
    if on_start is not None:
        on_start()
    for epoch in epochs:
        for batch in epoch:
            documents = [p.positive for p in batch] + [p.negative for p in batch if p.negative]
            embedded = _encode(encoder, [p.anchor for p in batch] + documents, training.chunk,
                               bf16=training.precision == "bf16")
            scores = training.scale * embedded[:len(batch)] @ embedded[len(batch):].T
            loss = torch.nn.functional.cross_entropy(scores, torch.arange(len(batch)))
            loss.backward()
            optimiser.step()
            schedule.step()
            optimiser.zero_grad()
            loss_value = float(loss.detach())
            if progress is not None:
                progress(len(batch))
    encoder.eval()
    out.mkdir(parents=True, exist_ok=True)
    encoder.save(str(out))
    return loss_value


def _encode(encoder, texts: list[str], chunk: int, bf16: bool = False):
    """The unit embeddings of ``texts`` (float32), in order: tokenized once, then encoded ``chunk``
    texts at a time in order of length, each chunk cut to its own longest text (attention masks the
    rest); with ``bf16``, the model's matrix products in bfloat16 (torch's autocast)."""
    import torch

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        embedded = _chunked(encoder, texts, chunk)
    return torch.nn.functional.normalize(embedded.float(), dim=1)   # float32 under autocast too


def _chunked(encoder, texts: list[str], chunk: int):
    """``_encode``'s embeddings before they are made float32 unit vectors."""
    import torch

    features = encoder.preprocess(texts)
    lengths = features["attention_mask"].sum(dim=1)
    order = torch.argsort(lengths, stable=True)
    parts = []
    for start in range(0, len(texts), chunk):
        rows = order[start:start + chunk]
        width = int(lengths[rows].max())
        part = {name: value[rows, :width] for name, value in features.items()
                if torch.is_tensor(value) and value.dim() == 2}
        parts.append(encoder(part)["sentence_embedding"])
    return torch.cat(parts).index_select(0, torch.argsort(order))
