"""The full-text layout's facts both engines keep (decision D7, "layout 3"; D12).

The word index holds every message (a tool row's content cut to
``TOOL_CONTENT_PREFIX_CHARS`` characters); the trigram index holds no tool rows and no
message of a session whose source is in ``TRIGRAM_EXCLUDED_SOURCES`` or that is a
delegate child. SQLite keeps them as FTS5 tables (``backends/sqlite/fts``), PostgreSQL as
a ``tsvector`` and a ``pg_trgm`` GIN index of the same names (``backends/postgresql/fts``).
"""

from __future__ import annotations

#: how much of a tool row's content is indexed
TOOL_CONTENT_PREFIX_CHARS = 8192
#: session sources whose messages stay out of the trigram index (noise, and size)
TRIGRAM_EXCLUDED_SOURCES = ("cron", "subagent")

#: the word index (FTS5 unicode61 / tsvector ``simple``)
FTS_TABLE = "messages_fts"
#: the substring and CJK index (FTS5 trigram / pg_trgm)
TRIGRAM_TABLE = "messages_fts_trigram"

__all__ = ["FTS_TABLE", "TOOL_CONTENT_PREFIX_CHARS", "TRIGRAM_EXCLUDED_SOURCES", "TRIGRAM_TABLE"]
