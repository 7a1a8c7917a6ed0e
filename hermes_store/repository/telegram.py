"""Telegram DM topic mode concern: the per-chat opt-in and topic -> session bindings.

The two tables exist only after an explicit opt-in (``apply_telegram_topic_migration``,
which ``enable_telegram_topic_mode`` and ``bind_telegram_topic`` call first, as upstream
does): opening a store never creates them. Until then every read answers as if they were
empty and every other write is a no-op, exactly where upstream's calls do the same — but
by asking whether the table exists (portable, and a failed statement would abort a
PostgreSQL transaction) rather than by catching "no such table".

Identifiers are stored as text (``str()`` of what is given, as upstream does), so a
chat id given as ``123`` and as ``"123"`` is the same chat.
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa

from .. import schema, unit_locks
from .. import telegram_schema as T
from ..errors import InvalidArgumentError, SessionNotFoundError
from .base import RepositoryBase
from ..sql.constructs import insert_for
from .lineage import finish_rich_row, rich_columns
from .rows import row_dict

S = schema.sessions
MODE = T.telegram_dm_topic_mode
BINDINGS = T.telegram_dm_topic_bindings
VERSION = sa.table(T.VERSION_TABLE, sa.column("version_num"))

#: upstream's text, kept for callers that match it
ALREADY_LINKED = "session is already linked to another Telegram topic"


def _exists(conn: sa.Connection, table: sa.Table) -> bool:
    return sa.inspect(conn).has_table(table.name)


def _flag(value: bool | None) -> int | None:
    return None if value is None else (1 if value else 0)


class TelegramTopicsMixin(RepositoryBase):
    # ------------------------------------------------------------------ opt-in

    def apply_telegram_topic_migration(self) -> None:
        """Create (or bring up to date) the topic tables: the explicit opt-in.

        Runs the Telegram topic Alembic branch inside one write unit, so two processes
        opting in at once create the tables once. Tables upstream Hermes created are
        adopted; a version-1 table is rebuilt with ``ON DELETE CASCADE``, every row kept.
        """
        from .. import migrate

        head = migrate.telegram_topics_head()

        def at_head(conn: sa.Connection) -> bool:
            return _exists(conn, VERSION) and \
                conn.execute(sa.select(VERSION.c.version_num)).scalar() == head

        if not self.read_only:  # (a read-only store refuses the opt-in below)
            with self._read() as conn:
                if at_head(conn):
                    return  # the common case: no write unit (the tables never go away)

        def unit(conn: sa.Connection) -> None:
            if at_head(conn):
                return  # another process opted in meanwhile
            migrate.upgrade_telegram_topics(connection=conn)

        self._write(unit, locks=unit_locks.STORE)  # DDL: runs alone

    def enable_telegram_topic_mode(
        self,
        *,
        chat_id: str,
        user_id: str,
        has_topics_enabled: bool | None = None,
        allows_users_to_create_topics: bool | None = None,
    ) -> None:
        """Turn topic mode on for one private chat (opting in first). Re-enabling keeps
        ``activated_at`` and replaces the owner and the capability flags."""
        self.apply_telegram_topic_migration()
        now = time.time()
        values = dict(
            chat_id=str(chat_id), user_id=str(user_id), enabled=1, activated_at=now,
            updated_at=now, has_topics_enabled=_flag(has_topics_enabled),
            allows_users_to_create_topics=_flag(allows_users_to_create_topics),
            capability_checked_at=now,
        )

        def unit(conn: sa.Connection) -> None:
            stmt = insert_for(conn, MODE).values(**values)
            kept = ("chat_id", "activated_at")
            conn.execute(stmt.on_conflict_do_update(
                index_elements=[MODE.c.chat_id],
                set_={k: stmt.excluded[k] for k in values if k not in kept},
            ))

        self._write(unit, locks=unit_locks.telegram_chat(values["chat_id"]))

    def disable_telegram_topic_mode(self, *, chat_id: str, clear_bindings: bool = True) -> None:
        """Turn topic mode off for a chat; with ``clear_bindings`` its topic bindings go
        too. Never creates the tables: without them there is nothing to disable."""
        chat_id = str(chat_id)

        def unit(conn: sa.Connection) -> None:
            if not _exists(conn, MODE):
                return
            conn.execute(
                sa.update(MODE).where(MODE.c.chat_id == chat_id)
                .values(enabled=0, updated_at=time.time())
            )
            if clear_bindings and _exists(conn, BINDINGS):
                conn.execute(sa.delete(BINDINGS).where(BINDINGS.c.chat_id == chat_id))

        self._write(unit, locks=unit_locks.telegram_chat(chat_id))

    def is_telegram_topic_mode_enabled(self, *, chat_id: str, user_id: str) -> bool:
        """True when the chat opted in, for this user, and is not disabled."""
        with self._read() as conn:
            if not _exists(conn, MODE):
                return False
            enabled = conn.execute(
                sa.select(MODE.c.enabled)
                .where(MODE.c.chat_id == str(chat_id), MODE.c.user_id == str(user_id))
            ).scalar()
        return bool(enabled)

    # ------------------------------------------------------------------ bindings

    def bind_telegram_topic(
        self,
        *,
        chat_id: str,
        thread_id: str,
        user_id: str,
        session_key: str,
        session_id: str,
        managed_mode: str = "auto",
    ) -> None:
        """Bind one topic thread to one session (opting in first).

        Binding a topic again replaces its session and fields (``linked_at`` stays);
        a session already linked to a *different* topic raises ``InvalidArgumentError``
        (a ``ValueError``) with upstream's text. An unknown session raises ``SessionNotFoundError`` (upstream:
        the foreign key's ``IntegrityError``).
        """
        if managed_mode is None:
            raise InvalidArgumentError("managed_mode must be a string such as 'auto', not None")
        chat_id, thread_id, session_id = str(chat_id), str(thread_id), str(session_id)
        self.apply_telegram_topic_migration()
        now = time.time()
        values = dict(
            chat_id=chat_id, thread_id=thread_id, user_id=str(user_id),
            session_key=str(session_key), session_id=session_id,
            managed_mode=str(managed_mode), linked_at=now, updated_at=now,
        )

        def unit(conn: sa.Connection) -> None:
            if conn.execute(sa.select(S.c.id).where(S.c.id == session_id)).first() is None:
                raise SessionNotFoundError(session_id)
            linked = conn.execute(
                sa.select(BINDINGS.c.chat_id, BINDINGS.c.thread_id)
                .where(BINDINGS.c.session_id == session_id)
            ).first()
            if linked is not None and (linked.chat_id, linked.thread_id) != (chat_id, thread_id):
                raise InvalidArgumentError(ALREADY_LINKED)
            stmt = insert_for(conn, BINDINGS).values(**values)
            kept = ("chat_id", "thread_id", "linked_at")
            conn.execute(stmt.on_conflict_do_update(
                index_elements=[BINDINGS.c.chat_id, BINDINGS.c.thread_id],
                set_={k: stmt.excluded[k] for k in values if k not in kept},
            ))

        # the session (linked to one topic at most) and the chat whose topics change
        self._write(unit, locks=unit_locks.sessions(session_id)
                    | unit_locks.telegram_chat(chat_id))

    def get_telegram_topic_binding(self, *, chat_id: str, thread_id: str) -> dict[str, Any] | None:
        """The binding row of one topic, or None."""
        return self._binding_where(
            BINDINGS.c.chat_id == str(chat_id), BINDINGS.c.thread_id == str(thread_id)
        )

    def get_telegram_topic_binding_by_session(self, *, session_id: str) -> dict[str, Any] | None:
        """The binding row of the topic a session is linked to, or None."""
        return self._binding_where(BINDINGS.c.session_id == str(session_id))

    def list_telegram_topic_bindings_for_chat(self, *, chat_id: str) -> list[dict[str, Any]]:
        """Every binding of one chat, most recently updated first."""
        with self._read() as conn:
            if not _exists(conn, BINDINGS):
                return []
            rows = conn.execute(
                sa.select(BINDINGS).where(BINDINGS.c.chat_id == str(chat_id))
                .order_by(BINDINGS.c.updated_at.desc())
            )
            return [row_dict(r) for r in rows]

    def delete_telegram_topic_binding(self, *, chat_id: str, thread_id: str) -> int:
        """Remove one topic's binding (the topic was deleted in Telegram); returns the
        rows removed (0 when absent). Removing a chat's last binding also turns its
        topic mode off, in the same unit, so recovery stops steering messages to topics
        that no longer exist."""
        chat_id, thread_id = str(chat_id), str(thread_id)

        def unit(conn: sa.Connection) -> int:
            if not _exists(conn, BINDINGS):
                return 0
            deleted = conn.execute(
                sa.delete(BINDINGS)
                .where(BINDINGS.c.chat_id == chat_id, BINDINGS.c.thread_id == thread_id)
            ).rowcount or 0
            if not deleted:
                return 0
            remaining = conn.execute(
                sa.select(BINDINGS.c.thread_id).where(BINDINGS.c.chat_id == chat_id).limit(1)
            ).first()
            if remaining is None and _exists(conn, MODE):
                conn.execute(
                    sa.update(MODE).where(MODE.c.chat_id == chat_id)
                    .values(enabled=0, updated_at=time.time())
                )
            return deleted

        return self._write(unit, locks=unit_locks.telegram_chat(chat_id))

    def is_telegram_session_linked_to_topic(self, *, session_id: str) -> bool:
        """True when the session is bound to any topic. Never opts in."""
        with self._read() as conn:
            if not _exists(conn, BINDINGS):
                return False
            return conn.execute(
                sa.select(BINDINGS.c.chat_id)
                .where(BINDINGS.c.session_id == str(session_id)).limit(1)
            ).first() is not None

    def list_unlinked_telegram_sessions_for_user(
        self, *, chat_id: str, user_id: str, limit: int = 10
    ) -> list[dict[str, Any]]:
        """The user's Telegram sessions not bound to any topic, most recently active
        first: session rows with ``last_active`` and ``preview`` (as
        ``list_sessions_rich``). ``chat_id`` is accepted and unused, as upstream. A
        negative ``limit`` means no limit (SQLite's reading of ``LIMIT -1``)."""
        limit = int(limit)
        with self._read() as conn:
            columns = rich_columns(S)
            last_active = next(c for c in columns if c.name == "last_active")
            stmt = (
                sa.select(*columns)
                .where(S.c.source == "telegram", S.c.user_id == str(user_id))
                .order_by(last_active.desc(), S.c.started_at.desc())
            )
            if _exists(conn, BINDINGS):
                stmt = stmt.where(
                    ~sa.exists().where(BINDINGS.c.session_id == S.c.id)
                )
            if limit >= 0:
                stmt = stmt.limit(limit)
            return [finish_rich_row(r) for r in conn.execute(stmt)]

    # ------------------------------------------------------------------ helpers

    def _binding_where(self, *terms) -> dict[str, Any] | None:
        with self._read() as conn:
            if not _exists(conn, BINDINGS):
                return None
            row = conn.execute(sa.select(BINDINGS).where(*terms)).first()
        return row_dict(row) if row is not None else None
