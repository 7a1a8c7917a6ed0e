"""What only the SQLite engine has: files, WAL and checkpoints, the library, journal
modes, identity, the FTS5 layout (hermes_store/backends/sqlite/)."""
