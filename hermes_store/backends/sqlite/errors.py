"""SQLite's errors as the package's (result codes → errors that say what to do).

``translate_error`` maps ``SQLITE_FULL``, ``SQLITE_NOTADB``, ``SQLITE_CORRUPT``… to
``StoreFullError``, ``NotADatabaseError``, ``DatabaseDamagedError``…;
``is_busy_error`` is the contention a write unit rides out (``SQLITE_BUSY*``,
``SQLITE_LOCKED*``), classified by result code (by message only for drivers that do
not expose codes). ``sqlite_errors(path)`` re-raises inside a block.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, NoReturn

import sqlalchemy as sa

from ... import errors
#: the package's SQLite library (library.py), never `import sqlite3`: one copy of SQLite
#: per process
from .library import SQLITE as sqlite3


def sqlite_error_name(exc: BaseException) -> str:
    """SQLite's symbolic result code ("SQLITE_BUSY", …) of a driver error, if any."""
    orig = getattr(exc, "orig", exc)
    return getattr(orig, "sqlite_errorname", "") or ""


def is_busy_error(exc: BaseException) -> bool:
    """True for lock contention, classified by result code (message as a fallback
    for drivers that do not expose codes)."""
    name = sqlite_error_name(exc)
    if name:
        return name.startswith("SQLITE_BUSY") or name.startswith("SQLITE_LOCKED")
    text = str(getattr(exc, "orig", exc)).lower()
    return "database is locked" in text or "database is busy" in text


def is_io_error(exc: BaseException) -> bool:
    """True for an operating-system I/O failure, "disk I/O error" (``SQLITE_IOERR*``),
    classified by result code (message as a fallback). A read-only store tries such a
    read again (``policy.RetryPolicy.io_attempts``): a ``mode=ro`` connection cannot
    rebuild the ``-shm`` itself while a writer resets the WAL."""
    name = sqlite_error_name(exc)
    if name:
        return name.startswith("SQLITE_IOERR")
    return "disk i/o error" in str(getattr(exc, "orig", exc)).lower()


def is_index_damage(exc: BaseException) -> bool:
    """True for corruption confined to a full-text index (derived data): SQLite's
    ``SQLITE_CORRUPT_VTAB``, a bare ``SQLITE_CONSTRAINT`` (below), or an FTS5 module's
    own complaint ("fts5: corrupt structure
    record", "fts5: corruption found reading blob …"). The canonical tables are not
    damaged by it, so the file is not latched as damaged (``files/latch.py``)."""
    name = sqlite_error_name(exc)
    if name == "SQLITE_CORRUPT_VTAB":
        return True
    if name == "SQLITE_CONSTRAINT":
        # without an extended code: only a virtual table answers so (every constraint
        # of the schema has one: _UNIQUE, _NOTNULL, _TRIGGER…), and the store's only
        # virtual tables are its FTS5 indexes — SQLite 3.40's FTS5 says so when its
        # structure record was cut short and a new segment meets the old blocks
        return True
    text = str(getattr(exc, "orig", exc)).lower()
    return "fts5" in text and ("corrupt" in text or "malformed" in text)


def translate_error(exc: BaseException, path: object) -> BaseException | None:
    """Map a driver error to the package's own error (which says what to do), or
    None to re-raise as is. The one place that reads SQLite's result codes.

    Damage to the file itself (not to a full-text index: :func:`is_index_damage`)
    latches the file for this process (``files/latch.py``, decision D20): every store
    on it refuses to write from then on, with the same error."""
    name = sqlite_error_name(exc)
    text = str(getattr(exc, "orig", exc))
    if is_busy_error(exc):
        return errors.StoreBusyError(
            path, 1, "another process holds a write lock; close other Hermes processes "
            "using this file or retry later"
        )
    if name == "SQLITE_FULL" or "database or disk is full" in text:
        return errors.StoreFullError(
            f"{path}: the disk (or the database's page limit) is full; the write was rolled "
            "back and nothing was stored. Free space and retry."
        )
    if name == "SQLITE_NOTADB" or "file is not a database" in text:
        return errors.NotADatabaseError(
            f"{path} is not a SQLite database ({text}); it was left untouched. If it is a "
            f"damaged state.db, {errors.RECOVER_HINT}"
        )
    if name.startswith("SQLITE_CORRUPT") or "malformed" in text:
        # A duplicated schema entry (upstream #43149) is healable in place.
        hint = errors.REPAIR_HINT if "already exists" in text else errors.RECOVER_HINT
        damaged = errors.DatabaseDamagedError(f"{path} is damaged ({text}); {hint}")
        if hint is errors.RECOVER_HINT and not is_index_damage(exc):
            from .files import latch

            if latch.latched(path) is None and not latch.file_is_damaged(path):
                return damaged  # the file's B-trees are whole: an index's damage
            return latch.latch(path, damaged)
        return damaged
    if name == "SQLITE_READONLY_DBMOVED":
        # SQLite's own check (rollback-journal mode): the file was renamed or replaced
        return errors.StoreReplacedError(path, "SQLite found the file moved since it was "
                                         "opened (SQLITE_READONLY_DBMOVED)")
    if name.startswith("SQLITE_READONLY") or "readonly database" in text:
        return errors.DatabaseAccessError(
            f"{path} is read-only ({text}); make the file and its directory writable, or "
            "run as the user that owns them"
        )
    if name.startswith("SQLITE_CANTOPEN"):
        return errors.DatabaseAccessError(
            f"cannot open {path} ({text}); check that the directory exists and is writable"
        )
    if is_io_error(exc):
        return errors.StoreIOError(path, f"{text}, {name}" if name else text)
    return None


def raise_translated(exc: BaseException, path: object) -> NoReturn:
    """Raise the package's own error for a driver error (:func:`translate_error`), or
    ``exc`` itself when it has none; called in the handler that caught ``exc``."""
    mapped = translate_error(exc, path)
    if mapped is None:
        raise exc
    raise mapped from exc


@contextlib.contextmanager
def sqlite_errors(path: object) -> Iterator[None]:
    """Turn SQLite's error codes into the package's errors (which say what to do)."""
    try:
        yield
    except (sqlite3.Error, sa.exc.DBAPIError) as exc:
        translated = translate_error(exc, path)
        if translated is None:
            raise
        raise translated from exc


__all__ = ["is_busy_error", "is_index_damage", "is_io_error", "raise_translated",
           "sqlite_error_name", "sqlite_errors", "translate_error"]
