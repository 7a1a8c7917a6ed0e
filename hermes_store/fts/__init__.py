"""Full-text search over messages: the head FTS5 layout and its upkeep.

* ``hermes_store.fts.ddl`` — head DDL (views, FTS5 tables, gated triggers),
  ``create_fts`` / ``drop_fts``, tokenizer probes, ``is_fts_object``;
* ``hermes_store.fts.maintenance`` — ``rebuild``, ``integrity_check``, bounded
  ``optimize``, ``fts_sizes``.

SQLite-specific SQL (FTS5, ``json_extract``) stays inside this package.
"""

from .ddl import (
    FTS_STORAGE_VERSION,
    FTS_TABLES,
    create_fts,
    drop_fts,
    is_fts_object,
    stamp_storage_version,
)
from .maintenance import fts_sizes, integrity_check, optimize, rebuild

__all__ = [
    "FTS_STORAGE_VERSION",
    "FTS_TABLES",
    "create_fts",
    "drop_fts",
    "fts_sizes",
    "integrity_check",
    "is_fts_object",
    "optimize",
    "rebuild",
    "stamp_storage_version",
]
