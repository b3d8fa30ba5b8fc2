"""core_set and archive_insert: what they write, each refusal, crashes, and concurrent inserts."""

from __future__ import annotations

import json
import shutil
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import build_workspace, library_line, make_step, step_line, without_root_override
from mem_retrieval.records.core import clean_field, render
from mem_retrieval.records.errors import BadInput
from mem_retrieval.records.parse import iter_library, parse_core, parse_core_text
from mem_retrieval.records.tokens import count_tokens
from mem_retrieval.records.workspace import Workspace as RecordsWorkspace
from mem_retrieval.configs import load_config
from mem_retrieval.records.errors import Refused
from mem_retrieval.records.writes import archive_insert, core_set

PACKAGE = load_config().model.package  # the model whose word pieces W's bound counts

ROOT = Path(__file__).resolve().parent.parent
EMPTY_CORE_TOKENS = 16  # "## phase\n## portfolio\n## open gaps\n## next\n## inputs\n": 5 × "#","#" + 6 words


# ------------------------------------------------------------------------------------ token counter

def test_tokens_are_word_pieces_without_special_tokens_or_truncation():
    assert count_tokens("", PACKAGE) == 0
    assert count_tokens("hello world", PACKAGE) == 2  # no [CLS]/[SEP]
    assert count_tokens("hello " * 300, PACKAGE) == 300  # the tokenizer.json truncates at 128; not here
    assert count_tokens("## next", PACKAGE) == 3  # '#', '#', 'next'
    assert count_tokens(render({}), PACKAGE) == EMPTY_CORE_TOKENS


# ------------------------------------------------------------------------------------------ core-set

def test_core_set_rewrites_one_field_and_keeps_the_others(workspace, mem):
    before = parse_core(workspace.core_path("alpha"), "alpha")
    code, out, err = mem("core-set", "alpha", "next", "audit a2, then a4 (a1 proved)")
    assert (code, err) == (0, "")
    assert "alpha/memory/core.md: next set" in out
    after = parse_core(workspace.core_path("alpha"), "alpha")
    assert after.get("next") == "audit a2, then a4 (a1 proved)"
    assert [f for f in after.fields if f[0] != "next"] == [f for f in before.fields if f[0] != "next"]


@pytest.mark.parametrize("end", ["\n", "\r\n"])
@pytest.mark.parametrize("field", ["phase", "portfolio", "open gaps", "next", "inputs"])
def test_core_set_changes_its_field_alone_and_every_other_byte_stays(workspace, mem, field, end):
    """SPEC §9: core-set rewrites one field. The others keep their blank lines, their spacing and
    the file's line ends (every field was rewritten clean: a paragraph break in `next` went at a
    `phase` set); a missing field is put in its place in the order."""
    blocks = {"phase": ["## phase   round 2", ""],
              "open gaps": ["## open gaps   E6/F4 at function level", "", "  second paragraph, indented", ""],
              "next": ["## next", "A7 (continued)", "", "", "then audit A5-7"],
              "inputs": ["##  inputs      A2-4 audited · A5-7 not yet", "", ""]}  # no portfolio
    path = workspace.core_path("alpha")
    path.write_bytes(end.join(line for lines in blocks.values() for line in lines).encode() + end.encode())
    assert mem("check", "alpha")[0] == 0
    assert mem("core-set", "alpha", field, "set now\n\nits second line")[0] == 0
    mine = [f"## {field:<12}set now", "its second line"]  # its own blank lines dropped, as always
    kept = {name: lines[:1] + lines[max(i for i, line in enumerate(lines) if line.strip()) + 1:]
            if name == field else lines for name, lines in blocks.items()}  # the field's closing blank lines
    if field in blocks:
        kept[field][:1] = mine
    else:  # portfolio: between phase and open gaps
        kept = {"phase": kept["phase"], field: mine} | {n: v for n, v in kept.items() if n != "phase"}
    assert path.read_bytes().decode() == end.join(line for lines in kept.values() for line in lines) + end
    assert parse_core(path, "alpha").get(field) == "set now\nits second line"
    assert mem("check", "alpha")[0] == 0


def test_core_set_appends_its_checkpoint_event(workspace, mem):
    assert mem("core-set", "alpha", "open-gaps", "a4 ← a2; see alpha/a1, (beta/b1), d1 and zz9")[0] == 0
    event = workspace.events("alpha")[-1]
    assert event["actor"] == "root" and event["kind"] == "checkpoint"
    assert event["text"] == "core-set open gaps: a4 ← a2; see alpha/a1, (beta/b1), d1 and zz9"
    assert event["ids"] == ["a4", "a2", "alpha/a1", "beta/b1", "d1"]  # zz9 names nothing
    assert event["time"].endswith("Z") and event["time"] >= "2026-10-17T03:42:00Z"


def test_a_checkpoint_logs_an_id_typed_with_a_look_alike_as_its_record_writes_it(workspace, mem):
    """`audit a‑4` (U+2011) named a-4 for M1 but not in the checkpoint's ids, so recall-search --id
    a-4 never listed it: the event logs the id as tree.json writes it."""
    workspace.add_step("alpha", make_step("a-4"))
    assert mem("core-set", "alpha", "next", "audit a\u20114 and \uff41\uff11, then a2")[0] == 0
    assert workspace.events("alpha")[-1]["ids"] == ["a-4", "a1", "a2"]


def test_checkpoint_time_never_goes_before_the_last_event(workspace, mem):
    events = workspace.events("alpha")
    events.append({"time": "2099-01-01T00:00:00+02:00", "actor": "A1", "kind": "audit", "ids": [],
                   "text": "from the future"})
    workspace.write_events("alpha", events)
    assert mem("core-set", "alpha", "phase", "verdict")[0] == 0
    assert workspace.events("alpha")[-1]["time"] == "2098-12-31T22:00:00Z"
    assert mem("check", "alpha")[0] == 0


def test_a_checkpoint_leaves_room_for_a_hand_written_event_in_the_same_second(workspace, mem):
    """The harness writes its events to the second, as the SPEC does: a checkpoint stamped to the
    millisecond (…18.717Z) made its next event (…18Z) read as earlier, and the log was refused."""
    assert mem("core-set", "alpha", "next", "brief A4")[0] == 0
    stamp = workspace.events("alpha")[-1]["time"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp)  # to the second
    (workspace.root / "alpha" / "briefs").mkdir(exist_ok=True)
    (workspace.root / "alpha" / "briefs" / "A4.md").write_text("Audit a4.\n", encoding="utf-8")
    workspace.write_events("alpha", [*workspace.events("alpha"), {
        "time": stamp, "actor": "root", "kind": "brief", "ids": [], "text": "briefs/A4.md"}])
    assert mem("check", "alpha")[0] == 0 and mem("index")[0] == 0


LINE = st.sampled_from(["", " ", "\t", "\r", '{"time": "2026-10-17T03:42:00Z"}', '{"time": "é"}', "x"])


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(LINE, max_size=8), ending=st.sampled_from(["", "\n", "\r\n", "\n\n  "]),
       block=st.integers(1, 7))
def test_the_last_line_read_backwards_equals_the_last_non_blank_line(tmp_path_factory, lines, ending, block):
    """Brute-force oracle: the file split into lines, the last that holds more than white space,
    and its 0-based offset; read backwards in blocks of 1 to 7 bytes (boundaries everywhere)."""
    from mem_retrieval.records.writes import _last_line

    data = ("\n".join(lines) + ending).encode("utf-8")
    path = tmp_path_factory.mktemp("tail") / "events.jsonl"
    path.write_bytes(data)
    starts = [0] + [n + 1 for n, byte in enumerate(data) if byte == ord("\n")]
    pieces = [(start, data[start:data.find(b"\n", start) if b"\n" in data[start:] else len(data)])
              for start in starts]
    expected = next(((start, piece.rstrip()) for start, piece in reversed(pieces) if piece.strip()), None)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert _last_line(fd, len(data), block) == expected
    finally:
        os.close(fd)


def test_the_checkpoint_of_a_log_with_a_malformed_last_line_names_its_line(workspace, mem):
    path = workspace.events_path("alpha")
    path.write_bytes(path.read_bytes() + b'{"time": 5}\n\n')
    code, _, err = mem("core-set", "alpha", "next", "audit a4")
    assert code == 2 and err == f"mem: {path}:3: time: missing\n"
    assert workspace.events_path("alpha").read_bytes().endswith(b'{"time": 5}\n\n')  # nothing appended


def test_core_set_creates_core_md_with_the_five_fields(workspace, mem):
    assert not workspace.core_path("beta").exists()
    assert mem("core-set", "beta", "inputs", "alpha/a1 proved")[0] == 0
    core = parse_core(workspace.core_path("beta"), "beta")
    assert core.fields == (("phase", ""), ("portfolio", ""), ("open gaps", ""), ("next", ""),
                           ("inputs", "alpha/a1 proved"))
    assert workspace.events("beta")[-1]["ids"] == ["alpha/a1"]


def test_a_core_set_refused_on_a_bad_log_writes_no_core_md(workspace, mem):
    """W is written only after its checkpoint event: a run without core.md keeps none when the
    append is refused (a malformed log line), not a blank five-field template."""
    path = workspace.events_path("beta")
    path.write_bytes(path.read_bytes() + b'{"time": "not a time", "kind": "audit"}\n')
    code, _, err = mem("core-set", "beta", "next", "audit b2")
    assert code == 2 and "time: 'not a time' is not an ISO 8601 time" in err
    assert not workspace.core_path("beta").exists()


@pytest.mark.parametrize("line, says", [
    ("[" * 5000 + "]" * 5000, "invalid JSON: nested too deeply"),
    ('{"time": "2026-10-17T05:00:00Z", "time": "2026-10-18T05:00:00Z"}', "time: written twice"),
])
def test_core_set_reads_the_last_event_as_every_reader_does(workspace, mem, line, says):
    """The last line core-set reads for its time is refused as `mem index` refuses it: one line, exit 2,
    nothing written (a line nested 5,000 deep was a RecursionError's traceback)."""
    path, core = workspace.events_path("beta"), workspace.core_path("beta")
    path.write_bytes(path.read_bytes() + line.encode() + b"\n")
    before = path.read_bytes(), core.read_bytes() if core.exists() else None
    number = path.read_bytes().count(b"\n")
    code, out, err = mem("core-set", "beta", "next", "audit b2")
    assert (code, out) == (2, "") and err.startswith(f"mem: {path}:{number}: {says}")
    after = path.read_bytes(), core.read_bytes() if core.exists() else None
    assert err.count("\n") == 1 and after == before


def test_core_set_refuses_an_unknown_field_with_the_list(workspace, mem):
    before = workspace.events_path("alpha").read_bytes()
    code, out, err = mem("core-set", "alpha", "plan", "x")
    assert code == 2 and out == ""
    assert err == "mem: unknown core.md field 'plan' (fields: phase, portfolio, open gaps, next, inputs)\n"
    assert workspace.events_path("alpha").read_bytes() == before


def test_core_set_refuses_text_that_would_begin_a_field(workspace, mem):
    code, _, err = mem("core-set", "alpha", "next", "a\n## inputs hijacked")
    assert code == 2 and "line 2 starts with '## '" in err


def test_core_set_keeps_a_first_line_beginning_with_hashes_in_its_field(workspace, mem):
    """The first line is written on the field's own heading line, so `## ` there begins no field:
    it is kept as text and read back in its field."""
    assert mem("core-set", "alpha", "next", "## inputs hijacked")[0] == 0
    core = parse_core(workspace.core_path("alpha"), "alpha")
    assert core.get("next") == "## inputs hijacked"
    assert [name for name, _ in core.fields] == ["phase", "portfolio", "open gaps", "next", "inputs"]
    assert core.get("inputs") != "hijacked"
    assert mem("check")[0] == 0


@pytest.mark.parametrize("heading", ["##inputs", "##\tinputs", "＃＃ inputs", "### inputs", "# Inputs",
                                     "##open  gaps"])
def test_a_misspelt_heading_is_refused_and_core_set_loses_nothing(workspace, mem, heading):
    """A heading written without its space, with a tab, in fullwidth '＃', with one '#' too many or
    too few was read as a line of the field above it, so the next core-set of that field dropped
    its text, and check said nothing: it is bad input naming its line, and core-set writes nothing.
    An indented line is text of the field above (the README's way to begin a line with '## ')."""
    path = workspace.core_path("alpha")
    path.write_text(f"## phase  round 2\n## next  audit a4\n{heading}  a1 proved · d1\n", encoding="utf-8")
    before = path.read_bytes(), workspace.events_path("alpha").read_bytes()
    code, out, err = mem("core-set", "alpha", "next", "audit a2")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"mem: {path}:3: heading: ") and "is no heading" in err
    assert (path.read_bytes(), workspace.events_path("alpha").read_bytes()) == before
    code, out, _ = mem("check")
    assert code == 2 and "alpha/memory/core.md:3: input: heading: " in out
    path.write_text(f"## phase  round 2\n## next  audit a4\n  {heading}  a1 proved\n", encoding="utf-8")
    assert parse_core(path, "alpha").get("next") == f"audit a4\n  {heading}  a1 proved"
    assert mem("core-set", "alpha", "next", f"audit a2\n{heading} x")[0] == 2  # nor may it write one
    assert mem("core-set", "alpha", "next", f"audit a2\n  {heading} x")[0] == 0
    assert parse_core(path, "alpha").get("next") == f"audit a2\n  {heading} x"


@pytest.mark.parametrize("brk", ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"])
def test_a_line_break_other_readers_see_is_a_line_of_the_field(workspace, mem, brk):
    """A lone CR (a form feed, U+2028…) went into core.md raw: mem's reader splits at line feeds
    alone, but Python's text mode and Markdown break there, and read `x\r## inputs A5-8 proved`
    as a second `inputs` field. It is written as a line feed, so such a line is refused as a
    heading would be, and other text keeps its lines."""
    path = workspace.core_path("alpha")
    before = path.read_bytes(), workspace.events_path("alpha").read_bytes()
    code, _, err = mem("core-set", "alpha", "next", f"x{brk}## inputs a1 proved")
    assert code == 2 and "field text line 2 starts with '## '" in err
    assert (path.read_bytes(), workspace.events_path("alpha").read_bytes()) == before
    assert mem("core-set", "alpha", "next", f"audit a2{brk}then a4\r\nthen a5")[0] == 0
    assert parse_core(path, "alpha").get("next") == "audit a2\nthen a4\nthen a5"
    assert path.read_text(encoding="utf-8").splitlines() == path.read_text(encoding="utf-8").split("\n")[:-1]


def test_core_set_unknown_run_is_not_found(mem):
    code, _, err = mem("core-set", "gamma", "next", "x")
    assert code == 1 and "no run 'gamma'" in err


def test_core_set_accepts_exactly_2000_tokens_and_refuses_2001(workspace, mem):
    # beta has no core.md: W = the 16 tokens of the empty fields + one token per "word"
    words = 2000 - EMPTY_CORE_TOKENS
    assert mem("core-set", "beta", "next", "word " * words)[0] == 0
    assert count_tokens(workspace.core_path("beta").read_text(), PACKAGE) == 2000
    before = (workspace.core_path("beta").read_bytes(), workspace.events_path("beta").read_bytes())
    code, out, err = mem("core-set", "beta", "next", "word " * (words + 1))
    assert code == 1 and out == ""
    assert "W would be 2,001 tokens with this 'next' (limit 2,000)" in err
    after = (workspace.core_path("beta").read_bytes(), workspace.events_path("beta").read_bytes())
    assert after == before  # refused: no event, no change
    workspace.add_run("gamma", [make_step("g1")])  # no memory/ folder yet: a refusal makes none
    before = sorted(workspace.root.rglob("*"))
    code, _, err = mem("core-set", "gamma", "next", "word " * (words + 1))
    assert code == 1 and "W would be 2,001 tokens with this 'next' (limit 2,000)" in err
    assert sorted(workspace.root.rglob("*")) == before  # it left gamma/memory/.core.md.lock


def test_a_word_too_long_for_the_tokenizer_counts_its_characters_so_w_stays_bounded(workspace, mem):
    # word pieces read a word of over 100 characters as one [UNK]: a 100 KB run of letters would
    # pass as 1 token. It counts one per character, the most pieces any split of it makes.
    assert count_tokens("x" * 100, PACKAGE) == 50  # 100 characters: split, 'xx' '##xx' …
    assert count_tokens("a " + "x" * 150 + " b", PACKAGE) == 1 + 150 + 1
    assert count_tokens("\u00e9" * 120, PACKAGE) == 120
    before = workspace.events_path("beta").read_bytes()
    code, out, err = mem("core-set", "beta", "next", "x" * 100_000)
    assert code == 1 and out == "" and "W would be 100,016 tokens" in err
    assert not workspace.core_path("beta").exists()
    assert workspace.events_path("beta").read_bytes() == before  # refused: no event
    workspace.write_core("beta", render({"next": "x" * 5000}))  # written by hand: check flags it
    code, out, _ = mem("check")
    assert code == 1 and "beta/memory/core.md:4: M4: W is 5,016 tokens (limit 2,000)" in out


def test_core_set_reads_text_from_stdin(workspace, monkeypatch, mem):
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO("line one\n\n  line two\n"))
    assert mem("core-set", "alpha", "portfolio", "-")[0] == 0
    assert parse_core(workspace.core_path("alpha"), "alpha").get("portfolio") == "line one\n  line two"


def test_core_set_refuses_standard_input_that_is_not_utf8_in_one_line(workspace, monkeypatch, mem):
    import io

    before = workspace.core_path("alpha").read_bytes(), workspace.events_path("alpha").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"line one\na\xff\xfeb\n")))
    assert mem("core-set", "alpha", "next", "-") == (
        2, "", "mem: standard input:2: not UTF-8 (byte 0xff at column 2)\n")
    assert (workspace.core_path("alpha").read_bytes(), workspace.events_path("alpha").read_bytes()) == before
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("caf\u00e9\n".encode())))
    assert mem("core-set", "alpha", "next", "-")[0] == 0  # UTF-8 bytes are read as such
    assert parse_core(workspace.core_path("alpha"), "alpha").get("next") == "caf\u00e9"


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["phase", "portfolio", "open gaps", "next", "inputs"]),
                       st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                               max_size=60)))
def test_rendered_core_parses_back_to_the_cleaned_fields(fields):
    cleaned = {}
    for name, text in fields.items():
        try:
            cleaned[name] = clean_field(text)
        except BadInput:
            return  # a line starting '## ' is refused, tested above
    core = parse_core_text(render(cleaned), "r", "core.md")
    assert dict(core.fields) == {name: cleaned.get(name, "") for name in dict(core.fields)}
    assert [name for name, _ in core.fields] == ["phase", "portfolio", "open gaps", "next", "inputs"]


def test_a_rename_refused_after_the_event_leaves_neither(workspace, monkeypatch):
    """The rename over core.md refused once the write-ahead event is logged (an immutable core.md,
    one that is a mount point): the event stayed, so the log said `core-set next: new plan` of a W
    that never held it, and `check` saw nothing. It is taken back; a kill there leaves it (below)."""
    before = workspace.core_path("alpha").read_bytes(), workspace.events_path("alpha").read_bytes()

    def refused(src, dst):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "replace", refused)
    with pytest.raises(BadInput, match="core.md: cannot write it: Operation not permitted"):
        core_set(RecordsWorkspace.open(workspace.root), "alpha", "next", "new plan", PACKAGE)
    assert (workspace.core_path("alpha").read_bytes(), workspace.events_path("alpha").read_bytes()) == before
    assert [p.name for p in workspace.core_path("alpha").parent.iterdir() if p.suffix == ".tmp"] == []
    log = workspace.events_path("alpha")
    log.write_bytes(log.read_bytes()[:-1])  # a last line written by hand without its line break
    before = workspace.core_path("alpha").read_bytes(), log.read_bytes()
    with pytest.raises(BadInput):
        core_set(RecordsWorkspace.open(workspace.root), "alpha", "next", "new plan", PACKAGE)
    assert (workspace.core_path("alpha").read_bytes(), log.read_bytes()) == before  # byte for byte


def test_killed_between_write_and_rename_leaves_core_md_intact(workspace, mem):
    """A real process killed (SIGKILL) after the temporary file is written and fsynced; the next
    core-set deletes the temporary file it left (under the lock every core-set takes)."""
    before = workspace.core_path("alpha").read_bytes()
    script = ("import os, signal, sys\n"
              "os.replace = lambda src, dst: os.kill(os.getpid(), signal.SIGKILL)\n"
              "from mem_retrieval.cli.main import run\n"
              "sys.exit(run(sys.argv[1:]))\n")
    proc = subprocess.run([sys.executable, "-c", script, "--workspace", str(workspace.root),
                           "core-set", "alpha", "next", "the new plan"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert workspace.core_path("alpha").read_bytes() == before
    assert workspace.events("alpha")[-1]["text"] == "core-set next: the new plan"
    leftovers = [p for p in workspace.core_path("alpha").parent.iterdir() if p.suffix == ".tmp"]
    assert len(leftovers) == 1 and "the new plan" in leftovers[0].read_text()  # written, not renamed
    assert mem("core-set", "alpha", "next", "the plan after")[0] == 0
    assert not leftovers[0].exists()
    assert [p for p in workspace.core_path("alpha").parent.iterdir() if p.suffix == ".tmp"] == []


def _mem_within(root: Path, limit: int, *argv: str) -> subprocess.CompletedProcess:
    """``mem`` as a process that may write files up to ``limit`` bytes (RLIMIT_FSIZE, as a full
    disk refuses a write part way: the writes past it fail with EFBIG)."""
    import resource

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, "-m", "mem_retrieval.cli", "--workspace", str(root), *argv],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, preexec_fn=cap,
                          env={**os.environ, "MEM_NO_SERVER": "1"})


def test_a_write_the_machine_refuses_is_taken_back_whole_and_said_in_one_line(workspace, mem):
    """A full disk cut core-set's checkpoint event and archive-insert's library line part way: half
    a line stayed, and every later check, index and core-set failed on it as bad input (mending it
    meant editing the log by hand); the refusal was a traceback. Now the file is cut back to its
    old bytes, core.md stays as it was (its new text is written before the event), one line says
    why, and the next call, with room, works."""
    events, core = workspace.events_path("alpha"), workspace.core_path("alpha")
    library = workspace.library_path
    with events.open("a") as log:  # room for core.md's new text, not for the event
        log.write(json.dumps({"time": "2026-10-17T03:42:00Z", "actor": "root", "kind": "checkpoint",
                              "ids": [], "text": "x" * 4000}) + "\n")
    before = {path: path.read_bytes() for path in (events, core, library)}
    done = _mem_within(workspace.root, events.stat().st_size + 10, "core-set", "alpha", "next", "a new plan")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"mem: {events}: cannot write it: File too large\n"
    done = _mem_within(workspace.root, library.stat().st_size + 10, "archive-insert", "alpha/a2")
    assert (done.returncode, done.stderr) == (2, f"mem: {library}: cannot write it: File too large\n")
    assert {path: path.read_bytes() for path in before} == before
    folders = (core.parent, library.parent)
    assert [p.name for folder in folders for p in folder.iterdir() if p.suffix == ".tmp"] == []
    assert mem("core-set", "alpha", "next", "a new plan")[0] == 0
    assert mem("archive-insert", "alpha/a2")[0] == 0
    assert workspace.events("alpha")[-1]["text"] == "core-set next: a new plan"
    assert mem("check")[0] == 0


def test_a_reader_never_sees_part_of_a_line_archive_insert_writes(workspace, mem):
    """Readers take no lock: an archive-insert of a long statement, one os.write appending to the
    library in place, reached them in pieces, and `check` called the valid library bad input (2 of
    ~400 checks beside 20 MB statements; 6 of 18,000 reads beside 8 KB ones). The library is
    replaced whole now, as record's write is: a reader that opened it before reads it as it was,
    whole, and one that opens it after reads the new line whole."""
    workspace.add_step("alpha", make_step("big", statement="a long statement " * 250_000))
    before = workspace.library_path.read_bytes()
    with workspace.library_path.open("rb") as opened_before:
        assert mem("archive-insert", "alpha/big")[0] == 0
        assert opened_before.read() == before
    assert [e["id"] for e in workspace.library()][-1] == "big"


def test_a_library_made_read_only_is_not_written(workspace, mem, monkeypatch):
    """Replacing the library whole wrote one its owner had made read-only (an append in place was
    refused). The check is the system's own (``os.access``): this suite runs as root, who may write
    anything, so the test gives the answer a user without write permission gets."""
    import mem_retrieval.records.writes as writes

    library = workspace.library_path
    real_access = os.access
    monkeypatch.setattr(writes.os, "access", lambda path, mode, **kw: (
        False if Path(path) == library and mode == os.W_OK else real_access(path, mode, **kw)))
    before = library.read_bytes()
    for argv in (("archive-insert", "alpha/a2"), ("record", "alpha")):
        assert mem(*argv) == (2, "", f"mem: {library}: cannot write it: Permission denied\n")
        assert library.read_bytes() == before


def test_core_set_refused_for_bad_input_leaves_no_file_behind(workspace, mem):
    """It took its locks before reading core.md and the log: a refusal left .core.md.lock and
    .events.jsonl.lock in memory/."""
    folder = workspace.core_path("alpha").parent
    with workspace.events_path("alpha").open("a") as log:
        log.write('{"time": "2026-10-18T09:00:00Z", "actor": "x"\n')
    before = sorted(p.name for p in folder.iterdir())
    status, out, err = mem("core-set", "alpha", "next", "A2-1 proved")
    assert (status, out) == (2, "") and "events.jsonl:" in err and "invalid JSON" in err
    assert sorted(p.name for p in folder.iterdir()) == before


def test_a_log_that_cannot_be_read_is_named_by_core_set_not_core_md(workspace, monkeypatch):
    """core-set reads the log's last time before appending: a refusal there named core.md."""
    import mem_retrieval.records.writes as writes

    def refused(path, waiting=False):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(writes, "_last_time", refused)
    with pytest.raises(BadInput) as error:
        core_set(RecordsWorkspace.open(workspace.root), "alpha", "next", "a plan", PACKAGE)
    assert str(error.value) == f"{workspace.events_path('alpha')}: cannot read it: Permission denied"


def test_a_read_only_core_md_is_rewritten_and_stays_read_only(workspace):
    """The temporary file took core.md's mode before it was written: for a user who is not root,
    a core.md made read-only (in a folder they may write) failed with a traceback after the
    checkpoint event was appended. Run as a user without root's override of file modes (capsh
    drops it when the tests run as root)."""
    import stat

    core = workspace.core_path("alpha")
    os.chmod(core, 0o444)
    argv = [sys.executable, "-m", "mem_retrieval.cli", "--workspace", str(workspace.root),
            "core-set", "alpha", "next", "the plan"]
    done = subprocess.run(without_root_override(argv), cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "MEM_NO_SERVER": "1"})
    assert (done.returncode, done.stderr) == (0, "")
    assert "## next        the plan\n" in core.read_text() and stat.S_IMODE(core.stat().st_mode) == 0o444
    assert workspace.events("alpha")[-1]["text"] == "core-set next: the plan"


def test_a_core_md_of_another_user_this_one_may_not_write_is_refused_as_the_library_is(workspace):
    """core.md is replaced by a rename, which the folder's permission allows: another user's
    core.md (0644) that this one may not write was replaced all the same, and became this user's,
    where the library in the same case is refused. It is refused too, and nothing is logged."""
    if os.geteuid() != 0:
        pytest.skip("a file of another user needs root to make")
    core = workspace.core_path("alpha")
    os.chown(core, 65534, 65534)
    os.chmod(core, 0o644)
    before, events = core.read_bytes(), workspace.events_path("alpha").read_bytes()
    argv = [sys.executable, "-m", "mem_retrieval.cli", "--workspace", str(workspace.root),
            "core-set", "alpha", "next", "the plan"]
    done = subprocess.run(without_root_override(argv), cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "MEM_NO_SERVER": "1"})
    assert (done.returncode, done.stderr) == (2, f"mem: {core}: cannot write it: Permission denied\n")
    assert core.read_bytes() == before and core.stat().st_uid == 65534
    assert workspace.events_path("alpha").read_bytes() == events


def test_lock_files_another_user_made_stop_no_writer_the_data_files_let_write(workspace):
    """The locks were filelock's, opened for writing: a workspace a group shares, its data files
    group-writable, refused every member but the first writer ("cannot write in memory/:
    Permission denied", naming a folder they could write), since the first left its 0644 lock
    files behind. A lock is flock(1)'s: a lock file it may only read locks as well. A lock file
    another user made is one this user may not write: read-only stands for it here."""
    memory = workspace.core_path("alpha").parent
    for name in (".core.md.lock", ".events.jsonl.lock"):
        (memory / name).touch()
        os.chmod(memory / name, 0o444)
    argv = [sys.executable, "-m", "mem_retrieval.cli", "--workspace", str(workspace.root),
            "core-set", "alpha", "next", "the plan"]
    done = subprocess.run(without_root_override(argv), cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "MEM_NO_SERVER": "1"})
    assert (done.returncode, done.stderr) == (0, "")
    assert workspace.events("alpha")[-1]["text"] == "core-set next: the plan"
    os.chmod(memory / ".events.jsonl.lock", 0o000)  # one it may not even read: named
    done = subprocess.run(without_root_override(argv), cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "MEM_NO_SERVER": "1"})
    assert (done.returncode, done.stderr) == (2, f"mem: cannot lock {memory / '.events.jsonl.lock'}: "
                                                 "Permission denied\n")


def test_a_writer_waits_for_the_lock_flock_1_holds_then_refuses_naming_it(tmp_path):
    """The lock is the exclusive flock the README tells a harness to take (`flock FILE -c …`), so
    a harness holding it stops mem's writer; one that outwaits its timeout is refused, naming it,
    and the lock is free again once its holder lets go."""
    import fcntl

    from mem_retrieval.records.writes import locked

    lock = tmp_path / ".events.jsonl.lock"
    held = os.open(lock, os.O_RDONLY | os.O_CREAT, 0o644)  # as flock(1) opens it
    fcntl.flock(held, fcntl.LOCK_EX)
    started = time.monotonic()
    with pytest.raises(Refused, match=rf"^{re.escape(str(lock))} is held by another process "
                                      r"\(waited 0\.3 s\)$"):
        with locked(lock, timeout=0.3):
            pass
    assert time.monotonic() - started >= 0.3
    os.close(held)
    with locked(lock, timeout=0.3):
        again = os.open(lock, os.O_RDONLY)  # held now: another taker is refused at once
        with pytest.raises(BlockingIOError):
            fcntl.flock(again, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(again)
    assert lock.is_file()  # (never removed: a taker holding the old file would lock nothing)


def test_core_md_keeps_its_group_when_rewritten(workspace):
    """core.md is written anew and renamed over the old: it took the writer's own group, so in a
    workspace a group shares each write moved it from the group's. It keeps the old file's group
    where the writer may give it (root may; a member of the group may)."""
    if os.geteuid() != 0:
        pytest.skip("giving a file a group this user is not in needs root")
    core = workspace.core_path("alpha")
    os.chown(core, -1, 65534)
    core_set(RecordsWorkspace.open(workspace.root), "alpha", "next", "a plan", PACKAGE)
    assert core.stat().st_gid == 65534 and "a plan" in core.read_text()


# ------------------------------------------------------------------------------------ archive-insert

def test_archive_insert_appends_the_spec_form(workspace, mem):
    code, out, err = mem("archive-insert", "alpha/a2")
    assert (code, err) == (0, "")
    assert out == ("alpha/a2 (proved, grade minor) inserted into solve/library.jsonl line 2; searches see "
                   "it there after `mem index alpha`\n")  # an agent's library search missed it unsaid
    entry = workspace.library()[-1]
    assert entry.pop("inserted").endswith("Z")
    assert entry == {"run": "alpha", "id": "a2", "kind": "lemma", "statement": "statement of a2",
                     "setting": "Qp", "hyp": ["p odd"], "status": "proved", "grade": "minor",
                     "repair": None}


def test_archive_insert_on_an_index_mem_index_cannot_extend_names_the_full_build(workspace, mem):
    """On an index of another format (an upgrade) it said `mem index alpha`, which is then refused
    with "run `mem index --full`"."""
    assert mem("index", "--no-progress")[0] == 0
    meta = workspace.root / ".mem" / "meta.json"
    meta.write_text(json.dumps(json.loads(meta.read_text()) | {"format": 7}))
    code, out, _ = mem("archive-insert", "alpha/a2")
    assert code == 0 and out.endswith("; searches see it there after `mem index --full`\n")
    meta.write_text('{"hello": 1}')  # another program's: the insert stands, and says so (exit 0)
    code, out, _ = mem("archive-insert", "alpha/a5")  # (it wrote, then exited 2 as if it had not)
    assert code == 0 and out.endswith("; searches see it there after `mem index alpha`\n")
    assert [e["id"] for e in workspace.library()] == ["a1", "a2", "a5"]


def test_archive_insert_bare_id_with_run_and_kind_fields(workspace, mem):
    assert mem("archive-insert", "a3", "--run", "alpha")[0] == 0
    assert mem("archive-insert", "alpha/a5")[0] == 0
    dead_end, repaired = workspace.library()[-2:]
    assert dead_end["missing"] == "what would unblock a3" and dead_end["status"] == "blocked"
    assert (repaired["grade"], repaired["repair"]) == ("major", "input (b) restated")
    assert [e.gid for e in iter_library(workspace.library_path)] == ["alpha/a1", "alpha/a3", "alpha/a5"]


def test_a_repaired_entry_whose_run_is_gone_keeps_its_repair_as_the_audit_note(workspace, mem):
    """archive-insert writes a repaired step's audit note as ``repair``: archive-get of the entry
    alone (its run not in the workspace) gives it back as the note (it was dropped)."""
    assert mem("archive-insert", "alpha/a5")[0] == 0
    shutil.rmtree(workspace.root / "alpha")
    code, out, _ = mem("--json", "archive-get", "alpha/a5")
    assert code == 0 and json.loads(out)["audit"] == {"grade": "major", "by": "", "note": "input (b) restated",
                                                      "repaired": True}


@pytest.mark.parametrize("step, message", [
    (make_step("x1", "open", "pass"), "status 'open' is not final (proved, refuted, blocked)"),
    (make_step("x2", "stale", "pass"), "status 'stale' is not final"),
    (make_step("x3", "proved", None), "not audited (no audit grade) and not repaired"),
    (make_step("x4", "refuted", "major"), "audit grade 'major' did not pass (pass or minor) and it "
                                          "was not repaired"),
    (make_step("x5", "proved", "error"), "audit grade 'error' did not pass"),
])
def test_archive_insert_refuses_what_m2_forbids(workspace, mem, step, message):
    workspace.add_step("alpha", step)
    before = workspace.library_path.read_bytes()
    code, out, err = mem("archive-insert", f"alpha/{step['id']}")
    assert code == 1 and out == ""
    assert err.startswith(f"mem: alpha/{step['id']} may not enter the library (M2): ")
    assert message in err
    assert workspace.library_path.read_bytes() == before


def test_archive_insert_refuses_a_step_whose_record_does_not_hold_together(workspace, mem):
    """A circular proof, or a parent naming nothing, was admitted (exit 0), though `check` names it
    and `record` refuses the run: the same rule refuses it here, and nothing is written; a step
    citing into such a circle, not on it, is admitted."""
    for step in (make_step("c1", parents=("c2",)), make_step("c2", parents=("c3",)),
                 make_step("c3", parents=("c1",)), make_step("c4", parents=("c2",)),
                 make_step("e1", parents=("nope-zz",))):
        workspace.add_step("alpha", step)
    before = workspace.library_path.read_bytes()
    said = {"c2": "its parents lead back to it (c2 → c3 → c1 → c2): a circular proof",
            "e1": "parent 'nope-zz' resolves to nothing (no step or source of its run, and no library entry)"}
    for step, why in said.items():
        assert mem("archive-insert", f"alpha/{step}") == (
            1, "", f"mem: alpha/{step} may not enter the library (integrity): {why}\n")
    assert "alpha/tree.json:" in mem("check", "alpha")[1] + mem("check", "alpha")[2]
    assert workspace.library_path.read_bytes() == before
    assert mem("archive-insert", "alpha/c4")[0] == 0
    # the workspace as check reads it: a circle through a run whose tree.json also repeats an id
    # (check reads it, naming the repeat) was admitted; a parent in a run whose tree.json cannot be
    # read (check: input) was "resolves to nothing", or admitted
    workspace.add_run("beta", [make_step("b1", parents=("alpha/f1",)), make_step("b2"), make_step("b2")])
    workspace.add_step("alpha", make_step("f1", parents=("beta/b1",)))
    workspace.add_run("gamma", [make_step("g1")])
    workspace.add_step("alpha", make_step("f2", parents=("gamma/g1",)))
    (workspace.root / "gamma" / "tree.json").write_text("{not json")
    before = workspace.library_path.read_bytes()
    assert mem("archive-insert", "alpha/f1") == (1, "", "mem: alpha/f1 may not enter the library "
                                                 "(integrity): its parents lead back to it (f1 → beta/b1"
                                                 " → f1): a circular proof\n")
    assert mem("archive-insert", "alpha/f2") == (2, "", "mem: alpha/f2 may not enter the library (input): "
                                                 "it cites gamma/g1, whose run's gamma/tree.json cannot be "
                                                 "read: M3 cannot judge it\n")
    assert workspace.library_path.read_bytes() == before
    # nor is it judged by its library entry while its run is in the workspace: an entry whose setting
    # alpha's does not imply made it an M3 refusal (exit 1), and check said both that and "cannot judge"
    entries = [json.loads(line) for line in before.decode().splitlines()]
    workspace.write_library(entries + [library_line("gamma", make_step("g1", setting="F_q((t))"))])
    assert mem("archive-insert", "alpha/f2")[0] == 2
    code, out, _ = mem("check", "alpha")
    assert code == 2 and "alpha/f2" not in out and "step f2 cites gamma/g1, whose run's" in out
    assert [line.split(": ", 1)[1] for line in out.splitlines() if "gamma/g1" in line] == [
        "input: step f2 cites gamma/g1, whose run's gamma/tree.json cannot be read: M3 cannot judge it"]


def test_archive_insert_and_record_read_each_tree_json_once(workspace, mem, monkeypatch):
    """`archive-insert` parsed its run's tree.json twice (once for the step, once as check reads
    every run): on 20,000 densely cited steps half its time; and it read the library three times
    (strictly, as check reads it, and under its lock): at 50,000 lines 2 s each."""
    from mem_retrieval.records import invariants, parse, writes, workspace as records_workspace

    workspace.add_run("beta", [make_step("b1")])
    workspace.add_step("alpha", make_step("x1", parents=("a1", "beta/b1")))
    parsed: list[str] = []

    def counted(path, *args, **kwargs):
        parsed.append(Path(path).parent.name)
        return parse.parse_tree(path, *args, **kwargs)

    def library_read(path, *args, **kwargs):
        parsed.append(Path(path).name)
        return parse.iter_library(path, *args, **kwargs)

    for module in (invariants, records_workspace, writes):  # wherever a record file is parsed from
        monkeypatch.setattr(module, "parse_tree", counted, raising=False)
        monkeypatch.setattr(module, "iter_library", library_read, raising=False)
    assert mem("archive-insert", "alpha/x1")[0] == 0
    assert sorted(parsed) == ["alpha", "beta", "library.jsonl", "library.jsonl"]  # the lock's read too
    parsed.clear()
    assert mem("record", "alpha", "--dry-run")[0] == 0
    assert sorted(parsed) == ["alpha", "beta", "library.jsonl", "library.jsonl"]  # as check reads it, and
    # strictly once (the plan and the index step's reading of every run shared it; it read it twice)


def test_a_long_lived_memory_reads_the_library_again_only_when_it_changes(workspace, monkeypatch):
    """A warm server's archive-get parsed the whole library at each call (80 ms at 4,586 entries);
    it is read once while the file is unchanged, and anew once another writer changed it."""
    from mem_retrieval.memory import Memory
    from mem_retrieval.records import parse, workspace as records_workspace

    workspace.add_run("gamma", [make_step("g1")])
    reads: list[str] = []

    def library_read(path, *args, **kwargs):
        reads.append(Path(path).name)
        return parse.iter_library(path, *args, **kwargs)

    monkeypatch.setattr(records_workspace, "iter_library", library_read)
    memory = Memory.open(workspace.root)
    for _ in range(3):
        assert memory.archive_get("gamma/g1").step.gid == "gamma/g1"
    assert reads == ["library.jsonl"]
    Memory.open(workspace.root).archive_insert("gamma/g1")  # another writer: the file is replaced
    assert [entry.gid for entry in memory.workspace.library()][-1] == "gamma/g1"
    assert reads == ["library.jsonl"] * 2


def test_archive_insert_refuses_an_id_already_in_the_library(workspace, mem):
    code, _, err = mem("archive-insert", "alpha/a1")
    assert code == 1 and "alpha/a1 is already in the library" in err and "library.jsonl:1" in err
    assert len(workspace.library()) == 1


def test_archive_insert_of_a_step_admitted_before_its_status_changed_names_its_line_and_the_remedy(
        workspace, mem):
    """A library entry whose step was later demoted: archive-insert said the step "may not enter the
    library (M2)", as though it were not there, and nothing said what mends `record`'s M1 refusal
    (no command rewrites a library line). The line, the step's status now, and the remedy."""
    workspace.edit_step("alpha", "a1", status="stale")
    before = workspace.library_path.read_bytes()
    code, out, err = mem("archive-insert", "alpha/a1")
    line = step_line(workspace, "alpha", "a1")
    assert (code, out) == (1, "") and err == (
        f"mem: alpha/a1 is already in the library ({workspace.library_path}:1), admitted before "
        f"{workspace.root / 'alpha' / 'tree.json'}:{line} said status 'stale' is not final (proved, "
        "refuted, blocked) (mem never rewrites a library line: restore the step as it was admitted, or "
        "remove the line by hand)\n")
    code, _, err = mem("record", "alpha", "--dry-run")
    assert code == 1 and err.splitlines()[0].endswith(
        "nothing was admitted (W or the library states a status its tree.json does not: they must agree "
        "first)") and err.splitlines()[2].endswith("says stale (mem never rewrites a library line: restore "
                                                   "the step as it was admitted, or remove the line by hand)")
    assert workspace.library_path.read_bytes() == before
    code, _, err = mem("archive-insert", "alpha/a4")  # open, not in the library: M2's refusal as before
    assert code == 1 and err.startswith("mem: alpha/a4 may not enter the library (M2): ")


@pytest.mark.parametrize("step", ["alpha/a1", "alpha/a2", "alpha/a4"])  # in the library, or not; a4 fails M2
def test_archive_insert_into_a_library_with_a_malformed_line_is_bad_input_either_way(workspace, mem, step):
    with workspace.library_path.open("a") as handle:
        handle.write('{"run": "alpha", "id": \n')
    before = workspace.library_path.read_bytes()
    code, out, err = mem("archive-insert", step)
    assert (code, out) == (2, "") and err.startswith(f"mem: {workspace.library_path}:2: invalid JSON"), err
    assert workspace.library_path.read_bytes() == before


@pytest.mark.parametrize("argv, status, message", [
    (["alpha/zz"], 1, "no step 'zz' in run 'alpha'"),
    (["alpha/a22"], 1, "no step 'a22' in run 'alpha' ("),
    (["alpha/a22"], 1, "tree.json); nearest: a2"),  # as archive-get and recall-search suggest
    (["gamma/a1"], 1, "no run 'gamma'"),
    (["a1"], 2, "ID 'a1' is a bare step id: name its run too (alpha/a1)"),
    (["zz9"], 2, "ID 'zz9' is a bare step id: name its run too (RUN/zz9)"),
    (["alpha/a1", "--run", "beta"], 1, "alpha/a1 is already in the library"),  # a global id: always its
    (["alpha/zz", "--run", "beta"], 1, "no step 'zz' in run 'alpha'"),          # own run's (SPEC §2)
])
def test_archive_insert_unknown_or_ambiguous_ids(mem, argv, status, message):
    code, _, err = mem("archive-insert", *argv)
    assert code == status and message in err


def test_archive_insert_reads_an_id_as_typed_composed_decomposed_or_with_a_look_alike_dash(workspace, mem):
    """archive-get found `Čech-1` typed decomposed or `c-1` with a non-breaking hyphen, while
    archive-insert refused the same argument with "no step 'Čech-1'", the name drawn alike: it
    inserts the step, under the id its tree.json writes."""
    import unicodedata

    for step_id in ("Čech-1", "c-1"):
        workspace.add_step("alpha", make_step(step_id, status="proved", audit={"grade": "pass"}))
    decomposed = unicodedata.normalize("NFD", "Čech-1")
    assert mem("archive-insert", f"alpha/{decomposed}")[0] == 0
    assert mem("archive-insert", "c\u20111", "--run", "alpha")[0] == 0
    code, _, err = mem("archive-insert", "c\u20111")
    assert code == 2 and "is a bare step id: name its run too (alpha/c-1)" in err  # the step's own id
    workspace.add_run("two-runs", [make_step("t1", status="proved", audit={"grade": "pass"})])
    assert mem("archive-insert", "two\u2011runs/t1")[0] == 0  # the run typed so too (it was "not a slug")
    workspace.add_step("two-runs", make_step("t2", status="proved", audit={"grade": "pass"}))
    assert mem("archive-insert", "t2", "--run", "two\u2011runs")[0] == 0  # and as --run
    code, _, err = mem("archive-insert", "t2", "--run", "Two-Runs")
    assert code == 2 and err.startswith("mem: --run 'Two-Runs' is not a run slug")  # not "ID …"
    assert [e["id"] for e in workspace.library()][-4:] == ["Čech-1", "c-1", "t1", "t2"]


@pytest.mark.parametrize("typed", ["two\u2011runs", "two\u2013runs", "ｔｗｏ-runs"])
def test_core_set_check_and_record_read_a_run_typed_with_a_look_alike_as_archive_insert_does(workspace, mem,
                                                                                             typed):
    """archive-insert and the searches took `two‑runs` (U+2011), an en dash or fullwidth letters as
    `two-runs`; core-set, check and record said "not a run slug" of the name just used."""
    workspace.add_run("two-runs", [make_step("t1", status="proved", audit={"grade": "pass"})])
    code, out, err = mem("core-set", typed, "next", "audit t1")
    assert (code, err) == (0, "") and out.startswith("two-runs/memory/core.md: next set")
    assert "## next        audit t1" in workspace.core_path("two-runs").read_text(encoding="utf-8")
    code, out, err = mem("check", typed)
    assert (code, err) == (0, "") and out.startswith("OK: 1 run,")
    code, out, err = mem("record", typed, "--dry-run")
    assert (code, err) == (0, "") and "two-runs/t1" in out
    assert mem("index")[0] == 0
    code, out, err = mem("index", typed)  # `index RUN` too (Workspace.check_runs reads it so)
    assert (code, err) == (0, "") and out.startswith("indexed:")
    assert mem("archive-get", "t1", "--run", typed)[0] == 0


@pytest.mark.parametrize("argv", [
    ("archive-insert", "alpha/a1", "--run", ""), ("archive-insert", "a1", "--run", " "),
    ("archive-get", "a1", "--run", ""), ("archive-search", "statement", "--run", ""),
    ("recall-search", "five steps", "--run", "\t")])
def test_a_blank_run_is_refused_by_every_function_that_takes_one(workspace, mem, argv):
    """An unset variable in a script: archive-get read a blank --run as none (every run), the
    searches as a run named '' (no hits, a note), archive-insert as no run slug. One rule, as
    for an empty --until: bad input, before any index is opened."""
    assert mem(*argv) == (2, "", "mem: --run is empty (leave it out for every run)\n")
    assert not (workspace.root / ".mem").exists()


@pytest.mark.parametrize("ref, said", [
    ("", "ID must not be empty"), ("alpha/", "ID 'alpha/': step id must not be empty"),
    ("alpha/a\x001", "ID 'alpha/a\\x001': step id 'a\\x001' contains '\\x00'"),
    ("/a1", "ID '/a1': run '' is not a run slug")])  # with --run too: not a bare id of that run
def test_archive_insert_refuses_an_id_that_is_none_as_archive_get_does(workspace, mem, ref, said):
    """An empty id was told "is a bare step id: name its run too (RUN/)", one holding a NUL "no
    step … nearest: …" (exit 1): bad input, named as archive-get names it."""
    for run in ((), ("--run", "alpha")):
        code, _, err = mem("archive-insert", ref, *run)
        assert code == 2 and err.startswith(f"mem: {said}")
        assert mem("archive-get", ref, *run)[::2] == (2, err)
    assert len(workspace.library()) == 1


def test_archive_insert_creates_the_library(workspace, mem):
    workspace.library_path.unlink()
    assert mem("archive-insert", "beta/b1")[0] == 0
    assert [e["id"] for e in workspace.library()] == ["b1"]


def test_archive_insert_finishes_a_last_line_without_newline(workspace, mem):
    workspace.library_path.write_text(workspace.library_path.read_text().rstrip("\n"))
    code, out, _ = mem("archive-insert", "alpha/a2")
    assert code == 0 and "inserted into solve/library.jsonl line 2;" in out
    assert [e["id"] for e in workspace.library()] == ["a1", "a2"]


def test_archive_insert_as_a_real_process(workspace):
    command = [sys.executable, "-m", "mem_retrieval.cli", "--workspace", str(workspace.root), "archive-insert"]
    done = subprocess.run([*command, "alpha/a2"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "inserted" in done.stdout
    again = subprocess.run([*command, "alpha/a2", "--json"], cwd=ROOT, capture_output=True, text=True,
                           timeout=60)
    assert again.returncode == 1 and again.stderr == ""
    assert "already in the library" in json.loads(again.stdout)["error"]


# ----------------------------------------------------------------------------------- concurrency

WORKERS, PER_WORKER = 8, 25


def _insert_all(root: str, worker: int, barrier, results) -> None:
    """Insert this worker's 25 steps, each followed by the same step of worker 0: all 8 workers start
    together and try w0/s0, w0/s1, … at about the same time (duplicates but for the first to get
    there)."""
    import mem_retrieval.records.writes as writes

    append = writes.append_line

    def slow_append(path, record):  # widen the read-check-append window: a race cannot hide
        time.sleep(0.005)
        return append(path, record)

    writes.append_line = slow_append
    try:
        ws = RecordsWorkspace.open(root)
        inserted = refused = 0
        barrier.wait()
        for i in range(PER_WORKER):
            for ref in (f"w{worker}/s{i}", f"w0/s{i}"):
                try:
                    archive_insert(ws, ref)
                    inserted += 1
                except Refused as refusal:
                    assert "already in the library" in str(refusal)
                    refused += 1
        results.put((inserted, refused))
    except BaseException as error:  # reported to the test rather than lost in the child
        results.put(repr(error))


@pytest.mark.slow  # eight processes (2 s)
def test_eight_processes_insert_exactly_the_distinct_steps(tmp_path):
    ws = build_workspace(tmp_path / "ws")
    for worker in range(WORKERS):
        ws.add_run(f"w{worker}", [make_step(f"s{i}") for i in range(PER_WORKER)])
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(WORKERS), context.Queue()
    procs = [context.Process(target=_insert_all, args=(str(ws.root), w, barrier, results))
             for w in range(WORKERS)]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
    assert all(isinstance(o, tuple) for o in outcomes), outcomes
    lines = ws.library_path.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == ""  # ends with a newline: no torn last line
    entries = [json.loads(line) for line in lines[:-1]]  # every line valid JSON
    gids = [f"{e['run']}/{e['id']}" for e in entries]
    expected = {f"w{w}/s{i}" for w in range(WORKERS) for i in range(PER_WORKER)}
    assert len(gids) == 1 + WORKERS * PER_WORKER == len(set(gids))
    assert set(gids) == expected | {"alpha/a1"}
    assert sum(i for i, _ in outcomes) == WORKERS * PER_WORKER  # each distinct step inserted once
    assert sum(r for _, r in outcomes) == WORKERS * PER_WORKER  # 400 attempts, 200 refused
    assert entries[1:] == [library_line(e["run"], make_step(e["id"]), inserted=e["inserted"])
                           for e in entries[1:]]


def test_core_set_keeps_core_md_permissions(mem, workspace):
    import os
    import stat

    path = workspace.core_path("alpha")
    os.chmod(path, 0o644)
    code, _, _ = mem("core-set", "alpha", "next", "audit a4 again")
    assert code == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_a_folder_is_replaced_whole_or_not_at_all(tmp_path):
    """replace_folder (model exports, downloads, Ray's model copies): the new folder appears whole;
    a fill that fails leaves the old folder as it was and no scratch behind; keep_existing never
    rewrites a folder that is there; a fill that writes nothing places nothing."""
    from mem_retrieval.records.files import replace_folder

    target = tmp_path / "models" / "export"

    def fill(text: str):
        def write(scratch: Path) -> None:
            scratch.mkdir()
            (scratch / "model.onnx").write_text(text)
        return write

    assert replace_folder(target, fill("one")) is True
    assert (target / "model.onnx").read_text() == "one"

    def broken(scratch: Path) -> None:
        fill("half")(scratch)
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        replace_folder(target, broken)
    assert (target / "model.onnx").read_text() == "one"
    assert sorted(p.name for p in target.parent.iterdir()) == ["export"]
    assert replace_folder(target, fill("two"), keep_existing=True) is False
    assert (target / "model.onnx").read_text() == "one"
    assert replace_folder(target, fill("two")) is True and (target / "model.onnx").read_text() == "two"
    assert replace_folder(tmp_path / "empty", lambda scratch: None) is False
    assert not (tmp_path / "empty").exists()


def test_a_killed_process_scratch_folder_is_swept_a_live_ones_is_not(tmp_path):
    """A download or export killed mid-way left ``.NAME.PID.TAG`` beside its folder for good (up to
    ~130 MB a kill); the next replacement of that folder deletes those of processes that are gone,
    once untouched for ``STALE_SECONDS`` (a writer in another PID namespace is no process here),
    and nothing else (a user's ``.NAME.PID.backup``)."""
    from mem_retrieval.records.files import STALE_SECONDS, replace_folder

    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid names no process now
    zombie = subprocess.Popen(["sleep", "60"])
    zombie.kill()  # killed, not reaped yet: a zombie until wait(), whose folder no one will finish
    deadline = time.monotonic() + 10
    while Path(f"/proc/{zombie.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    target = tmp_path / "models" / "onnx-abc"
    dead = target.parent / f".onnx-abc.{gone.pid}.download"
    undead = target.parent / f".onnx-abc.{zombie.pid}.tmp"
    live = target.parent / f".onnx-abc.{os.getppid()}.download"  # pytest's parent: alive
    other = target.parent / f".onnx-abcd.{gone.pid}.download"    # another folder's: not ours to judge
    users = target.parent / f".onnx-abc.{gone.pid}.backup"       # no scratch: a user's
    fresh = target.parent / f".onnx-abc.{gone.pid}.tmp"          # touched a moment ago
    old = time.time() - STALE_SECONDS - 5
    for scratch in (dead, undead, live, other, users, fresh):
        (scratch / "model.onnx").parent.mkdir(parents=True)
        (scratch / "model.onnx").write_text("half")
        if scratch != fresh:
            os.utime(scratch, (old, old))

    def fill(scratch: Path) -> None:
        scratch.mkdir()
        (scratch / "model.onnx").write_text("whole")

    assert replace_folder(target, fill, tag="download") is True
    assert sorted(p.name for p in target.parent.iterdir()) == sorted(
        ["onnx-abc", live.name, other.name, users.name, fresh.name])
    zombie.wait()


def test_a_whole_file_write_through_a_link_replaces_its_target_and_keeps_the_link(tmp_path):
    from mem_retrieval.records.files import write_atomic

    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "library.jsonl"
    target.write_text("old\n")
    link = tmp_path / "library.jsonl"
    link.symlink_to(target)
    write_atomic(link, "new\n")
    assert link.is_symlink() and target.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["library.jsonl", "real"]  # no temporary left
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["library.jsonl"]


def test_a_memory_kept_open_reads_a_tree_edited_in_place_with_its_time_put_back(workspace):
    """An edit of the same size whose modification time was put back (``cp -p``, ``touch -r``)
    is still a change: a Memory kept open (an MCP server's) reads the new grade and refuses M2."""
    from mem_retrieval import Memory
    from mem_retrieval.records.errors import Refused

    memory = Memory.open(workspace.root)
    assert memory.archive_get("alpha/a2").step.audit.grade == "minor"
    path = workspace.root / "alpha" / "tree.json"
    before = path.stat()
    path.write_text(path.read_text(encoding="utf-8").replace('"minor"', '"major"'), encoding="utf-8")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size and path.stat().st_mtime_ns == before.st_mtime_ns
    assert memory.archive_get("alpha/a2").step.audit.grade == "major"
    with pytest.raises(Refused, match="major"):
        memory.archive_insert("alpha/a2")


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads the umask from /proc")
def test_a_new_file_takes_the_umask_without_setting_it_for_the_process(tmp_path, monkeypatch):
    """replace_atomic read the umask by setting it to 0 and back: meanwhile every file the host's
    other threads created was world-writable. The new file still gets 0666 less the umask."""
    from mem_retrieval.records.files import write_atomic

    old = os.umask(0o027)
    try:
        def no_umask(mask):
            raise AssertionError(f"the process's umask set to {mask:o}")

        monkeypatch.setattr(os, "umask", no_umask)
        write_atomic(tmp_path / "new.md", "text")
    finally:
        monkeypatch.undo()
        os.umask(old)
    assert (tmp_path / "new.md").stat().st_mode & 0o777 == 0o640


# ---------------------------------------------------------------- a line another writer has begun

HARNESS_LINE = json.dumps({"time": "2026-10-17T05:00:00Z", "actor": "A7", "kind": "audit",
                           "ids": ["a1"], "text": "harness audit of a1, é"}, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("cut", [40, len(HARNESS_LINE.encode()) - 4])  # inside "é": not UTF-8 yet
def test_a_line_a_harness_is_still_appending_is_no_event_yet_for_any_reader(workspace, mem, cut):
    """Half a line with no line break (a harness appends in pieces, taking no lock) was bad input to
    `index`, `check` and `record` (exit 2, "invalid JSON"); every reader passes it over until it
    ends, `check` saying so as a warning, and the next `mem index` reads the event."""
    path = workspace.events_path("alpha")
    lines = path.read_text().count("\n")
    with path.open("ab") as log:
        log.write(HARNESS_LINE.encode()[:cut])
    assert mem("index")[0] == 0
    code, out, _ = mem("check")
    warning = f"alpha/memory/events.jsonl:{lines + 1}: input: warning: no line break, and not whole JSON"
    assert code == 0 and any(line.startswith(warning) for line in out.splitlines()), out
    assert mem("record", "alpha", "--dry-run")[0] == 0
    assert mem("recall-search", "harness audit")[0] == 1  # nothing holds those words yet
    with path.open("ab") as log:
        log.write(HARNESS_LINE.encode()[cut:])
    assert mem("index")[0] == 0
    code, out, _ = mem("--json", "recall-search", "harness audit")
    assert code == 0 and json.loads(out)["hits"][0]["id"] == f"alpha#{lines + 1}"
    assert "warning" not in mem("check")[1]


def test_core_set_waits_for_a_line_another_writer_has_begun(workspace, mem):
    """core-set read the begun line as bad input (refused), or, begun after its look, split it with
    a line break of its own: it waits for the line to end, then appends after it."""
    import threading

    path = workspace.events_path("alpha")
    lines = path.read_text().count("\n")
    with path.open("a") as log:
        log.write(HARNESS_LINE[:40])

    def finish():
        with path.open("a") as log:
            log.write(HARNESS_LINE[40:])

    threading.Timer(0.3, finish).start()
    code, out, err = mem("core-set", "alpha", "next", "audit a4")
    assert (code, err) == (0, "") and f"checkpoint event {lines + 2}" in out
    written = path.read_text().splitlines()
    assert written[lines] + "\n" == HARNESS_LINE and json.loads(written[lines + 1])["kind"] == "checkpoint"
    assert "audit a4" in workspace.core_path("alpha").read_text()


@pytest.mark.parametrize("read", ["quick", "past the wait"])
def test_core_set_refuses_a_begun_line_that_does_not_end(workspace, mem, monkeypatch, read):
    """Always the same answer, naming the line: a read of a long line that crossed the end of the
    wait said "another writer keeps beginning lines" (exit 1) half the time."""
    from mem_retrieval.records import writes

    monkeypatch.setattr(writes, "LINE_WAIT_S", 0.2)
    if read == "past the wait":
        last_time = writes._last_time

        def slow(path, waiting=False):
            time.sleep(0.25 if waiting else 0)
            return last_time(path, waiting)

        monkeypatch.setattr(writes, "_last_time", slow)
    path = workspace.events_path("alpha")
    lines = path.read_text().count("\n")
    with path.open("a") as log:
        log.write(HARNESS_LINE[:40])
    before = path.read_bytes(), workspace.core_path("alpha").read_bytes()
    code, out, err = mem("core-set", "alpha", "next", "audit a4")
    assert (code, out) == (2, "") and err.startswith(f"mem: {path}:{lines + 1}: no line break, and not "
                                                     "whole JSON") and "(waited 0.2 s" in err
    assert (path.read_bytes(), workspace.core_path("alpha").read_bytes()) == before


@pytest.mark.parametrize("harness", ["a whole line", "a line's first piece"])
def test_what_another_writer_appends_between_core_sets_look_and_its_write_is_never_cut(workspace, mem,
                                                                                      monkeypatch, harness):
    """Another writer (a harness takes no lock) appends just before core-set's write lands. A whole
    line, written in one write as the README asks: core-set's event follows it. The first piece of
    a line: core-set's event is inside it, which nothing can take back (taking it back cut bytes
    the harness appended meanwhile, a review found): core-set says the line is broken and leaves
    core.md; every byte of the harness's is in the file, in order."""
    from mem_retrieval.records import writes

    path = workspace.events_path("alpha")
    lines = path.read_text().count("\n")
    core = workspace.core_path("alpha").read_bytes()
    piece = HARNESS_LINE.encode() if harness == "a whole line" else HARNESS_LINE.encode()[:40]
    real_write, done = os.write, []

    def write(fd, data):
        if not done and os.path.samefile(f"/proc/self/fd/{fd}", path):
            done.append(True)
            other = os.open(path, os.O_WRONLY | os.O_APPEND)
            real_write(other, piece)  # after core-set's look, before its write
            os.close(other)
        return real_write(fd, data)

    monkeypatch.setattr(writes.os, "write", write)
    code, out, err = mem("core-set", "alpha", "next", "audit a4")
    monkeypatch.undo()
    written = path.read_bytes()
    if harness == "a whole line":
        assert (code, err) == (0, "") and f"checkpoint event {lines + 2}" in out
        assert written.splitlines()[lines] + b"\n" == piece and b"audit a4" in written.splitlines()[lines + 1]
    else:
        assert (code, out) == (2, "") and err.startswith(f"mem: {path}:{lines + 1}: another writer began "
                                                         "this line as mem wrote an event into it")
        assert written.split(b"\n")[lines].startswith(piece)  # its bytes kept, in order
        assert workspace.core_path("alpha").read_bytes() == core


def test_a_write_the_machine_refuses_takes_back_its_own_bytes_and_no_one_elses(workspace, monkeypatch):
    """A whole line another writer appended between core-set's look and its write stays when the
    machine then refuses core-set's write part way (a file size limit, as a full disk): the file was
    cut to its length at the look, and the other writer's line with it."""
    import resource
    from mem_retrieval.records import writes

    path = workspace.events_path("alpha")
    before = path.read_bytes()
    real_write, limits = os.write, resource.getrlimit(resource.RLIMIT_FSIZE)

    def write(fd, data):
        if resource.getrlimit(resource.RLIMIT_FSIZE) == limits:
            other = os.open(path, os.O_WRONLY | os.O_APPEND)
            real_write(other, HARNESS_LINE.encode())  # after the look
            os.close(other)
            resource.setrlimit(resource.RLIMIT_FSIZE, (path.stat().st_size + 10, limits[1]))  # 10 bytes
        return real_write(fd, data)

    monkeypatch.setattr(writes.os, "write", write)
    try:
        with pytest.raises(BadInput, match="File too large"):
            core_set(RecordsWorkspace.open(workspace.root), "alpha", "next", "a plan", PACKAGE)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        monkeypatch.undo()
    assert path.read_bytes() == before + HARNESS_LINE.encode()  # its line whole, none of ours


@pytest.mark.slow
def test_core_set_beside_a_harness_appending_in_pieces_breaks_no_line_unsaid(workspace, mem):
    """A harness writing each event in two writes 1–3 ms apart, a line every 0–4 ms, beside 40
    core-sets: before, 3 to 6 lines in 20 were broken (each core-set saying it succeeded) and many
    core-sets refused the half line as bad input. Oracle: each core-set succeeds, or says the line
    it was written into (a line begun in the instant between its look and its write), or, read
    while that line or its rest is the log's last, names it as bad input; the lines
    that do not parse are those named and the harness's rest after each; every other harness
    event and every succeeding core-set's checkpoint is in the log once, in order."""
    import random
    import re
    import threading
    from mem_retrieval.records.parse import whole_json

    path, stop, rng, written = workspace.events_path("alpha"), threading.Event(), random.Random(7), []

    def harness():
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        while not stop.is_set():
            written.append(len(written) + 1)
            line = (json.dumps({"time": "2026-10-17T05:00:00Z", "actor": "A7", "kind": "audit",
                                "ids": ["a1"], "text": f"pass {written[-1]}"}) + "\n").encode()
            os.write(fd, line[: len(line) // 2])
            time.sleep(rng.uniform(0.001, 0.003))
            os.write(fd, line[len(line) // 2:])
            time.sleep(rng.uniform(0, 0.004))
        os.close(fd)

    thread = threading.Thread(target=harness)
    thread.start()
    try:
        calls = [mem("core-set", "alpha", "next", f"audit a4, try {k}") for k in range(40)]
    finally:
        stop.set()
        thread.join()
    said = [(code, re.match(rf"mem: {re.escape(str(path))}:(\d+): (another writer began this line)?",
                            err), err) for code, _, err in calls if code != 0]
    assert all(code == 2 and match for code, match, _ in said), said
    named = [int(match[1]) for _, match, _ in said if match[2]]
    # a call that reads the log's last line while it is a line named broken (before the harness
    # wrote its rest: a loaded machine can run a call in those 1-3 ms) or the rest of one (before
    # the harness's next line) refuses that line as bad input, naming it
    rests = [(int(match[1]), err) for _, match, err in said if not match[2]]
    assert all((number in named and ": invalid JSON: " in err)
               or (number - 1 in named and "one whole JSON object" in err) for number, err in rests), rests
    assert len(named) <= 4  # the instant is microseconds wide: 0 in 450 in-process appends, 1 in 30 calls
    lines = path.read_text().split("\n")
    broken = {number for number, line in enumerate(lines, 1) if line.strip() and not whole_json(line)}
    assert broken <= {n for number in named for n in (number, number + 1)}
    events = [json.loads(line) for line in lines if line.strip() and whole_json(line)]
    passes = [int(e["text"].split()[1]) for e in events if e["text"].startswith("pass ")]
    assert passes == sorted(set(passes))  # each once, in the harness's order
    assert len(passes) + len(named) == len(written)  # one harness line in each broken one
    tries = [e["text"] for e in events if e["kind"] == "checkpoint"]
    assert tries == [f"core-set next: audit a4, try {k}" for k, (code, _, _) in enumerate(calls) if code == 0]


def test_replace_all_deletes_what_a_killed_writer_left_and_never_a_live_ones(tmp_path):
    """A writer of `--trec-out` or `--report` killed while it wrote left its temporary file beside
    the output for good (as large as the run file; each kill one more). The next write deletes a
    dead process's once untouched for ``STALE_SECONDS``, and nothing else: a running writer's
    (these outputs take no lock), one just left (its writer may be in another PID namespace), a
    user's file or folder of a like name, the temporary file of ``run.trec.77777`` beside it."""
    from mem_retrieval.records.files import STALE_SECONDS, replace_all

    out = tmp_path / "run.trec"
    out.write_text("old\n")
    writer = ("import os, signal, sys, time\nfrom pathlib import Path\n"
              "from mem_retrieval.records.files import replace_all\n"
              "def write(tmp):\n    tmp.write_text('half')\n    print('staged', flush=True)\n"
              "    if sys.argv[2] == 'die':\n        os.kill(os.getpid(), signal.SIGKILL)\n"
              "    time.sleep(60)\n"
              "replace_all([(Path(sys.argv[1]), write)])\n")

    def staged(how: str, target: Path = out) -> tuple[subprocess.Popen, str]:
        before = set(os.listdir(tmp_path))
        proc = subprocess.Popen([sys.executable, "-c", writer, str(target), how], stdout=subprocess.PIPE,
                                text=True)
        assert proc.stdout.readline() == "staged\n"
        new = sorted(set(os.listdir(tmp_path)) - before)
        assert len(new) == 1 and new[0].startswith(f".{target.name}.{proc.pid}.") and new[0].endswith(".tmp")
        return proc, new[0]

    old = time.time() - STALE_SECONDS - 5
    killed, left = staged("die")
    assert killed.wait() == -signal.SIGKILL
    os.utime(tmp_path / left, (old, old))
    just_killed, just_left = staged("die")  # a moment ago
    just_killed.wait()
    sibling, siblings = staged("die", tmp_path / f"run.trec.{killed.pid}")  # another output's
    sibling.wait()
    os.utime(tmp_path / siblings, (old, old))
    (tmp_path / f".run.trec.{killed.pid}.backup").mkdir()  # a user's, named alike
    (tmp_path / f".run.trec.{killed.pid}.tmp").write_text("mine")
    beyond = [f".run.trec.{2**32}.abcdefgh.tmp", f".run.trec.{10**20}.abcdefgh.tmp",  # no process id,
              f".run.trec.0{killed.pid}.abcdefgh.tmp"]  # nor one as written (mem writes none so)
    for name in beyond:  # (os.kill raised OverflowError: a traceback, and no --trec-out written)
        (tmp_path / name).write_text("?")
    for name in (f".run.trec.{killed.pid}.backup", f".run.trec.{killed.pid}.tmp", *beyond):
        os.utime(tmp_path / name, (old, old))
    running, live = staged("live")
    try:
        os.utime(tmp_path / live, (old, old))
        replace_all([(out, lambda tmp: tmp.write_text("new\n"))])
        assert out.read_text() == "new\n"
        assert sorted(os.listdir(tmp_path)) == sorted(["run.trec", live, just_left, siblings, *beyond,
                                                       f".run.trec.{killed.pid}.backup",
                                                       f".run.trec.{killed.pid}.tmp"])  # left's gone
    finally:
        running.kill()
        running.wait()


def test_replace_all_writes_every_file_or_none(tmp_path):
    """``files.replace_all``: a writer failing at the second file leaves the first file's old bytes,
    no temporary file and none of the folders made; with no failure every file is in place."""
    import errno

    from mem_retrieval.records.files import replace_all

    first, second = tmp_path / "a.txt", tmp_path / "new" / "deeper" / "b.txt"
    first.write_text("old")

    def full(tmp):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError) as refused:
        replace_all([(first, lambda tmp: tmp.write_text("new a")), (second, full)])
    assert (refused.value.filename, refused.value.index, refused.value.placed) == (str(second), 1, [])
    assert first.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]
    replace_all([(first, lambda tmp: tmp.write_text("new a")), (second, lambda tmp: tmp.write_text("b"))])
    assert (first.read_text(), second.read_text()) == ("new a", "b")
    assert sorted(p.name for p in second.parent.iterdir()) == ["b.txt"]
