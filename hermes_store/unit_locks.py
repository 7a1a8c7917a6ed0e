"""What a write unit decides on, named, so that an engine that runs units side by side
locks exactly that (decision D16). Any engine; no SQL here.

A unit is declared with the locks of what it reads and decides on::

    self._write(unit, locks=unit_locks.sessions(session_id) | unit_locks.title(clean))

SQLite ignores them: ``BEGIN IMMEDIATE`` runs every unit alone. On PostgreSQL
(``backends/postgresql/locks.py``) each name becomes a transaction-level advisory lock,
all taken in the unit's first statement, together with the store's lock in shared mode:

* ``sessions(*ids)`` — the sessions whose rows (and messages, usage, compression
  lease, topic binding) the unit changes or decides on. Units of one session run one
  at a time; units of different sessions never wait for each other. The lock is on the
  id, not on a row, so it also covers a session that does not exist yet
  (``create_session``, the bare row ``update_token_counts`` creates);
* ``title(text)`` — a title the unit claims (titles are unique: two sessions claiming
  one title queue on it, claims of different titles do not);
* ``prompt_users(hash)`` / ``prompt_dropper(hash)`` — a de-duplicated system prompt:
  units that store or reference it share the lock, a unit that deletes it because no
  session references it any more takes it alone (otherwise a session could start
  referencing the row that is being deleted);
* ``telegram_chat(chat_id)``, ``routing_scope(scope)`` — one chat's topic mode and
  bindings, one scope of the gateway routing index;
* ``ROWS`` — nothing but the rows its statements lock (a single upsert);
* ``STORE`` — the whole store: the unit runs alone, as every unit did before D16. For
  what selects its sessions by a condition over the whole store (prune, cleanups,
  imports, bulk archive), DDL (the Telegram topic opt-in), index upkeep, and any
  ``_write(fn)`` that names nothing (the default: a new unit is safe until it says
  what it decides on).

A unit that discovers what it decides on while it runs (the delegate runs of a session
it deletes, the holder of a title it takes over) takes those locks before it changes
them: ``units.hold(conn, locks)``. A unit started inside a unit joins it and takes its
own locks at that point. docs/postgres.md ("Write locks") lists every unit's locks and
why they are enough.
"""

from __future__ import annotations

import functools
from typing import Iterable

#: kinds of names (part of each lock's key: a session and a title never share one)
SESSION, TITLE, PROMPT, TELEGRAM_CHAT, ROUTING_SCOPE = (
    "session", "title", "prompt", "telegram_chat", "routing_scope")


class Locks:
    """An immutable set of named locks: ``exclusive`` and ``shared`` hold
    ``(kind, name)`` pairs; ``alone`` is the whole store. ``a | b`` is both."""

    __slots__ = ("alone", "exclusive", "shared")

    def __init__(self, *, alone: bool = False, exclusive: Iterable[tuple[str, str]] = (),
                 shared: Iterable[tuple[str, str]] = ()) -> None:
        exclusive = frozenset(exclusive)
        object.__setattr__(self, "alone", alone)
        object.__setattr__(self, "exclusive", exclusive)
        object.__setattr__(self, "shared", frozenset(shared) - exclusive)

    def __setattr__(self, name, value):  # noqa: D105 - immutable
        raise AttributeError("Locks are immutable")

    def __or__(self, other: "Locks") -> "Locks":
        if not isinstance(other, Locks):
            return NotImplemented
        return Locks(alone=self.alone or other.alone, exclusive=self.exclusive | other.exclusive,
                     shared=self.shared | other.shared)

    def __eq__(self, other) -> bool:
        return isinstance(other, Locks) and (self.alone, self.exclusive, self.shared) == (
            other.alone, other.exclusive, other.shared)

    def __hash__(self) -> int:
        return hash((self.alone, self.exclusive, self.shared))

    def __repr__(self) -> str:
        if self.alone:
            return "Locks(STORE)"
        parts = [f"{k}:{n!r}" for k, n in sorted(self.exclusive)]
        parts += [f"{k}:{n!r} shared" for k, n in sorted(self.shared)]
        return f"Locks({', '.join(parts) or 'ROWS'})"


#: the whole store: the unit runs alone (the default of ``_write``)
STORE = Locks(alone=True)
#: nothing beyond the rows the unit's statements lock (and the store's lock, shared)
ROWS = Locks()


def _names(kind: str, values: Iterable) -> list[tuple[str, str]]:
    return [(kind, str(v)) for v in values if v is not None and v != ""]


def sessions(*session_ids) -> Locks:
    """The sessions ``session_ids`` (None and "" are skipped)."""
    if len(session_ids) == 1 and type(session_ids[0]) is str:
        return _one_session(session_ids[0])
    return Locks(exclusive=_names(SESSION, session_ids))


@functools.lru_cache(maxsize=1024)
def _one_session(session_id: str) -> Locks:
    # the common case (an append, a title, a token count): built once per session
    return Locks(exclusive=_names(SESSION, (session_id,)))


def title(text: str | None) -> Locks:
    """A title being claimed (None: clearing a title claims nothing)."""
    return Locks(exclusive=_names(TITLE, [text]))


def prompt_users(*hashes) -> Locks:
    """System prompt rows being stored or referenced (shared with other users)."""
    return Locks(shared=_names(PROMPT, hashes))


def prompt_dropper(*hashes) -> Locks:
    """System prompt rows being deleted as unreferenced (alone)."""
    return Locks(exclusive=_names(PROMPT, hashes))


def telegram_chat(chat_id) -> Locks:
    return Locks(exclusive=_names(TELEGRAM_CHAT, [chat_id]))


def routing_scope(scope: str) -> Locks:
    # the default scope is "": a name of its own, not "no lock"
    return Locks(exclusive=[(ROUTING_SCOPE, str(scope))])


class HeldLocks:
    """What one attempt of a unit holds so far (kept by the unit runner while it runs;
    an engine's lock statement asks it what is still missing)."""

    __slots__ = ("alone", "store_shared", "exclusive", "shared")

    def __init__(self) -> None:
        self.alone = False
        self.store_shared = False
        self.exclusive: set[tuple[str, str]] = set()
        self.shared: set[tuple[str, str]] = set()

    def missing(self, wanted: Locks) -> Locks | None:
        """The part of ``wanted`` not held yet (None when nothing is missing). Holding
        the store alone covers everything; a name held exclusively covers its shared
        use."""
        if self.alone:
            return None
        if wanted.alone:
            return STORE
        exclusive = wanted.exclusive - self.exclusive
        shared = wanted.shared - self.exclusive - self.shared
        if not exclusive and not shared and self.store_shared:
            return None
        return Locks(exclusive=exclusive, shared=shared)

    def add(self, taken: Locks) -> None:
        if taken.alone:
            self.alone = True
            return
        self.store_shared = True
        self.exclusive |= taken.exclusive
        self.shared |= taken.shared


__all__ = [
    "HeldLocks", "Locks", "ROWS", "STORE", "prompt_dropper", "prompt_users", "routing_scope",
    "sessions", "telegram_chat", "title",
]
