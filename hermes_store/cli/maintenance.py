"""``hermes-store maintenance …`` (doctor, repair, rebuild-fts, optimize, vacuum) and ``status``.

On PostgreSQL (decision D13) every command has its counterpart or says that it has
none: doctor runs the checks that mean something on a server (schema, foreign keys,
orphans, counters, the full-text indexes) and reports SQLite's file checks
(``integrity_check``, the WAL) as not applicable; rebuild-fts, optimize and vacuum run
``REINDEX``, ``gin_clean_pending_list`` + ``ANALYZE`` and ``VACUUM (ANALYZE)`` through
the store; repair, which edits a SQLite file's schema table, is refused.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import RECOVER_HINT
from .common import JsonOption, backend_for, open_store, out, require_file, sqlite_file, state
from .output import EXIT_PROBLEMS, human_bytes, one_line
from .probe import probe, read_engine, size_bytes, wal_bytes

if TYPE_CHECKING:
    from ..location import Target

app = typer.Typer(help="Health checks and upkeep: doctor, repair, FTS rebuild/optimize, vacuum.", no_args_is_help=True)

#: a WAL bigger than this means checkpoints are not keeping up
WAL_WARN_BYTES = 64 * 1024 * 1024


# --------------------------------------------------------------------------- status

def store_status(target: "Target") -> dict:
    """What ``hermes-store status`` shows; read-only (a missing file or database is
    reported, never made)."""
    import sqlalchemy as sa

    from .. import migrate, schema

    info = {
        "path": target.display,
        "backend": target.backend,
        "exists": False,
        "size_bytes": None,
        "wal_bytes": None,
        "revision": None,
        "head": migrate.head(),
        "at_head": False,
        "schema_version": None,
        "journal_mode": None,
        "sqlite_library": None,
        "filesystem": None,
        "sessions": None,
        "messages": None,
        "fts_stale": None,
    }
    found = probe(target)
    info["exists"] = found.exists
    if not found.exists:
        return info
    info.update(
        revision=found.revision,
        at_head=found.revision == info["head"],
        schema_version=found.schema_version,
        wal_bytes=wal_bytes(target),
    )
    if target.is_file:
        info.update(backend_for(target).describe(target))
        info["size_bytes"] = size_bytes(target)
        if found.kind not in ("alembic", "upstream"):
            return info
    with read_engine(target) as engine, engine.connect() as conn:
        if not target.is_file:
            info["size_bytes"] = size_bytes(target, conn)
        if found.kind in ("alembic", "upstream"):
            for key, table in (("sessions", schema.sessions), ("messages", schema.messages)):
                info[key] = conn.execute(sa.select(sa.func.count()).select_from(sa.table(table.name))).scalar()
        if info["at_head"]:
            info["fts_stale"] = fts_stale(conn)
    return info


def fts_stale(conn) -> str | None:
    """Why the full-text indexes are stale (found damaged, detached from the writes:
    search scans the messages until they are rebuilt), or None when they are not."""
    import sqlalchemy as sa

    from ..fts.layout import FTS_STALE_KEY
    from ..schema import state_meta

    return conn.execute(sa.select(state_meta.c.value)
                        .where(state_meta.c.key == FTS_STALE_KEY)).scalar()


# --------------------------------------------------------------------------- doctor

@dataclass
class Finding:
    check: str
    status: str  # "ok", "warning" or "problem"
    detail: str
    fixable: bool = False


def _counter_mismatches(conn) -> list[tuple[str, int | None, int]]:
    """Sessions whose ``message_count`` matches none of the counts the repository can
    leave there: all rows (rewind keeps them counted), active rows, or rows not archived
    by compaction. Returns (id, stored, expected) with expected = not-archived rows."""
    import sqlalchemy as sa

    from .. import schema
    S, M = schema.sessions, schema.messages
    archived = sa.and_(M.c.active == 0, M.c.compacted == 1)
    counts = (
        sa.select(
            M.c.session_id,
            sa.func.count().label("all_rows"),
            sa.func.sum(sa.case((M.c.active == 1, 1), else_=0)).label("active_rows"),
            sa.func.sum(sa.case((archived, 0), else_=1)).label("kept_rows"),
        )
        .group_by(M.c.session_id)
        .subquery("counts")
    )
    all_rows = sa.func.coalesce(counts.c.all_rows, 0)
    active_rows = sa.func.coalesce(counts.c.active_rows, 0)
    kept_rows = sa.func.coalesce(counts.c.kept_rows, 0)
    stored = sa.func.coalesce(S.c.message_count, -1)
    stmt = (
        sa.select(S.c.id, S.c.message_count, kept_rows)
        .select_from(S.outerjoin(counts, counts.c.session_id == S.c.id))
        .where(stored != all_rows, stored != active_rows, stored != kept_rows)
        .order_by(S.c.id)
    )
    return [tuple(r) for r in conn.execute(stmt)]


def _orphans(conn) -> dict[str, int]:
    import sqlalchemy as sa

    from .. import schema
    S, M, U = schema.sessions, schema.messages, schema.session_model_usage
    parent = S.alias("parent")
    queries = {
        "messages without a session": sa.select(sa.func.count()).select_from(
            M.outerjoin(S, S.c.id == M.c.session_id)).where(S.c.id.is_(None)),
        "usage rows without a session": sa.select(sa.func.count()).select_from(
            U.outerjoin(S, S.c.id == U.c.session_id)).where(S.c.id.is_(None)),
        "sessions whose parent is missing": sa.select(sa.func.count()).select_from(
            S.outerjoin(parent, parent.c.id == S.c.parent_session_id)).where(
            S.c.parent_session_id.is_not(None), parent.c.id.is_(None)),
    }
    return {label: conn.execute(q).scalar() for label, q in queries.items()}


def run_doctor(target: "Target", *, quick: bool = False) -> list[Finding]:
    """Every check, read-only. The FTS check needs the schema at head.

    SQLite's file checks (``integrity_check``, ``foreign_key_check``, the WAL, the
    journal mode) have no meaning on a PostgreSQL server, which checks its own pages,
    enforces its keys and keeps its own WAL: there ``integrity`` and ``wal`` are
    reported as ``skipped`` (with why) and ``foreign_keys`` lists keys the server does
    not enforce yet (``NOT VALID``)."""
    from .. import migrate

    findings: list[Finding] = []
    server = not target.is_file
    health = None
    if server:
        findings.append(Finding("integrity", "skipped", "not applicable on PostgreSQL: the "
                                "server checks its own pages (data checksums, amcheck)"))
    else:
        health = backend_for(target).files.health(target.path, quick=quick)
        if health.integrity:
            shown = "; ".join(health.integrity[:3])
            findings.append(Finding("integrity", "problem", f"{shown} — {RECOVER_HINT}"))
        else:
            findings.append(Finding("integrity", "ok", "quick_check ok" if quick else "integrity_check ok"))
    damaged = health is not None and bool(health.integrity)

    check = migrate.check(target)
    if not check.at_head:
        findings.append(Finding("schema", "problem", f"revision {check.revision}, head is {check.head}: run `hermes-store db upgrade`"))
    elif check.drift:
        first = one_line(check.drift[0], 160)
        findings.append(Finding("schema", "problem", f"{len(check.drift)} difference(s) from hermes_store.schema (see `db check`): {first}"))
    else:
        findings.append(Finding("schema", "ok", f"at head ({check.head}), no drift"))
    topics = check.telegram_topics
    if topics is not None and topics.state != "absent":
        if topics.ok:
            findings.append(Finding("telegram_topics", "ok", topics.describe()))
        else:
            detail = "; ".join([topics.describe(), *topics.drift[:2]])
            findings.append(Finding("telegram_topics", "problem", f"{detail} (see `db check`; `db upgrade` brings them to head)"))

    if health is not None:
        if health.foreign_keys:
            detail = ", ".join(f"{t}: {n}" for t, n in sorted(health.foreign_keys.items()))
            findings.append(Finding("foreign_keys", "problem", f"dangling references ({detail})"))
        else:
            findings.append(Finding("foreign_keys", "ok", "foreign_key_check ok"))

    if check.at_head and not damaged:
        from ..fts import maintenance as fts_maintenance

        with read_engine(target) as engine, engine.connect() as conn:
            if server:
                findings.extend(_privilege_findings(conn, target))
            unchecked = _unvalidated_foreign_keys(conn) if server else []
            orphans = {k: v for k, v in _orphans(conn).items() if v}
            mismatched = _counter_mismatches(conn)
            # PostgreSQL's index check only reads; FTS5's integrity-check is an INSERT,
            # so a file gets a writable handle below (at head: opening changes nothing),
            # unless its index is stale (a writable open would rebuild it)
            fts_problems = fts_maintenance.integrity_check(conn) if server else None
            stale = fts_stale(conn)
        if stale is not None:
            from ..fts.layout import FTS_STALE_HINT

            fts_problems = [f"full-text index stale ({stale}): {FTS_STALE_HINT}"]
        if server:
            findings.append(
                Finding("foreign_keys", "problem", "not validated (rows were loaded past "
                        f"them): {', '.join(unchecked)}") if unchecked
                else Finding("foreign_keys", "ok", "enforced by the server, every key validated")
            )
        findings.append(
            Finding("orphans", "problem", ", ".join(f"{n} {k}" for k, n in orphans.items()))
            if orphans else Finding("orphans", "ok", "no orphan rows")
        )
        if mismatched:
            sample = ", ".join(f"{sid} ({stored} vs {real})" for sid, stored, real in mismatched[:3])
            findings.append(Finding("counters", "problem", f"{len(mismatched)} session(s) with a wrong message_count: {sample}", fixable=True))
        else:
            findings.append(Finding("counters", "ok", "message counts match the rows"))
        if fts_problems is None:
            with open_store(target, write=True) as db:
                fts_problems = db.fts_integrity_check()
        if fts_problems:
            findings.append(Finding("fts", "problem", "; ".join(fts_problems[:3]), fixable=True))
        else:
            findings.append(Finding("fts", "ok", "full-text indexes consistent with messages"))

    if server:
        findings.append(Finding("wal", "skipped", "not applicable on PostgreSQL: the server "
                                "checkpoints and recycles its own WAL"))
        return findings
    wal = wal_bytes(target)
    if wal > WAL_WARN_BYTES:
        findings.append(Finding("wal", "warning", f"WAL is {human_bytes(wal)}: a long-open reader keeps checkpoints from finishing; restart idle readers or run `maintenance vacuum` when idle"))
    else:
        findings.append(Finding("wal", "ok", f"WAL {human_bytes(wal)}"))
    # the library and the journal against the filesystem (the file backend's judgement)
    findings.extend(Finding(*f) for f in backend_for(target).files.findings(target.path,
                                                                          health.journal_mode))
    return findings


def _privilege_findings(conn, target: "Target") -> list[Finding]:
    """PostgreSQL: what the connected role and every runtime role (a role holding
    privileges on ``sessions``) lack, each named with the command that fixes it."""
    roles = backend_for(target).roles
    if roles is None:
        return []
    hint = "the database's owner runs `hermes-store db grant {role}` (with this --db)"
    return [Finding("privileges", status, detail)
            for status, detail in roles.runtime_findings(conn, hint)]


def _unvalidated_foreign_keys(conn) -> list[str]:
    """PostgreSQL: foreign keys added ``NOT VALID`` (rows loaded past them) and never
    validated since; every other key is checked by the server on every write."""
    return [f"{table}.{name}" for table, name in conn.exec_driver_sql(
        "SELECT conrelid::regclass::text, conname FROM pg_constraint "
        "WHERE contype = 'f' AND NOT convalidated "
        "AND connamespace = current_schema()::regnamespace ORDER BY 1, 2"
    )]


def _fix(target: "Target", findings: list[Finding]) -> list[str]:
    import sqlalchemy as sa

    from .. import schema

    fixed = []
    names = {f.check for f in findings if f.status == "problem" and f.fixable}
    if not names:
        return fixed
    with open_store(target, write=True) as db:
        if "counters" in names:

            def recount(conn) -> int:
                rows = _counter_mismatches(conn)
                for sid, _stored, expected in rows:
                    conn.execute(sa.update(schema.sessions).where(schema.sessions.c.id == sid).values(message_count=expected))
                return len(rows)

            # One write unit of the store: Hermes' own writes cannot interleave
            # (BEGIN IMMEDIATE on a file; on PostgreSQL the store's lock, alone: the default).
            fixed.append(f"counters: {db._write(recount)} session(s) recounted")
        if "fts" in names:
            fixed.append(f"fts: {db.rebuild_fts()} index(es) rebuilt from messages")
    return fixed


@app.command("doctor")
def doctor_command(
    ctx: typer.Context,
    fix: Annotated[bool, typer.Option("--fix", help="Repair what is safe to repair: counters, FTS rebuild.")] = False,
    quick: Annotated[bool, typer.Option("--quick", help="quick_check instead of the full integrity_check.")] = False,
    json_flag: JsonOption = False,
) -> None:
    """Check the database; exit 1 when a problem is found (after --fix: one remains)."""
    o = out(ctx, json_flag)
    target = state(ctx).target
    if target.is_file:
        require_file(target.path)
    findings = run_doctor(target, quick=quick)
    fixed: list[str] = []
    if fix and any(f.status == "problem" and f.fixable for f in findings):
        fixed = _fix(target, findings)
        findings = run_doctor(target, quick=quick)
    problems = [f for f in findings if f.status == "problem"]
    if o.json_mode:
        o.emit({"path": target.display, "ok": not problems, "fixed": fixed, "checks": [asdict(f) for f in findings]})
    else:
        marks = {"ok": "[green]ok[/]", "warning": "[yellow]warn[/]", "problem": "[bold red]FAIL[/]",
                 "skipped": "[dim]n/a[/]"}
        from rich import box
        from rich.markup import escape
        from rich.table import Table

        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        table.add_column("Check", no_wrap=True)
        table.add_column("", no_wrap=True)
        table.add_column("Detail", overflow="fold")
        for f in findings:
            table.add_row(f.check, marks[f.status], escape(f.detail))
        o.print(table)
        for line in fixed:
            o.line(f"fixed {line}")
        if problems:
            hint = " (--fix repairs counters and FTS)" if any(f.fixable for f in problems) and not fix else ""
            o.line(f"{len(problems)} problem(s) found{hint}.")
        else:
            o.line("No problems found.")
    if problems:
        raise typer.Exit(EXIT_PROBLEMS)


# --------------------------------------------------------------------------- repair

@app.command("journal-mode")
def journal_mode_command(
    ctx: typer.Context,
    mode: Annotated[str, typer.Argument(metavar="wal|delete", help="The journal mode to switch the file to.")],
    json_flag: JsonOption = False,
) -> None:
    """Switch the file's journal mode, offline: refused (exit 6) while another process
    has it open. `delete` is the fix for a WAL file on a VM share or network mount."""
    o = out(ctx, json_flag)
    target = state(ctx).target
    path = sqlite_file(ctx, "maintenance journal-mode",
                       "the server keeps its own write-ahead log; there is no journal mode to switch")
    require_file(path)
    before, after = backend_for(target).files.set_journal_mode(path, mode)
    if o.json_mode:
        o.emit({"path": str(path), "before": before, "after": after})
    elif before == after:
        o.line(f"{path}: journal_mode is already {after}; nothing to do.")
    else:
        o.line(f"{path}: journal_mode {before} -> {after}")


@app.command("repair")
def repair_command(ctx: typer.Context, json_flag: JsonOption = False) -> None:
    """Heal duplicated full-text entries in the schema (a backup copy is made first).

    The one damage healed in place: "malformed database schema (messages_fts) - table
    messages_fts already exists" (upstream #43149). Any other damage is refused,
    untouched, with the `recover` hint. Needs the file to itself: stop Hermes first.
    Bounded: three attempts per file (counted in <db>.repair-ledger.json), a backup
    only when none of the same content is kept (the newest three are kept), and none
    unless the volume keeps max(256 MiB, 2 %) free after it. SQLite files only.
    """
    from .common import backend_for

    o = out(ctx, json_flag)
    path = sqlite_file(
        ctx, "maintenance repair",
        "it heals duplicated entries in a SQLite file's schema table, which a PostgreSQL "
        "server does not have; check the store with `hermes-store maintenance doctor` "
        "(its --fix rebuilds the full-text indexes)")
    require_file(path)
    report = backend_for(state(ctx).target).files.repair(path)
    if o.json_mode:
        o.emit(report.as_dict())
        return
    if report.state == "healthy":
        o.line(f"{path}: the schema loads and holds no duplicated entry; nothing to repair.")
        o.note("For a full check run `hermes-store maintenance doctor`.")
        return
    o.line(f"Repaired {path}: removed {len(report.removed)} duplicated schema entr"
           f"{'y' if len(report.removed) == 1 else 'ies'}:")
    for entry in report.removed:
        o.line(f"  - {entry.type} {entry.name} (schema row {entry.rowid})")
    o.line(f"The damaged file as it was: {', '.join(report.backup)}")
    o.line(f"Verification: integrity_check {report.integrity}")


# --------------------------------------------------------------------------- upkeep

@app.command("rebuild-fts")
def rebuild_fts_command(ctx: typer.Context, json_flag: JsonOption = False) -> None:
    """Rebuild the full-text indexes from the messages table (one write transaction)."""
    o = out(ctx, json_flag)
    started = time.monotonic()
    with open_store(state(ctx).target, write=True) as db:
        with o.progress("Rebuilding full-text indexes", None):
            count = db.rebuild_fts()
    seconds = round(time.monotonic() - started, 3)
    if o.json_mode:
        o.emit({"rebuilt": count, "seconds": seconds})
    else:
        o.line(f"Rebuilt {count} full-text index(es) in {seconds:.1f} s.")


@app.command("optimize")
def optimize_command(ctx: typer.Context, json_flag: JsonOption = False) -> None:
    """Merge FTS segments in bounded steps (short transactions, writers keep going).

    PostgreSQL: flush the GIN indexes' pending lists and ANALYZE messages."""
    o = out(ctx, json_flag)
    with open_store(state(ctx).target, write=True) as db:
        count = db.optimize_fts()
    if o.json_mode:
        o.emit({"optimized": count})
    else:
        o.line(f"Optimized {count} full-text index(es).")


@app.command("vacuum")
def vacuum_command(ctx: typer.Context, json_flag: JsonOption = False) -> None:
    """Optimize the indexes and rewrite the file compactly (run when Hermes is idle).

    PostgreSQL: VACUUM (ANALYZE) of the store's tables, which blocks nobody; freed
    space is reused by the database rather than given back to the disk."""
    o = out(ctx, json_flag)
    target = state(ctx).target
    if target.is_file:
        require_file(target.path)
    before = _store_bytes(target)
    with open_store(target, write=True) as db:
        optimized = db.vacuum()
    after = _store_bytes(target)  # a file shrinks at the checkpoint of close()
    if o.json_mode:
        o.emit({"optimized": optimized, "before_bytes": before, "after_bytes": after})
    else:
        o.line(f"Vacuumed: {human_bytes(before)} -> {human_bytes(after)} ({optimized} index(es) optimized).")


def _store_bytes(target: "Target") -> int:
    """The file and its WAL, or the PostgreSQL database's size."""
    if target.is_file:
        return size_bytes(target) + wal_bytes(target)
    with read_engine(target) as engine, engine.connect() as conn:
        return size_bytes(target, conn)
