"""How PostgreSQL stores the long text of messages: compressed with lz4 where the server
has it (revision ``0030b``).

PostgreSQL compresses a value of more than about 2 kB; ``pglz``, its default,
decompresses at a few hundred MB/s, which was most of a search that reads many long
messages (the bounded ``LIKE`` scan of a short CJK query: docs/performance.md, issue
32). ``lz4`` reads back several times faster for somewhat larger values. A server built
without it keeps ``pglz``.
"""

from __future__ import annotations

import sqlalchemy as sa

#: the columns of ``messages`` a search reads as text (not ``fts_document``: pglz
#: leaves a ``tsvector`` uncompressed, lz4 would not, and a search reads the vectors of
#: the candidates it ranks)
LZ4_COLUMNS = ("content", "tool_calls")

_HAS_LZ4 = ("SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
            "WHERE name = 'default_toast_compression'")


def has_lz4(conn: sa.Connection) -> bool:
    """Whether the server can compress with lz4 (built with it)."""
    return bool(conn.exec_driver_sql(_HAS_LZ4).scalar())


def set_compression(conn: sa.Connection) -> None:
    """Compress ``LZ4_COLUMNS`` with lz4 from now on, where the server can (inside the
    caller's transaction; values already stored keep their method)."""
    if has_lz4(conn):
        for column in LZ4_COLUMNS:
            conn.exec_driver_sql(f"ALTER TABLE messages ALTER COLUMN {column} "
                                 "SET COMPRESSION lz4")
