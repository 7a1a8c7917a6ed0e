"""The PostgreSQL baseline: the whole head schema of revision 0030 in one step (D12).

A PostgreSQL database never had SQLite's thirty schema versions, so it does not replay
them: ``migrations/env.py`` runs :func:`create` on an empty database — every statement
below, in one transaction — and stamps ``0030`` in that same transaction. Revisions
0001–0030 never run on PostgreSQL, and a downgrade below ``0030`` is refused. Every
revision after it (``0030a``, ``0031``, …) handles both dialects (``docs/migrations.md``,
"PostgreSQL").

Like every revision, this file is frozen: it holds the DDL *as of schema version 30*
and imports nothing from ``hermes_store.schema`` or ``hermes_store.fts`` (D3). When the
head moves on, the next revision changes both engines; this text stays as it is.
``tests/backends/postgresql/test_migrate.py`` checks that a database built from it and
the revisions after it equals one built from the live definitions
(``backends/postgresql/migrate/create.py``, ``create_head``), and the head-parity test
compares it with SQLite's head.

What it holds: the 14 ordinary tables and their indexes (SQLite's INTEGER and REAL as
BIGINT and DOUBLE PRECISION, which is what they are on SQLite: 64-bit); the full-text
layout (``hermes_store/fts/postgres.py``: a generated ``tsvector`` column with a GIN
index, a ``pg_trgm`` GIN index kept to layout 3's scope by a trigger-maintained flag);
the display-order triggers as PL/pgSQL; and ``schema_version`` = 30.
"""

from __future__ import annotations

#: the revision a PostgreSQL database starts at
REVISION = "0030"
#: the upstream schema version recorded in ``schema_version``
SCHEMA_VERSION = 30

TABLES = [
    # async_delegations
    """CREATE TABLE async_delegations (
    delegation_id TEXT,
    origin_session TEXT NOT NULL,
    origin_ui_session_id TEXT DEFAULT '' NOT NULL,
    parent_session_id TEXT,
    state TEXT NOT NULL,
    dispatched_at DOUBLE PRECISION NOT NULL,
    completed_at DOUBLE PRECISION,
    updated_at DOUBLE PRECISION NOT NULL,
    event_json TEXT,
    result_json TEXT,
    delivery_state TEXT DEFAULT 'pending' NOT NULL,
    delivery_attempts BIGINT DEFAULT 0 NOT NULL,
    delivered_at DOUBLE PRECISION,
    owner_pid BIGINT,
    owner_started_at BIGINT,
    task_json TEXT,
    delivery_claim TEXT,
    delivery_claimed_at DOUBLE PRECISION,
    origin_session_id TEXT DEFAULT '' NOT NULL,
    PRIMARY KEY (delegation_id)
)""",
    # compression_locks
    """CREATE TABLE compression_locks (
    session_id TEXT,
    holder TEXT NOT NULL,
    acquired_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (session_id)
)""",
    # conversation_generations
    """CREATE TABLE conversation_generations (
    source TEXT NOT NULL,
    session_key TEXT NOT NULL,
    generation BIGINT DEFAULT 0 NOT NULL,
    PRIMARY KEY (source, session_key)
)""",
    # delivery_obligations
    """CREATE TABLE delivery_obligations (
    obligation_id TEXT,
    session_key TEXT NOT NULL,
    platform TEXT NOT NULL,
    chat_id TEXT NOT NULL,
    thread_id TEXT,
    content TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts BIGINT DEFAULT 0 NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    owner_pid BIGINT,
    owner_started_at BIGINT,
    last_error TEXT,
    adapter_profile TEXT,
    delivery_fence BIGINT DEFAULT 0 NOT NULL,
    owner_installation_id TEXT,
    owner_host TEXT,
    owner_generation TEXT,
    lease_expires_at DOUBLE PRECISION,
    PRIMARY KEY (obligation_id)
)""",
    # gateway_heartbeats
    """CREATE TABLE gateway_heartbeats (
    backend_id TEXT,
    pid BIGINT NOT NULL,
    started_at DOUBLE PRECISION NOT NULL,
    last_heartbeat DOUBLE PRECISION NOT NULL,
    profile TEXT DEFAULT '' NOT NULL,
    host TEXT DEFAULT '' NOT NULL,
    PRIMARY KEY (backend_id)
)""",
    # gateway_hygiene_state
    """CREATE TABLE gateway_hygiene_state (
    session_key TEXT,
    failure_streak BIGINT DEFAULT 0 NOT NULL,
    PRIMARY KEY (session_key)
)""",
    # gateway_routing
    """CREATE TABLE gateway_routing (
    scope TEXT DEFAULT '' NOT NULL,
    session_key TEXT NOT NULL,
    entry_json TEXT NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (scope, session_key)
)""",
    # schema_version
    """CREATE TABLE schema_version (
    version BIGINT NOT NULL
)""",
    # session_turn_leases
    """CREATE TABLE session_turn_leases (
    conversation_id TEXT,
    holder TEXT NOT NULL,
    acquired_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (conversation_id)
)""",
    # state_meta
    """CREATE TABLE state_meta (
    key TEXT,
    value TEXT,
    PRIMARY KEY (key)
)""",
    # system_prompts
    """CREATE TABLE system_prompts (
    hash TEXT,
    prompt TEXT NOT NULL,
    PRIMARY KEY (hash)
)""",
    # sessions
    """CREATE TABLE sessions (
    id TEXT,
    source TEXT NOT NULL,
    created_source TEXT,
    user_id TEXT,
    session_key TEXT,
    chat_id TEXT,
    chat_type TEXT,
    thread_id TEXT,
    display_name TEXT,
    origin_json TEXT,
    expiry_finalized BIGINT DEFAULT 0,
    model TEXT,
    model_config TEXT,
    system_prompt TEXT,
    system_prompt_hash TEXT,
    parent_session_id TEXT,
    started_at DOUBLE PRECISION NOT NULL,
    ended_at DOUBLE PRECISION,
    end_reason TEXT,
    message_count BIGINT DEFAULT 0,
    tool_call_count BIGINT DEFAULT 0,
    input_tokens BIGINT DEFAULT 0,
    output_tokens BIGINT DEFAULT 0,
    cache_read_tokens BIGINT DEFAULT 0,
    cache_write_tokens BIGINT DEFAULT 0,
    reasoning_tokens BIGINT DEFAULT 0,
    cwd TEXT,
    git_branch TEXT,
    git_repo_root TEXT,
    git_metadata_generation BIGINT DEFAULT 0 NOT NULL,
    billing_provider TEXT,
    billing_base_url TEXT,
    billing_mode TEXT,
    estimated_cost_usd DOUBLE PRECISION,
    actual_cost_usd DOUBLE PRECISION,
    cost_status TEXT,
    cost_source TEXT,
    pricing_version TEXT,
    title TEXT,
    title_source TEXT,
    last_activity_at DOUBLE PRECISION,
    last_activity_description TEXT,
    last_activity_provenance TEXT,
    api_call_count BIGINT DEFAULT 0,
    handoff_state TEXT,
    handoff_platform TEXT,
    handoff_error TEXT,
    compression_failure_cooldown_until DOUBLE PRECISION,
    compression_failure_error TEXT,
    compression_fallback_streak BIGINT DEFAULT 0 NOT NULL,
    compression_ineffective_count BIGINT DEFAULT 0 NOT NULL,
    compression_recovery_deadline DOUBLE PRECISION,
    compression_overload_streak BIGINT DEFAULT 0 NOT NULL,
    profile_name TEXT,
    transport_profile TEXT,
    rewind_count BIGINT DEFAULT 0 NOT NULL,
    archived BIGINT DEFAULT 0 NOT NULL,
    pinned BIGINT DEFAULT 0 NOT NULL,
    hidden BIGINT DEFAULT 0 NOT NULL,
    last_read_at DOUBLE PRECISION,
    tool_names TEXT,
    PRIMARY KEY (id),
    FOREIGN KEY(system_prompt_hash) REFERENCES system_prompts (hash),
    FOREIGN KEY(parent_session_id) REFERENCES sessions (id)
)""",
    # messages
    """CREATE TABLE messages (
    id BIGSERIAL,
    session_id TEXT NOT NULL,
    role TEXT NOT NULL,
    content TEXT,
    tool_call_id TEXT,
    tool_calls TEXT,
    tool_name TEXT,
    effect_disposition TEXT,
    timestamp DOUBLE PRECISION NOT NULL,
    token_count BIGINT,
    finish_reason TEXT,
    reasoning TEXT,
    reasoning_content TEXT,
    reasoning_details TEXT,
    codex_reasoning_items TEXT,
    codex_message_items TEXT,
    platform_message_id TEXT,
    observed BIGINT DEFAULT 0,
    _compressed_summary BIGINT DEFAULT 0 NOT NULL,
    active BIGINT DEFAULT 1 NOT NULL,
    compacted BIGINT DEFAULT 0 NOT NULL,
    api_content TEXT,
    display_kind TEXT,
    display_metadata TEXT,
    display_identity BYTEA,
    display_order BIGINT,
    PRIMARY KEY (id),
    FOREIGN KEY(session_id) REFERENCES sessions (id)
)""",
    # session_model_usage
    """CREATE TABLE session_model_usage (
    session_id TEXT NOT NULL,
    model TEXT NOT NULL,
    billing_provider TEXT DEFAULT '' NOT NULL,
    billing_base_url TEXT DEFAULT '' NOT NULL,
    billing_mode TEXT DEFAULT '' NOT NULL,
    task TEXT DEFAULT '' NOT NULL,
    api_call_count BIGINT DEFAULT 0 NOT NULL,
    input_tokens BIGINT DEFAULT 0 NOT NULL,
    output_tokens BIGINT DEFAULT 0 NOT NULL,
    cache_read_tokens BIGINT DEFAULT 0 NOT NULL,
    cache_write_tokens BIGINT DEFAULT 0 NOT NULL,
    reasoning_tokens BIGINT DEFAULT 0 NOT NULL,
    estimated_cost_usd DOUBLE PRECISION DEFAULT 0 NOT NULL,
    actual_cost_usd DOUBLE PRECISION DEFAULT 0 NOT NULL,
    cost_status TEXT,
    cost_source TEXT,
    first_seen DOUBLE PRECISION,
    last_seen DOUBLE PRECISION,
    PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode, task),
    FOREIGN KEY(session_id) REFERENCES sessions (id) ON DELETE CASCADE
)""",
]

INDEXES = [
    # idx_async_delegations_delivery
    """CREATE INDEX idx_async_delegations_delivery ON async_delegations (delivery_state, completed_at)""",
    # idx_compression_locks_expires
    """CREATE INDEX idx_compression_locks_expires ON compression_locks (expires_at)""",
    # idx_delivery_obligations_claim
    """CREATE INDEX idx_delivery_obligations_claim ON delivery_obligations (state, platform, adapter_profile)""",
    # idx_session_turn_leases_expires
    """CREATE INDEX idx_session_turn_leases_expires ON session_turn_leases (expires_at)""",
    # idx_sessions_effective_activity
    """CREATE INDEX idx_sessions_effective_activity ON sessions (coalesce(last_activity_at, started_at) DESC, started_at DESC)""",
    # idx_sessions_gateway_peer
    """CREATE INDEX idx_sessions_gateway_peer ON sessions (source, user_id, chat_id, chat_type, thread_id, started_at DESC)""",
    # idx_sessions_handoff_state
    """CREATE INDEX idx_sessions_handoff_state ON sessions (handoff_state, started_at)""",
    # idx_sessions_parent
    """CREATE INDEX idx_sessions_parent ON sessions (parent_session_id)""",
    # idx_sessions_session_key
    """CREATE INDEX idx_sessions_session_key ON sessions (session_key, started_at DESC)""",
    # idx_sessions_source
    """CREATE INDEX idx_sessions_source ON sessions (source)""",
    # idx_sessions_source_id
    """CREATE INDEX idx_sessions_source_id ON sessions (source, id)""",
    # idx_sessions_started
    """CREATE INDEX idx_sessions_started ON sessions (started_at DESC)""",
    # idx_sessions_system_prompt_hash
    """CREATE INDEX idx_sessions_system_prompt_hash ON sessions (system_prompt_hash)""",
    # idx_sessions_title_unique
    """CREATE UNIQUE INDEX idx_sessions_title_unique ON sessions (title) WHERE title IS NOT NULL""",
    # idx_sessions_tool_names
    """CREATE INDEX idx_sessions_tool_names ON sessions (tool_names)""",
    # idx_messages_active_null
    """CREATE INDEX idx_messages_active_null ON messages (active) WHERE active IS NULL""",
    # idx_messages_assistant_calls_by_session
    """CREATE INDEX idx_messages_assistant_calls_by_session ON messages (session_id) WHERE role = 'assistant' AND tool_calls IS NOT NULL""",
    # idx_messages_display_backfill
    """CREATE INDEX idx_messages_display_backfill ON messages (session_id) WHERE (display_order IS NULL OR display_identity IS NULL) AND (active = 1 OR compacted = 1)""",
    # idx_messages_display_identity
    """CREATE INDEX idx_messages_display_identity ON messages (session_id, display_identity, display_order) WHERE display_identity IS NOT NULL AND (active = 1 OR compacted = 1)""",
    # idx_messages_display_page
    """CREATE INDEX idx_messages_display_page ON messages (session_id, display_order, active DESC, id DESC) WHERE active = 1 OR compacted = 1""",
    # idx_messages_platform_msg_id
    """CREATE INDEX idx_messages_platform_msg_id ON messages (session_id, platform_message_id) WHERE platform_message_id IS NOT NULL""",
    # idx_messages_session
    """CREATE INDEX idx_messages_session ON messages (session_id, timestamp)""",
    # idx_messages_session_active
    """CREATE INDEX idx_messages_session_active ON messages (session_id, active, timestamp)""",
    # idx_messages_session_id
    """CREATE INDEX idx_messages_session_id ON messages (session_id, id)""",
    # idx_session_model_usage_model
    """CREATE INDEX idx_session_model_usage_model ON session_model_usage (model)""",
    # idx_session_model_usage_session
    """CREATE INDEX idx_session_model_usage_session ON session_model_usage (session_id)""",
]

FULL_TEXT = [
    # extension
    """CREATE EXTENSION IF NOT EXISTS pg_trgm""",
    # hermes_fts_vector
    """CREATE OR REPLACE FUNCTION hermes_fts_vector(doc text) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    words text := regexp_replace(doc, '[^[:alnum:]]+', ' ', 'g');
    n integer;
BEGIN
    IF octet_length(words) <= 131072 THEN
        RETURN to_tsvector('simple'::regconfig, words);
    END IF;
    n := length(words);
    LOOP
        BEGIN
            RETURN to_tsvector('simple'::regconfig, left(words, n));
        EXCEPTION WHEN program_limit_exceeded THEN
            n := n * 3 / 4;  -- longer than a tsvector holds: index the longest prefix that fits
        END;
    END LOOP;
END $$""",
    # hermes_fts_document
    """CREATE OR REPLACE FUNCTION hermes_fts_document(
    role text, content text, tool_name text, tool_calls text
) RETURNS tsvector
LANGUAGE sql IMMUTABLE
RETURN hermes_fts_vector(
    CASE WHEN role = 'tool' THEN left(coalesce(content, ''), 8192)
         ELSE coalesce(content, '') END
    || ' ' || coalesce(tool_name, '') || ' ' || coalesce(tool_calls, ''))""",
    # hermes_trigram_document
    """CREATE OR REPLACE FUNCTION hermes_trigram_document(content text, tool_name text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(content, '') || coalesce(' ' || tool_name, '')
$$""",
    # hermes_json_text
    """CREATE OR REPLACE FUNCTION hermes_json_text(doc text, key text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF doc IS NULL OR strpos(doc, key) = 0 THEN
        RETURN NULL;  -- most rows: no parse at all
    END IF;
    BEGIN
        RETURN (doc::json) ->> key;
    EXCEPTION WHEN others THEN
        RETURN NULL;  -- malformed JSON reads as "no such key", as SQLite's json_valid guard
    END;
END $$""",
    # hermes_trigram_session_ok
    """CREATE OR REPLACE FUNCTION hermes_trigram_session_ok(source text, model_config text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
RETURN source NOT IN ('cron', 'subagent')
   AND hermes_json_text(model_config, '_delegate_from') IS NULL""",
    # hermes_messages_fts_trigram_scope
    """CREATE OR REPLACE FUNCTION hermes_messages_fts_trigram_scope() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.fts_trigram_scope := NEW.role <> 'tool' AND EXISTS (
        SELECT 1 FROM sessions AS s
        WHERE s.id = NEW.session_id AND hermes_trigram_session_ok(s.source, s.model_config));
    RETURN NEW;
END $$""",
    # hermes_sessions_fts_trigram_scope
    """CREATE OR REPLACE FUNCTION hermes_sessions_fts_trigram_scope() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    session_ok boolean := hermes_trigram_session_ok(NEW.source, NEW.model_config);
BEGIN
    UPDATE messages SET fts_trigram_scope = (role <> 'tool' AND session_ok)
    WHERE session_id = NEW.id
      AND fts_trigram_scope IS DISTINCT FROM (role <> 'tool' AND session_ok);
    RETURN NULL;
END $$""",
    # fts_document
    """ALTER TABLE messages ADD COLUMN IF NOT EXISTS fts_document tsvector
GENERATED ALWAYS AS (hermes_fts_document(role, content, tool_name, tool_calls)) STORED""",
    # fts_trigram_scope
    """ALTER TABLE messages ADD COLUMN IF NOT EXISTS fts_trigram_scope boolean
NOT NULL DEFAULT false""",
    # messages_fts_trigram_scope
    """CREATE OR REPLACE TRIGGER messages_fts_trigram_scope
BEFORE INSERT OR UPDATE OF role, session_id ON messages
FOR EACH ROW EXECUTE FUNCTION hermes_messages_fts_trigram_scope()""",
    # sessions_fts_trigram_scope
    """CREATE OR REPLACE TRIGGER sessions_fts_trigram_scope
AFTER UPDATE OF source, model_config ON sessions
FOR EACH ROW
WHEN (OLD.source IS DISTINCT FROM NEW.source OR OLD.model_config IS DISTINCT FROM NEW.model_config)
EXECUTE FUNCTION hermes_sessions_fts_trigram_scope()""",
    # messages_fts
    """CREATE INDEX IF NOT EXISTS messages_fts ON messages USING gin (fts_document)""",
    # messages_fts_trigram
    """CREATE INDEX IF NOT EXISTS messages_fts_trigram ON messages
USING gin (hermes_trigram_document(content, tool_name) gin_trgm_ops)
WHERE fts_trigram_scope""",
]

DISPLAY_ORDER = [
    # hermes_display_order_insert
    """CREATE OR REPLACE FUNCTION hermes_display_order_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.display_order := NEW.id;
    IF NEW.display_identity IS NOT NULL THEN  -- NULL has no peers
        NEW.display_order := COALESCE((SELECT display_order FROM messages WHERE session_id = NEW.session_id AND id <> NEW.id AND (active = 1 OR compacted = 1) AND display_identity = NEW.display_identity AND display_order IS NOT NULL ORDER BY display_order LIMIT 1), NEW.id);
    END IF;
    RETURN NEW;
END $$""",
    # hermes_display_visibility_update
    """CREATE OR REPLACE FUNCTION hermes_display_visibility_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.active = 1 OR NEW.compacted = 1) THEN
        UPDATE messages
        SET display_order = least(NEW.id, COALESCE((SELECT display_order FROM messages WHERE session_id = NEW.session_id AND id <> NEW.id AND (active = 1 OR compacted = 1) AND display_identity = NEW.display_identity AND display_order IS NOT NULL ORDER BY display_order LIMIT 1), NEW.id))
        WHERE id = NEW.id;
        UPDATE messages SET display_order = (SELECT display_order FROM messages WHERE id = NEW.id)
        WHERE session_id = NEW.session_id AND id <> NEW.id AND (active = 1 OR compacted = 1)
          AND display_identity = NEW.display_identity;
    ELSE
        UPDATE messages SET display_order = (SELECT min(peer.id) FROM messages AS peer WHERE peer.session_id = OLD.session_id AND (peer.active = 1 OR peer.compacted = 1) AND peer.display_identity = OLD.display_identity)
        WHERE session_id = OLD.session_id AND (active = 1 OR compacted = 1) AND display_identity = OLD.display_identity;
    END IF;
    RETURN NULL;
END $$""",
    # hermes_display_identity_update
    """CREATE OR REPLACE FUNCTION hermes_display_identity_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE messages SET display_identity = NULL, display_order = NULL
    WHERE id = NEW.id OR (session_id = OLD.session_id
          AND display_identity = OLD.display_identity AND (active = 1 OR compacted = 1));
    RETURN NULL;
END $$""",
    # hermes_display_identity_delete
    """CREATE OR REPLACE FUNCTION hermes_display_identity_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE messages SET display_order = (SELECT min(peer.id) FROM messages AS peer WHERE peer.session_id = OLD.session_id AND (peer.active = 1 OR peer.compacted = 1) AND peer.display_identity = OLD.display_identity)
    WHERE session_id = OLD.session_id AND (active = 1 OR compacted = 1) AND display_identity = OLD.display_identity;
    RETURN NULL;
END $$""",
    # messages_display_order_insert
    """CREATE OR REPLACE TRIGGER messages_display_order_insert BEFORE INSERT ON messages
FOR EACH ROW WHEN (NEW.display_order IS NULL)
EXECUTE FUNCTION hermes_display_order_insert()""",
    # messages_display_visibility_update
    """CREATE OR REPLACE TRIGGER messages_display_visibility_update
AFTER UPDATE OF active, compacted ON messages
FOR EACH ROW WHEN ((NEW.active = 1 OR NEW.compacted = 1) <> (OLD.active = 1 OR OLD.compacted = 1))
EXECUTE FUNCTION hermes_display_visibility_update()""",
    # messages_display_identity_update
    """CREATE OR REPLACE TRIGGER messages_display_identity_update
AFTER UPDATE OF role, content, timestamp, tool_call_id, tool_calls, tool_name, display_kind ON messages
FOR EACH ROW WHEN (NEW.role IS DISTINCT FROM OLD.role OR NEW.content IS DISTINCT FROM OLD.content OR NEW.timestamp IS DISTINCT FROM OLD.timestamp OR NEW.tool_call_id IS DISTINCT FROM OLD.tool_call_id OR NEW.tool_calls IS DISTINCT FROM OLD.tool_calls OR NEW.tool_name IS DISTINCT FROM OLD.tool_name OR NEW.display_kind IS DISTINCT FROM OLD.display_kind)
EXECUTE FUNCTION hermes_display_identity_update()""",
    # messages_display_identity_delete
    """CREATE OR REPLACE TRIGGER messages_display_identity_delete AFTER DELETE ON messages
FOR EACH ROW WHEN ((OLD.active = 1 OR OLD.compacted = 1))
EXECUTE FUNCTION hermes_display_identity_delete()""",
]

STATEMENTS = [*TABLES, *INDEXES, *FULL_TEXT, *DISPLAY_ORDER]


def create(conn) -> None:
    """Create the baseline on an empty database (inside the caller's transaction)."""
    for statement in STATEMENTS:
        conn.exec_driver_sql(statement)
    conn.exec_driver_sql(
        "INSERT INTO schema_version (version) VALUES (%(v)s)", {"v": SCHEMA_VERSION}
    )
