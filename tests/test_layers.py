"""The layout is the architecture: each layer imports only the layers below it, never one above.

records (the workspace files as typed records) → configs → text (tokenizer, embedding model) →
indexers (LanceDB tables) → retrieval (the query path) → eval (quality) → the Memory API (the
package root) → cli. Every import counts, those inside functions included (a lazy import is still
a dependency)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "mem_retrieval"
LAYERS = ["records", "configs", "text", "indexers", "retrieval", "eval", "", "cli"]  # "" = the root


def _folders() -> dict[str, Path]:
    """``{subpackage: folder}`` from pyproject.toml's package-dir mapping."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {name.removeprefix(PACKAGE).lstrip("."): ROOT / folder for name, folder in mapping.items()}


def _layer(module: str) -> int | None:
    """The layer of a ``mem_retrieval…`` module name (None for anything else)."""
    if module != PACKAGE and not module.startswith(PACKAGE + "."):
        return None
    first = module.removeprefix(PACKAGE).lstrip(".").split(".")[0]
    return LAYERS.index(first) if first in LAYERS else LAYERS.index("")


def _imports(path: Path) -> list[tuple[int, str]]:
    """Each module a file imports, with its line: ``from mem_retrieval import cli`` imports
    ``mem_retrieval.cli`` (its module alone read as the root, and so allowed everywhere), and a
    relative import is named by its dots (``..cli``), which ``test_no_module_imports_…`` refuses."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:
            out.append((node.lineno, "." * node.level + (node.module or "")))
        elif isinstance(node, ast.ImportFrom):
            out += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return out


# Files of a layer's folder that are not its modules: the skill's launcher script, package data an
# agent runs as `python scripts/mem.py …`, is the command line itself, as the console script is.
NOT_MODULES = {"api/skills/solve-maths-mem/scripts/mem.py"}


def _modules(folder: Path) -> list[Path]:
    return [path for path in sorted(folder.rglob("*.py")) if str(path.relative_to(ROOT)) not in NOT_MODULES]


def test_every_layer_is_mapped_and_every_module_imports_downward_only():
    folders = _folders()
    assert set(folders) == set(LAYERS), "pyproject.toml's package-dir and the layer list disagree"
    upward = []
    for name, folder in folders.items():
        own = LAYERS.index(name)
        for path in _modules(folder):
            for line, module in _imports(path):
                layer = _layer(module)
                if layer is not None and layer > own:
                    upward.append(f"{path.relative_to(ROOT)}:{line}: imports {module} ({LAYERS[layer] or 'the root'})")
    assert not upward, "imports running upward:\n" + "\n".join(upward)


def test_no_module_imports_a_layer_by_its_folder_name():
    """``import records`` would find the folder only when run from the checkout: every import of
    the package goes through its one installed name."""
    bare = []
    for folder in _folders().values():
        for path in _modules(folder):
            for line, module in _imports(path):
                if module.startswith(".") or module.split(".")[0] in {
                        "records", "configs", "text", "indexers", "retrieval", "eval", "cli", "api", "mem"}:
                    bare.append(f"{path.relative_to(ROOT)}:{line}: import {module}")
    assert not bare, "\n".join(bare)


# Heavy engines, and the only modules that may import them (the README's layout table): torch and
# sentence-transformers cost seconds to import, ray more; a module outside these paying for them
# would slow every command that imports it.
HEAVY = {"torch": {"text/embed.py", "text/onnx.py", "text/train.py"},
         "sentence_transformers": {"text/embed.py", "text/train.py"},
         "ray": {"indexers/distributed.py", "eval/bench_scale.py"}}


def test_heavy_engines_are_imported_only_by_their_modules():
    found = []
    for folder in _folders().values():
        for path in sorted(folder.rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            for line, module in _imports(path):
                allowed = HEAVY.get(module.split(".")[0])
                if allowed is not None and where not in allowed:
                    found.append(f"{where}:{line}: imports {module}")
    assert not found, "heavy imports outside their modules:\n" + "\n".join(found)
