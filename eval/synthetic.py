"""Synthetic workspaces for the speed benchmark: N steps in the SPEC format, deterministic per seed.

Runs of about 200 steps (``RUN_STEPS``), each with a tree.json (steps with ids like ``A5-7``, parents,
settings from the shipped ontology, audits), an events.jsonl (briefs, returns naming the steps they
return, audits), brief and return files, one source snapshot and a core.md; ``solve/library.jsonl``
holds every audited final step (status final, and passed or repaired: SPEC M2).

Statement text is math-like: words drawn from a Zipf distribution (exponent ``ZIPF_S``) over a
vocabulary of real mathematical words followed by a long tail of compounds (``quasitorsive``), with
LaTeX fragments, Greek letters, symmetric-space names (GL2m/Sp2m, E₆/F₄) and references to step ids
mixed in. ``python -m mem_retrieval.eval.synthetic DIR --steps N`` writes one."""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

GENERATOR = "synthetic-v2"  # bump when the output changes: a kept workspace is then regenerated
STAMP = ".bench-workspace.json"
RUN_STEPS = 200
ZIPF_S = 1.1
ZIPF_SHIFT = 4.0  # Zipf–Mandelbrot: weight of rank k is 1 / (k + ZIPF_SHIFT) ** ZIPF_S
SETTINGS_TOML = Path(__file__).resolve().parent.parent / "configs" / "settings.toml"

_CORE_WORDS = """
group reductive spherical variety orbit algebra transform sheaf perverse equivariant dual torus
character root multiplicity restricted involution parabolic unipotent lattice module generated
cyclic function unramified split quasi-split inner form symmetric space subgroup quotient fibre
bundle stack moduli local global field ring integer valuation residue characteristic extension
Galois representation irreducible tempered discrete series period integral distinction nonzero
vanishing cohomology homology degree weight highest lowest dominant coweight cocharacter Weyl
chamber wall alcove affine Grassmannian loop arc space stratum closure open dense smooth proper
finite flat etale isomorphism injective surjective kernel image cokernel exact sequence filtration
graded associated spectral convergent bounded compact support constant term Hecke Satake Iwahori
Bruhat Tits building apartment vertex tree distance Plancherel measure density asymptotic cone
Whittaker model Jacquet module Casselman basis Shalika germ Langlands parameter L-function epsilon
factor gamma conductor level newform Fourier coefficient Eisenstein series cusp form automorphic
trace formula orbital stable conjugacy endoscopic transfer fundamental lemma geometric categorical
derived category functor adjoint exactness t-structure heart simple object intersection complex
stalk costalk purity Frobenius eigenvalue Deligne Lusztig Kazhdan polynomial Springer
correspondence nilpotent cone regular semisimple centraliser normaliser Levi Borel Cartan
Chevalley Steinberg Kostant section slice invariant theory polynomial generator relation rank
dimension codimension genus curve surface divisor line bundle ample vector scheme point rational
hyperspecial maximal compact open subgroup Haar volume normalisation spherical-function
eigenvalue Macdonald formula Gindikin-Karpelevich factorisation analytic continuation
meromorphic pole residue functional equation holomorphic entire growth estimate bound lemma
proposition claim counterexample obstruction criterion generation freeness rank-two conjecture
""".split()
_NAMES = ("Hecke Satake Iwahori Bruhat Tits Weyl Langlands Kazhdan Lusztig Deligne Whittaker "
          "Plancherel Jacquet Casselman Shalika Kostant Springer Steinberg Chevalley Borel Cartan "
          "Dynkin Coxeter Frobenius Galois Hodge Tate Serre Macdonald Sakellaridis Venkatesh").split()
_PREFIXES = ("", "quasi", "semi", "pseudo", "hyper", "sub", "super", "co", "anti", "bi", "multi",
             "pre", "non", "para", "tri", "iso", "endo", "auto", "poly", "meta")
_STEMS = ("morph", "top", "graph", "alg", "cycl", "spher", "norm", "regul", "conn", "compact",
          "form", "flat", "proj", "induc", "tors", "perv", "sheav", "fibr", "strat", "cusp", "period",
          "orbit", "lattic", "root", "weight", "chamb", "alcov", "germ", "trac", "spectr", "filtr",
          "grad", "nilpot", "unipot", "tempr", "distinct", "induct", "restrict", "glu", "desc",
          "hensel", "complet", "adel", "ideal", "class", "norm", "trans", "conjug", "centr", "symm",
          "involut", "ramif", "valu", "integr", "harmon", "modul", "tens", "homot", "coher", "duals")
_SUFFIXES = ("ic", "ism", "ity", "al", "ous", "oid", "ian", "ive", "ation", "able", "ent", "ology")
_GLUE = "of the for every with if then is are has and a an over at on by under when".split()

SPACES = ("GL2m/Sp2m", "GL₄/Sp₄", "GL₆/Sp₆", "SL₂/SO₂", "SL_n/SO_n", "E₆/F₄", "E₆/Sp₈", "E₇/SL₈",
          "E₈/SO₁₆", "SO_{2n}/GL_n", "Sp_{2n}/GL_n", "GL_n×GL_n/GL_n", "PGL₂/T", "U(2n)/Sp(2n)",
          "GL_{2n}/GL_n×GL_n", "G₂/SO₄", "F₄/Spin₉", "SO(p,q)/SO(p)×SO(q)", "Sp₄/Sp₂×Sp₂",
          "GL₃/O₃", r"\mathrm{GL}_{2m}/\mathrm{Sp}_{2m}", r"E_6/F_4")
LATEX = (r"H_K\cdot\varphi_0 = C_K", "H_K·φ₀ = C_K", r"\mathcal{O}_F", r"q^{-s}", r"\check{G}_X",
         r"C[\check{A}_X]^{W_X}", r"L^+G", r"\mathrm{IC}_0", "φ₀", "Ǎ_X → Ť", "μ₂", "Sat_G ⋆ IC₀",
         r"$\pi_1(X)$", r"\operatorname{Hom}(\chi, \mathbb{G}_m)", r"\mathbb{F}_q((t))",
         r"$|x|^{s}$", r"\mathrm{GL}_{2m}", r"$\lambda \in X_*(T)^+$", r"$\mathfrak{g}^\theta$",
         r"$K = G(\mathcal{O})$", r"$\varpi^{\lambda}$", r"$\sum_{w \in W} \epsilon(w) e^{w\rho}$",
         "ρ_X", "θ-split torus", r"$\dim X = 2m^2 - m$", r"$\mathbb{Z}_{\ge 0}$", "K\\X(F)",
         r"$\mathcal{H}(G, K)$", "Ĝ_X", r"$\alpha^\vee$", "σ-stable", r"$\langle \lambda, \alpha \rangle$")
GREEK = "αβγδεζηθικλμνξπρστυφχψω"
TOPICS = ("satake", "iwahori", "spherical", "theta", "whittaker", "plancherel", "endoscopy",
          "springer", "periods", "hecke", "jacquet", "casselman", "kostant", "bruhat-tits", "macdonald")
FRAMES = ("two-levels", "generation", "freeness", "fibres", "orbits", "transfer", "asymptotics",
          "lifting", "rank-two", "descent")
UNKNOWN_SETTINGS = ("[Field K]; [Fintype n]", "[CommRing R]", "G split over F", "p odd",
                    "residue characteristic not 2", "X wavefront")
STATUS_P = {"proved": 0.55, "open": 0.15, "refuted": 0.1, "blocked": 0.1, "stale": 0.1}
GRADE_P = {"pass": 0.45, "minor": 0.3, "major": 0.15, "error": 0.1}


def vocabulary() -> list[str]:
    """The words in Zipf rank order (fixed, independent of the seed): real words first, then the
    long tail of compounds."""
    head = list(dict.fromkeys(w.lower() if w not in _NAMES else w for w in _CORE_WORDS + _NAMES))
    rng = np.random.default_rng(12345)
    tail = sorted({p + s + x for p in _PREFIXES for s in _STEMS for x in _SUFFIXES} - set(head))
    rng.shuffle(tail)
    return head + tail[:4000]


def setting_names() -> list[str]:
    """Names and aliases of the shipped ontology (configs/settings.toml), in file order."""
    entries = tomllib.loads(SETTINGS_TOML.read_text(encoding="utf-8")).get("setting", [])
    return [text for e in entries for text in [e["name"], *e.get("aliases", [])]]


class Writer:
    """Draws statements, settings and ids from one seeded generator."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.words = vocabulary()
        ranks = np.arange(1, len(self.words) + 1, dtype=np.float64)
        weights = (ranks + ZIPF_SHIFT) ** -ZIPF_S
        self.cdf = np.cumsum(weights / weights.sum())
        self.settings = setting_names()
        setting_w = np.arange(1, len(self.settings) + 1, dtype=np.float64) ** -0.8
        self.setting_cdf = np.cumsum(setting_w / setting_w.sum())
        self._pool: list[int] = []

    def pick(self, options):
        return options[int(self.rng.integers(len(options)))]

    def word(self) -> str:
        if not self._pool:
            self._pool = np.searchsorted(self.cdf, self.rng.random(4096)).tolist()
        return self.words[min(self._pool.pop(), len(self.words) - 1)]

    def phrase(self, n: int) -> str:
        out = []
        for _ in range(n):
            out.append(self.pick(_GLUE) if self.rng.random() < 0.25 else self.word())
        return " ".join(out)

    def setting(self) -> str:
        r = self.rng.random()
        if r < 0.08:
            return self.pick(UNKNOWN_SETTINGS)
        one = self.settings[int(np.searchsorted(self.setting_cdf, self.rng.random()))]
        if r < 0.18:
            return f"{one}; {self.pick(UNKNOWN_SETTINGS)}"
        return one

    def statement(self, refs: list[str]) -> str:
        """20–50 words of Zipf text with fragments: a space name, LaTeX, Greek, ids of other steps."""
        parts = [self.phrase(int(self.rng.integers(4, 10)))]
        for _ in range(int(self.rng.integers(2, 5))):
            r = self.rng.random()
            if r < 0.35:
                parts.append(f"for {self.pick(SPACES)}")
            elif r < 0.7:
                parts.append(self.pick(LATEX))
            elif r < 0.8:
                parts.append(f"{self.pick(GREEK)}{self.pick('₀₁₂ᵢ')} {self.word()}")
            elif r < 0.9 and refs:
                parts.append(f"by {self.pick(refs)}")
            else:
                parts.append(f"every m ≥ {int(self.rng.integers(1, 5))}")
            parts.append(self.phrase(int(self.rng.integers(3, 9))))
        text = ", ".join(parts) + "."
        return text[:1].upper() + text[1:]

    def choice(self, probs: dict[str, float]) -> str:
        keys = list(probs)
        return keys[int(np.searchsorted(np.cumsum(list(probs.values())), self.rng.random() * 0.999999))]


@dataclass(frozen=True)
class Synthetic:
    """What was generated: counts, and where."""

    root: Path
    steps: int
    runs: int
    events: int
    library: int
    seed: int

    def as_dict(self) -> dict:
        return {"steps": self.steps, "runs": self.runs, "events": self.events,
                "library": self.library, "seed": self.seed, "generator": GENERATOR}


def _stamp(day: int, minute: int) -> str:
    """An ISO time ``day`` days and ``minute`` minutes after 2026-01-01 (any size stays valid)."""
    from datetime import datetime, timedelta, timezone

    stamp = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(days=day, minutes=minute)
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def _run(writer: Writer, root: Path, name: str, day: int, size: int,
         earlier: dict[str, list[str]], library: list[dict]) -> int:
    """Write one run of ``size`` steps; append its library entries; return its event count.
    ``earlier`` holds the library steps of earlier runs by their setting: a run cites only
    library steps whose setting is its own (so M3 holds)."""
    rng = writer.rng
    run_dir = root / name
    for sub in ("memory", "briefs", "returns", "sources"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    fix_setting = writer.setting()
    (run_dir / "sources" / "d1.md").write_text(f"# Table\n\n{writer.phrase(60)}\n", encoding="utf-8")
    events = [{"time": _stamp(day, 0), "actor": "root", "kind": "checkpoint", "ids": [],
               "text": "Fix written; core.md initialised"},
              {"time": _stamp(day, 1), "actor": "root", "kind": "source", "ids": ["d1"],
               "text": f"d1: {writer.phrase(6)} → sources/d1.md"}]
    steps: list[dict] = []
    agent, minute = 0, 2
    while len(steps) < size:
        agent += 1
        briefed, made = False, 0
        for _ in range(int(rng.integers(1, 4))):  # returns of this agent
            if len(steps) >= size:
                break
            if not briefed:
                (run_dir / "briefs" / f"A{agent}.md").write_text(
                    f"# Brief A{agent}\n\n{writer.statement([])}\n", encoding="utf-8")
                events.append({"time": _stamp(day, minute), "actor": "root", "kind": "brief",
                               "ids": [], "text": f"briefs/A{agent}.md"})
                briefed, minute = True, minute + 1
            batch = []
            for _ in range(min(int(rng.integers(4, 16)), size - len(steps))):
                made += 1
                batch.append(_step(writer, f"A{agent}-{made}", f"A{agent}", steps + batch,
                                   earlier.get(fix_setting, [])))
            steps += batch
            ids = [s["id"] for s in batch]
            text = f"A{agent} returns {', '.join(ids[:3])}{'…' if len(ids) > 3 else ''}: {writer.phrase(8)}"
            if rng.random() < 0.25:
                path = f"returns/A{agent}-{len(events)}.md"
                (run_dir / path).write_text(f"# Return · A{agent}\n\n{text}\n\n" + "\n".join(
                    f"{s['id']}: {s['statement']}" for s in batch[:4]) + "\n", encoding="utf-8")
                text = path
            events.append({"time": _stamp(day, minute), "actor": f"A{agent}", "kind": "return",
                           "ids": ids, "text": text})
            minute += int(rng.integers(5, 40))
            audited = [s["id"] for s in batch if s["audit"]]
            if audited and rng.random() < 0.3:
                events.append({"time": _stamp(day, minute), "actor": "audit", "kind": "audit",
                               "ids": audited[:4], "text": f"{writer.pick(list(GRADE_P))}: {writer.phrase(6)}"})
                minute += 1
    tree = {"run": name, "date": _stamp(day, 0)[:10],
            "fix": {"problem": writer.statement([]), "setting": fix_setting,
                    "criterion": "decide every row, with proofs", "checklist": [writer.phrase(8)]},
            "sources": [{"id": "d1", "origin": f"references/{name}.pdf", "retrieved": _stamp(day, 1),
                         "hash": "sha256:" + "0" * 64, "path": "sources/d1.md"}],
            "steps": steps}
    (run_dir / "tree.json").write_text(json.dumps(tree, ensure_ascii=False, indent=1), encoding="utf-8")
    (run_dir / "memory" / "events.jsonl").write_text(
        "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events), encoding="utf-8")
    (run_dir / "memory" / "core.md").write_text(
        f"## phase       round {agent}\n## portfolio   {writer.phrase(6)}\n"
        f"## open gaps   {steps[-1]['id']}\n## next        audit {steps[-1]['id']}\n"
        f"## inputs      {steps[0]['id']} {steps[0]['status']}\n", encoding="utf-8")
    for s in steps:
        audit = s["audit"]
        if s["status"] in ("proved", "refuted", "blocked") and audit and (
                audit["grade"] in ("pass", "minor") or audit["repaired"]):
            entry = {"run": name, "id": s["id"], "kind": s["kind"], "statement": s["statement"],
                     "setting": s["setting"], "hyp": s["hyp"], "status": s["status"],
                     "grade": audit["grade"], "repair": audit["note"] if audit["repaired"] else None,
                     "inserted": _stamp(day, minute + 1)}
            for key in ("missing", "failed_input"):
                if key in s:
                    entry[key] = s[key]
            library.append(entry)
            earlier.setdefault(s["setting"], []).append(f"{name}/{s['id']}")
    return len(events)


def _step(writer: Writer, step_id: str, agent: str, steps: list[dict], earlier: list[str]) -> dict:
    rng = writer.rng
    kind = writer.choice({"lemma": 0.85, "dead_end": 0.1, "error": 0.05})
    local = [s["id"] for s in steps[-30:]]
    parents = sorted({writer.pick(local) for _ in range(int(rng.integers(0, 4)))} if local else set())
    if rng.random() < 0.1:
        parents.append("d1")
    if earlier and rng.random() < 0.05:
        parents.append(writer.pick(earlier))
    status = "blocked" if kind == "dead_end" else writer.choice(STATUS_P)
    audit = None
    if status != "open" and rng.random() < 0.7:
        grade = writer.choice(GRADE_P)
        audit = {"grade": grade, "by": "A7", "note": writer.phrase(5),
                 "repaired": grade in ("major", "error") and rng.random() < 0.4}
    setting = writer.setting()
    # a step's hypotheses say where it holds, as its setting does (M3 weighs both when another run
    # cites it); the draws stay as they were, so the rest of the workspace does not move
    statement = writer.statement(local)
    hypotheses = [setting] if [writer.setting() for _ in range(int(rng.integers(0, 3)))] else []
    step = {"id": step_id, "kind": kind, "agent": agent, "statement": statement,
            "hyp": hypotheses, "setting": setting,
            "parents": parents, "proof": f"1. {writer.phrase(10)} 2. {writer.phrase(10)}",
            "status": status, "audit": audit}
    if kind == "dead_end":
        step["missing"] = writer.statement([])
    if kind == "error":
        step["failed_input"] = writer.phrase(8)
    return step


def generate(root: Path, steps: int, seed: int = 0, run_steps: int = RUN_STEPS) -> Synthetic:
    """Write a workspace of ``steps`` steps under ``root`` (replacing what is there)."""
    root = Path(root)
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    writer = Writer(seed)
    library: list[dict] = []
    earlier: dict[str, list[str]] = {}
    done = events = runs = 0
    while done < steps:
        size = min(steps - done, int(writer.rng.integers(run_steps * 3 // 4, run_steps * 5 // 4 + 1)))
        name = f"{writer.pick(TOPICS)}-{writer.pick(FRAMES)}-{runs:04d}"
        events += _run(writer, root, name, runs, size, earlier, library)
        done, runs = done + size, runs + 1
    (root / "solve").mkdir()
    (root / "solve" / "library.jsonl").write_text(
        "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in library), encoding="utf-8")
    made = Synthetic(root, steps, runs, events, len(library), seed)
    (root / STAMP).write_text(json.dumps(made.as_dict()) + "\n", encoding="utf-8")
    return made


def load(root: Path, steps: int, seed: int) -> Synthetic | None:
    """A workspace generated earlier with the same size, seed and generator, or None."""
    try:
        stamp = json.loads((Path(root) / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (stamp.get("steps"), stamp.get("seed"), stamp.get("generator")) != (steps, seed, GENERATOR):
        return None
    return Synthetic(Path(root), steps, stamp["runs"], stamp["events"], stamp["library"], seed)


def change_statements(root: Path, share: float, seed: int) -> tuple[int, Callable[[], None]]:
    """Rewrite the statements of a ``share`` of the steps (chosen by ``seed``); return how many were
    changed and a function putting the original files back."""
    from mem_retrieval.records.workspace import Workspace

    workspace = Workspace(Path(root).resolve())
    runs = workspace.runs()
    counts = [len(workspace.tree(run).steps) for run in runs]
    total = sum(counts)
    rng = np.random.default_rng(seed + 1)
    chosen = np.sort(rng.choice(total, size=max(1, round(total * share)), replace=False))
    writer = Writer(seed + 2)
    originals: dict[Path, bytes] = {}
    offsets = np.cumsum([0] + counts)
    for index, run in enumerate(runs):
        mine = chosen[(chosen >= offsets[index]) & (chosen < offsets[index + 1])] - offsets[index]
        if not len(mine):
            continue
        path = workspace.tree_path(run)
        originals[path] = path.read_bytes()
        tree = json.loads(originals[path])
        for i in mine.tolist():
            tree["steps"][i]["statement"] = writer.statement([])
        path.write_text(json.dumps(tree, ensure_ascii=False, indent=1), encoding="utf-8")

    def restore() -> None:
        for path, data in originals.items():
            path.write_bytes(data)

    return len(chosen), restore


@dataclass(frozen=True)
class Workload:
    """Queries drawn from a workspace: distinct text queries, query settings, and step ids."""

    texts: tuple[str, ...]     # up to 4n distinct texts: warm-up, timed, with a setting, profiled
    settings: tuple[str, ...]  # query settings paired with ``texts`` for the setting figure
    ids: tuple[str, ...]       # bare step ids (``A5-7``): every run holding one matches
    gids: tuple[str, ...]      # global ids (``run/A5-7``)
    until: str | None = None   # a time about halfway through its events, for ``--until`` (None: no event)


def workload(root: Path, n: int, seed: int) -> Workload:
    """``n`` of each kind of query (``4n`` texts), drawn (by ``seed``) from the steps of the workspace at ``root``:
    a text query is 2–5 words of one step's statement in order, sometimes with a symmetric-space
    name or an off-topic word, as an agent would type it."""
    from mem_retrieval.records.workspace import Workspace

    workspace = Workspace(Path(root).resolve())
    steps = [step for run in workspace.runs() for step in workspace.tree(run).steps]
    writer = Writer(seed + 3)
    rng = writer.rng
    picked = [steps[i] for i in rng.choice(len(steps), size=6 * n, replace=len(steps) < 6 * n)]
    texts: dict[str, None] = {}  # distinct, in order: a repeated query would hit a cache
    for step in picked[: 4 * n]:
        words = [w.strip(".,;:") for w in step.statement.split()]
        words = [w for w in words if len(w) > 2 and w.lower() not in _GLUE] or words
        k = min(len(words), int(rng.integers(2, 6)))
        chosen = [words[i] for i in sorted(rng.choice(len(words), size=k, replace=False))]
        if rng.random() < 0.4:
            chosen.append(writer.pick(SPACES))
        if rng.random() < 0.2:
            chosen.insert(int(rng.integers(len(chosen) + 1)), writer.word())
        texts[" ".join(chosen)] = None
    settings = tuple(writer.settings[int(rng.integers(len(writer.settings)))] for _ in range(n))
    return Workload(texts=tuple(texts), settings=settings,
                    ids=tuple(s.id for s in picked[4 * n: 5 * n]),
                    gids=tuple(s.gid for s in picked[5 * n:]), until=midway(workspace))


def midway(workspace) -> str | None:
    """An event's time about halfway through ``workspace``: the middle event of the run whose log
    starts in the middle (of the runs that have one); None when no run has an event."""
    starts = sorted((first.timestamp, run) for run in workspace.runs()
                    for first in itertools.islice(workspace.events(run), 1))
    if not starts:
        return None
    events = list(workspace.events(starts[len(starts) // 2][1]))
    return events[len(events) // 2].time


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write a synthetic benchmark workspace.")
    parser.add_argument("root", type=Path)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run-steps", type=int, default=RUN_STEPS,
                        help=f"steps a run (default {RUN_STEPS}; 5 makes a workspace of many small runs)")
    args = parser.parse_args(argv)
    if args.run_steps < 1:
        parser.error("--run-steps: give a whole number of 1 or more")
    made = generate(args.root, args.steps, args.seed, run_steps=args.run_steps)
    print(json.dumps(made.as_dict()))


if __name__ == "__main__":
    main()
