"""``migrate.check`` of a file: at head, and drift of its tables from ``schema.py``.

Alembic's autogenerate compares the file with ``hermes_store.schema`` (FTS objects and
the Telegram topic tables left out: the golden ``sqlite_master`` test and the branch's
own check cover them), minus what SQLite's reflection gets wrong (foreign keys declared
inline lose ``ON DELETE``: ``PRAGMA foreign_key_list`` is the authority).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import sqlalchemy as sa
from alembic.migration import MigrationContext

from ....migrate.results import CheckResult
from ....migrate.scripts import describe, fk_key, head, telegram_topics_head
from ....migrate.topics import TopicsCheck, check_telegram_topics
from ..engine import create_engine
from ..errors import sqlite_errors
from ..fts.ddl import is_fts_object
from .inspect import inspect_file


def check(path: Path) -> CheckResult:
    """Is the file at head, and do its ordinary tables match ``hermes_store.schema``?

    ``drift`` lists Alembic autogenerate's differences (FTS objects excluded);
    ``telegram_topics`` reports the opt-in Telegram topic branch (absent, or its
    revision and its own drift). Read-only: the file is not changed.
    """
    from alembic.autogenerate import compare_metadata

    from ....schema import metadata

    p = path
    state = inspect_file(p)
    drift: list[str] = []
    if state.kind in ("alembic", "upstream"):
        engine = create_engine(p, read_only=True, journal_mode=None, poolclass=sa.pool.NullPool)
        try:
            with sqlite_errors(p), engine.connect() as conn:
                ctx = MigrationContext.configure(
                    conn, opts={"include_name": include_name, "compare_type": True}
                )
                with warnings.catch_warnings():
                    # SQLite can't reflect expression indexes; the golden sqlite_master
                    # test covers them instead.
                    warnings.filterwarnings("ignore", message=".*expression-based index")
                    diffs = compare_metadata(ctx, metadata)
                drift = [describe(d) for d in without_fk_artefacts(conn, diffs)]
                topics = check_telegram_topics(conn, p)
        finally:
            engine.dispose()
    else:
        topics = TopicsCheck("absent", None, telegram_topics_head(), None, [])
    return CheckResult(state.revision, head(), drift, topics)


def without_fk_artefacts(conn, diffs: list) -> list:
    """Drop remove_fk/add_fk pairs that describe the same key.

    SQLAlchemy's SQLite reflection loses ``ON DELETE`` of a key declared inline
    (``session_id TEXT REFERENCES sessions(id) ON DELETE CASCADE``, as upstream
    writes it), so every adopted file would show a false difference. SQLite's own
    ``PRAGMA foreign_key_list`` is the authority: when it agrees with the metadata,
    the pair is not drift.
    """
    removed = {fk_key(d[1]): d for d in diffs if d[0] == "remove_fk"}
    artefacts = []
    for d in diffs:
        if d[0] != "add_fk" or fk_key(d[1]) not in removed:
            continue
        fk = d[1]
        table, cols, ref, ref_cols = fk_key(fk)
        actual = {
            (tuple([r[3]]), r[2], tuple([r[4]]), (r[6] or "NO ACTION").upper())
            for r in conn.exec_driver_sql(f'PRAGMA foreign_key_list("{table}")')
        }
        if (cols, ref, ref_cols, (fk.ondelete or "NO ACTION").upper()) in actual:
            artefacts += [d, removed[fk_key(fk)]]
    return [d for d in diffs if not any(d is a for a in artefacts)]


def include_name(name: str | None, type_: str, parent_names) -> bool:
    """Autogenerate filter of the main chain: FTS tables/shadows/views are checked by the
    golden sqlite_master test, the Telegram topic branch's tables by its own check
    (:func:`check_telegram_topics`)."""
    from ....telegram_schema import owns

    if type_ == "table" and name is not None:
        return not (is_fts_object(name) or owns(name))
    return True


__all__ = ["check", "include_name", "without_fk_artefacts"]
