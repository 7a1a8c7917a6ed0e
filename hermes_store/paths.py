"""Where the data lives (decision D10): resolved when called, never at import."""

from __future__ import annotations

import os
from pathlib import Path

DB_FILENAME = "state.db"


def hermes_home() -> Path:
    """``$HERMES_HOME`` if set and non-empty, else ``~/.hermes``."""
    env = os.environ.get("HERMES_HOME", "").strip()
    return Path(env).expanduser() if env else Path.home() / ".hermes"


def default_db_path() -> Path:
    """The default ``state.db``: ``$HERMES_HOME/state.db`` else ``~/.hermes/state.db``."""
    return hermes_home() / DB_FILENAME
