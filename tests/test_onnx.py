"""The ONNX query path: the same vectors as sentence-transformers on torch (fp32, within 1e-4
cosine: an index built one way is searched the other way), and a vector that does not depend on the
texts embedded beside it (a query equals the same text in bulk, bit for bit, int8 too)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mem_retrieval.text.embed import ModelSpec, embed, embed_query, prepare

BLUEPRINTS = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "blueprints" / "ws"


def texts() -> list[str]:
    """LaTeX-heavy statements, long ones past the model's 256 word pieces, short queries."""
    found = ["GL2m/Sp2m generation", "E₆/F₄ sheaves over F̄_q", "Hensel lifting, p odd",
             "Entropy of a uniform random variable " * 40]
    for path in sorted(BLUEPRINTS.glob("*/tree.json"))[:6]:
        found += [step["statement"] for step in json.loads(path.read_text())["steps"][:8]]
    return [prepare(t, 2000) for t in found]


@pytest.fixture(scope="module")
def export(example):
    (folder,) = (example.workspace.index_dir / "models").glob("onnx-*")
    return str(folder)


def test_onnx_fp32_vectors_equal_torch_to_1e4_cosine(example, export):
    corpus = texts()
    package = example.config.model.package
    torch_vectors = embed(corpus, ModelSpec(package), batch_size=16)
    onnx_vectors = embed(corpus, ModelSpec(package, export, quantized=False))
    cosine = (torch_vectors * onnx_vectors).sum(axis=1)
    assert float((1 - cosine).max()) < 1e-4
    assert np.allclose(np.linalg.norm(onnx_vectors, axis=1), 1.0, atol=1e-5)
    assert float(1 - torch_vectors[0] @ embed_query(corpus[0], ModelSpec(package, export))) < 1e-4


@pytest.mark.parametrize("quantized", [False, True])
def test_a_vector_does_not_depend_on_its_neighbours(example, export, quantized):
    spec = ModelSpec(example.config.model.package, export, quantized)
    corpus = texts()
    bulk = embed(corpus, spec)
    for i in (0, 3, len(corpus) - 1):
        assert np.array_equal(bulk[i], embed_query(corpus[i], spec))
    assert np.array_equal(embed(corpus[::-1], spec)[::-1], bulk)
