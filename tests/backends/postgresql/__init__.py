"""What only the PostgreSQL engine has: the server, poolers, outages, the codec, the
commit outcome, roles, its FTS layer and its migrations (hermes_store/backends/postgresql/)."""
