"""The Telegram DM topic branch, what every engine shares of it.

Upstream creates its Telegram DM topic tables only when a user opts in (/topic) and
versions them with its own ``state_meta`` key, outside ``schema_version``. Here they have
their own Alembic script location (``migrations/telegram_topics/``: ``t001``, ``t002`` =
that key's versions 1 and 2) and their own version table, so the main chain keeps its
single head (plain ``alembic upgrade head`` still works), ``upgrade()`` never creates
them, and the topic tables stay out of the v30 head schema. See docs/migrations.md.
Each backend's ``Migrations`` reads and creates them on its engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import sqlalchemy as sa

from .. import errors, telegram_schema
from ..backends.base import backend_of
from .scripts import describe, telegram_topics_head, topic_scripts, topic_version


@dataclass(frozen=True)
class TopicsState:
    """Where a database stands on the Telegram topic branch.

    ``kind``: ``"absent"`` (nobody opted in: no topic tables), ``"upstream"`` (tables
    upstream Hermes created, not yet under Alembic: ``revision`` is derived from their
    shape), ``"alembic"`` (``revision`` from ``alembic_version_telegram_topics``) or
    ``"unstamped"`` (the tables without the version table: another tool's; ``revision``
    None).
    ``meta_version``: ``state_meta.telegram_dm_topic_schema_version`` as stored.
    """

    kind: str
    revision: str | None
    meta_version: str | None


def topics_too_new(where: object, found: str, newest: int) -> errors.SchemaTooNewError:
    return errors.SchemaTooNewError(
        f"{where} has {found}, newer than this hermes_store understands (Telegram topic "
        f"schema up to version {newest}); it was written by a newer Hermes — upgrade "
        "hermes_store. The file was not changed."
    )


def topic_stamp(run: Callable[[str], list], where: object) -> str | None:
    """The branch's revision in its version table (None: no row), refusing a revision
    this package does not know. Shared by both engines."""
    T = telegram_schema
    rows = run(f"SELECT version_num FROM {T.VERSION_TABLE}")
    if len(rows) > 1:
        raise errors.DatabaseDamagedError(
            f"{where}: {T.VERSION_TABLE} holds {len(rows)} rows instead of one; "
            f"{errors.RECOVER_HINT}"
        )
    if not rows:
        return None
    revision = rows[0][0]
    directory = topic_scripts()
    try:
        directory.get_revision(revision)
    except Exception:
        newest = topic_version(directory.get_current_head())
        if re.fullmatch(r"t\d+", revision) and topic_version(revision) > newest:
            raise topics_too_new(where, f"Telegram topic revision {revision}", newest) from None
        raise errors.SchemaError(
            f"{where}: the Telegram topic tables are stamped {revision!r}, which this "
            "package does not know; they were migrated by a different tool"
        ) from None
    return revision


def write_telegram_topic_meta(conn: sa.Connection, revision: str | None) -> None:
    """Keep upstream's ``telegram_dm_topic_schema_version`` equal to the branch's revision
    (deleted at the branch base), so upstream Hermes reads the version Alembic records."""
    from ..schema import state_meta

    key = telegram_schema.META_KEY
    if revision is None:
        conn.execute(sa.delete(state_meta).where(state_meta.c.key == key))
        return
    value = str(topic_version(revision))
    updated = conn.execute(
        sa.update(state_meta).where(state_meta.c.key == key).values(value=value)
    )
    if not updated.rowcount:
        conn.execute(sa.insert(state_meta).values(key=key, value=value))


def include_telegram_topics_name(name: str | None, type_: str, parent_names) -> bool:
    """Autogenerate filter of the branch: its two tables only."""
    if type_ == "table":
        return name in telegram_schema.TABLE_NAMES
    return True


@dataclass(frozen=True)
class TopicsCheck:
    """The drift check's view of the Telegram topic branch."""

    state: str  # TopicsState.kind
    revision: str | None
    head: str
    meta_version: str | None
    drift: list[str]

    @property
    def at_head(self) -> bool:
        return self.revision == self.head

    @property
    def ok(self) -> bool:
        return self.state == "absent" or (self.at_head and not self.drift)

    def describe(self) -> str:
        if self.state == "absent":
            return "absent (nobody opted in; created on opt-in only)"
        if self.state == "unstamped":
            return f"present but not stamped (head is {self.head})"
        where = f"{self.revision} (head)" if self.at_head else f"{self.revision}, behind {self.head}"
        if self.state == "upstream":
            where += ", created by upstream Hermes and not yet stamped"
        return where

    def as_dict(self) -> dict:
        return {
            "state": self.state,
            "revision": self.revision,
            "head": self.head,
            "at_head": self.at_head,
            "meta_version": self.meta_version,
            "drift": list(self.drift),
            "ok": self.ok,
        }


def check_telegram_topics(conn: sa.Connection, where: object = "database") -> TopicsCheck:
    """The branch's state, and when its tables exist, their drift from
    ``telegram_schema`` and a ``state_meta`` key that disagrees with the revision."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    T = telegram_schema
    migrations = backend_of(conn).migrations
    state = migrations.topics_state_on(conn, where)
    drift: list[str] = []
    if state.kind != "absent":
        ctx = MigrationContext.configure(
            conn, opts={"include_name": include_telegram_topics_name, "compare_type": True}
        )
        diffs = compare_metadata(ctx, T.metadata)
        drift = [describe(d) for d in migrations.topics_drift(conn, diffs, T.metadata)]
        if state.revision is None:
            drift.append(f"the tables exist without {T.VERSION_TABLE} (created by another "
                         "tool): drop them, or stamp them at the branch's head")
        expected = None if state.revision is None else str(topic_version(state.revision))
        if expected is not None and state.meta_version != expected:
            drift.append(
                f"state_meta {T.META_KEY} is {state.meta_version!r}, expected {expected!r} "
                "(upstream Hermes reads it)"
            )
    return TopicsCheck(state.kind, state.revision, telegram_topics_head(), state.meta_version, drift)


__all__ = [
    "TopicsCheck",
    "TopicsState",
    "check_telegram_topics",
    "include_telegram_topics_name",
    "topic_stamp",
    "topics_too_new",
    "write_telegram_topic_meta",
]
