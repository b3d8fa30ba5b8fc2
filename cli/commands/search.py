"""`mem archive-search`, `mem archive-get`, `mem recall-search` (SPEC §9)."""

from __future__ import annotations

import textwrap

from mem_retrieval.cli.main import flag
from mem_retrieval.records.errors import plural

ORDER = 20


def register(subparsers, common) -> None:
    p = subparsers.add_parser(
        "archive-search", parents=[common], help="steps of the runs and the library, 5 a page",
        description="Ids first, then BM25 candidates, reranked by embeddings. With --setting, hits "
                    "whose setting is incompatible are left out (unless --any-setting).")
    p.add_argument("query")
    p.add_argument("--setting", help="the setting the hits will be used in (SPEC §8)")
    p.add_argument("--any-setting", action="store_true", help="keep incompatible hits too")
    p.add_argument("--run", help="only steps of this run")
    p.add_argument("--kind", help="lemma, dead_end or error")
    p.add_argument("--status", help="open, proved, refuted, blocked or stale")
    p.add_argument("--until", metavar="SEQ|TIME|EVENT",
                   help="memory as it stood at that event (a sequence number or event id needs --run)")
    p.add_argument("--page", type=int, default=1)
    p.add_argument("--strategy", metavar="S",
                   help="the ranking strategy (default: the config's search.strategy): "
                        + ", ".join(strategy_names()))
    p.set_defaults(handler=archive_search)

    p = subparsers.add_parser("archive-get", parents=[common],
                              help="one full step: statement, hypotheses, setting, proof, parents, status, audit")
    p.add_argument("id", help="a global id run/step, or a step id (with --run when ambiguous)")
    p.add_argument("--run")
    p.set_defaults(handler=archive_get)

    p = subparsers.add_parser("recall-search", parents=[common],
                              help="events with their briefs and returns, 5 a page")
    p.add_argument("query", nargs="?")
    p.add_argument("--id", dest="step_id", help="every event naming this step, in log order")
    p.add_argument("--run")
    p.add_argument("--until", metavar="SEQ|TIME|EVENT")
    p.add_argument("--page", type=int, default=1)
    p.set_defaults(handler=recall_search)


def strategy_names() -> list[str]:
    from mem_retrieval.retrieval.strategies import STRATEGIES

    return list(STRATEGIES)


def _footer(page) -> str:
    """Where the list goes on. The hint is shown only when it says 'read on': an estimate near 0
    is not reliable enough to tell an agent to stop (see README, `mem eval paging`)."""
    if page.page < page.pages:
        hint = (f" · about {page.remaining:.0f} relevant-looking hits ahead"
                if page.remaining is not None and page.remaining >= 1 else "")
        return f"more: --page {page.page + 1} ({plural(page.left, 'more hit')}){hint}"
    return "last page"


def archive_search(args, ctx) -> int:
    page = ctx.memory().archive_search(
        args.query, args.setting, run=args.run, kind=args.kind, status=args.status, page=args.page,
        any_setting=args.any_setting, until=args.until, strategy=args.strategy)
    for note in page.notes:
        ctx.note(f"mem: {note.render(flag)}")
    if not page.total:
        ctx.emit(page.as_dict(), "no hits")
        return 1
    lines = [f"page {page.page} of {page.pages} · {plural(page.total, 'hit')}"
             + (f" · setting {page.setting}" if page.setting else "")
             + (" · BM25 order: vectors still being computed" if page.pending else "")]
    for rank, hit in enumerate(page.hits, start=page.first_rank):
        grade = hit.grade or "not audited"
        match = f" ({hit.setting_match})" if hit.setting_match else ""
        lib = " · library" if hit.in_library else ""
        lines.append(f"{rank}. {hit.id}  {hit.kind} · {hit.status} · {grade}{lib} · "
                     f"setting: {hit.setting or '—'}{match} · {hit.score:.3f}"
                     + ("  [id]" if hit.via == "id" else ""))
        lines.append(textwrap.shorten(hit.statement, 300, placeholder=" …").join(["   ", ""]))
    lines.append(_footer(page))
    ctx.emit(page.as_dict(), "\n".join(lines))
    return 0


def archive_get(args, ctx) -> int:
    view = ctx.memory().archive_get(args.id, run=args.run)
    data = view.as_dict()
    if data["kind"] == "source":
        text = "\n".join(f"{k:<10} {v}" for k, v in data.items() if v)
    else:
        audit = data["audit"]
        audit_text = "not audited" if audit is None else (
            f"{audit['grade']}" + (f" by {audit['by']}" if audit["by"] else "")
            + (f": {audit['note']}" if audit["note"] else "") + (" (repaired)" if audit["repaired"] else ""))
        rows = [("id", data["id"]), ("kind", data["kind"]), ("statement", data["statement"]),
                ("hyp", "; ".join(data["hyp"]) or "—"), ("setting", data["setting"] or "—"),
                ("parents", ", ".join(data["parents"]) or "—"), ("proof", data["proof"] or "—"),
                ("status", data["status"]), ("audit", audit_text)]
        if data["missing"]:
            rows.append(("missing", data["missing"]))
        if data["failed_input"]:
            rows.append(("failed", data["failed_input"]))
        if data["in_library"]:
            rows.append(("library", f"inserted {data['inserted'] or '—'}"))
        text = "\n".join(f"{k:<10} {v}" for k, v in rows)
    ctx.emit(data, text)
    return 0


def recall_search(args, ctx) -> int:
    page = ctx.memory().recall_search(args.query, id=args.step_id, run=args.run, page=args.page,
                                      until=args.until)
    if not page.total:
        ctx.emit(page.as_dict(), "no events")
        return 1
    lines = [f"page {page.page} of {page.pages} · {plural(page.total, 'event')}"]
    for hit in page.hits:
        ids = f" [{', '.join(hit.ids)}]" if hit.ids else ""
        lines.append(f"{hit.run} #{hit.seq}  {hit.time} · {hit.actor} · {hit.kind}{ids}")
        lines.append(f"   {textwrap.shorten(hit.text, 200, placeholder=' …')}")
        if hit.excerpt:
            lines.append(f"   | {textwrap.shorten(hit.excerpt, 200, placeholder=' …')}")
    lines.append(_footer(page))
    ctx.emit(page.as_dict(), "\n".join(lines))
    return 0
