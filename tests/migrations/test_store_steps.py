"""The store's own steps (``0030a``, ``0030b``): revisions after upstream's v30 that are no upstream
version. ``schema_version`` stays upstream's, and on SQLite, whose schema they leave as
it is, a file still stamped ``0030`` — or written by upstream at v30 — reads as at head
(docs/migrations.md, "The store's own steps")."""

from __future__ import annotations

import pytest
from support.migrations import alembic_revision, file_digest, schema, schema_version

from hermes_store import SessionDB, errors, migrate
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process


def _file_at_0030(path):
    with SessionDB(path) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "the wombat report 袋熊报告")
    assert migrate.downgrade(path, "0030") == "0030"
    return path


def test_the_head_is_a_step_after_upstreams_30_that_keeps_its_version(tmp_path):
    path = tmp_path / "state.db"
    with SessionDB(path):
        pass
    assert migrate.head() == alembic_revision(path) == "0030b"
    assert schema_version(path) == [30]


def test_a_file_at_0030_is_read_as_at_head_and_moved_by_a_writable_open(tmp_path):
    path = _file_at_0030(tmp_path / "state.db")
    shape, digest = schema(path), file_digest(path)

    with SessionDB(path, read_only=True) as db:  # no refusal: the same SQLite schema
        assert db.get_session("s")["source"] == "cli"
        assert [m["session_id"] for m in db.search_messages("wombat")] == ["s"]
    assert file_digest(path) == digest and alembic_revision(path) == "0030"

    with SessionDB(path, auto_upgrade=False) as db:  # used as it is, stamp kept
        db.append_message("s", "assistant", "noted")
        assert db.message_count("s") == 2
    assert alembic_revision(path) == "0030"

    with SessionDB(path) as db:  # a writable open moves the stamp, nothing else
        assert db.message_count("s") == 2
    assert alembic_revision(path) == migrate.head() and schema_version(path) == [30]
    assert schema(path) == shape


def test_an_upstream_v30_file_opens_read_only_without_adoption(tmp_path):
    path = _file_at_0030(tmp_path / "state.db")
    with sqlite3.connect(path) as conn:  # as upstream writes it: no alembic_version
        conn.execute("DROP TABLE alembic_version")
    sqlite3.connect(path).close()
    digest = file_digest(path)
    with SessionDB(path, read_only=True) as db:
        assert [m["session_id"] for m in db.search_messages("袋熊报告")] == ["s"]
    assert file_digest(path) == digest
    with SessionDB(path) as db:  # adopted: stamped 0030, then moved to head
        assert db.message_count("s") == 1
    assert alembic_revision(path) == migrate.head()


def test_a_step_this_store_does_not_know_is_refused_untouched(tmp_path):
    path = _file_at_0030(tmp_path / "state.db")
    with sqlite3.connect(path) as conn:  # a newer store's next own step
        conn.execute("UPDATE alembic_version SET version_num = '0030z'")
    sqlite3.connect(path).close()
    digest = file_digest(path)
    for read_only in (False, True):
        with pytest.raises(errors.SchemaTooNewError, match="upgrade hermes_store"):
            SessionDB(path, read_only=read_only)
    assert file_digest(path) == digest
