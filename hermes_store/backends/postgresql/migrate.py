"""The PostgreSQL side of :mod:`hermes_store.migrate` (decision D12).

``hermes_store.migrate``'s public functions hand a PostgreSQL target (a URL, see
:mod:`hermes_store.location`) to the functions of the same name here; ``migrations/env.py``
calls :func:`run_env` for ``alembic -x db=URL …``. Both run the same Alembic scripts.

One chain, one baseline. A PostgreSQL database starts at revision ``0030``: on an empty
database the first upgrade runs the frozen baseline (``migrations/pg_baseline.py``: the
whole head schema) and stamps ``0030`` in the same transaction. Revisions 0001–0030 never
run on PostgreSQL; an upgrade to, a downgrade to or a stamp of anything below ``0030`` is
refused with an error that says so. Revisions after ``0030`` run on both engines (each
declares ``dialects``; ``docs/migrations.md``).

Every migrating run is one transaction (PostgreSQL's DDL is transactional) that takes
``pg_advisory_xact_lock`` (:func:`locks.lock_migrations`) before it reads the version, so
two deploys cannot race, through a transaction pooler too (decision D16); a run that
fails leaves the database as it found it, and ``schema_version`` follows the revision as
on SQLite.

Also here: :func:`create_head` (the head from the live definitions — ``schema.py``,
``fts/ddl.py``, ``display_order.py``), :func:`ensure_schema` (what ``SessionDB``
needs at open), :func:`check` (drift against ``hermes_store.schema``, and the Telegram
topic tables' against ``telegram_schema``) and :func:`telegram_topics_state`.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass

import sqlalchemy as sa
from alembic import command
from alembic.migration import MigrationContext, StampStep
from alembic.script import ScriptDirectory

from ... import errors, location, telegram_schema
from ...location import Target
from ...migrate.results import CheckResult
from ...connections import BEGIN_MODE
from ...migrate.scripts import (
    config,
    describe,
    head,
    is_at,
    scripts,
    significant_only,
    telegram_topics_head,
)
from ...migrate.topics import (
    TopicsCheck,
    TopicsState,
    check_telegram_topics,
    topic_stamp,
    write_telegram_topic_meta,
)
from ..base import Migrations, StoreState
from .engine import create_engine
from .errors import pg_errors
from .locks import lock_migrations
from .server import check_server

#: the revision a PostgreSQL database starts at (``migrations/pg_baseline.py``)
BASELINE = "0030"


# --------------------------------------------------------------------------- the head


def create_head(conn: sa.Connection) -> None:
    """The head schema from the live definitions, on an empty database (inside the
    caller's transaction). While the head is the baseline this equals
    ``pg_baseline.create`` (tested); later it is what the baseline plus the revisions
    after it must give."""
    from ... import schema
    from . import display_order
    from .fts import ddl as fts_ddl

    schema.metadata.create_all(conn)
    fts_ddl.create_fts(conn)
    display_order.create_display_triggers(conn)
    conn.execute(schema.schema_version.insert().values(version=schema.SCHEMA_VERSION))


def _baseline_module():
    from ...migrations import pg_baseline

    return pg_baseline


# --------------------------------------------------------------------------- probing


@dataclass(frozen=True)
class DbState:
    """What a PostgreSQL database holds: ``kind`` is ``"empty"`` (no tables),
    ``"alembic"`` (``revision`` from ``alembic_version``) or ``"foreign"``."""

    kind: str
    revision: str | None
    tables: frozenset[str]


def classify(conn: sa.Connection, target: Target) -> DbState:
    """Read what the database holds (its current schema) and refuse what we must not
    touch: tables that are not a Hermes store, a revision newer than this package."""
    tables = frozenset(sa.inspect(conn).get_table_names())
    if "alembic_version" not in tables:
        if not tables:
            return DbState("empty", None, tables)
        raise errors.NotADatabaseError(
            f"{target.display} holds tables ({', '.join(sorted(tables)[:5])}…) but is not a "
            "hermes_store database (no alembic_version); point hermes_store at an empty "
            "database or at one it created"
        )
    rows = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalars().all()
    if not rows:
        return DbState("empty" if tables == {"alembic_version"} else "alembic", None, tables)
    if len(rows) > 1:
        raise errors.DatabaseDamagedError(
            f"{target.display}: alembic_version holds {len(rows)} rows instead of one"
        )
    revision = rows[0]
    directory = scripts()
    try:
        directory.get_revision(revision)
    except Exception:
        newest = directory.get_current_head()
        if revision.isdigit() and newest and revision > newest:
            raise errors.SchemaTooNewError(
                f"{target.display} has revision {revision}, newer than this hermes_store "
                f"understands (up to {newest}); upgrade hermes_store. The database was not "
                "changed."
            ) from None
        raise errors.SchemaError(
            f"{target.display}: stamped with revision {revision!r}, which this package does "
            "not know; it was migrated by a different tool"
        ) from None
    return DbState("alembic", revision, tables)


@contextlib.contextmanager
def _connection(target: Target):
    engine = create_engine(target, poolclass=sa.pool.NullPool)
    try:
        with pg_errors(target), engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def inspect_database(target: Target) -> DbState:
    """Probe without writing (one read-only transaction)."""
    with _connection(target) as conn:
        conn.exec_driver_sql("SET TRANSACTION READ ONLY")
        state = classify(conn, target)
        conn.rollback()
        return state


def current(target: Target) -> str | None:
    """The database's revision (None for an empty database)."""
    return inspect_database(target).revision


def schema_version_of(target: Target) -> int | None:
    with _connection(target) as conn:
        if not sa.inspect(conn).has_table("schema_version"):
            return None
        return conn.exec_driver_sql("SELECT version FROM schema_version LIMIT 1").scalar()


# --------------------------------------------------------------------------- commands


def _config(target: Target, progress=None):
    return config(target=target, progress=progress)


def upgrade(target: Target, revision: str = "head", *, progress=None) -> str | None:
    """Upgrade to ``revision`` (an empty database starts from the baseline); returns the
    revision reached. A database already there is left alone (no lock, no DDL)."""
    if is_at(current(target), revision):
        return revision if revision not in ("head", "heads") else head()
    command.upgrade(_config(target, progress), revision)
    return current(target)


def downgrade(target: Target, revision: str) -> str | None:
    """Downgrade to ``revision``; below the baseline (``0030``) is refused."""
    command.downgrade(_config(target), revision)
    return current(target)


def refuse_below_baseline(target: Target, revision: str) -> None:
    """Raise the error :func:`downgrade` would raise for a revision below the baseline
    (or ``base``), before anything is asked or run."""
    if revision == "base" or revision in _below_baseline(scripts()):
        raise _refuse(target, f"cannot downgrade below {BASELINE}")


def stamp(target: Target, revision: str) -> None:
    command.stamp(_config(target), revision)


def ensure_schema(target: Target, *, auto_upgrade: bool = True, read_only: bool = False) -> None:
    """Bring the database to head, or raise the error that says what to run (what
    ``SessionDB`` does at open, as ``store.ensure_schema`` for a file)."""
    newest = head()
    at = current(target)
    if at == newest:
        return
    if read_only or not auto_upgrade:
        state = "has no schema yet" if at is None else f"is at schema revision {at}"
        why = "it is opened read-only" if read_only else "auto_upgrade=False"
        raise errors.SchemaOutOfDateError(
            f"{target.display} {state}, head is {newest}, and {why}: "
            f"{location.upgrade_hint(target)}"
        )
    upgrade(target, "head")


# --------------------------------------------------------------------------- Telegram topics


def create_telegram_topics(conn: sa.Connection, revision: str = "head") -> str:
    """The Telegram topic opt-in on PostgreSQL, inside the caller's transaction
    (``SessionDB.apply_telegram_topic_migration``'s write unit).

    A PostgreSQL database has no tables upstream Hermes created and no older shape of
    them, so the branch's tables are created at its head from ``telegram_schema``'s Core
    metadata (the declarations the branch's revisions must end at, tested on SQLite),
    stamped in the branch's own version table, and upstream's ``state_meta`` key is
    written — one source for the shape, no Alembic run. From the branch's next revision
    on, the paired-revision rule applies to it as to the main chain; until a revision
    handles PostgreSQL, a database below the head is refused here."""
    T = telegram_schema
    head = telegram_topics_head()
    if revision not in ("head", "heads", head):
        raise errors.SchemaError(
            f"the Telegram topic tables are created at the branch head ({head}) on "
            f"PostgreSQL; {revision} cannot be chosen"
        )
    version = sa.Table(T.VERSION_TABLE, sa.MetaData(),
                       sa.Column("version_num", sa.String(32), primary_key=True))
    inspector = sa.inspect(conn)
    if inspector.has_table(T.VERSION_TABLE):
        at = conn.execute(sa.select(version.c.version_num)).scalar()
        if at == head:
            return head
        raise errors.SchemaError(
            f"the Telegram topic tables are at revision {at}, this hermes_store creates "
            f"them at {head} on PostgreSQL and has no step between the two"
        )
    found = [name for name in T.TABLE_NAMES if inspector.has_table(name)]
    if found:
        raise errors.SchemaError(
            f"{', '.join(found)} exist(s) without {T.VERSION_TABLE}: created by another "
            "tool; drop them or stamp them before opting in"
        )
    T.metadata.create_all(conn)
    version.create(conn)
    conn.execute(version.insert().values(version_num=head))
    write_telegram_topic_meta(conn, head)
    return head


def telegram_topics_state(conn: sa.Connection, where: object = "database"):
    """Where the database stands on the Telegram topic branch (``migrate.TopicsState``):
    ``absent``, ``alembic`` (stamped in the branch's version table) or ``unstamped``
    (its tables without the version table: another tool made them). No upstream-made
    tables to adopt on a server, so never ``upstream``."""
    T = telegram_schema
    names = set(sa.inspect(conn).get_table_names())
    meta = None
    if "state_meta" in names:
        meta = conn.execute(
            sa.text("SELECT value FROM state_meta WHERE key = :key"), {"key": T.META_KEY}
        ).scalar()
        meta = None if meta is None else str(meta)
    if T.VERSION_TABLE in names:
        revision = topic_stamp(lambda sql: conn.exec_driver_sql(sql).all(), where)
        if revision is not None:
            return TopicsState("alembic", revision, meta)
    if any(name in names for name in T.TABLE_NAMES):
        return TopicsState("unstamped", None, meta)
    return TopicsState("absent", None, meta)


def inspect_telegram_topics(target: Target):
    """:func:`telegram_topics_state` in one read-only transaction."""
    with _connection(target) as conn:
        conn.exec_driver_sql("SET TRANSACTION READ ONLY")
        state = telegram_topics_state(conn, target.display)
        conn.rollback()
        return state


# --------------------------------------------------------------------------- env.py


def _below_baseline(scripts: ScriptDirectory) -> frozenset[str]:
    """Revisions older than the baseline (they never run on PostgreSQL)."""
    older = {r.revision for r in scripts.iterate_revisions(BASELINE, "base")}
    older.discard(BASELINE)
    return frozenset(older)


def _refuse(target: Target, what: str) -> errors.SchemaError:
    return errors.SchemaError(
        f"{target.display}: {what}. A PostgreSQL database starts at revision {BASELINE} "
        f"(the head schema of schema version 30, in one step); revisions before {BASELINE} "
        "exist for SQLite files only"
    )


#: what a revision after the baseline declares to run on PostgreSQL (docs/migrations.md)
DIALECTS_ATTRIBUTE = "dialects"


def handles_postgresql(script) -> bool:
    """Whether a revision (an Alembic ``Script``) declares that it runs on PostgreSQL."""
    return "postgresql" in tuple(getattr(script.module, DIALECTS_ATTRIBUTE, ()) or ())


def _check_plan(steps: list, state: DbState, target: Target, scripts: ScriptDirectory) -> bool:
    """Refuse steps below the baseline and revisions that do not handle PostgreSQL;
    True when an empty database needs the baseline first (an upgrade to the baseline
    or beyond)."""
    older = _below_baseline(scripts)
    for step in steps:
        reaches = set(step.to_revisions) or {"base"}
        if not isinstance(step, StampStep):
            script = step.revision
            if script.revision not in older and script.revision != BASELINE \
                    and not handles_postgresql(script):
                raise errors.SchemaError(
                    f"{target.display}: revision {script.revision} does not declare "
                    f"{DIALECTS_ATTRIBUTE} = (\"sqlite\", \"postgresql\"), so it cannot run on "
                    "PostgreSQL; every revision after the baseline must handle both engines"
                )
        if isinstance(step, StampStep):
            if state.kind == "empty":
                raise _refuse(target, "stamping an empty database would record a schema it "
                                      "does not have; run `upgrade head` instead")
            if reaches & (older | {"base"}):
                raise _refuse(target, f"cannot stamp {', '.join(sorted(reaches))}")
        elif not step.is_upgrade and reaches & (older | {"base"}):
            raise _refuse(target, f"cannot downgrade below {BASELINE}")
    upgrades = [s for s in steps if not isinstance(s, StampStep) and s.is_upgrade]
    if state.kind != "empty" or not upgrades:
        return False
    destination = set(upgrades[-1].to_revisions)
    if destination & older:
        raise _refuse(target, f"cannot upgrade an empty database to {', '.join(sorted(destination))}")
    return True


def run_env(context, target: Target, *, read_only: bool) -> None:
    """The body of ``migrations/env.py`` for a PostgreSQL target.

    A mutating run is one transaction: it takes the migration lock (the transaction's),
    validates the plan (nothing below the baseline), creates the baseline on an empty
    database, then lets Alembic run the remaining steps inside it. A read-only run
    (``current``, ``history``, ``check``) takes no lock and writes nothing.
    """
    from ...schema import metadata

    def configure(connection, on_version_apply) -> None:
        context.configure(
            connection=connection,
            target_metadata=metadata,
            include_name=include_name,
            transactional_ddl=True,
            transaction_per_migration=True,
            compare_type=True,
            on_version_apply=on_version_apply,
            process_revision_directives=significant_only(significant_diffs),
        )

    engine = create_engine(target, poolclass=sa.pool.NullPool)
    try:
        with pg_errors(target):
            if read_only:
                with engine.connect() as conn:
                    classify(conn, target)
                    conn.rollback()
                    configure(conn, ())
                    with context.begin_transaction():
                        context.run_migrations()
                return
            # One transaction for the whole run (PostgreSQL's DDL is transactional): the
            # migration lock is the transaction's, so it holds behind a transaction
            # pooler and cannot outlive the run; a failure leaves the database as it was.
            with engine.connect() as conn:
                conn = conn.execution_options(**{BEGIN_MODE: "IMMEDIATE"})  # READ COMMITTED
                with conn.begin():
                    lock_migrations(conn)
                    check_server(conn, target)
                    state = classify(conn, target)
                    heads = (state.revision,) if state.revision else ()
                    plan = context._proxy.context_opts.get("fn")
                    steps = list(plan(heads, None)) if plan is not None else []
                    if _check_plan(steps, state, target, context.script):
                        _baseline_module().create(conn)
                        MigrationContext.configure(conn).stamp(context.script, BASELINE)
                        _progress(context, BASELINE, "PostgreSQL baseline: the head schema of v30")
                    # Alembic sees the transaction and runs every step inside it
                    configure(conn, (record_schema_version,))
                    with context.begin_transaction():
                        context.run_migrations()
    finally:
        engine.dispose()


def _progress(context, revision: str, description: str) -> None:
    callback = context.config.attributes.get("progress")
    if callback is not None:
        callback(revision, description)


def record_schema_version(ctx, step, heads, run_args) -> None:
    """``schema_version`` follows each step, inside the step's transaction (as on SQLite)."""
    conn = ctx.connection
    if not sa.inspect(conn).has_table("schema_version"):
        return
    destination = step.destination_revision_ids
    if not destination:
        conn.exec_driver_sql("DELETE FROM schema_version")
        return
    version = int(destination[0]) if destination[0].isdigit() else None
    if version is None:
        return  # a branch revision (not an upstream schema version)
    updated = conn.exec_driver_sql(
        "UPDATE schema_version SET version = %(v)s", {"v": version}
    ).rowcount
    if not updated:
        conn.exec_driver_sql("INSERT INTO schema_version (version) VALUES (%(v)s)", {"v": version})
    callback = ctx.config.attributes.get("progress") if ctx.config is not None else None
    if callback is not None and not step.is_stamp:
        doc = (step.up_revision.doc or "").strip().splitlines()
        callback(destination[0], doc[0] if doc else "")


# --------------------------------------------------------------------------- drift


def include_name(name, type_, parent_names) -> bool:
    """``migrate.include_name`` plus the PostgreSQL FTS objects (columns, indexes)."""
    from .fts import ddl as fts_ddl

    if name is not None and type_ in ("column", "index") and fts_ddl.is_fts_object(name):
        return False
    if type_ == "table" and name is not None:
        return not telegram_schema.owns(name)
    return True


def _pk_nullability_rule(diff, metadata: sa.MetaData | None = None) -> bool:
    """PostgreSQL makes every primary-key column NOT NULL; the metadata declares single
    TEXT keys nullable for SQLite's sake (upstream's quirk, ``schema.py``). Not drift."""
    from ... import schema

    metadata = schema.metadata if metadata is None else metadata
    if not isinstance(diff, list):
        return False
    for item in diff:
        if item[0] != "modify_nullable":
            return False
        _, _schema, table, column, _info, _old, new = item
        col = metadata.tables.get(table, sa.Table("_", sa.MetaData())).c.get(column)
        if col is None or not col.primary_key or new is not True:
            return False
    return True


def without_pk_nullability(diffs: list, metadata: sa.MetaData) -> list:
    """Autogenerate's differences minus the primary-key nullability PostgreSQL imposes."""
    return [d for d in diffs if not _pk_nullability_rule(d, metadata)]


def significant_diffs(_conn, diffs: list) -> list:
    """Autogenerate's differences that are drift on PostgreSQL (:func:`check`, and
    ``alembic check`` through ``migrate.scripts.significant_only``)."""
    from ...schema import metadata

    return without_pk_nullability(diffs, metadata)


def check(target: Target):
    """At head, do the ordinary tables match ``hermes_store.schema``, and is the
    full-text layout whole? (read-only)"""
    from alembic.autogenerate import compare_metadata

    from ...schema import metadata
    from .fts.ddl import layout_problems

    state = inspect_database(target)
    drift: list[str] = []
    full_text: tuple[str, ...] = ()
    topics = TopicsCheck("absent", None, telegram_topics_head(), None, [])
    if state.kind == "alembic":
        with _connection(target) as conn:
            conn.exec_driver_sql("SET TRANSACTION READ ONLY")
            ctx = MigrationContext.configure(
                conn, opts={"include_name": include_name, "compare_type": True}
            )
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*expression-based index")
                diffs = compare_metadata(ctx, metadata)
            drift = [describe(d) for d in significant_diffs(conn, diffs)]
            # the full-text layout is left out of the comparison above: its own check
            full_text = tuple(layout_problems(conn))
            topics = check_telegram_topics(conn, target.display)
            conn.rollback()
    return CheckResult(state.revision, head(), drift, topics, full_text)


class PostgresqlMigrations(Migrations):
    """``Backend.migrations`` of the PostgreSQL backend (the functions above)."""

    baseline = BASELINE

    def state(self, target) -> StoreState:
        found = inspect_database(target)
        return StoreState(found.kind, found.revision)

    def schema_version_of(self, target):
        return schema_version_of(target)

    def upgrade(self, target, revision="head", *, progress=None):
        return upgrade(target, revision, progress=progress)

    def downgrade(self, target, revision):
        return downgrade(target, revision)

    def refuse_downgrade(self, target, revision) -> None:
        refuse_below_baseline(target, revision)

    def stamp(self, target, revision) -> None:
        stamp(target, revision)

    def check(self, target):
        return check(target)

    def ensure_schema(self, target, *, auto_upgrade, read_only) -> None:
        ensure_schema(target, auto_upgrade=auto_upgrade, read_only=read_only)

    def run_env(self, context, target, *, read_only) -> None:
        run_env(context, target, read_only=read_only)

    def run_topics_env(self, context, target, *, read_only) -> None:
        raise errors.HermesStoreError(
            f"{target.display}: the Telegram topic branch runs through Alembic on SQLite "
            "files only; on PostgreSQL call SessionDB.apply_telegram_topic_migration()"
        )

    def topics_state(self, target):
        return inspect_telegram_topics(target)

    def topics_state_on(self, conn, where):
        return telegram_topics_state(conn, where)

    def upgrade_topics_on(self, conn, revision):
        return create_telegram_topics(conn, revision)

    def topics_drift(self, conn, diffs, metadata):
        return without_pk_nullability(diffs, metadata)


MIGRATIONS = PostgresqlMigrations()


__all__ = [
    "BASELINE",
    "MIGRATIONS",
    "DbState",
    "check",
    "classify",
    "create_head",
    "create_telegram_topics",
    "current",
    "downgrade",
    "ensure_schema",
    "inspect_database",
    "inspect_telegram_topics",
    "refuse_below_baseline",
    "run_env",
    "schema_version_of",
    "stamp",
    "telegram_topics_state",
    "upgrade",
    "significant_diffs",
    "without_pk_nullability",
]
