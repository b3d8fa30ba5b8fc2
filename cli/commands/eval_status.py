"""`mem eval status`: the design's third test before use — M1–M2 on the library; it passes when no
library entry states a status its tree.json does not (M1: the design's "0 promoted statuses", a
demotion counted too) or was admitted without a final, audited status (M2)."""

from __future__ import annotations

ORDER = 70


def register(subparsers, common) -> None:
    parser = subparsers.add_parser(
        "status", parents=[common], help="M1–M2 on the library: pass means 0 status mismatches",
        description="Check every library entry against its run's tree.json (M1) and the admission "
                    "rule (M2). Exit 1 when any entry fails, naming it, or names no step of its run "
                    "or repeats another; exit 2 when the library or a run its entries come from "
                    "cannot be read (their entries are unchecked).")
    parser.set_defaults(handler=status)


def status(args, ctx) -> int:
    from mem_retrieval.records.errors import plural
    from mem_retrieval.records.invariants import check_library

    workspace = ctx.workspace()
    if ctx.config_path is not None:  # it reads no setting, but a --config given is read (and a bad
        ctx.config(workspace)        # one refused, as by every other command)
    report = check_library(workspace)
    failing = report.errors  # M1, M2, and entries that cannot be checked (integrity, input)
    entries = report.counts["entries"]
    m1 = sum(v.code == "M1" for v in report.errors)
    m2 = sum(v.code == "M2" for v in report.errors)
    unchecked, elsewhere = report.counts["unchecked"], report.counts["elsewhere"]
    verdict = "FAIL" if failing else "PASS"
    text = [str(v) for v in report.violations]
    text.append(f"status: {verdict}: {plural(entries, 'library entry', 'library entries')}; "
                f"{plural(m1, 'status mismatch', 'status mismatches')} (M1), {m2} not admissible (M2)"
                + (f"; {unchecked} unchecked (their run's tree.json cannot be read)" if unchecked else "")
                + (f"; {elsewhere} of runs not in this workspace (M2 only: no tree.json to hold M1 "
                   "against)" if elsewhere else ""))
    ctx.emit({"pass": not failing, "entries": entries, "m1": m1, "m2": m2, "unchecked": unchecked,
              "elsewhere": elsewhere, "violations": [str(v) for v in report.violations]}, "\n".join(text))
    return 2 if report.unreadable else 1 if failing else 0
