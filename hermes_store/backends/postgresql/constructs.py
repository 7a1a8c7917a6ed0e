"""How the repository's portable constructs compile on PostgreSQL where the generic
SQL of ``sql.constructs`` is not enough, and the partial indexes' predicates of the
shared metadata for this engine. Registered when the backend is imported."""

from __future__ import annotations

from sqlalchemy.ext.compiler import compiles

from ... import schema, telegram_schema
from ...sql.constructs import json_text

# A partial index has the same predicate on every engine; ``schema`` writes it once, as
# SQLite's option, so that a SQLite process never loads this dialect (``schema._partial``).
# Setting ``dialect_kwargs`` is SQLAlchemy's documented way to add a dialect's option.
for _metadata in (schema.metadata, telegram_schema.metadata):
    for _index, _where in schema.partial_predicates(_metadata):
        _index.dialect_kwargs["postgresql_where"] = _where


@compiles(json_text, "postgresql")
def _json_text_postgresql(element, compiler, **kw):
    # hermes_json_text (fts/ddl.py, part of the PostgreSQL head): malformed JSON and
    # non-objects read as NULL, as the json_valid guard does on SQLite.
    (column,) = element.clauses
    return f"hermes_json_text({compiler.process(column, **kw)}, '{element.key}')"
