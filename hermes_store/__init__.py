"""hermes_store: the data layer of Hermes Agent's memory (``state.db``).

    from hermes_store import SessionDB
    db = SessionDB()            # $HERMES_HOME/state.db, else ~/.hermes/state.db
"""

from __future__ import annotations

from .errors import (
    DatabaseDamagedError,
    HermesStoreError,
    NotADatabaseError,
    SchemaError,
    SchemaOutOfDateError,
    SchemaTooNewError,
    SessionNotFoundError,
    StoreBusyError,
    StoreClosedError,
    StoreFullError,
    StoreReplacedError,
    TitleError,
    UnsafePathError,
)
from .paths import default_db_path, hermes_home

__version__ = "0.1.0"

__all__ = [
    "SessionDB",
    "DatabaseDamagedError",
    "HermesStoreError",
    "NotADatabaseError",
    "SchemaError",
    "SchemaOutOfDateError",
    "SchemaTooNewError",
    "SessionNotFoundError",
    "StoreBusyError",
    "StoreClosedError",
    "StoreFullError",
    "StoreReplacedError",
    "TitleError",
    "UnsafePathError",
    "default_db_path",
    "hermes_home",
]


def __getattr__(name: str):
    # Imported lazily so `import hermes_store` (and Alembic's env.py) stays light.
    if name == "SessionDB":
        from .startup import collector_paused

        with collector_paused():
            from .store import SessionDB

        return SessionDB
    raise AttributeError(f"module 'hermes_store' has no attribute {name!r}")
