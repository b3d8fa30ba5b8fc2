"""Math-aware tokenisation for BM25, shared by indexing and querying.

Steps: Unicode NFKC (GL₄ -> GL4, 𝔽 -> F); a symbol as the LaTeX command that draws it, and a
command's other spellings as its name (≤, \\leq, <= -> \\le -> le; ⊗ -> otimes; → and ∈ dropped, as
\\to and \\in are); Greek letters to their names (φ, \\varphi -> phi);
accents folded, in Unicode and in LaTeX (Plünnecke, Pl\\"{u}nnecke and Plunnecke are one word, as
are Čech, \\v{C}ech and Cech, and Bia\\l{}ynicki and Białynicki: a name is the same name however it
is typed); LaTeX commands
unwrapped (\\mathrm{GL}_{2m} -> GL2m; font and spacing commands dropped, other commands kept as
words: \\log -> log); sub/superscript markers and braces removed inside a word (F_q -> Fq, while
mul_le_mul keeps its parts); case folded. A compound word such as GL2m/Sp2m or
F_q((t)) is indexed whole (its parts joined by ``_``: gl2m_sp2m, fq_t) and in parts (gl2m, sp2m;
fq, t). Tokens are [a-z0-9_] only, so no query can carry full-text-search syntax into the index. A
few English function words are dropped.

Formula shapes: an operator applied to bracketed arguments (a command, a word or a Greek letter,
then [ or ( at once) also gives one token naming the operator and the separators between its
arguments (``signatures``): \\bbH[X|Y] -> h_sig_g (a conditional), \\bbI[X:Y|Z] -> i_sig_mg,
d(X;Y) -> d_sig_s, φ(x, y) -> phi_sig_c, in LaTeX or in plain Unicode alike. A font command's
argument is the operator's name, and digits or scripts after the name are skipped:
\\mathrm{Hom}(A, B), H^1(G, M) and H¹(G, M) apply Hom and H as Hom(A, B) and H(G, M) do; a
preamble's one-letter font macro is its letter (\\bbI[X:Y|Z] as I(X:Y|Z)). LaTeX spacing separates
nothing and \\mid is |: I(U : V \\, \\mid \\, S) has the shape of I(U:V|S). The
letters of a formula say little; its shape says which notion it is about, and a step is cited for a
notion: "H[X|Y] = …" needs the lemma about H[X|Y] whatever its letters are. Prose rarely puts a
bracket right after a word, and a bracket without separators gives nothing.

Bump VERSION whenever the output changes: it is stored with the index."""

from __future__ import annotations

import re
import unicodedata

from mem_retrieval.records.ids import normal_form, plain
from mem_retrieval.records.notation import FONT_COMMANDS

VERSION = "math-v11"

GREEK = {
    "α": "alpha", "β": "beta", "γ": "gamma", "δ": "delta", "ε": "epsilon", "ϵ": "epsilon",
    "ζ": "zeta", "η": "eta", "θ": "theta", "ϑ": "theta", "ι": "iota", "κ": "kappa", "ϰ": "kappa",
    "λ": "lambda", "μ": "mu", "ν": "nu", "ξ": "xi", "ο": "omicron", "π": "pi", "ϖ": "pi",
    "ρ": "rho", "ϱ": "rho", "σ": "sigma", "ς": "sigma", "τ": "tau", "υ": "upsilon", "φ": "phi",
    "ϕ": "phi", "χ": "chi", "ψ": "psi", "ω": "omega",
}
# Letters LaTeX spells by another name: the variant Greek forms, and \ell, which NFKC makes of ℓ.
_LATEX_LETTERS = {
    "varphi": "phi", "varepsilon": "epsilon", "vartheta": "theta", "varpi": "pi", "varrho": "rho",
    "varsigma": "sigma", "varkappa": "kappa", "ell": "l",
}
# Commands whose name carries no meaning: their argument stays, the name goes (a font command's
# too, records.notation.FONT_COMMANDS: \mathrm{GL} is the word GL, and \mathrm{Hom}(A, B) applies
# Hom, as Hom(A, B) does).
_DROP_COMMANDS = {
    *FONT_COMMANDS, "text", "textrm", "textbf", "textit", "emph", "mbox",
    "left", "right", "big", "bigl", "bigr", "Big", "Bigl", "Bigr", "bigg", "displaystyle",
    "textstyle", "quad", "qquad", "label", "begin", "end", "item", "hat", "tilde", "bar",
    "overline", "underline", "widehat", "widetilde", "cdot", "cdots", "ldots", "dots", "colon",
    "mid", "in", "to", "frac", "dfrac", "tfrac", "sqrt", "limits", "nolimits", "ref", "cref",
    "Cref", "eqref", "cite", "autoref",
}
# A relation or operator is one word however it is typed: a LaTeX command's other spellings are its
# name (\leq is \le), and a Unicode symbol is the command that draws it (≤ is \le, ⊗ \otimes, → \to,
# which is dropped). A statement in Unicode and one in LaTeX then share their words, and ≤ reads as
# Lean's names spell it (mul_le_mul). Tokenizer math-v9: the default's R@10 / nDCG@10 on the
# development set .674 / .418 → .688 / .423, on the example set .857 / .845 → .863 / .850 (README).
_COMMAND_ALIASES = {
    "leq": "le", "leqslant": "le", "leqq": "le", "geq": "ge", "geqslant": "ge", "geqq": "ge",
    "neq": "ne", "lnot": "neg", "land": "wedge", "lor": "vee", "gets": "leftarrow",
    "rightarrow": "to", "longrightarrow": "to", "longleftarrow": "leftarrow",
    "longleftrightarrow": "leftrightarrow", "longmapsto": "mapsto", "varnothing": "emptyset",
    "Rightarrow": "implies", "Longrightarrow": "implies", "Leftarrow": "impliedby",
    "Longleftarrow": "impliedby", "Leftrightarrow": "iff", "Longleftrightarrow": "iff",
    "bigotimes": "otimes", "bigoplus": "oplus", "bigodot": "odot", "biguplus": "uplus",
    "bigcup": "cup", "bigcap": "cap", "bigwedge": "wedge", "bigvee": "vee", "bigsqcup": "sqcup",
    # a negated relation is "not" and the relation (\not\le reads so by itself)
    "nleq": "not le", "nleqslant": "not le", "ngeq": "not ge", "ngeqslant": "not ge",
    "notin": "not in", "nsubseteq": "not subseteq", "nsupseteq": "not supseteq", "nmid": "not",
    "ncong": "not cong", "nsim": "not sim", "nequiv": "not equiv",
}
_SYMBOL_COMMANDS = {
    "≤": "le", "⩽": "le", "≦": "le", "≥": "ge", "⩾": "ge", "≧": "ge", "≠": "ne", "⊗": "otimes",
    "⨂": "otimes", "⊕": "oplus", "⨁": "oplus", "⊙": "odot", "⨀": "odot", "⊎": "uplus",
    "⨄": "uplus", "∑": "sum", "∏": "prod", "∐": "coprod", "∫": "int", "⊂": "subset",
    "⊆": "subseteq", "⊊": "subsetneq", "⊃": "supset", "⊇": "supseteq", "∩": "cap", "⋂": "cap",
    "∪": "cup", "⋃": "cup", "⊔": "sqcup", "⨆": "sqcup", "∧": "wedge", "⋀": "wedge", "∨": "vee",
    "⋁": "vee", "∞": "infty", "∂": "partial", "∇": "nabla", "≅": "cong", "≃": "simeq", "∼": "sim",
    "≈": "approx", "≡": "equiv", "⋊": "rtimes", "⋉": "ltimes", "×": "times", "↦": "mapsto",
    "⟼": "mapsto", "∘": "circ", "∀": "forall", "∃": "exists", "¬": "neg", "⊥": "perp",
    "∅": "emptyset", "↪": "hookrightarrow", "↠": "twoheadrightarrow", "→": "to", "⟶": "to",
    "∈": "in", "∖": "setminus", "≪": "ll", "≫": "gg", "⊴": "trianglelefteq", "◁": "triangleleft",
    "⊲": "triangleleft", "⟨": "langle", "⟩": "rangle", "←": "leftarrow", "⟵": "leftarrow",
    "↔": "leftrightarrow", "⟷": "leftrightarrow", "⇒": "implies", "⟹": "implies",
    "⇐": "impliedby", "⟸": "impliedby", "⇔": "iff", "⟺": "iff", "∣": "mid",
    "≰": "nleq", "≱": "ngeq", "∉": "notin", "⊈": "nsubseteq", "⊉": "nsupseteq", "∤": "nmid",
    "≇": "ncong", "≁": "nsim", "≢": "nequiv",
}
_SYMBOLS = str.maketrans({symbol: f" \\{name} " for symbol, name in _SYMBOL_COMMANDS.items()})
# A relation typed in ASCII, as plain-text and code write it, is the one it spells (<= is ≤ is \\le).
# Not =>: Lean writes it for fun x => …, no implication.
_ASCII_RELATIONS = {"<=>": "iff", "<=": "le", ">=": "ge", "!=": "ne"}
_ASCII_RELATION = re.compile(r"(?<![<>=!])(?:<=>|<=|>=|(?<!\S)!=)(?![<>=])")
# (not within a longer arrow or operator: <==> <== >>= >=> !==; != after a space: n!=n(n-1)! is a
# factorial)
STOPWORDS = frozenset(
    "a an and are as at be by for from has have if in into is it its of on or such that the then "
    "there these this those to was we were which with".split()
)

_COMMAND = re.compile(r"\\([A-Za-z]+)|\\(.)")
# A Greek letter's name typed with a script (mu_n, sigma^2) is the letter and its script, as μ_n and
# \mu_n are: a letter indexed is the letter's notion (σ_1, σ_2), where F_q names one thing (fq).
# Joined (mun), the index kept each subscript's letter apart from the letter, and the default's
# R@10 on the development set fell .674 → .659 (a first math-v8, measured and dropped).
_GREEK_SCRIPTED = re.compile(r"(?<![0-9a-z_\\])(%s)(?=[_^](?:\{|[0-9a-z](?![0-9a-z])))"
                             % "|".join(sorted(set(GREEK.values()))))
# A LaTeX accent over a letter is the letter: \\"{u} \\"u \\'e \\^o \\~n, and the lettered accents with
# their braces (\\H{o} \\v{C} \\c{c}; \\d x stays two words: \\d is also a differential's macro).
# The dotless \\i under an accent is i.
_ACCENT = re.compile(r"""\\(?:["'`^~=.]\s*|[Hvuckr](?=\{))"""
                     r"""(?:\{\s*(\\[ij]|[A-Za-z])\s*\}|(\\[ij]|[A-Za-z]))""")
# Latin letters that are no letter plus an accent, so NFKD leaves them whole.
_PLAIN = {"ø": "o", "ł": "l", "đ": "d", "ð": "d", "ħ": "h", "ŀ": "l", "ŧ": "t",
          "æ": "ae", "œ": "oe", "þ": "th"}
# LaTeX's commands for those letters (Bia\\l{}ynicki is Białynicki, Gau\\ss Gauß), inside a word; alone,
# a command such as \\O or \\L is a preamble's macro as often, and reads as any command.
_LETTER_OF = {"l": "ł", "L": "Ł", "o": "ø", "O": "Ø", "ss": "ß", "ae": "æ", "AE": "Æ", "oe": "œ",
              "OE": "Œ", "aa": "å", "AA": "Å"}
_LETTER_COMMAND = "|".join(sorted(_LETTER_OF, key=len, reverse=True))
_LATEX_LETTER = re.compile(rf"\\({_LETTER_COMMAND})(?![A-Za-z])(\{{\}}|\s+(?=[A-Za-z]))?")
_FOLD = str.maketrans(_PLAIN | {k.upper(): v.upper() for k, v in _PLAIN.items()} | {"ı": "i"})
_WORD = re.compile(r"[0-9a-z_()\[\]{}/.'’^\-]+")
_PART = re.compile(r"[0-9a-z]+")
# A LaTeX sub/superscript (F_q, GL_{2m}, x^2) joins its word; any other '_' separates (mul_le_mul).
# A script's own scripts join it too (Gr_{E_6} and Gr_{E_{6}} are Gr_{E₆}), one level deep.
_SCRIPT = re.compile(r"[_^](?:\{((?:[0-9a-z_^]|\{[0-9a-z_^]*\})*)\}|([0-9a-z])(?![0-9a-z]))")
_SCRIPT_MARKS = re.compile(r"[_^{}]")
_BRACES = re.compile(r"[{}]")
# An operator applied: a font command's name, a command, or a word or Greek letter not following a
# letter or backslash; then up to SCRIPTS digits and scripts, which are not part of its name (H^1(G,
# M), H¹(G, M) and H(G, M) apply H); then its bracketed arguments at once. The bound keeps the scan
# linear: every letter of a chain such as a_b^c_d… may start a match, and with no bound each one read
# the chain to its end (100,000 characters of `a_` took 218 s; tokenizer math-v6).
SCRIPTS = 10
_APPLIED = re.compile(
    r"(?:\\(?:" + "|".join(FONT_COMMANDS) + r")\{([A-Za-z]+)\}|\\([A-Za-z]+)"
    r"|(?<![^\W\d_])(?<!\\)([A-Za-z]+|[α-ωΑ-Ωϑϕϰϱϵςϖ]))"
    r"(?:[0-9]|[_^](?:\{[^{}]{0,20}\}|[A-Za-z0-9])){0,%d}[\[(]" % SCRIPTS)
_SEPARATORS = {",": "c", ";": "s", ":": "m", "|": "g"}
_REPEAT = re.compile(r"(.)\1+")
# LaTeX's spacing commands (\\, \\; \\: \\!) and \\| (a norm's bar) separate no arguments:
# I(U : V \\, | \\, S) has the shape of I(U:V|S); \\mid is the bar | (P(A \\mid B) = P(A|B)).
_ESCAPED = re.compile(r"\\[,;:!|]")
_MID = re.compile(r"\\mid(?![A-Za-z])")
# A preamble's one-letter font macro (\\bbH, \\calO, \\frakp) names the operator its letter names, as
# \\mathbb{H} does: \\bbI[X:Y|Z] and I(X:Y|Z) have one shape. Shapes only: as a word \\bbH stays bbh;
# folding the word into h too merges it with the letter of every subgroup H, and costs recall (README).
_FONT_MACRO = re.compile(r"(?:bb|cal|frak|scr)([A-Za-z])")
SIGNATURE_REACH = 200   # characters of an operator's arguments read for its separators


def _command(match: re.Match[str]) -> str:
    name = match.group(1)
    if name is None:
        return " "  # \, \; \\ and friends
    name = _COMMAND_ALIASES.get(name, name)
    if " " in name:  # a negated relation: not, and the relation
        return f" {name} "
    lowered = name.lower()
    if name in _DROP_COMMANDS:
        return ""
    if name == "ell":
        return "ℓ"  # as typed: \ell-adic is ℓ-adic, one word, and NFKC makes it l
    if lowered in _LATEX_LETTERS:
        return f" {_LATEX_LETTERS[lowered]} "
    return f" {name} "


def _accented(match: re.Match[str]) -> str:
    return (match.group(1) or match.group(2)).lstrip("\\")


_BRACED_LETTER = re.compile(rf"\{{\\({_LETTER_COMMAND})\s*\}}")  # Bia{\\l}ynicki, {\\L}ojasiewicz


def _braced_letter(match: re.Match[str]) -> str:
    """A braced letter command beside a letter (the BibTeX spelling) is the letter; else as typed."""
    return _letter_if(match, before_one=True)


def _latex_letter(match: re.Match[str]) -> str:
    """A letter after a letter (Bia\\l ynicki, Gau\\ss), or before one with braces between
    (\\L{}ojasiewicz); else the command as typed (Let \\O be: a macro, the space a separator)."""
    return _letter_if(match, before_one=match.group(2) == "{}")


def _letter_if(match: re.Match[str], before_one: bool) -> str:
    """The letter ``match``'s command draws where it follows a letter, or, with ``before_one``,
    where a letter follows it; else the match as typed."""
    text, start, end = match.string, match.start(), match.end()
    within = (start and text[start - 1].isalpha()) or (before_one and text[end:end + 1].isalpha())
    return _LETTER_OF[match.group(1)] if within else match.group(0)


def _ascii_relation(match: re.Match[str]) -> str:
    return f" \\{_ASCII_RELATIONS[match.group(0)]} "


def fold_accents(text: str) -> str:
    """``text`` without accents: each letter's combining marks (category M) dropped (ü -> u,
    ő -> o, Č -> C), and the few Latin letters NFKD keeps whole spelt plainly (ø -> o, Ł -> L,
    æ -> ae). Greek keeps its letters (ά -> α). Before case folding, which turns some marks into
    letters."""
    if text.isascii():
        return text
    return "".join(c for c in normal_form("NFKD", text)
                   if not unicodedata.category(c).startswith("M")).translate(_FOLD)


def normalize(text: str) -> str:
    """NFKC, symbols as the commands that draw them, LaTeX accents and commands unwrapped, Greek
    letters named, case and accents folded."""
    text = _ASCII_RELATION.sub(_ascii_relation, plain(text).translate(_SYMBOLS))  # NFKC; what is drawn as
    # nothing dropped, a dash as -
    text = _COMMAND.sub(_command, _ACCENT.sub(_accented, _LATEX_LETTER.sub(
        _latex_letter, _BRACED_LETTER.sub(_braced_letter, text))))
    text = "".join(f" {GREEK[c]} " if c in GREEK else c for c in fold_accents(text).casefold())
    return _GREEK_SCRIPTED.sub(r"\1 ", normal_form("NFKC", text))


def signatures(text: str) -> list[str]:
    """The formula-shape tokens of ``text``: for each operator applied, its name and the separators
    at the top level of its arguments (, c  ; s  : m  | g; a run of one kept as two, so X,Y,Z and
    X,Y,Z,W read alike), when it has any: \\bbI[X:Y|Z] -> i_sig_mg."""
    text = fold_accents(plain(text)).replace("∣", "|")  # as ``normalize`` reads it; the divides bar is |
    tokens: list[str] = []
    for applied in _APPLIED.finditer(text):
        depth, separators = 0, []
        arguments = _MID.sub("|", _ESCAPED.sub(" ", text[applied.end():applied.end() + SIGNATURE_REACH]))
        for char in arguments:
            if char in "[({":
                depth += 1
            elif char in "])}":
                if depth == 0:
                    break
                depth -= 1
            elif depth == 0 and char in _SEPARATORS:
                separators.append(_SEPARATORS[char])
        font, command, word = applied.groups()
        if not separators or command in _DROP_COMMANDS:
            continue
        if command and (letter := _FONT_MACRO.fullmatch(command)):
            command = letter.group(1)
        elif command and " " not in _COMMAND_ALIASES.get(command, " "):
            command = _COMMAND_ALIASES[command]  # \leq(a, b) applies \le
        name = (font or command or word).casefold()
        name = _LATEX_LETTERS.get(name) or GREEK.get(name) or name
        shape = _REPEAT.sub(r"\1\1", "".join(separators))
        tokens.append(f"{name}_sig_{shape}")
    return tokens


def tokenize(text: str) -> list[str]:
    """BM25 tokens of ``text``, in order: each compound's whole form, then its parts; then the
    formula shapes (``signatures``)."""
    tokens: list[str] = []
    for word in _WORD.findall(normalize(text)):
        word = _BRACES.sub("", _SCRIPT.sub(lambda m: _SCRIPT_MARKS.sub("", m.group(1) or m.group(2) or ""),
                                            word))
        parts = _PART.findall(word)
        if not parts:
            continue
        if len(parts) > 1:
            tokens.append("_".join(parts))
        tokens.extend(p for p in parts if p not in STOPWORDS)
    return tokens + signatures(text)


def token_string(text: str) -> str:
    """The tokens as one space-separated string (the indexed column)."""
    return " ".join(tokenize(text))
