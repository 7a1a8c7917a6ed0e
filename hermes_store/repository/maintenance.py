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
        (PostgreSQL: ``VACUUM (ANALYZE)``, which blocks nobody). A file latched as
        damaged is never rewritten (``DatabaseDamagedError``)."""
        return self._vacuum(worthwhile_only=False)[0]

    def _vacuum(self, *, worthwhile_only: bool) -> tuple[int, str | None]:
        """(indexes optimised, None when VACUUM ran else why not)."""
        self._require_open()
        if self.read_only:
            from ..errors import StoreReadOnlyError
            raise StoreReadOnlyError(self.target)
        self._units.check()  # a replaced file is not rewritten
        optimized = self.optimize_fts()
        self._units.checkpoint()
        return optimized, self._backend.vacuum(self._engine, self.target,
                                               worthwhile_only=worthwhile_only)

    def maybe_auto_prune_and_vacuum(
        self,
        retention_days: int = 90,
        min_interval_hours: int = 24,
        vacuum: bool = True,
        sessions_dir: Path | str | None = None,
    ) -> dict[str, Any]:
        """Prune ended sessions older than ``retention_days`` at most once per interval
        (recorded in ``state_meta``), then VACUUM when the engine finds it worth it (a
        SQLite file: enough free pages, ``engine.VACUUM_MIN_FREE_SHARE``).

        One process at a time (issue 31, row 9): the run holds the backend's
        cross-process turn (``Backend.maintenance_turn``); a process that finds it taken
        skips at once, with ``"reason"`` saying so. ``"reason"`` also says why a VACUUM
        after a prune did not run.

        Never raises for database trouble: ``{"skipped", "pruned", "vacuumed"}`` plus
        ``"reason"`` and ``"error"`` when they apply.
        """
        self._require_open()
        result: dict[str, Any] = {"skipped": False, "pruned": 0, "vacuumed": False}
        try:
            with self._backend.maintenance_turn(self._engine, self.target) as turn:
                if not turn:
                    result["skipped"] = True
                    result["reason"] = (f"another process is running auto-maintenance on "
                                        f"{self.target}; it was left to that process")
                    log.info("auto-maintenance skipped: %s", result["reason"])
                    return result
                self._auto_prune_and_vacuum(result, retention_days, min_interval_hours,
                                            vacuum, sessions_dir)
        except Exception as exc:  # noqa: BLE001 - reported in the result, never raised
            log.warning("auto-maintenance of %s failed: %s", self.target, exc)
            result["error"] = str(exc)
        return result

    def _auto_prune_and_vacuum(self, result: dict[str, Any], retention_days: int,
                               min_interval_hours: int, vacuum: bool, sessions_dir) -> None:
        now = time.time()
        last = self.get_meta(LAST_AUTO_PRUNE_KEY)
        try:
            if last and now - float(last) < min_interval_hours * 3600:
                result["skipped"] = True
                return
        except (TypeError, ValueError):
            pass  # an unreadable marker counts as "never ran"
        result["pruned"] = self.prune_sessions(
            older_than_days=retention_days, sessions_dir=sessions_dir
        )
        if vacuum and result["pruned"] > 0:
            try:
                why_not = self._vacuum(worthwhile_only=True)[1]
            except Exception as exc:  # noqa: BLE001 - maintenance must not stop startup
                log.warning("VACUUM of %s failed: %s", self.target, exc)
                result["error"] = str(exc)
            else:
                result["vacuumed"] = why_not is None
                if why_not is not None:
                    result["reason"] = f"VACUUM skipped: {why_not}"
        self.set_meta(LAST_AUTO_PRUNE_KEY, str(now))
