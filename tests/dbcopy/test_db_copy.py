"""``hermes-store db copy SRC DST`` (decision D14) on the suite's real PostgreSQL server.

Every fixture (adopted to head on a copy) goes into PostgreSQL and back into a new SQLite
file, and the file that comes back is compared with the one that went in, table by
table, row by row, byte by byte. A generated store fills every head table with the
values that are hard to carry (NUL, the ``"\\x00json:"`` marker, U+0001, 64-bit
integers, REAL values down to the last bit, BLOBs, a parent session after its children
in key order). A real ``hermes-store db copy`` process is SIGKILLed mid-way and
``--resume`` finishes without a duplicate; refusals and verification are checked through
the CLI as users run it.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from conftest import UPSTREAM_FIXTURES, copy_fixture
from typer.testing import CliRunner

from hermes_store import dbcopy, migrate, schema, telegram_schema
from hermes_store.dbcopy import tables as dbcopy_tables
from hermes_store.cli import app
from hermes_store.cli.output import EXIT_ERROR, EXIT_PROBLEMS, EXIT_SCHEMA
from hermes_store.backends.sqlite.engine import create_engine as sqlite_engine
from hermes_store.fts import maintenance
from hermes_store.repository.system_prompts import INLINE_PROMPTS_KEY

REPO = Path(__file__).resolve().parents[2]
TOPICS_FIXTURE = "upstream-0.19.0-v22-telegram-topics"
ALL_FIXTURES = [stem for stem, _ in UPSTREAM_FIXTURES] + [TOPICS_FIXTURE]
TABLES = [t for t in schema.metadata.sorted_tables] + list(telegram_schema.TABLES)


# --------------------------------------------------------------------------- helpers


def cli(*args) -> "object":
    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "100", "NO_COLOR": "1"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def flat(text: str) -> str:
    return " ".join(text.split())


def adopt(path: Path) -> Path:
    """What ``hermes-store db upgrade`` does to an upstream file."""
    migrate.upgrade(path)
    migrate.upgrade_telegram_topics(path, only_if_present=True)
    return path


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def dump(path: Path) -> dict[str, list[tuple]]:
    """Every row of every head (and topic) table the file has, in key order, each value
    with its SQLite storage class, text also as its UTF-8 bytes."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        present = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        out = {}
        for table in TABLES:
            if table.name not in present:
                continue
            cols = []
            for c in table.columns:
                q = f'"{c.name}"'
                cols += [q, f"typeof({q})", f"CAST({q} AS BLOB)"]
            order = ", ".join(f'"{c.name}"' for c in table.primary_key.columns) or ", ".join(
                f'"{c.name}"' for c in table.columns)
            rows = conn.execute(f'SELECT {", ".join(cols)} FROM "{table.name}" ORDER BY {order}').fetchall()
            if table is schema.state_meta:  # the FTS layer's keys and the identity
                rows = [r for r in rows  # are each file's own
                        if not str(r[0]).startswith("fts_") and r[0] != schema.FILE_IDENTITY_KEY]
            out[table.name] = rows
        return out
    finally:
        conn.close()


def id_high_water(path: Path) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'messages'").fetchone()
        top = conn.execute("SELECT max(id) FROM messages").fetchone()[0] or 0
        return max(top, row[0] if row else 0)
    finally:
        conn.close()


def as_copied_into_a_file(rows: dict[str, list[tuple]]) -> dict[str, list[tuple]]:
    """``dump`` of a store as a copy into a file leaves it (issue 32): a session that
    references its prompt has it inline too, and the file is marked to keep it so, for
    the pre-v25 agent a user takes a file back to (``test_copy_into_a_file.py``)."""
    at, ref = (3 * [c.name for c in schema.sessions.columns].index(name)
               for name in ("system_prompt", "system_prompt_hash"))
    prompts = {r[0]: r[3:6] for r in rows.get("system_prompts", [])}  # hash -> prompt
    sessions = [r[:at] + prompts[r[ref]] + r[at + 3:]
                if r[at] is None and r[ref] in prompts else r for r in rows["sessions"]]
    key = INLINE_PROMPTS_KEY
    marked = [(key, "text", key.encode(), "1", "text", b"1")]
    meta = sorted([r for r in rows["state_meta"] if r[0] != key] + marked)
    return {**rows, "sessions": sessions, "state_meta": meta}


def assert_same_store(before: Path, after: Path) -> None:
    """``after``, a copy of ``before`` into a file, holds the same rows."""
    a, b = as_copied_into_a_file(dump(before)), dump(after)
    assert sorted(a) == sorted(b)
    for table in a:
        assert len(a[table]) == len(b[table]), table
        for row_a, row_b in zip(a[table], b[table]):
            assert row_a == row_b, f"{table}: {row_a[:3]} differs"
    assert id_high_water(after) >= id_high_water(before)


def fts_healthy(path: Path) -> list[str]:
    engine = sqlite_engine(path)
    try:
        with engine.begin() as conn:
            return maintenance.integrity_check(conn)
    finally:
        engine.dispose()


def pg_scalar(url: str, sql: str):
    from hermes_store.backends.postgresql import engine as postgres
    from hermes_store.location import resolve

    engine = postgres.create_engine(resolve(url), poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            return conn.exec_driver_sql(sql).scalar()
    finally:
        engine.dispose()


def pg_execute(url: str, sql: str, params: dict | None = None) -> int:
    from hermes_store.backends.postgresql import engine as postgres
    from hermes_store.location import resolve

    engine = postgres.create_engine(resolve(url), poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            return conn.exec_driver_sql(sql, params or {}).rowcount
    finally:
        engine.dispose()


# --------------------------------------------------------------------------- a store with everything

TEXTS = [
    "plain words",
    "",
    '\x00json:[{"type": "text", "text": "multimodal"}]',
    "nul\x00in\x00the middle\x00",
    "\x01\x02 look-alikes of the escape \x01\x01\x02",
    "中文内容 日本語のテキスト 한국어",
    "emoji 🎉 ünïcödé ½ — ‘quotes’",
    "line\nbreak\ttab \\backslash 'single' \"double\" %_like",
    "y" * 3000,
]
INTS = [0, 1, -1, 2**63 - 1, -(2**63), 2**53 + 1, 1_733_061_234]
REALS = [0.0, -0.0, 0.1, 1733061234.123456, 1e300, 5e-324, 1 / 3, float("inf"), -2.5e-10]
BLOBS = [b"", b"\x00\x01\xff", bytes(range(256))]


def _value(column: sa.Column, i: int):
    j = i + len(column.name)
    if column.nullable and not column.primary_key and j % 7 == 0:
        return None
    if isinstance(column.type, sa.LargeBinary):
        return BLOBS[j % len(BLOBS)]
    if isinstance(column.type, sa.Integer):
        return INTS[j % len(INTS)]
    if isinstance(column.type, sa.Float):
        return REALS[j % len(REALS)]
    return TEXTS[j % len(TEXTS)] + f" #{i}" if not column.primary_key else f"k{i:06d}\x00{TEXTS[j % 8]}"


def _rows(table: sa.Table, n: int, **fixed) -> list[dict]:
    rows = []
    for i in range(n):
        row = {c.name: _value(c, i) for c in table.columns}
        for name, make in fixed.items():
            row[name] = make(i)
        rows.append(row)
    return rows


def populate(path: Path, *, sessions: int = 40, messages: int = 400) -> Path:
    """A head store holding rows in every head table (and the topic tables)."""
    migrate.upgrade(path)
    migrate.upgrade_telegram_topics(path)
    engine = sqlite_engine(path, foreign_keys=False)
    session_ids = [f"session-{i:04d}\x01{TEXTS[i % 8][:10]}" for i in range(sessions)]
    prompts = [f"{i:064x}" for i in range(5)]
    try:
        with engine.begin() as conn:
            conn.execute(schema.system_prompts.insert(), [
                {"hash": h, "prompt": TEXTS[i % len(TEXTS)]} for i, h in enumerate(prompts)])
            conn.execute(schema.sessions.insert(), _rows(
                schema.sessions, sessions,
                id=lambda i: session_ids[i],
                # a parent that comes after its child in key order, and chains
                parent_session_id=lambda i: session_ids[(i + 3) % sessions] if i % 4 == 0 else None,
                system_prompt_hash=lambda i: prompts[i % 5] if i % 3 else None,
                title=lambda i: f"title {i} \x00 {TEXTS[i % 8][:12]}" if i % 2 else None,
            ))
            conn.execute(schema.messages.insert(), _rows(
                schema.messages, messages,
                id=lambda i: 7 + 3 * i,  # gaps
                session_id=lambda i: session_ids[i % sessions],
                active=lambda i: i % 5 != 0,
                compacted=lambda i: int(i % 10 == 0),
                display_order=lambda i: None if i % 2 else 1000 + i,
            ))
            conn.execute(schema.session_model_usage.insert(), _rows(
                schema.session_model_usage, 30,
                session_id=lambda i: session_ids[i % sessions],
                model=lambda i: f"model-{i // 10}",
                task=lambda i: ["", "vision", "compression"][i % 3] + str(i),
            ))
            for table in (schema.state_meta, schema.gateway_routing, schema.gateway_hygiene_state,
                          schema.conversation_generations, schema.gateway_heartbeats,
                          schema.compression_locks, schema.session_turn_leases,
                          schema.async_delegations, schema.delivery_obligations,
                          telegram_schema.telegram_dm_topic_mode):
                conn.execute(table.insert(), _rows(table, 12))
            conn.execute(telegram_schema.telegram_dm_topic_bindings.insert(), _rows(
                telegram_schema.telegram_dm_topic_bindings, 6,
                session_id=lambda i: session_ids[i]))
            # the id counter went further than the last row (a deleted newest message)
            conn.exec_driver_sql("UPDATE sqlite_sequence SET seq = seq + 1000 WHERE name = 'messages'")
    finally:
        engine.dispose()
    return path


@pytest.fixture(scope="session")
def head_fixtures(tmp_path_factory) -> dict[str, Path]:
    """Every fixture adopted to head once per session (copies; originals untouched)."""
    folder = tmp_path_factory.mktemp("copy-fixtures")
    return {stem: adopt(copy_fixture(stem, folder)) for stem in ALL_FIXTURES}


@pytest.fixture(scope="session")
def rich_store(tmp_path_factory) -> Path:
    return populate(tmp_path_factory.mktemp("copy-rich") / "rich.db")


@pytest.fixture(scope="session")
def big_store(tmp_path_factory) -> Path:
    """Enough messages that a copy in batches of 25 takes over a hundred transactions."""
    return populate(tmp_path_factory.mktemp("copy-big") / "big.db", sessions=60, messages=3000)


def private(path: Path, tmp_path: Path, name: str = "source.db") -> Path:
    dest = tmp_path / name
    dest.write_bytes(path.read_bytes())
    dest.chmod(0o600)
    return dest


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("stem", ALL_FIXTURES)
def test_every_fixture_goes_into_postgresql_and_back_unchanged(stem, head_fixtures, pg_url, tmp_path):
    source = private(head_fixtures[stem], tmp_path)
    back = tmp_path / "back.db"

    there = cli("db", "copy", source, pg_url, "--json")
    assert there.exit_code == 0, there.output
    report = json.loads(there.stdout)
    assert report["ok"] and report["verified"] and not report["mismatched"]
    counts = {t["name"]: t["destination_rows"] for t in report["tables"]}
    assert counts["messages"] == len(dump(source)["messages"]) > 0

    home = cli("db", "copy", pg_url, back, "--json")
    assert home.exit_code == 0, home.output
    assert json.loads(home.stdout)["created"] is True

    assert_same_store(source, back)
    nul_rows = [r for r in dump(back)["messages"] if r[9] is not None and "\x00" in r[9]]
    assert nul_rows, "the fixtures carry a multimodal (NUL-marked) message"
    assert migrate.check(pg_url).ok
    assert migrate.check(back).ok
    assert fts_healthy(back) == []
    if stem == TOPICS_FIXTURE:
        assert migrate.telegram_topics_current(back) == migrate.telegram_topics_head()
        assert pg_scalar(pg_url, "SELECT count(*) FROM telegram_dm_topic_bindings") == 3


def test_every_table_and_hard_value_survives_both_directions(rich_store, pg_empty_url, tmp_path):
    source = private(rich_store, tmp_path)
    back = tmp_path / "back.db"
    before = dump(source)
    assert all(before[t.name] for t in TABLES if t is not schema.schema_version)

    there = cli("db", "copy", source, pg_empty_url, "--batch-rows", "37", "--json")
    assert there.exit_code == 0, there.output
    assert json.loads(there.stdout)["created"] is True  # the baseline on an empty database
    assert migrate.current(pg_empty_url) == migrate.head()
    # explicit ids did not leave the sequence behind: the next id is above the source's
    assert pg_scalar(pg_empty_url, "SELECT nextval(pg_get_serial_sequence('messages', 'id'))") \
        > id_high_water(source)

    home = cli("db", "copy", pg_empty_url, back, "--batch-rows", "41")
    assert home.exit_code == 0, home.output
    assert "verified: every table matches" in flat(home.stdout)
    assert_same_store(source, back)
    assert id_high_water(back) == id_high_water(source) + 1  # the nextval above used one
    assert fts_healthy(back) == []
    # the FTS index of the copy finds what the source's finds
    query = "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'multimodal'"
    with sqlite3.connect(source) as a, sqlite3.connect(back) as b:
        assert a.execute(query).fetchone() == b.execute(query).fetchone() != (0,)


def test_sqlite_to_sqlite_and_postgresql_to_postgresql(rich_store, pg_url, pg_empty_url, tmp_path):
    source = private(rich_store, tmp_path)
    copy = tmp_path / "copy.db"
    assert cli("db", "copy", source, copy).exit_code == 0
    assert_same_store(source, copy)

    assert cli("db", "copy", source, pg_url).exit_code == 0
    result = cli("db", "copy", pg_url, pg_empty_url, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] and report["destination_id_high_water"] == id_high_water(source)
    assert cli("db", "copy", "--verify-only", source, pg_empty_url).exit_code == 0


# --------------------------------------------------------------------------- resume


def _progress_rows(dest: str | Path, table: str = "messages") -> int | None:
    """Rows the destination's progress record says are copied (None: no record yet)."""
    try:
        if isinstance(dest, Path):
            if not dest.exists():
                return None
            conn = sqlite3.connect(f"file:{dest}?mode=ro", uri=True, timeout=5)
            try:
                row = conn.execute(
                    f"SELECT rows FROM {dbcopy.PROGRESS_TABLE} WHERE kind = 'table' AND name = ?",
                    (table,)).fetchone()
            finally:
                conn.close()
        else:
            row = (pg_scalar(dest, f"SELECT rows FROM {dbcopy.PROGRESS_TABLE} "
                                   f"WHERE kind = 'table' AND name = '{table}'"),)
        return row[0] if row else None
    except (sqlite3.Error, sa.exc.DBAPIError):
        return None  # the record does not exist yet


def _count(dest: str | Path, table: str) -> int:
    if isinstance(dest, Path):
        with sqlite3.connect(f"file:{dest}?mode=ro", uri=True) as conn:
            return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    return pg_scalar(dest, f"SELECT count(*) FROM {table}")


def _kill_mid_copy(source, dest) -> int:
    """Start a real copy in batches of 25, SIGKILL it once two batches of messages are
    committed; returns the rows the record holds then."""
    env = {**os.environ, "COLUMNS": "100"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "hermes_store", "db", "copy", str(source), str(dest),
         "--batch-rows", "25"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while (_progress_rows(dest) or 0) < 50:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the copy never got going"
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    return _progress_rows(dest)


@pytest.mark.parametrize("direction", ["sqlite-to-postgresql", "postgresql-to-sqlite"])
def test_a_killed_copy_resumes_without_a_duplicate(direction, big_store, pg_url, pg_empty_url, tmp_path):
    total = len(dump(big_store)["messages"])
    if direction == "sqlite-to-postgresql":
        source, dest = private(big_store, tmp_path), pg_empty_url
    else:
        assert cli("db", "copy", big_store, pg_url).exit_code == 0
        source, dest = pg_url, tmp_path / "home.db"

    recorded = _kill_mid_copy(source, dest)
    # what the record says was committed is exactly what is there: no half batch
    assert 50 <= recorded < total
    assert _count(dest, "messages") == recorded

    refused = cli("db", "copy", source, dest)
    assert refused.exit_code == EXIT_ERROR
    assert "--resume" in flat(refused.output) and "interrupted copy" in flat(refused.output)
    assert _count(dest, "messages") == recorded

    resumed = cli("db", "copy", source, dest, "--resume", "--json")
    assert resumed.exit_code == 0, resumed.output
    report = json.loads(resumed.stdout)
    assert report["resumed"] is True and report["ok"]
    messages = next(t for t in report["tables"] if t["name"] == "messages")
    assert messages["copied"] == total - recorded  # continued after the last batch
    assert messages["source_rows"] == messages["destination_rows"] == total
    assert _count(dest, "messages") == total
    assert _progress_rows(dest) is None  # the record is gone once verified

    if direction == "postgresql-to-sqlite":
        assert_same_store(big_store, dest)
        assert fts_healthy(dest) == []
    else:
        assert migrate.check(dest).ok
        back = tmp_path / "back.db"
        assert cli("db", "copy", dest, back).exit_code == 0
        assert_same_store(source, back)


# --------------------------------------------------------------------------- refusals


def test_a_destination_with_rows_is_refused_even_with_resume(head_fixtures, pg_url, tmp_path):
    source = private(head_fixtures["upstream-0.19.0-v22"], tmp_path)
    assert cli("db", "copy", source, pg_url).exit_code == 0
    other = private(head_fixtures["upstream-0.17.0-v16"], tmp_path, "other.db")
    before = _count(pg_url, "messages")
    for extra in ([], ["--resume"]):
        result = cli("db", "copy", other, pg_url, *extra)
        assert result.exit_code == EXIT_ERROR
        assert "is not empty" in flat(result.output)
        assert _count(pg_url, "messages") == before

    full_file = private(head_fixtures["upstream-0.13.0-v11"], tmp_path, "full.db")
    digest = file_digest(full_file)
    result = cli("db", "copy", pg_url, full_file)
    assert result.exit_code == EXIT_ERROR and "is not empty" in flat(result.output)
    assert file_digest(full_file) == digest


def test_a_source_below_head_is_refused_and_nothing_is_written(pg_empty_url, tmp_path):
    source = copy_fixture("upstream-0.19.0-v22", tmp_path)  # written by upstream, not adopted
    digest = file_digest(source)
    for dest in (pg_empty_url, tmp_path / "new.db"):
        result = cli("db", "copy", source, dest)
        assert result.exit_code == EXIT_SCHEMA, result.output
        assert "db upgrade" in flat(result.output) and "head" in flat(result.output)
    assert file_digest(source) == digest
    assert not (tmp_path / "new.db").exists()
    assert migrate.current(pg_empty_url) is None  # still empty


def test_a_source_behind_only_by_the_other_engines_steps_is_copied(rich_store, pg_empty_url,
                                                                   tmp_path):
    # a file the previous release left at 0030 has head's schema on SQLite (0030a and
    # 0030b change PostgreSQL only): copied as it is, and the source left untouched
    source = private(rich_store, tmp_path, "at-0030.db")
    with sqlite3.connect(source) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0030'")
    digest = file_digest(source)
    result = cli("db", "copy", source, pg_empty_url)
    assert result.exit_code == 0, result.output
    assert migrate.current(pg_empty_url) == migrate.head()
    back = tmp_path / "back.db"
    assert cli("db", "copy", pg_empty_url, back).exit_code == 0
    assert_same_store(source, back)
    assert file_digest(source) == digest


def test_topic_tables_below_their_head_are_refused(head_fixtures, tmp_path):
    source = private(head_fixtures[TOPICS_FIXTURE], tmp_path)
    migrate.downgrade_telegram_topics(source, "t001")
    result = cli("db", "copy", source, tmp_path / "new.db")
    assert result.exit_code == EXIT_SCHEMA
    assert "Telegram topic tables" in flat(result.output) and "db upgrade" in flat(result.output)
    assert not (tmp_path / "new.db").exists()


def test_values_postgresql_cannot_hold_are_named_before_anything_is_written(
        head_fixtures, pg_empty_url, tmp_path):
    source = private(head_fixtures["upstream-0.19.0-v22"], tmp_path)
    with sqlite3.connect(source) as conn:
        conn.execute("UPDATE messages SET token_count = 'lots' WHERE id = 3")
    result = cli("db", "copy", source, pg_empty_url)
    assert result.exit_code == EXIT_ERROR
    assert "token_count holds text at key (3)" in flat(result.output)
    assert migrate.current(pg_empty_url) is None
    # a SQLite file holds such values as they are
    assert cli("db", "copy", source, tmp_path / "copy.db").exit_code == 0
    assert_same_store(source, tmp_path / "copy.db")


def test_broken_references_and_unknown_tables_are_refused(head_fixtures, tmp_path):
    source = private(head_fixtures["upstream-0.19.0-v22"], tmp_path)
    with sqlite3.connect(source) as conn:
        conn.execute("UPDATE messages SET session_id = 'nobody' WHERE id = 2")
    result = cli("db", "copy", source, tmp_path / "a.db")
    assert result.exit_code == EXIT_ERROR
    assert "references are broken" in flat(result.output) and "recover" in flat(result.output)

    source = private(head_fixtures["upstream-0.19.0-v22"], tmp_path, "plugin.db")
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE my_plugin (x)")
    result = cli("db", "copy", source, tmp_path / "b.db")
    assert result.exit_code == EXIT_ERROR and "my_plugin" in flat(result.output)
    assert not (tmp_path / "a.db").exists() and not (tmp_path / "b.db").exists()


def test_a_copy_onto_itself_is_refused(head_fixtures, tmp_path):
    source = private(head_fixtures["upstream-0.19.0-v22"], tmp_path)
    result = cli("db", "copy", source, f"sqlite:///{source}")
    assert result.exit_code == EXIT_ERROR and "same database" in flat(result.output)


# --------------------------------------------------------------------------- verification


@pytest.mark.parametrize("tamper", ["change", "delete"])
def test_verify_only_names_a_tampered_table(tamper, head_fixtures, pg_url, tmp_path):
    source = private(head_fixtures["upstream-0.19.0-v22"], tmp_path)
    assert cli("db", "copy", source, pg_url).exit_code == 0
    assert cli("db", "copy", "--verify-only", source, pg_url).exit_code == 0

    if tamper == "change":  # one character of one message
        assert pg_execute(pg_url, "UPDATE messages SET content = content || '.' WHERE id = 5") == 1
    else:
        assert pg_execute(pg_url, "DELETE FROM session_model_usage WHERE ctid = "
                                  "(SELECT min(ctid) FROM session_model_usage)") == 1
    table = "messages" if tamper == "change" else "session_model_usage"

    result = cli("db", "copy", "--verify-only", source, pg_url, "--json")
    assert result.exit_code == EXIT_PROBLEMS
    report = json.loads(result.stdout)
    assert report["mismatched"] == [table] and report["ok"] is False
    row = next(t for t in report["tables"] if t["name"] == table)
    if tamper == "change":
        assert row["source_rows"] == row["destination_rows"]
        assert row["source_hash"] != row["destination_hash"]
    else:
        assert row["source_rows"] == row["destination_rows"] + 1

    human = cli("db", "copy", "--verify-only", source, pg_url)
    assert human.exit_code == EXIT_PROBLEMS
    assert table in flat(human.output) and "differ" in flat(human.output)


def test_a_source_written_during_the_copy_fails_verification_and_keeps_the_record(
        head_fixtures, tmp_path):
    source = private(head_fixtures["upstream-0.19.0-v22"], tmp_path)
    dest = tmp_path / "copy.db"
    wrote = []

    def progress(phase, table, done, total):
        # a writer that was not stopped changes a session already copied
        if phase == "copy" and table == "messages" and not wrote:
            with sqlite3.connect(source) as conn:
                conn.execute("UPDATE sessions SET title = 'changed meanwhile' WHERE rowid = 1")
            wrote.append(1)

    with pytest.raises(dbcopy.CopyMismatchError) as caught:
        dbcopy.copy_store(source, dest, progress=progress)
    assert caught.value.report.mismatched == ["sessions"]
    assert "sessions: same row count" in str(caught.value)
    assert _progress_rows(dest, "sessions") is not None  # not declared finished
    result = cli("db", "copy", "--verify-only", source, dest, "--json")
    assert result.exit_code == EXIT_PROBLEMS
    assert json.loads(result.stdout)["unfinished"] is True


# --------------------------------------------------------------------------- streaming


def test_batches_follow_the_key_and_shrink_for_large_rows(rich_store):
    engine = sqlite_engine(rich_store, read_only=True, journal_mode=None)
    try:
        with engine.connect() as conn:
            spec = dbcopy_tables.Spec(schema.messages)
            batches = list(dbcopy.read_batches(conn, spec, max_rows=100, max_bytes=40_000))
            ids = [row[0] for b in batches for row in b.rows]
            assert ids == sorted(ids) == [7 + 3 * i for i in range(400)]
            assert max(len(b.rows) for b in batches[1:]) < 100  # large rows: fewer per batch
            assert [b.final for b in batches] == [False] * (len(batches) - 1) + [True]
            # composite keys page correctly from any point
            usage = dbcopy_tables.Spec(schema.session_model_usage)
            def read(after=None, n=1000):
                return [r for b in dbcopy.read_batches(conn, usage, after, max_rows=n) for r in b.rows]

            whole = read()
            paged = read(n=4)
            rest = read(tuple(whole[10][i] for i in usage.key_positions), n=3)
            assert paged == whole and rest == whole[11:] and len(whole) == 30
    finally:
        engine.dispose()


def test_a_terminal_sees_progress_per_table_and_stdout_stays_the_report(head_fixtures, tmp_path):
    source = private(head_fixtures["upstream-0.19.0-v22"], tmp_path)
    env = {**os.environ, "TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1", "COLUMNS": "100"}
    done = subprocess.run(
        [sys.executable, "-m", "hermes_store", "db", "copy", str(source), str(tmp_path / "c.db"),
         "--batch-rows", "5"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Copying" in done.stderr  # rich draws on stderr (a terminal, as far as it knows)
    assert "Copying" not in done.stdout and "every table matches" in flat(done.stdout)
