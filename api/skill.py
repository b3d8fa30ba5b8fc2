"""The solve-maths-mem skill: SKILL.md (when to call which memory function, the Recall step at
Fix, the checkpoints, M1–M4), references/memory-protocol.md (the tiers, the functions with their
arguments and outputs, the core.md template) and scripts/mem.py, shipped in the package under
``skills/`` and installed in both agent layouts (``.claude/skills/…`` and ``.agents/skills/…``)."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
import shlex
from pathlib import Path

from mem_retrieval.records.errors import Refused
from mem_retrieval.records.files import write_atomic

SKILL = "solve-maths-mem"
LAYOUTS = (Path(".claude") / "skills", Path(".agents") / "skills")


def skill_files() -> dict[str, str]:
    """Every file of the skill: its path inside the skill folder -> its text."""
    from importlib.resources import files

    found: dict[str, str] = {}

    def walk(folder, prefix: str) -> None:
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.is_dir():
                if entry.name != "__pycache__":
                    walk(entry, f"{prefix}{entry.name}/")
            elif entry.name.endswith((".md", ".py")):
                found[prefix + entry.name] = entry.read_text(encoding="utf-8")

    walk(files("mem_retrieval") / "skills" / SKILL, "")
    return found


@dataclass(frozen=True)
class Installed:
    written: tuple[Path, ...]
    unchanged: tuple[Path, ...]

    def as_dict(self) -> dict[str, list[str]]:
        return {"written": [str(p) for p in self.written], "unchanged": [str(p) for p in self.unchanged]}


def install(folder: Path, force: bool = False) -> Installed:
    """Write the skill into ``folder`` in both layouts. A file already there with other text (an
    edited copy) is refused, naming it, unless ``force``; so is a path where a file stands for a
    folder or a folder for a file. Nothing is written then."""
    folder = Path(folder)
    plan = [(folder / layout / SKILL / name, text) for layout in LAYOUTS for name, text in skill_files().items()]
    for path, _ in plan:
        if blocked := _in_the_way(folder, path):
            raise Refused(f"cannot write {path}: {blocked}")
    differ = [path for path, text in plan if path.exists() and _text(path) != text]
    if differ and not force:
        raise Refused(f"{differ[0]} exists with other text ({len(differ)} such file"
                      f"{'s' if len(differ) > 1 else ''}); force overwrites (`mem skill install "
                      f"{shlex.quote(str(folder))} --force`)")
    unchanged = [path for path, text in plan if path.exists() and _text(path) == text]
    pending = [(path, text) for path, text in plan if path not in unchanged]
    _writable(folder, [path for path, _ in pending])
    for path, text in pending:
        try:
            write_atomic(path, text)
        except OSError as error:
            raise Refused(f"cannot write {path}: {error.strerror or error}") from None
    return Installed(tuple(path for path, _ in pending), tuple(unchanged))


def _writable(folder: Path, paths: list[Path]) -> None:
    """Refuse, having written nothing, when a folder of ``paths`` cannot take a file (read-only,
    or not ours): each is tried with a file made and removed there, and the folders made for the
    try are removed again. The .claude layout was written whole when the .agents one was not."""
    made: list[Path] = []
    try:
        for parent in dict.fromkeys(path.parent for path in paths):
            relative = parent.relative_to(folder)
            for below in [*reversed(relative.parents[:-1]), relative]:  # the folders down to it
                if not (folder / below).is_dir():
                    (folder / below).mkdir()
                    made.append(folder / below)
            try:
                fd, name = tempfile.mkstemp(dir=parent, prefix=".mem-skill.", suffix=".tmp")
            except OSError as error:  # named by its folder, not by the trial file's name
                raise OSError(error.errno, error.strerror, str(parent)) from None
            os.close(fd)
            os.unlink(name)
    except OSError as error:
        for made_folder in reversed(made):
            made_folder.rmdir()
        raise Refused(f"cannot write in {error.filename}: {error.strerror or error} "
                      "(nothing was written)") from None


def _in_the_way(folder: Path, path: Path) -> str | None:
    """Why ``path`` cannot be written, as far as what stands there says (a file where a folder
    must be, a folder where the file goes), or None."""
    if path.is_dir():
        return f"{path} is a folder"
    for parent in reversed(path.relative_to(folder).parents[:-1]):  # the folders below ``folder``
        if (folder / parent).exists() and not (folder / parent).is_dir():
            return f"{folder / parent} is a file, not a folder"
    return None


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
