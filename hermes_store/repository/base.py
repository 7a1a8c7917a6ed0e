"""What every concern module of the repository stands on.

A concern mixin (sessions, messages, titles, search, …) talks to the database only
through two doors:

* ``self._write(fn)`` — ``fn(conn)`` runs as one ``BEGIN IMMEDIATE`` write unit, re-run
  whole on lock contention, committed whole or not at all; returns ``fn``'s result.
* ``with self._read() as conn:`` — one read snapshot (a deferred transaction), so a
  reader never sees half of a write unit even across several statements.

Both doors nest: a ``_write`` called while a unit is running on the same thread joins
that unit (it does not open a second transaction that would wait for the first), and a
``_read`` inside a unit reads through the unit's connection (so it sees the unit's own
changes), inside another ``_read`` it reuses the outer snapshot. That lets a public
method compose other public methods and still be one unit / one snapshot.

``SessionDB.__init__`` (``hermes_store.store``) opens the file and sets the attributes.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..engine import WriteUnits, translate_error
from ..errors import StoreClosedError, StoreReadOnlyError

T = TypeVar("T")


class RepositoryBase:
    db_path: Path
    read_only: bool = False
    _engine: Engine | None = None
    _units: WriteUnits | None = None
    _snapshots: threading.local | None = None

    def _require_open(self) -> Engine:
        if self._engine is None:
            raise StoreClosedError(getattr(self, "db_path", None))
        return self._engine

    def _write(self, fn: Callable[[sa.Connection], T]) -> T:
        self._require_open()
        if self.read_only:
            raise StoreReadOnlyError(self.db_path)
        return self._units.run(fn)

    @contextmanager
    def _read(self) -> Iterator[sa.Connection]:
        engine = self._require_open()
        joined = self._units.active_connection() if self._units is not None else None
        if joined is None:
            joined = self._open_snapshot()
        if joined is not None:
            yield joined
            return
        if self._snapshots is None:  # normally set by SessionDB.__init__
            self._snapshots = threading.local()
        try:
            with engine.connect() as conn, conn.begin():
                self._snapshots.conn = conn
                try:
                    yield conn
                finally:
                    self._snapshots.conn = None
        except sa.exc.DatabaseError as exc:
            mapped = translate_error(exc, self.db_path)
            if mapped is not None:
                raise mapped from exc
            raise

    def _open_snapshot(self) -> sa.Connection | None:
        local = self._snapshots
        return getattr(local, "conn", None) if local is not None else None
