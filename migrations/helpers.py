"""Idempotent building blocks for revisions (decision D4).

Real upstream files stamped N often already hold objects of later versions, because
upstream adds every declared column/table/index on every open. So a revision never
assumes an exact shape: it adds what is missing and drops what is present.

These helpers take the DDL *as arguments*; they never import the head schema, so every
revision stays frozen at its own version (decision D3).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import sqlalchemy as sa
from alembic import op


def scalar(sql: str, **params):
    """The first column of the first row of ``sql`` (``:name`` parameters), or None."""
    return op.get_bind().execute(sa.text(sql), params).scalar()


def dialect() -> str:
    """``"sqlite"`` or ``"postgresql"``: revisions after 0030 run on both and branch on it."""
    return op.get_bind().dialect.name


# Catalog probes per dialect (SQLite's sqlite_master; PostgreSQL's catalogs, in the
# connection's current schema).
_SQLITE_PROBE = "SELECT 1 FROM sqlite_master WHERE type='{kind}' AND name=:n"
_PG_PROBES = {
    "table": "SELECT 1 FROM pg_tables WHERE schemaname = current_schema() AND tablename = :n",
    "view": "SELECT 1 FROM pg_views WHERE schemaname = current_schema() AND viewname = :n",
    "index": "SELECT 1 FROM pg_indexes WHERE schemaname = current_schema() AND indexname = :n",
    "trigger": "SELECT 1 FROM pg_trigger WHERE NOT tgisinternal AND tgname = :n",
}


def _exists(kind: str, name: str) -> bool:
    sql = _PG_PROBES[kind] if dialect() == "postgresql" else _SQLITE_PROBE.format(kind=kind)
    return bool(scalar(sql, n=name))


def has_table(name: str) -> bool:
    return _exists("table", name)


def has_view(name: str) -> bool:
    return _exists("view", name)


def has_index(name: str) -> bool:
    return _exists("index", name)


def has_trigger(name: str) -> bool:
    return _exists("trigger", name)


def columns_of(table: str) -> list[str]:
    if dialect() == "postgresql":
        return list(op.get_bind().execute(sa.text(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = :t ORDER BY ordinal_position"
        ), {"t": table}).scalars())
    rows = op.get_bind().exec_driver_sql(f'PRAGMA table_info("{table}")').fetchall()
    return [r[1] for r in rows]


def has_column(table: str, column: str) -> bool:
    return column in columns_of(table)


def add_columns(table: str, *columns: sa.Column) -> None:
    """ALTER TABLE ADD COLUMN for each column the live table lacks."""
    present = set(columns_of(table))
    for column in columns:
        if column.name not in present:
            op.add_column(table, column)


def drop_columns(table: str, *names: str) -> None:
    """Drop each named column the live table has (SQLite >= 3.35 DROP COLUMN).

    Indexes naming the column must be dropped first; triggers and views that
    mention it must be dropped by the caller too.
    """
    present = set(columns_of(table))
    for name in names:
        if name in present:
            op.get_bind().exec_driver_sql(f'ALTER TABLE "{table}" DROP COLUMN "{name}"')


def create_table(name: str, *columns, **kw) -> None:
    """op.create_table unless the table exists already."""
    if not has_table(name):
        op.create_table(name, *columns, **kw)


def drop_table(name: str) -> None:
    if has_table(name):
        op.drop_table(name)


def create_index(
    name: str,
    table: str,
    columns: Sequence[str | sa.TextClause],
    *,
    unique: bool = False,
    where: str | None = None,
) -> None:
    """CREATE INDEX unless it exists. ``where`` makes it partial; use
    ``sa.text("col DESC")`` or any expression for non-plain key terms."""
    if has_index(name):
        return
    kw = {"sqlite_where": sa.text(where)} if where else {}
    op.create_index(name, table, list(columns), unique=unique, **kw)


def drop_index(name: str) -> None:
    if has_index(name):
        op.drop_index(name)


def execute(statements: str | Iterable[str]) -> None:
    """Run raw DDL/DML (FTS5, views, triggers). A string may hold several
    statements separated by ';' outside trigger bodies: pass a list when a
    statement itself contains ';' (CREATE TRIGGER)."""
    bind = op.get_bind()
    if isinstance(statements, str):
        statements = [statements]
    for stmt in statements:
        if stmt.strip():
            bind.exec_driver_sql(stmt)


def drop_objects(kind: str, *names: str) -> None:
    """DROP <kind> IF EXISTS for each name (kind: TRIGGER, VIEW, TABLE, INDEX)."""
    for name in names:
        op.get_bind().exec_driver_sql(f'DROP {kind} IF EXISTS "{name}"')
