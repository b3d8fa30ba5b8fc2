"""W as text (SPEC §6): writing core.md's five fields, and reading which ids and statuses it names.

core.md is prose, so an id is recognised as a white-space separated word, with surrounding
punctuation allowed (``(A5-7),``); a *status claim* is such a word followed by one of the five status
words (``A5-7 proved``, ``pfr-distance/ruzsa-diff open``), which M1 compares with tree.json. It is
read by rules, not parsed, and a false claim refuses `record`: where English leaves the status open
(a condition, a plan, a report, history, an implication), the rules read nothing (``claims``).
``tests/data/m1`` holds 849 lines others wrote and labelled, on which the tests pin what they read."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from mem_retrieval.records.errors import BadInput
from mem_retrieval.records.ids import plain
from mem_retrieval.records.parse import core_heading, misspelt_core_heading, split_core_heading, text_lines
from mem_retrieval.records.types import CORE_FIELDS, STATUSES

EDGE = "\"'`.,;:!?()[]{}<>«»“”‘’…·←→*"  # `*`: markdown's emphasis, **A-1** or *A-1*
_LINKS = frozenset({"is", "now", "also", "been", "status", "still", "remains", "stays", "—", "–", "-", "=",
                    ":", "→", "->", "=>", "⇒"})
# A5-8 is now proved; A5-8 status: proved; A5-8 still open. Not "are": `once A5-9, A6-3 are proved`
_PERFECT = frozenset({"has", "have"})  # a link only before "been": `A5-8 has been proved`, not `A5-8 has
# open sub-goals`; not "was", "were", "had" either: `A5-8 was open, now proved` states no open
_ARROWS = frozenset({"→", "->", "=>", "⇒", "⟶", "⟹", "—>", "-->", "==>", "↦", "⇐", "⟸", "<=="})
# `A5-8 open → refuted`: a change, history or a plan; `A5-8 proved ⇒ A6-1 proved`, an implication
# (``changes``); not `←`, which says what a step rests on
_CONDITIONS = frozenset({  # a word before an id in its clause that makes the clause state no status of it
    "if", "iff", "once", "whether", "when", "whenever", "until", "till", "unless", "after", "before",
    "assuming", "suppose", "supposing", "provided", "soon", "given", "case",  # conditions
    "need", "needs", "needed", "require", "requires", "required", "depend", "depends", "wait", "waits",
    "pending", "would", "should", "could", "might", "must", "try", "tries", "trying", "show", "mark", "get",
    "expect", "expects", "expected", "expecting", "want", "wants", "hope", "hopes", "hoped", "hoping",
    "waiting", "awaiting", "await", "awaits", "depending", "requiring", "needing", "conditional",
    "assume", "assumes", "assumed", "confirm", "verify", "check", "target", "aim", "push", "make", "then",
    "goal", "goals", "plan", "todo", "next",  # plans: `A6-8 needs A5-9 proved first`, `goal: A6-8 proved`
    "say", "says", "said", "claim", "claims", "claimed", "assert", "asserts", "asserted", "report", "reports",
    "reported", "according", "per",  # reports: `d1 claimed A5-9 proved; it is blocked`
    "think", "thinks", "believe", "believes", "suspect", "suspects", "guess", "probably", "maybe",
    "perhaps", "possibly", "likely", "unlikely", "presumably", "apparently", "seemingly", "allegedly",
    "reportedly", "supposedly",  # hedges: `A3 thinks A5-9 refuted`
    "neither", "nor", "either", "or", "none", "no"})  # alternatives: `neither A5-8 nor A5-9 is proved`
_NOT_A_STATE = frozenset({  # a word after a status that makes it no status now (``_other_use``)
    "to", "that", "than", "it", "its", "their", "his", "her", "our", "my",  # a verb: `proved to be
    # false`, `refuted its claim` (not `the`, `this`: `proved this round`, `open the whole round`)
    "if", "or", "when",  # a condition, an alternative: `refuted if p = 2`, `proved or refuted`
    "earlier", "before", "previously", "formerly", "originally", "initially"})  # a past
_ID_CHARS = re.compile(r"[A-Za-z][\w.'-]*")  # `refuted A5-9`, `blocked A2`: a verb and its object
_ID_CAPITALS = re.compile(r"[A-Z][A-Za-z]*\d")  # (not `proved r2`, a round)
_ID_SEPARATED = re.compile(r"[A-Za-z](?:[^\W_]|')*[-_.]")  # up to the first separator


def id_like(word: str) -> bool:
    """Whether ``word`` reads as a step's id: letters, digits and ``.'-_`` opening with a letter,
    and capitals then a digit (``A2``) or a digit after a separator (``A5-9``, ``mul_le_1``). Read
    in linear time: the one pattern it replaces tried every separator and every digit of a word
    against the rest (16 s a `mem check` on one 40 KB `a-111…1€` word in core.md)."""
    if not _ID_CHARS.fullmatch(word):
        return False
    if _ID_CAPITALS.match(word):
        return True
    head = _ID_SEPARATED.match(word)
    return head is not None and any(c.isdecimal() for c in word[head.end():])


_GOVERNING = frozenset({  # condition words that, opening a clause, govern the rest of its sentence
    "if", "iff", "once", "whether", "when", "whenever", "until", "till", "unless", "assuming", "suppose",
    "supposing", "provided", "given", "then", "according"})  # `according to d1, …`: a report; not
# `after`, `per`: `After A2's fix, A5-7 proved`, `Per A7's audit, A5-7 proved`
# (any condition word ending in `:` is a label, and governs its sentence: `goal: A6-8 proved`,
# `hope: A6-8 proved`, `A3 claims: A5-9 refuted`)
_BARE_LEAD = frozenset({"now", "still", "again", "then", "but", "and", "so", "yet", "already", "stays",
                        "remains", "stay", "remain", "is", "was", "it's", "—", "–", "-"})
_BULLET = re.compile(r"[-*+>•·|#]+|\d{1,3}[.)]|\[?\d{1,2}:\d\d(?::\d\d)?Z?\]?:?")  # a list's marker, a
# table's bar, a time stamp: `-`, `1.`, `|`, `[14:05Z]`
_OPEN_QUOTES, _CLOSE_QUOTES = "\"“„«", "\"”“»"  # „…“ closes with “
_REVISING = frozenset({  # what may follow a status revising an earlier one (``_revised``)
    "since", "otherwise", "at", "in", "on", "by", "from", "after", "again", "now", "too", "instead",
    "later", "meanwhile"})
_SENTENCE_END = ";.!?？·•"  # clause ends that end a sentence too: the reach of a condition opening one
_CLAUSE_END = ",;.:!?？·•"  # a word ending so (its closing brackets and quotes aside) ends a clause;
# · and • separate W's items (SPEC §6: `A2-4 audited · A5-7 not yet`)
_NAME_WIDTH = 12  # "## phase       round 2" as in SPEC §6


@dataclass(frozen=True, slots=True)
class Claim:
    """``word`` (an id, possibly wrapped in punctuation) stated to have ``status`` on ``line``."""

    line: int
    word: str
    status: str


def field_name(name: str) -> str:
    """A field as the user may type it (``open-gaps``, ``Open_Gaps``) -> its name; BadInput if none."""
    canonical = " ".join(name.replace("-", " ").replace("_", " ").casefold().split())
    if canonical not in CORE_FIELDS:
        raise BadInput(f"unknown core.md field {name!r} (fields: {', '.join(CORE_FIELDS)})")
    return canonical


_OTHER_BREAKS = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")  # str.splitlines' breaks but \n


def clean_field(text: str) -> str:
    """A field's text as core.md keeps it: lines right-stripped, blank lines dropped, the first line
    stripped, any line break a line feed. BadInput for a line that would start a new field or a NUL
    byte."""
    if "\x00" in text:
        raise BadInput("field text contains a NUL byte")
    # what other readers of core.md break lines at (Python's text mode, Markdown: a lone CR, a form
    # feed, U+2028…) is written as a line feed: kept raw, `x\r## inputs …` read there as a field
    text = _OTHER_BREAKS.sub("\n", text.replace("\r\n", "\n"))
    lines = [line.rstrip() for line in text_lines(text) if line.strip()]
    if lines:
        lines[0] = lines[0].lstrip()
    for number, line in enumerate(lines[1:], start=2):
        if core_heading(line) is not None:
            raise BadInput(f"field text line {number} starts with '## ', which would begin a new "
                             "field (indent it or write it on one line)")
        if misspelt_core_heading(line) is not None:
            raise BadInput(f"field text line {number} starts as a field's heading misspelt "
                           f"({line[:40]!r}), which core.md refuses (indent it or write it on one line)")
    return "\n".join(lines)


def _field_lines(name: str, text: str) -> list[str]:
    """A field as core.md writes it: its heading, holding the text's first line, then the rest."""
    lines = text.split("\n")
    return [f"## {name:<{_NAME_WIDTH}}{lines[0]}".rstrip() if lines[0] else f"## {name}", *lines[1:]]


def render(fields: dict[str, str]) -> str:
    """core.md holding the five fields in their order (missing ones empty)."""
    return "\n".join(line for name in CORE_FIELDS for line in _field_lines(name, fields.get(name, ""))) + "\n"


def with_field(written: str | None, field: str, text: str) -> str:
    """The text of core.md after setting ``field`` to ``text`` (both already checked; ``written``
    is core.md as it stands, a valid one, or None): that field's heading and lines are replaced
    (a missing field is put in its place in the order), the blank lines after it kept, and every
    other byte stays as written: another field's blank lines, spacing and line ends. A file with
    no field yet gets all five."""
    if written is None or not any(core_heading(line) for line in text_lines(written)):
        return render({field: text})
    lines = written.split("\n")  # as text_lines splits: at line feeds, each keeping a CR before it
    names = [(split_core_heading(heading) or ("",))[0] if (heading := core_heading(line.removesuffix("\r")))
             is not None else None for line in lines]
    headings = [i for i, name in enumerate(names) if name is not None]
    end = "\r" if lines[headings[0]].endswith("\r") else ""  # the file's own line end (CRLF or LF)
    block = [line + end for line in _field_lines(field, text)]
    if field in names:
        start = names.index(field)
        stop = next((i for i in headings if i > start), len(lines))
        while stop - 1 > start and not lines[stop - 1].strip():  # the blank lines closing the field
            stop -= 1
        return "\n".join(lines[:start] + block + lines[stop:]) + ("\n" if stop == len(lines) else "")
    order = CORE_FIELDS.index(field)
    at = next((i for i in headings if CORE_FIELDS.index(names[i]) > order), None)
    if at is None:  # after every field there is: at the end, on a line of its own
        if lines[-1] == "":
            lines.pop()
        return "\n".join(lines + block) + "\n"
    return "\n".join(lines[:at] + block + lines[at:])


def content_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, prose) for each line of core.md, the ``## field`` part of headings removed."""
    for number, line in enumerate(text_lines(text), start=1):
        heading = core_heading(line)
        if heading is not None:
            split = split_core_heading(heading)
            line = split[1] if split else heading
        yield number, line


EDGE_CUTS = 8  # an id candidate cuts at most this many, or leaves at most this many, of a side's
# punctuation


def id_candidates(word: str) -> list[str]:
    """``word`` and its forms with surrounding punctuation removed, least removed first: an id may
    itself end in punctuation (``mul_le_mul'``). At either end, the cuts are of up to ``EDGE_CUTS``
    characters, or of all but up to that many (an id ending in a prime, in many brackets): every
    cut of ``((…(A5-7)…))`` made (L+1)(T+1) forms, compared in a list, and 300 brackets a side
    took `mem check` 52 s."""
    lead = len(word) - len(word.lstrip(EDGE))
    trail = len(word) - len(word.rstrip(EDGE))
    heads = sorted({*range(min(lead, EDGE_CUTS) + 1), *range(max(lead - EDGE_CUTS, 0), lead + 1)})
    tails = sorted({*range(min(trail, EDGE_CUTS) + 1), *range(max(trail - EDGE_CUTS, 0), trail + 1)})
    forms = sorted(((i, j) for i in heads for j in tails), key=lambda cut: (cut[0] + cut[1], cut))
    return list(dict.fromkeys(form for i, j in forms if (form := word[i:len(word) - j])))


def mentions(text: str) -> Iterator[str]:
    """Every word of the text (candidates for ids)."""
    for _, line in content_lines(text):
        yield from line.split()


_TAIL = ")]}\"'”’“»*`…" + _CLAUSE_END  # what may end a word: closing brackets and quotes, an ellipsis,
# clause ends, in any order (`proved?,`, `proved?…`, `(open?)`)


def _tail(word: str) -> str:
    return word[len(word.rstrip(_TAIL)):]


def _ends_clause(word: str) -> bool:
    return any(c in _CLAUSE_END for c in _tail(word))


def _ends_sentence(word: str) -> bool:
    return any(c in _SENTENCE_END for c in _tail(word))


def _asks(word: str) -> bool:
    """Whether the word ends a question: a `?` among its ending punctuation (`proved?`, `proved?,`,
    `proved?).`, `proved?…`)."""
    return any(c in "?？" for c in _tail(word))


def asked(words: list[str]) -> list[bool]:
    """For each word, whether it lies in a condition, a quotation or a question: a condition word
    comes before it in its clause (one opening its clause governs the sentence, up to ``;`` ``.``
    ``·``: ``if a5-9 proved, a6-8 proved too``), it is inside quotation marks (reported words:
    ``"A5-9 proved" in A4's return``), or its clause ends in ``?``. One pass each way, so a line
    of many words costs no more than their number."""
    count = len(words)
    ends = [_ends_clause(word) for word in words]
    last = [False] * count  # whether the word's clause ends in "?"
    question = False
    for at in range(count - 1, -1, -1):
        if ends[at] or at == count - 1:
            question = _asks(words[at])
        last[at] = question
    quoted = _quoted(words)
    out, condition, governs, opening = [], False, False, True
    for at, word in enumerate(words):
        if at and _ends_sentence(words[at - 1]):
            condition = governs = False
        if at and ends[at - 1]:
            condition, opening = condition and governs, True
        out.append(condition or last[at] or quoted[at])
        if _word(word) in _CONDITIONS and not condition:
            condition, governs = True, (opening and _word(word) in _GOVERNING) or word.endswith(":")
        elif condition and _word(word) in _CONDITIONS and word.endswith(":"):
            governs = True
        opening = opening and _BULLET.fullmatch(word) is not None
    return out


def _quoted(words: list[str]) -> list[bool]:
    """For each word, whether it lies inside double quotation marks (``"…"``, ``“…”``, ``«…»``),
    the marks' own words included; an opening mark never closed runs to the line's end."""
    out, inside = [], False
    for word in words:
        bare = word.lstrip("([*_`")  # `("A5-9 proved")`, `**"A5-9 proved"**`
        opens = not inside and bare[:1] in _OPEN_QUOTES
        inside = inside or opens
        out.append(inside)
        body = bare[1:] if opens else word
        if inside and any(c in _CLOSE_QUOTES for c in body):  # `proved"—rejected;` closes it too
            inside = False
    return out


def claims(text: str) -> Iterator[Claim]:
    """Each word followed by a status word (open, proved, refuted, blocked, stale), directly or
    after up to two linking words: ``A5-8 is proved``, ``A5-8 — proved``, ``A5-8 is now stale``,
    ``A5-8 has been proved``, ``A5-8 status: proved``, the status ending its clause or followed by
    what tells no other use (``A5-8 proved (audit minor)``, ``A5-8 proved at 03:42``). States
    nothing: ``A5-8 is not proved``; a word ending its clause (``A5-8, A5-9 open``: of A5-8); a
    word in a condition (a clause where a condition word comes before it: ``once A5-8 is proved``,
    ``retry E6 if step A5-8 is proved``, ``as soon as A5-8 is proved``; a plan, a report, a hedge
    or an alternative alike: ``A6-8 needs A5-9 proved``, ``d1 claimed A5-9 proved``, ``A3 thinks
    A5-9 refuted``, ``neither A5-8 nor A5-9 is proved``), in quotation marks or in a question
    (``is A5-8 proved?``), the status word's clause included (``A5-8: proved?``); a status in a
    clause an arrow is in (``A5-8 open → refuted``, ``A5-8 proved ⇒ A6-1 proved``: history, a
    plan or an implication); a status used as a verb or of a time past (``A5-8 proved to be
    false``, ``A5-8 refuted A5-9``, ``A5-8 proved earlier``, ``A5-8 refuted if p = 2``); and a
    status its sentence goes on to revise (``A5-8 proved at 03:42, stale since 05:10``)."""
    for number, line in content_lines(text):
        words = line.split()
        asking = asked(words)
        statuses = [_status(word) for word in words]
        changing = changes(words, statuses)
        revised = _revised(words, statuses, asking)
        for at, word in enumerate(words):
            if asking[at] or _ends_sentence(word):
                continue
            for place in range(at + 1, min(at + 4, len(words))):
                heads = _ends_clause(word) and words[place].endswith(":")  # `open: A5-7, A5-8; blocked:`
                if statuses[place] and not (asking[place] or changing[place] or revised[place] or heads
                                            or _other_use(words, place)):
                    yield Claim(number, word, statuses[place])
                if not _links(words, place):
                    break


def changes(words: list[str], statuses: list[str | None]) -> list[bool]:
    """For each word, whether it is a status an arrow (``→``, ``⇒``, ``⇐``…; not ``←``, which says
    what a step rests on) makes no status now: where an arrow has a status before it and one after
    it in its clause, the nearest before it and those after it (``open → refuted``, ``open (r1) →
    proved (r2)``: history; ``A5-8 proved ⇒ A6-1 proved``: an implication; not ``stale`` in
    ``A4-1 stale (A3-2 open → refuted)``), and those after an arrow opening its clause (``→ A6-1
    proved by round 4``: a plan). ``A5-8 → refuted`` (an id becoming it) states it. Here a clause
    does not end at ``:`` (``open → status: refuted``). One pass over each clause."""
    count, changing, at = len(words), [False] * len(words), 0
    while at < count:
        end = at
        while end + 1 < count and not _ends_clause(words[end].removesuffix(":")):  # `→ status: refuted`
            end += 1
        arrows = [i for i in range(at, end + 1) if words[i].strip(",;.") in _ARROWS]
        if arrows:
            held = [i for i in range(at, end + 1) if statuses[i]]
            joining = [arrow for arrow in arrows if held and held[0] < arrow < held[-1]]
            start = max((i for i in held if i < joining[0]), default=end + 1) if joining else end + 1
            if all(_BULLET.fullmatch(words[i]) for i in range(at, arrows[0])):  # opening its clause
                start = min(start, arrows[0])
            for i in held:
                changing[i] = i >= start
        at = end + 1
    return changing


def _other_use(words: list[str], place: int) -> bool:
    """Whether the status word at ``place`` is used otherwise than to state a status now: the word
    after it in its clause makes it a verb (``proved to be false``, ``refuted the claim``,
    ``refuted A5-9``), a past (``proved earlier``, ``open until round 3``) or a condition or an
    alternative (``refuted if p = 2``, ``proved or refuted``)."""
    if place + 1 >= len(words) or _ends_clause(words[place]) or words[place].endswith(")") \
            or words[place + 1][:1] in "([":  # `proved (the counterexample lemma)`: what follows says more
        return False
    after = words[place + 1]
    return _word(after) in _NOT_A_STATE or id_like(after.rstrip(_TAIL))


def _revised(words: list[str], statuses: list[str | None], asking: list[bool]) -> list[bool]:
    """For each word, whether a later clause of its sentence opens with a status of no id of its
    own, which revises a status before it (``A5-8 proved at 03:42, now stale``, ``A5-8 refuted if
    p = 2, proved otherwise``: no status now); an id with none of its own takes it (``A5-8, proved
    by A2``). Here a clause ends at ``,`` ``;`` … but not at ``:`` (``A5-8: proved`` opens with its
    id). Two passes."""
    bare, lead = [False] * len(words), True
    for at, word in enumerate(words):
        if at and _ends_clause(words[at - 1].removesuffix(":")):
            lead = True
        bare[at] = lead and statuses[at] is not None and _revises(words, at) and not asking[at]
        lead = lead and (_BULLET.fullmatch(word) is not None or _word(word) in _BARE_LEAD)
    out, revising = [False] * len(words), False
    for at in range(len(words) - 1, -1, -1):  # the nearest status before a revising one, only
        if at + 1 < len(words) and _ends_sentence(words[at]):
            revising = False
        if revising and statuses[at] is not None:
            out[at], revising = True, False
        revising = revising or bare[at]
    return out


def _revises(words: list[str], at: int) -> bool:
    """Whether the status opening a clause at ``at`` can revise one before it: it ends its clause
    (`, now stale`) or what follows tells when or how (`stale since 05:10`, `proved otherwise`,
    `stale (A5-5 changed)`); not a list's label (`open: A5-9`), a noun's word (`blocked routes`),
    nor one a condition follows (`open again once A5-9 lands`)."""
    if words[at].endswith(":"):
        return False
    if at + 1 == len(words) or _ends_clause(words[at]):
        return True
    end = at + 1  # a clause saying when it would be: `open again once A5-9 lands` revises nothing
    while end + 1 < len(words) and not _ends_clause(words[end]):
        end += 1
    if any(_word(word) in _CONDITIONS for word in words[at + 1:end + 1]):
        return False
    after = words[at + 1]
    return after[:1] in "([" or _word(after) in _REVISING


def _word(word: str) -> str:
    return word.strip(EDGE).casefold()


def _links(words: list[str], at: int) -> bool:
    """Whether ``words[at]`` links an id (or a status) to the status after it: ``is``, ``now``,
    ``—``, ``:``; ``has`` and ``have`` only before ``been``."""
    word = _word(words[at])
    if words[at] in _LINKS or word in _LINKS:
        return True
    return word in _PERFECT and at + 1 < len(words) and _word(words[at + 1]) == "been"


def _status(word: str) -> str | None:
    """The status a word names, as an agent may type it (`ｐｒｏｖｅｄ`, `proved,`), or None."""
    status = plain(word).strip(EDGE).casefold()
    return status if status in STATUSES else None
