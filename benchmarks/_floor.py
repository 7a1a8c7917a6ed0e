"""The raw ``sqlite3`` floor: exactly the SQL our code sends, without our code.

A ``Recorder`` listens on our ``SessionDB``'s engine and records, per API call, every
statement with its bound parameters (``BEGIN``/``COMMIT`` sent through the driver
included), every COMMIT/ROLLBACK SQLAlchemy issues, and which of the call's connections
ran it (a checkpoint holds the writer lock on one connection while another runs it).
``Floor.replay`` then runs those recordings on plain ``sqlite3`` connections — one per
connection of the call — with the same settings (WAL, ``synchronous=FULL``, foreign keys
on, 1 s busy timeout, no automatic checkpoints) against a head file built by our
migrations, so it fires the same triggers. The difference between the two is what SQLAlchemy and our
Python add; the SQL itself is compared with upstream's.

Recording happens in an untimed pass (on a scratch copy for writes), so the listener's
cost never lands in a timed figure.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import event

from hermes_store.backends.sqlite.files.uri import file_uri  # noqa: E402
from hermes_store.backends.sqlite.library import dbapi  # noqa: E402

sqlite3 = dbapi()  # the store's SQLite library: the floor runs on the same one

#: [(kind, statement, parameters, connection)], kind in {"exec", "many", "commit",
#: "rollback"}; connection: 0 for the first DBAPI connection the call used, 1 the next…
Call = list


class Recorder:
    def __init__(self, engine):
        self.engine = engine
        self.calls: list[Call] = []
        self._current: Call | None = None
        self._slots: dict[int, int] = {}
        event.listen(engine, "before_cursor_execute", self._on_execute)
        event.listen(engine, "commit", self._on_commit)
        event.listen(engine, "rollback", self._on_rollback)

    def _slot(self, conn) -> int:
        return self._slots.setdefault(id(conn.connection.dbapi_connection), len(self._slots))

    def _on_execute(self, conn, cursor, statement, parameters, context, executemany):
        if self._current is not None:
            self._current.append(("many" if executemany else "exec", statement, parameters,
                                  self._slot(conn)))

    def _on_commit(self, conn):
        if self._current is not None:
            self._current.append(("commit", None, None, self._slot(conn)))

    def _on_rollback(self, conn):
        if self._current is not None:
            self._current.append(("rollback", None, None, self._slot(conn)))

    @contextmanager
    def call(self):
        self._current = []
        self._slots = {}
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
    return sum(1 for kind, stmt, _, _ in call if kind in ("exec", "many")
               and not stmt.lstrip().upper().startswith(("BEGIN", "PRAGMA", "COMMIT", "ROLLBACK")))


class Floor:
    """Plain sqlite3 connections configured like our engine's connections."""

    def __init__(self, path: Path, *, read_only: bool = False):
        self.path, self.read_only = path, read_only
        self.conn = self._connect()
        #: the connections a call's second, third… connection replays on
        self._others: list = []

    def _connect(self):
        if self.read_only:
            c = sqlite3.connect(file_uri(self.path, mode="ro"), uri=True, isolation_level=None,
                                check_same_thread=False, timeout=1.0)
        else:
            c = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                timeout=1.0)
        c.execute("PRAGMA busy_timeout=1000")
        c.execute("PRAGMA foreign_keys=ON")
        c.execute("PRAGMA wal_autocheckpoint=0")
        if not self.read_only:
            c.execute("PRAGMA synchronous=FULL")
            c.execute("PRAGMA journal_mode=WAL")
        return c

    def _on(self, slot: int):
        if slot == 0:
            return self.conn
        while len(self._others) < slot:
            self._others.append(self._connect())
        return self._others[slot - 1]

    def replay(self, call: Call) -> int:
        """Run one recorded API call; returns the number of rows fetched."""
        rows = 0
        for kind, stmt, params, slot in call:
            conn = self._on(slot)
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
        for conn in (self.conn, *self._others):
            if conn.in_transaction:  # a read unit that ended without an explicit COMMIT
                conn.execute("COMMIT")
        return rows

    def close(self) -> None:
        for conn in (self.conn, *self._others):
            conn.close()
