"""FTS5 on SQLite: the head layout (``ddl``), its MATCH route (``search``), its upkeep
(``maintenance``)."""
