"""Contrastive fine-tuning of the embedding model on a workspace's own citation pairs.

Each example is (a step's statement, the statement of a step it cites, a hard negative: a step BM25
ranks high for it that it does not cite). The loss is the multiple-negatives ranking loss: for each
anchor, its positive must score above every other positive and negative of the batch (in-batch
negatives) — cross-entropy over ``scale · cosine``. Plain torch on the CPU, seeded: the same pairs
and parameters give the same model. torch and sentence_transformers are imported here only."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pair:
    anchor: str
    positive: str
    negative: str | None = None


@dataclass(frozen=True)
class Training:
    epochs: int = 1
    batch_size: int = 16
    learning_rate: float = 2e-5
    scale: float = 20.0         # the cosine's temperature in the loss (sentence-transformers' default)
    warmup: float = 0.1         # share of the steps with a linearly rising learning rate
    seed: int = 0


def train(model: str, pairs: Sequence[Pair], out: Path, training: Training = Training(),
          progress: Callable[[int], None] | None = None) -> float:
    """Fine-tune ``model`` (a package or folder, ``text.embed.model_dir``) on ``pairs`` and save it
    to ``out`` (a sentence-transformers folder). Returns the last batch's mean loss."""
    import torch

    from mem_retrieval.text.embed import model_dir, offline

    offline()
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(training.seed)
    order = random.Random(training.seed)
    encoder = SentenceTransformer(str(model_dir(model)), device="cpu")
    encoder.train()
    optimiser = torch.optim.AdamW(encoder.parameters(), lr=training.learning_rate)
    steps = training.epochs * math.ceil(len(pairs) / training.batch_size)
    warm = max(1, int(steps * training.warmup))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: (s + 1) / warm if s < warm else max(0.0, (steps - s) / max(1, steps - warm)))
    loss_value = 0.0
    for _ in range(training.epochs):
        shuffled = list(pairs)
        order.shuffle(shuffled)
        for start in range(0, len(shuffled), training.batch_size):
            batch = shuffled[start:start + training.batch_size]
            anchors = _embed(encoder, [p.anchor for p in batch])
            documents = _embed(encoder, [p.positive for p in batch] + [p.negative for p in batch if p.negative])
            scores = training.scale * anchors @ documents.T
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


def _embed(encoder, texts: list[str]):
    import torch

    features = encoder.preprocess(texts)
    return torch.nn.functional.normalize(encoder(features)["sentence_embedding"], dim=1)
