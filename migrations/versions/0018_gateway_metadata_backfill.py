"""v18: gateway metadata on the session row, backfilled from sessions.json.

Upstream schema version 18 (#9006), first released in hermes-agent 0.18.1.

The gateway kept its routing metadata in ``sessions/sessions.json``; from v18 the session
row carries it (``display_name``, ``origin_json``, ``expiry_finalized``) so state.db is
enough to find and label a gateway conversation. The data step copies what
sessions.json knows into the columns that are still NULL, never overwriting a value:
``session_key`` (the entry's, else its dict key), ``chat_id``/``thread_id`` from the
entry's ``origin``, ``chat_type``, ``display_name``, ``origin_json`` (the ``origin``
object as JSON), and ``expiry_finalized = 1`` when the entry says it was finalized or
its memory flushed.

Where sessions.json is looked for: ``<directory of the database>/sessions/sessions.json``.
For the default database that is exactly upstream's ``$HERMES_HOME/sessions/sessions.json``;
for an explicit path (a backup, a copy) it is the sessions.json that belongs to *that*
file, never the live one of another home. The backfill is best effort like upstream's: a
missing file is normal; an unreadable or malformed one, or a malformed entry, is logged
as a warning with the reason and skipped - it never fails the upgrade.

Downgrade drops the three v18 columns. Values the backfill put into the v17 columns
(``session_key``, ``chat_id``, ``chat_type``, ``thread_id``) stay: they are true data
copied from sessions.json that v17 readers understand, and nothing of v17 was taken.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Optional

import sqlalchemy as sa
from alembic import op

from hermes_store.migrations import helpers

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

log = logging.getLogger(__name__)

NEW_COLUMNS = (
    ("display_name", sa.Text, None),
    ("origin_json", sa.Text, None),
    ("expiry_finalized", sa.Integer, sa.text("0")),
)

_FILL_NULLS = sa.text("""
    UPDATE sessions
    SET session_key = COALESCE(session_key, :session_key),
        chat_id = COALESCE(chat_id, :chat_id),
        chat_type = COALESCE(chat_type, :chat_type),
        thread_id = COALESCE(thread_id, :thread_id),
        display_name = COALESCE(display_name, :display_name),
        origin_json = COALESCE(origin_json, :origin_json),
        expiry_finalized = CASE WHEN COALESCE(expiry_finalized, 0) = 0 AND :finalized = 1
                                THEN 1 ELSE expiry_finalized END
    WHERE id = :session_id
""")


def sessions_json_path() -> Optional[Path]:
    """sessions.json beside the database file; None for an in-memory database."""
    for _seq, name, file in op.get_bind().exec_driver_sql("PRAGMA database_list"):
        if name == "main":
            return Path(file).parent / "sessions" / "sessions.json" if file else None
    return None


def _text(value: Any) -> Any:
    """A bindable value: scalars as upstream bound them (TEXT affinity stores them as
    text), anything else as its JSON text rather than failing the whole entry."""
    if value is None or isinstance(value, (str, int, float)):
        return value
    return json.dumps(value)


def _entry_params(key: str, entry: dict) -> Optional[dict]:
    session_id = entry.get("session_id")
    if not session_id:
        return None
    origin = entry.get("origin")
    origin = origin if isinstance(origin, dict) else None
    return {
        "session_id": str(session_id),
        "session_key": _text(entry.get("session_key") or key),
        "chat_id": _text(origin.get("chat_id")) if origin else None,
        "chat_type": _text(entry.get("chat_type")),
        "thread_id": _text(origin.get("thread_id")) if origin else None,
        "display_name": _text(entry.get("display_name")),
        "origin_json": json.dumps(origin) if origin is not None else None,
        "finalized": 1 if entry.get("expiry_finalized") or entry.get("memory_flushed") else 0,
    }


def backfill_from_sessions_json(path: Optional[Path]) -> int:
    """Fill NULL gateway columns from sessions.json; returns the number of entries applied."""
    if path is None or not path.exists():
        return 0
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        log.warning("v18 backfill skipped: cannot read %s (%s); gateway metadata of older "
                    "sessions stays empty until the gateway rewrites it", path, exc)
        return 0
    if not isinstance(data, dict):
        log.warning("v18 backfill skipped: %s holds a %s, not an object of entries",
                    path, type(data).__name__)
        return 0
    bind = op.get_bind()
    applied = skipped = 0
    for key, entry in data.items():
        if str(key).startswith("_"):  # upstream's bookkeeping keys, not sessions
            continue
        params = _entry_params(str(key), entry) if isinstance(entry, dict) else None
        if params is None:
            skipped += 1
            continue
        bind.execute(_FILL_NULLS, params)
        applied += 1
    if skipped:
        log.warning("v18 backfill: %d entr%s of %s had no session_id or were not objects; skipped",
                    skipped, "y" if skipped == 1 else "ies", path)
    return applied


def upgrade() -> None:
    helpers.add_columns(
        "sessions",
        *(sa.Column(name, type_(), server_default=default) for name, type_, default in NEW_COLUMNS),
    )
    backfill_from_sessions_json(sessions_json_path())


def downgrade() -> None:
    helpers.drop_columns("sessions", *(name for name, _type, _default in NEW_COLUMNS))
