"""Adoption: every upstream-written fixture, upgraded to head by `alembic upgrade head`
and by hermes_store.migrate.upgrade, loses nothing and ends up a normal head file."""

from __future__ import annotations

import json
import re
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process

import pytest
from conftest import UPSTREAM_FIXTURES, copy_fixture
from support.migrations import (
    alembic_revision,
    connect_ro,
    data_digest,
    file_digest,
    fts_integrity_errors,
    row_counts,
    run_alembic,
    schema,
    schema_version,
)

from hermes_store import migrate
from hermes_store.revisions import upstream_version

#: tables whose rows are FTS bookkeeping (state_meta gains fts_* keys; checked by key)
NOT_COUNTED = {"state_meta"}
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]{3,}")
WORD = re.compile(r"[^\W_]+")  # what unicode61 calls a token: letters and digits


def _rows(path, table):
    with connect_ro(path) as conn:
        conn.row_factory = sqlite3.Row
        rows = (dict(r) for r in conn.execute(f"SELECT rowid AS rowid_, * FROM {table}"))
        return {r.pop("rowid_"): r for r in rows}


def _snapshot(path):
    return {
        "counts": row_counts(path),
        "messages": _rows(path, "messages"),
        "sessions": _rows(path, "sessions"),
        "state_meta": {r["key"]: r["value"] for r in _rows(path, "state_meta").values()},
    }


def _upgrade(way, db, home):
    if way == "alembic":
        result = run_alembic("upgrade", "head", db=db, home=home)
        assert result.returncode == 0, result.stderr
    else:
        migrate.upgrade(db)


def _effective_prompt(conn, session_id):
    # 0025 moves prompts into system_prompts; the session keeps a hash
    return conn.execute(
        "SELECT COALESCE(s.system_prompt, p.prompt) FROM sessions s "
        "LEFT JOIN system_prompts p ON p.hash = s.system_prompt_hash WHERE s.id = ?",
        (session_id,),
    ).fetchone()[0]


def _assert_rows_kept(before, db):
    after_messages = _rows(db, "messages")
    assert after_messages.keys() == before["messages"].keys()
    for rowid, old in before["messages"].items():
        new = after_messages[rowid]
        for column, value in old.items():
            if column == "active" and value is None:
                assert new[column] == 1  # upstream #51646 heal: NULL means visible
            else:
                assert new[column] == value and type(new[column]) is type(value), (rowid, column)

    after_sessions = _rows(db, "sessions")
    assert after_sessions.keys() == before["sessions"].keys()
    with connect_ro(db) as conn:
        for rowid, old in before["sessions"].items():
            new = after_sessions[rowid]
            for column, value in old.items():
                if column == "system_prompt":
                    assert _effective_prompt(conn, old["id"]) == value, old["id"]
                elif column == "model_config" and value != new[column]:
                    # 0016 may tag delegate children; nothing else may change
                    tagged = json.loads(new[column])
                    assert tagged.pop("_delegate_from", None) is not None, old["id"]
                    assert tagged == json.loads(value or "{}"), old["id"]
                else:
                    assert new[column] == value, (old["id"], column)

    meta = {r["key"]: r["value"] for r in _rows(db, "state_meta").values()}
    assert {k: meta.get(k) for k in before["state_meta"]} == before["state_meta"]


def _assert_every_message_is_found(db):
    found_by_trigram = 0
    with connect_ro(db) as conn:
        trigram_ids = {i for (i,) in conn.execute("SELECT id FROM messages_fts_trigram_src")}
        rows = conn.execute("SELECT id, content, tool_name, tool_calls FROM messages").fetchall()
        for message_id, *texts in rows:
            text = next((t for t in texts if t and WORD.search(t)), None)
            if text is None:
                continue  # nothing to search for (empty message)
            token = WORD.search(text).group()
            hit = conn.execute(
                "SELECT 1 FROM messages_fts WHERE messages_fts MATCH ? AND rowid = ?",
                (f'"{token}"', message_id),
            ).fetchone()
            assert hit, f"message {message_id} not found by {token!r}"
            cjk = CJK.search(texts[0] or "")
            if cjk and message_id in trigram_ids:
                hit = conn.execute(
                    "SELECT 1 FROM messages_fts_trigram WHERE messages_fts_trigram MATCH ? "
                    "AND rowid = ?",
                    (f'"{cjk.group()[:3]}"', message_id),
                ).fetchone()
                assert hit, f"CJK message {message_id} not found by trigram {cjk.group()[:3]!r}"
                found_by_trigram += 1
    return found_by_trigram


@pytest.mark.parametrize("way", ["alembic", "migrate"])
@pytest.mark.parametrize("stem, version", UPSTREAM_FIXTURES, ids=[s for s, _ in UPSTREAM_FIXTURES])
def test_adopting_an_upstream_file_keeps_every_row_and_search(tmp_path, hermes_home, stem, version, way):
    db = copy_fixture(stem, tmp_path)
    assert migrate.current(db) == f"{version:04d}"
    before = _snapshot(db)

    _upgrade(way, db, hermes_home)

    assert alembic_revision(db) == migrate.head()
    assert schema_version(db) == [upstream_version(migrate.head())]
    after_counts = row_counts(db)
    for table, count in before["counts"].items():
        if table not in NOT_COUNTED:
            assert after_counts[table] == count, table
    _assert_rows_kept(before, db)
    assert _assert_every_message_is_found(db) > 0  # the fixtures hold CJK messages
    assert fts_integrity_errors(db) == []

    digest, shape, data = file_digest(db), schema(db), data_digest(db)
    _upgrade(way, db, hermes_home)  # a second upgrade finds nothing to do
    assert (file_digest(db), schema(db), data_digest(db)) == (digest, shape, data)
