"""The package's own exceptions.

Every error a caller can get from hermes_store derives from ``HermesStoreError`` and
says what went wrong *and what to do about it*. Title errors additionally subclass
``ValueError`` because upstream Hermes raised ``ValueError`` and callers catch that.
"""

from __future__ import annotations


class HermesStoreError(Exception):
    """Base class for every error raised by hermes_store."""


class StoreClosedError(HermesStoreError):
    """A method was called on a SessionDB after ``close()``."""

    def __init__(self, path: object = None) -> None:
        where = f" ({path})" if path else ""
        super().__init__(f"store closed{where}: open a new SessionDB to keep using the database")


class StoreBusyError(HermesStoreError):
    """A write unit could not take the write lock within the retry budget."""

    def __init__(self, path: object, attempts: int, last_error: object = None) -> None:
        self.path = path
        self.attempts = attempts
        detail = f": {last_error}" if last_error else ""
        super().__init__(
            f"database is busy: {path} stayed locked by another writer for {attempts} "
            f"attempts{detail}. Another process holds a long write transaction; retry later "
            "or raise the retry budget (SessionDB(..., retry=RetryPolicy(attempts=N)))."
        )


class StoreInUseError(StoreBusyError):
    """A repair needs the file to itself, and another connection has it open."""

    def __init__(self, message: str) -> None:
        self.path = None
        self.attempts = 1
        HermesStoreError.__init__(self, message)


class StoreFullError(HermesStoreError):
    """The disk (or the file's page limit) is full; the unit was rolled back."""


class SchemaError(HermesStoreError):
    """Base class for schema/version problems."""


class SchemaTooNewError(SchemaError):
    """The file was written by a newer version than this package knows."""


class SchemaOutOfDateError(SchemaError):
    """The file is older than head and automatic upgrade was refused."""


class NotADatabaseError(HermesStoreError):
    """The file is not a SQLite database (or its header is destroyed)."""


class DatabaseDamagedError(HermesStoreError):
    """SQLite reports corruption; the file was not written."""


class UnsafePathError(HermesStoreError):
    """The database path is unsafe to open (e.g. a planted symlink)."""


class SessionNotFoundError(HermesStoreError, KeyError):
    """An operation that needs an existing session was given an unknown id."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"no session with id {session_id!r}")

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.args[0]


class TitleError(HermesStoreError, ValueError):
    """An invalid or conflicting session title (texts kept identical to upstream)."""


RECOVER_HINT = "run `hermes-store recover --output NEW.db` to salvage its rows into a fresh file"
#: for duplicated full-text entries in the schema (upstream #43149), which can be healed
REPAIR_HINT = (
    "run `hermes-store maintenance repair` to heal it in place (a backup copy is made "
    "first; any other damage is refused there with the `recover` hint)"
)


class StoreReadOnlyError(HermesStoreError):
    """A write was attempted through a SessionDB opened with ``read_only=True``."""

    def __init__(self, path: object = None) -> None:
        where = f" {path}" if path else ""
        super().__init__(
            f"store opened read-only{where}: writes are refused; open SessionDB(path) "
            "without read_only=True to change the database"
        )


class StoreNotFoundError(HermesStoreError, FileNotFoundError):
    """A read-only open named a database file that does not exist."""


class InvalidArgumentError(HermesStoreError, ValueError):
    """An argument the database would reject (e.g. a missing required value)."""


class DatabaseAccessError(HermesStoreError):
    """The file or its directory cannot be read or written with our permissions."""


# --------------------------------------------------------------------------- engines (D11)
# Every message names the database (a PostgreSQL URL with its password masked) and says
# what to do.


class DatabaseURLError(HermesStoreError, ValueError):
    """A database URL that cannot be used as given (malformed, no database named)."""


class UnsupportedBackendError(DatabaseURLError):
    """A URL for a database or driver hermes_store does not support."""


class DriverMissingError(HermesStoreError):
    """The database driver for the URL is not installed (``hermes_store[postgres]``)."""


class ServerUnreachableError(HermesStoreError):
    """The database server could not be reached (refused, unknown host, timed out)."""


class UnsupportedServerError(HermesStoreError):
    """The database server lacks what the store needs (version, encoding, extension)."""


class CommitOutcomeUnknownError(HermesStoreError):
    """The connection was lost while a write unit's COMMIT was on its way, and the
    server could not say whether it applied it (it stayed away past the outage budget,
    or has another history: a failover to a promoted standby). Never retried (a retried
    append would be stored twice); the caller must look before writing again."""


class CopyError(HermesStoreError):
    """``db copy`` cannot start or go on (a non-empty destination, another copy's
    progress record, data the destination cannot hold…); the message says what to do."""


class CopyMismatchError(CopyError):
    """Verification found tables whose row count or content differ; ``report`` (a
    ``dbcopy.CopyReport``) says which (the destination keeps its progress record)."""

    def __init__(self, message: str, report: object) -> None:
        super().__init__(message)
        self.report = report


class ImportFileError(HermesStoreError, ValueError):
    """The import file is unreadable or malformed; nothing was imported."""


class RecoveryError(HermesStoreError):
    """A backup or a recovery could not start or could not produce a verified output."""


class RoleError(HermesStoreError, ValueError):
    """The grant cannot be made as asked (unknown role, not the owner …); says why."""


# --------------------------------------------------------------------------- SQLite itself (issue 20)


class SQLiteLibraryError(HermesStoreError):
    """The SQLite library cannot run the store (a capability missing, an unknown or
    missing ``HERMES_STATE_SQLITE_MODULE``); the message names the library."""


class StoreReplacedError(HermesStoreError):
    """The file at the store's path is no longer the one it opened (renamed over,
    deleted, moved away): nothing is written, checkpointed or repaired through the old
    file's handles. Open a new ``SessionDB`` (or ``reopen()``) to use the new file."""

    def __init__(self, path: object, detail: str) -> None:
        self.path = path
        super().__init__(
            f"{path} was replaced while this store had it open ({detail}); nothing was "
            "written to the old file. Open the store again (SessionDB(path), or "
            "db.reopen()) to use the file now at that path."
        )


class WalGenerationLostError(StoreReplacedError):
    """The file's ``-wal``/``-shm`` were deleted or replaced while the store had them
    open (a sibling's close unlinked them, ``rm state.db-wal``; issue 31, row 3): its
    connections would go on committing to a log no other connection reads. Sticky: every
    later write is refused. A lost log is copied aside with the database file
    (``preserved``: that directory, None where it could not be copied, and the message
    says why) and the message names the ``recover`` command that gets its rows back."""

    def __init__(self, path: object, lost: object, detail: str, aftermath: str,
                 preserved: object = None) -> None:
        self.path = path
        #: the sidecar(s) found gone or replaced, as the message names them
        self.lost = lost
        self.preserved = preserved
        HermesStoreError.__init__(
            self,
            f"The log of {path} was lost while this store had it open ({detail}), so "
            f"every write is refused from now on. {aftermath} To go on writing, open the "
            "store again (db.reopen()): it uses the files now at the path."
        )


class StoreOverwrittenError(StoreReplacedError):
    """The file at the store's path was overwritten in place (same inode: ``cp
    backup.db state.db``; issue 31, row 4): the identity stamped in its header is not
    the one the store opened. Sticky: every later write is refused and nothing more is
    written into the file now there; the store's log, which belongs to the overwritten
    content, is moved out of its way (``moved``)."""

    def __init__(self, path: object, detail: str, moved: object = ()) -> None:
        self.path = path
        self.moved = list(moved)
        log = (f" This store's log belonged to the overwritten content; it was moved out "
               f"of the new file's way, to {', '.join(map(str, self.moved))}."
               if self.moved else "")
        HermesStoreError.__init__(
            self,
            f"{path} was overwritten in place while this store had it open ({detail}): "
            "its pages are another file's now, so every write is refused and nothing more "
            f"was written to it.{log} Open the store again (SessionDB(path), or "
            "db.reopen()) to use the file now at that path."
        )


class StoreDirectoryVanishedError(StoreReplacedError):
    """The directory holding the store's file was deleted or moved while the store had
    it open (a profile home removed; upstream #94590; issue 31, row 10). Sticky: every
    later write is refused, and neither a write nor ``reopen()`` creates the directory
    again; a new ``SessionDB(path)`` (a first open) does."""

    def __init__(self, path: object, directory: object) -> None:
        self.path = path
        self.directory = directory
        HermesStoreError.__init__(
            self,
            f"{directory}, the directory of {path}, no longer exists: it was deleted or "
            "moved while this store had the file open, so every write is refused, and "
            "the store does not create the directory again (reopen() refuses too). If "
            "the store is still wanted there, create the directory, or open a new "
            "SessionDB(path), which creates it."
        )


class RepairRefusedError(DatabaseDamagedError):
    """A damaged file's repair was not attempted, and nothing was copied or changed: the
    file's repair attempts are spent (one per process, a few per file across restarts),
    or its volume has no room for the backup a repair takes first (issue 31, row 7;
    ``backends/sqlite/files/repair_limits.py``). The message says which, with the
    figures, and the way out."""


class StoreIOError(HermesStoreError):
    """The operating system failed a read or write of the database or its sidecars
    (SQLite's "disk I/O error", ``SQLITE_IOERR*``). A read-only store tried the read
    again first, on the same connection (``RetryPolicy.io_attempts``; issue 31, row 5);
    a writable store never does: its I/O errors are real."""

    def __init__(self, path: object, detail: str, attempts: int = 1, pause: float = 0.0) -> None:
        self.path, self.detail, self.attempts = path, detail, attempts
        tried = f"; tried {attempts} times, {pause * 1000:g} ms apart" if attempts > 1 else ""
        super().__init__(
            f"{path}: the operating system failed to read or write the file or its -wal/-shm "
            f"({detail}){tried}; the call did not complete. If it goes on, check the disk "
            "and its filesystem (dmesg), and that the -wal and -shm beside the file are "
            "ordinary files this user can read and write."
        )


class DescriptorLimitError(HermesStoreError):
    """No connection could be opened: the process has no file descriptor to spare below
    ``RLIMIT_NOFILE`` and the store has no connection to lend (issue 31, row 6;
    ``connections.py``: the store caps its connections and keeps descriptors free)."""
