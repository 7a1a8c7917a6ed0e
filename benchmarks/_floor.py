"""The raw ``sqlite3`` floor: exactly the SQL our code sends, without our code.

A ``Recorder`` listens on our ``SessionDB``'s engine and records, per API call, every
statement with its bound parameters (``BEGIN``/``COMMIT`` sent through the driver
included) and every COMMIT/ROLLBACK SQLAlchemy issues. ``Floor.replay`` then runs those recordings on a plain
``sqlite3`` connection with the same durability settings (WAL, ``synchronous=FULL``,
foreign keys on, 1 s busy timeout) against a head file built by our migrations, so it
fires the same triggers. The difference between the two is what SQLAlchemy and our
Python add; the SQL itself is compared with upstream's.

Recording happens in an untimed pass (on a scratch copy for writes), so the listener's
cost never lands in a timed figure.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import event

from hermes_store.backends.sqlite.library import dbapi  # noqa: E402

sqlite3 = dbapi()  # the store's SQLite library: the floor runs on the same one

Call = list  # [(kind, statement, parameters)], kind in {"exec", "many", "commit", "rollback"}


class Recorder:
    def __init__(self, engine):
        self.engine = engine
        self.calls: list[Call] = []
        self._current: Call | None = None
        event.listen(engine, "before_cursor_execute", self._on_execute)
        event.listen(engine, "commit", self._on_commit)
        event.listen(engine, "rollback", self._on_rollback)

    def _on_execute(self, conn, cursor, statement, parameters, context, executemany):
        if self._current is not None:
            self._current.append(("many" if executemany else "exec", statement, parameters))

    def _on_commit(self, conn):
        if self._current is not None:
            self._current.append(("commit", None, None))

    def _on_rollback(self, conn):
        if self._current is not None:
            self._current.append(("rollback", None, None))

    @contextmanager
    def call(self):
        self._current = []
        try:
            yield self._current
        finally:
            self.calls.append(self._current)
            self._current = None

    def close(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self._on_execute)
        event.remove(self.engine, "commit", self._on_commit)
        event.remove(self.engine, "rollback", self._on_rollback)


def engine_of(db):
    """Our SessionDB's engine (the attribute the repository base class uses)."""
    engine = getattr(db, "_engine", None)
    if engine is None:
        raise RuntimeError("hermes_store.SessionDB exposes no _engine; cannot record its SQL")
    return engine


def statements(call: Call) -> int:
    """Statements of a recorded call, transaction control and pragmas left out."""
    return sum(1 for kind, stmt, _ in call if kind in ("exec", "many")
               and not stmt.lstrip().upper().startswith(("BEGIN", "PRAGMA", "COMMIT", "ROLLBACK")))


class Floor:
    """A plain sqlite3 connection configured like our engine's connections."""

    def __init__(self, path: Path, *, read_only: bool = False):
        if read_only:
            self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None,
                                        check_same_thread=False, timeout=1.0)
        else:
            self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=1.0)
        c = self.conn
        c.execute("PRAGMA busy_timeout=1000")
        c.execute("PRAGMA foreign_keys=ON")
        if not read_only:
            c.execute("PRAGMA synchronous=FULL")
            c.execute("PRAGMA journal_mode=WAL")

    def replay(self, call: Call) -> int:
        """Run one recorded API call; returns the number of rows fetched."""
        conn = self.conn
        rows = 0
        for kind, stmt, params in call:
            if kind == "exec":
                cur = conn.execute(stmt, params if params is not None else ())
                if cur.description is not None:
                    rows += len(cur.fetchall())
            elif kind == "many":
                conn.executemany(stmt, params)
            elif kind == "commit":
                if conn.in_transaction:
                    conn.execute("COMMIT")
            elif kind == "rollback":
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
        if conn.in_transaction:  # a read unit that ended without an explicit COMMIT
            conn.execute("COMMIT")
        return rows

    def close(self) -> None:
        self.conn.close()
