"""Is a file at head? Answered through a read-only connection, without Alembic.

The usual open of a store asks this once; anything but a clean "at head" goes to the
migrations (``backends/sqlite/migrate``), which adopt, upgrade or refuse the file.
"""

from __future__ import annotations

import functools
import os
import re

from ....revisions import head, upstream_version
from ..files.uri import file_uri

#: the package's SQLite library (library.py), never `import sqlite3`: one copy of SQLite
#: per process
from ..library import SQLITE as sqlite3


@functools.cache
def head_indexes() -> frozenset[str]:
    """The names of the indexes a file at head has (the frozen head schema)."""
    from .head_schema import STATEMENTS

    found = (re.match(r"CREATE (?:UNIQUE )?INDEX (\w+)", ddl) for ddl in STATEMENTS)
    return frozenset(m.group(1) for m in found if m)


def stamped_at_head(path: str | os.PathLike) -> bool:
    """True when the file is stamped at head: ``alembic_version`` holds one row, the
    head, ``schema_version`` one row, its number, and every index of head is there
    (another tool may have dropped one: the migrations put it back, as upstream's open
    does). Read through a read-only connection; any other state (or any error) is
    False, for ``migrate`` to judge."""
    try:
        conn = sqlite3.connect(file_uri(path, mode="ro"), uri=True, timeout=1.0)
    except sqlite3.Error:
        return False
    try:
        stamps = conn.execute("SELECT version_num FROM alembic_version").fetchall()
        versions = conn.execute("SELECT version FROM schema_version").fetchall()
        indexes = conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'").fetchall()
    except sqlite3.Error:
        return False
    finally:
        conn.close()
    newest = head()
    return (stamps == [(newest,)] and versions == [(upstream_version(newest),)]
            and head_indexes() <= {name for name, in indexes})


__all__ = ["head_indexes", "stamped_at_head"]
