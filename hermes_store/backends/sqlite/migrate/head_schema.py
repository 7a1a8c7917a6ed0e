"""The head schema of a SQLite state.db (revision 0030b), as revisions
0001…0030b leave it on an empty file: every CREATE statement exactly as
``sqlite_master`` stores it, in creation order, then the FTS5 'rebuild' the
revisions end with (it writes each empty index's totals record), and the rows the
revisions write.
Replayed by ``hermes_store.backends.sqlite.migrate.create`` to create a new file in one step (D18).

Generated from the stairway; do not edit. After a new revision, regenerate it and
review the diff:
    HERMES_UPDATE_GOLDEN=1 python3 -m pytest tests/migrations/test_new_store.py
"""

# fmt: off
REVISION = '0030b'

STATEMENTS = (
'CREATE TABLE alembic_version (\n\tversion_num VARCHAR(32) NOT NULL, \n\tCONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)\n)',
"""CREATE TABLE schema_version (
            version INTEGER NOT NULL
        )""",
"""CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            source TEXT NOT NULL,
            user_id TEXT,
            model TEXT,
            model_config TEXT,
            system_prompt TEXT,
            parent_session_id TEXT,
            started_at REAL NOT NULL,
            ended_at REAL,
            end_reason TEXT,
            message_count INTEGER DEFAULT 0,
            tool_call_count INTEGER DEFAULT 0,
            input_tokens INTEGER DEFAULT 0,
            output_tokens INTEGER DEFAULT 0, title TEXT, cache_read_tokens INTEGER DEFAULT 0, cache_write_tokens INTEGER DEFAULT 0, reasoning_tokens INTEGER DEFAULT 0, billing_provider TEXT, billing_base_url TEXT, billing_mode TEXT, estimated_cost_usd REAL, actual_cost_usd REAL, cost_status TEXT, cost_source TEXT, pricing_version TEXT, api_call_count INTEGER DEFAULT 0, handoff_state TEXT, handoff_platform TEXT, handoff_error TEXT, cwd TEXT, rewind_count INTEGER DEFAULT 0 NOT NULL, archived INTEGER DEFAULT 0 NOT NULL, session_key TEXT, chat_id TEXT, chat_type TEXT, thread_id TEXT, git_branch TEXT, git_repo_root TEXT, compression_failure_cooldown_until REAL, compression_failure_error TEXT, display_name TEXT, origin_json TEXT, expiry_finalized INTEGER DEFAULT 0, compression_fallback_streak INTEGER DEFAULT 0 NOT NULL, profile_name TEXT, last_activity_at REAL, last_activity_description TEXT, last_activity_provenance TEXT, compression_ineffective_count INTEGER DEFAULT 0 NOT NULL, pinned INTEGER DEFAULT 0 NOT NULL, system_prompt_hash TEXT REFERENCES system_prompts(hash), git_metadata_generation INTEGER DEFAULT 0 NOT NULL, title_source TEXT, compression_recovery_deadline REAL, hidden INTEGER DEFAULT 0 NOT NULL, last_read_at REAL, tool_names TEXT, created_source TEXT, transport_profile TEXT, compression_overload_streak INTEGER DEFAULT 0 NOT NULL,
            FOREIGN KEY (parent_session_id) REFERENCES sessions(id)
        )""",
"""CREATE TABLE messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL REFERENCES sessions(id),
            role TEXT NOT NULL,
            content TEXT,
            tool_call_id TEXT,
            tool_calls TEXT,
            tool_name TEXT,
            timestamp REAL NOT NULL,
            token_count INTEGER
        , finish_reason TEXT, reasoning TEXT, reasoning_details TEXT, codex_reasoning_items TEXT, reasoning_content TEXT, codex_message_items TEXT, active INTEGER DEFAULT 1 NOT NULL, platform_message_id TEXT, observed INTEGER DEFAULT 0, compacted INTEGER DEFAULT 0 NOT NULL, effect_disposition TEXT, api_content TEXT, display_kind TEXT, display_metadata TEXT, _compressed_summary INTEGER DEFAULT 0 NOT NULL, display_identity BLOB, display_order INTEGER)""",
"""CREATE INDEX idx_sessions_source ON sessions(source)""",
"""CREATE INDEX idx_sessions_parent ON sessions(parent_session_id)""",
"""CREATE INDEX idx_sessions_started ON sessions(started_at DESC)""",
"""CREATE INDEX idx_messages_session ON messages(session_id, timestamp)""",
"""CREATE UNIQUE INDEX idx_sessions_title_unique ON sessions(title) WHERE title IS NOT NULL""",
"""CREATE TABLE state_meta (
        key TEXT PRIMARY KEY,
        value TEXT
    )""",
"""CREATE INDEX idx_messages_session_active ON messages(session_id, active, timestamp)""",
"""CREATE INDEX idx_messages_platform_msg_id ON messages(session_id, platform_message_id) WHERE platform_message_id IS NOT NULL""",
"""CREATE TABLE compression_locks (
        session_id TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        acquired_at REAL NOT NULL,
        expires_at REAL NOT NULL
    )""",
"""CREATE INDEX idx_compression_locks_expires ON compression_locks(expires_at)""",
"""CREATE INDEX idx_sessions_source_id ON sessions(source, id)""",
"""CREATE INDEX idx_sessions_session_key ON sessions (session_key, started_at DESC)""",
"""CREATE INDEX idx_sessions_gateway_peer ON sessions (source, user_id, chat_id, chat_type, thread_id, started_at DESC)""",
"""CREATE INDEX idx_sessions_handoff_state ON sessions (handoff_state, started_at)""",
"CREATE TABLE gateway_routing (\n\tscope TEXT DEFAULT '' NOT NULL, \n\tsession_key TEXT NOT NULL, \n\tentry_json TEXT NOT NULL, \n\tupdated_at REAL NOT NULL, \n\tPRIMARY KEY (scope, session_key)\n)",
"""CREATE INDEX idx_messages_active_null ON messages (active) WHERE active IS NULL""",
"CREATE TABLE async_delegations (\n\tdelegation_id TEXT, \n\torigin_session TEXT NOT NULL, \n\torigin_ui_session_id TEXT DEFAULT '' NOT NULL, \n\tparent_session_id TEXT, \n\tstate TEXT NOT NULL, \n\tdispatched_at REAL NOT NULL, \n\tcompleted_at REAL, \n\tupdated_at REAL NOT NULL, \n\tevent_json TEXT, \n\tresult_json TEXT, \n\tdelivery_state TEXT DEFAULT 'pending' NOT NULL, \n\tdelivery_attempts INTEGER DEFAULT 0 NOT NULL, \n\tdelivered_at REAL, \n\towner_pid INTEGER, \n\towner_started_at INTEGER, \n\ttask_json TEXT, \n\tdelivery_claim TEXT, \n\tdelivery_claimed_at REAL, origin_session_id TEXT DEFAULT '' NOT NULL, \n\tPRIMARY KEY (delegation_id)\n)",
"""CREATE INDEX idx_async_delegations_delivery ON async_delegations (delivery_state, completed_at)""",
"CREATE TABLE session_model_usage (\n\tsession_id TEXT NOT NULL, \n\tmodel TEXT NOT NULL, \n\tbilling_provider TEXT DEFAULT '' NOT NULL, \n\tbilling_base_url TEXT DEFAULT '' NOT NULL, \n\tbilling_mode TEXT DEFAULT '' NOT NULL, \n\ttask TEXT DEFAULT '' NOT NULL, \n\tapi_call_count INTEGER DEFAULT 0 NOT NULL, \n\tinput_tokens INTEGER DEFAULT 0 NOT NULL, \n\toutput_tokens INTEGER DEFAULT 0 NOT NULL, \n\tcache_read_tokens INTEGER DEFAULT 0 NOT NULL, \n\tcache_write_tokens INTEGER DEFAULT 0 NOT NULL, \n\treasoning_tokens INTEGER DEFAULT 0 NOT NULL, \n\testimated_cost_usd REAL DEFAULT 0 NOT NULL, \n\tactual_cost_usd REAL DEFAULT 0 NOT NULL, \n\tcost_status TEXT, \n\tcost_source TEXT, \n\tfirst_seen REAL, \n\tlast_seen REAL, \n\tPRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode, task), \n\tFOREIGN KEY(session_id) REFERENCES sessions (id) ON DELETE CASCADE\n)",
"""CREATE INDEX idx_session_model_usage_session ON session_model_usage (session_id)""",
"""CREATE INDEX idx_session_model_usage_model ON session_model_usage (model)""",
"""CREATE INDEX idx_messages_session_id ON messages (session_id, id)""",
'CREATE TABLE system_prompts (\n\thash TEXT, \n\tprompt TEXT NOT NULL, \n\tPRIMARY KEY (hash)\n)',
"""CREATE INDEX idx_sessions_system_prompt_hash ON sessions (system_prompt_hash)""",
"""CREATE INDEX idx_messages_assistant_calls_by_session ON messages (session_id) WHERE role = 'assistant' AND tool_calls IS NOT NULL""",
'CREATE TABLE gateway_hygiene_state (\n\tsession_key TEXT, \n\tfailure_streak INTEGER DEFAULT 0 NOT NULL, \n\tPRIMARY KEY (session_key)\n)',
'CREATE TABLE conversation_generations (\n\tsource TEXT NOT NULL, \n\tsession_key TEXT NOT NULL, \n\tgeneration INTEGER DEFAULT 0 NOT NULL, \n\tPRIMARY KEY (source, session_key)\n)',
"CREATE TABLE gateway_heartbeats (\n\tbackend_id TEXT, \n\tpid INTEGER NOT NULL, \n\tstarted_at REAL NOT NULL, \n\tlast_heartbeat REAL NOT NULL, \n\tprofile TEXT DEFAULT '' NOT NULL, \n\thost TEXT DEFAULT '' NOT NULL, \n\tPRIMARY KEY (backend_id)\n)",
'CREATE TABLE session_turn_leases (\n\tconversation_id TEXT, \n\tholder TEXT NOT NULL, \n\tacquired_at REAL NOT NULL, \n\texpires_at REAL NOT NULL, \n\tPRIMARY KEY (conversation_id)\n)',
"""CREATE INDEX idx_session_turn_leases_expires ON session_turn_leases (expires_at)""",
"""CREATE INDEX idx_messages_display_page ON messages (session_id, display_order, active DESC, id DESC) WHERE active = 1 OR compacted = 1""",
"""CREATE INDEX idx_messages_display_backfill ON messages (session_id) WHERE (display_order IS NULL OR display_identity IS NULL) AND (active = 1 OR compacted = 1)""",
"""CREATE INDEX idx_messages_display_identity ON messages (session_id, display_identity, display_order) WHERE display_identity IS NOT NULL AND (active = 1 OR compacted = 1)""",
"""CREATE INDEX idx_sessions_tool_names ON sessions (tool_names)""",
"""CREATE INDEX idx_sessions_effective_activity ON sessions (COALESCE(last_activity_at, started_at) DESC, started_at DESC)""",
"""CREATE TRIGGER messages_display_order_insert AFTER INSERT ON messages
WHEN new.display_order IS NULL
BEGIN
    UPDATE messages SET display_order = COALESCE((SELECT display_order FROM messages WHERE session_id = new.session_id AND id <> new.id AND (active = 1 OR compacted = 1) AND display_identity = new.display_identity AND display_order IS NOT NULL ORDER BY display_order LIMIT 1), new.id)
    WHERE id = new.id;
END""",
"""CREATE TRIGGER messages_display_visibility_update AFTER UPDATE OF active, compacted ON messages
WHEN (new.active = 1 OR new.compacted = 1) <> (old.active = 1 OR old.compacted = 1)
BEGIN
    UPDATE messages SET display_order = min(new.id, COALESCE((SELECT display_order FROM messages WHERE session_id = new.session_id AND id <> new.id AND (active = 1 OR compacted = 1) AND display_identity = new.display_identity AND display_order IS NOT NULL ORDER BY display_order LIMIT 1), new.id))
    WHERE id = new.id AND (new.active = 1 OR new.compacted = 1);
    UPDATE messages SET display_order = (SELECT display_order FROM messages WHERE id = new.id)
    WHERE session_id = new.session_id AND id <> new.id AND (active = 1 OR compacted = 1)
      AND display_identity = new.display_identity AND (new.active = 1 OR new.compacted = 1);
    UPDATE messages SET display_order = (SELECT min(peer.id) FROM messages AS peer WHERE peer.session_id = old.session_id AND (peer.active = 1 OR peer.compacted = 1) AND peer.display_identity = old.display_identity)
    WHERE session_id = old.session_id AND (active = 1 OR compacted = 1)
      AND display_identity = old.display_identity AND NOT (new.active = 1 OR new.compacted = 1);
END""",
"""CREATE TRIGGER messages_display_identity_update
AFTER UPDATE OF role, content, timestamp, tool_call_id, tool_calls, tool_name, display_kind ON messages
WHEN new.role IS NOT old.role OR new.content IS NOT old.content OR new.timestamp IS NOT old.timestamp OR new.tool_call_id IS NOT old.tool_call_id OR new.tool_calls IS NOT old.tool_calls OR new.tool_name IS NOT old.tool_name OR new.display_kind IS NOT old.display_kind
BEGIN
    UPDATE messages SET display_identity = NULL, display_order = NULL
    WHERE id = new.id
       OR (session_id = old.session_id AND display_identity = old.display_identity AND (active = 1 OR compacted = 1));
END""",
"""CREATE TRIGGER messages_display_identity_delete AFTER DELETE ON messages
WHEN old.active = 1 OR old.compacted = 1
BEGIN
    UPDATE messages SET display_order = (SELECT min(peer.id) FROM messages AS peer WHERE peer.session_id = old.session_id AND (peer.active = 1 OR peer.compacted = 1) AND peer.display_identity = old.display_identity)
    WHERE session_id = old.session_id AND (active = 1 OR compacted = 1) AND display_identity = old.display_identity;
END""",
'CREATE TABLE delivery_obligations (\n\tobligation_id TEXT, \n\tsession_key TEXT NOT NULL, \n\tplatform TEXT NOT NULL, \n\tchat_id TEXT NOT NULL, \n\tthread_id TEXT, \n\tcontent TEXT NOT NULL, \n\tstate TEXT NOT NULL, \n\tattempts INTEGER DEFAULT 0 NOT NULL, \n\tcreated_at REAL NOT NULL, \n\tupdated_at REAL NOT NULL, \n\towner_pid INTEGER, \n\towner_started_at INTEGER, \n\tlast_error TEXT, \n\tadapter_profile TEXT, \n\tdelivery_fence INTEGER DEFAULT 0 NOT NULL, \n\towner_installation_id TEXT, \n\towner_host TEXT, \n\towner_generation TEXT, \n\tlease_expires_at REAL, \n\tPRIMARY KEY (obligation_id)\n)',
"""CREATE INDEX idx_delivery_obligations_claim ON delivery_obligations (state, platform, adapter_profile)""",
"""CREATE VIEW messages_fts_src AS
    SELECT id, CASE WHEN role = 'tool' THEN substr(COALESCE(content, ''), 1, 8192) ELSE content END AS content, tool_name, tool_calls
    FROM messages""",
"""CREATE VIEW messages_fts_trigram_src AS
    SELECT m.id, m.role, m.content, m.tool_name
    FROM messages AS m
    JOIN sessions AS s ON s.id = m.session_id
    WHERE m.role <> 'tool' AND s.source NOT IN ('cron', 'subagent') AND json_extract((CASE WHEN json_valid(s.model_config) THEN s.model_config ELSE json_object() END), '$._delegate_from') IS NULL""",
"""CREATE VIRTUAL TABLE messages_fts USING fts5(content, tool_name, tool_calls, content='messages_fts_src', content_rowid='id')""",
"""CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(content, tool_name, content='messages_fts_trigram_src', content_rowid='id', tokenize='trigram')""",
"""CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages
WHEN (new.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_high_water'), -1) OR new.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_progress'), -1))
BEGIN
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls) VALUES (new.id, CASE WHEN new.role = 'tool' THEN substr(COALESCE(new.content, ''), 1, 8192) ELSE new.content END, new.tool_name, new.tool_calls);
END""",
"""CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages
WHEN (old.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_high_water'), -1) OR old.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_progress'), -1))
BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls) VALUES ('delete', old.id, CASE WHEN old.role = 'tool' THEN substr(COALESCE(old.content, ''), 1, 8192) ELSE old.content END, old.tool_name, old.tool_calls);
END""",
"""CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, tool_name, tool_calls, role ON messages
WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role)
   AND (old.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_high_water'), -1) OR old.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_progress'), -1))
BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls) VALUES ('delete', old.id, CASE WHEN old.role = 'tool' THEN substr(COALESCE(old.content, ''), 1, 8192) ELSE old.content END, old.tool_name, old.tool_calls);
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls) VALUES (new.id, CASE WHEN new.role = 'tool' THEN substr(COALESCE(new.content, ''), 1, 8192) ELSE new.content END, new.tool_name, new.tool_calls);
END""",
"""CREATE TRIGGER messages_fts_trigram_insert AFTER INSERT ON messages
WHEN new.role <> 'tool' AND EXISTS (SELECT 1 FROM sessions WHERE id = new.session_id AND source NOT IN ('cron', 'subagent') AND json_extract((CASE WHEN json_valid(model_config) THEN model_config ELSE json_object() END), '$._delegate_from') IS NULL)
   AND (new.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_high_water'), -1) OR new.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_progress'), -1))
BEGIN
    INSERT INTO messages_fts_trigram(rowid, content, tool_name) VALUES (new.id, new.content, new.tool_name);
END""",
"""CREATE TRIGGER messages_fts_trigram_delete AFTER DELETE ON messages
WHEN old.role <> 'tool' AND EXISTS (SELECT 1 FROM sessions WHERE id = old.session_id AND source NOT IN ('cron', 'subagent') AND json_extract((CASE WHEN json_valid(model_config) THEN model_config ELSE json_object() END), '$._delegate_from') IS NULL)
   AND (old.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_high_water'), -1) OR old.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_progress'), -1))
BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name) VALUES ('delete', old.id, old.content, old.tool_name);
END""",
"""CREATE TRIGGER messages_fts_trigram_update AFTER UPDATE OF content, tool_name, role ON messages
WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name OR old.role IS NOT new.role)
   AND (old.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_high_water'), -1) OR old.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_progress'), -1))
BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name) SELECT 'delete', old.id, old.content, old.tool_name WHERE old.role <> 'tool' AND EXISTS (SELECT 1 FROM sessions WHERE id = old.session_id AND source NOT IN ('cron', 'subagent') AND json_extract((CASE WHEN json_valid(model_config) THEN model_config ELSE json_object() END), '$._delegate_from') IS NULL);
    INSERT INTO messages_fts_trigram(rowid, content, tool_name) SELECT new.id, new.content, new.tool_name WHERE new.role <> 'tool' AND EXISTS (SELECT 1 FROM sessions WHERE id = new.session_id AND source NOT IN ('cron', 'subagent') AND json_extract((CASE WHEN json_valid(model_config) THEN model_config ELSE json_object() END), '$._delegate_from') IS NULL);
END""",
"""INSERT INTO "messages_fts"("messages_fts") VALUES ('rebuild')""",
"""INSERT INTO "messages_fts_trigram"("messages_fts_trigram") VALUES ('rebuild')""",
)

ROWS = (
    ('alembic_version', ('version_num',), ('0030b',)),
    ('schema_version', ('version',), (30,)),
    ('state_meta', ('key', 'value'), ('fts_storage_version', '3')),
)
