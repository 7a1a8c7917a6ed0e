"""hermes_store: the data layer of Hermes Agent's memory (``state.db``).

    from hermes_store import SessionDB
    db = SessionDB()            # $HERMES_HOME/state.db, else ~/.hermes/state.db

Every name a user needs is here: ``SessionDB``, ``RetryPolicy``, ``use_sqlite_library``,
the default locations, and every error the package raises (``hermes_store.errors``;
all subclass ``HermesStoreError``).
"""

from __future__ import annotations

from .errors import (
    CommitOutcomeUnknownError,
    CopyError,
    CopyMismatchError,
    DatabaseAccessError,
    DatabaseDamagedError,
    DescriptorLimitError,
    DatabaseURLError,
    DriverMissingError,
    HermesStoreError,
    ImportFileError,
    InvalidArgumentError,
    NotADatabaseError,
    RecoveryError,
    RepairRefusedError,
    RoleError,
    SQLiteLibraryError,
    SchemaError,
    SchemaOutOfDateError,
    SchemaTooNewError,
    ServerUnreachableError,
    SessionNotFoundError,
    StoreBusyError,
    StoreClosedError,
    StoreDirectoryVanishedError,
    StoreFullError,
    StoreIOError,
    StoreInUseError,
    StoreNotFoundError,
    StoreOverwrittenError,
    StoreReadOnlyError,
    StoreReplacedError,
    TitleError,
    UnsafePathError,
    UnsupportedBackendError,
    UnsupportedServerError,
    WalGenerationLostError,
)
from .paths import default_db_path, hermes_home
from .policy import RetryPolicy

__version__ = "0.1.0"


def use_sqlite_library(name: str, *, why: str = "") -> None:
    """Run this process's SQLite stores on ``name``: ``"sqlite3"`` (the standard
    library's, the default) or ``"pysqlite3"`` (the extra ``hermes_store[pysqlite3]``,
    SQLite 3.53.4). Call it before the first store opens; it wins over
    ``HERMES_STATE_SQLITE_MODULE``. Choose ``pysqlite3`` only for a process that opens
    ``state.db`` through the store alone: a second copy of SQLite beside the standard
    library's drops the other's file locks (docs/operations.md, "Which SQLite"). ``why``
    is logged when the choice overrides the environment."""
    from .backends.sqlite.library import use

    use(name, why=why)


__all__ = [
    "SessionDB",
    "RetryPolicy",
    "use_sqlite_library",
    "default_db_path",
    "hermes_home",
    "CommitOutcomeUnknownError",
    "CopyError",
    "CopyMismatchError",
    "DatabaseAccessError",
    "DatabaseDamagedError",
    "DescriptorLimitError",
    "DatabaseURLError",
    "DriverMissingError",
    "HermesStoreError",
    "ImportFileError",
    "InvalidArgumentError",
    "NotADatabaseError",
    "RecoveryError",
    "RepairRefusedError",
    "RoleError",
    "SQLiteLibraryError",
    "SchemaError",
    "SchemaOutOfDateError",
    "SchemaTooNewError",
    "ServerUnreachableError",
    "SessionNotFoundError",
    "StoreBusyError",
    "StoreClosedError",
    "StoreDirectoryVanishedError",
    "StoreFullError",
    "StoreIOError",
    "StoreInUseError",
    "StoreNotFoundError",
    "StoreOverwrittenError",
    "StoreReadOnlyError",
    "StoreReplacedError",
    "TitleError",
    "UnsafePathError",
    "UnsupportedBackendError",
    "UnsupportedServerError",
    "WalGenerationLostError",
]


def __getattr__(name: str):
    # Imported lazily so `import hermes_store` (and Alembic's env.py) stays light.
    if name == "SessionDB":
        from .startup import collector_paused

        with collector_paused():
            from .store import SessionDB

        return SessionDB
    raise AttributeError(f"module 'hermes_store' has no attribute {name!r}")
