"""``hermes-store recover --output NEW.db``: salvage a damaged database into a new file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import JsonOption, local_path, out, sqlite_file, state
from .output import EXIT_PROBLEMS


def recover_command(
    ctx: typer.Context,
    output_path: Annotated[Path, typer.Option(
        "--output", "-o", help="The new database file to write (must not exist).",
        parser=local_path("--output", "recover writes a new SQLite file"))],
    work_dir: Annotated[Optional[Path], typer.Option(
        "--work-dir", help="Where to stage the copy [default: system temp].",
        parser=local_path("--work-dir"))] = None,
    json_flag: JsonOption = False,
) -> None:
    """Copy every readable row of the (damaged) --db file into a fresh database at head.

    The damaged file is never modified, and the result is never installed over it:
    inspect the report, then swap the files yourself with Hermes stopped. Exit 1 when
    rows were lost (the output is still written). SQLite files only.
    """
    from .common import backend_for

    o = out(ctx, json_flag)
    source = sqlite_file(
        ctx, "recover",
        "it salvages the rows of a damaged SQLite file page by page; a PostgreSQL server "
        "repairs and restores its own data (its logs, amcheck, a pg_dump or base backup; "
        "see docs/postgres.md)")
    with o.progress("Recovering tables", None) as advance:
        report = backend_for(state(ctx).target).files.recover(
            source,
            output_path,
            work_dir=work_dir,
            progress=lambda table, done, total: advance(done, total=total, description=f"Copying {table}"),
        )
    data = report.as_dict()
    if o.json_mode:
        o.emit(data)
    else:
        o.line(f"Recovered {report.source} -> {report.output}")
        if report.source_integrity:
            o.line(f"Source damage: {'; '.join(report.source_integrity[:3])}")
        o.table(
            [
                {"header": "Table", "max_width": 24, "overflow": "fold"},
                {"header": "Found", "justify": "right"},
                {"header": "Copied", "justify": "right"},
                {"header": "Lost (est.)", "justify": "right"},
                {"header": "Unreadable rowids", "overflow": "fold", "flex": True},
            ],
            [
                [
                    t.name, t.found, t.copied,
                    "?" if t.unreadable and not t.lost_ranges else t.lost_estimate + t.rejected,
                    ", ".join(f"{lo}-{hi}" if lo != hi else str(lo) for lo, hi in t.lost_ranges[:5])
                    + (" …" if len(t.lost_ranges) > 5 else "")
                    + (t.unreadable or ""),
                ]
                for t in report.tables
            ],
        )
        if report.placeholder_sessions:
            o.line(f"{report.placeholder_sessions} session row(s) were lost; their messages were kept under placeholder sessions (source 'recovered').")
        if report.detached_links:
            o.line(f"{report.detached_links} link(s) to lost rows were cleared.")
        for table, n in report.dropped_orphans.items():
            o.line(f"{n} {table} row(s) pointing at lost rows were dropped.")
        o.line("Verification: " + ", ".join(f"{k} {v}" for k, v in report.verification.items()))
        o.line(
            "Complete: every row was copied." if report.complete
            else "Partial: some rows could not be read (see Lost)."
        )
        o.line(f"The damaged file was {'left unchanged' if report.source_unchanged else 'CHANGED by another process during recovery'}.")
    if not report.complete:
        raise typer.Exit(EXIT_PROBLEMS)


def register(app: typer.Typer) -> None:
    app.command("recover")(recover_command)
