"""A PostgreSQL database's schema, described in ``schema_dump``'s shape so that a
PostgreSQL head can be compared with a SQLite head (``tests/backends/postgresql/test_head_parity.py``).

``describe(conn)`` (a psycopg connection) returns::

    {"tables":   {name: {"columns": {col: {"type", "notnull", "default", "pk"}},
                         "primary_key": [...], "foreign_keys": [...], "autoincrement"}},
     "indexes":  {name: {"table", "unique", "columns", "where"}},   # PK indexes left out
     "triggers": {name: table},
     "functions": [names]}

Normalizations, each a difference of spelling between the engines, not of meaning:

* types by SQLite affinity: ``bigint`` → ``INTEGER``, ``double precision`` → ``REAL``,
  ``text`` → ``TEXT``, ``bytea`` → ``BLOB`` (other types are kept as PostgreSQL names
  them, so they show up as differences);
* defaults without their casts (``''::text`` → ``''``); a column filled from a sequence
  (``nextval(…)``) has no default and marks its table ``autoincrement``;
* index keys and predicates lower-cased without casts and parentheses, then tightened
  as ``schema_dump.normalize_sql`` does (grouping parentheses are dropped on both sides).
"""

from __future__ import annotations

import re

from support import schema_dump

_AFFINITY = {"bigint": "INTEGER", "integer": "INTEGER", "double precision": "REAL",
             "text": "TEXT", "bytea": "BLOB"}
_CAST = re.compile(r"::[a-z_]+( precision| varying)?(\[\])?")


def normalize_expression(text: str | None) -> str | None:
    """An index key or predicate, comparable with ``schema_dump``'s SQLite text."""
    if text is None:
        return None
    text = _CAST.sub("", text)
    text = text.replace("(", " ").replace(")", " ")
    return schema_dump.normalize_sql(text)


def _default(value: str | None) -> str | None:
    if value is None or value.startswith("nextval("):
        return None
    return _CAST.sub("", value)


def describe(conn) -> dict:
    tables: dict = {}
    for table, column, type_, notnull, default in conn.execute("""
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid)
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE n.nspname = current_schema() AND c.relkind = 'r' AND a.attnum > 0
          AND NOT a.attisdropped
        ORDER BY c.relname, a.attnum"""):
        entry = tables.setdefault(table, {"columns": {}, "primary_key": [], "foreign_keys": [],
                                          "autoincrement": False})
        entry["columns"][column] = {
            "type": _AFFINITY.get(type_, type_), "notnull": bool(notnull),
            "default": _default(default), "pk": 0,
        }
        if default and default.startswith("nextval("):
            entry["autoincrement"] = True
    for table, kind, definition, columns, ref_table, ref_columns, on_delete in conn.execute("""
        SELECT c.relname, k.contype, pg_get_constraintdef(k.oid),
               ARRAY(SELECT a.attname FROM unnest(k.conkey) WITH ORDINALITY AS u(n, i)
                     JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n
                     ORDER BY u.i),
               r.relname,
               ARRAY(SELECT a.attname FROM unnest(k.confkey) WITH ORDINALITY AS u(n, i)
                     JOIN pg_attribute a ON a.attrelid = k.confrelid AND a.attnum = u.n
                     ORDER BY u.i),
               k.confdeltype
        FROM pg_constraint k
        JOIN pg_class c ON c.oid = k.conrelid
        LEFT JOIN pg_class r ON r.oid = k.confrelid
        WHERE k.connamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema()) AND k.contype IN ('p', 'f')
        ORDER BY c.relname, k.conname"""):
        entry = tables[table]
        if kind == "p":
            entry["primary_key"] = list(columns)
            for position, column in enumerate(columns, start=1):
                entry["columns"][column]["pk"] = position
        else:
            entry["foreign_keys"].append({
                "table": ref_table, "from": list(columns), "to": list(ref_columns),
                "on_delete": {"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE",
                              "n": "SET NULL", "d": "SET DEFAULT"}[on_delete],
            })
    indexes: dict = {}
    for name, table, unique, keys, options, predicate in conn.execute("""
        SELECT ic.relname, c.relname, i.indisunique,
               ARRAY(SELECT pg_get_indexdef(i.indexrelid, k, true)
                     FROM generate_series(1, i.indnkeyatts) AS k),
               i.indoption::int2[],
               pg_get_expr(i.indpred, i.indrelid, true)
        FROM pg_index i
        JOIN pg_class ic ON ic.oid = i.indexrelid
        JOIN pg_class c ON c.oid = i.indrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND NOT i.indisprimary
        ORDER BY ic.relname"""):
        terms = []
        for key, option in zip(keys, options):
            terms.append(normalize_expression(key + (" DESC" if option & 1 else "")))
        indexes[name] = {"table": table, "unique": bool(unique), "columns": terms,
                         "where": normalize_expression(predicate)}
    triggers = dict(conn.execute("""
        SELECT t.tgname, c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        WHERE NOT t.tgisinternal ORDER BY t.tgname""").fetchall())
    functions = [name for (name,) in conn.execute(
        "SELECT proname FROM pg_proc WHERE pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema()) "
        "ORDER BY proname")]
    return {"tables": tables, "indexes": indexes, "triggers": triggers, "functions": functions}


def schema_items(conn) -> list[str]:
    """Every schema object of the current schema as one exact line each (full DDL of
    indexes, constraints, triggers and functions; columns with position, type, NOT
    NULL, default, generation and compression method): two databases built differently are the same
    schema when these lists are equal."""
    return [item for (item,) in conn.execute("""
        SELECT item FROM (
            SELECT 'ext ' || extname FROM pg_extension
            UNION ALL SELECT 'col ' || c.relname || '.' || a.attname || ' #' || a.attnum || ' '
                   || format_type(a.atttypid, a.atttypmod) || ' notnull=' || a.attnotnull
                   || ' generated=' || a.attgenerated::text || ' default='
                   || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
                   || ' compression=' || a.attcompression::text
                FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
                JOIN pg_namespace n ON n.oid = c.relnamespace
                LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                WHERE n.nspname = current_schema() AND c.relkind = 'r' AND a.attnum > 0
                  AND NOT a.attisdropped AND c.relname <> 'alembic_version'
            UNION ALL SELECT 'idx ' || pg_get_indexdef(i.indexrelid)
                FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
                JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = current_schema() AND c.relname <> 'alembic_version'
            UNION ALL SELECT 'con ' || conrelid::regclass || ' ' || conname || ' '
                   || pg_get_constraintdef(oid)
                FROM pg_constraint
                WHERE connamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
                  AND conrelid <> 0 AND conrelid::regclass::text <> 'alembic_version'
            UNION ALL SELECT 'trg ' || pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal
            UNION ALL SELECT 'fn ' || pg_get_functiondef(p.oid) FROM pg_proc p
                WHERE p.pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
                  AND p.prokind = 'f' AND NOT EXISTS (
                      SELECT 1 FROM pg_depend AS e WHERE e.objid = p.oid AND e.deptype = 'e')
        ) AS items(item) ORDER BY item""")]
