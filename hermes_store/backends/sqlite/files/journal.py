"""The journal mode a store gives its file: WAL where it is safe, DELETE where it is not.

``plan(path, explicit=None) -> JournalPlan`` decides once per open:

1. an explicit setting wins either way: ``SessionDB(journal_mode=…)`` (``explicit``, or
   ``requesting(mode)`` around the open, so the migration that creates a new file gives
   it the same mode), else ``HERMES_STATE_JOURNAL_MODE`` (``hermes-store
   --journal-mode`` sets it for its process) — ``wal`` or ``delete``;
2. else the filesystem under the file (``filesystem.detect``): WAL on a local disk or
   where it cannot be told (fails open), DELETE on a VM share (virtiofs, 9p) or a
   network filesystem (NFS, SMB, sshfs, …), with one warning per file and process.

``apply(dbapi_conn, plan, label) -> str`` runs on every new writable connection and
returns the mode in force. A file already in WAL stays in WAL whatever the plan says: a
live downgrade under other openers is refused by SQLite at best, and on exactly the
filesystems where DELETE is wanted its locks cannot be trusted. Such a file is reported
(a warning here, a finding in ``maintenance doctor``) with the fix: stop every process
using it and run ``hermes-store maintenance journal-mode delete``.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import threading
from typing import NamedTuple

from . import filesystem

log = logging.getLogger("hermes_store.backends.sqlite")

#: an explicit journal mode for every store this process opens: "wal" or "delete"
ENV = "HERMES_STATE_JOURNAL_MODE"
MODES = ("wal", "delete")
#: messages SQLite gives when a filesystem refuses WAL's shared memory outright
_WAL_REFUSED = ("locking protocol", "not authorized", "disk i/o error")

#: the explicit mode of the open in progress on this thread (``requesting``)
_REQUESTED: contextvars.ContextVar[str | None] = contextvars.ContextVar("hermes_journal_mode",
                                                                        default=None)
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def normalize(value: str | None, *, source: str = "journal_mode") -> str | None:
    """``"WAL"``/``"wal"`` → ``"wal"``…; None/"" → None; anything else is refused."""
    if value is None or not str(value).strip():
        return None
    mode = str(value).strip().lower()
    if mode not in MODES:
        from ....errors import InvalidArgumentError

        raise InvalidArgumentError(
            f"{source}={value!r}: the store runs with journal_mode 'wal' or 'delete'"
        )
    return mode


class JournalPlan(NamedTuple):
    #: the mode for a file not already in WAL
    mode: str
    #: "argument", "environment" or "filesystem"
    source: str
    filesystem: filesystem.Filesystem

    @property
    def explicit(self) -> bool:
        return self.source != "filesystem"

    def conversion_hint(self, path) -> str:
        return (f"stop every process using it (Hermes gateway, cron, CLI), then run "
                f"`hermes-store --db {path} maintenance journal-mode delete`")


@contextlib.contextmanager
def requesting(mode: str | None):
    """Every ``plan`` made inside (the open's migrations too) takes ``mode`` as explicit."""
    token = _REQUESTED.set(normalize(mode))
    try:
        yield
    finally:
        _REQUESTED.reset(token)


def plan(path, explicit: str | None = None, *, mountinfo: str | None = None,
         kernel: str | None = None) -> JournalPlan:
    """The journal mode for the store at ``path`` (see the module docstring)."""
    fs = filesystem.detect(path, mountinfo=mountinfo, kernel=kernel)
    mode = normalize(explicit) or _REQUESTED.get()
    if mode is not None:
        return JournalPlan(mode, "argument", fs)
    mode = normalize(os.environ.get(ENV), source=ENV)
    if mode is not None:
        return JournalPlan(mode, "environment", fs)
    return JournalPlan("wal" if fs.wal_safe else "delete", "filesystem", fs)


def warn_once(path, key: str, message: str, *args) -> None:
    """Log ``message`` once per (file, key) in this process."""
    with _warned_lock:
        if (str(path), key) in _warned:
            return
        _warned.add((str(path), key))
    log.warning(message, *args)


def _pragma(dbapi_conn, sql: str) -> str:
    cur = dbapi_conn.cursor()
    try:
        return str(cur.execute(sql).fetchone()[0]).lower()
    finally:
        cur.close()


def apply(dbapi_conn, journal: JournalPlan, label) -> str:
    """Give a new writable connection the planned mode; the mode in force."""
    from ..library import dbapi

    current = _pragma(dbapi_conn, "PRAGMA journal_mode")
    if current == "wal":
        if journal.mode != "wal":
            why = journal.filesystem.why_not_wal() or f"journal_mode=delete was asked ({journal.source})"
            warn_once(label, "kept-wal",
                      "%s is in WAL mode and stays so (a live switch under other processes "
                      "is unsafe), but %s: %s", label, why, journal.conversion_hint(label))
        return current
    if journal.mode == "delete":
        if current != "delete":
            current = _pragma(dbapi_conn, "PRAGMA journal_mode=DELETE")
        if journal.source == "filesystem":
            warn_once(label, "delete",
                      "%s: using journal_mode=DELETE because %s; readers and the writer take "
                      "turns. Put state.db on a local disk (or a named volume) to get WAL, or "
                      "set %s=wal if this mount is known to be safe.",
                      label, journal.filesystem.why_not_wal(), ENV)
        return current
    try:
        mode = _pragma(dbapi_conn, "PRAGMA journal_mode=WAL")
    except dbapi().OperationalError as exc:
        if not any(s in str(exc).lower() for s in _WAL_REFUSED):
            raise
        warn_once(label, "refused", "%s: the filesystem refused WAL (%s); using "
                  "journal_mode=DELETE", label, exc)
        return _pragma(dbapi_conn, "PRAGMA journal_mode=DELETE")
    if mode != "wal":  # refused without an error (some NFS/SMB mounts)
        warn_once(label, "refused", "%s: the filesystem refused WAL without an error; "
                  "journal_mode is %s", label, mode)
    return mode


def convert(path, mode: str) -> tuple[str, str]:
    """Switch the file's journal mode offline: ``(before, after)``.

    SQLite leaves (or enters) WAL only with the file to itself; while any other
    connection has it open the switch is refused (``StoreInUseError``, nothing changed).
    Run it with every Hermes process stopped: on a VM share or a network mount the
    locks that check relies on may not reach the other side.
    """
    from ....errors import StoreInUseError, StoreNotFoundError
    from ..library import connect, dbapi
    from .uri import file_uri

    mode = normalize(mode)
    if not os.path.exists(path):
        raise StoreNotFoundError(f"{path} does not exist")
    conn = connect(file_uri(path, mode="rw"), uri=True, isolation_level=None, timeout=0)
    try:
        before = _pragma(conn, "PRAGMA journal_mode")
        if before == mode:
            return before, before
        try:
            after = _pragma(conn, f"PRAGMA journal_mode={mode.upper()}")
        except dbapi().OperationalError as exc:
            raise StoreInUseError(
                f"{path}: journal_mode stays {before}: another connection has the file open "
                f"({exc}). Stop every process using it (Hermes gateway, cron, CLI) and run "
                "the command again."
            ) from exc
        if after != mode:
            raise StoreInUseError(
                f"{path}: SQLite kept journal_mode={after} (asked for {mode}); another "
                "connection may have the file open: stop every process using it and retry"
            )
        return before, after
    finally:
        conn.close()
