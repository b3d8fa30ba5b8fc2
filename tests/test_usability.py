"""What a new user meets first: empty results that say why, errors in the words of the interface
used, warnings for a folder with no runs or a setting the ontology lacks, every problem of a bad
tree.json at once, the configuration's own file blamed for its bad values."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import build_workspace, make_step
from mem_retrieval.cli.main import run as run_cli
from mem_retrieval.configs import load_config
from mem_retrieval.memory import Memory
from mem_retrieval.records.errors import BadInput, InputError, MemError
from mem_retrieval.records.workspace import Workspace


def cli(root, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_cli(["--workspace", str(root), *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    ws = build_workspace(tmp_path_factory.mktemp("usability") / "ws")
    assert cli(ws.root, "index")[0] == 0
    return ws


def test_a_setting_that_leaves_every_hit_out_says_so_and_how_to_see_them(indexed):
    code, out, err = cli(indexed.root, "archive-search", "statement", "--setting", "C")
    assert (code, out) == (1, "no hits\n")
    assert err == ("mem: --setting 'C' left out 6 hits whose setting or a hypothesis it does not imply (M3) "
                   "(--any-setting shows them)\n")
    assert "page 1 of 0" not in out + err
    code, out, _ = cli(indexed.root, "archive-search", "statement", "--setting", "C", "--any-setting")
    assert code == 0 and out.startswith("page 1 of 2 · 6 hits")


def test_a_run_that_names_no_run_names_the_nearest_runs(indexed):
    code, out, err = cli(indexed.root, "archive-search", "statement", "--run", "alpah")
    assert (code, out) == (1, "no hits\n")
    assert err == "mem: --run 'alpah' names no run of this workspace; nearest: alpha\n"
    page = Memory.open(indexed.root).archive_search("statement", run="alpah")
    assert [n.render() for n in page.notes] == ["run 'alpah' names no run of this workspace; nearest: alpha"]


def test_a_list_of_runs_cut_for_a_message_says_how_many_there_are(tmp_path):
    """Past ten runs a message lists ten and says how many there are in all: a list cut silently
    told a user that a run it left out did not exist."""
    ws = build_workspace(tmp_path / "ws")
    for n in range(10):
        ws.add_run(f"run{n:02d}", [make_step("s1")])
    assert cli(ws.root, "index")[0] == 0
    names = ["alpha", "beta"] + [f"run{n:02d}" for n in range(8)]
    code, out, err = cli(ws.root, "archive-search", "statement", "--run", "zzzz")
    assert (code, out) == (1, "no hits\n")
    listed = f"{', '.join(names)}, … (12 in all)"
    assert err == f"mem: --run 'zzzz' names no run of this workspace (runs: {listed})\n"
    code, _, err = cli(ws.root, "archive-search", "statement", "--until", "zzzz#3")
    assert code == 1 and err.endswith(f"(a run is a folder holding its tree.json; runs: {listed})\n"), err
    ws2 = build_workspace(tmp_path / "two")  # ten or fewer: all of them, nothing more
    assert cli(ws2.root, "index")[0] == 0
    assert cli(ws2.root, "archive-search", "statement", "--run", "zzzz")[2] == \
        "mem: --run 'zzzz' names no run of this workspace (runs: alpha, beta)\n"


def test_recall_search_and_the_context_run_name_a_run_that_is_none_too(indexed):
    code, out, err = cli(indexed.root, "recall-search", "steps", "--run", "alpah")
    assert (code, out, err) == (1, "no events\n",
                                "mem: --run 'alpah' names no run of this workspace; nearest: alpha\n")
    page = Memory.open(indexed.root).recall_search("steps", run="alpah")
    assert [n.render() for n in page.notes] == ["run 'alpah' names no run of this workspace; nearest: alpha"]
    assert cli(indexed.root, "recall-search", "steps", "--run", "alpha")[2] == ""  # known: quiet
    # so does the run of a global id, as archive-get says it
    code, out, err = cli(indexed.root, "recall-search", "--id", "alpah/a1")
    assert (code, out, err) == (1, "no events\n", "mem: --id 'alpah/a1': run 'alpah' names no run of this "
                                "workspace; nearest: alpha\n")
    assert cli(indexed.root, "recall-search", "--id", "alpha/a9")[::2] == (  # the run is known, the step not
        1, "mem: --id 'alpha/a9' names no step; nearest: alpha/a5, alpha/a4, alpha/a3, alpha/a2, alpha/a1\n")
    # the run a query is asked from shapes the ranking: a typo there is said even with hits
    code, out, err = cli(indexed.root, "archive-search", "statement", "--context-run", "bta")
    assert code == 0 and out.startswith("page 1 of 2")
    assert err == ("mem: --context-run 'bta' names no run of this workspace, so the search is ranked as "
                   "asked from no run; nearest: beta\n")
    assert cli(indexed.root, "archive-search", "statement", "--context-run", "beta")[2] == ""
    # the note is advice: a library that became malformed since the index does not fail the search
    before = indexed.library_path.read_bytes()
    try:
        indexed.library_path.write_bytes(before + b"{not json\n")
        code, out, err = cli(indexed.root, "archive-search", "statement", "--context-run", "bta")
        assert code == 0 and err == (
            "mem: --context-run 'bta' names no run of this workspace, so the search is ranked as asked "
            "from no run; nearest: beta\n"
            "mem: solve/library.jsonl was written after the last `mem index` read it: entries added or "
            "changed since are not searched as library entries; run `mem index`\n")
    finally:
        indexed.library_path.write_bytes(before)


@pytest.mark.parametrize("strategy", ["graph", "rerank-graph"])
def test_a_context_run_naming_no_run_is_ranked_as_a_query_asked_from_no_run(indexed, strategy):
    """A typo in the run a query is asked from cites nothing the index knows: the list is the one
    asked from no run, ids and scores, never the in-run table's weights over empty features."""
    memory = Memory.open(indexed.root)

    def hits(**context):
        return [(h.id, h.score) for h in memory.archive_hits("statement lemma", strategy=strategy, **context)]

    alone = hits()
    assert hits(context_run="bta") == alone and hits(context_run="no-such-run") == alone
    assert hits(context_run="beta") != alone  # a run of the workspace: its own table ranks it


def test_a_setting_the_ontology_lacks_is_one_warning_naming_the_nearest_entries(indexed):
    code, out, err = cli(indexed.root, "archive-search", "statement", "--setting", "Fq((t)")
    assert code == 0 and out.startswith("page 1 of 2")  # unknown is not incompatible: all listed
    assert err == ("mem: --setting 'Fq((t)': 'Fq((t)' is not in the settings ontology, so a step matches "
                   "it only by the same text; nearest entries: Fq((t)), Fq(t), Fp((t))\n")
    assert cli(indexed.root, "archive-search", "statement", "--setting", "Qp")[2] == ""  # known: quiet


def test_usage_errors_are_one_line_without_mem_twice_and_point_to_help(indexed):
    code, out, err = cli(indexed.root, "archive-search", "x", "--page", "two")
    assert code == 2 and out == ""
    assert err == ("mem: argument --page: 'two' is not an integer (digits 0-9) "
                   "(see `mem archive-search --help`)\n")
    assert cli(indexed.root, "no-such-command")[2].count("mem:") == 1


def test_a_value_starting_with_a_dash_is_told_to_go_after_two_dashes(indexed):
    """A step id may start with '-' (SPEC §2: no white space or '/'), a query word too (`-adic`);
    argparse takes such a word for an option and said the ID was missing."""
    hint = "; a value starting with '-' goes after `--`: `… -- {}`\n"
    required = "the following arguments are required: {} (see `mem {} --help`)"
    for argv, said in [(("archive-get", "-x1"), required.format("ID", "archive-get")),
                       (("recall-search", "-adic"), "unrecognized arguments: -adic (see `mem recall-search "
                        "--help`)"),
                       (("archive-search", "-x", "--page", "2"), required.format("QUERY", "archive-search"))]:
        assert cli(indexed.root, *argv) == (2, "", f"mem: {said}" + hint.format(argv[1])), argv
    code, _, err = cli(indexed.root, "archive-get", "--", "-x1")  # after `--`: the id, looked up
    assert code == 1 and err.startswith("mem: no step '-x1'")
    # an option's value is given as --option=VALUE (after `--` it would be the command's argument)
    for argv in (("recall-search", "--id", "-x1"), ("archive-search", "--setting", "-adic", "x")):
        said = f"; a value starting with '-' is given as `{argv[1]}={argv[2]}`\n"
        assert cli(indexed.root, *argv)[2].endswith(said), argv
    assert cli(indexed.root, "recall-search", "--id=-x1")[2].startswith("mem: --id '-x1' names no step")
    # an ordinary usage error gets no such hint: a guessed short option, an option lacking its value
    for argv in (("archive-search", "x", "--bogus"), ("archive-search", "x", "-w"),
                 ("archive-search", "x", "-k", "lemma"), ("archive-get", "-x1", "--run"),
                 ("recall-search", "--id", "--", "-x1"), ("-j",)):
        code, _, err = cli(indexed.root, *argv)
        assert code == 2 and "a value starting with '-'" not in err, (argv, err)


def test_api_errors_name_parameters_and_the_cli_names_flags(indexed):
    memory = Memory.open(indexed.root)
    with pytest.raises(BadInput, match=r"^kind 'lemmas' is not one of lemma, dead_end, error$"):
        memory.archive_search("statement", kind="lemmas")
    with pytest.raises(BadInput, match=r"^give a query text or an id$"):
        memory.recall_search()
    code, _, err = cli(indexed.root, "archive-search", "statement", "--kind", "lemmas")
    assert (code, err) == (2, "mem: --kind 'lemmas' is not one of lemma, dead_end, error\n")
    code, _, err = cli(indexed.root, "recall-search")
    assert (code, err) == (2, "mem: give a query text or an id\n")


def test_index_and_check_in_a_folder_without_runs_warn(tmp_path):
    for command in ("index", "check"):
        code, _, err = cli(tmp_path, command)
        assert code == 0, err
        assert err.splitlines()[0] == (f"mem: no runs in {tmp_path} (a run is a folder holding "
                                       "tree.json)")


def test_a_run_folder_is_refused_as_a_workspace_naming_its_workspace(tmp_path, monkeypatch):
    """A script that `cd`s into a run (or gives it as --workspace) was told "no index: run `mem
    index`", which then made a 131 MB index of nothing in the run, exit 0, and `check` passed on
    no run. Every command, and the API, refuses it and names the folder that holds the runs."""
    ws = build_workspace(tmp_path / "ws")
    run = ws.root / "alpha"
    said = (f"mem: workspace {str(run)!r} is a run (it holds tree.json), not a workspace: the workspace "
            f"is the folder that holds its runs, {ws.root}\n")
    for argv in (["index"], ["check"], ["archive-search", "statement"], ["core-set", "alpha", "next", "x"]):
        assert cli(run, *argv) == (2, "", said)
    monkeypatch.chdir(run)
    out, err = io.StringIO(), io.StringIO()
    assert (run_cli(["index"], out=out, err=err), out.getvalue(), err.getvalue()) == \
        (2, "", said.replace(repr(str(run)), "'.'"))
    with pytest.raises(BadInput, match=r"^workspace '\.' is a run \(it holds tree\.json\)"):
        Memory.open(".")
    assert not (run / ".mem").exists() and not (ws.root / ".mem").exists()
    memory = run / "memory"  # the folder a script goes to for core.md and the log
    assert cli(memory, "index") == (2, "", f"mem: workspace {str(memory)!r} is a folder of run alpha (which "
                                           f"holds tree.json), not a workspace: the workspace is the folder "
                                           f"that holds its runs, {ws.root}\n")
    assert not (memory / ".mem").exists()
    assert cli(ws.root, "check")[0] == 0


def test_every_bad_step_of_a_tree_json_is_reported_at_once(tmp_path):
    ws = build_workspace(tmp_path / "ws")
    tree = ws.tree("alpha")
    tree["steps"][0]["status"] = "done"
    tree["steps"][2]["kind"] = "remark"
    tree["steps"][3]["hyp"] = "p odd"
    ws.save_tree("alpha", tree)
    code, out, err = cli(ws.root, "index")
    assert (code, out) == (2, "")
    lines = err.splitlines()
    assert len(lines) == 3 and all(line.startswith(f"mem: {ws.root}/alpha/tree.json:") for line in lines)
    assert ["steps[0].status" in lines[0], "steps[2].kind" in lines[1], "steps[3].hyp" in lines[2]] == [True] * 3
    code, out, _ = cli(ws.root, "--json", "index")
    data = json.loads(out)
    assert code == 2 and data["error"] == lines[0][len("mem: "):] and len(data["problems"]) == 3
    assert not (ws.root / ".mem").exists()  # nothing written


def test_at_most_twenty_problems_are_listed(tmp_path):
    ws = build_workspace(tmp_path / "ws")
    ws.add_run("gamma", [make_step(f"g{i}", status="done") for i in range(30)])
    with pytest.raises(InputError) as caught:
        Workspace.open(ws.root).tree("gamma")
    assert len(caught.value.problems) == InputError.MAX_PROBLEMS == 20


def test_an_unknown_table_in_the_workspace_settings_is_an_error(tmp_path):
    ws = build_workspace(tmp_path / "ws")
    (ws.root / "solve" / "settings.toml").write_text('[[setting]]\nname = "PFR"\n\n[settings]\nx = 1\n')
    code, _, err = cli(ws.root, "index")
    assert code == 2
    assert err == (f"mem: {ws.root}/solve/settings.toml:4: settings: unknown table or key "
                   "(a settings file holds [[setting]] entries only)\n")


@pytest.mark.parametrize("text, key, message", [
    ("[search]\nhint_window = 0\n", "search.hint_window", "must be at least 1, not 0"),
    ("[search]\nstrategy = \"bogus\"\n", "search.strategy",
     "'bogus' is not one of bm25, rerank, vector, hybrid-rrf, graph, rerank-graph"),
    ("[fusion.rerank_graph]\nbm25 = 1e308\n", "fusion.rerank_graph.bm25",
     "must be between 0 and 1000, not 1e+308"),
    ("[fusion.graph_in_run]\n" + "".join(f"{w} = 0\n" for w in
                                        ("bm25", "cosine", "vote", "expanded", "prior", "context", "affinity")),
     "fusion.graph_in_run", "every weight is 0: no feature would rank the hits"),
    ("[fusion.graph]\n" + "".join(f"{w} = 0\n" for w in ("bm25", "cosine", "vote", "expanded", "prior"))
     + "affinity = 1\n", "fusion.graph", "every weight a query from no run reads is 0 (context, "
     "affinity are those of a query from a run): no feature would rank the hits"),
    ("[fusion.rerank_graph]\nbm25 = 0.0002\ncosine = 0.0001\nvote = 0.0001\nexpanded = 0.0006\n",
     "fusion.rerank_graph", "the weights sum to 0.001 for a query from no run, under 0.01: scores so"
     " small show as 0 (four decimals), and the hint reading them says more is ahead than is; scale them "
     "up (only their ratios rank)"),
])
def test_a_config_that_would_make_searches_meaningless_is_refused(tmp_path, text, key, message):
    """A hint window of 0 pages says no relevant hit remains, ever; a weight table all 0 scores
    every hit 0 (the list in id order); an unknown default strategy has no ranking (the evaluations
    crashed on it, or named it the default); a weight of 1e308 scores infinity: each refused, by
    every command, blamed on the file that set it."""
    ws = build_workspace(tmp_path / "ws")
    (ws.root / "solve" / "mem.toml").write_text(text)
    (tmp_path / "q.jsonl").write_text('{"qid": "q1", "query": "statement"}\n')
    (tmp_path / "r.qrels").write_text("q1 0 alpha/a1 1\n")
    paging = ["eval", "paging", "--queries", str(tmp_path / "q.jsonl"), "--qrels", str(tmp_path / "r.qrels")]
    for argv in (["archive-search", "statement"], ["eval", "reuse", "alpha", "--per-step"], paging):
        code, _, err = cli(ws.root, *argv)
        line = 2 if key.count(".") == 2 or key.startswith("search") else 1  # a whole table: its header
        assert (code, err) == (2, f"mem: {ws.root}/solve/mem.toml:{line}: {key}: {message}\n"), argv


def test_config_values_that_can_work_are_read(tmp_path, monkeypatch):
    """What the checks made at load must let pass (each was refused by a first version): a model
    package inside another (a dotted name), a table summing to exactly 0.01 in decimal (0.0033 +
    0.0034 + 0.0033 is 0.00999… in floats), Ray at a scoped IPv6 address or a client's without a port."""
    from mem_retrieval.configs import load_config

    package = tmp_path / "mods" / "acme" / "minilm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("def get_model_path():\n    return ''\n")
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    config = tmp_path / "mine.toml"
    for text in ('[model]\npackage = "acme.minilm"\n', "[fusion.graph]\nbm25 = 0.0033\ncosine = 0.0034\n"
                 "vote = 0.0033\n", '[ray]\naddress = "[fe80::1%eth0]:6379"\n',
                 '[ray]\naddress = "ray://head"\n'):
        config.write_text(text)
        load_config(None, config)
    config.write_text('[model]\npackage = "nosuchparent.minilm"\n')  # left to its import: finding it
    load_config(None, config)  # imported its parents, which printed or raised what they would


def test_a_model_config_that_cannot_work_is_one_line_blaming_the_file_that_set_it(tmp_path):
    ws = build_workspace(tmp_path / "ws")
    assert cli(ws.root, "index")[0] == 0
    before = sorted(p.name for p in (ws.root / ".mem" / "lance").iterdir())
    config = tmp_path / "mine.toml"
    for text, argv, line in [
        ('[model]\nbackend = "torch"\n', ["archive-search", "statement"],  # quantize is default.toml's
         f"{config}:2: model.backend: 'torch' cannot run int8 weights (model.quantize = true): "
         "keep backend = \"onnx\", or set quantize = false too (other vectors: an index of int8 ones "
         "then needs `mem index --full`)"),
        ("[model]\ndim = 128\n", ["index", "--full"],
         f"{config}:2: model.dim: 128, but model all-MiniLM-L6-v2 gives 384-dimensional vectors"),
        ('[model]\npackage = "no_such_model"\n', ["index", "--full"],  # the file and line, as the others
         f"{config}:2: model.package: 'no_such_model' is no installed package (pip install no-such-model), "
         "nor a folder (a path with a / or from ~)"),
        ('[ray]\naddress = "nonsense"\n', ["archive-search", "statement"],  # Ray said so, exit 1, after 13 s
         f"{config}:2: ray.address: 'nonsense' is no Ray address: \"\" or \"local\" (a local instance "
         "for the run), \"auto\" (the running cluster), HOST:PORT (its GCS) or ray://HOST:PORT (its client "
         "server)"),
        ('[ray]\naddress = "host:99999"\n', ["archive-search", "statement"],  # no such port
         f"{config}:2: ray.address: 'host:99999' is no Ray address: \"\" or \"local\" (a local instance "
         "for the run), \"auto\" (the running cluster), HOST:PORT (its GCS) or ray://HOST:PORT (its client "
         "server)"),
        ('[model]\npackage = "a b"\n', ["archive-search", "statement"],
         f"{config}:2: model.package: 'a b' is no installed package (a package's name is a Python module's), "
         "nor a folder (a path with a / or from ~)"),
    ]:
        config.write_text(text)
        assert cli(ws.root, "--config", str(config), *argv) == (2, "", f"mem: {line}\n"), text
    assert sorted(p.name for p in (ws.root / ".mem" / "lance").iterdir()) == before
    assert cli(ws.root, "archive-search", "statement")[0] == 0  # the old index, untouched
    for address in ("", "local", "auto", "head:6379", "ray://head:10001"):  # what the README names
        config.write_text(f'[ray]\naddress = "{address}"\n')  # (a search starts no Ray)
        assert cli(ws.root, "--config", str(config), "archive-search", "statement")[0] == 0, address


def test_the_strategies_a_config_may_name_are_those_there_are():
    from mem_retrieval.configs import STRATEGY_NAMES
    from mem_retrieval.retrieval.strategies import STRATEGIES

    assert STRATEGY_NAMES == tuple(STRATEGIES)


def test_a_bad_value_in_the_workspace_config_is_blamed_on_that_file(tmp_path):
    ws = build_workspace(tmp_path / "ws")
    (ws.root / "solve" / "mem.toml").write_text("[search]\npage_size = 0\n")
    code, _, err = cli(ws.root, "index")
    assert (code, err) == (2, f"mem: {ws.root}/solve/mem.toml:2: search.page_size: must be at least 1, "
                              "not 0\n")


def test_a_bad_config_value_names_the_line_that_set_it(tmp_path):
    """A bad value named its file and key, not its line (settings.toml's did): the line under its
    table, past comments; a key of an inline table or a dotted key, the line writing it; a whole
    table, its header."""
    from mem_retrieval.records.parse import toml_key_line

    text = ('# tuned\n[search]\n# the pool\n\npool = "x"\n[fusion.graph]\nbm25 = 1\n[model]\n'
            'x = { a = 1 }\n"bm25" . k1 = 2\n')
    lines = {"search.pool": 5, "fusion.graph.bm25": 7, "fusion.graph.vote": 6, "fusion.graph": 6,
             "model.x.a": 9, "model.bm25.k1": 10, "search": 2, "graph.pool": None}
    assert {key: toml_key_line(text, key) for key in lines} == lines
    for other, line in (("[search]\n# the pool\n'pool' = \"x\"\n", 3),    # a literal-quoted key
                        ("\ufeff[search]\n# pool\npool = \"x\"\n", 3),       # a byte order mark
                        ("[search]\npool.x = 1\n", 2),                     # a key set inside it
                        ("[search]\n[[other]]\npool = 1\n", 1),            # another table's key
                        ("[ search ] # c\r\npool = 1\r\n", 2),
                        ("[search]\nhint = [\n  [1]\n]\npool = -1\n", 5),         # an array's line
                        ('[search]\nnote = \"\"\"\n[notes]\n\"\"\"\npool = -1\n', 5),  # a string's
                        ("[search]\nnote = '''\npool = 1\n'''\npool = -1\n", 5),
                        ('[search]\nnote = "#[" # [\npool = -1\n', 3)):
        assert toml_key_line(other, "search.pool") == line, other
    ws = build_workspace(tmp_path / "ws")
    (ws.root / "solve" / "mem.toml").write_text('[search]\n# pool\n\npool = "x"\n')
    assert cli(ws.root, "archive-search", "statement")[1:] == (
        "", f"mem: {ws.root}/solve/mem.toml:4: search.pool: must be a whole number, not a string\n")
    (ws.root / "solve" / "mem.toml").write_text('[search]\npool = 2.5\n')  # a fraction, by its value
    assert cli(ws.root, "archive-search", "statement")[1:] == (
        "", f"mem: {ws.root}/solve/mem.toml:2: search.pool: must be a whole number, not 2.5\n")


def test_the_page_size_is_the_configured_one_everywhere(indexed, tmp_path):
    override = tmp_path / "three.toml"
    override.write_text("[search]\npage_size = 3\n")
    assert load_config(indexed.root, override).search.page_size == 3
    code, out, _ = cli(indexed.root, "--config", str(override), "archive-search", "statement", "--page", "2")
    assert code == 0 and out.startswith("page 2 of 2 · 6 hits")
    ranks = [line.split(".")[0] for line in out.splitlines() if line[:1].isdigit()]
    assert ranks == ["4", "5", "6"]


def test_a_step_not_found_reads_the_library_once(indexed, monkeypatch):
    """archive_get of an unknown id suggests the nearest ids from one read of the library (it
    used to rebuild a set per library entry: quadratic)."""
    calls = []
    original = Workspace.library

    def counted(self):
        calls.append(1)
        return original(self)

    monkeypatch.setattr(Workspace, "library", counted)
    code, _, err = cli(indexed.root, "archive-get", "alpha/a9")
    assert code == 1 and err == "mem: no step 'alpha/a9'; nearest: alpha/a5, alpha/a4, alpha/a3, alpha/a2, alpha/a1\n"
    assert len(calls) == 1


@pytest.mark.parametrize("argv, message", [
    (["--reset", "--max-pairs", "5"], "--reset trains nothing: --max-pairs would be ignored"),
    (["--reset", "--epochs", "2", "--precision", "fp32"], "--reset trains nothing: --epochs, --precision would be ignored"),
    (["--eval", "--holdout-queries", "q.jsonl"], "--eval holds out whole runs itself: --holdout-queries would be ignored"),
])
def test_tune_refuses_flags_its_mode_would_ignore(tmp_path, argv, message):
    code, out, err = cli(tmp_path, "tune", *argv)
    assert (code, out, err) == (2, "", f"mem: {message}\n")


def test_tune_says_when_the_held_out_steps_hold_every_citation(tmp_path):
    """Not "no step cites another step": they do, and all are held out."""
    ws = build_workspace(tmp_path / "ws")
    assert cli(ws.root, "index")[0] == 0
    queries = tmp_path / "q.jsonl"
    queries.write_text("".join(json.dumps({"qid": s, "query": "x", "step": s}) + "\n"
                               for s in ("alpha/a2", "alpha/a4", "beta/b1"))
                       + json.dumps({"qid": "q", "query": "x"}) + "\n")  # holds out nothing: said
    code, out, err = cli(ws.root, "tune", "--holdout-queries", str(queries))
    assert (code, out) == (1, "")
    assert err == (f"mem: warning: {queries}: 1 of 4 queries name no step: nothing of theirs is held out\n"
                   "mem: the 3 held-out steps and the work written after them hold every citation: "
                   "nothing left to tune on\n")
    queries.write_text("\n")  # no query at all: it trained on everything, and said nothing
    assert cli(ws.root, "tune", "--holdout-queries", str(queries)) == (
        2, "", f"mem: {queries}: holds no query, so nothing would be held out\n")


def test_a_warm_memory_reads_a_step_from_the_files_while_the_store_is_out_of_reach(workspace):
    """`archive-get` reads the files alone, in-process or forwarded to `mem serve`; the server asked
    the store for the index version first, and failed the call while the store was down."""
    from mem_retrieval.cli.warm import WarmMemories
    from mem_retrieval.eval.loopback_s3 import free_port
    from mem_retrieval.records.workspace import Workspace

    (workspace.root / "solve" / "mem.toml").write_text(
        f'[index]\nuri = "s3://mem-down/idx"\n[index.storage]\n'
        f'endpoint = "http://127.0.0.1:{free_port()}"\nallow_http = "true"\nregion = "us-east-1"\n'
        'access_key_id = "k"\nsecret_access_key = "s"\n')
    memories = WarmMemories()
    memory = memories.get(Workspace.open(workspace.root))
    assert memory.archive_get("a2", run="alpha").step.gid == "alpha/a2"
    assert memories.get(Workspace.open(workspace.root)) is memory  # kept while the store stays down
    with pytest.raises(MemError, match="cannot be reached"):
        memory.archive_search("statement")


@pytest.mark.parametrize("extra", ["mcp", "distributed"])
def test_the_install_hint_of_an_extra_names_its_packages_however_the_project_was_installed(extra):
    """`pip install -e ".[distributed]"` needs a checkout; the hint names the packages themselves,
    as pyproject.toml's extra lists them (the oracle), which works from a path or a wheel too."""
    import tomllib
    from pathlib import Path

    from packaging.requirements import Requirement

    from mem_retrieval.records.errors import install_hint

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    listed = pyproject["project"]["optional-dependencies"][extra]
    hint = install_hint(extra)
    assert hint.startswith("pip install '") and hint.endswith(f"' (the extra [{extra}])")
    named = hint.removeprefix("pip install ").rsplit(" (", 1)[0].split(" ")
    assert (sorted(str(Requirement(n.strip("'"))) for n in named)
            == sorted(str(Requirement(r)) for r in listed))


def test_index_with_the_ray_engine_but_no_ray_is_refused_before_anything_is_written(tmp_path):
    """Without the extra [distributed], `mem index --engine ray` exported the model (131 MB) and
    made an empty index before it said Ray was missing; it is refused first, exit 2 (as `mem mcp`
    without its SDK), and nothing is written."""
    import os
    import subprocess
    import sys

    ws = build_workspace(tmp_path / "ws")
    blocker = tmp_path / "block"
    blocker.mkdir()
    # as if not installed: `import ray` fails, importlib.util.find_spec("ray") is None
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['ray'] = None\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {
        "PYTHONPATH": str(blocker), "MEM_NO_SERVER": "1"}
    done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "-w", str(ws.root), "index", "--engine",
                           "ray"], env=env, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("mem: --engine ray needs Ray: pip install 'ray[client,data]")
    assert not (ws.root / ".mem").exists()


def test_record_with_the_ray_engine_but_no_ray_admits_nothing(tmp_path):
    """`record` with `index.engine = "ray"` and no Ray wrote the library, then failed to index it;
    it is refused before the write, as an index it could not extend is."""
    import os
    import subprocess
    import sys

    ws = build_workspace(tmp_path / "ws")
    ws.add_run("gamma", [make_step("g1")])
    (ws.root / "solve" / "mem.toml").write_text('[index]\nengine = "ray"\n')
    library = (ws.root / "solve" / "library.jsonl").read_bytes()
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['ray'] = None\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {
        "PYTHONPATH": str(blocker), "MEM_NO_SERVER": "1"}
    done = subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "-w", str(ws.root), "record", "gamma"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("mem: --engine ray needs Ray: pip install 'ray[client,data]")
    assert done.stderr.endswith(" (record gamma refused: nothing was admitted)\n")
    assert (ws.root / "solve" / "library.jsonl").read_bytes() == library


@pytest.mark.parametrize("blocked, argv, said", [
    ("ray", ["--scale"], "--scale needs Ray: pip install 'ray[client,data]"),
    ("moto", ["--scale", "--uri", "loopback"],
     "--uri loopback needs moto's S3 server: pip install 'moto[server]"),
])
def test_the_scale_benchmark_without_its_extra_says_so_before_any_work(tmp_path, blocked, argv, said):
    """`bench --scale` without Ray ended in a traceback once the workspace was made, and without
    moto (`--uri loopback`) after the whole Ray measurement, naming a log it had deleted: one line
    first, exit 2, nothing written."""
    import os
    import subprocess
    import sys

    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(f"import sys\nsys.modules[{blocked!r}] = None\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(blocker)}
    done = subprocess.run([sys.executable, "-m", "mem_retrieval.eval.bench", *argv, "--scale-steps", "10",
                           "--out", str(tmp_path / "out")], env=env, capture_output=True, text=True,
                          timeout=120)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"python -m mem_retrieval.eval.bench: {said}"), done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_memory_whose_workspace_folder_was_moved_says_so(tmp_path):
    """A `Memory` kept open while its folder was moved raised a raw FileNotFoundError (reads and
    writes alike), and its searches said "no index: run `mem index`": each call is one BadInput
    naming the folder, as the command line's `workspace … is not a folder`."""
    import os

    ws = build_workspace(tmp_path / "ws")
    memory = Memory.open(ws.root)
    memory.index(progress=False)
    assert memory.archive_search("statement").hits
    os.rename(ws.root, tmp_path / "moved")
    said = f"workspace {str(ws.root)!r} is not a folder (moved or deleted since it was opened)"
    for call in (lambda: memory.archive_get("alpha/a1"), lambda: memory.check(),
                 lambda: memory.core_set("alpha", "next", "x"), lambda: memory.archive_insert("alpha/a2"),
                 lambda: memory.index(), lambda: memory.record("alpha"),
                 lambda: memory.archive_search("statement"),
                 lambda: memory.archive_search("statement", page=2),
                 lambda: memory.recall_search("five steps")):
        with pytest.raises(BadInput) as raised:
            call()
        assert str(raised.value) == said


def test_a_memory_kept_across_its_tables_deleted_and_built_again_reads_the_new_ones(tmp_path):
    """`.mem/lance` deleted and `mem index` run: the tables came back at the same version numbers,
    meta.json was left as it was (only "built" differed), and a kept `Memory` failed every search
    with "the index is damaged: run `mem index --full`". meta.json names each table's creation, so
    it is written, and the search runs again on the index as it is now."""
    import shutil

    ws = build_workspace(tmp_path / "ws")
    Memory.open(ws.root).index(progress=False)
    kept = Memory.open(ws.root)
    assert [h.id for h in kept.archive_search("a4").hits] == ["alpha/a4"]
    before = json.loads((ws.root / ".mem" / "meta.json").read_text())
    shutil.rmtree(ws.root / ".mem" / "lance")
    Memory.open(ws.root).index(progress=False)
    after = json.loads((ws.root / ".mem" / "meta.json").read_text())
    assert after["versions"] == before["versions"] and after["lineage"] != before["lineage"]
    assert set(after["lineage"]) == set(after["versions"])
    assert [h.id for h in kept.archive_search("a4").hits] == ["alpha/a4"]
    assert kept.archive_search("statement").total == Memory.open(ws.root).archive_search("statement").total


def test_an_output_schema_that_is_none_is_a_key_error_naming_them():
    """`output_schema("nope")` raised FileNotFoundError with the package's path, and a name with
    a path piece opened another file."""
    from mem_retrieval.functions import output_schema, schema_names

    assert output_schema("archive-search")["type"] == "object"
    for name in ("nope", "archive_search", "../memory"):
        with pytest.raises(KeyError, match="the schemas: " + ", ".join(schema_names())):
            output_schema(name)


def test_an_id_typed_in_another_case_is_suggested_first(tmp_path):
    """Suggestions compare ids case-folded: `r-truncation` typed for `R-truncation` got
    `S-truncation` first (as close, and later in order), and capitals got no suggestion at all; a
    search for such an id alone names the nearest too."""
    ws = build_workspace(tmp_path / "ws")
    ws.add_run("cover", [make_step("R-truncation"), make_step("S-truncation"), make_step("dense-cover")])
    code, _, err = cli(ws.root, "archive-get", "r-truncation")
    assert code == 1 and err.startswith("mem: no step 'r-truncation'; nearest: cover/R-truncation, ")
    code, _, err = cli(ws.root, "archive-get", "DENSE-COVER")
    assert code == 1 and err.startswith("mem: no step 'DENSE-COVER'; nearest: cover/dense-cover")
    # a search of that id alone says so with the nearest ids too (it named none)
    assert cli(ws.root, "index")[0] == 0
    _, _, err = cli(ws.root, "archive-search", "r-truncation")
    assert "'r-truncation': no step this search may return has this id" in err
    assert "; nearest: cover/R-truncation, " in err


def test_asking_past_the_last_page_of_events_counts_events(indexed):
    code, out, _ = cli(indexed.root, "recall-search", "step")
    total = int(out.split(" · ")[1].split()[0])
    code, _, err = cli(indexed.root, "recall-search", "step", "--page", "99")
    assert code == 1 and err.endswith(f"({total} event{'s' if total > 1 else ''})\n")
    code, _, err = cli(indexed.root, "recall-search", "zzzqx", "--page", "2")
    assert code == 1 and err == "mem: page 2: no events, so no page past the first (an empty page 1)\n"


def test_a_tree_json_that_cannot_be_read_stops_a_bare_id_and_says_the_global_id_does_not(tmp_path):
    """A typo in one run's tree.json (mid-run) stops archive-get of a bare id, which any run may
    hold (answering from the readable runs could hide that the id is ambiguous), and the line says
    that a global id reads its run alone; a global id of another run is answered."""
    ws = build_workspace(tmp_path / "ws")
    ws.add_run("broken", [make_step("z1", parents=("alpha/a1",))])
    tree = ws.tree("broken")
    tree["steps"][0]["parent"] = tree["steps"][0].pop("parents")  # an unknown field
    ws.save_tree("broken", tree)
    code, out, err = cli(ws.root, "archive-get", "a1")
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "broken/tree.json:" in err and "steps[0].parent: unknown field" in err
    assert err.rstrip().endswith("(a bare id reads every run; a global id, RUN/a1, reads its run alone)")
    code, out, err = cli(ws.root, "archive-get", "alpha/a1")
    assert (code, err) == (0, "") and out.startswith("id         alpha/a1\n")


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(["a", "bb", "ccc ", " ", "  ", "\n", "word ", "x" * 50, "é", "\t", "-",
                                 "long-er-word ", "a-" + "b" * 120, "https://example.org/a-", "long" * 100,
                                 "\x0b", "\x1c", "\x85", "\xa0", "\u3000", "\u2028"]),
                max_size=400), st.sampled_from([5, 20, 50, 300]))
def test_a_hits_excerpt_is_textwrap_shorten_of_the_whole_statement(parts, width):
    """A page prints ``textwrap.shorten(statement, 300)`` of each hit, read from a prefix (a 50 MB
    statement was shortened whole: 6 s of an 8 s search): the same text, whatever the words and
    the white space before the cut, and a word the cut falls in, which textwrap breaks when it is
    longer than the room and drops when it is not."""
    import textwrap

    from mem_retrieval.cli.calls import _excerpt

    text = "".join(parts)
    assert _excerpt(text, width) == textwrap.shorten(text, width, placeholder=" …")


def test_an_excerpt_cut_inside_a_long_word_breaks_it_as_textwrap_does():
    """The prefix cut a word longer than the room into a piece shorter than it: textwrap drops a
    word that does not fit but breaks one longer than the room, so the page ended `word word …`
    where the whole statement gives `word https://example.org/a- …`."""
    import textwrap

    from mem_retrieval.cli.calls import _excerpt

    text = "word " * 40 + "\n" * 800 + "https://example.org/a-" + "long" * 100
    assert _excerpt(text) == textwrap.shorten(text, 300, placeholder=" …")
    assert _excerpt(text).endswith(" https://example.org/a- …")
