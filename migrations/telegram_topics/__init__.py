"""Alembic scripts of the Telegram DM topic branch (opt-in tables, own version table)."""
