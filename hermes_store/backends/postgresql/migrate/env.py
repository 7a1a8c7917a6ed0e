"""The body of ``migrations/env.py`` on PostgreSQL: one transaction under the migration
lock, the plan checked (nothing below the baseline; only revisions that declare
``dialects`` with ``postgresql``), ``schema_version`` recorded with each step."""

from __future__ import annotations

import sqlalchemy as sa
from alembic.migration import MigrationContext, StampStep
from alembic.script import ScriptDirectory

from .... import errors
from ....connections import BEGIN_MODE
from ....location import Target
from ....migrate.scripts import significant_only
from ....revisions import upstream_version
from ..engine import create_engine
from ..errors import pg_errors
from ..locks import lock_migrations
from ..server import check_server
from .check import include_name, significant_diffs
from .commands import below_baseline, refusal
from .create import BASELINE, baseline_module
from .inspect import DbState, classify

#: what a revision after the baseline declares to run on PostgreSQL (docs/migrations.md)
DIALECTS_ATTRIBUTE = "dialects"


def handles_postgresql(script) -> bool:
    """Whether a revision (an Alembic ``Script``) declares that it runs on PostgreSQL."""
    return "postgresql" in tuple(getattr(script.module, DIALECTS_ATTRIBUTE, ()) or ())


def _check_plan(steps: list, state: DbState, target: Target, scripts: ScriptDirectory) -> bool:
    """Refuse steps below the baseline and revisions that do not handle PostgreSQL;
    True when an empty database needs the baseline first (an upgrade to the baseline
    or beyond)."""
    older = below_baseline(scripts)
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
                raise refusal(target, "stamping an empty database would record a schema it "
                                      "does not have; run `upgrade head` instead")
            if reaches & (older | {"base"}):
                raise refusal(target, f"cannot stamp {', '.join(sorted(reaches))}")
        elif not step.is_upgrade and reaches & (older | {"base"}):
            raise refusal(target, f"cannot downgrade below {BASELINE}")
    upgrades = [s for s in steps if not isinstance(s, StampStep) and s.is_upgrade]
    if state.kind != "empty" or not upgrades:
        return False
    destination = set(upgrades[-1].to_revisions)
    if destination & older:
        raise refusal(target, f"cannot upgrade an empty database to {', '.join(sorted(destination))}")
    return True


def run_env(context, target: Target, *, read_only: bool) -> None:
    """The body of ``migrations/env.py`` for a PostgreSQL target.

    A mutating run is one transaction: it takes the migration lock (the transaction's),
    validates the plan (nothing below the baseline), creates the baseline on an empty
    database, then lets Alembic run the remaining steps inside it. A read-only run
    (``current``, ``history``, ``check``) takes no lock and writes nothing.
    """
    from ....schema import metadata

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
                        baseline_module().create(conn)
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
    version = upstream_version(destination[0])
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
