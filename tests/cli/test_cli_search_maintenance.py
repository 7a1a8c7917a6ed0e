"""`hermes-store search` and `hermes-store maintenance …` through the CLI runner."""

from __future__ import annotations

from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process

import sqlalchemy as sa
from support.cli import *  # noqa: F403

from hermes_store import SessionDB


def test_search_json_shape_filters_and_sort(cli, store):
    result = cli(store, "--json", "search", "docker")
    assert result.exit_code == 0, result.output
    data = parse_json(result)
    assert set(data) == {"query", "count", "results"}
    assert data["count"] == len(data["results"]) >= 2
    for hit in data["results"]:
        assert set(hit) == {
            "id", "session_id", "role", "snippet", "timestamp", "tool_name", "source", "model",
            "session_started",
        }
        assert ">>>" in hit["snippet"] and "<<<" in hit["snippet"]

    users = parse_json(cli(store, "--json", "search", "docker", "--role", "user"))["results"]
    assert users and {h["role"] for h in users} == {"user"}
    assert parse_json(cli(store, "--json", "search", "docker", "--source", "telegram"))["count"] == 0
    assert parse_json(cli(store, "--json", "search", "docker", "--limit", "1"))["count"] == 1
    newest = parse_json(cli(store, "--json", "search", "docker", "--sort", "newest"))["results"]
    stamps = [h["timestamp"] for h in newest]
    assert stamps == sorted(stamps, reverse=True)


def test_search_human_output_marks_hits_and_fits(cli, store):
    result = cli(store, "search", "docker")
    assert result.exit_code == 0
    assert ">>>docker<<<" in result.stdout.replace("\n", "")  # no colour when piped: markers stay
    assert_fits(result.stdout)
    none = cli(store, "search", "zzzznotthere")
    assert "No messages match" in flat(none.stdout)
    assert cli(store, "search", "docker", "--sort", "sideways").exit_code == 2


def test_doctor_on_a_healthy_store(cli, native_store):
    store = native_store
    result = cli(store, "--json", "maintenance", "doctor")
    assert result.exit_code == 0, result.output
    data = parse_json(result)
    assert set(data) == {"path", "ok", "fixed", "checks"}
    assert data["ok"] is True and data["fixed"] == []
    names = {c["check"] for c in data["checks"]}
    assert {"integrity", "schema", "foreign_keys", "orphans", "counters", "fts", "wal"} <= names
    for check in data["checks"]:
        assert set(check) == {"check", "status", "detail", "fixable"}
    status = {c["check"]: c["status"] for c in data["checks"]}
    if is_url(store):  # SQLite's file checks do not apply to a server, and say so
        assert (status["integrity"], status["wal"]) == ("skipped", "skipped")
        assert "journal_mode" not in status
    else:
        assert (status["integrity"], status["wal"]) == ("ok", "ok")
    assert all(status[c] == "ok" for c in ("schema", "foreign_keys", "orphans", "counters", "fts"))
    human = cli(store, "maintenance", "doctor")
    assert "No problems found." in flat(human.stdout)
    assert_fits(human.stdout)


def _break_counters_and_index(db) -> None:
    """A wrong message_count, and a full-text index that no longer matches messages."""
    if is_url(db):
        return _break_counters_and_index_on_server(db)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("UPDATE sessions SET message_count = 999 WHERE id = 'fx_20260101_cli_docker'")
    # A message row the index never saw (triggers off for this one insert): FTS drift.
    triggers = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'messages' "
        "AND name LIKE 'messages_fts%insert'"
    ).fetchall()
    for name, _ in triggers:
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute(
        "INSERT INTO messages (session_id, role, content, timestamp) "
        "VALUES ('fx_20260101_cli_codex', 'user', 'unindexed words', 1767225999)"
    )
    conn.execute("UPDATE sessions SET message_count = message_count + 1 WHERE id = 'fx_20260101_cli_codex'")
    for _, sql in triggers:
        conn.execute(sql)
    conn.close()


def _break_counters_and_index_on_server(url: str) -> None:
    # PostgreSQL computes the word index's column itself, so the damage an operator can
    # meet is a lost index (a failed CREATE INDEX CONCURRENTLY, a manual DROP).
    with SessionDB(url) as db, db.engine.begin() as conn:
        conn.execute(sa.text("UPDATE sessions SET message_count = 999 WHERE id = 'fx_20260101_cli_docker'"))
        conn.execute(sa.text(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES ('fx_20260101_cli_codex', 'user', 'unindexed words', 1767225999)"))
        conn.execute(sa.text("UPDATE sessions SET message_count = message_count + 1 "
                             "WHERE id = 'fx_20260101_cli_codex'"))
        conn.execute(sa.text("DROP INDEX messages_fts_trigram"))


def test_doctor_finds_problems_and_fix_repairs_them(cli, native_store):
    store = native_store
    _break_counters_and_index(store)
    found = cli(store, "--json", "maintenance", "doctor")
    assert found.exit_code == 1
    problems = {c["check"]: c for c in parse_json(found)["checks"] if c["status"] == "problem"}
    assert set(problems) == {"counters", "fts"}
    assert "fx_20260101_cli_docker" in problems["counters"]["detail"]
    assert all(c["fixable"] for c in problems.values())
    human = cli(store, "maintenance", "doctor")
    assert "--fix" in human.stdout and "FAIL" in human.stdout
    assert_fits(human.stdout)

    fixed = cli(store, "--json", "maintenance", "doctor", "--fix")
    assert fixed.exit_code == 0, fixed.output
    data = parse_json(fixed)
    assert data["ok"] is True and len(data["fixed"]) == 2
    with SessionDB(store) as db:  # writable: FTS5's integrity-check is an INSERT
        assert db.get_session("fx_20260101_cli_docker")["message_count"] == 12
        assert db.fts_integrity_check() == []
    hits = parse_json(cli(store, "--json", "search", "unindexed"))["results"]
    assert [h["session_id"] for h in hits] == ["fx_20260101_cli_codex"]


def test_doctor_reports_a_file_below_head(cli, tmp_path):
    from conftest import copy_fixture

    db = copy_fixture("upstream-0.17.0-v16", tmp_path)
    result = cli(db, "--json", "maintenance", "doctor", "--quick")
    assert result.exit_code == 1
    schema = next(c for c in parse_json(result)["checks"] if c["check"] == "schema")
    assert schema["status"] == "problem" and "db upgrade" in schema["detail"]


def test_rebuild_optimize_vacuum(cli, store):
    rebuilt = cli(store, "--json", "maintenance", "rebuild-fts")
    assert rebuilt.exit_code == 0, rebuilt.output
    data = parse_json(rebuilt)
    assert set(data) == {"rebuilt", "seconds"} and data["rebuilt"] >= 2
    optimized = parse_json(cli(store, "--json", "maintenance", "optimize"))
    assert optimized == {"optimized": data["rebuilt"]}
    vacuumed = cli(store, "--json", "maintenance", "vacuum")
    assert vacuumed.exit_code == 0
    v = parse_json(vacuumed)
    assert set(v) == {"optimized", "before_bytes", "after_bytes"} and v["after_bytes"] > 0
    for args in (["maintenance", "rebuild-fts"], ["maintenance", "optimize"], ["maintenance", "vacuum"]):
        human = cli(store, *args)
        assert human.exit_code == 0
        assert_fits(human.stdout)
    # Still searchable after all of it.
    assert parse_json(cli(store, "--json", "search", "docker"))["count"] >= 2
