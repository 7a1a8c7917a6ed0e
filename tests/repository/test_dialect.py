"""repository/dialect.py: the dialect-dependent constructs, run on a real file."""

from __future__ import annotations

import sqlalchemy as sa

from hermes_store import schema
from hermes_store.repository.dialect import json_text

from repo_helpers import db, db_path  # noqa: F401

S = schema.sessions


def _ids_with_key(db, key):
    stmt = sa.select(S.c.id).where(json_text(S.c.model_config, key).is_not(None))
    with db._read() as conn:
        return conn.execute(stmt).scalars().all()


def test_json_text_statements_differing_only_in_the_key_are_not_confused(db):
    # The key is spelled into the SQL: if it were not part of the cache key, the
    # second statement would reuse the first one's compiled form and find "d".
    db.create_session("d", "cli", model_config={"_delegate_from": "p"})
    db.create_session("b", "cli", model_config={"_branched_from": "p"})
    assert _ids_with_key(db, "_delegate_from") == ["d"]
    assert _ids_with_key(db, "_branched_from") == ["b"]
    assert _ids_with_key(db, "_delegate_from") == ["d"]
