"""What the store needs of a PostgreSQL server, and the checks and upkeep that ask it.

``check_server(conn, target)`` refuses a server the store cannot run on (PostgreSQL < 15,
a non-UTF8 database, no ``pg_trgm``) with what to do; ``vacuum`` is PostgreSQL's
counterpart of SQLite's ``VACUUM``. ("Is the schema at head?" is ``migrate/head.py``.)
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ... import errors
from ...connections import BEGIN_MODE
from ...location import Target

#: the oldest server supported (D11: PostgreSQL 15 or newer)
MIN_SERVER_VERSION = 150000
#: extensions the head schema needs (shipped in postgresql-contrib)
REQUIRED_EXTENSIONS = ("pg_trgm",)


def check_server(conn: sa.Connection, target: Target) -> None:
    """Refuse a server or database the schema cannot live on, saying what to do."""
    version = int(conn.exec_driver_sql("SHOW server_version_num").scalar())
    if version < MIN_SERVER_VERSION:
        shown = conn.exec_driver_sql("SHOW server_version").scalar()
        raise errors.UnsupportedServerError(
            f"{target.display}: PostgreSQL {shown} is too old; hermes_store needs "
            "PostgreSQL 15 or newer"
        )
    encoding = conn.exec_driver_sql("SHOW server_encoding").scalar()
    if encoding != "UTF8":
        raise errors.UnsupportedServerError(
            f"{target.display}: the database's encoding is {encoding}, not UTF8; create it "
            "with CREATE DATABASE … ENCODING 'UTF8' TEMPLATE template0"
        )
    available = set(conn.exec_driver_sql(
        "SELECT name FROM pg_available_extensions WHERE name = ANY(%(names)s)",
        {"names": list(REQUIRED_EXTENSIONS)},
    ).scalars())
    missing = [e for e in REQUIRED_EXTENSIONS if e not in available]
    if missing:
        raise errors.UnsupportedServerError(
            f"{target.display}: the server lacks the extension(s) {', '.join(missing)}; "
            "install PostgreSQL's contrib package (Debian/Ubuntu: postgresql-contrib)"
        )


def vacuum(engine: Engine, tables) -> None:
    """PostgreSQL's counterpart of SQLite's ``VACUUM``: ``VACUUM (ANALYZE)`` of the
    store's tables (dead rows become reusable space, the planner's statistics are
    refreshed). It runs outside a transaction and does not block readers or writers;
    autovacuum does the same on its own schedule."""
    names = ", ".join(tables)
    with engine.connect() as conn:
        conn.execution_options(**{BEGIN_MODE: None}).exec_driver_sql(f"VACUUM (ANALYZE) {names}")


__all__ = ["MIN_SERVER_VERSION", "REQUIRED_EXTENSIONS", "check_server", "vacuum"]
