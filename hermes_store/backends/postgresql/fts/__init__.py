"""Full-text search on PostgreSQL: the ``tsvector`` + ``pg_trgm`` layout (``ddl``, with its
upkeep) and its route (``search``)."""
