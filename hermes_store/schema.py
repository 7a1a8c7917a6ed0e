"""The head schema (v30) of ``state.db`` as SQLAlchemy Core: every ordinary table.

This module is the single source of truth for tables, columns, keys and indexes at head.
Full-text search (FTS5 tables, their views and triggers) lives in ``hermes_store.fts``;
the display-order triggers in ``hermes_store.display_order``. Revisions never import this
module (decision D3): they carry their own DDL as of their version.

Public names:

* ``metadata`` — the ``MetaData`` holding every table below;
* one ``Table`` per table: ``schema_version``, ``system_prompts``, ``sessions``,
  ``messages``, ``session_model_usage``, ``state_meta``, ``gateway_routing``,
  ``gateway_hygiene_state``, ``conversation_generations``, ``gateway_heartbeats``,
  ``compression_locks``, ``session_turn_leases``, ``async_delegations``,
  ``delivery_obligations``;
* ``SCHEMA_VERSION`` — the ``schema_version`` value a head file carries (30);
* ``VISIBLE_MESSAGE`` — the "row is shown in the transcript" predicate on ``messages``.

The DDL that ``metadata.create_all`` renders on SQLite matches what upstream Hermes
writes (checked against ``tests/data/head-v30-reference.schema.json``), including what
``PRAGMA table_info`` reports, hence some deliberate choices:

* single-column primary keys are declared ``nullable=True``: upstream writes
  ``id TEXT PRIMARY KEY`` without ``NOT NULL`` and SQLite reports such a column as
  nullable (a composite key's columns are declared NOT NULL upstream, so they are here);
* ``sa.REAL`` rather than ``sa.Float`` so that SQLite stores the declared type ``REAL``
  (``REAL``/``INTEGER`` below: 64-bit on PostgreSQL too, as SQLite's are);
* defaults are ``server_default=sa.text(...)`` with upstream's literal spelling;
* columns are listed in upstream's order (a fresh upstream file's ``position``).

``delivery_obligations`` is created lazily by upstream's gateway and versioned outside
``schema_version``; it is part of the head file all the same.
"""

from __future__ import annotations

import sqlalchemy as sa

#: the upstream schema version a head file is stamped with (``schema_version.version``)
SCHEMA_VERSION = 30

metadata = sa.MetaData()

# SQLite's INTEGER and REAL are 64-bit; PostgreSQL spells those BIGINT and DOUBLE
# PRECISION (its INTEGER and REAL are 32-bit: token counters would overflow and
# timestamps lose their sub-second part). The variants leave SQLite's DDL as it is.
INTEGER = sa.Integer().with_variant(sa.BigInteger(), "postgresql")
REAL = sa.REAL().with_variant(sa.Double(), "postgresql")

_ZERO = sa.text("0")
_ONE = sa.text("1")
_EMPTY = sa.text("''")


def _text_key(name: str) -> sa.Column:
    """A single TEXT primary key, nullable as upstream declares it (see module docstring)."""
    return sa.Column(name, sa.Text, primary_key=True, nullable=True)


def _counter(name: str, *, nullable: bool = False) -> sa.Column:
    """An INTEGER counter/flag defaulting to 0 (NOT NULL unless upstream left it nullable)."""
    return sa.Column(name, INTEGER, nullable=nullable, server_default=_ZERO)


schema_version = sa.Table(
    "schema_version",
    metadata,
    # One row by convention (upstream reads LIMIT 1 and updates all rows); no key.
    sa.Column("version", INTEGER, nullable=False),
)

system_prompts = sa.Table(
    "system_prompts",
    metadata,
    _text_key("hash"),  # sha256 hex of the prompt text (v25 de-duplication)
    sa.Column("prompt", sa.Text, nullable=False),
)

sessions = sa.Table(
    "sessions",
    metadata,
    _text_key("id"),
    sa.Column("source", sa.Text, nullable=False),
    sa.Column("created_source", sa.Text),
    sa.Column("user_id", sa.Text),
    sa.Column("session_key", sa.Text),
    sa.Column("chat_id", sa.Text),
    sa.Column("chat_type", sa.Text),
    sa.Column("thread_id", sa.Text),
    sa.Column("display_name", sa.Text),
    sa.Column("origin_json", sa.Text),
    _counter("expiry_finalized", nullable=True),
    sa.Column("model", sa.Text),
    # JSON text; markers read by queries: _delegate_from, _branched_from, _reset_from
    sa.Column("model_config", sa.Text),
    # Inline prompt of files not yet de-duplicated (v25 moved prompts to system_prompts)
    sa.Column("system_prompt", sa.Text),
    sa.Column("system_prompt_hash", sa.Text, sa.ForeignKey("system_prompts.hash")),
    sa.Column("parent_session_id", sa.Text, sa.ForeignKey("sessions.id")),
    sa.Column("started_at", REAL, nullable=False),
    sa.Column("ended_at", REAL),
    sa.Column("end_reason", sa.Text),
    _counter("message_count", nullable=True),
    _counter("tool_call_count", nullable=True),
    _counter("input_tokens", nullable=True),
    _counter("output_tokens", nullable=True),
    _counter("cache_read_tokens", nullable=True),
    _counter("cache_write_tokens", nullable=True),
    _counter("reasoning_tokens", nullable=True),
    sa.Column("cwd", sa.Text),
    sa.Column("git_branch", sa.Text),
    sa.Column("git_repo_root", sa.Text),
    _counter("git_metadata_generation"),
    sa.Column("billing_provider", sa.Text),
    sa.Column("billing_base_url", sa.Text),
    sa.Column("billing_mode", sa.Text),
    sa.Column("estimated_cost_usd", REAL),
    sa.Column("actual_cost_usd", REAL),
    sa.Column("cost_status", sa.Text),
    sa.Column("cost_source", sa.Text),
    sa.Column("pricing_version", sa.Text),
    sa.Column("title", sa.Text),
    sa.Column("title_source", sa.Text),
    sa.Column("last_activity_at", REAL),
    sa.Column("last_activity_description", sa.Text),
    sa.Column("last_activity_provenance", sa.Text),
    _counter("api_call_count", nullable=True),
    sa.Column("handoff_state", sa.Text),
    sa.Column("handoff_platform", sa.Text),
    sa.Column("handoff_error", sa.Text),
    sa.Column("compression_failure_cooldown_until", REAL),
    sa.Column("compression_failure_error", sa.Text),
    _counter("compression_fallback_streak"),
    _counter("compression_ineffective_count"),
    sa.Column("compression_recovery_deadline", REAL),
    _counter("compression_overload_streak"),
    sa.Column("profile_name", sa.Text),
    sa.Column("transport_profile", sa.Text),
    _counter("rewind_count"),
    _counter("archived"),
    _counter("pinned"),
    _counter("hidden"),
    sa.Column("last_read_at", REAL),
    sa.Column("tool_names", sa.Text),
)

messages = sa.Table(
    "messages",
    metadata,
    # AUTOINCREMENT: ids are never reused, which external-content FTS rowids rely on.
    sa.Column("id", INTEGER, primary_key=True, nullable=True),
    sa.Column("session_id", sa.Text, sa.ForeignKey("sessions.id"), nullable=False),
    sa.Column("role", sa.Text, nullable=False),
    # Text; list/dict content is stored as "\x00json:" + JSON by the repository.
    sa.Column("content", sa.Text),
    sa.Column("tool_call_id", sa.Text),
    sa.Column("tool_calls", sa.Text),
    sa.Column("tool_name", sa.Text),
    sa.Column("effect_disposition", sa.Text),
    sa.Column("timestamp", REAL, nullable=False),
    sa.Column("token_count", INTEGER),
    sa.Column("finish_reason", sa.Text),
    sa.Column("reasoning", sa.Text),
    sa.Column("reasoning_content", sa.Text),
    sa.Column("reasoning_details", sa.Text),
    sa.Column("codex_reasoning_items", sa.Text),
    sa.Column("codex_message_items", sa.Text),
    sa.Column("platform_message_id", sa.Text),
    _counter("observed", nullable=True),
    _counter("_compressed_summary"),
    # 0 = soft-deleted by rewind/undo
    sa.Column("active", INTEGER, nullable=False, server_default=_ONE),
    _counter("compacted"),
    sa.Column("api_content", sa.Text),
    sa.Column("display_kind", sa.Text),
    sa.Column("display_metadata", sa.Text),
    # Maintained by the display-order triggers (hermes_store.display_order)
    sa.Column("display_identity", sa.LargeBinary),
    sa.Column("display_order", INTEGER),
    sqlite_autoincrement=True,
)

session_model_usage = sa.Table(
    "session_model_usage",
    metadata,
    sa.Column(
        "session_id",
        sa.Text,
        sa.ForeignKey("sessions.id", ondelete="CASCADE"),
        primary_key=True,
        nullable=False,
    ),
    sa.Column("model", sa.Text, primary_key=True, nullable=False),
    sa.Column("billing_provider", sa.Text, primary_key=True, nullable=False, server_default=_EMPTY),
    sa.Column("billing_base_url", sa.Text, primary_key=True, nullable=False, server_default=_EMPTY),
    sa.Column("billing_mode", sa.Text, primary_key=True, nullable=False, server_default=_EMPTY),
    # '' = the main loop; 'vision', 'compression', 'title_generation', ... = auxiliary calls
    sa.Column("task", sa.Text, primary_key=True, nullable=False, server_default=_EMPTY),
    _counter("api_call_count"),
    _counter("input_tokens"),
    _counter("output_tokens"),
    _counter("cache_read_tokens"),
    _counter("cache_write_tokens"),
    _counter("reasoning_tokens"),
    sa.Column("estimated_cost_usd", REAL, nullable=False, server_default=_ZERO),
    sa.Column("actual_cost_usd", REAL, nullable=False, server_default=_ZERO),
    sa.Column("cost_status", sa.Text),
    sa.Column("cost_source", sa.Text),
    sa.Column("first_seen", REAL),
    sa.Column("last_seen", REAL),
)

state_meta = sa.Table(
    "state_meta",
    metadata,
    _text_key("key"),
    sa.Column("value", sa.Text),
)
#: ``state_meta`` key of a SQLite file's own identity (``backends/sqlite/files/stamp.py``):
#: every file has its own, so it is never copied from one database to another
FILE_IDENTITY_KEY = "file_identity"

gateway_routing = sa.Table(
    "gateway_routing",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True, nullable=False, server_default=_EMPTY),
    sa.Column("session_key", sa.Text, primary_key=True, nullable=False),
    sa.Column("entry_json", sa.Text, nullable=False),
    sa.Column("updated_at", REAL, nullable=False),
)

gateway_hygiene_state = sa.Table(
    "gateway_hygiene_state",
    metadata,
    _text_key("session_key"),
    _counter("failure_streak"),
)

conversation_generations = sa.Table(
    "conversation_generations",
    metadata,
    # Never pruned by design: a generation must not restart at 0 for a reused key.
    sa.Column("source", sa.Text, primary_key=True, nullable=False),
    sa.Column("session_key", sa.Text, primary_key=True, nullable=False),
    _counter("generation"),
)

gateway_heartbeats = sa.Table(
    "gateway_heartbeats",
    metadata,
    _text_key("backend_id"),
    sa.Column("pid", INTEGER, nullable=False),
    sa.Column("started_at", REAL, nullable=False),
    sa.Column("last_heartbeat", REAL, nullable=False),
    sa.Column("profile", sa.Text, nullable=False, server_default=_EMPTY),
    sa.Column("host", sa.Text, nullable=False, server_default=_EMPTY),
)

compression_locks = sa.Table(
    "compression_locks",
    metadata,
    _text_key("session_id"),
    sa.Column("holder", sa.Text, nullable=False),
    sa.Column("acquired_at", REAL, nullable=False),
    sa.Column("expires_at", REAL, nullable=False),
)

session_turn_leases = sa.Table(
    "session_turn_leases",
    metadata,
    _text_key("conversation_id"),
    sa.Column("holder", sa.Text, nullable=False),
    sa.Column("acquired_at", REAL, nullable=False),
    sa.Column("expires_at", REAL, nullable=False),
)

async_delegations = sa.Table(
    "async_delegations",
    metadata,
    _text_key("delegation_id"),
    sa.Column("origin_session", sa.Text, nullable=False),
    sa.Column("origin_ui_session_id", sa.Text, nullable=False, server_default=_EMPTY),
    sa.Column("parent_session_id", sa.Text),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("dispatched_at", REAL, nullable=False),
    sa.Column("completed_at", REAL),
    sa.Column("updated_at", REAL, nullable=False),
    sa.Column("event_json", sa.Text),
    sa.Column("result_json", sa.Text),
    sa.Column("delivery_state", sa.Text, nullable=False, server_default=sa.text("'pending'")),
    _counter("delivery_attempts"),
    sa.Column("delivered_at", REAL),
    sa.Column("owner_pid", INTEGER),
    sa.Column("owner_started_at", INTEGER),
    sa.Column("task_json", sa.Text),
    sa.Column("delivery_claim", sa.Text),
    sa.Column("delivery_claimed_at", REAL),
    sa.Column("origin_session_id", sa.Text, nullable=False, server_default=_EMPTY),
)

delivery_obligations = sa.Table(
    "delivery_obligations",
    metadata,
    _text_key("obligation_id"),
    sa.Column("session_key", sa.Text, nullable=False),
    sa.Column("platform", sa.Text, nullable=False),
    sa.Column("chat_id", sa.Text, nullable=False),
    sa.Column("thread_id", sa.Text),
    sa.Column("content", sa.Text, nullable=False),
    # pending / attempting / delivered / failed / abandoned
    sa.Column("state", sa.Text, nullable=False),
    _counter("attempts"),
    sa.Column("created_at", REAL, nullable=False),
    sa.Column("updated_at", REAL, nullable=False),
    sa.Column("owner_pid", INTEGER),
    sa.Column("owner_started_at", INTEGER),
    sa.Column("last_error", sa.Text),
    sa.Column("adapter_profile", sa.Text),
    _counter("delivery_fence"),
    sa.Column("owner_installation_id", sa.Text),
    sa.Column("owner_host", sa.Text),
    sa.Column("owner_generation", sa.Text),
    sa.Column("lease_expires_at", REAL),
)


# --------------------------------------------------------------------------- indexes


def _partial(where) -> dict:
    """A partial index's predicate, written once as SQLite's dialect option. Every
    other engine's backend gives its indexes the same predicate when it loads
    (:func:`partial_predicates`): a ``postgresql_where`` here would load SQLAlchemy's
    PostgreSQL dialect in every process, SQLite's included (its argument check imports
    the dialect; its cost: docs/performance.md, "Start-up")."""
    return {"sqlite_where": where}


def partial_predicates(metadata: sa.MetaData) -> list[tuple[sa.Index, sa.ColumnElement]]:
    """(index, predicate) of every partial index of ``metadata``."""
    found = []
    for table in metadata.tables.values():
        for index in table.indexes:
            where = index.dialect_options["sqlite"]["where"]
            if where is not None:
                found.append((index, where))
    return found


_s, _m = sessions.c, messages.c

#: a message shown in the transcript: live, or folded into a compaction summary
VISIBLE_MESSAGE = sa.or_(_m.active == 1, _m.compacted == 1)

sa.Index("idx_sessions_source", _s.source)
sa.Index("idx_sessions_source_id", _s.source, _s.id)
sa.Index("idx_sessions_parent", _s.parent_session_id)
sa.Index("idx_sessions_started", _s.started_at.desc())
sa.Index("idx_sessions_session_key", _s.session_key, _s.started_at.desc())
sa.Index(
    "idx_sessions_gateway_peer",
    _s.source, _s.user_id, _s.chat_id, _s.chat_type, _s.thread_id, _s.started_at.desc(),
)
sa.Index("idx_sessions_handoff_state", _s.handoff_state, _s.started_at)
sa.Index("idx_sessions_system_prompt_hash", _s.system_prompt_hash)
sa.Index("idx_sessions_tool_names", _s.tool_names)
# Serves "most recently active first" listings without a sort.
sa.Index(
    "idx_sessions_effective_activity",
    sa.func.coalesce(_s.last_activity_at, _s.started_at).desc(),
    _s.started_at.desc(),
)
sa.Index(
    "idx_sessions_title_unique", _s.title, unique=True, **_partial(_s.title.is_not(None))
)

sa.Index("idx_messages_session", _m.session_id, _m.timestamp)
sa.Index("idx_messages_session_id", _m.session_id, _m.id)
sa.Index("idx_messages_session_active", _m.session_id, _m.active, _m.timestamp)
sa.Index(
    "idx_messages_assistant_calls_by_session",
    _m.session_id,
    **_partial(sa.and_(_m.role == "assistant", _m.tool_calls.is_not(None))),
)
sa.Index(
    "idx_messages_platform_msg_id",
    _m.session_id, _m.platform_message_id,
    **_partial(_m.platform_message_id.is_not(None)),
)
# Lets the on-open heal of NULL `active` (left by older reconcilers) probe without a scan.
sa.Index("idx_messages_active_null", _m.active, **_partial(_m.active.is_(None)))
sa.Index(
    "idx_messages_display_page",
    _m.session_id, _m.display_order, _m.active.desc(), _m.id.desc(),
    **_partial(VISIBLE_MESSAGE),
)
sa.Index(
    "idx_messages_display_backfill",
    _m.session_id,
    **_partial(
        sa.and_(
            sa.or_(_m.display_order.is_(None), _m.display_identity.is_(None)),
            VISIBLE_MESSAGE,
        )
    ),
)
sa.Index(
    "idx_messages_display_identity",
    _m.session_id, _m.display_identity, _m.display_order,
    **_partial(sa.and_(_m.display_identity.is_not(None), VISIBLE_MESSAGE)),
)

sa.Index("idx_session_model_usage_session", session_model_usage.c.session_id)
sa.Index("idx_session_model_usage_model", session_model_usage.c.model)
sa.Index("idx_compression_locks_expires", compression_locks.c.expires_at)
sa.Index("idx_session_turn_leases_expires", session_turn_leases.c.expires_at)
sa.Index(
    "idx_async_delegations_delivery",
    async_delegations.c.delivery_state, async_delegations.c.completed_at,
)
sa.Index(
    "idx_delivery_obligations_claim",
    delivery_obligations.c.state, delivery_obligations.c.platform,
    delivery_obligations.c.adapter_profile,
)

del _s, _m

__all__ = [
    "SCHEMA_VERSION",
    "VISIBLE_MESSAGE",
    "async_delegations",
    "compression_locks",
    "conversation_generations",
    "delivery_obligations",
    "gateway_heartbeats",
    "gateway_hygiene_state",
    "gateway_routing",
    "messages",
    "metadata",
    "schema_version",
    "session_model_usage",
    "session_turn_leases",
    "sessions",
    "state_meta",
    "system_prompts",
]
