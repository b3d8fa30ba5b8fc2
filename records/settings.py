"""The settings ontology (SPEC §8): which setting implies which, and a step's ``setting_match``."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from mem_retrieval.records.errors import InputError
from mem_retrieval.records.files import stamp
from mem_retrieval.records.ids import plain
from mem_retrieval.records.notation import latex_plain
from mem_retrieval.records.parse import read_toml, text_lines
from mem_retrieval.records.validate import Fields

SAME, IMPLIED, UNKNOWN, INCOMPATIBLE = "same", "implied", "unknown", "incompatible"
SHIPPED = Path(__file__).resolve().parent.parent / "configs" / "settings.toml"


# White space beside a script, inside a bracket or beside '=' draws nothing in mathematics:
# \mathbb{F}_q ((t)), F_q( (t) ), \mathbb{Q} _p and k=C are F_q((t)), Q_p and k = C (a space after
# a closing bracket is kept: it parts words, "F_q((t)) in LaTeX").
_TIGHT = re.compile(r"\s*([_^=(\[])\s*|\s+([)\]])")
# A clause names a class however it is quantified or numbered: "every p-adic field", "the p-adic
# numbers", "local fields" and "finite extensions of Q_p" name what their singular, bare form does.
# A word before a word only, and "a"/"an" in lower case only: in "A local; A Noetherian" or
# "a > 0", A and a are variables. Read so only to look an entry up (``Ontology.entry``).
_QUANTIFIER = re.compile(r"^(?:(?:[Ee]very|[Ee]ach|[Aa]ny|[Aa]ll|[Tt]he|[Aa]rbitrary|an?)\s+)+(?=[^\W\d_])")
_PLURAL = re.compile(r"\b(field|extension)s\b", re.IGNORECASE)
_NON_ARCHIMEDEAN = re.compile(r"\bnon[\s-]?archimedean\b", re.IGNORECASE)


def _as_drawn(text: str) -> str:
    r"""In plain characters (``records.ids.plain``: NFKC, a dash drawn as '-' made '-', invisible
    characters dropped; an agent's ``non‑archimedean`` with U+2011, which NFKC keeps, is
    ``non-archimedean``), its LaTeX read as drawn (``records.notation.latex_plain``:
    ``\mathbb{F}_q((t))`` is ``F_q((t))``), white space collapsed and dropped where it draws
    nothing (``_TIGHT``). Case kept: ``\mathfrak{gl}_n`` is no ``GL_n``."""
    return _TIGHT.sub(lambda m: m.group(1) or m.group(2), " ".join(latex_plain(plain(text)).split()))


def _bare(clause: str) -> str:
    """A clause (as drawn, case kept) as it names a class: no quantifier or article before it, a
    plural singular, ``non archimedean`` hyphenated; case folded, to look an entry up."""
    clause = _NON_ARCHIMEDEAN.sub("non-archimedean", _PLURAL.sub(r"\1", clause))
    return _QUANTIFIER.sub("", clause).casefold()


def normalize(text: str, fold: bool = True) -> str:
    """A setting (or a name or alias of the ontology) as it is matched (SPEC §8): as drawn
    (``_as_drawn``), and case folded unless ``fold`` is False (a clause outside the ontology is
    compared by its text, where case tells objects apart)."""
    text = _as_drawn(text)
    return text.casefold() if fold else text


def _drawn(text: str) -> str:
    """What a message adds where ``text`` holds LaTeX read as drawn (``\\mathbb{F}_q`` is F_q): why
    two spellings are one name."""
    drawn = latex_plain(plain(text))
    return "" if drawn == plain(text) else f" (LaTeX is read as drawn: {text!r} is {drawn!r})"


def clauses(setting: str, fold: bool = True) -> list[str]:
    """A setting's clauses (separated by ';'), normalised (``normalize``, case kept unless
    ``fold``); empty clauses dropped. Split after NFKC: a fullwidth ';' (U+FF1B) or the Greek
    question mark (U+037E, drawn as ';') is one."""
    parts = (part.strip() for part in _as_drawn(setting).split(";"))
    return [part.casefold() if fold else part for part in parts if part]


def remembered(memo: dict, key, limit: int, compute):
    """``memo[key]``, computed and stored when missing; a memo past ``limit`` entries starts over.
    Requests on other threads may fill (or clear) it meanwhile: the value computed is returned."""
    found = memo.get(key)
    if found is None:
        found = compute()
        if len(memo) > limit:
            memo.clear()
        memo[key] = found
    return found


@dataclass(frozen=True)
class Ontology:
    """Entries by canonical name, and what each implies directly; ``closure(name)`` holds every
    entry it implies, itself included, worked out for the entries asked about (every entry's,
    built at once, held the square of a chain's length: 16,000 entries each implying the next
    took 21 s and 5 GB to load)."""

    alias: dict[str, str]           # normalised name or alias -> canonical name
    direct: dict[str, frozenset[str]]
    names: dict[str, str] = field(default_factory=dict)  # canonical name -> the name as written
    _memo: dict = field(default_factory=dict, compare=False, repr=False)  # closures, queries read

    def _remember(self, key, make):
        return remembered(self._memo, key, 65536, make)

    def closure(self, name: str) -> frozenset[str]:
        """Every entry ``name`` implies, itself included (``implies``, transitively)."""
        def reach() -> frozenset[str]:
            seen, todo = {name}, [name]
            while todo:
                for target in self.direct[todo.pop()]:
                    if target not in seen:
                        seen.add(target)
                        todo.append(target)
            return frozenset(seen)

        return self._remember(("closure", name), reach)

    def entry(self, clause: str) -> str | None:
        """The entry a clause names: by its name or an alias (``normalize``), else by the class
        its bare form names (``_bare``: "every p-adic field", "local fields"); None for neither."""
        def look() -> str:  # "": none (the memo keeps no None)
            bare = _bare(normalize(clause, fold=False))
            return self.alias.get(normalize(clause)) or self.alias.get(bare, "")

        return self._remember(("entry", clause), look) or None

    def _query(self, setting: str) -> tuple[frozenset[str], frozenset[str], frozenset[str], frozenset[str]]:
        """A query setting as ``match`` reads it, once a setting (a step's hypotheses are each
        matched against it: each read it again, and a run's Fix setting of thousands of clauses cost
        its length times their number): its clauses, the entries they name, every entry those
        imply, and what ``same`` compares."""
        def read():
            query = clauses(setting, fold=False)
            known = frozenset(self.entry(c) for c in query) - {None}
            implied = frozenset().union(*(self.closure(e) for e in known))
            return frozenset(query), known, implied, frozenset(self.entry(c) or c for c in query)

        return self._remember(("query", setting), read)

    def reading(self, setting: str) -> frozenset[str]:
        r"""What M3 reads of ``setting``: each clause as the entry it names, else as its normalised
        text, case kept (``match``'s ``same``): ``F_q((t))``, ``𝔽_q((t)) `` and ``Fq((t))`` read
        alike, ``G = GL_n`` and ``\mathfrak{g} = \mathfrak{gl}_n`` do not."""
        return self._query(setting)[3]

    def nearest(self, clause: str, n: int = 3) -> list[str]:
        """The entries whose name or an alias is closest to ``clause`` (for a helpful warning)."""
        import difflib

        close = difflib.get_close_matches(normalize(clause), list(self.alias), n=3 * n, cutoff=0.5)
        return list(dict.fromkeys(self.names.get(self.alias[c], self.alias[c]) for c in close))[:n]

    def match(self, query_setting: str, step_setting: str) -> str:
        """``setting_match`` of a step's setting against a query setting (SPEC §8).

        A query clause implies a step clause when both name known entries and the step's is in the
        query's closure, or when the two clauses are the same text (known or not; case kept). A known step
        clause implied by no query clause is ``incompatible`` when the query names at least one
        known entry (only known entries imply anything), else ``unknown`` (a query setting wholly
        outside the ontology cannot be judged).
        """
        step = clauses(step_setting, fold=False)
        if not step:
            return UNKNOWN
        asked, q_known, implied_by_query, drawn = self._query(query_setting)
        verdicts = []
        for clause in step:
            entry = self.entry(clause)
            if clause in asked or (entry is not None and entry in implied_by_query):
                verdicts.append(IMPLIED)
            elif entry is None or not q_known:
                verdicts.append(UNKNOWN)
            else:
                verdicts.append(INCOMPATIBLE)
        if INCOMPATIBLE in verdicts:
            return INCOMPATIBLE
        if UNKNOWN in verdicts:
            return UNKNOWN
        return SAME if {self.entry(c) or c for c in step} == drawn else IMPLIED

    def unmet_hypotheses(self, setting: str, hyps: Sequence[str]) -> list[str]:
        """The hypotheses of a step that ``setting`` does not imply: each read as a setting, and
        ``incompatible`` with it. A hypothesis outside the ontology (``p odd``, ``n ≥ 1``) is not a
        setting and never counts."""
        return self.hypotheses(setting, hyps)[0]

    def hypotheses(self, setting: str, hyps: Sequence[str]) -> tuple[list[str], list[str]]:
        """A step's hypotheses, each matched once against ``setting``: those it does not imply
        (``unmet_hypotheses``), and those naming a setting the ontology knows of which it cannot
        say whether ``setting`` implies them (``setting`` names nothing it knows: a step proved
        over Q_p alone, cited under a setting outside the ontology, went unsaid)."""
        unmet, unjudged = [], []
        for h in hyps:
            verdict = self.match(setting, h)
            if verdict == INCOMPATIBLE:
                unmet.append(h)
            elif verdict == UNKNOWN and any(self.entry(c) for c in clauses(h, fold=False)):
                unjudged.append(h)
        return unmet, unjudged

    def reusable(self, setting: str, step_setting: str, hyps: Sequence[str]) -> bool:
        """M3 (SPEC §7): whether a step of ``step_setting`` with ``hyps`` may be reused where
        ``setting`` holds: neither its setting nor one of its hypotheses is incompatible with it
        (``unknown`` ones are for an auditor, not refused)."""
        return (self.match(setting, step_setting) != INCOMPATIBLE
                and not self.unmet_hypotheses(setting, hyps))


def _read(path: Path) -> list[tuple[dict, str]]:
    data, text = read_toml(path)
    unknown = sorted(set(data) - {"setting"})
    if unknown:
        at = re.search(r"^[ \t]*\[*\s*%s\b" % re.escape(unknown[0]), text, re.MULTILINE)
        raise InputError(str(path), text.count("\n", 0, at.start()) + 1 if at else None, unknown[0],
                         "unknown table or key (a settings file holds [[setting]] entries only)")
    entries = data.get("setting", [])
    if not isinstance(entries, list):
        at = re.search(r"^[ \t]*(\[\s*setting\s*\]|setting\s*=)", text, re.MULTILINE)
        raise InputError(str(path), text.count("\n", 0, at.start()) + 1 if at else None, "setting",
                         "must be an array of tables ([[setting]])")
    return [(entry, str(path)) for entry in entries]


def build(entries: list[tuple[dict, str]]) -> Ontology:
    """Merge entries (later ones override earlier by name), check them, close ``implies``."""
    by_name: dict[str, tuple[dict, str]] = {}
    counts: dict[str, int] = {}
    named: dict[tuple[str, str], int] = {}  # (file, name) -> the entry's index there
    for entry, file in entries:
        i = counts[file] = counts.get(file, -1) + 1  # the entry's index in its own file
        f = Fields(entry, file, None, f"setting[{i}].", ("name", "aliases", "implies"),
                   kind="a [[setting]] table")
        if not f.has("name"):
            f.fail("name", "missing (each [[setting]] needs a name)")
        f.str("name", nonempty=True)
        f.str_list("aliases")
        f.str_list("implies")
        if (file, normalize(entry["name"])) in named:  # a later file overrides; one file, no twice
            earlier = named[file, normalize(entry["name"])]
            at = _entry_line(file, f"setting[{earlier}].name")
            f.fail("name", f"{entry['name']!r} is already the name of setting[{earlier}]"
                   + (f" (line {at})" if at else "") + ": one entry a name in a file (the last "
                   "would override the first in silence)" + _drawn(entry["name"]))
        named[file, normalize(entry["name"])] = i
        by_name[normalize(entry["name"])] = (entry, file)
    alias: dict[str, str] = {}
    read = {file: i for i, (_, file) in reversed(list(enumerate(entries)))}  # each file's first entry
    for name, (entry, file) in by_name.items():
        for text in [entry["name"], *entry.get("aliases", [])]:
            key = normalize(text)
            if alias.get(key, name) != name:  # blamed on the later file's entry: the workspace's
                other, elsewhere = by_name[alias[key]]
                if read[elsewhere] > read[file]:  # an override keeps its name's place
                    entry, file, other = other, elsewhere, entry
                raise InputError(file, None, f"{entry['name']}.aliases",
                                 f"{text!r} names both {other['name']!r} and {entry['name']!r}"
                                 + _drawn(text))
            alias[key] = name
    direct: dict[str, set[str]] = {}
    for name, (entry, file) in by_name.items():
        direct[name] = set()
        for target in entry.get("implies", []):
            canonical = alias.get(normalize(target))
            if canonical is None:
                raise InputError(file, None, f"{entry['name']}.implies",
                                 f"{target!r} is not a setting of the ontology")
            direct[name].add(canonical)
    _check_acyclic(direct, by_name)
    return Ontology(alias=alias, direct={name: frozenset(targets) for name, targets in direct.items()},
                    names={name: entry["name"] for name, (entry, _) in by_name.items()})


def _cycle(direct: dict[str, set[str]]) -> list[str] | None:
    """A cycle in ``implies`` (each entry of it implies the next, the last the first), else None:
    depth first from each entry in sorted order, its targets in sorted order, on a stack of its own
    (an ontology a program wrote, implying along a chain thousands deep, is no RecursionError)."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    for root in sorted(direct):
        if root in state:
            continue
        path, stack = [root], [iter(sorted(direct[root]))]
        state[root] = 1
        while stack:
            target = next(stack[-1], None)
            if target is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(target) == 1:
                return path[path.index(target):]
            elif target not in state:
                state[target] = 1
                path.append(target)
                stack.append(iter(sorted(direct[target])))
    return None


def _check_acyclic(direct: dict[str, set[str]], by_name: dict[str, tuple[dict, str]]) -> None:
    loop = _cycle(direct)
    if loop is None:
        return
    # blame the entry closing the loop, or one the workspace wrote: that file has the fault
    ours = [i for i, n in enumerate(loop) if by_name[n][1] != str(SHIPPED)]
    at = len(loop) - 1 if not ours or ours[-1] == len(loop) - 1 else ours[-1]
    loop = loop[at + 1:] + loop[:at + 1]
    blamed = by_name[loop[-1]]
    raise InputError(blamed[1], None, f"{blamed[0]['name']}.implies",
                     f"cycle in implies: {' -> '.join(loop + loop[:1])}")


@lru_cache(maxsize=8)
def _load_cached(paths: tuple[str, ...], stamps: tuple) -> Ontology:
    entries: list[tuple[dict, str]] = []
    for path in paths:
        entries.extend(_read(Path(path)))
    try:
        return build(entries)
    except InputError as error:
        problem = error.problem
        if problem.line is None and problem.field:
            raise InputError(problem.file, _entry_line(problem.file, problem.field), problem.field,
                             problem.message) from None
        raise


_HEADER = re.compile(r"\s*\[\[\s*setting\s*\]\]")
_KEY = re.compile(r'\s*"?([A-Za-z_-]+)"?\s*=')


def _entry_line(path: str, field: str) -> int | None:
    """The line of an entry's key in a settings.toml, for an error's field: ``setting[2].implies``
    (the third [[setting]] of the file) or ``NAME.implies`` (the entry named NAME); an element,
    ``implies[1]``, is on its list's line."""
    head, _, key = field.rpartition(".")
    key = re.sub(r"\[\d+\]$", "", key)
    try:
        lines = text_lines(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None
    blocks: list[tuple[int, dict[str, int], list[str]]] = []  # header line, key lines, name
    for number, line in enumerate(lines, start=1):
        if _HEADER.match(line):
            blocks.append((number, {}, []))
            continue
        match = _KEY.match(line)
        if match and blocks:
            blocks[-1][1].setdefault(match.group(1), number)
            if match.group(1) == "name":
                try:
                    blocks[-1][2].append(str(tomllib.loads(line.strip())["name"]))
                except (tomllib.TOMLDecodeError, KeyError):
                    pass
    index = re.fullmatch(r"setting\[(\d+)\]", head)
    if index:
        chosen = blocks[int(index.group(1))] if int(index.group(1)) < len(blocks) else None
    else:
        chosen = next((b for b in blocks if b[2] and normalize(b[2][0]) == normalize(head)), None)
    return None if chosen is None else chosen[1].get(key, chosen[0])


def load_ontology(workspace: Path | None = None) -> Ontology:
    """The shipped ontology, extended by ``WORKSPACE/solve/settings.toml`` when it exists."""
    paths = [SHIPPED]
    if workspace is not None and os.path.lexists(workspace / "solve" / "settings.toml"):
        paths.append(workspace / "solve" / "settings.toml")  # a folder or a dangling link there is
        # bad input: its entries would be silently dropped
    return _load_cached(tuple(str(p) for p in paths), tuple(stamp(p) for p in paths))
