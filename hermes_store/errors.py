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
