"""Telegram DM topic mode's two tables as SQLAlchemy Core: an opt-in side schema.

Upstream Hermes creates ``telegram_dm_topic_mode`` and ``telegram_dm_topic_bindings``
only when a user opts into ``/topic`` (``SessionDB.apply_telegram_topic_migration``),
and versions them outside ``schema_version``: its own ``state_meta`` key
``telegram_dm_topic_schema_version`` (1 = first shape, 2 = ``bindings.session_id``
gets ``ON DELETE CASCADE``). So they are not part of the v30 head (``schema.metadata``):
they live in their own ``MetaData`` here and in their own Alembic script location,
``migrations/telegram_topics/`` (revisions ``t001``, ``t002`` = topic schema versions
1 and 2, version table ``alembic_version_telegram_topics``). See ``docs/migrations.md``.

The declarations follow ``schema.py``'s conventions (its ``INTEGER``/``REAL``: SQLite's
DDL unchanged, 64-bit on PostgreSQL; upstream's defaults; a single TEXT primary key left
nullable as upstream declares it), so that what ``metadata.create_all`` renders matches
upstream's tables on SQLite and keeps every value on PostgreSQL.
"""

from __future__ import annotations

import sqlalchemy as sa

from . import schema
from .schema import INTEGER, REAL

#: the Alembic branch: ``alembic -n telegram_topics …`` and ``migrations/telegram_topics/``
BRANCH = "telegram_topics"
#: the branch's own Alembic version table (the main chain keeps ``alembic_version``)
VERSION_TABLE = "alembic_version_telegram_topics"
#: the ``state_meta`` key upstream versions these tables with ("1", "2")
META_KEY = "telegram_dm_topic_schema_version"

metadata = sa.MetaData()

telegram_dm_topic_mode = sa.Table(
    "telegram_dm_topic_mode",
    metadata,
    sa.Column("chat_id", sa.Text, primary_key=True, nullable=True),
    sa.Column("user_id", sa.Text, nullable=False),
    sa.Column("enabled", INTEGER, nullable=False, server_default=sa.text("1")),
    sa.Column("activated_at", REAL, nullable=False),
    sa.Column("updated_at", REAL, nullable=False),
    sa.Column("has_topics_enabled", INTEGER),
    sa.Column("allows_users_to_create_topics", INTEGER),
    sa.Column("capability_checked_at", REAL),
    sa.Column("intro_message_id", sa.Text),
    sa.Column("pinned_message_id", sa.Text),
)

telegram_dm_topic_bindings = sa.Table(
    "telegram_dm_topic_bindings",
    metadata,
    sa.Column("chat_id", sa.Text, primary_key=True, nullable=False),
    sa.Column("thread_id", sa.Text, primary_key=True, nullable=False),
    sa.Column("user_id", sa.Text, nullable=False),
    sa.Column("session_key", sa.Text, nullable=False),
    # The key points into the head schema's MetaData: one declaration of `sessions`.
    sa.Column(
        "session_id",
        sa.Text,
        sa.ForeignKey(schema.sessions.c.id, ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("managed_mode", sa.Text, nullable=False, server_default=sa.text("'auto'")),
    sa.Column("linked_at", REAL, nullable=False),
    sa.Column("updated_at", REAL, nullable=False),
    # A session is linked to one topic at most (upstream's MVP rule).
    sa.Index("idx_telegram_dm_topic_bindings_session", "session_id", unique=True),
    sa.Index("idx_telegram_dm_topic_bindings_user", "user_id", "chat_id"),
)

#: the branch's tables, in creation order
TABLES = (telegram_dm_topic_mode, telegram_dm_topic_bindings)
TABLE_NAMES = tuple(t.name for t in TABLES)


def owns(name: str | None) -> bool:
    """True for the branch's tables and its version table."""
    return name in TABLE_NAMES or name == VERSION_TABLE
