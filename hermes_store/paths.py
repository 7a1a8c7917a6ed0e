"""Where the data lives (decision D10): resolved when called, never at import.

A leading ``~`` (:func:`expand_home`): only ``~`` alone and a ``~/`` prefix mean the
current user's home directory. Any other leading ``~`` (``~weird/state.db``,
``~nosuchuser/x``, ``~root/state.db``) is a literal file or folder name, never expanded
(``Path.expanduser`` would raise for an unknown user, or reach another user's home).
"""

from __future__ import annotations

import os
from pathlib import Path

DB_FILENAME = "state.db"


def expand_home(path: str | os.PathLike) -> Path:
    """``path`` with a leading ``~`` or ``~/`` replaced by the home directory; any other
    path (another leading ``~`` included) exactly as given."""
    text = os.fsdecode(os.fspath(path))
    seps = (os.sep, os.altsep) if os.altsep else (os.sep,)
    if text == "~":
        return Path.home()
    if text[:1] == "~" and text[1:2] in seps:
        return Path.home() / text[2:]
    return Path(text)


def hermes_home() -> Path:
    """``$HERMES_HOME`` if set and non-empty, else ``~/.hermes``."""
    env = os.environ.get("HERMES_HOME", "").strip()
    return expand_home(env) if env else Path.home() / ".hermes"


def default_db_path() -> Path:
    """The default ``state.db``: ``$HERMES_HOME/state.db`` else ``~/.hermes/state.db``."""
    return hermes_home() / DB_FILENAME
