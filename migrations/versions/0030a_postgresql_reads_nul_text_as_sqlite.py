"""v30a: PostgreSQL's word index and substring scope read text holding U+0000 as SQLite does.

Upstream schema version 30, unchanged: a step of the store's own, not an upstream
version (docs/migrations.md, "The store's own steps"), so ``schema_version`` stays 30
and upstream's next version keeps the id ``0031``. Issue 32.

PostgreSQL text cannot hold U+0000; the store keeps it escaped (U+0001 → 01 01, U+0000
→ 01 02: ``hermes_store/backends/postgresql/codec.py``). SQLite reads a value holding
U+0000 as a C string in ``substr`` and in its JSON functions: up to the first U+0000.
Two functions of the PostgreSQL baseline read the escaped text instead, and answered
otherwise than SQLite:

* ``hermes_fts_document``: a tool row's word index holds its first 8,192 characters,
  which SQLite takes with ``substr`` — nothing past a U+0000 (a multimodal tool output
  is stored as ``"\\x00json:[…]"``, so none of it is searchable on SQLite). The
  baseline's ``left()`` indexed the words past it. Now the head of a tool row is read
  up to its first U+0000, U+0001 counted as one character; a row without the escape
  character (nearly all) takes the old ``left()``.
* ``hermes_trigram_session_ok``: a delegate run (``model_config`` holding
  ``_delegate_from``) stays out of the substring index. A ``_delegate_from`` holding
  U+0000 is ``\\u0000`` in the JSON text, which PostgreSQL's ``->>`` refuses; the
  function read that as "no such key" and kept the run's messages in the index. Now
  the JSON's ``\\u0000``/``\\u0001`` escapes are rewritten to the codec's pairs first,
  as the repository's ``json_text`` does in queries.

The rows these change are recomputed in the same transaction: tool rows holding the
escape character in their first 8,192 characters (``UPDATE … SET content = content``
recomputes the stored generated ``fts_document``; the display trigger only fires when
the content differs), and the
scope flag of messages in sessions whose ``model_config`` holds the escape character
or a ``\\u000`` escape.

On SQLite nothing changes: its functions are the reference. A file moves its stamp to
``0030a`` and is otherwise left as it is; ``engines_changed`` says so, and a read-only
open reads a file still stamped ``0030`` as at head.

Downgrade: the baseline's two function bodies back, the same rows recomputed.
"""

from __future__ import annotations

from hermes_store.migrations import helpers as h

revision = "0030a"
down_revision = "0030"
branch_labels = None
depends_on = None
#: the engines this revision handles: every revision after 0030 handles both
dialects = ("sqlite", "postgresql")
#: the engines whose schema it changes; on the others it only moves the stamp
engines_changed = ("postgresql",)

_DOCUMENT = """CREATE OR REPLACE FUNCTION hermes_fts_document(
    role text, content text, tool_name text, tool_calls text
) RETURNS tsvector
LANGUAGE sql IMMUTABLE
RETURN hermes_fts_vector(
    CASE WHEN role = 'tool' THEN {tool_head}
         ELSE coalesce(content, '') END
    || ' ' || coalesce(tool_name, '') || ' ' || coalesce(tool_calls, ''))"""

#: a tool row's first 8,192 characters as SQLite's substr reads them
_TOOL_HEAD_AS_SQLITE = (
    r"CASE WHEN strpos(left(coalesce(content, ''), 8192), E'\x01') = 0 "
    r"THEN left(coalesce(content, ''), 8192) "
    r"ELSE left(replace(substring(left(coalesce(content, ''), 16384) "
    r"from E'^(?:[^\x01]|\x01\x01|\x01(?![\x01\x02]))*'), E'\x01\x01', E'\x01'), 8192) END"
)
_TOOL_HEAD_BASELINE = "left(coalesce(content, ''), 8192)"

_SESSION_OK = """CREATE OR REPLACE FUNCTION hermes_trigram_session_ok(source text, model_config text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
RETURN source NOT IN ('cron', 'subagent')
   AND hermes_json_text({model_config}, '_delegate_from') IS NULL"""

#: model_config as SQLite's JSON functions read it, with the U+0000/U+0001 escapes
#: made readable by ->>
_MODEL_CONFIG_AS_SQLITE = (
    r"CASE WHEN strpos(model_config, E'\x01') = 0 AND strpos(model_config, E'\\u000') = 0 "
    r"THEN model_config ELSE regexp_replace(regexp_replace(substring(model_config "
    r"from E'^(?:[^\x01]|\x01\x01|\x01(?![\x01\x02]))*'), "
    r"E'(?<!\\\\)((?:\\\\\\\\)*)\\\\u0001', E'\\1\\\\u0001\\\\u0001', 'g'), "
    r"E'(?<!\\\\)((?:\\\\\\\\)*)\\\\u0000', E'\\1\\\\u0001\\\\u0002', 'g') END"
)

#: the rows whose index entries the two functions may now compute otherwise
_RECOMPUTE = [
    # only the first 8,192 characters decide (PostgreSQL reads no more of a long value)
    "UPDATE messages SET content = content "
    "WHERE role = 'tool' AND strpos(left(content, 8192), E'\\x01') > 0",
    """UPDATE messages AS m
SET fts_trigram_scope = (m.role <> 'tool' AND hermes_trigram_session_ok(s.source, s.model_config))
FROM sessions AS s
WHERE s.id = m.session_id
  AND (strpos(s.model_config, E'\\x01') > 0 OR strpos(s.model_config, E'\\\\u000') > 0)
  AND m.fts_trigram_scope IS DISTINCT FROM
      (m.role <> 'tool' AND hermes_trigram_session_ok(s.source, s.model_config))""",
]


def _replace(tool_head: str, model_config: str) -> None:
    h.execute([_DOCUMENT.format(tool_head=tool_head),
               _SESSION_OK.format(model_config=model_config), *_RECOMPUTE])


def upgrade() -> None:
    if h.dialect() == "postgresql":
        _replace(_TOOL_HEAD_AS_SQLITE, _MODEL_CONFIG_AS_SQLITE)


def downgrade() -> None:
    if h.dialect() == "postgresql":
        _replace(_TOOL_HEAD_BASELINE, "model_config")
