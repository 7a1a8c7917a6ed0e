"""v16: tag delegate sub-agent sessions (data only).

Upstream schema version 16, shipped in hermes-agent 0.17.0.

Delegate (sub-agent) runs are child sessions that pickers must hide and parent deletes
must cascade to; from 0.17.0 on, new ones carry ``model_config.$._delegate_from`` from
creation. This step tags the ones written before, with both halves of upstream's rule
as current main runs it:

1. a child session (``parent_session_id`` set) without the marker that is neither a
   branch child (``$._branched_from``, or parent ended ``branched`` before the child
   started), nor a compression continuation (parent ended ``compression``), nor a reset
   continuation (``$._reset_from``, or parent ended at a reset boundary and both share the
   same non-empty ``session_key``) gets ``$._delegate_from = parent_session_id``;
2. a root session without marker, branch marker or title, with at most 25 messages, at
   least one tool message and no children gets ``$._delegate_from = '__orphaned__'``
   (a delegate whose parent link was cut by an old parent delete).

Every JSON read is ``json_valid``-guarded; a row whose ``model_config`` is malformed or
not a JSON object is left alone (``json_set`` would fail on it or not tag it).

Downgrade rule: we give back exactly what we changed and nothing else. The rows tagged
here are recorded in ``state_meta['hermes_store.v16_delegate_tags']`` (session id ->
marker and the original ``model_config`` text; the key is written only when a row was
tagged). The downgrade restores the original text where the row still holds exactly what
we wrote, removes just the marker where the row changed since, and leaves alone any row
whose marker no longer is ours - so markers upstream code set itself are never removed.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from hermes_store.migrations import helpers

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

RECORD_KEY = "hermes_store.v16_delegate_tags"
ORPHAN_MARKER = "__orphaned__"
#: parent end reasons after which a same-key child is a reset continuation, not a delegate
RESET_END_REASONS = (
    "session_reset",
    "session_switch",
    "idle",
    "daily",
    "suspended",
    "resume_pending_expired",
)
#: a root session with more messages than this is a real conversation, not a lost delegate
ORPHAN_MAX_MESSAGES = 25

_SCRATCH = "temp.hermes_v16_tagged"


def _cfg(alias: str) -> str:
    """model_config as a JSON object that json_extract can always read."""
    col = f"{alias}.model_config"
    return f"(CASE WHEN json_valid({col}) THEN {col} ELSE '{{}}' END)"


def _marker(alias: str, key: str) -> str:
    return f"json_extract({_cfg(alias)}, '$.{key}')"


def _taggable(alias: str) -> str:
    col = f"{alias}.model_config"
    return (
        f"({col} IS NULL OR (CASE WHEN json_valid({col}) THEN json_type({col}) END) = 'object')"
        f" AND {_marker(alias, '_delegate_from')} IS NULL"
    )


def _delegate_children_sql(has_session_key: bool) -> str:
    reasons = ", ".join(f"'{r}'" for r in RESET_END_REASONS)
    reset_by_key = (
        " OR EXISTS (SELECT 1 FROM sessions p WHERE p.id = s.parent_session_id"
        f" AND p.end_reason IN ({reasons})"
        " AND s.session_key IS NOT NULL AND s.session_key <> ''"
        " AND s.session_key = p.session_key)"
    ) if has_session_key else ""  # before v17 there is no session_key to compare
    return f"""
        SELECT s.id, s.parent_session_id, s.model_config
        FROM sessions AS s
        WHERE s.parent_session_id IS NOT NULL
          AND {_taggable('s')}
          AND NOT ({_marker('s', '_branched_from')} IS NOT NULL
                   OR EXISTS (SELECT 1 FROM sessions p WHERE p.id = s.parent_session_id
                              AND p.end_reason = 'branched' AND s.started_at >= p.ended_at))
          AND NOT EXISTS (SELECT 1 FROM sessions p WHERE p.id = s.parent_session_id
                          AND p.end_reason = 'compression')
          AND NOT ({_marker('s', '_reset_from')} IS NOT NULL{reset_by_key})
    """


_ORPHANED_ROOTS_SQL = f"""
    SELECT s.id, '{ORPHAN_MARKER}', s.model_config
    FROM sessions AS s
    WHERE s.parent_session_id IS NULL
      AND {_taggable('s')}
      AND {_marker('s', '_branched_from')} IS NULL
      AND s.title IS NULL
      AND s.message_count <= {ORPHAN_MAX_MESSAGES}
      AND EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id AND m.role = 'tool')
      AND NOT EXISTS (SELECT 1 FROM sessions ch WHERE ch.parent_session_id = s.id)
"""


def _execute(sql: str, **params):
    return op.get_bind().execute(sa.text(sql), params)


def _scratch_table() -> None:
    _execute(f"DROP TABLE IF EXISTS {_SCRATCH}")
    _execute(f"CREATE TABLE {_SCRATCH} (id TEXT PRIMARY KEY, marker TEXT NOT NULL, original TEXT)")


def upgrade() -> None:
    _scratch_table()
    # Both candidate sets are computed before any row changes, as upstream's two
    # UPDATEs see them (a tagged child never qualifies as an orphaned root).
    _execute(f"INSERT OR IGNORE INTO {_SCRATCH} (id, marker, original) "
             f"{_delegate_children_sql(helpers.has_column('sessions', 'session_key'))}")
    _execute(f"INSERT OR IGNORE INTO {_SCRATCH} (id, marker, original) {_ORPHANED_ROOTS_SQL}")
    tagged = _execute(f"SELECT COUNT(*) FROM {_SCRATCH}").scalar()
    if tagged:
        _execute(f"""
            UPDATE sessions
            SET model_config = json_set(COALESCE(model_config, '{{}}'), '$._delegate_from',
                                        (SELECT t.marker FROM {_SCRATCH} t WHERE t.id = sessions.id))
            WHERE id IN (SELECT id FROM {_SCRATCH})
        """)
        record = _execute(f"""
            SELECT json_group_object(id, json_object('marker', marker, 'original', original))
            FROM {_SCRATCH}
        """).scalar()
        previous = _execute("SELECT value FROM state_meta WHERE key = :k", k=RECORD_KEY).scalar()
        if previous:
            record = _execute("SELECT json_patch(:old, :new)", old=previous, new=record).scalar()
        _execute("INSERT OR REPLACE INTO state_meta (key, value) VALUES (:k, :v)", k=RECORD_KEY, v=record)
    _execute(f"DROP TABLE {_SCRATCH}")


def downgrade() -> None:
    record = _execute("SELECT value FROM state_meta WHERE key = :k", k=RECORD_KEY).scalar()
    if record is None:
        return
    _scratch_table()
    _execute(f"""
        INSERT INTO {_SCRATCH} (id, marker, original)
        SELECT j.key, json_extract(j.value, '$.marker'), json_extract(j.value, '$.original')
        FROM json_each(:rec) AS j
    """, rec=record)
    ours = (
        f"json_valid(sessions.model_config)"
        f" AND json_extract(sessions.model_config, '$._delegate_from')"
        f"     IS (SELECT t.marker FROM {_SCRATCH} t WHERE t.id = sessions.id)"
    )
    # Untouched since we tagged it: the original text comes back byte for byte.
    _execute(f"""
        UPDATE sessions
        SET model_config = (SELECT t.original FROM {_SCRATCH} t WHERE t.id = sessions.id)
        WHERE id IN (SELECT id FROM {_SCRATCH})
          AND model_config IS (SELECT json_set(COALESCE(t.original, '{{}}'), '$._delegate_from', t.marker)
                               FROM {_SCRATCH} t WHERE t.id = sessions.id)
    """)
    # Changed since (other keys written by newer code): take back only our marker.
    _execute(f"""
        UPDATE sessions
        SET model_config = json_remove(model_config, '$._delegate_from')
        WHERE id IN (SELECT id FROM {_SCRATCH}) AND {ours}
    """)
    _execute(f"DROP TABLE {_SCRATCH}")
    _execute("DELETE FROM state_meta WHERE key = :k", k=RECORD_KEY)
