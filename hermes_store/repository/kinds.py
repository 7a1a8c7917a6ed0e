"""What kind of child a session is, as SQL predicates (one definition per kind), and
what its end reason means.

A child session carries ``parent_session_id``; what it *is* depends on markers:

* **compression continuation** — its parent ended with ``end_reason='compression'``;
* **branch** — ``model_config._branched_from`` is set, or (legacy rows) its parent
  ended ``'branched'`` before the child started;
* **delegate / sub-agent run** — ``model_config._delegate_from`` is set.

Every function takes the table (or alias) the predicate is about, so the same rule
serves listings, counts, tip walks, archive and delete. Predicates are immutable, so the
ones that build an alias of ``sessions`` (60 column proxies, the bulk of a listing's
Python time) are built once per table and reused.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

import sqlalchemy as sa

from .. import schema
from ..backends.base import backend_of
from ..sql.constructs import json_text

COMPRESSION = "compression"
BRANCHED = "branched"
#: end reasons of accidental closes (old gateway cleanup, a dashboard viewer leaving):
#: recovery may reopen such a session and a reset may overwrite the reason
RECOVERABLE_END_REASONS = ("agent_close", "ws_orphan_reap")


def delegate_from(s) -> sa.ColumnElement:
    """The session a delegate run was spawned from (NULL for non-delegates)."""
    return json_text(s.c.model_config, "_delegate_from")


def branched_from(s) -> sa.ColumnElement:
    return json_text(s.c.model_config, "_branched_from")


@lru_cache(maxsize=32)
def is_branch_child(s) -> sa.ColumnElement:
    parent = schema.sessions.alias("branch_parent")
    legacy = sa.exists().where(
        parent.c.id == s.c.parent_session_id,
        parent.c.end_reason == BRANCHED,
        s.c.started_at >= parent.c.ended_at,
    )
    return sa.or_(branched_from(s).is_not(None), legacy)


@lru_cache(maxsize=32)
def is_listable(s) -> sa.ColumnElement:
    """Rows a session picker shows: roots and branches, never delegate runs."""
    return sa.and_(
        sa.or_(s.c.parent_session_id.is_(None), is_branch_child(s)),
        delegate_from(s).is_(None),
    )


@lru_cache(maxsize=32)
def is_continuation_candidate(child) -> sa.ColumnElement:
    """A child that may continue its compression-ended parent (not a branch,
    delegate run or tool session)."""
    return sa.and_(
        branched_from(child).is_(None),
        delegate_from(child).is_(None),
        sa.func.coalesce(child.c.source, "") != "tool",
    )


def update_scoped(conn: sa.Connection, session_id: str,
                  change: Callable[[sa.Connection], object]) -> None:
    """Run ``change(conn)``, an UPDATE that may change the session's ``source`` or
    ``model_config`` (and with them whether it is a delegate run, out of the substring
    index), with the index kept in step (``Backend.substring_scope``: SQLite's index
    triggers are on ``messages`` only)."""
    backend = backend_of(conn)
    before = backend.substring_scope(conn, session_id)
    change(conn)
    backend.rescope_substring_index(conn, session_id, before)

