"""`mem skill install DIR [--force]`: write the solve-maths-mem skill (SKILL.md,
references/memory-protocol.md, scripts/mem.py) into DIR's .claude/skills/ and .agents/skills/."""

from __future__ import annotations

ORDER = 85


def register(subparsers, common) -> None:
    parser = subparsers.add_parser("skill", help="the solve-maths-mem skill files",
                                   description="The solve-maths-mem skill files, shipped with mem.")
    family = parser.add_subparsers(dest="skill_command", metavar="ACTION", parser_class=type(parser))
    family.required = True
    install = family.add_parser(
        "install", parents=[common], help="write the skill into DIR (both agent layouts)",
        description="Write SKILL.md, references/memory-protocol.md and scripts/mem.py into "
                    "DIR/.claude/skills/solve-maths-mem/ and DIR/.agents/skills/solve-maths-mem/. "
                    "A file already there with other text is refused (exit 1) unless --force.")
    install.add_argument("folder", metavar="DIR", help="the project folder (e.g. .)")
    install.add_argument("--force", action="store_true", help="overwrite files with other text")
    install.set_defaults(handler=run_install)


def run_install(args, ctx) -> int:
    from pathlib import Path

    from mem_retrieval.records.errors import BadInput, plural
    from mem_retrieval.skill import install

    folder = Path(args.folder)
    if not args.folder.strip():  # Path("") is the current folder: an unset variable, not a choice
        raise BadInput("DIR is empty (give . for the current folder)")
    if not folder.is_dir():
        raise BadInput(f"DIR {args.folder!r} " + ("is not a folder" if folder.exists() else "does not exist"))
    done = install(folder, force=args.force)
    lines = [f"wrote {path}" for path in done.written]
    lines.append(f"skill solve-maths-mem: {plural(len(done.written), 'file')} written, "
                 f"{len(done.unchanged)} unchanged")
    ctx.emit(done.as_dict(), "\n".join(lines))
    return 0
