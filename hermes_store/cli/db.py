"""``hermes-store db …``: schema revisions and backups.

Every revision command works on a SQLite file and on a PostgreSQL database (which
starts at the baseline ``0030``: revisions below it are refused there); ``backup``
copies a SQLite file and says what to use on a server instead; ``copy`` copies a whole
store between the two engines (``hermes_store.dbcopy``).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Iterator, Optional

import typer

from .common import JsonOption, YesOption, confirm, local_path, out, sqlite_file, state
from .output import EXIT_NOT_FOUND, EXIT_PROBLEMS, human_bytes
from .probe import probe

app = typer.Typer(help="Schema revisions (upgrade, downgrade, check) and backups.", no_args_is_help=True)


def _describe(revision: str | None, head: str, *, server: bool = False) -> str:
    if revision is None:
        return "none (empty or missing database)" if server else "none (empty or missing file)"
    return f"{revision} (head)" if revision == head else f"{revision} (head is {head})"


@app.command("upgrade")
def upgrade_command(
    ctx: typer.Context,
    revision: Annotated[str, typer.Argument(help="Target revision (0001…, or head).")] = "head",
    json_flag: JsonOption = False,
) -> None:
    """Create or upgrade the database to REVISION (adopting a file upstream Hermes wrote)."""
    from .. import migrate

    o = out(ctx, json_flag)
    db = state(ctx).target
    before = probe(db)
    steps = [rev for rev, _ in migrate.history()]
    target = migrate.head() if revision == "head" else revision
    if before.revision in steps:
        start = steps.index(before.revision) + 1
    else:  # a new store: from its first step (head in one, a baseline), else every revision
        from .common import backend_for

        first = backend_for(db).migrations.first_step(revision)
        start = 0 if first is None else steps.index(first)
    total = steps.index(target) + 1 - start if target in steps else None
    with o.progress("Upgrading", total if total and total > 0 else None) as advance:
        done = [0]

        def step(rev: str, description: str) -> None:
            done[0] += 1
            advance(done[0])

        after = migrate.upgrade(db, revision, progress=step)
    topics_before = migrate.inspect_telegram_topics(db).revision
    topics_after = None
    if after == migrate.head() and db.is_file:
        # Topic tables someone opted into come along; absent ones are never created.
        topics_after = migrate.upgrade_telegram_topics(db.path, only_if_present=True)
    elif after == migrate.head():
        # PostgreSQL creates them at the branch head on opt-in: nothing to upgrade
        topics_after = topics_before
    payload = {
        "path": db.display,
        "created": before.kind in ("missing", "empty"),
        "adopted": before.kind == "upstream",
        "from": before.revision,
        "to": after,
        "head": migrate.head(),
        "telegram_topics": {"from": topics_before, "to": topics_after},
    }
    if o.json_mode:
        o.emit(payload)
    elif before.revision == after and before.kind == "alembic":
        o.line(f"{db}: already at {_describe(after, payload['head'])}; nothing to do.")
    else:
        how = "created" if payload["created"] else ("adopted and upgraded" if payload["adopted"] else "upgraded")
        o.line(f"{db}: {how} {before.revision or '(new)'} -> {_describe(after, payload['head'])}")
    if not o.json_mode and topics_after is not None and topics_after != topics_before:
        o.line(f"Telegram topic tables: {topics_before} -> {topics_after} (head)")


@app.command("downgrade")
def downgrade_command(
    ctx: typer.Context,
    revision: Annotated[str, typer.Argument(help="Target revision (e.g. 0022 = schema version 22).")],
    yes: YesOption = False,
    json_flag: JsonOption = False,
) -> None:
    """Downgrade the database to REVISION (columns and tables newer than it are dropped)."""
    from .. import migrate

    o = out(ctx, json_flag)
    db = state(ctx).target
    before = migrate.current(db)
    # Refused before asking: nothing below a server's baseline exists there.
    migrate.refuse_downgrade(db, revision)
    backup = ("hermes-store db backup DEST" if db.is_file
              else "pg_dump, see docs/postgres.md")
    confirm(
        f"Downgrade {db} from {before} to {revision}? Data in newer columns and tables is "
        f"dropped; take a backup first ({backup}).",
        yes=yes,
        out=o,
    )
    after = migrate.downgrade(db, revision)
    if o.json_mode:
        o.emit({"path": db.display, "from": before, "to": after, "head": migrate.head()})
    else:
        o.line(f"{db}: downgraded {before} -> {after}")


@app.command("current")
def current_command(ctx: typer.Context, json_flag: JsonOption = False) -> None:
    """The database's revision (read-only)."""
    from .. import migrate

    o = out(ctx, json_flag)
    db = state(ctx).target
    info = probe(db)
    head = migrate.head()
    payload = {
        "path": db.display,
        "revision": info.revision,
        "head": head,
        "at_head": info.revision == head,
        "schema_version": info.schema_version,
        "managed_by": {"alembic": "hermes_store", "upstream": "upstream Hermes"}.get(info.kind),
        "exists": info.exists,
    }
    if o.json_mode:
        o.emit(payload)
    else:
        o.line(_describe(info.revision, head, server=db.is_server))
        if info.kind == "upstream":
            o.note("Written by upstream Hermes; `hermes-store db upgrade` adopts it.")
    if not info.exists:  # as `status`: nothing there is "not found", not a revision
        raise typer.Exit(EXIT_NOT_FOUND)


@app.command("history")
def history_command(ctx: typer.Context, json_flag: JsonOption = False) -> None:
    """Every revision, oldest first (revision 00NN = upstream schema version NN)."""
    from .. import migrate

    o = out(ctx, json_flag)
    db = state(ctx).target
    current = probe(db).revision
    rows = [
        {"revision": rev, "description": desc, "current": rev == current}
        for rev, desc in migrate.history()
    ]
    if o.json_mode:
        o.emit({"path": db.display, "current": current, "head": migrate.head(), "revisions": rows})
        return
    o.table(
        [
            {"header": ""},
            {"header": "Rev"},
            {"header": "Description", "flex": True, "overflow": "fold"},
        ],
        [["*" if r["current"] else "", r["revision"], r["description"]] for r in rows],
    )


@app.command("check")
def check_command(ctx: typer.Context, json_flag: JsonOption = False) -> None:
    """Is the database at head, with no drift from the expected schema? Exit 1 if not."""
    from .. import migrate

    o = out(ctx, json_flag)
    db = state(ctx).target
    if db.is_file:
        from .common import require_file

        require_file(db.path)
    result = migrate.check(db)
    payload = {
        "path": db.display,
        "revision": result.revision,
        "head": result.head,
        "at_head": result.at_head,
        "drift": result.drift,
        "full_text": list(result.full_text),
        "telegram_topics": result.telegram_topics.as_dict(),
        "ok": result.ok,
    }
    if o.json_mode:
        o.emit(payload)
    else:
        if result.at_head:
            o.line(f"revision {result.revision}: at head")
        else:
            o.line(f"revision {result.revision}: NOT at head ({result.head}); run `hermes-store db upgrade`")
        if result.drift:
            o.line(f"schema drift ({len(result.drift)} differences from hermes_store.schema):")
            for item in result.drift:
                o.line(f"  - {item}")
        elif result.at_head:
            o.line("schema: matches hermes_store.schema")
        for item in result.full_text:
            o.line(f"full-text index: {item}")
        topics = result.telegram_topics
        o.line(f"telegram topic tables: {topics.describe()}")
        if topics.state != "absent" and not topics.at_head:
            o.line("  run `hermes-store db upgrade` to bring them to head")
        for item in topics.drift:
            o.line(f"  - {item}")
    if not result.ok:
        raise typer.Exit(EXIT_PROBLEMS)


@app.command("backup")
def backup_command(
    ctx: typer.Context,
    dest: Annotated[Path, typer.Argument(
        help="Where to write the copy (must not exist).",
        parser=local_path("DEST", "to copy a store into PostgreSQL use `hermes-store db copy SRC URL`"))],
    force: Annotated[bool, typer.Option("--force", help="Replace DEST if it exists.")] = False,
    json_flag: JsonOption = False,
) -> None:
    """A consistent copy of the live database file, safe while Hermes keeps writing.

    SQLite files only: back up a PostgreSQL store with pg_dump (docs/postgres.md)."""
    from .common import backend_for

    o = out(ctx, json_flag)
    source = sqlite_file(
        ctx, "db backup",
        "back it up with the server's own tools (`pg_dump -Fc -f hermes.dump DATABASE`, "
        "restored by pg_restore; see docs/postgres.md), or take a SQLite snapshot with "
        "`hermes-store db copy URL snapshot.db`")
    result = backend_for(state(ctx).target).files.backup(source, dest, overwrite=force)
    if o.json_mode:
        o.emit(result.as_dict())
    else:
        o.line(
            f"Backed up {result.source} -> {result.dest} ({human_bytes(result.bytes)}, "
            f"{result.sessions} sessions, {result.messages} messages, integrity {result.integrity})"
        )



@app.command("grant")
def grant_command(
    ctx: typer.Context,
    role: Annotated[str, typer.Argument(help="The role Hermes runs as (it must exist).")],
    json_flag: JsonOption = False,
) -> None:
    """PostgreSQL: let ROLE read and write sessions, now and in tables created later.

    Run as the database's owner. Grants SELECT, INSERT, UPDATE, DELETE on every table
    and USAGE, SELECT, UPDATE on every sequence, and the same by default on what the
    owner creates later (the Telegram topic opt-in, upgrades); idempotent."""
    from .. import errors
    from .common import backend_for

    o = out(ctx, json_flag)
    db = state(ctx).target
    roles = backend_for(db).roles
    if roles is None:
        raise errors.InvalidArgumentError(
            f"`hermes-store db grant` gives a PostgreSQL role its privileges, and {db.display} "
            "is a SQLite file: who may use it is decided by the file's owner and mode (0600)")
    with _admin_connection(db) as conn:
        try:
            granted = roles.grant_runtime(conn, role)
        except roles.RoleError as exc:
            raise errors.InvalidArgumentError(f"{db.display}: {exc}") from None
        missing = roles.missing_runtime(conn, role)
    payload = {
        "path": db.display,
        "role": role,
        "owner": granted["owner"],
        "tables": granted["tables"],
        "sequences": granted["sequences"],
        "statements": granted["statements"],
        "missing": missing.describe() or None,
    }
    if o.json_mode:
        o.emit(payload)
    else:
        o.line(f"{db}: {role} may read and write sessions: SELECT, INSERT, UPDATE, DELETE on "
               f"{len(granted['tables'])} table(s), USAGE, SELECT, UPDATE on "
               f"{len(granted['sequences'])} sequence(s), and the same on every table and "
               f"sequence {granted['owner']} creates later (the Telegram topic opt-in, "
               "upgrades).")
        if missing:
            o.warn(f"{role} still lacks {missing.describe()}")
    if missing:
        raise typer.Exit(EXIT_PROBLEMS)


@contextlib.contextmanager
def _admin_connection(target) -> Iterator:
    """An autocommit connection for statements the owner runs (GRANT), its errors
    the package's; closed (and its engine disposed) on exit."""
    import sqlalchemy as sa

    from .common import backend_for

    engine = sa.create_engine(target.url, poolclass=sa.pool.NullPool,
                              isolation_level="AUTOCOMMIT")
    try:
        with backend_for(target).translated_errors(target), engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


@app.command("copy")
def copy_command(
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(
        metavar="SRC", help="The store to copy: a path, sqlite:///PATH or postgresql+psycopg://…")],
    destination: Annotated[str, typer.Argument(
        metavar="DST", help="Where to: a new file or an empty database (created at head).")],
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue a copy that was interrupted; rows already copied are kept.")] = False,
    verify_only: Annotated[bool, typer.Option(
        "--verify-only", help="Write nothing: compare SRC and DST table by table (row counts "
        "and content hashes); exit 1 when they differ.")] = False,
    batch_rows: Annotated[Optional[int], typer.Option(
        "--batch-rows", min=1, show_default=False,
        help="Most rows per batch, each one committed transaction (default 5000).")] = None,
    json_flag: JsonOption = False,
) -> None:
    """Copy a whole store between SQLite and PostgreSQL, in either direction.

    Streams every table in batches (bounded memory), keeps ids and bytes, builds the
    indexes after the load, and verifies row counts and content hashes at the end.
    SRC must be at head; DST must be new or empty. An interrupted copy continues with
    --resume. Stop the writers of SRC first (or copy a `db backup` of it).
    """
    from .. import dbcopy

    o = out(ctx, json_flag)
    rows = dbcopy.BATCH_ROWS if batch_rows is None else batch_rows
    with o.progress("Copying", None) as advance:

        def tick(phase: str, table: str, done: int, total: int) -> None:
            verb = "Copying" if phase == "copy" else "Verifying"
            advance(done, description=f"{verb} {table}", total=total)

        try:
            if verify_only:
                report = dbcopy.verify_copy(source, destination, progress=tick, batch_rows=rows)
            else:
                report = dbcopy.copy_store(source, destination, resume=resume,
                                           batch_rows=rows, progress=tick)
        except dbcopy.CopyMismatchError as exc:
            report, mismatch = exc.report, exc
        else:
            mismatch = None
    if o.json_mode:
        o.emit({"verify_only": verify_only, **report.as_dict()})
    else:
        _print_copy(o, report, verify_only)
    if mismatch is not None or not report.ok:
        if not o.json_mode:
            if mismatch is not None:
                o.error(str(mismatch))
            elif report.unfinished:
                o.error(f"{report.destination} holds an unfinished copy: finish it with "
                        "`hermes-store db copy SRC DST --resume`")
            else:
                o.error(f"{report.source} and {report.destination} differ "
                        f"({', '.join(report.mismatched) or 'messages id counter'})")
        raise typer.Exit(EXIT_PROBLEMS)


def _print_copy(o, report, verify_only: bool) -> None:
    columns = [
        {"header": "Table", "flex": True},
        {"header": "Source", "justify": "right"},
        {"header": "Destination", "justify": "right"},
    ]
    if not verify_only:
        columns.append({"header": "Copied", "justify": "right"})
    columns.append({"header": "Match"})
    rows = []
    for t in report.tables:
        if not (t.source_rows or t.destination_rows or t.copied or not t.ok):
            continue  # empty on both sides
        row = [t.name, t.source_rows, t.destination_rows]
        if not verify_only:
            row.append(t.copied)
        row.append("yes" if t.ok else "NO")
        rows.append(row)
    o.table(columns, rows)
    empty = sum(1 for t in report.tables if t.ok and not t.source_rows and not t.destination_rows)
    if empty:
        o.line(f"({empty} more tables empty on both sides)")
    if verify_only:
        verdict = "match" if report.ok else "DIFFER"
        o.line(f"{report.source} and {report.destination}: {verdict} "
               f"({report.seconds:.1f} s)")
        return
    if report.ok:
        how = "resumed and finished" if report.resumed else "copied"
        rate = report.messages_per_second
        o.line(f"{report.source} -> {report.destination}: {how}, "
               f"{sum(t.copied for t in report.tables)} rows in {report.seconds:.1f} s"
               + (f" ({rate:.0f} messages/s)" if rate else "")
               + "; verified: every table matches.")
