"""The baseline a new PostgreSQL database starts at (``0030``, the frozen
``migrations/pg_baseline.py``; the revisions after it follow), and the head in one step
from the live definitions (:func:`create_head`), which the two must equal (tested)."""

from __future__ import annotations

import sqlalchemy as sa

BASELINE = "0030"




def create_head(conn: sa.Connection) -> None:
    """The head schema from the live definitions, on an empty database (inside the
    caller's transaction): what the baseline plus the revisions after it give
    (tested)."""
    from .... import schema
    from .. import display_order, storage
    from ..fts import ddl as fts_ddl

    schema.metadata.create_all(conn)
    fts_ddl.create_fts(conn)
    display_order.create_display_triggers(conn)
    storage.set_compression(conn)
    conn.execute(schema.schema_version.insert().values(version=schema.SCHEMA_VERSION))


def baseline_module():
    from ....migrations import pg_baseline

    return pg_baseline
