"""Is a PostgreSQL database at head? Two statements, without Alembic (as SQLite's
``migrate/head.py`` for a file): the usual open of a store."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ....connections import BEGIN_MODE
from ....revisions import upstream_version


def stamped_at_head(engine: Engine, head: str) -> bool:
    """True when the database's ``alembic_version`` holds the head and
    ``schema_version`` its number: the usual open, answered in two statements without
    Alembic. Anything else (no tables, another revision) is False, for
    ``migrate/commands.py`` to judge; connection errors propagate."""
    with engine.connect() as conn:
        conn = conn.execution_options(**{BEGIN_MODE: None})
        try:
            stamps = conn.exec_driver_sql("SELECT version_num FROM alembic_version").all()
            versions = conn.exec_driver_sql("SELECT version FROM schema_version").all()
        except sa.exc.ProgrammingError:  # a table is missing: not a store at head
            conn.rollback()
            return False
    return [tuple(r) for r in stamps] == [(head,)] and \
        [tuple(r) for r in versions] == [(upstream_version(head),)]


__all__ = ["stamped_at_head"]
