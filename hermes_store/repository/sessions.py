"""Sessions concern: create/upsert, read, resolve, end/reopen, per-field updates,
counting and archiving.

System prompts are written through ``system_prompts`` (stored once per text, kept
inline too while the file is shared with a pre-v25 reader: see that module).
"""

from __future__ import annotations

import json
import time
from functools import lru_cache
from typing import Any

import sqlalchemy as sa

from .. import schema, unit_locks
from ..errors import InvalidArgumentError, SessionNotFoundError
from ..units import hold
from .base import RepositoryBase
from ..sql.constructs import like_nocase
from ..sql.prebuilt import Prebuilt
from ..sql.values import LIKE_ESCAPE, like_prefix, prompt_hash, scrub_surrogates
from .kinds import RECOVERABLE_END_REASONS, update_scoped
from .rows import as_cache_key, compression_lineage_ids, listing_filters, session_columns
from .system_prompts import drop_unreferenced_prompts, keeps_prompts_inline, store_prompt

S = schema.sessions

_SID = sa.bindparam("sid", type_=sa.Text)
#: a session's end (its first reason kept), reopening, a model switch (prebuilt: a
#: session's life calls them)
_END = Prebuilt(sa.update(S).where(S.c.id == _SID, S.c.ended_at.is_(None)).values(
    ended_at=sa.bindparam("ended_at", type_=sa.Float),
    end_reason=sa.bindparam("end_reason", type_=sa.Text)))
_REOPEN = Prebuilt(sa.update(S).where(S.c.id == _SID).values(ended_at=None, end_reason=None))
_WRITE_MODEL = Prebuilt(sa.update(S).where(S.c.id == _SID).values(
    model=sa.bindparam("model", type_=sa.Text)))
#: ``update_system_prompt``'s read of the hash it replaces, and its UPDATE
_PROMPT_HASH = Prebuilt(sa.select(S.c.system_prompt_hash).where(S.c.id == _SID))
_WRITE_PROMPT = Prebuilt(sa.update(S).where(S.c.id == _SID).values(
    system_prompt=sa.bindparam("prompt", type_=sa.Text),
    system_prompt_hash=sa.bindparam("digest", type_=sa.Text)))
#: ``update_session_meta``'s UPDATE, without and with the model (prebuilt: a turn's call)
_WRITE_META = Prebuilt(
    sa.update(S).where(S.c.id == _SID)
    .values(model_config=sa.bindparam("model_config", type_=sa.Text)))
_WRITE_META_AND_MODEL = Prebuilt(
    sa.update(S).where(S.c.id == _SID)
    .values(model_config=sa.bindparam("model_config", type_=sa.Text),
            model=sa.bindparam("model", type_=sa.Text)))

#: creation fields an existing row only takes while its value is still NULL
_ENRICHABLE = (
    "model", "model_config", "session_key", "chat_id", "chat_type", "thread_id",
    "parent_session_id", "cwd", "profile_name",
)


# Read statements built once (one compile per dialect, see sql/prebuilt.py): a
# 60-column select built per call costs SQLAlchemy more than SQLite needs to answer it.
_SESSION_ROW = Prebuilt(
    sa.select(*session_columns()).where(S.c.id == _SID)
)
_SESSION_ID = Prebuilt(sa.select(S.c.id).where(S.c.id == _SID))
#: what ``create_session`` reads of an existing row (every new session pays it)
_EXISTING = Prebuilt(
    sa.select(S.c.id, S.c.system_prompt, S.c.system_prompt_hash,
              *[S.c[name] for name in _ENRICHABLE])
    .where(S.c.id == _SID)
)


@lru_cache(maxsize=4)
def _insert_session(columns: tuple[str, ...]) -> Prebuilt:
    """The INSERT of a new session row with these columns (``create_session``'s row)."""
    return Prebuilt(sa.insert(S), column_keys=columns)


_IDS_WITH_PREFIX = Prebuilt(
    sa.select(S.c.id)
    .where(like_nocase(S.c.id, sa.bindparam("pattern", type_=sa.Text), escape=LIKE_ESCAPE))
    .order_by(S.c.started_at.desc())
    .limit(2)
)


@lru_cache(maxsize=64)
def _session_count(source, exclude_sources, cwd_prefix, min_message_count, include_archived,
                   archived_only, exclude_children) -> Prebuilt:
    """``session_count``'s statement for one set of filters (callers repeat theirs)."""
    terms = listing_filters(
        S,
        source=source,
        exclude_sources=exclude_sources,
        cwd_prefix=cwd_prefix,
        min_message_count=min_message_count,
        include_archived=include_archived,
        archived_only=archived_only,
        listable_only=exclude_children,
    )
    return Prebuilt(sa.select(sa.func.count()).select_from(S).where(*terms))


class SessionsMixin(RepositoryBase):
    def _inline_prompts(self, conn: sa.Connection) -> bool:
        """``keeps_prompts_inline``, read once per store (the marker is set at most once
        per file, by ``hermes_store.agent`` when it opens the file)."""
        flag = self.__dict__.get("_inline_prompts_flag")
        if flag is None:
            flag = self.__dict__["_inline_prompts_flag"] = keeps_prompts_inline(conn)
        return flag

    # ------------------------------------------------------------------ create / upsert

    def create_session(
        self,
        session_id: str,
        source: str,
        *,
        model: str | None = None,
        model_config: dict | None = None,
        system_prompt: str | None = None,
        user_id: str | None = None,
        session_key: str | None = None,
        chat_id: str | None = None,
        chat_type: str | None = None,
        thread_id: str | None = None,
        parent_session_id: str | None = None,
        cwd: str | None = None,
        profile_name: str | None = None,
    ) -> str:
        """Create the session, or fill the still-NULL fields of an existing one.

        ``source``, ``user_id`` and ``started_at`` of an existing row never change.
        Returns ``session_id``.
        """
        fields = {
            "model": model,
            "model_config": json.dumps(model_config) if model_config else None,
            "system_prompt": system_prompt,
            "user_id": user_id,
            "session_key": session_key,
            "chat_id": chat_id,
            "chat_type": chat_type,
            "thread_id": thread_id,
            "parent_session_id": parent_session_id,
            "cwd": cwd,
            "profile_name": profile_name,
        }
        # the parent must still exist when the child links to it (a delete holds it)
        locks = unit_locks.sessions(session_id, parent_session_id)
        if system_prompt is not None:
            locks |= unit_locks.prompt_users(prompt_hash(scrub_surrogates(system_prompt)))
        self._write(lambda conn: self._upsert_session(conn, session_id, source, fields),
                    locks=locks)
        return session_id

    def ensure_session(
        self, session_id: str, source: str = "unknown", model: str | None = None, **kwargs
    ) -> str:
        """``create_session`` with a default source, for callers that only need the row."""
        return self.create_session(session_id, source, model=model, **kwargs)

    def _upsert_session(
        self, conn: sa.Connection, session_id: str, source: str, fields: dict[str, Any]
    ) -> None:
        if not session_id or not isinstance(session_id, str):
            raise InvalidArgumentError("session_id must be a non-empty string")
        fields = {k: scrub_surrogates(v) for k, v in fields.items()}
        found = _EXISTING.rows(conn, {"sid": session_id})
        existing = dict(zip(_EXISTING.keys, found[0])) if found else None
        parent = fields.get("parent_session_id")
        if parent and (existing is None or existing["parent_session_id"] is None):
            if _SESSION_ID.scalar(conn, {"sid": parent}) is None:
                raise SessionNotFoundError(parent)
        prompt = fields.pop("system_prompt")
        if existing is None:
            if not source:
                raise InvalidArgumentError(
                    "source is required to create a session (e.g. 'cli', 'telegram')"
                )
            row = {"id": session_id, "source": scrub_surrogates(source),
                   "started_at": time.time(), **fields,
                   "system_prompt": None, "system_prompt_hash": None}
            if prompt is not None:  # "" is a prompt too; only None means none
                row["system_prompt_hash"] = store_prompt(conn, prompt)
                if self._inline_prompts(conn):
                    row["system_prompt"] = prompt
            _insert_session(tuple(row)).execute(conn, row)
            return
        fill = {
            name: fields[name]
            for name in _ENRICHABLE
            if fields.get(name) is not None and existing[name] is None
        }
        if (prompt is not None and existing["system_prompt"] is None
                and existing["system_prompt_hash"] is None):
            fill["system_prompt_hash"] = store_prompt(conn, prompt)
            if self._inline_prompts(conn):
                fill["system_prompt"] = prompt
        if fill:
            stmt = sa.update(S).where(S.c.id == session_id).values(**fill)
            if "model_config" in fill:  # it may make the session a delegate run
                update_scoped(conn, session_id, lambda c: c.execute(stmt))
            else:
                conn.execute(stmt)

    # ------------------------------------------------------------------ read

    def get_session(self, session_id: str) -> dict[str, Any] | None:
        """The full session row as a dict, or None."""
        rows = self._query(_SESSION_ROW, {"sid": session_id})
        return dict(zip(_SESSION_ROW.keys, rows[0])) if rows else None

    def resolve_session_id(self, session_id_or_prefix: str) -> str | None:
        """The exact id, else the only id starting with the given prefix, else None."""
        with self._read() as conn:
            exact = _SESSION_ID.scalar(conn, {"sid": session_id_or_prefix})
            if exact is not None:
                return exact
            matches = _IDS_WITH_PREFIX.rows(conn, {"pattern": like_prefix(session_id_or_prefix)})
        return matches[0][0] if len(matches) == 1 else None

    def session_count(
        self,
        source: str | None = None,
        cwd_prefix: str | None = None,
        min_message_count: int = 0,
        include_archived: bool = False,
        archived_only: bool = False,
        exclude_children: bool = False,
        exclude_sources: list[str] | None = None,
    ) -> int:
        """How many sessions match; archived rows are left out unless asked for."""
        args = (source, exclude_sources, cwd_prefix, min_message_count, include_archived,
                archived_only, exclude_children)
        try:
            statement = _session_count(*args[:1], as_cache_key(exclude_sources), *args[2:])
        except TypeError:  # an unhashable argument: build it anyway, so its error shows
            statement = _session_count.__wrapped__(*args)
        return self._query(statement)[0][0]

    # ------------------------------------------------------------------ lifecycle

    def end_session(self, session_id: str, end_reason: str | None) -> None:
        """Mark the session ended; an already ended session keeps its first reason."""
        values = {"sid": session_id, "ended_at": time.time(), "end_reason": end_reason}
        self._write(lambda conn: _END.execute(conn, values), locks=unit_locks.sessions(session_id))

    def reopen_session(self, session_id: str) -> None:
        """Clear ``ended_at``/``end_reason`` so the session can be resumed (and ended again)."""
        values = {"sid": session_id}
        self._write(lambda conn: _REOPEN.execute(conn, values),
                    locks=unit_locks.sessions(session_id))

    def promote_to_session_reset(self, session_id: str, reason: str = "session_reset") -> bool:
        """End a live (or accidentally closed) session as a deliberate reset.

        True when the row changed. Explicit earlier reasons (compression, …) win.
        """
        if not session_id:
            return False
        stmt = (
            sa.update(S)
            .where(
                S.c.id == session_id,
                sa.or_(S.c.ended_at.is_(None), S.c.end_reason.in_(RECOVERABLE_END_REASONS)),
            )
            .values(ended_at=time.time(), end_reason=reason)
        )
        return self._write(lambda conn: conn.execute(stmt).rowcount,
                           locks=unit_locks.sessions(session_id)) > 0

    # ------------------------------------------------------------------ field updates

    def update_system_prompt(self, session_id: str, system_prompt: str | None) -> None:
        """Replace the session's system prompt (stored once per distinct text)."""
        prompt = scrub_surrogates(system_prompt)

        def unit(conn: sa.Connection) -> None:
            old = _PROMPT_HASH.rows(conn, {"sid": session_id})
            if not old:
                return
            digest = store_prompt(conn, prompt) if prompt is not None else None
            inline = prompt if digest is not None and self._inline_prompts(conn) else None
            _WRITE_PROMPT.execute(conn, {"sid": session_id, "prompt": inline, "digest": digest})
            if old[0][0] != digest:
                drop_unreferenced_prompts(conn, [old[0][0]])

        locks = unit_locks.sessions(session_id)
        if prompt is not None:
            locks |= unit_locks.prompt_users(prompt_hash(prompt))
        self._write(unit, locks=locks)

    def update_session_model(self, session_id: str, model: str) -> None:
        """Overwrite the model (a mid-session ``/model`` switch)."""
        values = {"sid": session_id, "model": model}
        self._write(lambda conn: _WRITE_MODEL.execute(conn, values),
                    locks=unit_locks.sessions(session_id))

    def update_session_meta(
        self, session_id: str, model_config_json: str, model: str | None = None
    ) -> None:
        """Overwrite ``model_config`` (JSON text); the model only when given."""
        statement = _WRITE_META if model is None else _WRITE_META_AND_MODEL
        values = {"sid": session_id, "model_config": model_config_json,
                  "model": model}
        self._write(lambda conn: update_scoped(conn, session_id,
                                               lambda c: statement.execute(c, values)),
                    locks=unit_locks.sessions(session_id))

    def update_session_billing_route(
        self,
        session_id: str,
        *,
        provider: str,
        base_url: str,
        billing_mode: str | None = None,
    ) -> None:
        """Overwrite the billing route and drop the cached system prompt, whose header
        names the old model/provider and must be rebuilt."""
        values: dict[str, Any] = {
            "billing_provider": provider,
            "billing_base_url": base_url,
            "system_prompt": None,
            "system_prompt_hash": None,
        }
        if billing_mode is not None:
            values["billing_mode"] = billing_mode

        def unit(conn: sa.Connection) -> None:
            old = conn.execute(
                sa.select(S.c.system_prompt_hash).where(S.c.id == session_id)
            ).scalar()
            conn.execute(sa.update(S).where(S.c.id == session_id).values(**values))
            drop_unreferenced_prompts(conn, [old])

        self._write(unit, locks=unit_locks.sessions(session_id))

    def update_session_cwd(
        self,
        session_id: str,
        cwd: str,
        git_branch: str | None = None,
        git_repo_root: str | None = None,
    ) -> None:
        """Record the working directory; branch and repo root only when non-blank
        (a failed git probe must not erase what an earlier probe found)."""
        if not session_id or not cwd:
            return
        values: dict[str, Any] = {"cwd": cwd}
        if (git_branch or "").strip():
            values["git_branch"] = git_branch.strip()
        if (git_repo_root or "").strip():
            values["git_repo_root"] = git_repo_root.strip()
        stmt = sa.update(S).where(S.c.id == session_id).values(**values)
        self._write(lambda conn: conn.execute(stmt), locks=unit_locks.sessions(session_id))

    def backfill_repo_roots(self, cwd_to_root: dict[str, str]) -> None:
        """Fill ``git_repo_root`` from a ``{cwd: root}`` map where it is still blank."""
        pairs = [(cwd, root) for cwd, root in cwd_to_root.items() if cwd and root]
        if not pairs:
            return

        def unit(conn: sa.Connection) -> None:
            blank = sa.or_(S.c.git_repo_root.is_(None), S.c.git_repo_root == "")
            for cwd, root in pairs:
                conn.execute(
                    sa.update(S).where(S.c.cwd == cwd, blank).values(git_repo_root=root)
                )

        # sessions chosen by their cwd, anywhere in the store: runs alone
        self._write(unit, locks=unit_locks.STORE)

    def set_expiry_finalized(self, session_id: str, finalized: bool = True) -> None:
        stmt = (
            sa.update(S).where(S.c.id == session_id)
            .values(expiry_finalized=1 if finalized else 0)
        )
        self._write(lambda conn: conn.execute(stmt), locks=unit_locks.sessions(session_id))

    # ------------------------------------------------------------------ archive

    def set_session_archived(self, session_id: str, archived: bool) -> bool:
        """Archive or unarchive the session's whole compression lineage.

        Archiving only the visible tip would let the still-unarchived root bring the
        conversation back in listings. True when at least one row changed.
        """
        def unit(conn: sa.Connection) -> int:
            ids = compression_lineage_ids(conn, session_id)
            if not ids:
                return 0
            hold(conn, unit_locks.sessions(*ids))  # every session it changes
            return conn.execute(
                sa.update(S).where(S.c.id.in_(ids)).values(archived=1 if archived else 0)
            ).rowcount

        return self._write(unit, locks=unit_locks.sessions(session_id)) > 0

