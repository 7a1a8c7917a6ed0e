"""What every concern module of the repository stands on.

A concern mixin (sessions, messages, titles, search, …) talks to the database only
through three doors:

* ``self._write(fn)`` — ``fn(conn)`` runs as one ``BEGIN IMMEDIATE`` write unit, re-run
  whole on lock contention, committed whole or not at all; returns ``fn``'s result.
* ``with self._read() as conn:`` — one read snapshot (a deferred transaction), so a
  reader never sees half of a write unit even across several statements.
* ``self._query(statement, values)`` — the rows of one prebuilt SELECT
  (``repository.prebuilt.Prebuilt``). A single statement is a consistent snapshot by
  itself, so outside a unit or a snapshot it needs no transaction at all.

The doors nest: a ``_write`` called while a unit is running on the same thread joins
that unit (it does not open a second transaction that would wait for the first), and a
``_read`` or ``_query`` inside a unit reads through the unit's connection (so it sees
the unit's own changes), inside another ``_read`` it reuses the outer snapshot. That
lets a public method compose other public methods and still be one unit / one snapshot.

Each thread reads on its own held connection (``engine.HeldConnections``) and writes on
another, so threads never share a transaction.

``SessionDB.__init__`` (``hermes_store.store``) opens the file and sets the attributes.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..engine import HeldConnections, WriteUnits, transaction, translate_error
from ..errors import StoreClosedError, StoreReadOnlyError
from .prebuilt import Prebuilt

T = TypeVar("T")


class RepositoryBase:
    db_path: Path
    read_only: bool = False
    _engine: Engine | None = None
    _units: WriteUnits | None = None
    _readers: HeldConnections | None = None
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

    def _joined(self) -> sa.Connection | None:
        """The connection of this thread's running unit or open snapshot, if any."""
        units, local = self._units, self._snapshots
        joined = units.active_connection() if units is not None else None
        if joined is None and local is not None:
            joined = getattr(local, "conn", None)
        return joined

    def _reader(self) -> sa.Connection:
        readers = self._readers
        if readers is None:  # normally set by SessionDB.__init__; None once closed
            raise StoreClosedError(getattr(self, "db_path", None))
        return readers.get()

    @contextmanager
    def _read(self) -> Iterator[sa.Connection]:
        self._require_open()
        joined = self._joined()
        if joined is not None:
            yield joined
            return
        if self._snapshots is None:  # normally set by SessionDB.__init__
            self._snapshots = threading.local()
        conn = self._reader()
        try:
            with transaction(conn):  # BEGIN DEFERRED
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

    def _query(self, statement: Prebuilt, values: Mapping[str, Any] | None = None) -> list:
        """The rows (tuples; ``statement.keys`` names their columns) of one SELECT."""
        self._require_open()
        joined = self._joined()
        try:
            if joined is not None:
                return statement.rows(joined, values)
            return statement.rows_alone(self._reader(), values)
        except sa.exc.DatabaseError as exc:
            mapped = translate_error(exc, self.db_path)
            if mapped is not None:
                raise mapped from exc
            raise

    def _release_connections(self) -> None:
        """Release every thread's held connections (``close()``)."""
        readers, self._readers = self._readers, None
        if self._units is not None:
            self._units.close()
        if readers is not None:
            readers.close()
