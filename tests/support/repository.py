"""Fixtures and helpers shared by the repository tests.

Test modules import the fixtures they use (``from support.repository import db, db_path``):
a nested conftest.py would shadow the root one's ``from conftest import …``.

``db`` is a store on each engine in turn: every test that asks for it runs twice,
``[sqlite]`` on a copy of one head file made once per process by a real
``SessionDB(path)`` (running all migrations per test would cost ~1 s each), and
``[postgresql]`` on a fresh database at head on the suite's throwaway server
(``pg_url``). ``tests/conftest.py``'s ``pytest_generate_tests`` parametrizes
``backend``. A test about SQLite files (paths, WAL, raw ``sqlite3``, FTS5) says so
with ``@pytest.mark.sqlite_only("why")`` and runs ``[sqlite]`` only; asking for
``db_path`` (the file behind ``db``) without that marker is a collection error, so
no test is left out of PostgreSQL silently.
"""

from __future__ import annotations

import atexit
import itertools
import shutil
import tempfile
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from support.pgbouncer import through_pooler

from hermes_store import SessionDB, schema

_template: Path | None = None


def head_template() -> Path:
    """A fresh head file, created by SessionDB once per process and closed (its WAL
    checkpointed), so a byte copy of the main file is a complete database."""
    global _template
    if _template is None:
        folder = Path(tempfile.mkdtemp(prefix="hermes-head-"))
        atexit.register(shutil.rmtree, folder, True)
        path = folder / "state.db"
        SessionDB(path).close()
        _template = path
    return _template


def copy_head(dest: Path) -> Path:
    shutil.copyfile(head_template(), dest)
    dest.chmod(0o600)
    return dest


@pytest.fixture
def db_path(tmp_path):
    return copy_head(tmp_path / "state.db")


@pytest.fixture
def backend(request) -> str:
    """The engine under test: "sqlite", "postgresql", or a database on the server
    reached through PgBouncer, "pgbouncer-transaction"/"pgbouncer-session"
    (parametrized by conftest)."""
    return getattr(request, "param", "sqlite")


@pytest.fixture
def db_target(request, backend):
    """What ``db`` opens: a copied head file, or a PostgreSQL URL at head."""
    if backend == "sqlite":
        return request.getfixturevalue("db_path")
    return through_pooler(request, backend, request.getfixturevalue("pg_url"))


@pytest.fixture
def other_target(request, backend, tmp_path):
    """A second, separate database at head on the same engine as ``db_target``."""
    if backend == "sqlite":
        return copy_head(tmp_path / "other.db")
    server, template = request.getfixturevalue("pg_server"), request.getfixturevalue("pg_template")
    name = template.take()
    request.addfinalizer(lambda: template.give_back(name))
    return through_pooler(request, backend, server.url(name))


@pytest.fixture
def db(db_target):
    store = SessionDB(db_target)
    yield store
    store.close()


def reopen(db, **kwargs):
    """Another ``SessionDB`` on the same database as ``db`` (either engine)."""
    return SessionDB(db.target, **kwargs)


def raw_rows(db, sql: str, **params) -> list[tuple]:
    """Rows of plain SQL (``:name`` parameters) run on the store's engine outside the
    repository: what is stored, before any decoding of ours (on PostgreSQL the driver's
    NUL codec still applies: it is part of storing text there, not of the repository)."""
    with db.engine.connect() as conn:
        return [tuple(row) for row in conn.execute(sa.text(sql), params)]

_clock = itertools.count(1)


def add_message(db, session_id: str, role: str, content, *, timestamp: float | None = None,
                active: int = 1, tool_name=None) -> int:
    """Insert a message row directly (tests of listing/lineage do not depend on the
    messages concern); keeps sessions.message_count in step like append_message."""
    ts = timestamp if timestamp is not None else time.time() + next(_clock) * 1e-3

    def unit(conn):
        new_id = conn.execute(sa.insert(schema.messages).values(
            session_id=session_id, role=role, content=content, timestamp=ts, active=active,
            tool_name=tool_name,
        )).inserted_primary_key[0]
        conn.execute(sa.update(schema.sessions).where(schema.sessions.c.id == session_id)
                     .values(message_count=schema.sessions.c.message_count + 1))
        return new_id

    return db._write(unit)


def set_fields(db, session_id: str, **values) -> None:
    """Set session columns directly (e.g. a started_at in the past)."""
    db._write(lambda conn: conn.execute(
        sa.update(schema.sessions).where(schema.sessions.c.id == session_id).values(**values)
    ))


def fts_hits(db, word: str) -> int:
    """Messages the word index finds for ``word`` (FTS5 MATCH, or the tsvector's @@),
    asked directly, so a test sees the index itself and not the search concern."""
    from hermes_store.backends.base import backend_of
    from hermes_store.fts import query as fq
    from hermes_store.backends.sqlite.fts.ddl import FTS_TABLE

    with db._read() as conn:
        sql = backend_of(conn).search
        form, values = sql.prepare(FTS_TABLE, word)
        stmt = (sa.select(sa.func.count()).select_from(sql.source(FTS_TABLE, schema.messages))
                .where(sql.condition(FTS_TABLE, schema.messages, form)))
        return conn.execute(stmt, values).scalar()
