"""Keeping a file readable by the agent version the user came from (switching back).

Schema v25 (revision 0025) moved every system prompt into ``system_prompts`` and emptied
``sessions.system_prompt``; hermes-agent 0.19.0 (schema 22) reads only that column. So
after the agent ran on this package, 0.19.0's ``hermes sessions export`` of the file
showed every prompt as null.

Decision (docs/agent.md, "Switching back"): a SQLite file the agent opens through this
package is shared with a pre-v25 reader — the agent's own ``hermes_state``, which comes
back with ``hermes-store agent disable`` — so it keeps both copies of each prompt:

* the first time the compat module opens a file for writing, one write unit copies every
  de-duplicated prompt back onto its session row (``sessions.system_prompt``) and sets
  ``state_meta.inline_system_prompts = "1"``;
* while that marker is set, every prompt the package writes (create, fill, update,
  import) goes to both places (``repository.system_prompts.keeps_prompts_inline``).

Readers of this package take the inline text first, then the de-duplicated row, so both
agree. The price is the de-duplication's space saving, for as long as the marker stays;
PostgreSQL databases never get it (no pre-v25 reader can open them); a copy from one into
a file does (``hermes-store db copy``, ``dbcopy``).
"""

from __future__ import annotations

import sqlalchemy as sa

from ..repository.system_prompts import keeps_prompts_inline, share_prompts_inline


def keep_prompts_inline(db, *, refill: bool = False) -> int:
    """Mark the store's file as shared with pre-v25 readers and put every prompt back
    inline; returns how many session rows got their prompt back. Once marked, it does
    nothing (one read) unless ``refill=True`` — e.g. at ``hermes-store agent enable``,
    to cover rows another hash-only writer added meanwhile. Never on PostgreSQL (0)."""
    if not db._backend.stores_files or db.read_only:
        return 0  # a server database: no pre-v25 reader opens it

    def unit(conn: sa.Connection) -> int:
        if keeps_prompts_inline(conn) and not refill:
            return 0
        return share_prompts_inline(conn)

    with db._read() as conn:
        if keeps_prompts_inline(conn) and not refill:
            db.__dict__["_inline_prompts_flag"] = True
            return 0
    filled = db._write(unit)
    db.__dict__["_inline_prompts_flag"] = True
    return filled


def shares_prompts_inline(db) -> bool:
    """Whether the store's file carries the marker."""
    with db._read() as conn:
        return keeps_prompts_inline(conn)


def keep_file_readable_by_pre_v25(path) -> int:
    """``keep_prompts_inline(…, refill=True)`` on the SQLite file at ``path`` (opened,
    brought to head, closed): what switching back needs, e.g. ``hermes-store agent
    disable`` on the file it leaves, also one just copied back from PostgreSQL with
    ``hermes-store db copy`` (written by this package, so not marked). Returns how many
    session rows got their prompt back inline."""
    from ..store import SessionDB

    with SessionDB(path) as db:
        return keep_prompts_inline(db, refill=True)
