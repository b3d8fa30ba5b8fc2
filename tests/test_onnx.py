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

from conftest import build_workspace, seed_export
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


def test_int8_weights_are_stored_as_uint8_around_128(export):
    """Every product of the int8 model multiplies uint8 activations by uint8 weights with zero point
    128: the kernel every CPU computes exactly (int8 weights saturate on CPUs without VNNI)."""
    import onnx
    from onnx import numpy_helper

    from mem_retrieval.text.onnx import INT8, WEIGHT_ZERO

    model = onnx.load(str(Path(export) / INT8))
    weights = {init.name: init for init in model.graph.initializer}
    made_by = {out: node.op_type for node in model.graph.node for out in node.output}
    products = [node for node in model.graph.node if node.op_type == "MatMulInteger"]
    assert len(products) == 36  # 6 layers × (q, k, v, attention output, 2 feed-forward)
    for node in products:
        assert made_by[node.input[0]] == made_by[node.input[2]] == "DynamicQuantizeLinear"  # uint8
        weight, zero = (numpy_helper.to_array(weights[node.input[i]]) for i in (1, 3))
        assert weight.dtype == zero.dtype == np.uint8 and zero.shape == weight.shape[1:]
        assert (zero == WEIGHT_ZERO).all() and int(weight.min()) >= 1  # int8 symmetric: -127 … 127


def test_onnxruntime_multiplies_uint8_weights_around_128_exactly():
    """The kernel against integer arithmetic, on whatever CPU runs the suite: the extreme products
    (255 · ±127, which a 16-bit pair sum could not hold) and random ones, activations with a zero
    point as DynamicQuantizeLinear gives them."""
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    from mem_retrieval.text.onnx import WEIGHT_ZERO

    rng = np.random.default_rng(7)
    depth = 384
    weights = rng.integers(1, 256, (depth, depth)).astype(np.uint8)
    weights[:, 0], weights[:, 1] = 255, 1  # +127 and -127
    zero = np.full(depth, WEIGHT_ZERO, dtype=np.uint8)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B", "a_zero", "b_zero"], ["Y"])], "product",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [None, depth]),
         helper.make_tensor_value_info("a_zero", TensorProto.UINT8, [])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, [None, depth])],
        initializer=[numpy_helper.from_array(weights, "B"), numpy_helper.from_array(zero, "b_zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    activations = rng.integers(0, 256, (64, depth)).astype(np.uint8)
    activations[0] = 255
    for a_zero in (0, 117):
        found = session.run(None, {"A": activations, "a_zero": np.array(a_zero, dtype=np.uint8)})[0]
        if a_zero == 0:
            assert found[0, 0] == 255 * 127 * 384 == 12_435_840 and found[0, 1] == -12_435_840
        exact = (activations.astype(np.int64) - a_zero) @ (weights.astype(np.int64) - WEIGHT_ZERO)
        assert np.array_equal(found, exact)


def test_an_index_on_an_older_int8_export_keeps_it_and_says_how_to_move(tmp_path, onnx_export):
    """An index whose int8 vectors came from an export older than this version's (8-bit weights)
    keeps embedding with it, so its vectors stay one model, and `mem index` says so; --full moves
    it to this version's export, drops the old one and embeds every text again."""
    from mem_retrieval.memory import Memory
    from mem_retrieval.text.onnx import EXPORT_VERSION, MANIFEST

    ws = build_workspace(tmp_path / "ws")
    seed_export(ws.root / ".mem", onnx_export)
    notes: list[str] = []
    first = Memory.open(ws.root).index(progress=False, on_message=notes.append)
    assert notes == [] and first.embedded > 1
    meta_path = ws.root / ".mem" / "meta.json"
    meta = json.loads(meta_path.read_text())
    current = ws.root / ".mem" / meta["export"]["path"]
    old = current.with_name("onnx-older")
    shutil.copytree(current, old)  # copies: the seeded files are the session's export's
    manifest = json.loads((old / MANIFEST).read_text())
    (old / MANIFEST).write_text(json.dumps(manifest | {"export": "onnx-v2"}))
    meta["export"]["path"] = f"models/{old.name}"
    meta_path.write_text(json.dumps(meta))
    shutil.rmtree(current)
    ws.edit_step("alpha", "a1", statement="a changed statement, embedded again")

    report = Memory.open(ws.root).index(progress=False, on_message=notes.append)
    assert report.embedded == 1 and not report.full
    assert len(notes) == 1 and "onnx-v2" in notes[0] and "`mem index --full`" in notes[0]
    assert json.loads(meta_path.read_text())["export"]["path"] == "models/onnx-older"

    notes.clear()
    rebuilt = Memory.open(ws.root).index(progress=False, full=True, on_message=notes.append)
    moved = json.loads(meta_path.read_text())["export"]["path"]
    assert notes == [] and moved == f"models/{onnx_export.name}" and not old.exists()
    assert rebuilt.embedded == first.embedded  # every text again: none of the old vectors
    assert json.loads((ws.root / ".mem" / moved / MANIFEST).read_text())["export"] == EXPORT_VERSION


def test_unsigned_weights_by_hand(tmp_path):
    """w → w + 128 with zero point 128, worked out by hand; a product without its weights' zero
    point is refused, not half rewritten."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from mem_retrieval.text.onnx import _unsigned_weights

    def model(inputs):
        weights = numpy_helper.from_array(np.array([[-127, 0], [5, 127]], dtype=np.int8), "B")
        zero = numpy_helper.from_array(np.zeros(2, dtype=np.int8), "b_zero")
        graph = helper.make_graph(
            [helper.make_node("MatMulInteger", inputs, ["Y"])], "product",
            [helper.make_tensor_value_info("A", TensorProto.UINT8, [1, 2]),
             helper.make_tensor_value_info("a_zero", TensorProto.UINT8, [])],
            [helper.make_tensor_value_info("Y", TensorProto.INT32, [1, 2])], initializer=[weights, zero])
        path = tmp_path / f"{len(inputs)}.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
        return path

    path = model(["A", "B", "a_zero", "b_zero"])
    _unsigned_weights(path)
    stored = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}
    assert stored["B"].dtype == np.uint8 and stored["B"].tolist() == [[1, 128], [133, 255]]
    assert stored["b_zero"].tolist() == [128, 128]
    bare = model(["A", "B", "a_zero"])
    before = bare.read_bytes()
    with pytest.raises(ValueError, match="zero point"):
        _unsigned_weights(bare)
    assert bare.read_bytes() == before
