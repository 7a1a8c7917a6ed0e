"""Drift of a PostgreSQL database from ``hermes_store.schema`` (and the topic tables' from
``telegram_schema``), with the reflection artefacts of this engine left out."""

from __future__ import annotations

import warnings

import sqlalchemy as sa
from alembic.migration import MigrationContext

from .... import telegram_schema
from ....location import Target
from ....migrate.results import CheckResult
from ....migrate.scripts import (
    describe,
    head,
    telegram_topics_head,
)
from ....migrate.topics import (
    TopicsCheck,
    check_telegram_topics,
)
from .inspect import connection_to, inspect_database


def include_name(name, type_, parent_names) -> bool:
    """``migrate.include_name`` plus the PostgreSQL FTS objects (columns, indexes)."""
    from ..fts import ddl as fts_ddl

    if name is not None and type_ in ("column", "index") and fts_ddl.is_fts_object(name):
        return False
    if type_ == "table" and name is not None:
        return not telegram_schema.owns(name)
    return True


def _pk_nullability_rule(diff, metadata: sa.MetaData | None = None) -> bool:
    """PostgreSQL makes every primary-key column NOT NULL; the metadata declares single
    TEXT keys nullable for SQLite's sake (upstream's quirk, ``schema.py``). Not drift."""
    from .... import schema

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
    from ....schema import metadata

    return without_pk_nullability(diffs, metadata)


def check(target: Target):
    """At head, do the ordinary tables match ``hermes_store.schema``, and is the
    full-text layout whole? (read-only)"""
    from alembic.autogenerate import compare_metadata

    from ....schema import metadata
    from ..fts.maintenance import layout_problems

    state = inspect_database(target)
    drift: list[str] = []
    full_text: tuple[str, ...] = ()
    topics = TopicsCheck("absent", None, telegram_topics_head(), None, [])
    if state.kind == "alembic":
        with connection_to(target) as conn:
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
