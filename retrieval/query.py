"""What a search asks for: one query object each for archive_search and recall_search, the ids
written in a query, the filters they imply, and an as-of point.

A query is checked when it is made (``BadInput`` naming the parameter at fault), so everything
after it can trust it. Filters become SQL built only from integer keys and the closed enums of the
SPEC, never from user text."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from mem_retrieval.indexers.store import NEVER, in_list, key
from mem_retrieval.records.errors import BadInput, type_name
from mem_retrieval.records.ids import (given_run, looks_like_id, plain, ref_problem, slug_run, spellings,
                                       typed_ref)
from mem_retrieval.records.parse import date_alone, iso_time, micros, time_fault
from mem_retrieval.records.types import KINDS, STATUSES, Event
from mem_retrieval.records.validate import MAX_ARGUMENT_CHARS, surrogate_problem

if TYPE_CHECKING:
    import numpy as np

_SPLIT = re.compile(r"[\s,;{}\[\]()\"`]+")
_STRIP = ".:!?"
_REFERENCE = re.compile(r"\\[A-Za-z]*ref\*?")  # LaTeX's \ref, \Cref, \cref, \eqref, \autoref …


def _written(query: str) -> list[str]:
    """The query's words as written (split at ``_SPLIT``), leaving out those of end marks alone."""
    return [w for w in _SPLIT.split(query.strip()) if w.strip(_STRIP)]


def _words(query: str) -> list[str]:
    return [w.strip(_STRIP) for w in _written(query)]


def _forms(word: str, lookalikes: bool = True) -> tuple[str, ...]:
    """The ids a query word may be: the word as written when it ends in punctuation an id may hold
    (a Lean name such as ``List.get?`` or ``Array.get!``), then the word without it (``A5-7.`` at
    a sentence's end); each in its ``spellings`` (``lookalikes``: its look-alike forms too)."""
    written, bare = word.lstrip(_STRIP), word.strip(_STRIP)
    return tuple(dict.fromkeys(spelled for form in ((bare,) if written == bare else (written, bare))
                               for spelled in spellings(form, lookalikes)))


def id_word_forms(query: str) -> list[tuple[frozenset[str], frozenset[str]]]:
    """For each word of ``query`` that may name steps (as ``id_words`` reads them): (its ids as
    typed, in any Unicode normal form; those only its ``plain`` form adds). A look-alike is read
    only when the word as typed names no step (``search._typed_first``): `A5‑7` (U+2011) is
    `A5-7` unless a step has the id `A5‑7` itself."""
    words = _written(query)
    out = []
    for word in words:
        if len(words) == 1 or looks_like_id(word.strip(_STRIP)):
            every = frozenset(f for f in _forms(word) if ref_problem(f) is None)
            typed = every & frozenset(_forms(word, lookalikes=False))
            out.append((typed, every - typed))
    return out


def without_ids(text: str, names: set[str]) -> str:
    """``text`` less the words among ``names`` that it uses as references: those the id lookup
    reads as ids (``ids_in_query``, split as it splits: ``A2-4,A4-3`` holds the word ``A2-4``) and
    those inside a LaTeX cross-reference (``\\Cref{submodularity}``, ``\\ref{g}``: BM25 reads a
    step's id too). A word spelled as a name but used as a word stays (``a form of submodularity``
    among the words of a longer query is no id), and so do the separators, runs of white space as
    one space. ``text`` itself when no word goes."""
    alone = len(_words(text)) == 1
    pieces = re.split(f"({_SPLIT.pattern})", text)  # word, separator, word, …
    kept, citing = [], False
    for at, piece in enumerate(pieces):
        if at % 2:  # a separator: it may close or open a cross-reference's braces
            opens = "{" in piece.rsplit("}", 1)[-1] and bool(_REFERENCE.fullmatch(pieces[at - 1]))
            citing = opens or (citing and "}" not in piece)
            kept.append(piece)
            continue
        word = piece.strip(_STRIP)
        used = alone or citing or looks_like_id(word)
        named = any(form in names and ref_problem(form) is None for form in _forms(piece))
        kept.append("" if used and named else piece)
    return text if kept == pieces else " ".join("".join(kept).split())


def ids_in_query(query: str) -> list[str]:
    """Candidate step ids or global ids written in a query, in order, without repeats.

    A query that is one word is always a candidate. Inside a longer query a bare word counts only
    when it looks like an id (a digit, or one of - _ . ' inside it) so that plain words such as
    'concave' do not jump the ranking; a global id (run/step) always counts."""
    return [form for forms in id_words(query) for form in forms]


def id_words(query: str) -> list[tuple[str, ...]]:
    """``ids_in_query`` by word: each word that may name steps, with the ids it may be, the word
    as written first (``List.get?``, then ``List.get``); a word names a step when one of them does."""
    words = _written(query)
    out: list[tuple[str, ...]] = []
    seen: set[str] = set()
    for word in words:
        bare = word.strip(_STRIP)
        if len(words) == 1 or looks_like_id(bare):
            forms = tuple(f for f in _forms(word) if ref_problem(f) is None and f not in seen)
            if forms:
                out.append(forms)
                seen.update(forms)
    return out


def exact_lookup(query: str) -> bool:
    """Whether the query is only ids that look like ids (``A5-7``, ``run/A5-7 A2-4``): an exact
    lookup, answered by the id hits alone (a one-word plain query such as 'concave' is also a text
    query)."""
    words = _words(query)
    return bool(words) and all(looks_like_id(w) and any(ref_problem(f) is None for f in spellings(w))
                               for w in words)


MAX_QUERY_CHARS = MAX_ARGUMENT_CHARS
# a setting names a field or a class of them with hypotheses (F_q((t)); p odd): a run's Fix setting
# with sixty clauses is 1,700 characters; a page repeats it (a 1 MB one overflowed an MCP client)
MAX_SETTING_CHARS = MAX_QUERY_CHARS


def check_setting(setting: str) -> None:
    """A setting is at most ``MAX_SETTING_CHARS`` characters: a page repeats it."""
    if len(setting) > MAX_SETTING_CHARS:
        raise BadInput(f"is {len(setting):,} characters long; a setting is at most {MAX_SETTING_CHARS:,}",
                       param="setting")


def check_text(text: str, param: str = "query") -> None:
    """A query must be non-empty Unicode text (an unpaired surrogate means bytes that were not
    UTF-8) of at most ``MAX_QUERY_CHARS`` characters: a long statement is about 1,400, and the
    full-text search holds about 16 KB per query word (3 million words asked for 49 GB)."""
    if not text or not plain(text).strip():  # white space, or characters that draw nothing
        raise BadInput("is empty", param=param)
    if len(text) > MAX_QUERY_CHARS:
        raise BadInput(f"is {len(text):,} characters long; at most {MAX_QUERY_CHARS:,} are searched "
                       "(ask with the statement's key sentences)", param=param)
    if problem := surrogate_problem(text):
        raise BadInput(problem, param=param)


def searched_part(text: str) -> str:
    """The part of a record's ``text`` (a Fix problem, a statement) that a query made of it searches:
    all of it, or, white space stripped from its ends, its first ``MAX_QUERY_CHARS`` characters cut
    at the last white space before the limit (at the limit where there is none). A person is told
    to ask with the key sentences; the evaluations and ``mem tune`` ask with what the records
    hold, which no limit may refuse."""
    if len(text) <= MAX_QUERY_CHARS:
        return text
    text = text.strip()  # 20,000 spaces first left a cut of spaces alone: "QUERY is empty"
    if len(text) <= MAX_QUERY_CHARS:
        return text
    cut = text[:MAX_QUERY_CHARS + 1]
    space = max(cut.rfind(" "), cut.rfind("\n"), cut.rfind("\t"))
    return text[:space] if space > 0 and text[:space].strip() else text[:MAX_QUERY_CHARS]


def asks_something(text: str) -> bool:
    """Whether ``text`` (a ``searched_part``) asks a search something: one drawing nothing (white
    space and characters that draw nothing) or holding bytes that were not UTF-8 is refused, and
    one holding no word a search reads (punctuation, function words: ``Retriever.unsearchable``)
    finds nothing; an evaluation asking with a record's text leaves such a part out rather than
    stop on it, or count what it cannot find as missed."""
    from mem_retrieval.text.tokenize import tokenize

    return bool(text) and not surrogate_problem(text) and bool(tokenize(text))  # (no word: none drawn)


@dataclass(frozen=True)
class Until:
    """Memory as it stood at an event: events up to it, steps written by then (first named, or
    inserted in the library when no event names them: ``records.workspace.first_written``). At an
    event of a run (``run``, ``seq``), the steps of other runs its log has named by then (by global
    id, in an event's ids or its text: ``named``, their keys) are memory too, whatever their own
    runs' clocks say: the run knew them (runs kept apart need not agree on time)."""

    micros: int                 # the time cut (epoch microseconds)
    run: str | None = None      # with ``seq``: the run whose log position is exact
    seq: int | None = None
    named: tuple[int, ...] = ()  # keys of other runs' steps ``run``'s log names up to ``seq``

    def admits(self, event: Event) -> bool:
        """Whether ``event`` is in memory as of this cut (what ``Filters.where("events")`` keeps):
        by its position in the cut's own run, else by time."""
        if self.seq is not None and self.run == event.run:
            return event.seq <= self.seq
        return micros(event.timestamp) <= self.micros

    def inserted(self, inserted_ts):
        """Whether a library entry inserted at ``inserted_ts`` (epoch microseconds, ``NEVER`` when
        never; an int, or a numpy array of them, element by element) is in the library as of this
        cut (what ``Filters`` keeps with ``library``)."""
        return (inserted_ts > NEVER) & (inserted_ts <= int(self.micros))


@dataclass(frozen=True)
class Hidden:
    """Memory as it stood before a step was written (leave-one-out, SPEC §10), what ``hide``
    resolves to (``CitationGraph.before``): of its own run only the steps written by its own log
    position (``records.workspace.first_written``) are in memory, as ``until`` that position
    would leave them (``run_key``, ``seq``: its run and that position; ``seq`` None when it is
    neither named nor dated: nothing says which run-mates came before it, and they stay); and the
    step itself (with its library copy, the same key) and every step citing it or one of the
    run-mates cut, directly or through others (each written after it), are invisible (``keys``).
    The step's own links date nothing: a run-mate it cites that its log names later is cut like any
    other (keeping it made what memory held depend on the answer). Other runs are not cut by time:
    their clocks need not agree with this run's, while a citation always points back in time."""

    keys: tuple[int, ...]
    run_key: int | None = None
    seq: int | None = None

    @classmethod
    def only(cls, gid: str) -> "Hidden":
        """The step alone: what is hidden when the index does not know the step."""
        return cls((key(gid),))


_TEXT_OR_NONE = ("setting", "run", "kind", "status", "exclude_run", "hide", "hide_run", "strategy",
                 "context_run")
_TRUE_OR_FALSE = ("any_setting", "library")


@dataclass(frozen=True)
class ArchiveQuery:
    """One archive_search: its text and everything that narrows or orders its result list.

    ``setting`` is the setting the hits will be used in (SPEC §8; incompatible hits are left out
    unless ``any_setting``). ``run``, ``kind``, ``status`` keep only matching steps; ``library`` keeps
    only library steps; ``exclude_run`` leaves a run out (a run cannot reuse itself); ``hide`` is a
    step's global id: memory as it stood before it was written (leave-one-out, SPEC §10:
    ``Hidden``); ``hide_run`` is a run: memory as it stood before the run began, as its Fix's
    Recall sees it (``CitationGraph.before_run``: its steps, and the steps citing them, are not in
    memory); ``until`` is memory as of an event (a ``--until`` value, resolved against the
    workspace, or an ``Until``); ``library_before`` (with ``library``) keeps only the entries
    inserted before that time (the library as a run met it at its start). ``context_run`` is the
    run the query is asked from: what its steps already cite, and which runs they cite, guides the
    graph strategies (it filters nothing). ``strategy`` None is the configured default."""

    text: str
    setting: str | None = None
    any_setting: bool = False
    run: str | None = None
    kind: str | None = None
    status: str | None = None
    library: bool = False
    exclude_run: str | None = None
    hide: str | None = None
    hide_run: str | None = None
    until: str | Until | None = None
    library_before: datetime | None = None
    strategy: str | None = None
    context_run: str | None = None

    def __post_init__(self) -> None:
        # the types of one made beforehand (the API judges its own keywords alike, ``functions``)
        for name in _TRUE_OR_FALSE:
            if not isinstance(getattr(self, name), bool):
                raise BadInput(f"must be true or false, not {type_name(getattr(self, name))}", param=name)
        for name in ("text", *_TEXT_OR_NONE, "until"):
            value = getattr(self, name)
            if not (isinstance(value, str) or (value is None and name != "text")
                    or (name == "until" and isinstance(value, Until))):
                raise BadInput(f"must be a string, not {type_name(value)}", param=name)
        check_text(self.text)
        if self.context_run is not None and not self.context_run.strip():
            object.__setattr__(self, "context_run", None)
        object.__setattr__(self, "run", given_run(self.run))
        for name in ("context_run", "exclude_run", "hide_run"):  # typed with a look-alike dash
            object.__setattr__(self, name, slug_run(getattr(self, name), name))
        if self.kind is not None and self.kind not in KINDS:
            raise BadInput(f"{self.kind!r} is not one of {', '.join(KINDS)}", param="kind")
        if self.status is not None and self.status not in STATUSES:
            raise BadInput(f"{self.status!r} is not one of {', '.join(STATUSES)}", param="status")
        if self.hide is not None and (ref_problem(self.hide) or "/" not in self.hide):
            raise BadInput(f"{self.hide!r} is not a global id (run/step)", param="hide")
        if self.hide is not None and self.hide_run is not None:
            raise BadInput("hides a step: give hide or hide_run, not both", param="hide_run")
        if self.library_before is not None and not (
                self.library and isinstance(self.library_before, datetime) and self.library_before.tzinfo):
            raise BadInput("is a time with a zone, and only with library", param="library_before")
        if self.setting is not None and not self.setting.strip():
            object.__setattr__(self, "setting", None)
        if self.setting is not None:
            check_setting(self.setting)

    def filters(self, until: Until | None, hidden: Hidden | None) -> "Filters":
        """The prefilter of this query, with its ``until`` and ``hide`` resolved (``hidden``:
        ``Searcher.before`` of ``hide``)."""
        return Filters(run=self.run, kind=self.kind, status=self.status, exclude_run=self.exclude_run,
                       hide=hidden, until=until, library=self.library,
                       library_before=None if self.library_before is None else micros(self.library_before))


@dataclass(frozen=True)
class RecallQuery:
    """One recall_search: a text query, or every event naming ``id`` (in time order); ``run`` and
    ``until`` narrow it."""

    text: str | None = None
    id: str | None = None
    run: str | None = None
    until: str | Until | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "run", given_run(self.run))  # typed with a look-alike dash
        has_text = self.text is not None and bool(plain(self.text).strip())  # (check_text's empty)
        if has_text == (self.id is not None):
            raise BadInput("give a query text or an id, not both" if has_text
                           else "give a query text or an id")
        if has_text:
            check_text(self.text)
        else:
            object.__setattr__(self, "id", typed_ref(self.id))  # a run typed with a look-alike dash
            problem = ref_problem(self.id)
            if problem:
                raise BadInput(problem, param="id")

    @property
    def ref(self) -> str | None:
        """The step ``id`` names: a bare id with a run is that run's step (SPEC §2); a bare id
        alone, a step of any run with that id."""
        if self.id is None or "/" in self.id or self.run is None:
            return self.id
        return f"{self.run}/{self.id}"


@dataclass(frozen=True)
class Filters:
    """The prefilter of a search, as SQL over the index's key columns."""

    run: str | None = None
    kind: str | None = None
    status: str | None = None
    exclude_run: str | None = None
    hide: Hidden | None = None
    until: Until | None = None
    library: bool = False       # only steps in solve/library.jsonl (in_library; with until, inserted by then)
    library_before: int | None = None  # with library: inserted before then (epoch micros)

    def memory(self) -> "Filters":
        """What the search may know of: only the filters that cut memory as it stood (``hide``,
        ``until``), without those that choose among it (run, kind, status, library). BM25 counts
        its statistics over it, the citation graph its links."""
        return Filters(hide=self.hide, until=self.until)

    def where(self, table: str, extra: list[str] | None = None) -> str | None:
        """The prefilter as SQL, built only from integer keys and the closed enums."""
        parts = list(extra or [])
        if self.run is not None:
            parts.append(f"run_key = {key(self.run)}")
        if self.exclude_run is not None:
            parts.append(f"run_key != {key(self.exclude_run)}")
        if table == "steps":
            if self.hide is not None:
                parts.extend(self._before())
            if self.kind is not None:
                parts.append(f"kind = '{KINDS[KINDS.index(self.kind)]}'")
            if self.status is not None:
                parts.append(f"status = '{STATUSES[STATUSES.index(self.status)]}'")
            if self.library:
                parts.append("in_library = true")
                if self.until is not None:  # in the library by then
                    parts.append(f"inserted_ts > {NEVER} AND inserted_ts <= {int(self.until.micros)}")
                if self.library_before is not None:
                    parts.append(f"inserted_ts > {NEVER} AND inserted_ts < {int(self.library_before)}")
        if self.until is not None:
            parts.append(self._as_of(table))
        return " AND ".join(f"({p})" for p in parts) if parts else None

    def mask(self, columns: "Mapping[str, np.ndarray]") -> "np.ndarray | None":
        """The same prefilter over a steps table held in memory (``columns`` by their index names:
        key, run_key, kind, status, in_library, inserted_ts, named_ts, named_seq; each needed only when a
        filter reads it): True where ``where("steps")`` keeps the row, None when it keeps every
        row. The two are checked against each other on LanceDB (tests/test_resident.py)."""
        import numpy as np

        parts = []
        if self.run is not None:
            parts.append(columns["run_key"] == key(self.run))
        if self.exclude_run is not None:
            parts.append(columns["run_key"] != key(self.exclude_run))
        if self.hide is not None:
            hide = self.hide
            parts.append(~np.isin(columns["key"], np.asarray(hide.keys, dtype=np.int64)))
            if hide.run_key is not None and hide.seq is not None:
                parts.append((columns["run_key"] != hide.run_key)
                             | ((columns["named_seq"] >= 0) & (columns["named_seq"] <= hide.seq)))
        if self.kind is not None:
            parts.append(columns["kind"] == self.kind)
        if self.status is not None:
            parts.append(columns["status"] == self.status)
        if self.library:
            parts.append(np.asarray(columns["in_library"], dtype=bool))
            if self.until is not None:
                parts.append(self.until.inserted(columns["inserted_ts"]))
            if self.library_before is not None:
                inserted = columns["inserted_ts"]
                parts.append((inserted > NEVER) & (inserted < int(self.library_before)))
        if self.until is not None:
            until = self.until
            named = (columns["named_ts"] > NEVER) & (columns["named_ts"] <= int(until.micros))
            if until.run is not None and until.seq is not None:
                own = columns["run_key"] == key(until.run)
                by_seq = (columns["named_seq"] >= 0) & (columns["named_seq"] <= int(until.seq))
                if until.named:
                    named = named | np.isin(columns["key"], np.asarray(until.named, dtype=np.int64))
                named = np.where(own, by_seq, named)
            parts.append(named)
        if not parts:
            return None
        keep = parts[0].copy()
        for part in parts[1:]:
            keep &= part
        return keep

    def _before(self) -> list[str]:
        hide = self.hide
        parts = [f"NOT ({in_list('key', hide.keys)})"]
        if hide.run_key is not None and hide.seq is not None:
            parts.append(f"run_key != {int(hide.run_key)} "
                         f"OR (named_seq >= 0 AND named_seq <= {int(hide.seq)})")
        return parts

    def _as_of(self, table: str) -> str:
        until = self.until
        cut = int(until.micros)
        exact = until.run is not None and until.seq is not None
        if table == "steps":
            by_time = f"(named_ts > {NEVER} AND named_ts <= {cut})"
            if not exact:
                return by_time
            run_key = key(until.run)
            if until.named:  # what the run's log names by then, of other runs
                by_time = f"({by_time} OR {in_list('key', until.named)})"
            return (f"((run_key = {run_key} AND named_seq >= 0 AND named_seq <= {int(until.seq)}) "
                    f"OR (run_key != {run_key} AND {by_time}))")
        if not exact:
            return f"ts <= {cut}"
        run_key = key(until.run)
        return f"((run_key = {run_key} AND seq <= {int(until.seq)}) OR (run_key != {run_key} AND ts <= {cut}))"


_DATED = re.compile(r"\d{4,}(?:-?\d\d-?\d\d|-?W\d\d(?:-?\d)?|-?\d{3})(?:[Tt ]|$)")  # a date (calendar,
# week or ordinal; extended or basic) that a time follows or ends the value: what a time starts with


def parse_time_arg(value: str) -> datetime | None:
    """An ISO time with a zone, or None when ``value`` is not a time."""
    try:
        stamp = iso_time(value)
    except ValueError as err:
        if _DATED.match(value) or date_alone(value):  # a date, in any ISO form: not an event's id
            raise BadInput(time_fault(value, f"{value!r} is not a valid time ({err})"),
                           param="until") from None
        return None
    if stamp.tzinfo is None:
        raise BadInput(time_fault(value, f"{value!r} is a time without a zone (write Z or +hh:mm)"),
                       param="until")
    return stamp
