"""Export -> import round trips: every upstream fixture, exactly, and idempotently."""

from __future__ import annotations

import io
import json
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process

import pytest
from support.cli import *  # noqa: F403
from conftest import UPSTREAM_FIXTURES, copy_fixture, fixture_contents

from hermes_store import SessionDB, migrate, transfer
from hermes_store.errors import StoreClosedError, StoreReadOnlyError

#: what a round trip must reproduce, with the order that makes rows comparable
CANONICAL = {
    "sessions": "id",
    "messages": "id",
    "session_model_usage": "session_id, model, billing_provider, billing_base_url, billing_mode, task",
    "system_prompts": "hash",
}


#: maintained by the display-order triggers: an adopted file leaves them NULL until a
#: backfill, an insert derives them at once; a value that was set must survive as is
DERIVED = ("display_identity", "display_order")


def _comparable(table_rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in DERIVED} for r in table_rows]


def _derived_kept(target_rows: list[dict], source_rows: list[dict]) -> None:
    for got, want in zip(target_rows, source_rows):
        for key in DERIVED:
            if want.get(key) is not None:
                assert got[key] == want[key]


@pytest.mark.parametrize("stem", [stem for stem, _ in UPSTREAM_FIXTURES])
def test_every_fixture_round_trips_exactly(stem, cli, empty_store, tmp_path):
    source = copy_fixture(stem, tmp_path)
    migrate.upgrade(source)
    export = tmp_path / "export.jsonl"
    result = cli(source, "--json", "sessions", "export", "--output", export)
    assert result.exit_code == 0, result.output
    counts = parse_json(result)
    expected_sessions = len(fixture_contents(stem)["sessions"])
    assert counts["sessions"] == expected_sessions

    first = parse_json(cli(empty_store, "--json", "sessions", "import", export))
    assert first["sessions_added"] == expected_sessions
    assert first["messages_added"] == counts["messages"]
    assert (first["sessions_skipped"], first["detached"], first["renumbered"]) == (0, 0, 0)
    assert first["ignored_fields"] == []

    for table, order in CANONICAL.items():
        assert _comparable(rows(empty_store, table, order)) == _comparable(rows(source, table, order)), f"{table} differs"

    _derived_kept(rows(empty_store, "messages", "id"), rows(source, "messages", "id"))

    again = parse_json(cli(empty_store, "--json", "sessions", "import", export))
    assert (again["sessions_added"], again["messages_added"]) == (0, 0)
    assert again["sessions_skipped"] == expected_sessions
    assert again["messages_skipped"] == counts["messages"]
    assert _comparable(rows(empty_store, "messages", "id")) == _comparable(rows(source, "messages", "id"))

    # The index was fed by the inserts: what was findable is findable.
    with SessionDB(empty_store) as db:
        assert db.fts_integrity_check() == []


def test_upstream_export_all_shape_imports(store, empty_store, head_templates, tmp_path):
    with SessionDB(store) as db:
        exported = db.export_all()
        expected = {s["id"]: db.get_messages(s["id"]) for s in exported}
    path = tmp_path / "upstream.json"
    path.write_text(json.dumps(exported, ensure_ascii=False))

    report = transfer.import_file(empty_store, path)
    assert report.format == "json"
    assert report.sessions_added == len(exported)
    assert report.detached == 0
    with SessionDB(empty_store) as db:
        for sid, messages in expected.items():
            got = db.get_messages(sid)
            drop = ("id", "display_identity", "display_order")
            assert [{k: v for k, v in m.items() if k not in drop} for m in got] == [
                {k: v for k, v in m.items() if k not in drop} for m in messages
            ]
            assert db.get_session(sid)["title"] == next(s["title"] for s in exported if s["id"] == sid)

    # one export_session() dict, and JSONL with one such dict per line
    with SessionDB(store) as db:
        single = db.export_session("fx_20260101_tg_cjk")
    fresh = copy_db(head_templates["empty"], tmp_path / "fresh.db")
    one = tmp_path / "one.json"
    one.write_text(json.dumps(single))
    assert transfer.import_file(fresh, one).sessions_added == 1
    lines = tmp_path / "lines.jsonl"
    lines.write_text("\n".join(json.dumps(s) for s in exported) + "\n")
    report = transfer.import_file(fresh, lines)
    assert (report.format, report.sessions_added, report.sessions_skipped) == ("jsonl", len(exported) - 1, 1)


def test_children_before_parents_and_missing_parents(empty_store, tmp_path):
    header = {"hermes_store_export": 1, "schema_version": 30, "exported_at": "x"}

    def session(sid, parent=None):
        return {"session": {"id": sid, "source": "cli", "started_at": 1.0, "parent_session_id": parent}}

    records = [
        header,
        session("child", parent="parent"),
        {"message": {"id": 7, "session_id": "child", "role": "user", "content": "hi", "timestamp": 2.0}},
        session("parent"),
        session("orphan", parent="nowhere"),
        {"end": {"sessions": 3, "messages": 1}},
    ]
    path = tmp_path / "order.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    report = transfer.import_file(empty_store, path)
    assert (report.sessions_added, report.detached) == (3, 1)
    parents = {r["id"]: r["parent_session_id"] for r in rows(empty_store, "sessions", "id")}
    assert parents == {"child": "parent", "orphan": None, "parent": None}


def test_truncated_or_inconsistent_exports_import_nothing(store, empty_store, tmp_path):
    buffer = io.StringIO()
    transfer.write_export(store, buffer, "jsonl")
    lines = buffer.getvalue().splitlines(keepends=True)

    truncated = tmp_path / "truncated.jsonl"
    truncated.write_text("".join(lines[:-1]))
    with pytest.raises(transfer.ImportFileError, match="truncated"):
        transfer.import_file(empty_store, truncated)

    dropped = tmp_path / "dropped.jsonl"
    dropped.write_text("".join(lines[:5] + lines[6:]))
    with pytest.raises(transfer.ImportFileError, match="damaged"):
        transfer.import_file(empty_store, dropped)
    assert rows(empty_store, "sessions", "id") == []


def test_message_ids_taken_in_the_target_are_renumbered_in_order(store, tmp_path):
    buffer = io.StringIO()
    transfer.write_export(store, buffer, "jsonl", session_id="fx_20260101_tg_cjk")
    text = buffer.getvalue().replace("fx_20260101_tg_cjk", "copy_of_cjk")
    path = tmp_path / "copy.jsonl"
    path.write_text(text)
    report = transfer.import_file(store, path)  # same ids as the original session: all taken
    assert report.sessions_added == 1 and report.renumbered == report.messages_added == 10
    titles = {r["id"]: r["title"] for r in rows(store, "sessions", "id")}
    assert report.retitled == 1
    assert titles["copy_of_cjk"] == titles["fx_20260101_tg_cjk"] + " (imported)"
    original = [m["content"] for m in rows(store, "messages", "id") if m["session_id"] == "fx_20260101_tg_cjk"]
    copied = [m["content"] for m in rows(store, "messages", "id") if m["session_id"] == "copy_of_cjk"]
    assert copied == original


def test_export_reads_a_file_that_was_never_upgraded_without_changing_it(tmp_path):
    db = copy_fixture("upstream-0.15.0-v13", tmp_path)
    before = db.read_bytes()
    buffer = io.StringIO()
    counts = transfer.write_export(db, buffer, "jsonl")
    lines = [json.loads(line) for line in buffer.getvalue().splitlines()]
    assert lines[0]["schema_version"] == 13
    assert lines[-1] == {"end": {"sessions": counts.sessions, "messages": counts.messages}}
    assert counts.sessions == len(fixture_contents("upstream-0.15.0-v13")["sessions"])
    assert db.read_bytes() == before


def _share_prompt_and_store_a_blob(path) -> tuple[str, int]:
    """Give a second session the first one's stored prompt and one message a BLOB
    value; returns (the session given the prompt, the message holding the BLOB)."""
    conn = sqlite3.connect(path)
    try:
        with conn:
            prompt_hash, owner = conn.execute(
                "SELECT system_prompt_hash, id FROM sessions WHERE system_prompt_hash IS NOT NULL"
            ).fetchone()
            other = conn.execute("SELECT id FROM sessions WHERE id != ? ORDER BY id", (owner,)).fetchone()[0]
            conn.execute("UPDATE sessions SET system_prompt_hash = ? WHERE id = ?", (prompt_hash, other))
            blob_id = conn.execute("SELECT min(id) FROM messages").fetchone()[0]
            conn.execute("UPDATE messages SET platform_message_id = x'00ff10' WHERE id = ?", (blob_id,))
    finally:
        conn.close()
    return other, blob_id


@pytest.mark.sqlite_only("stores a BLOB in a TEXT column through sqlite3 (PostgreSQL's types refuse it)")
def test_export_records_do_not_depend_on_the_page_size(store):
    # Pages stop at the first short one: page sizes at, below and above the number of
    # sessions (6) and of one session's messages (12, 10, 8, …) must all give the
    # same records as one page holding everything.
    shared, blob_id = _share_prompt_and_store_a_blob(store)
    whole = list(transfer.iter_export(store, page_size=10_000))
    for size in (1, 2, 3, 5, 6, 7, 8, 12, 13):
        counts = transfer.ExportCounts()
        assert list(transfer.iter_export(store, page_size=size, counts=counts)) == whole, size
        assert (counts.sessions, counts.messages) == (
            len(rows(store, "sessions", "id")), len(rows(store, "messages", "id")))

    sessions = [r for r in whole if "session" in r]
    assert [s["session"]["id"] for s in sessions] == [
        r["id"] for r in sorted(rows(store, "sessions", "id"), key=lambda r: (r["started_at"], r["id"]))]
    usage = rows(store, "session_model_usage", CANONICAL["session_model_usage"])
    assert sorted(u for s in sessions for u in map(json.dumps, s["model_usage"])) == sorted(map(json.dumps, usage))
    blob = next(r["message"] for r in whole if "message" in r and r["message"]["id"] == blob_id)
    assert blob["platform_message_id"] == {"$base64": "AP8Q"}

    with_prompt = [s for s in sessions if s["system_prompt"] is not None]
    assert len(with_prompt) == 2 and shared in {s["session"]["id"] for s in with_prompt}
    first, second = (s["system_prompt"] for s in with_prompt)
    assert first == second and first is not second  # a caller may change one record


def test_export_refuses_a_page_size_below_one(store):
    with pytest.raises(ValueError, match="page_size"):
        list(transfer.iter_export(store, page_size=0))


@pytest.mark.sqlite_only("copies the store's file to open it read-only")
def test_import_and_export_through_an_open_session_db(store, empty_store, tmp_path):
    export = tmp_path / "rich.jsonl"
    with SessionDB(store) as source, open(export, "w", encoding="utf-8") as fh:
        counts = transfer.write_export(source, fh, "jsonl")
    with SessionDB(empty_store) as db:
        report = transfer.import_file(db, export)
        assert (report.sessions_added, report.messages_added) == (counts.sessions, counts.messages)
        assert db.session_count(include_archived=True) >= 1
        assert {s["id"] for s in db.search_sessions(limit=None)} == set(report.added_ids)
    assert _comparable(rows(empty_store, "messages", "id")) == _comparable(rows(store, "messages", "id"))

    target = copy_db(store, tmp_path / "read-only.db")
    before = rows(target, "sessions", "id")
    with SessionDB(target, read_only=True) as db, pytest.raises(StoreReadOnlyError):
        transfer.import_file(db, export)
    assert rows(target, "sessions", "id") == before
    closed = SessionDB(target)
    closed.close()
    with pytest.raises(StoreClosedError):
        transfer.import_file(closed, export)
