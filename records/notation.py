"""LaTeX notation read as the plain characters it draws, for text compared whole (a setting):
``\\mathbb{F}_q(\\!(t)\\!)``, ``𝔽_q((t))`` (after NFKC) and ``F_q((t))`` are one setting. The BM25
tokeniser (``text.tokenize``) unwraps the same font commands."""

from __future__ import annotations

import re

# A font command's argument is the letter or word it draws: \mathbb{Q} and \mathrm{GL} are Q and GL.
FONT_COMMANDS = ("mathrm", "mathbf", "mathit", "mathsf", "mathtt", "mathcal", "mathscr", "mathbb", "mathfrak",
                 "operatorname", "boldsymbol", "bm")
_FONT = re.compile(r"\\(?:%s)(?![A-Za-z])\s*(?:\{([^{}]*)\}|([A-Za-z0-9]))" % "|".join(FONT_COMMANDS))
# Spacing that draws nothing: \! \, \: \; and \left / \right before a bracket.
_SPACING = re.compile(r"\\[!,:;]|\\(?:left|right)(?![A-Za-z])")
# Math delimiters draw nothing: $F_q((t))$ and $$ … $$ read as their content, as do \(Q_p\) and
# \[ … \] standing as words (at the text's or a clause's start and end); elsewhere \( \) \[ \] are
# escaped brackets (Markdown's F_q\[t\] is F_q[t], a ring, never F_q(t), a field). A span holds no
# delimiter of its kind, so each is scanned once: linear.
_DOLLARS = re.compile(r"(?<!\\)\$+")
_SPANS = re.compile(r"(?<![^\s;])\\\(((?:[^\\]|\\(?![()]))*)\\\)(?![^\s;,.])"
                    r"|(?<![^\s;])\\\[((?:[^\\]|\\(?![\[\]]))*)\\\](?![^\s;,.])")
_ESCAPED = re.compile(r"\\([()\[\]])")
# A font switch of plain TeX or amssymb ({\bf F}, {\Bbb F}, \Bbb F) draws its letters as they are.
_SWITCH = re.compile(r"\\(?:bf|rm|it|sf|tt|cal|frak|Bbb)(?![A-Za-z])\s*")
# Braces around a lone word draw nothing where no command or script takes them as its argument:
# {F}_q (of {\mathbb F}_q or {\mathbb{F}}_q) is F_q; \frac{a}{b} and F_{q} are not touched here.
_GROUP = re.compile(r"(?<![A-Za-z0-9}\\_^])\{\s*([A-Za-z0-9]+)\s*\}")
# A preamble's one-letter blackboard macro (\Q, \F, \R, \C, \Z, \N): its letter.
_LETTER_MACRO = re.compile(r"\\([A-Z])(?![A-Za-z])")
# Braces around a script draw nothing: F_{q} is F_q.
_SCRIPT = re.compile(r"([_^])\{\s*([A-Za-z0-9]+)\s*\}")
# Fonts and scripts read inside one another, this deep at most (each level a pass over the text):
# \mathrm{Z_{p}} is Z_p and \mathbf{\mathrm{PFR}} is PFR; a setting nests two or three.
NESTING = 8


def latex_plain(text: str) -> str:
    """``text`` with its LaTeX notation read as drawn: math delimiters dropped, fonts unwrapped
    (within one another too, ``NESTING`` deep; a plain TeX switch such as ``{\\bf F}`` too), spacing
    dropped, a one-letter macro its letter, braces around a one-word script or a lone word
    dropped. Linear in the text's length (a lazy group between two runs of spaces made 2,000
    characters of ``\\mathbb{`` and spaces cost seconds, and a 16,384-character setting minutes)."""
    if "\\" not in text and "{" not in text and "$" not in text:
        return text
    text = _ESCAPED.sub(r"\1", _SPANS.sub(lambda m: m.group(1) if m.group(1) is not None else m.group(2),
                                           _DOLLARS.sub("", text)))
    text = _SWITCH.sub("", _SPACING.sub("", text))
    for _ in range(NESTING):  # from the innermost out: \mathrm{Z_{p}}, \mathbf{\mathrm{Q}}
        before = text
        text = _GROUP.sub(r"\1", _FONT.sub(lambda m: m.group(1).strip() if m.group(1) is not None
                                           else m.group(2), _SCRIPT.sub(r"\1\2", text)))
        if text == before:
            break
    return _SCRIPT.sub(r"\1\2", _LETTER_MACRO.sub(r"\1", text))


__all__ = ["FONT_COMMANDS", "latex_plain"]
