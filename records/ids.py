"""Ids (SPEC §2): step ids, run slugs, global ids ``<run>/<step id>``."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import TYPE_CHECKING

from mem_retrieval.records.errors import type_name, unescape

if TYPE_CHECKING:
    from mem_retrieval.records.types import Event

RUN_SLUG = re.compile(r"[a-z0-9][a-z0-9-]*\Z")
NOT_A_SLUG = "is not a run slug ([a-z0-9][a-z0-9-]*)"  # what a message says of a name RUN_SLUG refuses
_BAD_ID_CHAR = re.compile(r"[\s/\x00-\x1f\x7f]")
MAX_ID_LEN = 200


def step_id_problem(value: object) -> str | None:
    """Why ``value`` is not a valid step id, or None when it is."""
    if not isinstance(value, str):
        return f"must be a string, not {type_name(value)}"
    if not value:
        return "must not be empty"
    if len(value) > MAX_ID_LEN:
        return f"is {len(value)} characters long (at most {MAX_ID_LEN})"
    bad = _BAD_ID_CHAR.search(value)
    if bad:
        return f"{value!r} contains {bad.group()!r} (no white space, '/' or control characters)"
    return None


def is_run_slug(value: str) -> bool:
    return bool(RUN_SLUG.match(value))


def split_gid(value: str) -> tuple[str | None, str]:
    """``run/step`` -> (run, step); a bare step id -> (None, step)."""
    run, sep, rest = value.partition("/")
    if sep:
        return run, rest
    return None, value


def owner_run(ref: str, run: str | None) -> str | None:
    """The run whose step ``ref`` names: a global id's own run, else ``run``, the run in context
    (None: neither says). SPEC §2: a global id is always accepted, whatever the run in context (an
    auditor of ``beta`` reading its parent ``alpha/a1`` with run ``beta``: it was refused)."""
    return split_gid(ref)[0] or run


def ref_problem(value: object) -> str | None:
    """Why ``value`` is neither a step id nor a global id, or None."""
    if not isinstance(value, str):
        return f"must be a string, not {type_name(value)}"
    run, step = split_gid(value)
    if run is not None and not is_run_slug(run):
        return f"{value!r}: run {run!r} {NOT_A_SLUG}"
    problem = step_id_problem(step)
    return f"{value!r}: step id {problem}" if problem and run is not None else problem


def typed_run(value: str | None) -> str | None:
    """A run name as typed, or its ``plain`` form when only that is a run slug (``--run`` typed
    with a look-alike dash, as ``typed_ref`` reads a global id's run)."""
    if not isinstance(value, str) or is_run_slug(value):
        return value
    spelled = plain(value)
    return spelled if is_run_slug(spelled) else value


def given_run(value: str | None) -> str | None:
    """An optional ``run`` argument as read (``typed_run``); blank, bad input: an unset variable in
    a script, which read as no run widens the search to every run, and as a run named '' found
    nothing (as an empty ``until`` is refused, not read as now); no slug, bad input (``slug_run``)."""
    from mem_retrieval.records.errors import BadInput

    if isinstance(value, str) and not value.strip():
        raise BadInput("is empty (leave it out for every run)", param="run")
    return slug_run(value, "run")


def slug_run(value: str | None, param: str | None) -> str | None:
    """A run argument ``param`` as read (``typed_run``); BadInput when it cannot name a run (no
    slug: `../etc`, `Satake`), rather than "no such run", on every path that takes a run (None for
    ``param``: the message names it a run)."""
    run = typed_run(value)
    if isinstance(run, str) and not is_run_slug(run):
        from mem_retrieval.records.errors import BadInput

        raise BadInput(f"{'' if param else 'run '}{value!r} {NOT_A_SLUG}", param=param)
    return run


def typed_ref(value: str) -> str:
    """``value``, or its ``plain`` form when only that is a step id or a global id: a run typed
    with a look-alike dash (``satake‑two‑levels/A5-7``, U+2011) names the run its plain form does
    (a step id may hold any such character, so a bare id is kept as typed: ``spellings`` read it)."""
    if not isinstance(value, str) or ref_problem(value) is None:
        return value
    spelled = plain(value)
    return spelled if ref_problem(spelled) is None else value


_ID_LIKE = re.compile(r"[0-9]|\w[-_.']\w")


def looks_like_id(word: str) -> bool:
    """A global id, or a bare word with a digit or one of - _ . ' inside it (A5-7, log-sum), read
    in ``plain`` characters (fullwidth ``Ａ５－７``): a word of a longer text that may be an id, where
    plain words (concave, this) are not."""
    run, step = split_gid(plain(word))
    return run is not None or bool(_ID_LIKE.search(step))


_LETTERS, _DIGITS = re.compile(r"[^\W\d_]+"), re.compile(r"\d+")


def id_shape(word: str) -> str:
    """An id's shape: each run of letters written a, each run of digits 9, the rest as written
    (``A5-7`` and ``A5-77``: ``a9-9``; ``E6`` and ``SL2``: ``a9``; ``C_K``: ``a_a``)."""
    return _DIGITS.sub("9", _LETTERS.sub("a", word))


# What an agent's text puts where an ASCII id had a plain character: dashes drawn as '-' (hyphen,
# non-breaking hyphen, figure and en dashes, minus sign, small and fullwidth hyphen-minus) and
# characters drawn as nothing (soft hyphen, zero-width space and joiners, word joiner, BOM)
LOOKALIKES = str.maketrans({**dict.fromkeys("\u2010\u2011\u2012\u2013\u2212\ufe63\uff0d", "-"),
                            **dict.fromkeys("\u00ad\u200b\u200c\u200d\u2060\ufeff"  # drawn as nothing,
                                            "\u200e\u200f\u202a\u202b\u202c\u202d\u202e"  # the bidi marks too
                                            "\u2066\u2067\u2068\u2069\u061c")})


_MARKS = 64  # combining marks in a row that a text keeps: no language's text runs more
_long_runs: dict[bool, re.Pattern[str]] = {}  # by compatibility form: the pattern of a longer run (~12 ms)


def normal_form(form: str, value: str) -> str:
    """``unicodedata.normalize(form, value)``, in linear time: Python puts a run of combining marks
    in canonical order by an insertion sort, so one word of 30,000 marks (in core.md, a query, a
    statement) took seconds to read (`mem check` 29 s). A value past the longest id
    (``MAX_ID_LEN``) that is not normal already has each run cut at ``_MARKS`` first (counting the
    characters that ``form`` decomposes to marks alone, as U+0F73); an id, and anything as short,
    is normalised exactly: ids equal in Unicode stay equal, and unequal ones apart."""
    if value.isascii() or len(value) <= MAX_ID_LEN or unicodedata.is_normalized(form, value):
        return value if value.isascii() else unicodedata.normalize(form, value)
    compatible = form in ("NFKC", "NFKD")
    if compatible not in _long_runs:
        decomposed = "NFKD" if compatible else "NFD"  # U+FF9E is a mark in NFKD only
        marks = [cp for cp in range(0x20000) if unicodedata.combining(chr(cp))  # (none past it)
                 or (unicodedata.decomposition(chr(cp))
                     and unicodedata.combining(unicodedata.normalize(decomposed, chr(cp))[0]))]
        spans = "".join(re.escape(chr(a)) + (f"-{re.escape(chr(b))}" if b > a else "")
                        for a, b in _spans(marks))
        _long_runs[compatible] = re.compile(f"[{spans}]{{{_MARKS + 1},}}")
    return unicodedata.normalize(form, _long_runs[compatible].sub(lambda run: run.group()[:_MARKS], value))


def _spans(values: list[int]) -> Iterable[tuple[int, int]]:
    """The runs of consecutive integers of sorted ``values``, as (first, last)."""
    start = previous = None
    for value in values:
        if previous is None or value != previous + 1:
            if start is not None:
                yield start, previous
            start = value
        previous = value
    if start is not None:
        yield start, previous


def canonical(value: str) -> str:
    """An id (a step's, a source's, a reference to one) as the records hold it: composed (Unicode
    NFC). ``Ü`` written decomposed (``U`` and a combining diaeresis, as some systems type it) is the
    same letter, so the same id: one step of its run (a twin in the other form is a duplicate), the
    step its library entry repeats, the step a parent or an event names."""
    return value if value.isascii() else normal_form("NFC", value)


def plain(value: str) -> str:
    """``value`` as plain characters: NFKC (fullwidth ``Ａ５`` as ``A5``), then the ``LOOKALIKES``
    (``A5‑7`` with a non-breaking hyphen as ``A5-7``)."""
    return normal_form("NFKC", value).translate(LOOKALIKES)


def spellings(value: str, lookalikes: bool = True) -> tuple[str, ...]:
    """``value``, the same letters in Unicode's other normal forms (composed NFC, decomposed NFD),
    then (``lookalikes``) its ``plain`` form and its form with the escapes a printed line shows read
    back (``unescape``: ``q\\u200b1``, copied from a message, for ``q`` U+200B ``1``): an id typed
    on one system can reach another decomposed (``Ü`` as ``U`` and a combining diaeresis), and an
    agent's text may draw its hyphen as another dash (U+2011) or its letters fullwidth; each must
    name the step, the forms before the look-alikes first. ``value`` alone when it is ASCII with
    no escape."""
    if value.isascii() and (not lookalikes or "\\" not in value):
        return (value,)
    forms = (value, normal_form("NFC", value), normal_form("NFD", value))
    read_back = unescape(value)  # `A5\u20117` as an output in ASCII shows A5‑7: its plain form too
    return tuple(dict.fromkeys(forms + ((plain(value), read_back, plain(read_back)) if lookalikes else ())))


class NearestIds:
    """The ``known`` global ids, ready to say which are closest to an id that names none of them:
    compared case-folded in ``plain`` characters (``r-truncation`` finds ``R-truncation``, fullwidth
    ``Ａ５-７`` finds ``A5-7``), by their step id alone for a bare id. Past ``WINDOW`` names, among
    the ``WINDOW`` nearest in sorted order (a typo keeps its first characters): difflib takes
    ~80 ms over 20,000, and `mem check` asks once per claim naming no step."""

    WINDOW = 500

    def __init__(self, known: Iterable[str]):
        self._names: dict[bool, tuple[dict[str, list[str]], list[str]]] = {}
        self._known = list(dict.fromkeys(known))

    def _by_name(self, bare: bool) -> tuple[dict[str, list[str]], list[str]]:
        if bare not in self._names:
            by_name: dict[str, list[str]] = {}
            for gid in sorted(self._known):  # ids of one name in order, not as the index's rows lie
                by_name.setdefault(plain(split_gid(gid)[1] if bare else gid).casefold(), []).append(gid)
            self._names[bare] = (by_name, sorted(by_name))
        return self._names[bare]

    def near(self, ref: str, n: int = 5) -> list[str]:
        """Up to ``n`` of the known ids closest to ``ref``, closest first; never a global ``ref``
        itself, as the lookup reads it (``spellings``: a source or a step the filters leave out is
        known, and "no step has this id; nearest: the same id" said nothing; a bare id's steps of
        other runs are offered). An id that only reads like it (``q\u200b1`` for ``q1``: the
        lookup does not find it) is offered."""
        import bisect
        import difflib

        bare = "/" not in ref
        by_name, names = self._by_name(bare)
        word = plain(ref).casefold()
        if len(names) > self.WINDOW:
            at = bisect.bisect_left(names, word)
            names = names[max(0, at - self.WINDOW // 2):at + self.WINDOW // 2]
        near = difflib.get_close_matches(word, names, n=n + 1, cutoff=0.5)
        same = set() if bare else set(spellings(ref))
        return [gid for name in near for gid in by_name[name] if gid not in same][:n]


def nearest_ids(ref: str, known: Iterable[str], n: int = 5) -> list[str]:
    """Up to ``n`` of the ``known`` global ids closest to ``ref`` (``NearestIds``)."""
    return NearestIds(known).near(ref, n)


def first_naming(events: Iterable["Event"], run: str) -> dict[str, "Event"]:
    """For each step id of ``run``: the first event (in log order) naming it, by a bare id or by
    ``run/id`` (``records.workspace.first_written`` adds the steps no event names)."""
    first: dict[str, Event] = {}
    for event in events:
        for ref in event.ids:
            ref_run, step_id = split_gid(ref)
            if ref_run in (None, run) and step_id not in first:
                first[step_id] = event
    return first
