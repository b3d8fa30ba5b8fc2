"""The index on an object store (``index.uri = "s3://bucket/prefix"``), against a real S3 API on
loopback (moto's server mode, started by the ``s3`` fixture): index, search, incremental reindex and
as-of search give what the same workspace indexed on local disk gives, row for row and hit for hit;
a second machine with only the workspace files and the URI searches the same index; two writers in
two processes lose no update and never tear or turn back meta.json; a missing or unreachable store
is one line."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import copy_workspace, make_step, seed_export
from mem_retrieval.cli.main import run as run_cli
from mem_retrieval.indexers import store
from mem_retrieval.indexers.location import Location
from mem_retrieval.memory import Memory
from mem_retrieval.text import embed
from test_crash import build_corpus, change_corpus
from test_search import FORK_REFUSED, forked_child

pytestmark = pytest.mark.slow  # a server and real processes: run with --slow (CI does)

ROOT = Path(__file__).resolve().parent.parent
STRATEGIES = ("rerank-graph", "rerank", "bm25", "vector", "hybrid-rrf", "graph")
QUERIES = [("Hecke lemma for GL3", {}), ("quokka variant", {}), ("Bernstein centres", {"setting": "Qp"}),
           ("g0-3", {}), ("the Satake Iwahori lemma", {"run": "gen-1"})]


def on_s3(s3, tmp_path: Path, prefix: str = "idx") -> tuple[Path, str, str]:
    """A config file putting the index at a fresh bucket's ``prefix``: (file, uri, bucket)."""
    bucket = s3.bucket()
    uri = f"s3://{bucket}/{prefix}"
    return s3.config(tmp_path / f"{bucket}.toml", uri), uri, bucket


def corpus(root: Path, export: Path):
    """The crash trials' corpus (4 runs, 34 steps, events, sources), its model cache seeded."""
    ws = build_corpus(root)
    seed_export(root / ".mem", export)
    return ws


def rows(memory: Memory) -> dict[str, list[dict]]:
    """Every row of every table at the versions meta.json pins, all columns, by gid."""
    searcher = memory.retriever.searcher
    out = {}
    for name in ("steps", "events", "sources"):
        table = searcher.table(name)
        out[name] = sorted(table.to_arrow().to_pylist(), key=lambda r: r["gid"]) if table else []
    return out


def answers(memory: Memory, until: str | None = None, run: str | None = None) -> dict:
    """Every query's whole result list (ids and scores) under every strategy, and recall hits."""
    found = {}
    for text, options in QUERIES:
        options = options | ({"until": until, "run": run} if until else {})
        for strategy in STRATEGIES:
            hits = memory.archive_hits(text, strategy=strategy, **options)
            found[f"{text} {options} {strategy}"] = [(h.id, h.score, h.setting_match) for h in hits]
        found[f"recall {text} {options}"] = [(h.id, h.score) for h in memory.recall_hits(
            text, until=until, run=run if until else None)]
    return found


def plan_of(report) -> dict:
    """What an index run did (counts per table, texts embedded), without its timings."""
    return {k: v for k, v in report.as_dict().items() if k not in ("seconds", "searchable_seconds", "engine")}


def timed(call) -> tuple[object, float]:
    started = time.perf_counter()
    result = call()
    return result, time.perf_counter() - started


def test_index_search_reindex_and_as_of_on_s3_equal_the_local_index(s3, tmp_path, onnx_export):
    config, uri, bucket = on_s3(s3, tmp_path)
    local = corpus(tmp_path / "local", onnx_export)
    remote = corpus(tmp_path / "remote", onnx_export)
    on_disk, on_store = Memory.open(local.root), Memory.open(remote.root, config)
    first_disk, disk_s = timed(lambda: on_disk.index(progress=False))
    first_store, store_s = timed(lambda: on_store.index(progress=False))
    assert plan_of(first_store) == plan_of(first_disk)
    # the tables, meta.json and the model files are in the bucket; locally only the lock, the cache
    # and what this machine's index runs read of the trees
    assert sorted(p.name for p in (remote.root / ".mem").iterdir()) == ["index.lock", "models", "read.json"]
    keys = s3.keys(bucket, "idx/")
    assert "idx/meta.json" in keys and any(k.startswith("idx/lance/steps.lance/") for k in keys)
    meta = json.loads(keys["idx/meta.json"])
    assert f"idx/{meta['export']['path']}/export.json" in keys
    assert rows(on_store) == rows(on_disk)
    disk_answers, disk_q = timed(lambda: answers(on_disk))
    store_answers, store_q = timed(lambda: answers(on_store))
    assert store_answers == disk_answers and any(disk_answers.values())

    # incremental: the same change on both, the same plan, the same result
    change_corpus(local)
    change_corpus(remote)
    second_disk = Memory.open(local.root).index(progress=False)
    second_store = Memory.open(remote.root, config).index(progress=False)
    assert plan_of(second_store) == plan_of(second_disk)
    assert 0 < second_store.embedded < first_store.embedded
    on_disk, on_store = Memory.open(local.root), Memory.open(remote.root, config)
    assert rows(on_store) == rows(on_disk)
    assert answers(on_store) == answers(on_disk)
    assert on_store.archive_hits("quokka", strategy="bm25")  # the change is searchable

    # as of each event of a run: memory as it stood then, the same from both
    for cut in ("1", "2", "3", "5"):
        assert answers(on_store, until=cut, run="gen-1") == answers(on_disk, until=cut, run="gen-1")

    # another machine: the workspace files and the URI, nothing else
    other = tmp_path / "machine2"
    shutil.copytree(remote.root, other, ignore=shutil.ignore_patterns(".mem"))
    elsewhere = Memory.open(other, config)
    assert answers(elsewhere) == answers(on_disk)
    fetched = other / ".mem" / meta["export"]["path"]
    assert {p.name: p.stat().st_size for p in fetched.iterdir()} == \
        {p.name: p.stat().st_size for p in (remote.root / ".mem" / meta["export"]["path"]).iterdir()}
    again = elsewhere.index(progress=False)  # nothing changed: it writes and embeds nothing
    assert (again.total("added"), again.total("updated"), again.total("removed"), again.embedded) == (0, 0, 0, 0)
    print(f"\nfull index: local disk {disk_s:.2f} s, loopback S3 {store_s:.2f} s; "
          f"{len(disk_answers)} result lists: local {disk_q:.2f} s, S3 {store_q:.2f} s")


def test_full_on_a_machine_without_the_export_re_embeds_vectors_of_an_export_before_uint8(
        s3, tmp_path, onnx_export):
    """An index on the store whose int8 vectors came from an export before the uint8 weights
    (onnx-v2: other vectors on other CPUs): `mem index --full` on a machine that holds no copy of
    that export still embeds every text again (on this version's export it embeds none). It reads
    that export's manifest from the store, and only it: the old export is not downloaded."""
    from mem_retrieval.configs import load_config
    from mem_retrieval.text.onnx import MANIFEST

    config_file, uri, bucket = on_s3(s3, tmp_path)
    a = corpus(tmp_path / "a", onnx_export)
    first = Memory.open(a.root, config_file).index(progress=False)
    config = load_config(a.root, config_file)
    location = Location.of(Memory.open(a.root, config).workspace, config)
    b = tmp_path / "b"  # the workspace files and this version's export in its cache, nothing else
    shutil.copytree(a.root, b, ignore=shutil.ignore_patterns(".mem"))
    seed_export(b / ".mem", onnx_export)
    assert Memory.open(b, config_file).index(progress=False, full=True).embedded == 0  # this export's
    data, token = location.read_meta_bytes()
    meta = json.loads(data)
    current = location.folder / meta["export"]["path"]
    old = current.with_name("onnx-older")
    shutil.copytree(current, old, copy_function=os.link, ignore=shutil.ignore_patterns(MANIFEST))
    manifest = json.loads((current / MANIFEST).read_text())
    (old / MANIFEST).write_text(json.dumps(manifest | {"export": "onnx-v2"}))
    location.push("models/onnx-older", last=MANIFEST)
    assert location.swap_meta(json.dumps(meta | {"export": meta["export"] | {"path": "models/onnx-older"}})
                              .encode(), token)

    rebuilt = Memory.open(b, config_file).index(progress=False, full=True)
    assert rebuilt.embedded == first.embedded > 0
    assert not (b / ".mem" / "models" / "onnx-older").exists()
    assert json.loads(location.read_meta_bytes()[0])["export"]["path"] == meta["export"]["path"]


def test_a_model_file_changed_on_the_store_is_not_fetched_into_use(s3, tmp_path, onnx_export):
    """A machine fetching the index's export checks the download against its manifest's sha256:
    a weights file changed on the store at the same size passed the size check, and its query
    vectors (and any text `mem index` embedded with it) were another model's. The copy is not
    cached, and the line names the store's meta.json."""

    import obstore

    from mem_retrieval.configs import load_config
    from mem_retrieval.text.onnx import INT8

    config_file, uri, _ = on_s3(s3, tmp_path)
    a = corpus(tmp_path / "a", onnx_export)
    Memory.open(a.root, config_file).index(progress=False)
    config = load_config(a.root, config_file)
    location = Location.of(Memory.open(a.root, config).workspace, config)
    export = json.loads(location.read_meta_bytes()[0])["export"]["path"]
    weights = bytearray((location.folder / export / INT8).read_bytes())
    weights[len(weights) // 2] ^= 0x40
    obstore.put(location.store(), f"{export}/{INT8}", bytes(weights))
    b = tmp_path / "b"  # another machine: nothing cached
    shutil.copytree(a.root, b, ignore=shutil.ignore_patterns(".mem"))
    with pytest.raises(store.IndexMismatch, match=rf"^{re.escape(uri)}/meta.json: the store's copy of the "
                                                  rf"index's ONNX model {export} is not the one its manifest "
                                                  rf"hashed \({export}/{INT8} is missing or changed\)"):
        Memory.open(b, config_file).archive_search("Hecke lemma for GL3")
    assert not (b / ".mem" / export).exists()
    assert not list((b / ".mem" / "models").iterdir())  # no scratch left either
    assert Memory.open(a.root, config_file).archive_search("Hecke lemma for GL3").hits  # its own copy
    # the line's advice mends the store: a full index uploads this machine's export over the copy
    Memory.open(b, config_file).index(full=True, progress=False)
    assert bytes(obstore.get(location.store(), f"{export}/{INT8}").bytes()) == \
        (location.folder / export / INT8).read_bytes()
    c = tmp_path / "c"
    shutil.copytree(a.root, c, ignore=shutil.ignore_patterns(".mem"))
    assert Memory.open(c, config_file).archive_search("Hecke lemma for GL3").hits


def test_a_tuned_copy_on_the_store_serves_another_machine_and_is_checked_whole_when_fetched(s3, tmp_path):
    """`mem tune` on an index on the store: another machine fetches the tuned copy (checked against
    its sha256 once, as downloaded) and searches as the first does; a copy changed on the store at
    the same size is refused, not used."""
    import obstore

    from conftest import build_workspace
    from mem_retrieval.configs import load_config
    from mem_retrieval.tune import tune

    config_file, _, _ = on_s3(s3, tmp_path)
    a = build_workspace(tmp_path / "a")
    Memory.open(a.root, config_file).index(progress=False)
    tune(Memory.open(a.root, config_file), progress=False)
    config = load_config(a.root, config_file)
    location = Location.of(Memory.open(a.root, config).workspace, config)
    tuned = store.tuned_of(json.loads(location.read_meta_bytes()[0]))

    def scores(root: Path) -> list[tuple[str, float]]:
        hits = Memory.open(root, config_file).archive_search("statement of a4", strategy="vector").hits
        return [(h.id, h.score) for h in hits]

    machines = []
    for name in ("b", "c"):
        machines.append(tmp_path / name)
        shutil.copytree(a.root, machines[-1], ignore=shutil.ignore_patterns(".mem"))
    assert scores(machines[0]) == scores(a.root)
    assert (machines[0] / ".mem" / tuned["path"] / "model.safetensors").is_file()
    weights = bytearray((location.folder / tuned["path"] / "model.safetensors").read_bytes())
    weights[len(weights) // 2] ^= 0x40
    obstore.put(location.store(), f"{tuned['path']}/model.safetensors", bytes(weights))
    with pytest.raises(store.IndexMismatch, match=f"the store's copy of the tuned model {tuned['path']} is "
                                                  r"not the one its provenance hashed \(its sha256 differs\)"):
        scores(machines[1])
    assert not (machines[1] / ".mem" / tuned["path"]).exists()
    Memory.open(a.root, config_file).index(full=True, progress=False)  # the advice: the tuner's copy is whole
    assert scores(machines[1]) == scores(a.root)
    # a cached copy changed on this machine (a file added: sizes still match) is fetched again
    # when it would embed, not refused with advice to retrain a model other machines share
    (machines[0] / ".mem" / tuned["path"] / "notes.txt").write_text("mine\n")
    Memory.open(machines[0], config_file).index(full=True, progress=False)
    assert not (machines[0] / ".mem" / tuned["path"] / "notes.txt").exists()
    assert scores(machines[0]) == scores(a.root)


def test_a_copy_another_process_fetched_meanwhile_is_kept_and_a_file_in_its_place_is_replaced(
        s3, tmp_path, onnx_export):
    """Two searches of one workspace fetching the export at once: the second to finish deleted the
    folder the first had put in place and was reading (a traceback: its model file gone). A file
    standing where the folder goes gave a traceback on every search and on `mem index --full`."""
    from mem_retrieval.configs import load_config
    from mem_retrieval.text.onnx import FP32, downloaded_problem, manifest_problem

    config_file, _, _ = on_s3(s3, tmp_path)
    a = corpus(tmp_path / "a", onnx_export)
    Memory.open(a.root, config_file).index(progress=False)
    b = tmp_path / "b"
    shutil.copytree(a.root, b, ignore=shutil.ignore_patterns(".mem"))
    config = load_config(b, config_file)
    location = Location.of(Memory.open(b, config).workspace, config)
    export = json.loads(location.read_meta_bytes()[0])["export"]["path"]
    (b / ".mem" / export).parent.mkdir(parents=True)
    (b / ".mem" / export).write_text("not a folder\n")
    assert Memory.open(b, config_file).archive_search("Hecke lemma for GL3").hits
    assert (b / ".mem" / export / FP32).is_file()

    shutil.rmtree(b / ".mem" / export)
    theirs = {}

    def other_process_first(scratch: Path) -> str | None:  # it renamed its copy into place meanwhile
        shutil.copytree(scratch, b / ".mem" / export)
        theirs["inode"] = (b / ".mem" / export / FP32).stat().st_ino
        return downloaded_problem(scratch)

    folder = location.fetch(export, manifest_problem, other_process_first)
    assert (folder / FP32).stat().st_ino == theirs["inode"]  # the copy being read is left alone
    assert manifest_problem(folder) is None
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]  # no scratch left


def test_a_model_cache_the_machine_refuses_to_write_is_said_as_the_machines_not_the_stores(
        s3, tmp_path, onnx_export):
    """A read-only (here: immutable) model cache was reported as `the index store … cannot be
    reached`, sending the user to check the store's address and keys."""
    config_file, _, _ = on_s3(s3, tmp_path)
    a = corpus(tmp_path / "a", onnx_export)
    Memory.open(a.root, config_file).index(progress=False)
    b = tmp_path / "b"
    shutil.copytree(a.root, b, ignore=shutil.ignore_patterns(".mem"))
    models = b / ".mem" / "models"
    models.mkdir(parents=True)
    if subprocess.run(["chattr", "+i", str(models)], capture_output=True).returncode != 0:
        pytest.skip("needs chattr +i (root, on a file system with immutable flags)")
    try:
        with pytest.raises(store.IndexUnwritable, match=rf"^{re.escape(str(models))}/onnx-\w+: "
                                                        "Operation not permitted: "):
            Memory.open(b, config_file).archive_search("Hecke lemma for GL3")
    finally:
        subprocess.run(["chattr", "-i", str(models)], check=True)
    assert Memory.open(b, config_file).archive_search("Hecke lemma for GL3").hits


def _cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | env
    return subprocess.run([sys.executable, "-m", "mem_retrieval.cli", *argv], cwd=ROOT, env=clean,
                          capture_output=True, text=True, timeout=600)


def test_the_standard_aws_variables_alone_reach_the_store_and_config_keys_override_them(
        s3, tmp_path, onnx_export):
    ws = corpus(tmp_path / "ws", onnx_export)
    bucket = s3.bucket()
    only_uri = tmp_path / "uri.toml"
    only_uri.write_text(f'[index]\nuri = "s3://{bucket}/env"\n')
    done = _cli(s3.env(), "-w", str(ws.root), "--config", str(only_uri), "index", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert any(k.startswith("env/lance/steps.lance/") for k in s3.keys(bucket, "env/"))
    # the environment points nowhere; the config's keys point at the server: they win
    wrong = s3.env() | {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_SECRET_ACCESS_KEY": "wrong"}
    keyed = s3.config(tmp_path / "keys.toml", f"s3://{bucket}/env")
    found = _cli(wrong, "-w", str(ws.root), "--config", str(keyed), "--json", "archive-search", "Hecke lemma")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["hits"]


def one_line_cli(root: Path, config: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_cli(["--workspace", str(root), "--config", str(config), *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_a_missing_bucket_or_an_unreachable_store_is_one_line(s3, tmp_path, workspace):
    from mem_retrieval.eval.loopback_s3 import free_port

    nowhere = s3.config(tmp_path / "nowhere.toml", "s3://mem-any/idx",
                        endpoint=f"http://127.0.0.1:{free_port()}")
    no_bucket = s3.config(tmp_path / "nobucket.toml", "s3://no-such-bucket/idx")
    for config in (nowhere, no_bucket):
        for argv in (["archive-search", "statement of a2"], ["index", "--no-progress"],
                     ["recall-search", "five steps"]):
            started = time.perf_counter()
            code, out, err = one_line_cli(workspace.root, config, *argv)
            assert code == 1 and out == "", (argv, err)
            assert err.count("\n") == 1 and "Traceback" not in err, err
            assert err.startswith("mem: the index store s3://") and "cannot be reached" in err, err
            assert time.perf_counter() - started < 60
    bad = tmp_path / "bad.toml"
    bad.write_text('[index]\nuri = "ftp://host/x"\n')
    code, _, err = one_line_cli(workspace.root, bad, "archive-search", "x")
    assert code == 2 and f"{bad}:2: index.uri: 'ftp://host/x' is not a folder or an s3://" in err


# ------------------------------------------------------------------------------ two writers

SWAP = r'''
import sys, time
from pathlib import Path
from mem_retrieval.indexers.location import Location
location = Location(sys.argv[1], Path(sys.argv[2]), tuple(tuple(p.split("=", 1)) for p in sys.argv[5:]))
data, token = location.read_meta_bytes()
Path(sys.argv[3]).touch()
while not Path(sys.argv[4]).exists():
    time.sleep(0.001)
print("won" if location.swap_meta(data.replace(b"0", sys.argv[3][-1].encode()), token) else "lost")
'''


def test_two_processes_swapping_meta_json_from_the_same_version_one_wins_one_is_refused(s3, tmp_path):
    bucket = s3.bucket()
    options = [f"aws_endpoint={s3.endpoint}", "aws_access_key_id=testing",
               "aws_secret_access_key=testing", "aws_region=us-east-1", "allow_http=true"]
    location = Location(f"s3://{bucket}/cas", tmp_path, tuple(tuple(o.split("=", 1)) for o in options))
    assert location.swap_meta(b'{"v": 0}', None) and not location.swap_meta(b'{"v": 9}', None)
    for trial in range(3):
        go = tmp_path / f"go{trial}"
        procs = [subprocess.Popen([sys.executable, "-c", SWAP, location.uri, str(tmp_path),
                                   str(tmp_path / f"ready{trial}-{n}"), str(go), *options],
                                  stdout=subprocess.PIPE, text=True) for n in (1, 2)]
        while not all((tmp_path / f"ready{trial}-{n}").exists() for n in (1, 2)):
            time.sleep(0.01)
        go.touch()
        results = sorted(p.communicate(timeout=120)[0].strip() for p in procs)
        assert results == ["lost", "won"], results
        body = location.read_meta_bytes()[0]
        assert body in (b'{"v": 1}', b'{"v": 2}')  # one writer's whole file, never a mix
        location.swap_meta(b'{"v": 0}', location.read_meta_bytes()[1])


def _plan_on_a(root: Path, location: Location, config):
    """Machine A's `mem index gen-0` up to its commit: open, plan, embed."""
    from mem_retrieval.indexers import build

    workspace = Memory.open(root, config).workspace
    index = build.open_index(location, config, full=False)
    found = build.build_rows(workspace, config, ["gen-0"])
    plan = build.plan_changes(index, found, ["gen-0"], set(workspace.runs()))
    vectors = build.embed_texts(index, found, sorted(plan.texts_wanted()), config, build.Progress(False))
    return index, plan, found, vectors


def test_a_writer_publishing_after_another_machine_merges_and_never_moves_versions_back(
        s3, tmp_path, onnx_export):
    """Machine A plans, embeds and commits while machine B (another process, its own lock) indexes
    and publishes: A's meta.json keeps B's rows (each table at the later version) and adds its own.
    Then B rebuilds with another model while A indexes: A's publish is refused in one line."""
    from mem_retrieval.configs import load_config
    from mem_retrieval.indexers import build

    config_file, uri, bucket = on_s3(s3, tmp_path)
    a = corpus(tmp_path / "a", onnx_export)
    Memory.open(a.root, config_file).index(progress=False)
    b_root = copy_workspace(a.root, tmp_path / "b")
    shutil.rmtree(b_root / ".mem" / "index.lock", ignore_errors=True)
    a.add_step("gen-0", make_step("wa", statement="a walrus lemma written on machine A"))
    b = type(a)(b_root)
    b.add_step("gen-1", make_step("wb", statement="a walrus lemma written on machine B"))

    config = load_config(a.root, config_file)
    location = Location.of(Memory.open(a.root, config).workspace, config)
    index, plan, rows_a, vectors = _plan_on_a(a.root, location, config)
    before = store.read_meta(location)["versions"]

    other = _cli({}, "-w", str(b_root), "--config", str(config_file), "index", "gen-1", "--no-progress")
    assert other.returncode == 0, other.stderr
    theirs = store.read_meta(location)["versions"]
    versions = build.commit(index, plan, vectors, config)
    mine = store.read_meta(location)["versions"]
    assert all(mine[t] >= theirs[t] >= before[t] for t in mine) and mine["steps"] > theirs["steps"]
    reader = Memory.open(tmp_path / "a", config_file)
    assert {h.id for h in reader.archive_hits("walrus", strategy="bm25")} == {"gen-0/wa", "gen-1/wb"}
    assert versions == mine

    # B rebuilds with another model (fp32 weights) while A indexes: A cannot merge with that
    a.add_step("gen-0", make_step("wa2", statement="a second walrus lemma on machine A"))
    index, plan, rows_a, vectors = _plan_on_a(a.root, location, config)
    fp32 = b_root / "fp32.toml"
    fp32.write_text(config_file.read_text() + "\n[model]\nquantize = false\n")
    rebuilt = _cli({}, "-w", str(b_root), "--config", str(fp32), "index", "--full", "--no-progress")
    assert rebuilt.returncode == 0, rebuilt.stderr
    published = s3.keys(bucket, "idx/meta.json")
    with pytest.raises(store.MetaConflict) as refused:  # Lance refuses the upsert, or the CAS the meta
        build.commit(index, plan, vectors, config)
    message = str(refused.value)
    assert "\n" not in message and message.endswith(("run `mem index` again", store.MATCH_OR_REBUILD))
    assert s3.keys(bucket, "idx/meta.json") == published  # B's meta.json stands, whole
    code, _, err = one_line_cli(a.root, config_file, "index", "--no-progress")
    assert code == 2 and err.count("\n") == 1 and "run `mem index --full`" in err  # the model changed


class Stopped(Exception):
    """A run stopped before it published (killed, or still running)."""


def unpublished_full(monkeypatch, root: Path, config: Path) -> None:
    """``root``'s `mem index --full`, stopped after its commits and before its publish."""
    from mem_retrieval.indexers import writer

    def stopped(index, config):
        raise Stopped

    with monkeypatch.context() as patch:
        patch.setattr(writer, "publish", stopped)
        with pytest.raises(Stopped):
            Memory.open(root, config).index(full=True, progress=False)


def machine_b(a, tmp_path: Path):
    """Machine B: a copy of A's workspace with a new step of its own in gen-1 (not indexed yet)."""
    b = type(a)(copy_workspace(a.root, tmp_path / "b"))
    shutil.rmtree(b.root / ".mem" / "index.lock", ignore_errors=True)
    b.add_step("gen-1", make_step("wb", statement="a walrus lemma written on machine B"))
    return b


def pinned_vectors(root: Path, config: Path) -> dict[str, list[float]]:
    """Each step's vector in the steps table at the version meta.json pins (what searches read)."""
    table = Memory.open(root, config).retriever.searcher.table("steps")
    data = table.search().select(["gid", "vector"]).limit(10_000).to_arrow().to_pylist()
    return {row["gid"]: row["vector"] for row in data}


def test_a_rebuild_with_other_parameters_another_machine_left_unpublished_is_never_pinned(
        s3, tmp_path, onnx_export, monkeypatch):
    """Machines A and C share one index; C's `mem index --full` with other text limits overwrote
    the tables after A's full build committed, and stopped before publishing (killed, or still
    running). A's publish pinned the tables' newest versions, C's, under A's parameters: a mixed
    index that no command reported, and that later runs built on. Now A is refused in one line and
    meta.json is left as it was; A's next `mem index` writes on a copy of the versions meta.json
    pins (none of C's vectors reused), so searches read A's vectors alone."""
    from mem_retrieval.indexers import writer

    config_a, uri, bucket = on_s3(s3, tmp_path)
    config_c = tmp_path / "c.toml"  # every text cut to 8 characters: other rows, other vectors
    config_c.write_text(config_a.read_text() + "\n[model]\nmax_chars = 8\n")
    a = corpus(tmp_path / "a", onnx_export)
    c_root = copy_workspace(a.root, tmp_path / "c")
    Memory.open(a.root, config_a).index(progress=False)
    reference = pinned_vectors(a.root, config_a)
    published = s3.keys(bucket, "idx/meta.json")

    real = writer.publish

    def c_rebuilds_first(index, config):  # A's publish, after C's rebuild that never publishes
        unpublished_full(monkeypatch, c_root, config_c)
        monkeypatch.setattr(writer, "publish", real)  # once
        return real(index, config)

    monkeypatch.setattr(writer, "publish", c_rebuilds_first)
    with pytest.raises(store.MetaConflict) as refused:
        Memory.open(a.root, config_a).index(full=True, progress=False)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("another writer rebuilt the steps table of ")
    assert message.endswith("run `mem index --full` again")  # a plain one meets the other parameters
    assert s3.keys(bucket, "idx/meta.json") == published
    assert pinned_vectors(a.root, config_a) == reference

    a.add_step("gen-0", make_step("wq", statement="a quokka lemma written on machine A"))
    before, messages = embed.EMBEDDED["texts"], []
    Memory.open(a.root, config_a).index(progress=False, on_message=messages.append)
    assert embed.EMBEDDED["texts"] - before == 1  # the new statement alone: C's rows are not A's
    assert messages == [f"the steps, events, sources tables of {uri} held a rebuild that was never published "
                        "(a `mem index --full` or `mem tune` that stopped, here or on another machine, or "
                        "still runs): writing on a copy of the versions meta.json pins"]
    now = pinned_vectors(a.root, config_a)
    assert now.pop("gen-0/wq") and now == reference
    hits = Memory.open(a.root, config_a).archive_hits("quokka", strategy="bm25")
    assert [h.id for h in hits] == ["gen-0/wq"]


@pytest.mark.parametrize("c_config", ["the same config", "other text limits"])
def test_a_run_indexing_its_own_runs_after_an_unpublished_rebuild_keeps_every_published_row(
        s3, tmp_path, onnx_export, monkeypatch, c_config):
    """B publishes a step of its own; C's `mem index --full` (C's files lack it) overwrites the
    tables and stops before publishing. A's `mem index gen-0` then rebuilt every table from A's
    files (other parameters: B's published step dropped, and the run widened to every run) or
    pinned C's rebuild as its own (the same parameters: B's step dropped, "0 updated"). Now A
    writes on a copy of the pinned rows, indexes gen-0 alone, and B's step stays searchable."""

    config, uri, bucket = on_s3(s3, tmp_path)
    config_c = tmp_path / "c.toml"
    other = "\n[model]\nmax_chars = 8\n" if c_config.startswith("other") else ""
    config_c.write_text(config.read_text() + other)
    a = corpus(tmp_path / "a", onnx_export)
    c_root = copy_workspace(a.root, tmp_path / "c")
    Memory.open(a.root, config).index(progress=False)
    b = machine_b(a, tmp_path)
    Memory.open(b.root, config).index(["gen-1"], progress=False)
    unpublished_full(monkeypatch, c_root, config_c)

    a.add_step("gen-0", make_step("wa", statement="a quokka lemma written on machine A"))
    before, messages = embed.EMBEDDED["texts"], []
    report = Memory.open(a.root, config).index(["gen-0"], progress=False, on_message=messages.append)
    assert embed.EMBEDDED["texts"] - before == 1 and report.total("added") == 1
    reader = Memory.open(a.root, config)
    assert {h.id for h in reader.archive_hits("walrus quokka", strategy="bm25")} == {"gen-1/wb", "gen-0/wa"}
    assert messages == [f"the steps, events, sources tables of {uri} held a rebuild that was never published "
                        "(a `mem index --full` or `mem tune` that stopped, here or on another machine, or "
                        "still runs): writing on a copy of the versions meta.json pins"]


def test_a_copy_made_from_a_meta_json_another_machine_replaced_meanwhile_is_refused(
        s3, tmp_path, onnx_export, monkeypatch):
    """A reads meta.json; before A opens the tables, B publishes a commit and C's `mem index
    --full` overwrites them and stops. A copied the version A had read, which lacks B's commit,
    and its publish took its copy (the later version number) over B's: B's step left the index,
    every process said "indexed". Now A is refused in one line; its next run copies B's version."""
    from mem_retrieval.indexers import writer

    config, uri, bucket = on_s3(s3, tmp_path)
    a = corpus(tmp_path / "a", onnx_export)
    c_root = copy_workspace(a.root, tmp_path / "c")
    Memory.open(a.root, config).index(progress=False)
    b = machine_b(a, tmp_path)
    real_open, done = writer.open_or_drop, []

    def b_and_c_first(*args):  # A has read meta.json, and opens its first table
        if not done:
            done.append(True)
            Memory.open(b.root, config).index(["gen-1"], progress=False)
            unpublished_full(monkeypatch, c_root, config)
        return real_open(*args)

    monkeypatch.setattr(writer, "open_or_drop", b_and_c_first)
    a.add_step("gen-0", make_step("wa", statement="a quokka lemma written on machine A"))
    with pytest.raises(store.MetaConflict) as refused:
        Memory.open(a.root, config).index(["gen-0"], progress=False)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("another writer published the ")
    assert message.endswith("the copy lacks that commit, and this run pinned none of it; "
                            "run `mem index` again")
    monkeypatch.setattr(writer, "open_or_drop", real_open)
    Memory.open(a.root, config).index(["gen-0"], progress=False)
    reader = Memory.open(a.root, config)
    assert {h.id for h in reader.archive_hits("walrus quokka", strategy="bm25")} == {"gen-1/wb", "gen-0/wa"}


@pytest.mark.parametrize("when", ["before B's check", "between B's check and its swap of meta.json"])
def test_a_commit_another_machines_full_build_overwrote_before_it_was_published_is_refused(
        s3, tmp_path, onnx_export, monkeypatch, when):
    """B commits a new step and, before B publishes, A's `mem index --full` (A's files lack it)
    overwrites the tables and publishes. B pinned the later versions, A's ("a later version holds
    every earlier commit", untrue across an overwrite): B said "indexed", exit 0, and its step was
    in no version meta.json pins. Now B is refused in one line, and its next `mem index` adds it;
    so too when A publishes after B checked its tables, as B merges A's meta.json with its own."""
    from mem_retrieval.indexers import writer

    config, uri, bucket = on_s3(s3, tmp_path)
    a = corpus(tmp_path / "a", onnx_export)
    Memory.open(a.root, config).index(progress=False)
    b = machine_b(a, tmp_path)
    module, name = (writer, "publish") if when.startswith("before") else (store, "publish_meta")
    real = getattr(module, name)

    def a_rebuilds_first(*args):  # B's publish (or its swap), after A's full build publishes
        monkeypatch.setattr(module, name, real)
        assert Memory.open(a.root, config).index(full=True, progress=False).full
        return real(*args)

    monkeypatch.setattr(module, name, a_rebuilds_first)
    with pytest.raises(store.MetaConflict) as refused:
        Memory.open(b.root, config).index(["gen-1"], progress=False)
    assert str(refused.value) == (f"another writer rebuilt the steps table of {uri} (`mem index --full`) "
                                  "while this run indexed: this run wrote nothing on that rebuild and "
                                  "pinned none of it; run `mem index` again")
    assert not Memory.open(b.root, config).archive_hits("walrus", strategy="bm25")
    Memory.open(b.root, config).index(["gen-1"], progress=False)
    assert [h.id for h in Memory.open(b.root, config).archive_hits("walrus", strategy="bm25")] == ["gen-1/wb"]


def test_a_machine_embedding_in_batches_never_writes_into_another_machines_rebuild(
        s3, tmp_path, onnx_export):
    """C's `mem index --full` commits its rows first (vectors to come: BM25 searchable); A rebuilds
    the index with other text limits and publishes; C's batches of vectors then went into A's
    tables (its upsert matched A's rows by id), so A's next runs built on C's vectors. Now C stops
    in one line before writing, and A's tables stay as A published them."""
    from mem_retrieval.configs import load_config
    from mem_retrieval.indexers import build

    config_a, uri, bucket = on_s3(s3, tmp_path)
    config_c = tmp_path / "c.toml"
    config_c.write_text(config_a.read_text() + "\n[model]\nmax_chars = 8\n")
    a = corpus(tmp_path / "a", onnx_export)
    c_root = copy_workspace(a.root, tmp_path / "c")
    c_config = load_config(c_root, config_c)
    c_workspace = Memory.open(c_root, c_config).workspace
    location = Location.of(c_workspace, c_config)
    index = build.open_index(location, c_config, full=True)
    found = build.build_rows(c_workspace, c_config, c_workspace.check_runs(None))
    plan = build.plan_changes(index, found, None, set(c_workspace.runs()))
    pending = sorted(plan.texts_wanted())
    build.commit(index, plan, {}, c_config, pending=set(pending))  # C's rows, searchable, no vectors

    Memory.open(a.root, config_a).index(full=True, progress=False)  # A rebuilds and publishes
    reference = pinned_vectors(a.root, config_a)
    published = store.read_meta(location)["versions"]
    with pytest.raises(store.MetaConflict) as refused:
        build.backfill(index, plan, found, pending, c_config, build.Progress(False))
    assert str(refused.value).startswith("another writer rebuilt the ") and "\n" not in str(refused.value)
    db = location.connect()
    assert {name: db.open_table(name).version for name in published} == published  # C wrote nothing
    assert store.read_meta(location)["versions"] == published
    assert pinned_vectors(a.root, config_a) == reference


def test_two_machines_indexing_at_once_lose_no_update(s3, tmp_path, onnx_export):
    """Two `mem index` processes on two machines (two workspaces, two locks, one URI) started
    together, three rounds: every writer's steps are searchable after each round, and the
    versions meta.json pins never move backwards."""
    config_file, uri, bucket = on_s3(s3, tmp_path)
    machines = [corpus(tmp_path / name, onnx_export) for name in ("m1", "m2")]
    done = _cli({}, "-w", str(machines[0].root), "--config", str(config_file), "index", "--no-progress")
    assert done.returncode == 0, done.stderr
    location = Memory.open(machines[0].root, config_file).retriever.location
    pinned = [store.read_meta(location)["versions"]]
    expected: set[str] = set()
    for round_ in range(3):
        procs = []
        for n, ws in enumerate(machines):
            run = f"gen-{n}"
            ws.add_step(run, make_step(f"w{round_}{n}", statement=f"walrus round {round_} machine {n}"))
            expected.add(f"{run}/w{round_}{n}")
            argv = ["-w", str(ws.root), "--config", str(config_file), "index", run, "--no-progress"]
            env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
            procs.append((argv, subprocess.Popen([sys.executable, "-m", "mem_retrieval.cli", *argv],
                                                 cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                                 stderr=subprocess.PIPE, text=True)))
        ended = [(argv, proc, proc.communicate(timeout=600)[1]) for argv, proc in procs]
        for argv, proc, err in ended:  # (once both ended: a retry while the other still commits may fail)
            if proc.returncode:  # the second commit may fail, in one line; run again, it lands
                lines = err.strip().splitlines()
                assert proc.returncode == 1 and len(lines) == 1 and "run `mem index` again" in lines[0], err
                retried = _cli({}, *argv)
                assert retried.returncode == 0, retried.stderr
        meta = store.read_meta(location)
        assert all(meta["versions"][t] >= pinned[-1][t] for t in meta["versions"]), (meta, pinned)
        pinned.append(meta["versions"])
        reader = Memory.open(machines[0].root, config_file)
        found = {h.id for h in reader.archive_hits("walrus", strategy="bm25")}
        assert found == expected, round_


# ---------------------------------------------------------------------------- crash trials

def s3_state(memory: Memory) -> dict:
    """What a reader of the index at the memory's URI sees (test_crash.index_state), and the
    steps a search for quokka finds."""
    from test_crash import index_state

    state = index_state(memory.workspace.root, memory.retriever.location)
    return state | {"quokka": {h.id for h in memory.archive_hits("quokka", strategy="bm25")}}


def test_index_on_s3_killed_at_random_points_leaves_old_or_new_and_the_next_run_completes(
        s3, tmp_path_factory, tmp_path, onnx_export):
    """The crash trials of test_crash.py with the index on the object store: `mem index` (a real
    process, forked warm) SIGKILLed at 12 points (6 uniform in [0, D], 6 in its last 30%, where
    the commits are); after each a reader sees the old index or the new one, whole, and the next
    run completes with the new one."""
    from test_crash import kill_points, mem_argv, shared_forker, workspace_files

    forker = shared_forker(tmp_path_factory)
    bucket = s3.bucket()
    old = corpus(tmp_path / "old", onnx_export)
    old_config = s3.config(tmp_path / "old.toml", f"s3://{bucket}/old")
    status, _, log = forker.run(mem_argv(old.root, "--config", str(old_config), "index", "--no-progress"))
    assert status["code"] == 0, log
    new_files = copy_workspace(old.root, tmp_path / "new")
    change_corpus(type(old)(new_files))
    s3.copy(bucket, "old", "reference")
    reference = s3.config(tmp_path / "reference.toml", f"s3://{bucket}/reference")
    status, duration, log = forker.run(mem_argv(new_files, "--config", str(reference), "index", "--no-progress"))
    assert status["code"] == 0, log
    old_state = s3_state(Memory.open(old.root, old_config))
    new_state = s3_state(Memory.open(new_files, reference))
    assert old_state["tables"] != new_state["tables"] and new_state["quokka"]
    outcomes = []
    points = kill_points(duration, seed=30, trials=6) + [duration * 0.7 + d for d in
                                                         kill_points(duration * 0.3, seed=31, trials=6)]
    for trial, delay in enumerate(points):
        root = copy_workspace(new_files, tmp_path / f"trial{trial}")
        s3.copy(bucket, "old", f"trial{trial}")
        config = s3.config(tmp_path / f"trial{trial}.toml", f"s3://{bucket}/trial{trial}")
        files = workspace_files(root)
        argv = mem_argv(root, "--config", str(config), "index", "--no-progress")
        status = forker.killed_after(delay, argv)
        seen = s3_state(Memory.open(root, config))
        if seen["tables"] == old_state["tables"]:
            assert seen["versions"] == old_state["versions"] and seen["quokka"] == set()
            outcome = "torn" if seen["latest"] != seen["versions"] else "old"
        else:
            assert seen["tables"] == new_state["tables"], f"trial {trial} after {delay:.2f} s: a mix"
            assert seen["quokka"] == new_state["quokka"]
            outcome = "new"
        assert status["killed"] or (status["code"] == 0 and outcome == "new"), status
        outcomes.append(outcome)
        done, _, log = forker.run(argv)
        assert done["code"] == 0, log
        after = s3_state(Memory.open(root, config))
        assert after["tables"] == new_state["tables"] and after["latest"] == after["versions"]
        assert after["quokka"] == new_state["quokka"]
        assert workspace_files(root) == files
    print(f"\nS3 index kill trials: {len(outcomes)} (D = {duration:.2f} s): {outcomes.count('old')} old, "
          f"{outcomes.count('torn')} torn (tables committed, meta.json not yet), {outcomes.count('new')} new")


def test_a_warm_server_serves_a_reindex_of_the_store_at_once(s3, tmp_path, onnx_export):
    """`mem serve`/`mem mcp` keep a Memory per index version: with the index on a store, the
    version is meta.json's ETag there (the workspace's .mem holds no meta.json to watch)."""
    from mem_retrieval.cli.warm import WarmMemories
    from mem_retrieval.records.workspace import Workspace

    config, _, _ = on_s3(s3, tmp_path)
    ws = corpus(tmp_path / "ws", onnx_export)
    Memory.open(ws.root, config).index(progress=False)
    memories, workspace = WarmMemories(), Workspace.open(ws.root)
    first = memories.get(workspace, config)
    assert memories.get(workspace, config) is first and not first.archive_hits("walrus", strategy="bm25")
    ws.add_step("gen-0", make_step("wx", statement="a walrus the warm server must see"))
    Memory.open(ws.root, config).index(progress=False)
    second = memories.get(workspace, config)
    assert second is not first
    assert [h.id for h in second.archive_hits("walrus", strategy="bm25")] == ["gen-0/wx"]


def test_a_server_answers_a_caller_of_other_aws_variables_only_for_a_local_index(s3, tmp_path, onnx_export):
    """A warm server reads the store with the AWS_* of the call that started it: a caller whose
    differ (another endpoint, other keys) is sent back to run in-process for an index on a store
    (it got the server's answer: a store it could not reach, or one it should not); for a local
    index they do not count (AWS_PROFILE set in one shell only made every call cold)."""
    import io

    from mem_retrieval.cli.forward import environment
    from mem_retrieval.cli.main import Caller, InProcessOnly, run
    from mem_retrieval.cli.warm import WarmMemories

    config, _, _ = on_s3(s3, tmp_path)
    ws = corpus(tmp_path / "ws", onnx_export)
    Memory.open(ws.root, config).index(progress=False)
    local = corpus(tmp_path / "local", onnx_export)
    Memory.open(local.root).index(progress=False)
    memories, ours = WarmMemories(), environment()
    other = ours | {"AWS_ENDPOINT_URL": "http://127.0.0.1:1"}

    def call(argv: list[str], env: dict[str, str]) -> int:
        return run(argv, out=io.StringIO(), err=io.StringIO(), caller=Caller(tmp_path, None, memories, env))

    on_store = ["-w", str(ws.root), "--config", str(config), "archive-search", "Hecke lemma",
                "--strategy", "bm25"]
    assert call(on_store, ours) == 0
    with pytest.raises(InProcessOnly, match="AWS_ENDPOINT_URL"):
        call(on_store, other)
    assert call(["-w", str(local.root), "archive-search", "Hecke lemma", "--strategy", "bm25"], other) == 0


class FailingProxy:
    """An HTTP proxy in front of the S3 server that answers 503 SlowDown, while ``fail`` holds
    (method, path piece), to every matching request: a store refusing for a while."""

    def __init__(self, target: str):
        import http.client
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import urlsplit

        proxy, host = self, urlsplit(target)
        self.fail: tuple[str, str] | None = None

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def answer(self):
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size) if size else None
                if proxy.fail and self.command == proxy.fail[0] and proxy.fail[1] in self.path:
                    message = b"<Error><Code>SlowDown</Code><Message>reduce your rate</Message></Error>"
                    self.send_response(503)
                    self.send_header("Content-Length", str(len(message)))
                    self.end_headers()
                    self.wfile.write(message)
                    return
                upstream = http.client.HTTPConnection(host.hostname, host.port, timeout=60)
                upstream.request(self.command, self.path, body=body,
                                 headers={k: v for k, v in self.headers.items() if k.lower() != "connection"})
                reply = upstream.getresponse()
                data = reply.read()
                self.send_response(reply.status)
                for name, value in reply.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection", "content-length", "server",
                                            "date"):
                        self.send_header(name, value)
                length = reply.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length if length is not None else str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                upstream.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_lance_retries_a_stores_requests_as_the_store_client_does(s3, tmp_path):
    """A store answering meta.json but never a table's request kept a search waiting for more
    than 8 minutes (Lance's own retries, each waiting out object_store's 30 s timeout), and an
    index run holding its lock as long; with Lance given the store client's bounds it is one line
    after 4 tries, about 2 minutes (measured by hand: too slow for a test). Lance is given them
    for a store, never for a folder, and the config's keys as they are."""
    from mem_retrieval.indexers.location import LANCE_RETRY, RETRY, Location

    assert LANCE_RETRY == {"client_max_retries": str(RETRY["max_retries"]),
                           "client_retry_timeout": str(int(RETRY["retry_timeout"].total_seconds()))}
    from conftest import build_workspace

    ws = build_workspace(tmp_path / "ws")
    on_store = Memory.open(ws.root, s3.config(tmp_path / "c.toml", f"s3://{s3.bucket()}/idx"))
    remote = Location.of(on_store.workspace, on_store.config)
    assert remote.storage_options() == LANCE_RETRY | dict(remote.options) and remote.options
    here = Memory.open(ws.root)
    assert Location.of(here.workspace, here.config).storage_options() == {}


def test_a_store_refusing_for_a_while_is_unreachable_and_the_published_index_is_kept(s3, tmp_path,
                                                                                    onnx_export):
    """A 503 on a PUT read as damage: `mem index` said to run --full, and --full deleted the
    published steps table, so every reader lost it once the store answered again. A store answering
    with server errors is one that cannot be reached (exit 1): nothing is deleted, the old index
    answers, and the next run indexes the edit alone."""
    ws = corpus(tmp_path / "ws", onnx_export)
    proxy = FailingProxy(s3.endpoint)
    try:
        config = s3.config(tmp_path / "proxied.toml", f"s3://{s3.bucket()}/idx", endpoint=proxy.endpoint)
        assert one_line_cli(ws.root, config, "index", "--no-progress")[0] == 0
        before = one_line_cli(ws.root, config, "--json", "archive-search", "Hecke lemma for GL3")
        assert before[0] == 0
        change_corpus(ws)
        for fail, argv in ((("PUT", "/steps.lance/data/"), ["index", "--no-progress"]),
                           (("PUT", "/steps.lance/data/"), ["index", "--full", "--no-progress"]),
                           (("GET", "/steps.lance/_versions/"), ["archive-search", "Hecke lemma for GL3"])):
            proxy.fail = fail
            code, out, err = one_line_cli(ws.root, config, *argv)
            proxy.fail = None
            assert code == 1 and err.count("\n") == 1, (argv, err)
            assert "cannot be reached" in err and "damaged" not in err and "--full" not in err, err
            code, out, err = one_line_cli(ws.root, config, "--json", "archive-search", "Hecke lemma for GL3")
            answer, old = json.loads(out), json.loads(before[1])
            assert answer.pop("notes") == [err.removeprefix("mem: ").rstrip("\n")] and old.pop("notes") == []
            assert (code, answer) == (0, old)  # the old index answers; the note names the edit not indexed
            assert err.startswith("mem: the tree.json of 4 runs was written after the last `mem index` read "
                                  "it"), err
        code, out, err = one_line_cli(ws.root, config, "index", "--no-progress")
        counts = re.search(r"(\d+) added, (\d+) updated, \d+ removed, \d+ unchanged; (\d+) texts? embedded",
                           out)
        assert code == 0 and counts, (out, err)
        added, updated, embedded = map(int, counts.groups())
        assert embedded <= added + updated  # the edit alone: no table was lost to rebuild
    finally:
        proxy.close()


def test_a_sessions_search_asks_the_store_for_a_newer_index_at_most_every_two_seconds(
        s3, tmp_path, onnx_export, monkeypatch):
    """Each search of a session asks whether a newer index was written (its note: `reopen()`);
    on a store each asking is a request, which cost a warm search 7x its time on a loopback S3.
    The store is asked at most every ``STORE_ASKED_EVERY`` seconds (2), on a clock the test moves:
    a newer index is said within 2 s of being written, and searches between askings ask nothing."""
    import types

    from mem_retrieval.retrieval import retriever

    config, _, _ = on_s3(s3, tmp_path)
    ws = corpus(tmp_path / "ws", onnx_export)
    Memory.open(ws.root, config).index(progress=False)
    clock = [1000.0]  # (a whole multiple of 2 s: the askings fall at 1002, 1004, …)
    monkeypatch.setattr(retriever, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    session = Memory.open(ws.root, config)
    assert session.archive_search("Hecke lemma", strategy="bm25").notes == ()
    Memory.open(ws.root, config).index(progress=False, full=True)  # another writer's newer index
    reads = []
    real = store.read_meta
    monkeypatch.setattr(store, "read_meta", lambda *a, **k: reads.append(1) or real(*a, **k))
    for elapsed in (0.0, 1.0, 1.9):
        clock[0] = 1000.0 + elapsed
        assert session.archive_search("Hecke lemma", strategy="bm25").notes == ()
    assert reads == []
    clock[0] = 1002.1
    notes = [n.message for n in session.archive_search("Hecke lemma", strategy="bm25").notes]
    assert notes == [retriever.NEWER_INDEX] and len(reads) == 1
    assert [n.message for n in session.archive_search("Hecke lemma", strategy="bm25").notes] == notes
    assert len(reads) == 1


def test_a_child_forked_after_its_parent_read_the_stores_meta_json_is_refused_not_hung(s3, tmp_path,
                                                                                      onnx_export):
    """On a store, a host that had only read meta.json (``index_refusal``: obstore's client, whose
    runtime a fork leaves as LanceDB's) forked a child whose first search, and whose index(),
    waited for ever reading meta.json: the child's refusal was checked only where LanceDB opens."""
    config, _, _ = on_s3(s3, tmp_path)
    remote = corpus(tmp_path / "remote", onnx_export)
    Memory.open(remote.root, config).index(progress=False)
    assert forked_child(remote.root, "meta", str(config)) == {"hung": False, "said": [FORK_REFUSED] * 4}
