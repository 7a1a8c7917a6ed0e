"""Full-text search over messages: what both engines share.

* ``hermes_store.fts.layout`` — the indexes' names and scope (layout 3, decision D7);
* ``hermes_store.fts.query`` — the sanitizer, the terms, the route a query takes;
* ``hermes_store.fts.maintenance`` — rebuild, integrity check, bounded optimize, sizes,
  on the connection's engine.

Each engine's SQL lives in its backend: FTS5 in ``backends/sqlite/fts/`` (DDL, the MATCH
route, the FTS5 upkeep), the ``tsvector``/``pg_trgm`` counterpart in
``backends/postgresql/fts/``.
"""
