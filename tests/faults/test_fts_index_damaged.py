"""Issue 31, row 1: a damaged full-text index (FTS-scoped corruption; upstream #50502,
#66296, #96038, #97794) must not stop transcript writes.

Another process damages an FTS5 index for real while the store has the file open: it
overwrites the index's structure record (``<index>_data`` row 10) with junk bytes, cuts
it short, or deletes its leaf blocks, in the word index or the trigram index (``fts_damager``). Before
this row was handled, ``append_message`` and ``replace_messages`` raised
``DatabaseDamagedError`` there. Now the failing unit is re-run, and its re-run first
marks the index stale and detaches its triggers, in the write's own transaction; search
answers through the bounded LIKE scan; ``status`` and ``doctor`` say the index is stale; the next writable
open (or ``maintenance rebuild-fts``) rebuilds it under a cross-process lock and the
triggers come back, every message indexed exactly once.

Each test asserts what the API answered, that nothing acknowledged was lost (the
oracle), that the file and its FTS indexes pass their integrity checks once rebuilt, and
that nothing is left beside the file (the rebuild lock file included).
"""

from __future__ import annotations

import fcntl
import json
import os

import pytest

from hermes_store import SessionDB
from hermes_store.backends.sqlite.fts import ddl
from support.cli import *  # noqa: F403  (the cli fixture, parse_json)
from support.faults import Oracle, assert_no_strays, assert_sound
from support.reliability import fresh_store_file, raw_connect, run, spawn

pytestmark = pytest.mark.sqlite_only("FTS5 indexes are SQLite's (docs/reliability.md)")

TABLES = (ddl.FTS_TABLE, ddl.TRIGRAM_TABLE)
KINDS = ("structure", "leaves")
DAMAGES = [pytest.param(table, kind, id=f"{table}-{kind}") for table in TABLES for kind in KINDS]
#: a structure record cut short: SQLite 3.40's FTS5 answers the next write with a bare
#: SQLITE_CONSTRAINT "constraint failed", not a corruption code
DAMAGES += [pytest.param(table, "short", id=f"{table}-short") for table in TABLES]
#: messages written before the damage: enough segments that deleting the leaves breaks
#: the next write's merge
HISTORY = 30
#: in every message written while the index is stale: a word (word index) and CJK text
#: of four characters (trigram route)
STALE_WORD, STALE_CJK = "quokka", "断电之后"


def _store_with_history(tmp_path, oracle: Oracle):
    path = fresh_store_file(tmp_path / "state.db")
    db = SessionDB(path)
    for session in ("s1", "s2"):
        assert oracle.create_session(db, session)
        for i in range(HISTORY // 2):
            assert isinstance(oracle.append(db, session, f"before {session} {i} 中文内容测试"), int)
    return path, db


def _damage(path, table: str, kind: str) -> None:
    done = run("fts_damager", path, table, kind, timeout=60)
    assert done.returncode == 0 and "damaged" in done.stdout, done.stderr


def _stale_mark(path) -> str | None:
    conn = raw_connect(path)
    try:
        row = conn.execute("SELECT value FROM state_meta WHERE key = ?",
                           (ddl.FTS_STALE_KEY,)).fetchone()
    finally:
        conn.close()
    return None if row is None else row[0]


def _triggers(path) -> set[str]:
    conn = raw_connect(path)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    finally:
        conn.close()


def _write_while_stale(db, oracle: Oracle, session: str, count: int) -> list[int]:
    ids = []
    for i in range(count):
        answer = oracle.append(db, session, f"{STALE_WORD} {i} written while stale {STALE_CJK}{i}")
        assert isinstance(answer, int), f"append {i} raised {answer!r}"
        ids.append(answer)
    return ids


def _found_once(db, query: str, wanted: list[int]) -> None:
    """``query`` finds every id in ``wanted``, each exactly once."""
    found = [r["id"] for r in db.search_messages(query, limit=100)]
    assert sorted(found) == sorted(set(found)), f"{query!r}: a message found twice: {found}"
    assert set(wanted) <= set(found), f"{query!r}: missing {set(wanted) - set(found)}"


def _indexed_once(path, ids: list[int]) -> None:
    """After a rebuild: each message is in both indexes exactly once (FTS5 MATCH read
    with plain sqlite3), so nothing written while stale was missed or doubled."""
    conn = raw_connect(path)
    try:
        for table, query in ((ddl.FTS_TABLE, STALE_WORD), (ddl.TRIGRAM_TABLE, f'"{STALE_CJK}"')):
            rows = [r[0] for r in conn.execute(
                f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (query,))]
            assert sorted(rows) == sorted(ids), (table, rows, ids)
    finally:
        conn.close()


def _assert_whole(path, oracle: Oracle) -> None:
    assert oracle.missing(path) == []
    assert_sound(path)
    assert_no_strays(path.parent)


# --------------------------------------------------------------------------- writes


@pytest.mark.parametrize("table, kind", DAMAGES)
def test_appends_go_on_and_the_next_open_rebuilds_the_index(tmp_path, table, kind):
    oracle = Oracle()
    path, db = _store_with_history(tmp_path, oracle)
    _damage(path, table, kind)

    stale_ids = _write_while_stale(db, oracle, "s1", 3)  # 1. success, no error
    assert _stale_mark(path), "the write went on without the index being marked stale"
    assert not _triggers(path) & set(ddl.TRIGGERS)  # detached in the same transaction
    _found_once(db, STALE_WORD, stale_ids)  # search: the bounded LIKE scan
    _found_once(db, STALE_CJK, stale_ids)
    stale_ids += _write_while_stale(db, oracle, "s2", 2)
    db.close()
    assert _stale_mark(path)  # closing rebuilds nothing

    with SessionDB(path) as db:  # the next writable open rebuilds, triggers back
        assert _stale_mark(path) is None
        assert set(ddl.TRIGGERS) <= _triggers(path)
        later = oracle.append(db, "s1", f"{STALE_WORD} 9 indexed again {STALE_CJK}9")
        assert isinstance(later, int)
        _found_once(db, STALE_WORD, stale_ids + [later])
    _indexed_once(path, stale_ids + [later])
    _assert_whole(path, oracle)


#: ``replace_messages`` as the agent calls it: (new transcript, active_only); each meets
#: one of the four damages (before this row, all sixteen pairs raised)
REPLACEMENTS = [
    ([f"{STALE_WORD} {i} replaced {STALE_CJK}{i}" for i in range(3)], False),
    ([f"{STALE_WORD} {i} replaced active rows {STALE_CJK}{i}" for i in range(2)], True),
    ([], False),
    ([], True),
]


@pytest.mark.parametrize("table, kind, replacement",
                         [pytest.param(*d.values, r, id=f"{d.id}-{len(r[0])}-{r[1]}")
                          for d, r in zip(DAMAGES, REPLACEMENTS)])
def test_replace_messages_goes_on(tmp_path, table, kind, replacement):
    contents, active_only = replacement
    oracle = Oracle()
    path, db = _store_with_history(tmp_path, oracle)
    _damage(path, table, kind)

    new = [{"role": "user", "content": c} for c in contents]
    assert db.replace_messages("s1", new, active_only=active_only) is None  # 1. success
    assert _stale_mark(path)
    rows = db.get_messages("s1")
    assert [r["content"] for r in rows] == contents
    # the oracle: s1's old rows were replaced on purpose, the new ones acknowledged
    oracle.messages = {mid: v for mid, v in oracle.messages.items() if v[0] != "s1"}
    for row in rows:
        oracle.acknowledge(row["id"], "s1", row["content"])
    replaced = [r["id"] for r in rows]
    _found_once(db, STALE_WORD, replaced)
    hits = db.search_messages("before", limit=100)
    assert {r["session_id"] for r in hits} == {"s2"}  # s1's replaced rows are gone
    db.close()

    SessionDB(path).close()  # rebuilt at open
    _indexed_once(path, replaced)
    _assert_whole(path, oracle)


# not "short": a structure record cut short reads as an empty index, so a search
# before the first write finds nothing rather than an error (docs/reliability.md, row 1)
@pytest.mark.parametrize("table, kind", [d for d in DAMAGES if d.values[1] != "short"])
def test_a_search_that_meets_the_damage_first_answers_and_writes_go_on(tmp_path, table, kind):
    oracle = Oracle()
    path, db = _store_with_history(tmp_path, oracle)
    _damage(path, table, kind)

    # 1. the damage is met by a search first: answered by the LIKE scan, and the file
    # is not taken for damaged (derived data only): the writes after it go on
    assert len(db.search_messages("before", limit=100)) == HISTORY
    assert len(db.search_messages("中文内容", limit=100)) == HISTORY
    stale_ids = _write_while_stale(db, oracle, "s2", 2)
    assert _stale_mark(path)
    db.close()

    SessionDB(path).close()
    _indexed_once(path, stale_ids)
    _assert_whole(path, oracle)


@pytest.mark.parametrize("table, kind", [DAMAGES[0], DAMAGES[3]])
def test_an_agent_turn_goes_on(tmp_path, table, kind):
    """What an agent does in a turn and around it, on a damaged index: every call
    answers as on a healthy store."""
    oracle = Oracle()
    path, db = _store_with_history(tmp_path, oracle)
    _damage(path, table, kind)

    assert oracle.create_session(db, "turn", "telegram", model="m")
    user = oracle.append(db, "turn", f"{STALE_WORD} 0 what is the weather {STALE_CJK}0")
    calls = [{"id": "c1", "type": "function",
              "function": {"name": "weather", "arguments": "{}"}}]
    assistant = oracle.append(db, "turn", "", role="assistant", tool_calls=calls)
    tool = oracle.append(db, "turn", f"{STALE_WORD} 1 sunny {STALE_CJK}1", role="tool",
                         tool_name="weather", tool_call_id="c1")
    reply = oracle.append(db, "turn", f"{STALE_WORD} 2 it is sunny {STALE_CJK}2", role="assistant")
    assert all(isinstance(x, int) for x in (user, assistant, tool, reply)), oracle.refused
    db.update_token_counts("turn", input_tokens=10, output_tokens=5, model="m")
    assert db.set_session_title("turn", "weather") is True
    kept = oracle.append(db, "s2", "compacted summary", role="assistant")
    assert isinstance(kept, int)
    summary = [{"role": "assistant", "content": f"{STALE_WORD} 3 summary {STALE_CJK}3"}]
    assert db.archive_and_compact("s2", summary) == 1
    db.end_session("turn", "user_exit")
    assert db.delete_session("s1") is True
    oracle.messages = {mid: v for mid, v in oracle.messages.items() if v[0] != "s1"}
    oracle.sessions.discard("s1")
    assert [m["id"] for m in db.get_messages("turn")] == [user, assistant, tool, reply]
    assert db.get_session("turn")["message_count"] == 4
    assert _stale_mark(path)
    _found_once(db, STALE_WORD, [user, tool, reply])
    db.close()

    with SessionDB(path) as db:
        _found_once(db, STALE_WORD, [user, tool, reply])
        _found_once(db, STALE_CJK, [user, reply])  # no tool rows in the trigram index
    _assert_whole(path, oracle)


# --------------------------------------------------------------------------- telling and rebuilding


def test_status_and_doctor_say_so_and_rebuild_fts_brings_it_back(tmp_path, cli):
    oracle = Oracle()
    path, db = _store_with_history(tmp_path, oracle)
    _damage(path, ddl.FTS_TABLE, "structure")
    stale_ids = _write_while_stale(db, oracle, "s1", 2)

    status = parse_json(cli(path, "--json", "status"))
    assert status["fts_stale"], status
    human = " ".join(cli(path, "status").stdout.split())
    assert "stale" in human and "rebuild-fts" in human
    doctor = cli(path, "--json", "maintenance", "doctor")
    assert doctor.exit_code == 1
    fts = [c for c in parse_json(doctor)["checks"] if c["check"] == "fts"]
    assert fts and fts[0]["status"] == "problem" and "stale" in fts[0]["detail"], fts
    assert _stale_mark(path)  # doctor only looked
    with SessionDB(path, read_only=True) as reader:  # a read-only open never rebuilds
        _found_once(reader, STALE_WORD, stale_ids)
    assert _stale_mark(path)

    rebuilt = cli(path, "--json", "maintenance", "rebuild-fts")
    assert rebuilt.exit_code == 0, rebuilt.output
    assert _stale_mark(path) is None
    assert parse_json(cli(path, "--json", "status"))["fts_stale"] is None
    # the store that stayed open writes through the triggers again
    later = oracle.append(db, "s1", f"{STALE_WORD} 7 after the rebuild {STALE_CJK}7")
    assert isinstance(later, int)
    _found_once(db, STALE_WORD, stale_ids + [later])
    db.close()
    _indexed_once(path, stale_ids + [later])
    _assert_whole(path, oracle)


def _stale_closed_store(tmp_path, oracle: Oracle):
    path, db = _store_with_history(tmp_path, oracle)
    _damage(path, ddl.TRIGRAM_TABLE, "structure")
    stale_ids = _write_while_stale(db, oracle, "s1", 2)
    db.close()
    assert _stale_mark(path)
    return path, stale_ids


def test_two_processes_opening_at_once_rebuild_the_index_once(tmp_path):
    oracle = Oracle()
    path, stale_ids = _stale_closed_store(tmp_path / "store", oracle)
    go = tmp_path / "go"
    openers = [spawn("fts_opener", path, go) for _ in range(2)]
    go.touch()
    answers = []
    for proc in openers:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        answers.append(json.loads(out.strip().splitlines()[-1])["rebuilt"])
    assert sorted(answers) == [False, True]  # one rebuilt; the other skipped or found it done
    assert _stale_mark(path) is None
    _indexed_once(path, stale_ids)
    _assert_whole(path, oracle)


def test_an_open_that_finds_the_rebuild_lock_taken_skips_the_rebuild(tmp_path):
    oracle = Oracle()
    path, stale_ids = _stale_closed_store(tmp_path, oracle)
    lock_path = f"{path}.fts.lock"
    holder = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)  # another process rebuilding
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        with SessionDB(path) as db:  # does not wait: opens with the index still stale
            assert _stale_mark(path)
            more = _write_while_stale(db, oracle, "s2", 1)
            _found_once(db, STALE_WORD, stale_ids + more)
    finally:
        os.unlink(lock_path)
        os.close(holder)
    SessionDB(path).close()
    assert _stale_mark(path) is None
    _indexed_once(path, stale_ids + more)
    _assert_whole(path, oracle)
