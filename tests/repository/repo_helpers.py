"""Fixtures and helpers shared by the repository tests.

Test modules import the fixtures they use (``from repo_helpers import db, db_path``):
a nested conftest.py would shadow the root one's ``from conftest import …``.

Every test gets a copy of one head file made once per process by a real
``SessionDB(path)`` (running all migrations per test would cost ~1 s each).
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
def db(db_path):
    store = SessionDB(db_path)
    yield store
    store.close()

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
    with db._read() as conn:
        return conn.exec_driver_sql(
            "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?", (word,)
        ).scalar()
