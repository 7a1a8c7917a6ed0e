"""The damage latch: once a store in this process has seen a file malformed, the file
stays damaged for the whole process (decision D20; upstream #90837, #105670, #72046).

A malformed page found by one read does not heal by itself, and every later write to
such a file risks spreading the damage: SQLite may allocate from a broken free list, and
a checkpoint copies whatever the log holds over the pages a recovery would read. So the
first ``SQLITE_CORRUPT`` on the file's own pages (not a full-text index's: that is
derived data, ``errors.is_index_damage``) latches the file:

* every store on it in this process refuses to write, before touching the file, with
  the same ``DatabaseDamagedError`` (it names the file and ``recover``): the guard
  checks :func:`check` before each write unit;
* nothing checkpoints it: the store's checkpoints are skipped and its connections
  close without SQLite's close-time checkpoint (:func:`leave_log_on_close`), so the log
  stays as it is and ``hermes-store recover`` salvages the most;
* reads that still work keep working.

The latch names the file by its identity (device, inode) and its resolved path: a
recovered file put at the path is another file and opens normally, and a new file that
happens to get a freed inode number elsewhere is not taken for the damaged one. It
lasts as long as the process.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading

from ....errors import DatabaseDamagedError

log = logging.getLogger("hermes_store.backends.sqlite")

#: the file's identity, (st_dev, st_ino) — equal to ``identity.FileIdentity`` — or None
#: where it has none, and its resolved path -> the first error seen
_LATCHED: dict[tuple, DatabaseDamagedError] = {}
_LOCK = threading.Lock()

#: SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE (sqlite3.h); Python 3.12+ names it in its module
NO_CKPT_ON_CLOSE = 1006


def _file_of(where: object) -> str:
    """The file a caller's label names: a path, or a store's ``Target`` (its ``path``)."""
    where = getattr(where, "path", None) or where
    return os.fspath(where) if isinstance(where, (str, os.PathLike)) else str(where)


def _key(path: object, identity: tuple[int, int] | None = None) -> tuple:
    name = _file_of(path)
    if identity is None:
        try:
            st = os.stat(name)
        except OSError:
            st = None
        identity = (st.st_dev, st.st_ino) if st is not None and st.st_ino else None
    return (identity, os.path.realpath(name))


def file_is_damaged(path: object) -> bool:
    """Whether SQLite's ``quick_check`` finds the file's own B-trees damaged (a plain
    ``SQLITE_CORRUPT`` can come from a full-text index too, or from this process's view
    of a log that was taken away under it). Checked by a child process through a
    read-only URI, so nothing is written and nothing of this process's view of the file
    is reused; a file that cannot be checked counts as damaged. Runs on the error path
    only: once per corruption error."""
    from ..library import is_index_problem
    from .ops import quick_check_in_child
    from .uri import file_uri

    try:
        rows = quick_check_in_child(file_uri(_file_of(path), mode="ro"))
    except OSError:
        return True
    return rows != ["ok"] and any(not is_index_problem(row) for row in rows)


def latch(path: object, error: DatabaseDamagedError) -> DatabaseDamagedError:
    """Latch the file at ``path`` as damaged (the first error seen is kept) and return
    the error to raise."""
    key = _key(path)
    with _LOCK:
        first = _LATCHED.setdefault(key, error)
    if first is error:
        log.error("%s: writes refused from now on in this process, and nothing will be "
                  "checkpointed into it", error)
    return error


def latched(path: object) -> DatabaseDamagedError | None:
    """The error the file at ``path`` was latched with, or None."""
    if not _LATCHED:
        return None
    return _LATCHED.get(_key(path))


def latched_identity(identity: tuple[int, int] | None, path: object
                     ) -> DatabaseDamagedError | None:
    """:func:`latched` for the file at ``path`` whose identity the caller recorded (no
    ``stat`` at all while nothing is latched)."""
    if not _LATCHED:
        return None
    return _LATCHED.get(_key(path, identity))


def refusal(first: DatabaseDamagedError) -> DatabaseDamagedError:
    """A fresh error with the latched one's message (raising one instance again and
    again would chain every traceback onto it)."""
    return DatabaseDamagedError(f"{first} (writes to this file are refused until it is "
                                "recovered)")


def check(path: object) -> None:
    """Raise the latched ``DatabaseDamagedError`` when the file at ``path`` is latched."""
    first = latched(path)
    if first is not None:
        raise refusal(first) from first


def leave_log_on_close(dbapi_conn) -> bool:
    """Make SQLite close ``dbapi_conn`` without its close-time checkpoint (the last
    connection to a WAL file otherwise copies the log into the damaged file and deletes
    it). True when it was set: Python 3.12+ through ``setconfig``; earlier CPython
    through ``sqlite3_db_config`` on the connection's handle (the first field of the
    module's connection object), from the library the module was built with."""
    setconfig = getattr(dbapi_conn, "setconfig", None)
    if setconfig is not None:
        try:
            setconfig(NO_CKPT_ON_CLOSE, True)
            return True
        except Exception as exc:  # noqa: BLE001 - a closed connection: nothing to keep
            log.warning("could not keep the log of a damaged file at close: %s", exc)
            return False
    if sys.implementation.name != "cpython":
        return False
    extension = next((m for name, m in list(sys.modules.items()) if name.endswith("_sqlite3")
                      and getattr(m, "Connection", None) in type(dbapi_conn).__mro__), None)
    if extension is None or not getattr(extension, "__file__", None):
        return False
    try:
        config = ctypes.CDLL(extension.__file__).sqlite3_db_config
        handle = ctypes.c_void_p.from_address(id(dbapi_conn) + object.__basicsize__).value
        if not handle:
            return False
        now = ctypes.c_int(-1)
        rc = config(ctypes.c_void_p(handle), ctypes.c_int(NO_CKPT_ON_CLOSE), ctypes.c_int(1),
                    ctypes.byref(now))
    except (AttributeError, OSError, TypeError) as exc:
        log.warning("could not keep the log of a damaged file at close: %s", exc)
        return False
    return rc == 0 and now.value == 1


def on_pool_close(path: object):
    """A pool ``close`` listener for the engine of ``path``: a connection to a latched
    file closes without checkpointing it (:func:`leave_log_on_close`)."""

    def _before_close(dbapi_conn, _record) -> None:
        if _LATCHED and latched(path) is not None:
            leave_log_on_close(dbapi_conn)

    return _before_close


__all__ = ["check", "file_is_damaged", "latch", "latched", "latched_identity", "leave_log_on_close",
           "on_pool_close", "refusal"]
