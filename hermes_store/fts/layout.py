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

#: ``state_meta`` key present while the word and trigram indexes are stale: found damaged,
#: they were detached from the writes (which go on without them) and search scans
#: ``messages`` instead, until a rebuild (the next writable open, ``rebuild-fts``).
#: Its value says what damage was found. Only SQLite sets it (docs/reliability.md); the
#: name is the one upstream's newer versions give the same mark.
FTS_STALE_KEY = "fts_stale"
#: what a user is told about stale indexes (doctor, status, the FTS integrity check)
FTS_STALE_HINT = ("search scans the messages until the index is rebuilt: at the store's "
                  "next writable open, or by `hermes-store maintenance rebuild-fts`")

__all__ = ["FTS_STALE_HINT", "FTS_STALE_KEY", "FTS_TABLE", "TOOL_CONTENT_PREFIX_CHARS",
           "TRIGRAM_EXCLUDED_SOURCES", "TRIGRAM_TABLE"]
