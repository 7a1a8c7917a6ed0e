"""The full-text-search history, step by step, on a populated file (decision D7).

For each revision that changes the FTS layout (0023, 0028, 0029, 0030): after the
upgrade the file holds exactly that layout, FTS5's integrity-check (rank=1: the index
also agrees with its content table/view) passes, every message is found by its own word,
CJK text through the trigram index, and the trigram rules of that version hold; the
triggers keep it that way through inserts, updates and deletes. After the downgrade the
previous layout is back, just as consistent.
"""

from __future__ import annotations

import json
import shutil
from hermes_store.backends.sqlite.library import dbapi as _dbapi

sqlite3 = _dbapi()  # the store's SQLite library: one copy of SQLite per process
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from hermes_store import migrate
from hermes_store.backends.sqlite.engine import create_engine
from hermes_store.migrations import fts_history as fh


@dataclass(frozen=True)
class Row:
    session: str
    role: str
    content: str
    token: str  # a word only this message contains
    tool_name: str | None = None
    tool_calls: str | None = None


LONG_TOOL_HEAD = "mike13"
LONG_TOOL_TAIL = "november14"  # beyond the 8,192 characters layout 3 indexes of a tool row
CJK = "日本語"

SESSIONS = {
    # id: (source, parent, model_config, end_reason)
    "cli_main": ("cli", None, '{"temperature": 0.2}', None),
    "tg_cjk": ("telegram", None, None, None),
    "cron_job": ("cron", None, '{"job_id": "daily"}', "cron_complete"),
    "subagent_run": ("subagent", "cli_main", '{"_delegate_from": "cli_main"}', "completed"),
    "cli_delegate": ("cli", "cli_main", '{"_delegate_from": "cli_main", "toolsets": ["web"]}', None),
    "compressed_parent": ("cli", None, None, "compression"),
    "compression_child": ("cli", "compressed_parent", None, None),
    "bad_config": ("cli", None, "{not json", None),
}

ROWS = [
    Row("cli_main", "user", "alpha1 how do I build this?", "alpha1"),
    Row("cli_main", "assistant", "bravo2 let me look", "bravo2",
        tool_calls=json.dumps([{"function": {"name": "terminal", "arguments": "delta4"}}])),
    Row("cli_main", "tool", "charlie3 build output", "charlie3", tool_name="terminal"),
    Row("cli_main", "tool", f"{LONG_TOOL_HEAD} " + "x " * 5_000 + LONG_TOOL_TAIL, LONG_TOOL_HEAD,
        tool_name="read_file"),
    Row("tg_cjk", "user", f"中文と{CJK}のテスト echo5", "echo5"),
    Row("tg_cjk", "assistant", f"{CJK}で答えます foxtrot6", "foxtrot6"),
    Row("cron_job", "user", "golf7 daily digest", "golf7"),
    Row("cron_job", "assistant", "hotel8 summary", "hotel8"),
    Row("subagent_run", "user", "india9 subtask", "india9"),
    Row("cli_delegate", "assistant", "juliet10 delegated", "juliet10"),
    Row("compressed_parent", "user", "kilo11 before compression", "kilo11"),
    Row("compression_child", "user", "lima12 after compression", "lima12"),
    Row("bad_config", "user", "oscar15 odd config", "oscar15"),
]

LAYOUT_OF = {
    "0022": fh.LEGACY_INLINE,
    "0023": fh.LAYOUT_1_V23,
    "0027": fh.LAYOUT_1_V23,
    "0028": fh.LAYOUT_1_V28,
    "0029": fh.LAYOUT_1_V29,
    "0030": fh.LAYOUT_3_V30,
}


def in_trigram(layout: fh.FtsLayout, row: Row) -> bool:
    """The trigram rule of each version, written out independently of the DDL."""
    if layout is fh.LEGACY_INLINE:
        return True  # v11-v22 indexed every row
    if row.role == "tool":
        return False
    source, _parent, config, _end = SESSIONS[row.session]
    if layout in (fh.LAYOUT_1_V23, fh.LAYOUT_1_V28):
        return True
    if source == "cron":
        return False
    if layout is fh.LAYOUT_1_V29:
        return True
    try:
        delegate = "_delegate_from" in json.loads(config or "{}")
    except ValueError:
        delegate = False
    return source != "subagent" and not delegate


# --------------------------------------------------------------------------- the file


def _seed(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    for n, (sid, (source, parent, config, end)) in enumerate(SESSIONS.items()):
        conn.execute(
            "INSERT INTO sessions (id, source, parent_session_id, model_config, started_at, "
            "ended_at, end_reason) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (sid, source, parent, config, 100.0 + n, 150.0 + n if end else None, end),
        )
    for n, row in enumerate(ROWS):
        conn.execute(
            "INSERT INTO messages (session_id, role, content, tool_name, tool_calls, timestamp) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (row.session, row.role, row.content, row.tool_name, row.tool_calls, 200.0 + n),
        )
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


@pytest.fixture(scope="module")
def seeded_v22(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("fts_history") / "seed.db"
    migrate.upgrade(path, "0022")
    _seed(path)
    return path


@pytest.fixture
def file_at(seeded_v22, tmp_path):
    def make(revision: str) -> Path:
        path = tmp_path / "state.db"
        shutil.copyfile(seeded_v22, path)
        migrate.upgrade(path, revision)
        return path
    return make


class Probe:
    """Read what the FTS objects of a file hold, through SQLAlchemy like the revisions."""

    def __init__(self, path: Path):
        self.engine = create_engine(path)

    def __enter__(self):
        self.conn = self.engine.connect()
        return self

    def __exit__(self, *exc):
        self.conn.close()
        self.engine.dispose()

    def ids(self, table: str, query: str) -> set[int]:
        return set(self.conn.execute(
            sa.text(f"SELECT rowid FROM {table} WHERE {table} MATCH :q"), {"q": query}).scalars())

    def message_ids(self, rows) -> dict[str, int]:
        return {row.token: self.conn.execute(
            sa.text("SELECT id FROM messages WHERE instr(content, :t) > 0 ORDER BY id LIMIT 1"),
            {"t": row.token}).scalar() for row in rows}

    def meta(self, key: str):
        return self.conn.execute(sa.text("SELECT value FROM state_meta WHERE key = :k"), {"k": key}).scalar()

    def write(self, sql: str, **params) -> None:
        if self.conn.in_transaction():  # end the read transaction earlier queries opened
            self.conn.rollback()
        with self.conn.begin():
            self.conn.execute(sa.text(sql), params)


def assert_consistent(path: Path, layout: fh.FtsLayout, rows=ROWS) -> None:
    with Probe(path) as probe:
        assert fh.detect_layout(probe.conn) is layout
        assert fh.integrity_problems(probe.conn) == []
        ids = probe.message_ids(rows)
        expected_version = None if layout.storage_version is None else str(layout.storage_version)
        assert probe.meta(fh.STORAGE_VERSION_KEY) == expected_version
        for row in rows:
            # unicode61 index: every message, tool rows included, by its own word
            assert probe.ids(fh.BASE_TABLE, row.token) == {ids[row.token]}, (layout.label, row)
            trigram = probe.ids(fh.TRIGRAM_TABLE, f'"{row.token}"')
            assert trigram == ({ids[row.token]} if in_trigram(layout, row) else set()), (layout.label, row)
        tool_name_hits = probe.ids(fh.BASE_TABLE, "terminal")
        assert ids["charlie3"] in tool_name_hits
        assert ids[LONG_TOOL_HEAD] in probe.ids(fh.BASE_TABLE, LONG_TOOL_HEAD)
        tail_indexed = layout is not fh.LAYOUT_3_V30
        assert bool(probe.ids(fh.BASE_TABLE, LONG_TOOL_TAIL)) is tail_indexed
        cjk_rows = {ids[r.token] for r in rows if CJK in r.content and in_trigram(layout, r)}
        assert cjk_rows and probe.ids(fh.TRIGRAM_TABLE, f'"{CJK}"') == cjk_rows


def exercise_triggers(path: Path, layout: fh.FtsLayout) -> list[Row]:
    """Insert, update (indexed and non-indexed columns) and delete through the layout's
    triggers; return the rows the file now holds."""
    rows = list(ROWS)
    with Probe(path) as probe:
        probe.write("INSERT INTO messages (session_id, role, content, timestamp) "
                    "VALUES ('tg_cjk', 'user', 'papa16 新しい日本語の質問', 300)")
        rows.append(Row("tg_cjk", "user", "papa16 新しい日本語の質問", "papa16"))
        probe.write("INSERT INTO messages (session_id, role, content, timestamp) "
                    "VALUES ('cron_job', 'assistant', 'quebec17 next run', 301)")
        rows.append(Row("cron_job", "assistant", "quebec17 next run", "quebec17"))
        # an indexed column changes: the old word must leave both indexes
        probe.write("UPDATE messages SET content = 'romeo18 edited' WHERE content LIKE 'alpha1%'")
        rows = [Row(r.session, r.role, "romeo18 edited", "romeo18") if r.token == "alpha1" else r
                for r in rows]
        probe.write("UPDATE messages SET content = 'sierra19 edited digest' WHERE content LIKE 'golf7%'")
        rows = [Row(r.session, r.role, "sierra19 edited digest", "sierra19") if r.token == "golf7" else r
                for r in rows]
        # columns no index reads
        probe.write("UPDATE messages SET token_count = 42, finish_reason = 'stop' WHERE session_id = 'cli_main'")
        probe.write("DELETE FROM messages WHERE content LIKE 'india9%'")
        rows = [r for r in rows if r.token != "india9"]
        assert probe.ids(fh.BASE_TABLE, "alpha1") == set()
        assert probe.ids(fh.TRIGRAM_TABLE, '"alpha1"') == set()
        assert probe.ids(fh.BASE_TABLE, "india9") == set()
    assert_consistent(path, layout, rows)
    return rows


STEPS = [("0022", "0023"), ("0027", "0028"), ("0028", "0029"), ("0029", "0030")]


@pytest.mark.parametrize("before,after", STEPS, ids=[f"{a}->{b}" for a, b in STEPS])
def test_layout_step_up_and_down(file_at, before, after):
    path = file_at(before)
    assert_consistent(path, LAYOUT_OF[before])

    migrate.upgrade(path, after)
    assert_consistent(path, LAYOUT_OF[after])
    rows = exercise_triggers(path, LAYOUT_OF[after])

    migrate.downgrade(path, before)
    assert_consistent(path, LAYOUT_OF[before], rows)


def test_whole_history_from_inline_to_layout_3_and_back(file_at):
    path = file_at("0022")
    migrate.upgrade(path, "head")
    assert_consistent(path, fh.LAYOUT_3_V30)
    migrate.downgrade(path, "0022")
    assert_consistent(path, fh.LEGACY_INLINE)
    with Probe(path) as probe:
        for key in (fh.STORAGE_VERSION_KEY, *fh.REBUILD_STATE_KEYS):
            assert probe.meta(key) is None


def test_pending_upstream_rebuild_markers_force_a_full_rebuild(file_at):
    """A file caught in upstream's chunked optimize: the index is empty and the gate keys
    say rows (P, H] are missing. The next layout step rebuilds everything and drops the keys."""
    path = file_at("0028")
    with Probe(path) as probe:
        high = probe.conn.execute(sa.text("SELECT MAX(id) FROM messages")).scalar()
        for table in (fh.BASE_TABLE, fh.TRIGRAM_TABLE):
            probe.write(f"INSERT INTO {table}({table}) VALUES ('delete-all')")
        probe.write("INSERT INTO state_meta (key, value) VALUES ('fts_rebuild_high_water', :h), "
                    "('fts_rebuild_progress', '0'), ('fts_optimize_available', '1')", h=str(high))
        assert probe.ids(fh.BASE_TABLE, "alpha1") == set()
    migrate.upgrade(path, "0029")
    assert_consistent(path, fh.LAYOUT_1_V29)
    with Probe(path) as probe:
        for key in ("fts_rebuild_high_water", "fts_rebuild_progress", "fts_optimize_available"):
            assert probe.meta(key) is None


def test_upstream_file_past_v23_still_on_the_inline_layout_is_converted(tmp_path):
    """Upstream never converted upgraded files: a real file stamped 26 can still hold the
    v11 inline index. Adoption repairs it to the v26 layout, and the chain goes on."""
    from conftest import copy_fixture

    path = copy_fixture("upstream-0.19.0-v22", tmp_path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE schema_version SET version = 26")
        messages = conn.execute("SELECT id, content FROM messages WHERE role <> 'tool'").fetchall()
    migrate.upgrade(path)
    with Probe(path) as probe:
        assert fh.detect_layout(probe.conn) is fh.LAYOUT_3_V30
        assert fh.integrity_problems(probe.conn) == []
        words = 0
        for mid, content in messages:
            word = next((w for w in (content or "").split() if w.isalpha() and w.isascii() and len(w) > 3), None)
            if word:
                words += 1
                assert mid in probe.ids(fh.BASE_TABLE, f'"{word}"'), (mid, word)
        assert words > 10
        assert probe.ids(fh.TRIGRAM_TABLE, '"日本語"')


def test_one_run_to_head_rebuilds_once_and_a_run_cut_short_stays_consistent(file_at):
    """An upgrade run that goes on to 0030 leaves the fills of 0023/0028/0029 to it,
    with upstream's rebuild window open over the pending rows. If the run stops midway,
    the committed file is in that documented pending state: new messages are indexed,
    pending ones are never 'deleted' from the index, and the next run completes it."""
    path = file_at("0022")
    with Probe(path) as probe:  # make 0025 fail after the deferred 0023 has committed
        probe.write("CREATE TABLE system_prompts (hash TEXT PRIMARY KEY, prompt TEXT NOT NULL)")
        probe.write("CREATE TRIGGER refuse BEFORE INSERT ON system_prompts "
                    "BEGIN SELECT RAISE(ABORT, 'injected failure'); END")
        probe.write("UPDATE sessions SET system_prompt = 'You are Hermes.' WHERE id = 'cli_main'")
    with pytest.raises(Exception, match="injected failure"):
        migrate.upgrade(path, "head")
    assert migrate.current(path) == "0024"
    rows = list(ROWS)
    with Probe(path) as probe:
        high = probe.conn.execute(sa.text("SELECT MAX(id) FROM messages")).scalar()
        assert probe.meta("fts_rebuild_high_water") == str(high)
        assert probe.ids(fh.BASE_TABLE, "alpha1") == set()  # pending, not yet indexed
        probe.write("INSERT INTO messages (session_id, role, content, timestamp) "
                    "VALUES ('cli_main', 'user', 'tango20 after the cut', 400)")
        rows.append(Row("cli_main", "user", "tango20 after the cut", "tango20"))
        assert probe.ids(fh.BASE_TABLE, "tango20") != set()
        probe.write("DELETE FROM messages WHERE content LIKE 'bravo2%'")  # a pending row
        rows = [r for r in rows if r.token != "bravo2"]
        probe.write("DROP TRIGGER refuse")

    migrate.upgrade(path, "head")
    assert_consistent(path, fh.LAYOUT_3_V30, rows)
    with Probe(path) as probe:
        assert probe.meta("fts_rebuild_high_water") is None
        assert probe.meta("fts_rebuild_progress") is None
