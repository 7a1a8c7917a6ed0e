"""The Telegram topic branch on PostgreSQL: created inside a write unit (no Alembic run),
and where it stands."""

from __future__ import annotations

import sqlalchemy as sa

from .... import errors, telegram_schema
from ....location import Target
from ....migrate.scripts import telegram_topics_head
from ....migrate.topics import (
    TopicsState,
    topic_stamp,
    write_telegram_topic_meta,
)
from .inspect import connection_to


def create_telegram_topics(conn: sa.Connection, revision: str = "head") -> str:
    """The Telegram topic opt-in on PostgreSQL, inside the caller's transaction
    (``SessionDB.apply_telegram_topic_migration``'s write unit).

    A PostgreSQL database has no tables upstream Hermes created and no older shape of
    them, so the branch's tables are created at its head from ``telegram_schema``'s Core
    metadata (the declarations the branch's revisions must end at, tested on SQLite),
    stamped in the branch's own version table, and upstream's ``state_meta`` key is
    written — one source for the shape, no Alembic run. From the branch's next revision
    on, the paired-revision rule applies to it as to the main chain; until a revision
    handles PostgreSQL, a database below the head is refused here."""
    T = telegram_schema
    head = telegram_topics_head()
    if revision not in ("head", "heads", head):
        raise errors.SchemaError(
            f"the Telegram topic tables are created at the branch head ({head}) on "
            f"PostgreSQL; {revision} cannot be chosen"
        )
    version = sa.Table(T.VERSION_TABLE, sa.MetaData(),
                       sa.Column("version_num", sa.String(32), primary_key=True))
    inspector = sa.inspect(conn)
    if inspector.has_table(T.VERSION_TABLE):
        at = conn.execute(sa.select(version.c.version_num)).scalar()
        if at == head:
            return head
        raise errors.SchemaError(
            f"the Telegram topic tables are at revision {at}, this hermes_store creates "
            f"them at {head} on PostgreSQL and has no step between the two"
        )
    found = [name for name in T.TABLE_NAMES if inspector.has_table(name)]
    if found:
        raise errors.SchemaError(
            f"{', '.join(found)} exist(s) without {T.VERSION_TABLE}: created by another "
            "tool; drop them or stamp them before opting in"
        )
    T.metadata.create_all(conn)
    version.create(conn)
    conn.execute(version.insert().values(version_num=head))
    write_telegram_topic_meta(conn, head)
    return head


def telegram_topics_state(conn: sa.Connection, where: object = "database"):
    """Where the database stands on the Telegram topic branch (``migrate.TopicsState``):
    ``absent``, ``alembic`` (stamped in the branch's version table) or ``unstamped``
    (its tables without the version table: another tool made them). No upstream-made
    tables to adopt on a server, so never ``upstream``."""
    T = telegram_schema
    names = set(sa.inspect(conn).get_table_names())
    meta = None
    if "state_meta" in names:
        meta = conn.execute(
            sa.text("SELECT value FROM state_meta WHERE key = :key"), {"key": T.META_KEY}
        ).scalar()
        meta = None if meta is None else str(meta)
    if T.VERSION_TABLE in names:
        revision = topic_stamp(lambda sql: conn.exec_driver_sql(sql).all(), where)
        if revision is not None:
            return TopicsState("alembic", revision, meta)
    if any(name in names for name in T.TABLE_NAMES):
        return TopicsState("unstamped", None, meta)
    return TopicsState("absent", None, meta)


def inspect_telegram_topics(target: Target):
    """:func:`telegram_topics_state` in one read-only transaction."""
    with connection_to(target) as conn:
        conn.exec_driver_sql("SET TRANSACTION READ ONLY")
        state = telegram_topics_state(conn, target.display)
        conn.rollback()
        return state
