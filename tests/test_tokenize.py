"""The math-aware tokeniser: the matches a user relies on, and properties over arbitrary text."""

import re
import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from mem_retrieval.text.tokenize import tokenize


def test_subscripts_match_plain_digits():
    assert tokenize("GL₄/Sp₄") == tokenize("GL4/Sp4")
    assert tokenize("E₆/F₄") == tokenize("E6/F4") == ["e6_f4", "e6", "f4"]


def test_latex_commands_are_unwrapped():
    assert tokenize(r"\mathrm{GL}_{2m}") == tokenize("GL2m") == ["gl2m"]
    assert tokenize(r"\operatorname{Sp}_{2m}") == ["sp2m"]
    assert "log" in tokenize(r"$\log |S|$")


def test_compounds_are_indexed_whole_and_in_parts():
    assert tokenize("GL2m/Sp2m") == ["gl2m_sp2m", "gl2m", "sp2m"]
    assert tokenize("F_q((t))") == tokenize("Fq((t))") == ["fq_t", "fq", "t"]


def test_greek_letters_match_their_names():
    assert tokenize("φ") == tokenize("phi") == tokenize(r"\varphi") == tokenize(r"\phi") == ["phi"]
    assert tokenize("ϕ") == ["phi"]
    assert tokenize("Σ σ") == ["sigma", "sigma"]


def test_identifier_underscores_separate_but_subscripts_join():
    assert tokenize("mul_le_mul'") == ["mul_le_mul", "mul", "le", "mul"]
    assert tokenize("H_K") == ["hk"]


def test_ids_tokenise_whole_and_in_parts():
    assert tokenize("A5-7") == ["a5_7", "a5", "7"]


SAFE = re.compile(r"[a-z0-9_]+\Z")


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_tokens_are_safe_for_any_text(text):
    # Full-text-search syntax (quotes, AND, *, ~, parentheses) can never reach the index.
    assert all(SAFE.match(token) for token in tokenize(text))


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_tokenising_is_invariant_under_nfkc(text):
    assert tokenize(unicodedata.normalize("NFKC", text)) == tokenize(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126, exclude_characters="\\")))
def test_tokenising_ignores_case(text):
    # LaTeX command names are case-sensitive (\\Cref is not \\CREF): no backslash here
    assert tokenize(text.upper()) == tokenize(text.lower())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,6}", fullmatch=True), min_size=1, max_size=6))
def test_words_joined_by_spaces_tokenise_independently(words):
    joined = tokenize(" ".join(words))
    assert joined == [t for w in words for t in tokenize(w)]
