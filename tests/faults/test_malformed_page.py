"""Row 2: structural corruption seen by a live store (upstream #90837, #105670, #72046).

Another process overwrites one leaf page of ``messages`` while a store has the file
open. The store must answer with ``DatabaseDamagedError`` naming the file and
``recover``; from then on every write on that file in this process is refused with the
same error without touching the file (other stores on the path too), closing does not
checkpoint the log into the damaged file, reads that still work keep working, and
``hermes-store recover`` salvages every acknowledged row the damage did not destroy.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hermes_store import SessionDB
from hermes_store.errors import DatabaseDamagedError
from support import reliability as rs
from support.faults import Oracle, assert_no_strays, assert_sound

#: sessions and messages per session: enough that one leaf page of ``messages`` holds
#: the messages of one session only
SESSIONS, PER_SESSION = 30, 12


def _fill(path: Path, oracle: Oracle) -> None:
    with SessionDB(path) as db:
        for s in range(SESSIONS):
            oracle.create_session(db, f"s{s:02d}")
            for m in range(PER_SESSION):
                oracle.append(db, f"s{s:02d}", f"message {m} of session {s}: " + "x" * 300)
    # closed: the log is checkpointed into the file, so the damage below is what a reader
    # of the file meets


def _page_holding(path: Path, session_id: str, end: str = "min") -> tuple[int, set[int]]:
    """The leaf page of ``messages`` that holds ``session_id``'s first message (``end``
    "max": its last), and the ids of every message on it (``dbstat`` lists a table's
    leaves in key order, with their cell counts)."""
    conn = rs.raw_connect(path)
    try:
        ids = [r[0] for r in conn.execute("SELECT id FROM messages ORDER BY id")]
        first = conn.execute(f"SELECT {end}(id) FROM messages WHERE session_id = ?",
                             (session_id,)).fetchone()[0]
        position = ids.index(first)
        seen = 0
        for page, cells in conn.execute(
                "SELECT pageno, ncell FROM dbstat WHERE name = 'messages' "
                "AND pagetype = 'leaf' ORDER BY path"):
            if seen + cells > position:
                return page, set(ids[seen:seen + cells])
            seen += cells
    finally:
        conn.close()
    raise AssertionError(f"no leaf page holds {session_id}")


def _overwrite_page(path: Path, page: int) -> None:
    """Another process writes junk over page ``page`` of the file, as a failing disk or
    a stray writer would (its own open and close: not this process's descriptors)."""
    subprocess.run([sys.executable, "-c", (
        "import sys\n"
        "path, page = sys.argv[1], int(sys.argv[2])\n"
        "with open(path, 'r+b') as f:\n"
        "    f.seek(16); size = int.from_bytes(f.read(2), 'big') or 65536\n"
        "    f.seek((page - 1) * size); f.write(b'\\xa5' * size)\n"
    ), str(path), str(page)], check=True)


def _bytes_of(path: Path) -> tuple:
    return tuple(rs.fingerprint(p) for p in (path, Path(f"{path}-wal")))


@pytest.fixture
def damaged(tmp_path):
    """A store opened on a good file, whose leaf page holding session s07 is then
    overwritten by another process."""
    path = tmp_path / "state.db"
    oracle = Oracle()
    _fill(path, oracle)
    db = SessionDB(path)
    db.get_session("s00")  # the store is live: it has read the file
    page, on_page = _page_holding(path, "s07")
    _overwrite_page(path, page)
    yield path, db, oracle, on_page
    db.close()


def test_the_error_names_the_file_and_recover(damaged):
    path, db, _oracle, _on_page = damaged
    with pytest.raises(DatabaseDamagedError) as raised:
        db.get_messages("s07")
    assert str(path) in str(raised.value)
    assert "hermes-store recover" in str(raised.value)


def test_after_the_damage_is_seen_every_write_is_refused_untouched(damaged):
    path, db, oracle, on_page = damaged
    with pytest.raises(DatabaseDamagedError):
        db.get_messages("s07")
    before = _bytes_of(path)
    for attempt in range(3):
        result = oracle.append(db, "s01", f"after the damage {attempt}")
        assert isinstance(result, DatabaseDamagedError), result
        assert str(path) in str(result) and "recover" in str(result)
    with pytest.raises(DatabaseDamagedError):
        db.create_session("new-after-damage", "cli")
    assert _bytes_of(path) == before  # nothing was written: not even to the log
    # another store on the same path in this process refuses writes too (its open may
    # already refuse: then it cannot write either)
    try:
        other = SessionDB(path)
    except DatabaseDamagedError as exc:
        assert str(path) in str(exc) and "recover" in str(exc)
    else:
        with other, pytest.raises(DatabaseDamagedError):
            other.append_message("s02", "user", "from another store")
    assert _bytes_of(path) == before


def test_reads_that_still_work_keep_working(damaged):
    path, db, oracle, on_page = damaged
    with pytest.raises(DatabaseDamagedError):
        db.get_messages("s07")
    assert db.get_session("s01")["id"] == "s01"
    assert len(db.get_messages("s00")) == PER_SESSION


def test_closing_does_not_checkpoint_into_the_damaged_file(damaged):
    path, db, _oracle, _on_page = damaged
    # a commit that reached the log before the damage was seen: it must stay there
    db.append_message("s03", "user", "committed before the damage was seen")
    with pytest.raises(DatabaseDamagedError):
        db.get_messages("s07")
    wal = Path(f"{path}-wal")
    assert wal.exists() and wal.stat().st_size > 0
    before = _bytes_of(path)
    db.close()
    assert _bytes_of(path) == before  # no checkpoint, the log not deleted


def test_recover_salvages_what_the_damage_left(damaged, tmp_path):
    path, db, oracle, on_page = damaged
    ack = db.append_message("s03", "user", "acknowledged before the damage was seen")
    oracle.acknowledge(ack, "s03", "acknowledged before the damage was seen")
    with pytest.raises(DatabaseDamagedError):
        db.get_messages("s07")
    oracle.append(db, "s04", "refused")
    db.close()
    out = tmp_path / "recovered" / "state.db"
    out.parent.mkdir()
    result = subprocess.run([sys.executable, "-m", "hermes_store", "--db", str(path),
                             "recover", "--output", str(out)], capture_output=True, text=True,
                            env=rs.worker_env(), timeout=120)
    # exit status 1: a partial salvage ("some rows could not be read"), as here
    assert result.returncode in (0, 1) and out.exists(), result.stdout + result.stderr
    # only the rows on the overwritten page may be missing; everything else, the row
    # that was only in the log among them, is there
    oracle.messages = {mid: m for mid, m in oracle.messages.items() if mid not in on_page}
    assert oracle.missing(out) == []
    assert ack not in on_page
    assert_sound(out)
    assert_no_strays(path.parent, "recovered", "state.db.*")


def test_damage_met_after_the_first_row_is_named_too(tmp_path):
    """SQLite reads a result's rows as they are fetched: a damaged page met after the
    first row raises while the rows are fetched, and that error is the package's too,
    never the driver's bare ``DatabaseError`` (seen in the chaos run)."""
    path = tmp_path / "state.db"
    _fill(path, Oracle())
    first_page, _ = _page_holding(path, "s07")
    last_page, _ = _page_holding(path, "s07", "max")
    assert first_page != last_page  # the session's rows span two leaves
    with SessionDB(path) as db:
        db.get_session("s00")
        _overwrite_page(path, last_page)
        with pytest.raises(DatabaseDamagedError) as raised:
            db.get_messages("s07")
        assert str(path) in str(raised.value)
