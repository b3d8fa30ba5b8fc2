"""The solve-maths-mem skill: SKILL.md (when to call which memory function, the Recall step at
Fix, the checkpoints, M1–M4), references/memory-protocol.md (the tiers, the functions with their
arguments and outputs, the core.md template) and scripts/mem.py, shipped in the package under
``skills/`` and installed in both agent layouts (``.claude/skills/…`` and ``.agents/skills/…``)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
import shlex
from pathlib import Path

from mem_retrieval.records.errors import BadInput, Refused
from mem_retrieval.records.files import replace_all

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
    _place(pending)
    return Installed(tuple(path for path, _ in pending), tuple(unchanged))


def _place(pending: list[tuple[Path, str]]) -> None:
    """Write every file of ``pending``, or none (``files.replace_all``): a write the machine refuses
    (a read-only folder, a full disk, a file size limit) installs nothing, one line, exit 2 (a full
    disk left the .claude layout written whole and the .agents one in part, exit 1)."""
    try:
        replace_all([(path, functools.partial(Path.write_text, data=text, encoding="utf-8"))
                     for path, text in pending])
    except OSError as error:
        placed = error.placed  # (replace_all says them)
        done = f"{len(placed)} of {len(pending)} files were written" if placed else "nothing was written"
        raise BadInput(f"cannot write {error.filename}: {error.strerror or error} ({done})") from None


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
