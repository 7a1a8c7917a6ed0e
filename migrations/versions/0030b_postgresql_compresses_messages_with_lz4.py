"""v30b: PostgreSQL compresses the long text of messages with lz4 where the server has it.

Upstream schema version 30, unchanged: a step of the store's own (docs/migrations.md,
"The store's own steps"), so ``schema_version`` stays 30. Issue 32, item 4.

PostgreSQL compresses a value of more than about 2 kB before storing it, with ``pglz``
unless told otherwise. Reading such a value back decompresses it, and ``pglz``
decompresses at a few hundred MB/s: a search that reads the text of many long
messages — the bounded ``LIKE`` scan a 1–2 character CJK query makes over the newest
20,000 messages, where tool outputs of several kB are most of the text — spent most of
its time there (docs/performance.md, issue 32). ``lz4`` decompresses several times
faster, and compresses faster on the write path, for somewhat larger values (about a
quarter more on the benchmark's tool outputs). SQLite stores the same text
uncompressed.

The columns a search reads as text: ``messages.content`` and ``messages.tool_calls``.
Not the word index's ``fts_document``: ``pglz`` gives up on a ``tsvector`` (it stays
uncompressed), where ``lz4`` compresses a quarter of the long ones, and a phrase query
reads every candidate's vector: 1.7× slower with them compressed (issue 32).

Only values written from now on are compressed with lz4: PostgreSQL never recompresses
what it stored (a dump and restore, or ``hermes-store db copy``, writes everything
anew). A server built without lz4 (``default_toast_compression`` does not offer it)
keeps ``pglz``: the step then changes nothing there. SQLite: nothing changes.

Downgrade: the columns back to the server's default method; values already stored with
lz4 stay so (readable by any server built with lz4, as the one that wrote them).
"""

from __future__ import annotations

from hermes_store.migrations import helpers as h

revision = "0030b"
down_revision = "0030a"
branch_labels = None
depends_on = None
#: the engines this revision handles: every revision after 0030 handles both
dialects = ("sqlite", "postgresql")
#: the engines whose schema it changes; on the others it only moves the stamp
engines_changed = ("postgresql",)

_COLUMNS = ("content", "tool_calls")

_HAS_LZ4 = ("SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
            "WHERE name = 'default_toast_compression'")


def _compress_with(method: str) -> None:
    h.execute([f"ALTER TABLE messages ALTER COLUMN {column} SET COMPRESSION {method}"
               for column in _COLUMNS])


def upgrade() -> None:
    if h.dialect() == "postgresql" and h.scalar(_HAS_LZ4):
        _compress_with("lz4")


def downgrade() -> None:
    if h.dialect() == "postgresql":
        _compress_with("default")
