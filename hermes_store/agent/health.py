"""The file-health helpers of upstream's ``hermes_state`` the agent calls, over this
package's own probe, repair and FTS upkeep (issue 16, item 1).

* ``apply_wal_with_fallback(conn, db_label=…)`` — on any ``sqlite3`` connection (the
  agent uses it on its kanban, projects, response and memory databases too): WAL, or
  DELETE where the filesystem refuses WAL's shared memory (one warning per label per
  process); never downgrades a connection already in WAL; returns ``"wal"``/``"delete"``.
  A WAL connection also gets the store engine's durability pragmas (macOS: full fsync;
  ``files.make_durable``), which the store's own connections get from the engine.
* ``is_malformed_db_error(exc)`` — a malformed schema or disk image: a ``sqlite3``
  error saying so, or the package's ``DatabaseDamagedError``.
* ``db_opens_cleanly(path)`` — None when the store would open and take writes, else the
  reason: the package's probe (not a database, damaged schema, a foreign ``-wal``),
  ``integrity_check``, and a write driven through the full-text triggers and rolled
  back (a corrupt FTS index passes reads and ``integrity_check`` but refuses every
  message insert). A file held by a writer is not damaged: None.
* ``repair_state_db_schema(path, backup=True)`` — the package's repairs in order: an
  empty or zeroed file is set aside and a fresh one put in its place (``set_aside``,
  ``backends.sqlite.files.blank``), duplicated full-text schema entries are healed
  (``backends.sqlite.files.repair``, after a byte copy), a full-text index that refuses
  writes is rebuilt from ``messages`` (after a consistent backup,
  ``backends.sqlite.files.backup``); anything else is left untouched, a byte copy of it
  kept (as upstream does: ``files.keep_damaged_copy``), and the report names
  ``hermes-store recover``. Every repair is bounded
  (``backends.sqlite.files.repair_limits``): one attempt per process and three per file
  across restarts, a backup only when none of the same content is kept, the newest
  three kept, and none without room on the volume; beyond them the report's ``error``
  says why, and nothing is copied. The report has upstream's keys: ``repaired``,
  ``strategy``, ``backup_path``, ``error``.

A path that names the server database (``HERMES_STATE_DATABASE_URL``, see
``hermes_state``) is answered for that database: it opens cleanly when the store opens
and its full-text check passes; there is nothing to repair in place on a server.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable

from .. import errors as E

log = logging.getLogger("hermes_store.agent")

#: what SQLite says when a filesystem cannot do WAL's shared memory (NFS/SMB/FUSE)
WAL_REFUSED = ("locking protocol", "not authorized")
_MALFORMED = ("malformed database schema", "database disk image is malformed")
_warned: set[str] = set()
_warned_lock = threading.Lock()


def _journal_mode(conn: sqlite3.Connection) -> str | None:
    try:
        row = conn.execute("PRAGMA journal_mode").fetchone()
    except sqlite3.OperationalError:
        return None
    mode = row[0] if row else None
    if isinstance(mode, bytes):
        mode = mode.decode("ascii", "replace")
    return str(mode).lower() if mode is not None else None


def _durable(conn: sqlite3.Connection) -> None:
    """The store engine's durability pragmas (on macOS, full fsync) on one of the
    agent's own connections: the engine sets them on the store's by itself."""
    try:
        _files().make_durable(conn)
    except sqlite3.OperationalError:
        pass


def apply_wal_with_fallback(conn: sqlite3.Connection, *, db_label: str = "state.db") -> str:
    """WAL on ``conn``, or DELETE where the filesystem refuses WAL (module docstring)."""
    if _journal_mode(conn) == "wal":  # already WAL: nothing to set (nor to unlink)
        _durable(conn)
        return "wal"
    try:
        conn.execute("PRAGMA journal_mode=WAL")
    except sqlite3.OperationalError as exc:
        if not any(marker in str(exc).lower() for marker in WAL_REFUSED):
            raise
        if _journal_mode(conn) == "wal":
            raise  # another process runs the file in WAL: never downgrade it
        with _warned_lock:
            first = db_label not in _warned
            _warned.add(db_label)
        if first:
            log.warning("%s: this filesystem refuses WAL (%s); using journal_mode=DELETE "
                        "(slower, but it works on NFS/SMB/FUSE)", db_label, exc)
        conn.execute("PRAGMA journal_mode=DELETE")
        return "delete"
    _durable(conn)
    return "wal"


def is_malformed_db_error(exc: BaseException) -> bool:
    if isinstance(exc, E.DatabaseDamagedError):
        return True
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    return any(marker in str(exc).lower() for marker in _MALFORMED)


# --------------------------------------------------------------------------- SQLite files

def _write_probe(path: Path) -> str | None:
    """Drive one session and one message through the triggers, then roll back."""
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=1.0)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            probe = f"_hermes_store_write_probe_{time.time_ns()}"
            conn.execute("INSERT INTO sessions (id, source, started_at) VALUES (?, ?, ?)",
                         (probe, "_probe", time.time()))
            conn.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                         "VALUES (?, ?, ?, ?)", (probe, "user", "write probe", time.time()))
        finally:
            if conn.in_transaction:  # SQLite may have rolled back on its own
                conn.execute("ROLLBACK")
        return None
    except sqlite3.DatabaseError as exc:
        text = str(exc)
        lowered = text.lower()
        if getattr(exc, "sqlite_errorname", "").startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) \
                or "locked" in lowered or "busy" in lowered:
            return None  # a writer holds it: busy, not damaged
        if "no such table" in lowered or "no such column" in lowered:
            return None  # an empty or older file: the store creates or upgrades it
        return text
    finally:
        conn.close()


def _files():
    """The SQLite backend's ``files`` facet: these functions open a file by its path,
    as upstream's do (the opening path resolves the backend)."""
    from ..backends.base import get

    return get("sqlite").files


def _file_check(path: Path) -> tuple[str, str | None]:
    """(stage, reason): reason None when healthy; stage says which check failed."""
    files = _files()
    try:
        files.probe(path)
        problems = [p for p in files.health(path).integrity if p.lower() != "ok"]
    except (E.HermesStoreError, sqlite3.DatabaseError) as exc:
        return "probe", str(exc)
    if problems:
        return "integrity", "; ".join(problems[:3])
    return "write", _write_probe(path)


def _file_opens_cleanly(path: Path) -> str | None:
    return _file_check(path)[1]


def _report(**kw) -> dict[str, Any]:
    report: dict[str, Any] = {"repaired": False, "strategy": None, "backup_path": None,
                              "error": None}
    report.update(kw)
    return report


def _repair_file(path: Path, backup: bool) -> dict[str, Any]:
    file_repair = _files()
    if not path.exists():
        return _report(error=f"{path} does not exist")
    stage, reason = _file_check(path)
    if reason is None:
        return _report(repaired=True, strategy="already_healthy")
    aside = file_repair.set_aside_blank(path) if stage == "probe" else None
    if aside is not None:  # empty or zeroed: nothing to read, a fresh store in its place
        return _report(repaired=True, strategy="set_aside", backup_path=str(aside))
    diagnosis = file_repair.diagnose(path)
    if diagnosis.healable:
        try:
            healed = file_repair.repair(path)  # always keeps a byte copy first
        except E.HermesStoreError as exc:
            return _report(error=str(exc))
        after = _file_opens_cleanly(path)
        return _report(repaired=after is None, strategy="dedup_schema",
                       backup_path=healed.backup[0] if healed.backup else None, error=after)
    if stage != "write":
        return _refused(path, f"{reason}; {E.RECOVER_HINT}", backup)
    # The schema loads and passes integrity_check, yet a write through the triggers
    # fails: the full-text index refuses writes (its structure record is corrupt; the
    # message varies with SQLite's version). Rebuild it from messages: only derived
    # index data is rewritten, never a row. Bounded as every repair is: one attempt per
    # process, three per file, a backup only when new and with room to spare.
    try:
        with file_repair.repair_attempt(path) as attempt:
            report = _rebuild_fts(path, backup)
            if report["error"]:
                attempt.failed(report["error"])
    except (E.RepairRefusedError, E.StoreBusyError, E.StoreFullError) as exc:
        return _report(error=str(exc))
    return report


def _refused(path: Path, error: str, backup: bool) -> dict[str, Any]:
    """No repair here can read the file: it is left as it is, and, as upstream does, a
    byte copy is kept for a manual restore (the agent's ``sessions repair`` promised one)."""
    if not backup:
        return _report(error=error)
    try:
        kept = _files().keep_damaged_copy(path)
    except E.HermesStoreError as exc:  # no room, or the copy failed
        return _report(error=f"{error} (no copy was kept: {exc})")
    return _report(backup_path=str(kept), error=error)


def _rebuild_fts(path: Path, backup: bool) -> dict[str, Any]:
    """One attempt: the backup, the rebuild, the check. A refusal of the surroundings
    (no room, busy, full) is raised: it is not an attempt."""
    import sqlalchemy as sa

    from ..store import SessionDB

    backup_path = str(_files().backup_before_repair(path)) if backup else None
    try:
        with SessionDB(path) as db:
            db.rebuild_fts()
    except (E.StoreBusyError, E.StoreFullError):
        raise
    except (E.HermesStoreError, sa.exc.DBAPIError, sqlite3.DatabaseError) as exc:
        cause = getattr(exc, "orig", None) or exc
        return _report(backup_path=backup_path, strategy="rebuild_fts",
                       error=f"{path}: the full-text indexes could not be rebuilt ({cause}); "
                             f"{E.RECOVER_HINT}")
    after = _file_opens_cleanly(path)
    if after is not None:
        return _report(backup_path=backup_path, strategy="rebuild_fts",
                       error=f"{after}; {E.RECOVER_HINT}")
    log.warning("%s: full-text indexes rebuilt from messages (backup: %s)", path, backup_path)
    return _report(repaired=True, strategy="rebuild_fts", backup_path=backup_path)


# --------------------------------------------------------------------------- either engine

def _server_opens_cleanly(url: str) -> str | None:
    from ..store import SessionDB

    try:
        with SessionDB(url, read_only=True) as db:
            problems = db.fts_integrity_check()
    except E.HermesStoreError as exc:
        return str(exc)
    return "; ".join(problems[:3]) if problems else None


def db_opens_cleanly(path, server_url: Callable[[Any], str | None]) -> str | None:
    url = server_url(path)
    if url is not None:
        return _server_opens_cleanly(url)
    return _file_opens_cleanly(Path(path))


def repair_state_db_schema(path, *, backup: bool, server_url: Callable[[Any], str | None]) -> dict[str, Any]:
    url = server_url(path)
    if url is None:
        return _repair_file(Path(path), backup)
    reason = _server_opens_cleanly(url)
    if reason is None:
        return _report(repaired=True, strategy="already_healthy")
    return _report(error=f"{reason} (a PostgreSQL database is not repaired in place: "
                         "run `hermes-store maintenance doctor`)")
