"""The one delete path every concern that deletes sessions goes through (export and
bulk delete in ``portability``, empty sessions and ghosts in ``cleanup``).

Every delete keeps the self-referencing ``parent_session_id`` valid inside the same
unit: surviving children are detached (``parent_session_id → NULL``) under their own
locks before the rows go; the caller decides which delegate runs
(``model_config._delegate_from``, found by ``delegate_children``) go with the
session. Usage rows go by ``ON DELETE CASCADE``, FTS rows by the triggers, system
prompts nobody references any more are dropped. Transcript files under
``sessions_dir`` are removed after the commit, best effort (``remove_session_files``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable, Iterator

import sqlalchemy as sa

from .. import schema, unit_locks
from ..units import hold
from . import kinds
from .system_prompts import drop_unreferenced_prompts

log = logging.getLogger(__name__)

S = schema.sessions
M = schema.messages

#: ids per IN (...) list, well under SQLite's bound-parameter limit
CHUNK = 500


def chunks(ids: list[str]) -> Iterator[list[str]]:
    """``ids`` in lists of at most ``CHUNK``."""
    for start in range(0, len(ids), CHUNK):
        yield ids[start:start + CHUNK]


def delegate_children(conn: sa.Connection, parent_ids: Iterable[str]) -> list[str]:
    """Delegate runs of ``parent_ids``, recursively (a delegate's own delegates too).

    The parents themselves are never returned, even when markers form a cycle that
    leads back to one of them.
    """
    parents = {sid for sid in parent_ids if sid}
    found, frontier = set(parents), list(parents)
    marker = kinds.delegate_from(S)
    while frontier:
        rows = conn.execute(
            sa.select(S.c.id).where(sa.or_(
                marker.in_(frontier),
                sa.and_(S.c.parent_session_id.in_(frontier), marker.is_not(None)),
            ))
        ).scalars().all()
        frontier = [sid for sid in rows if sid not in found]
        found.update(frontier)
    return sorted(found - parents)


def delete_rows(conn: sa.Connection, ids: list[str]) -> None:
    """Delete sessions and their messages, detaching surviving children first (holding
    each child's lock before its row changes; a unit that runs alone holds them all)."""
    hashes: list[str] = []
    doomed = set(ids)
    for chunk in chunks(ids):
        hashes += conn.execute(
            sa.select(S.c.system_prompt_hash).where(S.c.id.in_(chunk))
        ).scalars().all()
        children = conn.execute(
            sa.select(S.c.id).where(S.c.parent_session_id.in_(chunk))
        ).scalars().all()
        hold(conn, unit_locks.sessions(*(c for c in children if c not in doomed)))
        conn.execute(
            sa.update(S).where(S.c.parent_session_id.in_(chunk)).values(parent_session_id=None)
        )
    for chunk in chunks(ids):
        conn.execute(sa.delete(M).where(M.c.session_id.in_(chunk)))
        conn.execute(sa.delete(S).where(S.c.id.in_(chunk)))
    drop_unreferenced_prompts(conn, hashes)


def remove_session_files(sessions_dir: Path | str | None, session_id: str) -> None:
    """Remove ``<id>.json``, ``<id>.jsonl`` and ``request_dump_<id>_*.json``."""
    if sessions_dir is None:
        return
    folder = Path(sessions_dir)
    paths = [folder / f"{session_id}.json", folder / f"{session_id}.jsonl"]
    try:
        paths.extend(folder.glob(f"request_dump_{session_id}_*.json"))
    except OSError:
        pass
    for path in paths:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("could not remove %s: %s", path, exc)
