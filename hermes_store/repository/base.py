"""What every concern module of the repository stands on.

A concern mixin (sessions, messages, titles, search, …) talks to the database only
through two doors:

* ``self._write(fn)`` — ``fn(conn)`` runs as one ``BEGIN IMMEDIATE`` write unit, re-run
  whole on lock contention, committed whole or not at all; returns ``fn``'s result.
* ``with self._read() as conn:`` — one read snapshot (a deferred transaction), so a
  reader never sees half of a write unit even across several statements.

``SessionDB.__init__`` (``hermes_store.store``) opens the file and sets the attributes.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..engine import WriteUnits, translate_error
from ..errors import StoreClosedError

T = TypeVar("T")


class RepositoryBase:
    db_path: Path
    read_only: bool
    _engine: Engine | None = None
    _units: WriteUnits | None = None

    def _require_open(self) -> Engine:
        if self._engine is None:
            raise StoreClosedError(getattr(self, "db_path", None))
        return self._engine

    def _write(self, fn: Callable[[sa.Connection], T]) -> T:
        self._require_open()
        return self._units.run(fn)

    @contextmanager
    def _read(self) -> Iterator[sa.Connection]:
        engine = self._require_open()
        try:
            with engine.connect() as conn, conn.begin():
                yield conn
        except sa.exc.DatabaseError as exc:
            mapped = translate_error(exc, self.db_path)
            if mapped is not None:
                raise mapped from exc
            raise
