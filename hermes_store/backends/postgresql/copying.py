"""A PostgreSQL database as one side of ``db copy`` (``Backend.copying``).

As a destination: rows go in with ``COPY``; the secondary indexes, the foreign keys (a
parent session may come after its children in key order) and the display-order
triggers are suspended during the load and recreated from their catalog definitions;
the two GIN indexes are dropped and built once at the end; ``messages``' sequence is
carried over with ``setval`` (explicit ids do not move it), and ``ANALYZE`` refreshes the
planner's statistics. Its columns hold only values of their declared types
(``strict_types``), so a SQLite source is checked first.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import sqlalchemy as sa

from ..facets import CopySide


def _quote(dialect, name: str) -> str:
    return dialect.identifier_preparer.quote(name)


class PostgresqlCopySide(CopySide):
    strict_types = True

    def engine(self, target, *, writable: bool):
        from .engine import create_engine

        # pooled: each batch is a transaction of its own, not a new connection
        return create_engine(target, pool_size=2, max_overflow=2)

    @contextlib.contextmanager
    def snapshot(self, conn) -> Iterator[sa.Connection]:
        conn = conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            conn.exec_driver_sql("SET TRANSACTION READ ONLY")
            yield conn

    def write_rows(self, conn, table: sa.Table, rows: list[tuple]) -> None:
        dialect = conn.dialect
        names = ", ".join(_quote(dialect, c.name) for c in table.columns)
        cursor = conn.connection.driver_connection.cursor()
        try:
            with cursor.copy(f"COPY {_quote(dialect, table.name)} ({names}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        finally:
            cursor.close()

    def suspended_objects(self, conn, names, triggers):
        from .fts.ddl import FTS_INDEXES

        q = lambda n: _quote(conn.dialect, n)  # noqa: E731
        rows = conn.exec_driver_sql(
            "SELECT ic.relname, pg_get_indexdef(i.indexrelid) FROM pg_index AS i "
            "JOIN pg_class AS ic ON ic.oid = i.indexrelid "
            "JOIN pg_class AS tc ON tc.oid = i.indrelid "
            "WHERE tc.relnamespace = current_schema()::regnamespace "
            "AND tc.relname = ANY(%(t)s) AND NOT i.indisprimary "
            "AND NOT EXISTS (SELECT 1 FROM pg_constraint AS k WHERE k.conindid = i.indexrelid) "
            "ORDER BY ic.relname", {"t": names},
        ).all()
        items = [(n, f"DROP INDEX {q(n)}", sql) for n, sql in rows if n not in FTS_INDEXES]
        rows = conn.exec_driver_sql(
            "SELECT k.conname, tc.relname, pg_get_constraintdef(k.oid) FROM pg_constraint AS k "
            "JOIN pg_class AS tc ON tc.oid = k.conrelid "
            "WHERE k.contype = 'f' AND tc.relnamespace = current_schema()::regnamespace "
            "AND tc.relname = ANY(%(t)s) ORDER BY k.conname", {"t": names},
        ).all()
        items += [(n, f"ALTER TABLE {q(t)} DROP CONSTRAINT {q(n)}",
                   f"ALTER TABLE {q(t)} ADD CONSTRAINT {q(n)} {d}") for n, t, d in rows]
        rows = conn.exec_driver_sql(
            "SELECT tg.tgname, tc.relname, pg_get_triggerdef(tg.oid) FROM pg_trigger AS tg "
            "JOIN pg_class AS tc ON tc.oid = tg.tgrelid "
            "WHERE NOT tg.tgisinternal AND tc.relnamespace = current_schema()::regnamespace "
            "AND tg.tgname = ANY(%(g)s) ORDER BY tg.tgname", {"g": list(triggers)},
        ).all()
        items += [(n, f"DROP TRIGGER {q(n)} ON {q(t)}", d) for n, t, d in rows]
        return items

    def before_load(self, conn, low, high) -> None:
        from .fts.ddl import drop_indexes

        drop_indexes(conn)

    def after_load(self, conn, where: str) -> None:
        from .fts.ddl import create_indexes

        create_indexes(conn)

    def after_finish(self, engine) -> None:
        with engine.connect() as conn:
            # planner statistics for the freshly loaded tables (outside a transaction)
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE")

    def id_high_water(self, conn, top: int) -> int:
        sequence = conn.exec_driver_sql(
            "SELECT pg_get_serial_sequence('messages', 'id')").scalar()
        if sequence:
            last, called = conn.exec_driver_sql(
                f"SELECT last_value, is_called FROM {sequence}").one()
            top = max(top, last if called else last - 1)
        return top

    def carry_id_high_water(self, conn, high_water: int) -> None:
        sequence = conn.exec_driver_sql(
            "SELECT pg_get_serial_sequence('messages', 'id')").scalar()
        if high_water > 0:
            conn.exec_driver_sql("SELECT setval(%(s)s, %(v)s, true)",
                                 {"s": sequence, "v": high_water})
        else:
            conn.exec_driver_sql("SELECT setval(%(s)s, 1, false)", {"s": sequence})


COPYING = PostgresqlCopySide()

__all__ = ["COPYING", "PostgresqlCopySide"]
