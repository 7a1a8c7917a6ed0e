"""What every fault test (``tests/faults/``, issue 31) asserts after it caused its fault:

1. what the API answered — the test's own ``pytest.raises``/return checks;
2. nothing acknowledged was lost — :class:`Oracle` records every write the store
   acknowledged (the call returned) and :meth:`Oracle.missing` reads the file back with
   the standard library's ``sqlite3``, never through the store;
3. the file is whole — :func:`assert_sound`: ``PRAGMA integrity_check`` and the FTS
   index's integrity-check;
4. no stray files — :func:`assert_no_strays`: the directory holds the database, its
   sidecars and only the extra names the failure's row allows.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

from support.reliability import fts_problems, raw_connect, sqlite_integrity

#: what a store at ``state.db`` may leave beside it in any case
DATABASE_FILES = ("state.db", "state.db-wal", "state.db-shm")


class Oracle:
    """The writes a store acknowledged, to be found in the file afterwards.

    ``append`` calls ``db.append_message`` and records the message only when the call
    returned: a call that raised acknowledged nothing (and is counted in ``refused``).
    """

    def __init__(self) -> None:
        #: message id -> (session id, content)
        self.messages: dict[int, tuple[str, str]] = {}
        self.sessions: set[str] = set()
        self.refused: list[BaseException] = []

    def create_session(self, db, session_id: str, source: str = "cli", **kw) -> bool:
        try:
            db.create_session(session_id, source, **kw)
        except Exception as exc:  # noqa: BLE001 - the test asserts on ``refused``
            self.refused.append(exc)
            return False
        self.sessions.add(session_id)
        return True

    def append(self, db, session_id: str, content: str, role: str = "user", **kw):
        """The new message's id, or the exception the store raised (recorded, not raised)."""
        try:
            message_id = db.append_message(session_id, role, content, **kw)
        except Exception as exc:  # noqa: BLE001
            self.refused.append(exc)
            return exc
        self.messages[message_id] = (session_id, content)
        return message_id

    def acknowledge(self, message_id: int, session_id: str, content: str) -> None:
        """Record a write acknowledged elsewhere (another process reported it)."""
        self.messages[message_id] = (session_id, content)
        self.sessions.add(session_id)

    def missing(self, path: str | Path) -> list[str]:
        """What was acknowledged and is not in the file at ``path`` (read with plain
        ``sqlite3``): [] when everything is there."""
        conn = raw_connect(Path(path))
        try:
            rows = {r[0]: (r[1], r[2]) for r in conn.execute(
                "SELECT id, session_id, content FROM messages")}
            sessions = {r[0] for r in conn.execute("SELECT id FROM sessions")}
        finally:
            conn.close()
        lost = [f"message {mid} {want!r}: {rows.get(mid)!r}"
                for mid, want in sorted(self.messages.items()) if rows.get(mid) != want]
        lost += [f"session {sid}" for sid in sorted(self.sessions - sessions)]
        return lost


def assert_sound(path: str | Path, *, fts: bool = True) -> None:
    """The file passes ``PRAGMA integrity_check`` and (``fts``) the FTS integrity-check."""
    path = Path(path)
    problems = sqlite_integrity(path)
    assert problems == [], f"PRAGMA integrity_check failed on {path}: {problems}"
    if fts:
        problems = fts_problems(path)
        assert problems == [], f"FTS integrity-check failed on {path}: {problems}"


def assert_no_strays(directory: str | Path, *allowed: str) -> None:
    """Only the database, its sidecars and names matching ``allowed`` (glob patterns)
    are in ``directory``."""
    names = sorted(p.name for p in Path(directory).iterdir())
    strays = [n for n in names if n not in DATABASE_FILES
              and not any(fnmatch.fnmatchcase(n, pattern) for pattern in allowed)]
    assert strays == [], f"unexpected files beside the store in {directory}: {strays}"
