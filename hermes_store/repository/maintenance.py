"""Maintenance concern: full-text index upkeep, VACUUM and the periodic auto-prune.

The FTS work itself lives in ``hermes_store.fts.maintenance``, VACUUM and checkpoints in
the store's backend; each is the engine's own (PostgreSQL: REINDEX,
``gin_clean_pending_list`` + ANALYZE, ``VACUUM (ANALYZE)``, no checkpoint). This module
decides the units: a rebuild is one unit, an optimize is many short units of bounded
merge steps (an unbounded FTS5 'optimize' held the write lock for many seconds on large
files).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from .. import unit_locks
from ..fts import maintenance as fts_maintenance
from .base import RepositoryBase

log = logging.getLogger(__name__)

#: upper bound on optimize units per call (each is a handful of bounded merge steps)
MAX_OPTIMIZE_UNITS = 1000
LAST_AUTO_PRUNE_KEY = "last_auto_prune"


class MaintenanceMixin(RepositoryBase):
    def _usable_fts_tables(self) -> list[str]:
        with self._read() as conn:
            return fts_maintenance.usable_indexes(conn)

    def optimize_fts(self) -> int:
        """Merge each full-text index's segments (bounded steps, one short unit each);
        returns how many indexes there are to optimise."""
        tables = self._usable_fts_tables()
        if not tables:
            return 0
        for _ in range(MAX_OPTIMIZE_UNITS):
            if self._write(fts_maintenance.optimize, locks=unit_locks.STORE):
                break
        return len(tables)

    def rebuild_fts(self) -> int:
        """Rebuild every full-text index from ``messages`` in one unit; returns the count."""
        return len(self._write(lambda conn: fts_maintenance.rebuild(conn),
                               locks=unit_locks.STORE))

    def fts_integrity_check(self) -> list[str]:
        """Problems with the full-text indexes (empty when healthy), each with a hint."""
        with self._read() as conn:
            return fts_maintenance.integrity_check(conn)

    def vacuum(self) -> int:
        """Optimise the indexes, then VACUUM the file; returns the indexes optimised.
        Needs the write lock for the whole rewrite, so run it when writers are idle
        (PostgreSQL: ``VACUUM (ANALYZE)``, which blocks nobody)."""
        self._require_open()
        if self.read_only:
            from ..errors import StoreReadOnlyError
            raise StoreReadOnlyError(self.target)
        self._units.check()  # a replaced file is not rewritten
        optimized = self.optimize_fts()
        self._units.checkpoint()
        self._backend.vacuum(self._engine, self.target)
        return optimized

    def maybe_auto_prune_and_vacuum(
        self,
        retention_days: int = 90,
        min_interval_hours: int = 24,
        vacuum: bool = True,
        sessions_dir: Path | str | None = None,
    ) -> dict[str, Any]:
        """Prune ended sessions older than ``retention_days`` at most once per interval
        (recorded in ``state_meta``), VACUUM when something was pruned.

        Never raises for database trouble: ``{"skipped", "pruned", "vacuumed"}`` plus
        ``"error"`` when something failed.
        """
        self._require_open()
        result: dict[str, Any] = {"skipped": False, "pruned": 0, "vacuumed": False}
        try:
            now = time.time()
            last = self.get_meta(LAST_AUTO_PRUNE_KEY)
            try:
                if last and now - float(last) < min_interval_hours * 3600:
                    result["skipped"] = True
                    return result
            except (TypeError, ValueError):
                pass  # an unreadable marker counts as "never ran"
            result["pruned"] = self.prune_sessions(
                older_than_days=retention_days, sessions_dir=sessions_dir
            )
            if vacuum and result["pruned"] > 0:
                try:
                    self.vacuum()
                    result["vacuumed"] = True
                except Exception as exc:  # noqa: BLE001 - maintenance must not stop startup
                    log.warning("VACUUM of %s failed: %s", self.target, exc)
            self.set_meta(LAST_AUTO_PRUNE_KEY, str(now))
        except Exception as exc:  # noqa: BLE001 - reported in the result, never raised
            log.warning("auto-maintenance of %s failed: %s", self.target, exc)
            result["error"] = str(exc)
        return result
