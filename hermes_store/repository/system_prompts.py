"""Stored system prompts: each distinct text once in ``system_prompts`` (schema v25),
referenced by ``sessions.system_prompt_hash``.

Every read returns the prompt text under the ``system_prompt`` key
(``resolved_system_prompt``), falling back to the inline column of rows written before
v25 or by an upstream build that still writes inline.

A file shared with a reader from before v25 (upstream 0.19.0, which reads only
``sessions.system_prompt``) carries ``state_meta.inline_system_prompts = "1"``: while it
does, every prompt written is also kept inline (``keeps_prompts_inline``; set by
``hermes_store.agent``, see docs/agent.md).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable

import sqlalchemy as sa

from .. import schema, unit_locks
from ..backends.base import backend_of
from ..sql.prebuilt import Prebuilt
from ..sql.values import prompt_hash
from ..units import hold

S = schema.sessions
P = schema.system_prompts
M = schema.state_meta

#: ``state_meta`` key: "1" while the file is shared with a pre-v25 reader (module doc)
INLINE_PROMPTS_KEY = "inline_system_prompts"


def resolved_system_prompt(s=S) -> sa.ColumnElement:
    """The session's prompt text: inline column first, else the de-duplicated row."""
    stored = (
        sa.select(P.c.prompt).where(P.c.hash == s.c.system_prompt_hash).scalar_subquery()
    )
    return sa.func.coalesce(s.c.system_prompt, stored)


def keeps_prompts_inline(conn: sa.Connection) -> bool:
    """Whether prompts are also to be written inline (``INLINE_PROMPTS_KEY``)."""
    stmt = sa.select(M.c.value).where(M.c.key == INLINE_PROMPTS_KEY)
    return conn.execute(stmt).scalar() == "1"


def share_prompts_inline(conn: sa.Connection) -> int:
    """Mark the database as shared with a pre-v25 reader (``INLINE_PROMPTS_KEY``) and
    put every de-duplicated prompt back inline, where that reader looks; returns how
    many session rows got their prompt back. For a file such a reader may open: the
    agent's (``hermes_store.agent.prompts``), a copy into a file (``dbcopy``)."""
    prompt = sa.select(P.c.prompt).where(P.c.hash == S.c.system_prompt_hash).scalar_subquery()
    filled = conn.execute(
        sa.update(S)
        .where(S.c.system_prompt.is_(None), S.c.system_prompt_hash.is_not(None))
        .values(system_prompt=prompt)
    ).rowcount
    if not keeps_prompts_inline(conn):
        conn.execute(sa.delete(M).where(M.c.key == INLINE_PROMPTS_KEY))
        conn.execute(sa.insert(M).values(key=INLINE_PROMPTS_KEY, value="1"))
    return filled


def store_prompt(conn: sa.Connection, prompt: str) -> str:
    """Insert the prompt text once; return its hash. The unit shares the prompt's lock
    with every unit that stores it, so no unit deletes it meanwhile."""
    digest = prompt_hash(prompt)
    hold(conn, unit_locks.prompt_users(digest))
    _insert_prompt(backend_of(conn)).execute(conn, {"hash": digest, "prompt": prompt})
    return digest


@lru_cache(maxsize=4)
def _insert_prompt(backend) -> Prebuilt:
    """The backend's INSERT … ON CONFLICT DO NOTHING of a prompt (prebuilt: a session's
    start stores its prompt)."""
    return Prebuilt(backend.insert(P).values(hash=sa.bindparam("hash", type_=sa.Text),
                                             prompt=sa.bindparam("prompt", type_=sa.Text))
                    .on_conflict_do_nothing())


#: a prompt row deleted when no session references it any more
_DROP_UNREFERENCED = Prebuilt(sa.delete(P).where(
    P.c.hash == sa.bindparam("hash", type_=sa.Text),
    ~sa.exists(sa.select(S.c.system_prompt_hash).where(S.c.system_prompt_hash == P.c.hash))))


def drop_unreferenced_prompts(conn: sa.Connection, hashes: Iterable[str | None]) -> None:
    """Delete prompt rows among ``hashes`` that no session references any more."""
    candidates = sorted({h for h in hashes if h})
    if not candidates:
        return
    # alone on each prompt: a unit that stores it waits, then finds it gone and stores
    # it again; one that stored it first has committed its reference, which this sees
    hold(conn, unit_locks.prompt_dropper(*candidates))
    for digest in candidates:
        _DROP_UNREFERENCED.execute(conn, {"hash": digest})
