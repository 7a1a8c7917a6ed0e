"""How the repository's portable constructs compile on PostgreSQL where the generic
SQL of ``repository.dialect`` is not enough. Registered when the backend is imported."""

from __future__ import annotations

from sqlalchemy.ext.compiler import compiles

from ...repository.dialect import json_text


@compiles(json_text, "postgresql")
def _json_text_postgresql(element, compiler, **kw):
    # hermes_json_text (fts/ddl.py, part of the PostgreSQL head): malformed JSON and
    # non-objects read as NULL, as the json_valid guard does on SQLite.
    (column,) = element.clauses
    return f"hermes_json_text({compiler.process(column, **kw)}, '{element.key}')"
