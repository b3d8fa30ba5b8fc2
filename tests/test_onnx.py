"""The ONNX query path: the same vectors as sentence-transformers on torch (fp32, within 1e-4
cosine: an index built one way is searched the other way), and a vector that does not depend on the
texts embedded beside it (a query equals the same text in bulk, bit for bit, int8 too)."""

from __future__ import annotations

import json
import os
import shutil
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
    assert len(found) > 20, BLUEPRINTS  # the development set's statements are there
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


def _cache_entry(cache: Path, export: Path) -> Path:
    from mem_retrieval.text.onnx import _versions_key

    return cache / "models" / f"{export.name}-{_versions_key()}"


def _whole(folder: Path) -> str | None:
    from mem_retrieval.text.onnx import manifest_problem

    return manifest_problem(folder)


def test_a_new_index_links_the_export_from_the_users_cache(example, onnx_export, tmp_path, monkeypatch):
    """A second workspace on the machine pays no export: its files are the cache's (hard links)."""
    from mem_retrieval.text.embed import model_dir
    from mem_retrieval.text.onnx import cache_dir, place_export

    cache = tmp_path / "cache"
    monkeypatch.setenv("MEM_CACHE_DIR", str(cache))
    assert cache_dir() == cache
    entry = _cache_entry(cache, onnx_export)
    entry.parent.mkdir(parents=True)
    shutil.copytree(onnx_export, entry, copy_function=os.link)
    out = tmp_path / "index" / "models" / onnx_export.name
    assert place_export(model_dir(example.config.model.package), out, True, _whole) == "cache"
    assert _whole(out) is None
    for path in entry.iterdir():
        assert (out / path.name).stat().st_ino == path.stat().st_ino
    for off in ("", "off"):
        monkeypatch.setenv("MEM_CACHE_DIR", off)
        assert cache_dir() is None


@pytest.mark.slow
def test_a_damaged_cache_entry_is_exported_again_and_replaced(example, onnx_export, tmp_path, monkeypatch):
    from mem_retrieval.text.embed import model_dir
    from mem_retrieval.text.onnx import INT8, place_export, sha256_file

    cache = tmp_path / "cache"
    monkeypatch.setenv("MEM_CACHE_DIR", str(cache))
    entry = _cache_entry(cache, onnx_export)
    shutil.copytree(onnx_export, entry)  # copies: the damage below must not reach the session's export
    (entry / INT8).write_bytes(b"truncated")
    out = tmp_path / "index" / "models" / onnx_export.name
    assert place_export(model_dir(example.config.model.package), out, True, _whole) == "exported"
    assert _whole(out) is None and _whole(entry) is None
    assert (entry / INT8).stat().st_ino == (out / INT8).stat().st_ino  # the cache now shares the new export
    assert sha256_file(out / INT8) == sha256_file(onnx_export / INT8)  # byte-deterministic
