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


def _product(weights: np.ndarray, zero: np.ndarray):
    """A session of one MatMulInteger by constant ``weights`` (zero point ``zero``), as the model's."""
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    depth, width = weights.shape
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B", "a_zero", "b_zero"], ["Y"])], "product",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [None, depth]),
         helper.make_tensor_value_info("a_zero", TensorProto.UINT8, [])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, [None, width])],
        initializer=[numpy_helper.from_array(weights, "B"), numpy_helper.from_array(zero, "b_zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def export(example):
    (folder,) = (example.workspace.index_dir / "models").glob("onnx-*")
    return str(folder)


@pytest.mark.slow  # torch and sentence-transformers imported, the texts embedded both ways (7 s)
def test_onnx_fp32_vectors_equal_torch_to_1e4_cosine(example, export):
    corpus = texts()
    package = example.config.model.package
    torch_vectors = embed(corpus, ModelSpec(package), batch_size=16)
    onnx_vectors = embed(corpus, ModelSpec(package, export, quantized=False))
    cosine = (torch_vectors * onnx_vectors).sum(axis=1)
    assert float((1 - cosine).max()) < 1e-4
    assert np.allclose(np.linalg.norm(onnx_vectors, axis=1), 1.0, atol=1e-5)
    assert float(1 - torch_vectors[0] @ embed_query(corpus[0], ModelSpec(package, export))) < 1e-4


@pytest.mark.slow  # torch and sentence-transformers imported (5 s): the torch path is not the default
def test_torch_on_the_threads_asked_gives_the_same_vectors_and_restores_its_threads(example):
    """``workers`` on torch (a Ray actor owning one CPU asks for 1) sets torch's threads for the
    call only; the vectors are the model's whatever the thread count."""
    import torch

    spec, corpus = ModelSpec(example.config.model.package), texts()[:6]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        during: list[int] = []
        one = embed(corpus, spec, batch_size=2, workers=1,
                    progress=lambda texts, chars: during.append(torch.get_num_threads()))
        assert during == [1, 1, 1] and torch.get_num_threads() == 2
        assert np.allclose(one, embed(corpus, spec), atol=1e-6)
    finally:
        torch.set_num_threads(threads)


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


def test_the_weights_key_reads_the_weights_once_while_they_stay_and_again_once_changed(tmp_path, monkeypatch):
    """The export's key hashes the model's weights (~90 MB): a process indexing again and again read
    them at every run. Read once while the file stays; changed in place, the same size, read again."""
    import hashlib

    from mem_retrieval.records import files
    from mem_retrieval.text.onnx import EXPORT_VERSION, source_key

    reads: list[str] = []
    hashed = files.sha256_file
    monkeypatch.setattr(files, "sha256_file", lambda path: reads.append(Path(path).name) or hashed(path))
    weights = tmp_path / "model.safetensors"

    def key(content: bytes) -> str:  # the key as its definition reads, by hand
        return hashlib.sha256(EXPORT_VERSION.encode() + hashlib.sha256(content).hexdigest().encode()
                              ).hexdigest()[:16]

    weights.write_bytes(b"weights one")
    assert source_key(tmp_path) == source_key(tmp_path) == key(b"weights one")
    assert reads == ["model.safetensors"]
    weights.write_bytes(b"weights two")  # the same size; a time of its own (a clock tick holds both writes)
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 1))
    assert source_key(tmp_path) == key(b"weights two") and len(reads) == 2


def test_a_relative_cache_variable_names_no_folder_of_the_callers(tmp_path, monkeypatch):
    """A relative `XDG_CACHE_HOME` (which the XDG specification has ignored) wrote the cache into
    the caller's folder; a relative `MEM_CACHE_DIR` is read from the caller's folder, and a warm
    server compares it as its callers read it (two folders giving `cache` name two caches)."""
    from mem_retrieval.cli.forward import environment
    from mem_retrieval.text.onnx import cache_dir

    monkeypatch.delenv("MEM_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", "relcache")
    assert cache_dir() is None  # a home folder that does not exist is not made for a cache
    (tmp_path / "home").mkdir()
    assert cache_dir() == tmp_path / "home" / ".cache" / "mem_retrieval"
    monkeypatch.chdir(tmp_path)
    for no_home in ("", "home"):  # read as `/`, and against the caller's folder
        monkeypatch.setenv("HOME", no_home)
        assert cache_dir() is None
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "mem_retrieval"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEM_CACHE_DIR", "cache")
    assert environment()["MEM_CACHE_DIR"] == str(tmp_path / "cache")
    for kept in ("off", "", "~/c", "/abs/c"):
        monkeypatch.setenv("MEM_CACHE_DIR", kept)
        assert environment()["MEM_CACHE_DIR"] == kept


@pytest.mark.slow
@pytest.mark.parametrize("mode", [0o777, 0o775])
def test_a_cache_another_user_can_write_is_neither_read_nor_written(example, onnx_export, tmp_path,
                                                                     monkeypatch, mode):
    """A MEM_CACHE_DIR in a shared place, writable by others (or by its group, which may be every
    user's): an export planted there with a manifest of matching sizes was linked and loaded
    (every vector search scored 1.000). Such a cache is passed over: the model is exported
    afresh, and nothing is written there."""
    from mem_retrieval.text.embed import model_dir
    from mem_retrieval.text.onnx import place_export

    cache = tmp_path / "cache"
    monkeypatch.setenv("MEM_CACHE_DIR", str(cache))
    entry = _cache_entry(cache, onnx_export)
    entry.parent.mkdir(parents=True)
    shutil.copytree(onnx_export, entry, copy_function=os.link)
    cache.chmod(mode)
    out = tmp_path / "index" / "models" / onnx_export.name
    assert place_export(model_dir(example.config.model.package), out, True, _whole) == "exported"
    assert _whole(out) is None
    assert all((out / p.name).stat().st_ino != p.stat().st_ino for p in entry.iterdir())  # not linked
    cache.chmod(0o755)
    shutil.rmtree(out)
    assert place_export(model_dir(example.config.model.package), out, True, _whole) == "cache"


@pytest.mark.slow
def test_the_users_own_cache_is_used_under_a_umask_of_002_and_through_a_link(example, tmp_path, monkeypatch):
    """What the check of other users' write must not refuse: a cache written under a umask of 002
    (its folders group-writable, then sealed) is read by the next index, and so is a cache whose
    folder is a link of the user's own to a folder elsewhere (``~/.cache/mem_retrieval -> /scratch``)."""
    from mem_retrieval.text.embed import model_dir
    from mem_retrieval.text.onnx import place_export

    elsewhere = tmp_path / "scratch" / "cache"
    elsewhere.mkdir(parents=True)
    (tmp_path / "link").symlink_to(elsewhere)
    monkeypatch.setenv("MEM_CACHE_DIR", str(tmp_path / "link"))
    previous = os.umask(0o002)
    try:
        first = place_export(model_dir(example.config.model.package), tmp_path / "a" / "onnx-x", True, _whole)
    finally:
        os.umask(previous)
    second = place_export(model_dir(example.config.model.package), tmp_path / "b" / "onnx-x", True, _whole)
    assert (first, second) == ("exported", "cache")


@pytest.mark.slow
def test_a_damaged_cache_entry_is_exported_again_and_replaced(example, onnx_export, tmp_path, monkeypatch):
    from mem_retrieval.text.embed import model_dir
    from mem_retrieval.records.files import sha256_file
    from mem_retrieval.text.onnx import INT8, place_export

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


@pytest.mark.slow
def test_a_cache_folder_the_system_cannot_look_at_costs_only_the_export(example, tmp_path, monkeypatch):
    """A MEM_CACHE_DIR whose name is too long for the file system: the first index ended in a
    traceback (the cache's is_dir raised), leaving its lock and tables behind."""
    from mem_retrieval.text.embed import model_dir
    from mem_retrieval.text.onnx import place_export

    monkeypatch.setenv("MEM_CACHE_DIR", str(tmp_path / ("a" * 300)))
    out = tmp_path / "index" / "models" / "onnx-x"
    assert place_export(model_dir(example.config.model.package), out, True, _whole) == "exported"
    assert _whole(out) is None


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
    from mem_retrieval.text.onnx import WEIGHT_ZERO

    rng = np.random.default_rng(7)
    depth = 384
    weights = rng.integers(1, 256, (depth, depth)).astype(np.uint8)
    weights[:, 0], weights[:, 1] = 255, 1  # +127 and -127
    session = _product(weights, np.full(depth, WEIGHT_ZERO, dtype=np.uint8))
    activations = rng.integers(0, 256, (64, depth)).astype(np.uint8)
    activations[0] = 255
    for a_zero in (0, 117):
        found = session.run(None, {"A": activations, "a_zero": np.array(a_zero, dtype=np.uint8)})[0]
        if a_zero == 0:
            assert found[0, 0] == 255 * 127 * 384 == 12_435_840 and found[0, 1] == -12_435_840
        exact = (activations.astype(np.int64) - a_zero) @ (weights.astype(np.int64) - WEIGHT_ZERO)
        assert np.array_equal(found, exact)


@pytest.mark.parametrize("version", ["onnx-v2", "onnx-v3"])
def test_an_index_on_an_older_int8_export_keeps_it_and_full_moves_it(tmp_path, onnx_export, version):
    """An index on an older export keeps embedding with it, so its vectors stay one model; --full
    moves it to this version's export and drops the old one. Before the uint8 weights (onnx-v2)
    its vectors depended on the CPU: `mem index` says so, and --full embeds every text again. With
    them but before their signed copy (onnx-v3): the same vectors, no note, none embedded again."""
    from mem_retrieval.memory import Memory
    from mem_retrieval.text.onnx import EXPORT_VERSION, INT8, MANIFEST, PROBE, SIGNED, OnnxEmbedder

    ws = build_workspace(tmp_path / "ws")
    seed_export(ws.root / ".mem", onnx_export)
    notes: list[str] = []
    first = Memory.open(ws.root).index(progress=False, on_message=notes.append)
    assert notes == [] and first.embedded > 1
    meta_path = ws.root / ".mem" / "meta.json"
    meta = json.loads(meta_path.read_text())
    current = ws.root / ".mem" / meta["export"]["path"]
    old = current.with_name("onnx-older")
    shutil.copytree(current, old, ignore=shutil.ignore_patterns(SIGNED, PROBE))  # as they were
    manifest = json.loads((old / MANIFEST).read_text())
    files = {name: entry for name, entry in manifest["files"].items() if name not in (SIGNED, PROBE)}
    (old / MANIFEST).write_text(json.dumps(manifest | {"export": version, "files": files}))
    meta["export"]["path"] = f"models/{old.name}"
    meta_path.write_text(json.dumps(meta))
    shutil.rmtree(current)
    ws.edit_step("alpha", "a1", statement="a changed statement, embedded again")

    report = Memory.open(ws.root).index(progress=False, on_message=notes.append)
    assert report.embedded == 1 and not report.full
    assert json.loads(meta_path.read_text())["export"]["path"] == "models/onnx-older"
    assert OnnxEmbedder(old, quantized=True).model.name == INT8  # it has no signed copy
    if version == "onnx-v2":
        assert len(notes) == 1 and "onnx-v2" in notes[0] and "`mem index --full`" in notes[0]
    else:
        assert notes == []

    notes.clear()
    rebuilt = Memory.open(ws.root).index(progress=False, full=True, on_message=notes.append)
    moved = json.loads(meta_path.read_text())["export"]["path"]
    assert notes == [] and moved == f"models/{onnx_export.name}" and not old.exists()
    assert json.loads((ws.root / ".mem" / moved / MANIFEST).read_text())["export"] == EXPORT_VERSION
    assert rebuilt.embedded == (first.embedded if version == "onnx-v2" else 0)


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


def test_the_signed_copy_holds_the_uint8_models_numbers(export):
    """``model_int8_signed.onnx`` is the uint8 model with each product's weights w - 128 as int8 and
    zero point 0, and nothing else changed; the export lists it and its probe."""
    import onnx
    from onnx import numpy_helper

    from mem_retrieval.text.onnx import INT8, MANIFEST, PROBE, SIGNED, WEIGHT_ZERO

    folder = Path(export)
    assert {INT8, SIGNED, PROBE} <= set(json.loads((folder / MANIFEST).read_text())["files"])
    portable, signed = (onnx.load(str(folder / name)) for name in (INT8, SIGNED))
    assert [(n.op_type, list(n.input)) for n in portable.graph.node] == \
        [(n.op_type, list(n.input)) for n in signed.graph.node]
    changed = {n.input[i] for n in portable.graph.node if n.op_type == "MatMulInteger" for i in (1, 3)}
    left = {i.name: numpy_helper.to_array(i) for i in portable.graph.initializer}
    right = {i.name: numpy_helper.to_array(i) for i in signed.graph.initializer}
    assert left.keys() == right.keys() and len(changed) == 72
    for name, values in left.items():
        if name in changed:
            assert right[name].dtype == np.int8
            assert np.array_equal(right[name].astype(np.int16), values.astype(np.int16) - WEIGHT_ZERO)
        else:
            assert np.array_equal(right[name], values)


def test_the_probe_says_what_this_cpu_does_with_int8_weights(export):
    """The export's probe against a product built here: int8 weights of ±127 times activations of
    255, which a kernel adding pairs of products in 16 bits saturates (AVX2: the probe says no) and
    an exact one does not (VNNI: yes); either way the two agree, on whatever CPU runs the suite."""
    from mem_retrieval.text.onnx import PROBE, signed_products_exact

    depth = 384
    weights = np.tile(np.array([127, -127, 3], dtype=np.int8), (depth, 1))
    session = _product(weights, np.zeros(3, dtype=np.int8))
    activations = np.full((8, depth), 255, dtype=np.uint8)
    found = session.run(None, {"A": activations, "a_zero": np.array(0, dtype=np.uint8)})[0]
    exact_here = bool(np.array_equal(found, activations.astype(np.int64) @ weights.astype(np.int64)))
    if not exact_here:
        assert found[0, 0] < 255 * 127 * depth  # saturated: 16-bit pair sums, not 64,770 each
    assert signed_products_exact(Path(export) / PROBE) is exact_here


def test_the_embedder_runs_the_signed_copy_only_where_it_is_exact(export):
    """int8: the signed copy where this CPU multiplies it exactly, else the uint8 model; its vectors
    equal the uint8 model's (the same products: one model whatever the CPU chose)."""
    from mem_retrieval.text.onnx import INT8, PROBE, SIGNED, OnnxEmbedder, signed_products_exact

    folder = Path(export)
    chosen = OnnxEmbedder(folder, quantized=True)
    assert chosen.model.name == (SIGNED if signed_products_exact(folder / PROBE) else INT8)
    assert OnnxEmbedder(folder, quantized=False).model.name == "model.onnx"
    portable = OnnxEmbedder(folder, quantized=True, signed=False)
    assert portable.model.name == INT8
    sample = texts()[:12]
    assert np.abs(chosen.embed(sample) - portable.embed(sample)).max() <= 1e-6


def test_an_index_on_a_uint8_export_before_the_signed_copy_keeps_it_without_a_note(tmp_path):
    """Only int8 weights from before their uint8 form (onnx-v3) give other vectors by CPU: an index
    on an onnx-v3 export keeps it and hears nothing; one on onnx-v2 (or an unknown export) is told."""
    from mem_retrieval.indexers.build import _outdated_export
    from mem_retrieval.text.embed import ModelSpec
    from mem_retrieval.text.onnx import EXPORT_VERSION, MANIFEST

    notes = {}
    for version in ("onnx-v2", "onnx-v3", EXPORT_VERSION, None):
        folder = tmp_path / str(version)
        folder.mkdir()
        (folder / MANIFEST).write_text(json.dumps({"export": version} if version else {}))
        notes[version] = _outdated_export(ModelSpec("m", str(folder), quantized=True))
        assert _outdated_export(ModelSpec("m", str(folder), quantized=False)) is None
    assert notes["onnx-v3"] is None and notes[EXPORT_VERSION] is None
    assert "onnx-v2" in notes["onnx-v2"] and "unknown" in notes[None]


def test_the_ray_actors_get_both_int8_files_and_the_probe(export):
    """A Ray actor's CPU chooses between the two int8 files as a local embedder does, so both and
    the probe travel to it (fp32: the fp32 graph alone)."""
    from mem_retrieval.indexers.distributed import pack_model
    from mem_retrieval.text.embed import ModelSpec
    from mem_retrieval.text.onnx import FP32, INT8, MANIFEST, PROBE, SIGNED

    quantized = pack_model(ModelSpec("m", str(export), quantized=True))["export"]
    assert set(quantized) == {INT8, SIGNED, PROBE, "tokenizer.json", MANIFEST}
    assert set(pack_model(ModelSpec("m", str(export)))["export"]) == {FP32, "tokenizer.json", MANIFEST}


@pytest.mark.slow  # sessions loaded and stopped (2 s)
def test_embedding_stops_after_the_current_texts_when_interrupted_or_a_worker_fails(onnx_export):
    """Ctrl-C (a SIGINT while the caller waits for the workers) or a worker's error stops every
    worker after the text it is on, and the error reaches the caller: the workers ran on through
    every text left, and a worker's own error was lost, its texts' rows left unwritten."""
    import os
    import signal
    import threading
    import time

    from mem_retrieval.text.onnx import OnnxEmbedder

    embedder = OnnxEmbedder(onnx_export, quantized=True, workers=2)
    corpus = [f"statement {i}: the Satake transform of GL2m/Sp2m over F_q((t)) " * 12 for i in range(3000)]
    done: list[int] = []

    def failing(texts: int, chars: int) -> None:
        done.append(texts)
        if len(done) == 10:
            raise RuntimeError("a worker's error")

    with pytest.raises(RuntimeError, match="a worker's error"):
        embedder.embed(corpus, failing)
    assert len(done) <= 12  # the other worker's current text at most
    done.clear()
    # Ctrl-C as Python answers it by default: a test run started in the background (`pytest &`, as
    # a shell without job control starts it) inherits SIGINT ignored, and the embedding ran to its end
    # The signal sent to the process, and to another thread (the kernel may give it one): the wait
    # for the workers, with no timeout, ran the handler only once every text was embedded
    for send in (lambda: os.kill(os.getpid(), signal.SIGINT),
                 lambda: signal.pthread_kill(threading.get_ident(), signal.SIGINT)):
        inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            threading.Timer(0.5, send).start()
            with pytest.raises(KeyboardInterrupt):
                embedder.embed(corpus, lambda texts, chars: done.append(texts))
        finally:
            signal.signal(signal.SIGINT, inherited)
        stopped = len(done)
        time.sleep(1.0)
        assert len(done) == stopped < len(corpus) // 2  # no worker embeds on after the call returned
        done.clear()


@pytest.mark.slow  # a quantization run (2 s)
def test_quantizing_keeps_a_host_threads_log_and_drops_only_the_quantizers_advice(export, tmp_path):
    """The quantizer logs advice on the root logger; to hide it the export set the root's level to
    ERROR meanwhile, so a host thread's warnings in those seconds were lost. Only its own records
    are left out now, whatever thread logs."""
    import logging
    import threading

    from mem_retrieval.text.onnx import _quantize

    heard: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            heard.append(record)

    root, handler = logging.getLogger(), Keep(logging.WARNING)
    level, stop, said = root.level, threading.Event(), []
    root.addHandler(handler)
    root.setLevel(logging.WARNING)

    def host() -> None:
        while not stop.is_set():
            said.append(len(said))
            logging.getLogger("host").warning("host line %d", said[-1])
            stop.wait(0.005)

    thread = threading.Thread(target=host)
    thread.start()
    try:
        _quantize(Path(export) / "model.onnx", tmp_path / "int8.onnx", tmp_path / "signed.onnx")
    finally:
        stop.set()
        thread.join()
        root.removeHandler(handler)
        root.setLevel(level)
    hosts = [r for r in heard if r.name == "host"]
    assert len(said) > 10 and len(hosts) == len(said)
    assert not [r for r in heard if "onnxruntime" in r.pathname]
    assert root.filters == []


def test_a_search_leaves_nothing_of_onnxruntimes_telemetry_in_the_home_folder(example, tmp_path):
    """onnxruntime (1.29 on) keeps a telemetry device id under ~/.cache/Microsoft and, where the
    home folder is read-only, warns on stderr: a search through the model (the default strategy
    embeds the query) writes nothing there and says nothing on stderr."""
    import subprocess
    import sys

    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("ORT_DISABLE_TELEMETRY", "XDG_CACHE_HOME")}
    env |= {"HOME": str(home), "MEM_NO_SERVER": "1"}
    done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "-w", str(example.workspace.root),
                           "archive-search", "Satake transform", "--strategy", "rerank-graph"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Satake" in done.stdout, done.stderr
    assert done.stderr == ""
    assert not (home / ".cache" / "Microsoft").exists(), sorted(p.name for p in home.rglob("*"))


@pytest.mark.slow
def test_an_export_others_may_write_is_copied_to_the_cache_and_a_cache_so_linked_is_passed_over(
        example, tmp_path, monkeypatch):
    """A workspace's export made under umask 002 (a workspace a group shares) is group-writable:
    hard-linked into the per-user cache, it let another member change, in place, the model every
    private workspace of this user then linked and loaded. It is copied into the cache, writable
    by this user alone; a cache a link of such a file reached (an older `mem`) is passed over, and
    replaced by copies."""
    from mem_retrieval.text.embed import model_dir
    from mem_retrieval.text.onnx import place_export

    cache = tmp_path / "cache"
    monkeypatch.setenv("MEM_CACHE_DIR", str(cache))
    model = model_dir(example.config.model.package)
    shared = tmp_path / "shared" / "models" / "onnx-x"
    previous = os.umask(0o002)
    try:
        assert place_export(model, shared, True, _whole) == "exported"
    finally:
        os.umask(previous)
    entry = _cache_entry(cache, shared)
    files = sorted(p.name for p in shared.iterdir())
    assert files == sorted(p.name for p in entry.iterdir()) and files
    for name in files:
        assert (shared / name).stat().st_mode & 0o020  # the group's to write in the shared workspace
        assert (entry / name).stat().st_ino != (shared / name).stat().st_ino  # a copy, not one file
        assert not (entry / name).stat().st_mode & 0o022
    shutil.rmtree(entry)  # as an older mem left it: the shared export's own files in the cache
    shutil.copytree(shared, entry, copy_function=os.link)
    mine = tmp_path / "mine" / "models" / "onnx-x"
    assert place_export(model, mine, True, _whole) == "exported"
    assert all((mine / name).stat().st_ino != (shared / name).stat().st_ino for name in files)
    assert all((entry / name).stat().st_ino != (shared / name).stat().st_ino for name in files)
    again = tmp_path / "again" / "models" / "onnx-x"
    assert place_export(model, again, True, _whole) == "cache"  # (the cache's copies: this user's)
    assert all((again / name).stat().st_ino == (entry / name).stat().st_ino for name in files)


@pytest.mark.slow
def test_an_export_file_of_its_size_and_other_bytes_is_one_line_and_index_full_mends_it(example, tmp_path):
    """A model file changed in place (the same size: another user of a shared workspace, a disk
    error) was a traceback of onnxruntime's (InvalidProtobuf) at every search and `mem index`.
    It is one line naming the file and `mem index --full`, which checks the export's hashes (not
    only its sizes) and makes it again."""
    import subprocess
    import sys

    from conftest import copy_workspace

    ws = copy_workspace(example.workspace.root, tmp_path / "ws")
    (export,) = (ws / ".mem" / "models").glob("onnx-*")
    for model in export.glob("*.onnx"):  # (copies first: the links are the session's export)
        data = bytearray(model.read_bytes())
        model.unlink()
        data[:4096] = bytes(4096)  # (its head: bytes within a weight would compute another model)
        model.write_bytes(bytes(data))

    def mem(*argv):
        return subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "--workspace", str(ws), *argv],
                              capture_output=True, text=True, timeout=300,
                              env={**os.environ, "MEM_NO_SERVER": "1"})

    done = mem("archive-search", "Satake parameters")
    assert done.returncode == 2 and done.stdout == "" and len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith(f"mem: {export}/model_int8")
    assert "the index's ONNX model is damaged (onnxruntime cannot load it: " in done.stderr
    assert done.stderr.endswith("): run `mem index --full`\n")
    assert mem("index", "--full", "--no-progress").returncode == 0
    assert mem("archive-search", "Satake parameters").returncode == 0
    tokenizer = export / "tokenizer.json"  # its own library's error was a traceback
    data = tokenizer.read_bytes()
    tokenizer.unlink()
    tokenizer.write_bytes(b"x" * 100 + data[100:])
    done = mem("recall-search", "Satake parameters")
    assert (done.returncode, done.stdout) == (2, "") and len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith(f"mem: {tokenizer}: the index's ONNX model is damaged (its tokenizer "
                                  "cannot be read: ") and done.stderr.endswith("): run `mem index --full`\n")
    assert mem("index", "--full", "--no-progress").returncode == 0
    assert mem("recall-search", "Satake parameters").returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tokenizer.json", "model_int8.onnx"])
def test_a_model_file_out_of_reach_is_the_machines_refusal_not_damage(example, tmp_path, name):
    """A model or tokenizer file this user may not read was "damaged: run `mem index --full`", which
    then refused (it may not read it either): the refusal is said as such, naming the file."""
    import subprocess
    import sys

    from conftest import copy_workspace, without_root_override

    ws = copy_workspace(example.workspace.root, tmp_path / "ws")
    (export,) = (ws / ".mem" / "models").glob("onnx-*")
    for path in export.glob("*.onnx") if name.endswith(".onnx") else [export / name]:
        path.chmod(0)  # (every int8 file: which one runs depends on the CPU)
    argv = [sys.executable, "-m", "mem_retrieval.cli", "--workspace", str(ws), "archive-search", "Satake"]
    try:
        done = subprocess.run(without_root_override(argv), capture_output=True, text=True, timeout=300,
                              env={**os.environ, "MEM_NO_SERVER": "1"})
    finally:
        for path in export.iterdir():
            path.chmod(0o644)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.endswith(": Permission denied: the index cannot be read (mend that, then run it "
                                "again)\n") and done.stderr.startswith(f"mem: {export}/")


@pytest.mark.slow
def test_a_cache_file_others_may_not_read_is_copied_into_a_workspace_whose_umask_lets_them(
        example, tmp_path, monkeypatch):
    """A cache written under umask 077 holds files its owner alone may read: hard-linked into a
    workspace a group shares (indexed under umask 002), the group could not search it. A file is
    linked only where it grants the reads a file made here would; else copied, with that mode."""
    import stat

    from mem_retrieval.text.embed import model_dir
    from mem_retrieval.text.onnx import place_export

    monkeypatch.setenv("MEM_CACHE_DIR", str(tmp_path / "cache"))
    model = model_dir(example.config.model.package)
    previous = os.umask(0o077)
    try:
        assert place_export(model, tmp_path / "mine" / "onnx-x", True, _whole) == "exported"
        again = tmp_path / "again" / "onnx-x"
        assert place_export(model, again, True, _whole) == "cache"  # (under 077: linked, as before)
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 and p.stat().st_nlink > 1 for p in again.iterdir())
        os.umask(0o002)
        shared = tmp_path / "shared" / "onnx-x"
        assert place_export(model, shared, True, _whole) == "cache"
    finally:
        os.umask(previous)
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o644 and p.stat().st_nlink == 1 for p in shared.iterdir())
    assert stat.S_IMODE(shared.stat().st_mode) == 0o775  # the folder too (copytree gave it the cache's 0700)
