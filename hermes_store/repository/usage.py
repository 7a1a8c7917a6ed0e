"""Usage concern: token/cost counters on ``sessions`` and the per-model, per-task
breakdown in ``session_model_usage``.

The ``sessions`` row keeps one summary (one model, one billing route); the breakdown
table keeps every (model, provider, base_url, mode, task) a session used, so a
mid-session ``/model`` switch or an auxiliary call (vision, compression, …) is
attributed correctly. Both are written in the same unit, so they never disagree.
"""

from __future__ import annotations

import time

import sqlalchemy as sa

from .. import schema, unit_locks
from .base import RepositoryBase
from .dialect import insert_for

S = schema.sessions
U = schema.session_model_usage

_TOKEN_FIELDS = (
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
    "reasoning_tokens",
)


def _ensure_row(conn: sa.Connection, session_id: str, model: str | None):
    """The session's accounting fields, creating a bare ``source='unknown'`` row first
    when it is missing (usage may arrive before a racing ``create_session``). A NULL
    model is filled from ``model`` either way."""
    fields = (S.c.model, S.c.billing_provider, S.c.billing_base_url, S.c.billing_mode,
              S.c.api_call_count)
    row = conn.execute(sa.select(*fields).where(S.c.id == session_id)).first()
    if row is None:
        conn.execute(sa.insert(S).values(
            id=session_id, source="unknown", model=model, started_at=time.time()
        ))
    elif row.model is None and model is not None:
        conn.execute(sa.update(S).where(S.c.id == session_id).values(model=model))
    return conn.execute(sa.select(*fields).where(S.c.id == session_id)).one()


def _add_usage(
    conn: sa.Connection,
    session_id: str,
    *,
    model: str,
    billing_provider: str,
    billing_base_url: str,
    billing_mode: str,
    task: str,
    tokens: dict[str, int],
    api_call_count: int,
    estimated_cost_usd: float,
    actual_cost_usd: float,
    cost_status: str | None,
    cost_source: str | None,
) -> None:
    now = time.time()
    stmt = insert_for(conn, U).values(
        session_id=session_id, model=model, billing_provider=billing_provider,
        billing_base_url=billing_base_url, billing_mode=billing_mode, task=task,
        api_call_count=api_call_count, estimated_cost_usd=estimated_cost_usd,
        actual_cost_usd=actual_cost_usd, cost_status=cost_status, cost_source=cost_source,
        first_seen=now, last_seen=now, **tokens,
    )
    new = stmt.excluded
    stmt = stmt.on_conflict_do_update(
        index_elements=[U.c.session_id, U.c.model, U.c.billing_provider,
                        U.c.billing_base_url, U.c.billing_mode, U.c.task],
        set_={
            **{name: U.c[name] + new[name] for name in _TOKEN_FIELDS},
            "api_call_count": U.c.api_call_count + new.api_call_count,
            "estimated_cost_usd": U.c.estimated_cost_usd + new.estimated_cost_usd,
            "actual_cost_usd": U.c.actual_cost_usd + new.actual_cost_usd,
            "cost_status": sa.func.coalesce(new.cost_status, U.c.cost_status),
            "cost_source": sa.func.coalesce(new.cost_source, U.c.cost_source),
            "last_seen": new.last_seen,
        },
    )
    conn.execute(stmt)


class UsageMixin(RepositoryBase):
    def update_token_counts(
        self,
        session_id: str,
        input_tokens: int = 0,
        output_tokens: int = 0,
        model: str | None = None,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        estimated_cost_usd: float | None = None,
        actual_cost_usd: float | None = None,
        cost_status: str | None = None,
        cost_source: str | None = None,
        pricing_version: str | None = None,
        billing_provider: str | None = None,
        billing_base_url: str | None = None,
        billing_mode: str | None = None,
        api_call_count: int = 0,
        absolute: bool = False,
    ) -> None:
        """Add one API call's usage (default) or set cumulative totals (``absolute``).

        Creates a missing session (``source='unknown'``). Model and billing route
        fill only NULL fields, except on the first accounted call, where a fallback
        route that actually served the call replaces the requested one.
        Incremental calls with usage also add to ``session_model_usage``.
        """
        tokens = {
            "input_tokens": input_tokens or 0,
            "output_tokens": output_tokens or 0,
            "cache_read_tokens": cache_read_tokens or 0,
            "cache_write_tokens": cache_write_tokens or 0,
            "reasoning_tokens": reasoning_tokens or 0,
        }
        has_usage = bool(any(tokens.values()) or api_call_count
                         or estimated_cost_usd or actual_cost_usd)

        def unit(conn: sa.Connection) -> None:
            row = _ensure_row(conn, session_id, model)
            values: dict = {}
            first_route = (
                int(row.api_call_count or 0) == 0 and has_usage and bool(model)
                and bool(billing_provider)
                and (row.model != model or row.billing_provider != billing_provider)
            )
            if first_route:
                values.update(model=model, billing_provider=billing_provider,
                              billing_base_url=billing_base_url, billing_mode=billing_mode)
            elif has_usage:
                for name, given in (("model", model), ("billing_provider", billing_provider),
                                    ("billing_base_url", billing_base_url),
                                    ("billing_mode", billing_mode)):
                    if given is not None:
                        values[name] = sa.func.coalesce(S.c[name], given)
            if absolute:
                values.update(tokens)
                values["api_call_count"] = api_call_count
                values["estimated_cost_usd"] = estimated_cost_usd or 0
                if actual_cost_usd is not None:
                    values["actual_cost_usd"] = actual_cost_usd
            else:
                for name, delta in tokens.items():
                    values[name] = sa.func.coalesce(S.c[name], 0) + delta
                values["api_call_count"] = sa.func.coalesce(S.c.api_call_count, 0) + (
                    api_call_count or 0)
                values["estimated_cost_usd"] = (
                    sa.func.coalesce(S.c.estimated_cost_usd, 0) + (estimated_cost_usd or 0))
                if actual_cost_usd is not None:
                    values["actual_cost_usd"] = (
                        sa.func.coalesce(S.c.actual_cost_usd, 0) + actual_cost_usd)
            for name, given in (("cost_status", cost_status), ("cost_source", cost_source),
                                ("pricing_version", pricing_version)):
                if given is not None:
                    values[name] = given
            conn.execute(sa.update(S).where(S.c.id == session_id).values(**values))
            if not absolute and (any(tokens.values()) or api_call_count or estimated_cost_usd):
                route = conn.execute(
                    sa.select(S.c.model, S.c.billing_provider, S.c.billing_base_url,
                              S.c.billing_mode).where(S.c.id == session_id)
                ).one()
                _add_usage(
                    conn, session_id,
                    model=model or route.model or "unknown",
                    billing_provider=billing_provider or route.billing_provider or "",
                    billing_base_url=billing_base_url or route.billing_base_url or "",
                    billing_mode=billing_mode or route.billing_mode or "",
                    task="",
                    tokens=tokens,
                    api_call_count=api_call_count or 0,
                    estimated_cost_usd=float(estimated_cost_usd or 0.0),
                    actual_cost_usd=float(actual_cost_usd or 0.0),
                    cost_status=cost_status,
                    cost_source=cost_source,
                )

        self._write(unit, locks=unit_locks.sessions(session_id))

    def record_auxiliary_usage(
        self,
        session_id: str,
        task: str,
        *,
        model: str | None = None,
        billing_provider: str | None = None,
        billing_base_url: str | None = None,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        estimated_cost_usd: float | None = None,
    ) -> None:
        """Record one auxiliary LLM call (vision, compression, …) under its task.

        Only ``session_model_usage`` changes: the session's summary counters hold
        main-loop totals (which the gateway overwrites absolutely). An aux call never
        borrows the session's model/route — unknown stays ``'unknown'``/``''``.
        No-op without a session id or task.
        """
        if not session_id or not task:
            return
        tokens = {
            "input_tokens": input_tokens or 0,
            "output_tokens": output_tokens or 0,
            "cache_read_tokens": cache_read_tokens or 0,
            "cache_write_tokens": cache_write_tokens or 0,
            "reasoning_tokens": reasoning_tokens or 0,
        }

        def unit(conn: sa.Connection) -> None:
            _ensure_row(conn, session_id, None)
            _add_usage(
                conn, session_id,
                model=model or "unknown",
                billing_provider=billing_provider or "",
                billing_base_url=billing_base_url or "",
                billing_mode="",
                task=task,
                tokens=tokens,
                api_call_count=1,
                estimated_cost_usd=float(estimated_cost_usd or 0.0),
                actual_cost_usd=0.0,
                cost_status=None,
                cost_source=None,
            )

        self._write(unit, locks=unit_locks.sessions(session_id))
