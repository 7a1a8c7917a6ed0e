"""Alembic migration environment for state.db (revisions 0001-0030 = schema v1-v30)."""
