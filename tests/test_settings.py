"""setting_match (SPEC §8) on the shipped ontology and on small hand-made ones."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mem_retrieval.records.errors import InputError
from mem_retrieval.records.settings import build, clauses, load_ontology


@pytest.fixture(scope="module")
def onto():
    return load_ontology()


def refusal(root: Path, toml: str) -> tuple[Path, str]:
    """Write ``toml`` as ``root``'s solve/settings.toml: the file, and the one line loading it says."""
    path = root / "solve" / "settings.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(toml)
    with pytest.raises(InputError) as refused:
        load_ontology(root)
    return path, str(refused.value)


def test_a_local_function_field_implies_every_nonarchimedean_local_field(onto):
    assert onto.match("F_q((t))", "every non-arch. local F") == "implied"
    assert onto.match("F_q((t))", "local field") == "implied"  # transitively


def test_no_transfer_by_analogy(onto):
    assert onto.match("Q_p", "F_q((t))") == "incompatible"
    assert onto.match("F_q((t))", "Q_p") == "incompatible"


def test_aliases_and_normalisation_name_the_same_entry(onto):
    assert onto.match("Fq((t))", "F_q((t))") == "same"
    assert onto.match("  LOCAL   function field ", "F_q((t))") == "same"


def test_unknown_settings(onto):
    assert onto.match("F_q((t))", "a setting nobody wrote down") == "unknown"
    assert onto.match("PFR", "Q_p") == "unknown"       # the query's own clause is not known
    assert onto.match("PFR", "PFR") == "same"          # the same text implies itself
    assert onto.match("F_q((t))", "") == "unknown"


def test_clauses(onto):
    # a query implies a step clause when one of its own clauses does
    assert onto.match("F_q((t)); [Fintype n]", "[Fintype n]; local field") == "implied"
    assert onto.match("Q_p; [Fintype n]", "[Fintype n]; F_q((t))") == "incompatible"
    assert onto.match("Q_p", "local field; [Field K]") == "unknown"


@pytest.mark.parametrize("semicolon", ["\uff1b", "\u037e"])  # fullwidth; Greek question mark
def test_a_semicolon_that_nfkc_makes_one_separates_clauses(onto, semicolon):
    """SPEC §8 matches settings after NFKC, which makes these ';': split before it, an F_q((t))
    step whose setting read 'F_q((t))；p odd' was one unknown clause, offered over Q_p and only a
    warning in M3, where 'F_q((t)); p odd' is incompatible."""
    assert clauses(f"F_q((t)){semicolon}p odd") == clauses("F_q((t)); p odd") == ["f_q((t))", "p odd"]
    assert onto.match("Q_p", f"F_q((t)){semicolon}p odd") == "incompatible"
    assert onto.match(f"Q_p{semicolon}p odd", "F_q((t)); p odd") == "incompatible"
    assert onto.match("F_q((t))", f"local field{semicolon} ") == "implied"


@pytest.mark.parametrize("dash", ["\u2011", "\u2013", "\u2212", "\u00ad-", "-\u200e", "\u2066-\u2069"])
def test_a_setting_typed_with_a_look_alike_dash_is_the_same_setting(onto, dash):
    """NFKC keeps a non-breaking hyphen (U+2011) and an en dash: `non‑archimedean local field` was
    unknown to the ontology, so an M3 error (a Qp step cited under it) was only a warning and
    `record` admitted the step; a search over `p‑adic` offered F_q((t)) steps as unknown."""
    assert onto.match(f"non{dash}archimedean local field", "Qp") == \
        onto.match("non-archimedean local field", "Qp") == "incompatible"
    assert onto.match(f"p{dash}adic", "F_q((t))") == "incompatible"
    assert onto.match("Q_p", f"p{dash}adic local\u200b") == onto.match("Q_p", "p-adic local") == "implied"
    # a left-to-right or right-to-left mark, drawn as nothing, made a known setting unknown (M3 a
    # warning where it is a violation)
    assert onto.match("\u200fF_q((t))\u200e", "Qp") == onto.match("F_q((t))", "Qp") == "incompatible"


@pytest.mark.parametrize("typed", [r"\mathbb{F}_q((t))", r"\mathbb F_q((t))", "𝔽_q((t))", "F_{q}((t))",
                                   r"\mathbb{F}_q(\!(t)\!)", r"\F_q\left((t)\right)", r"\mathbb{F_{q}}((t))",
                                   r"\mathbf{\mathbb{F}}_q((t))", r"\mathrm{\mathbb{F}_{q}}((t))",
                                   r"$\mathbb{F}_q((t))$", r"\(\mathbb{F}_q((t))\)", r"$$\F_q((t))$$",
                                   r"{\mathbb F}_q((t))", r"{\mathbb{F}}_q((t))", r"{\Bbb F}_q((t))",
                                   r"\[ {\bf F}_{q}((t)) \]"])
def test_a_setting_typed_in_latex_is_the_setting_it_draws(onto, typed):
    """The tokeniser read \\mathbb{F}_q((t)) as F_q((t)) and the settings did not: a search over it
    offered a Q_p step as unknown (ranked first), and a step written over \\mathbb{Q}_p was unknown,
    not incompatible, under F_q((t)): no transfer by analogy, except through notation."""
    assert onto.match(typed, "F_q((t))") == "same"
    assert onto.match(typed, "Q_p") == onto.match(typed, r"\mathbb{Q}_p") == "incompatible"
    assert onto.match("F_q((t))", typed) == "same"
    assert onto.match("Q_p", typed) == onto.match(r"\Q_p", typed) == "incompatible"
    assert onto.match(typed, "every non-arch. local F") == "implied"


def test_same_means_the_same_clauses_and_a_narrower_query_implies(onto):
    """`same` (SPEC §8) is a step setting with the query's clauses, no more and no fewer: a query
    adding a clause (`F_q((t)); q odd`) implies the step's `F_q((t))`, it is not the same."""
    assert onto.match("F_q((t)); q odd", "F_q((t))") == "implied"
    assert onto.match("F_q((t)); q odd", "Fq((t));  q odd ") == "same"
    assert onto.match("F_q((t)); q odd", "FQ((T)); Q ODD") == "unknown"  # a clause no entry names
    # is compared by its text, case kept: Q is not q, and G = GL_n (a group) is no g = gl_n
    assert onto.match("G = GL_n", r"\mathfrak{g} = \mathfrak{gl}_n") == "unknown"
    assert onto.match("F_q((t))", "F_q((t)); q odd") == "unknown"  # the step asks what the query does not say


def test_a_p_adic_field_is_any_finite_extension_of_q_p_not_q_p_itself(onto):
    """The shipped ontology made `p-adic field` and `p-adic` aliases of Qp: a Q_p-only result was
    `same` for a query over a p-adic field, and a result over every p-adic field was left out of
    one over a p-adic local field. A p-adic field is a finite extension of Q_p: Q_p implies it,
    not the other way round."""
    for general in ("p-adic field", "p-adic", "every p-adic field", "p-adic fields"):
        assert onto.match(general, "p-adic local field") == "same"
        assert onto.match(general, "Q_p") == "incompatible"
        assert onto.match("Q_p", general) == onto.match("p-adic numbers", general) == "implied"
        assert onto.match(general, "every non-arch. local F") == "implied"
        assert onto.match(general, "F_q((t))") == "incompatible"


@pytest.mark.parametrize("asked, step, verdict", [
    # one member of a class is an entry implying the class, no alias of it
    ("number field", "Q", "incompatible"), ("Q", "number field", "implied"), ("ℚ", "Q", "same"),
    ("global function field", "F_q(t)", "incompatible"), ("F_q(t)", "global function field", "implied"),
    # a local field of characteristic 0 is p-adic or archimedean (R, C), not only p-adic
    ("local field of characteristic 0", "p-adic field", "incompatible"),
    ("R", "local field of characteristic 0", "implied"),
    ("Q_p", "local field of characteristic 0", "implied"),
    ("F_q((t))", "local field of characteristic 0", "incompatible"),
    # C is an archimedean local field, as R is
    ("C", "every local field", "implied"), ("complex numbers", "archimedean local field", "implied"),
    ("C", "non-archimedean local field", "incompatible"),
    # the characteristic, and the prime fields
    ("Q_p", "field of characteristic 0", "implied"), ("number field", "characteristic p", "incompatible"),
    ("F_q((t))", "positive characteristic", "implied"), ("characteristic 0", "F_q", "incompatible"),
    ("F_p", "finite field", "implied"), ("finite field", "F_p", "incompatible"),
    ("F_p((t))", "Q_p", "incompatible"), ("F_p((t))", "local field of positive characteristic", "implied"),
    ("F_p(t)", "number field", "incompatible"), ("F_p(t)", "global function field", "implied"),
    # "the p-adic field" is Q_p; "a p-adic field", or "p-adic fields", any finite extension of it
    ("finite extension of Q_p", "the p-adic field", "incompatible"), ("Q_p", "the p-adic field", "same"),
])
def test_the_ontology_holds_what_mathematics_says(onto, asked, step, verdict):
    """A result over every member of a class is an input over one of them, never the other way:
    Q and F_q(t) were aliases of the number fields and the global function fields, "local field of
    characteristic 0" of the p-adic fields alone, and C was no local field."""
    assert onto.match(asked, step) == verdict


@pytest.mark.parametrize("asked, step, verdict", [
    # white space that draws nothing: beside a script, inside brackets, beside '='
    (r"\mathbb{F}_q ((t))", "Q_p", "incompatible"), ("F_q( (t) )", "Fq((t))", "same"),
    (r"\mathbb{Q} _p", "F_q((t))", "incompatible"), ("k=C", "k = ℂ", "same"),
    # a class however it is quantified or numbered
    ("p-adic local fields", "F_q((t))", "incompatible"), ("every non-archimedean local field", "Q_p",
                                                          "incompatible"),
    ("the p-adic numbers", "Q_p", "same"), ("finite extensions of Q_p", "p-adic field", "same"),
    ("non archimedean local field", "Q_p", "incompatible"), ("local fields", "R", "incompatible"),
    ("finite fields", "F_q", "same"), ("Every p-adic field", "a p-adic field", "same"),
    ("mixed-characteristic local field", "F_q((t))", "incompatible"),
    ("local field of characteristic p", "p-adic field", "incompatible"),
    ("characteristic p local field", "Q_p", "incompatible"), ("field of real numbers", "p-adic field",
                                                               "incompatible"),
    ("k = R", "p-adic field", "incompatible"), ("p-adic number field", "F_q((t))", "incompatible"),
    ("algebraically closed field of characteristic zero", "positive characteristic", "incompatible"),
    ("the reals", "R", "same"), ("function fields over F_q", "global function field", "same"),
])
def test_spellings_of_one_setting_are_read_as_one(onto, asked, step, verdict):
    """Each was outside the ontology, so M3 only warned (`record` admitted) and a search offered
    every step over it as `unknown`: Q, Q_p and R steps over F_q((t)) written with a space."""
    assert onto.match(asked, step) == verdict


@pytest.mark.parametrize("asked, step", [
    ("Q_p", "A local"), ("number field", "A local; A Noetherian"), ("number field", "A complex"),
    ("F_q((t))", "a > 0"), ("F_q((t))", "All > 0"),
])
def test_a_variable_named_a_is_no_article(onto, asked, step):
    """"A local; A Noetherian" (A a ring) read as "local" and "Noetherian": M3 refused its step
    over a number field, and "A complex" was C. Only "a" and "an" in lower case, before a word,
    are articles, and a clause is read bare only to look an entry up."""
    assert onto.match(asked, step) == "unknown" and onto.match(step, step) == "same"


def test_a_lower_case_article_is_no_variable_in_capitals(onto):
    """`a local` is an article and a class (a local field); `A local`, a variable, is unknown."""
    assert onto.entry("a local") == "local" and onto.match("A local", "a local") == "unknown"


def test_a_workspace_entry_named_as_a_plural_is_its_own_not_the_shipped_one(tmp_path):
    """An entry `number fields` replaced the shipped `number field` (names were read bare), so Q no
    longer implied a global field; it is an entry of its own, and `number fields` names it."""
    (tmp_path / "solve").mkdir()
    (tmp_path / "solve" / "settings.toml").write_text('[[setting]]\nname = "number fields"\nimplies = []\n'
                                                      '[[setting]]\nname = "A local"\nimplies = []\n')
    onto = load_ontology(tmp_path)
    assert onto.match("Q", "global field") == "implied" and onto.match("Q_p", "local field") == "implied"
    assert onto.entry("number fields") == "number fields"
    assert onto.entry("every number field") == "number field"


def test_math_delimiters_and_plain_tex_fonts_leave_m3_on(onto):
    """A setting in `$…$` was read with its dollars (`$f_q((t))$`), so no entry knew it: an
    F_q((t)) step offered over `$\\mathbb{Q}_p$` as unknown, and a complex one cited under it only a
    warning (M3 switched off by notation). Delimiters draw nothing; what they enclose is the
    setting. An escaped dollar, a command's arguments and a script's braces are left as written,
    and hostile input is read in linear time."""
    assert onto.match(r"$\mathbb{Q}_p$", "F_q((t))") == "incompatible"
    assert onto.match(r"$\mathbb{Q}_p$", "k = C") == "incompatible"
    assert onto.match(r"$p$-adic local field", "Q_p") == "incompatible"
    assert onto.match("p-adic local field", r"$\mathbb{Q}_p$") == "incompatible"
    assert onto.match(r"\$5", "$5") == "unknown" and onto.match(r"\frac{a}{b}", "frac{a}{b}") == "unknown"
    assert onto.match("F_{q^2}", "F_q^2") == "unknown"
    # \( \) \[ \] delimit math standing as words; elsewhere they are escaped brackets (Markdown):
    # a ring is never a field
    assert onto.match(r"F_q\[t\]", r"F_q\(t\)") == "unknown" and onto.match(r"F_q\(t\)", "F_q(t)") == "same"
    assert onto.match(r"\mathbb{Q}_p\(\sqrt{p}\)", r"\mathbb{Q}_p\[\sqrt{p}\]") == "unknown"
    assert onto.match(r"F_q\(\(t\)\)", "F_q((t))") == "same"
    assert onto.match(r"\(F_q((t))\); q odd", "Fq((t)); q odd") == "same"
    hostile = "{" * 20_000 + "x" + "}" * 20_000 + "$" * 20_000 + "{\\bf " * 5_000
    assert onto.match(hostile, "x") == "unknown"


@pytest.mark.parametrize("typed, drawn", [(r"\mathrm{Z_{p}}", "Z_p"), (r"\mathbf{\mathrm{PFR}}", "PFR"),
                                          (r"C; \mathrm{\mathbf{Z}_{p}}", "C; Z_p")])
def test_latex_nested_in_a_font_is_read_as_drawn_where_a_clause_is_compared_by_its_text(onto, typed, drawn):
    """A clause the ontology does not know matches the same text: a font around a script or another
    font kept its outer command (\\mathrm{Z_p}), so the step over \\mathrm{Z_{p}} was unknown, not
    the same, under Z_p; the note named the unread form."""
    assert onto.match(drawn, typed) == onto.match(typed, drawn) == "same"
    assert onto.match("PFR", r"\mathbf{\mathrm{PFR}}_{\mathrm{x}}") == "unknown"  # another text


def test_latex_that_makes_two_names_one_says_so_and_a_long_setting_is_read_in_linear_time(tmp_path, onto):
    """An alias or name in LaTeX is the setting it draws (until 2026-12-05 it was a name of its
    own): where that makes it another entry's, the refusal says why. A setting of hostile LaTeX
    (\\mathbb{ and 16,375 spaces) took minutes to read (a lazy group between two runs of spaces)."""
    _, refused = refusal(tmp_path, '[[setting]]\nname = "Fq((t)) in LaTeX"\n'
                                   'aliases = [\'\\mathbb{F}_q((t))\']\nimplies = ["nonarch-local"]\n')
    assert refused.endswith("'\\\\mathbb{F}_q((t))' names both 'Fq((t))' and 'Fq((t)) in LaTeX' "
                            "(LaTeX is read as drawn: '\\\\mathbb{F}_q((t))' is 'F_q((t))')")
    _, refused = refusal(tmp_path, '[[setting]]\nname = "aa"\naliases = ["C"]\n')  # named as written
    assert refused.endswith("aa.aliases: 'C' names both 'C' and 'aa'")
    # an entry overriding a shipped one keeps its place: the clash is still the workspace file's
    path, refused = refusal(tmp_path, '[[setting]]\nname = "Fq((t))"\naliases = ["F_q((t))", "reals"]\n'
                                      'implies = ["nonarch-local"]\n')
    assert refused == f"{path}:3: Fq((t)).aliases: 'reals' names both 'R' and 'Fq((t))'"
    _, refused = refusal(tmp_path, '[[setting]]\nname = "Z_p"\n\n[[setting]]\nname = "Z_{p}"\n')
    assert refused.endswith("(LaTeX is read as drawn: 'Z_{p}' is 'Z_p')")
    hostile = "\\mathbb{" + " " * 16375 + "x"
    assert onto.match(hostile, "Q_p") == "unknown" and onto.match(hostile + "}", "x") == "same"


def test_workspace_settings_extend_and_override(tmp_path, onto):
    (tmp_path / "solve").mkdir()
    (tmp_path / "solve" / "settings.toml").write_text(
        '[[setting]]\nname = "PFR"\naliases = ["pfr blueprint"]\nimplies = ["local"]\n')
    extended = load_ontology(tmp_path)
    assert extended.match("pfr blueprint", "local field") == "implied"
    assert extended.match("PFR", "Q_p") == "incompatible"


def test_a_name_twice_in_one_settings_file_is_bad_input_and_a_later_file_overrides(tmp_path, onto):
    """Two [[setting]] entries of one name in one file: the last overrode the first in silence
    (`myfield` implied C, not nonarch-local as its first entry said). The workspace's file still
    overrides the shipped one's entry of that name."""
    path, refused = refusal(tmp_path, '[[setting]]\nname = "myfield"\nimplies = ["nonarch-local"]\n\n'
                                      '[[setting]]\nname = "MyField"\nimplies = ["C"]\n')
    assert refused == (f"{path}:6: setting[1].name: 'MyField' is already the name of setting[0] "
                       "(line 2): one entry a name in a file (the last would override the first in "
                       "silence)")
    path.write_text('[[setting]]\nname = "Qp"\nimplies = ["C"]\n')  # the shipped Qp, overridden
    assert load_ontology(tmp_path).match("Qp", "C") == "implied" and onto.match("Qp", "C") != "implied"


def test_a_cycle_in_implies_is_bad_input():
    entries = [({"name": "a", "implies": ["b"]}, "s.toml"), ({"name": "b", "implies": ["a"]}, "s.toml")]
    with pytest.raises(InputError, match="cycle in implies"):
        build(entries)


def test_a_chain_of_implies_thousands_deep_is_read_and_its_cycle_named(tmp_path):
    """An ontology a program wrote: 3,000 entries, each implying the next. Each implies every
    later one and no earlier one (a RecursionError, and a traceback from every command, from
    about 490 deep); closed into a loop, it is one line of bad input."""
    n = 3000
    chain = "".join(f'[[setting]]\nname = "s{i}"\nimplies = ["s{i + 1}"]\n' for i in range(n))
    (tmp_path / "solve").mkdir()
    (tmp_path / "solve" / "settings.toml").write_text(chain + f'[[setting]]\nname = "s{n}"\n')
    onto = load_ontology(tmp_path)
    for a, b in [(0, n), (0, 1), (1234, 2999), (n, 0), (7, 3), (5, 5)]:
        assert onto.match(f"s{a}", f"s{b}") == ("same" if a == b else "implied" if a < b else "incompatible")
    path, refused = refusal(tmp_path, chain + f'[[setting]]\nname = "s{n}"\nimplies = ["s0"]\n')
    loop = " -> ".join(f"s{i}" for i in [*range(n + 1), 0])
    assert refused == f"{path}:{3 * n + 3}: s{n}.implies: cycle in implies: {loop}"  # its implies line


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11)), max_size=30))
def test_what_an_entry_implies_is_its_transitive_closure(edges):
    """Ontology.closure, worked out per entry asked about, against Warshall's closure of the same
    DAG (edges point from a lower number to a higher one, so there is no cycle)."""
    n = 12
    implies = {i: sorted({b for a, b in edges if a == i and a < b}) for i in range(n)}
    onto = build([({"name": f"e{i}", "implies": [f"e{t}" for t in implies[i]]}, "s.toml") for i in range(n)])
    reach = [[i == j or j in implies[i] for j in range(n)] for i in range(n)]
    for k in range(n):
        for i in range(n):
            for j in range(n):
                reach[i][j] = reach[i][j] or (reach[i][k] and reach[k][j])
    for i in range(n):
        assert onto.closure(f"e{i}") == {f"e{j}" for j in range(n) if reach[i][j]}
        assert all((onto.match(f"e{i}", f"e{j}") in ("implied", "same")) == reach[i][j] for j in range(n))


def test_a_settings_clauses_are_read_once_however_many_hypotheses_are_matched_against_it(monkeypatch):
    """M3 and a search's labels match each hypothesis of a step against the query setting: each
    match read the setting's clauses again, so a Fix setting of thousands of clauses and a step of
    thousands of hypotheses cost their product (12 s for `mem check` at 4,000 and 2,500)."""
    from mem_retrieval.records import settings as module

    onto = load_ontology()
    setting = "Q_p; " + "; ".join(f"clause {k}" for k in range(300))
    hyps = [f"p-adic field {k}" for k in range(300)] + ["C", "Qp"]
    read = []
    real = module.normalize
    monkeypatch.setattr(module, "normalize", lambda text, **kw: read.append(text) or real(text, **kw))
    assert onto.unmet_hypotheses(setting, hyps) == ["C"]
    assert len(read) < 3 * (len(hyps) + 302)  # each hypothesis and clause a few times, not 300 × 302


def test_an_implied_name_must_exist():
    with pytest.raises(InputError, match="not a setting of the ontology"):
        build([({"name": "a", "implies": ["nowhere"]}, "s.toml")])


def test_a_memory_kept_open_judges_by_the_settings_file_as_it_stands(workspace):
    """A Memory kept open (an MCP server holds one for its life, as may an API caller) reads
    solve/settings.toml as it is at each call: beta cites library step alpha/a1 (setting Qp) under
    a Fix setting the shipped ontology does not know, one M3 warning; once the file says that
    setting implies Qp, the same Memory finds none, and its search calls Qp steps implied; once it
    says F_q((t)) instead, its search leaves every Qp step out and M3 is an error."""
    from mem_retrieval import Memory

    tree = workspace.tree("beta")
    tree["fix"]["setting"] = "Zorb field"
    workspace.save_tree("beta", tree)
    memory = Memory.open(workspace.root)
    memory.index(progress=False)
    assert [(v.code, v.severity) for v in memory.check().violations] == [("M3", "warning")]
    (hit,) = [h for h in memory.archive_hits("statement of b1", "Zorb field") if h.id == "beta/b1"]
    assert hit.setting_match == "unknown"

    (workspace.root / "solve" / "settings.toml").write_text(
        '[[setting]]\nname = "Zorb field"\nimplies = ["Qp"]\n', encoding="utf-8")
    assert memory.check().violations == []
    (hit,) = [h for h in memory.archive_hits("statement of b1", "Zorb field") if h.id == "beta/b1"]
    assert hit.setting_match == "implied"
    assert memory.archive_search("statement", "Zorb field").notes == ()  # a known setting now

    (workspace.root / "solve" / "settings.toml").write_text(  # now over F_q((t)): Qp steps go
        '[[setting]]\nname = "Zorb field"\nimplies = ["F_q((t))"]\n', encoding="utf-8")
    assert [h.id for h in memory.archive_hits("statement", "Zorb field")] == []
    assert [(v.code, v.severity) for v in memory.check().violations] == [("M3", "error")]


ZORB_OVER_FQT = '[[setting]]\nname = "Zorb field"\nimplies = ["Fq((t))"]\n'
ZORB_OVER_QP = '[[setting]]\nname = "Zorb field"\nimplies = ["Qp"]\n'


def test_a_search_still_judging_by_the_old_file_leaves_nothing_to_the_searches_after(workspace,
                                                                                   monkeypatch):
    """`mem serve` and `mem mcp` share one Memory between requests. A request judging by the
    settings file as it was (paused right after reading it, as a thread switch would) while the
    file is edited and another request reads the new one must leave no judgement of its own to
    the searches that follow: they answer as a fresh Memory does."""
    import threading

    from conftest import make_step
    from mem_retrieval import Memory
    from mem_retrieval.retrieval.search import Judged

    workspace.add_run("gamma", [make_step("g1", setting="F_q((t))")])
    settings = workspace.root / "solve" / "settings.toml"
    settings.write_text(ZORB_OVER_FQT, encoding="utf-8")
    memory = Memory.open(workspace.root)
    memory.index(progress=False)

    def settings_of(found: Memory) -> list[str]:
        return sorted({h.setting for h in found.archive_hits("statement", "Zorb field", strategy="bm25")})

    assert settings_of(memory) == ["F_q((t))"]
    started, go = threading.Event(), threading.Event()
    judge = Judged.refused

    def paused(self, setting, other, hyps):
        if not started.is_set():
            started.set()
            go.wait(30)
        return judge(self, setting, other, hyps)

    monkeypatch.setattr(Judged, "refused", paused)
    memory.retriever.searcher._judged = None  # A reads the file afresh, then pauses
    first = threading.Thread(target=lambda: memory.archive_hits("statement", "Zorb field", strategy="bm25"))
    first.start()
    assert started.wait(30)
    settings.write_text(ZORB_OVER_QP, encoding="utf-8")
    memory.archive_hits("statement", "C", strategy="bm25")  # another request, after the edit
    go.set()
    first.join(30)
    monkeypatch.undo()
    assert settings_of(memory) == settings_of(Memory.open(workspace.root)) == ["Qp"]


def test_a_search_judges_its_list_its_labels_and_its_notes_by_one_settings_file(workspace, monkeypatch):
    """The settings file replaced while a search runs (after its list is cut by the setting rule,
    before its hits are labelled): the search reads the file it began with to its end, so no hit it
    lists is labelled incompatible (which the rule leaves out); the next search reads the new file."""
    from conftest import make_step
    from mem_retrieval import Memory
    from mem_retrieval.retrieval.search import Searcher

    workspace.add_run("gamma", [make_step("g1", setting="F_q((t))")])
    settings = workspace.root / "solve" / "settings.toml"
    settings.write_text(ZORB_OVER_FQT, encoding="utf-8")
    memory = Memory.open(workspace.root)
    memory.index(progress=False)
    complete = Searcher.complete

    def edited_meanwhile(self, ranked):
        settings.write_text(ZORB_OVER_QP + '\n[[setting]]\nname = "Blorp"\n', encoding="utf-8")
        return complete(self, ranked)

    monkeypatch.setattr(Searcher, "complete", edited_meanwhile)
    for search in (lambda: memory.archive_search("statement", "Zorb field; Blorp", strategy="bm25").hits,
                   lambda: memory.archive_hits("statement", "Zorb field; Blorp", strategy="bm25")):
        settings.write_text(ZORB_OVER_FQT, encoding="utf-8")
        assert [(h.id, h.setting_match) for h in search()] == [("gamma/g1", "implied")]
    settings.write_text(ZORB_OVER_FQT, encoding="utf-8")
    page = memory.archive_search("statement", "Zorb field; Blorp", strategy="bm25")
    assert [n.message for n in page.notes if n.param == "setting"] == [  # Blorp: unknown to the old file
        "'Zorb field; Blorp': 'Blorp' is not in the settings ontology, so a step matches it only by "
        "the same text"]
    monkeypatch.undo()
    later = memory.archive_search("statement", "Zorb field; Blorp", strategy="bm25")
    assert {h.setting for h in later.hits} == {"Qp"} and later.notes == ()  # the file as it stands
