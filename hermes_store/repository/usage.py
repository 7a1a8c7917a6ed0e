"""Usage concern: token/cost counters on ``sessions`` and the per-model, per-task
breakdown in ``session_model_usage``.

The ``sessions`` row keeps one summary (one model, one billing route); the breakdown
table keeps every (model, provider, base_url, mode, task) a session used, so a
mid-session ``/model`` switch or an auxiliary call (vision, compression, …) is
attributed correctly. Both are written in the same unit, so they never disagree.
"""

from __future__ import annotations

import time
from functools import lru_cache

import sqlalchemy as sa

from .. import schema, unit_locks
from ..backends.base import backend_of
from .base import RepositoryBase
from ..sql.prebuilt import Prebuilt

S = schema.sessions
U = schema.session_model_usage

_TOKEN_FIELDS = (
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
    "reasoning_tokens",
)
_ROUTE_FIELDS = ("model", "billing_provider", "billing_base_url", "billing_mode")

# Statements built once (``Prebuilt``; the UPDATE and the upsert once per shape of the
# call): built per call they cost more client CPU than the call's round trips.
# Parameter names carry a ``p_`` prefix: SQLAlchemy reserves a column's own name in the
# VALUES/SET of its table.
_SID = sa.bindparam("p_sid", type_=sa.Text)
_ACCOUNTING = Prebuilt(sa.select(*(S.c[name] for name in (*_ROUTE_FIELDS, "api_call_count")))
                       .where(S.c.id == _SID))
_ROUTE = Prebuilt(sa.select(*(S.c[name] for name in _ROUTE_FIELDS)).where(S.c.id == _SID))
_BARE_ROW = Prebuilt(sa.insert(S).values(
    id=_SID, source="unknown", model=sa.bindparam("p_model", type_=sa.Text),
    started_at=sa.bindparam("p_now", type_=sa.Float)))
_FILL_MODEL = Prebuilt(sa.update(S).where(S.c.id == _SID)
                       .values(model=sa.bindparam("p_model", type_=sa.Text)))


def _param(name: str) -> sa.BindParameter:
    return sa.bindparam(f"p_{name}", type_=S.c[name].type)


@lru_cache(maxsize=128)
def _counts_update(first_route: bool, filled: tuple, absolute: bool, actual: bool,
                   given: tuple) -> Prebuilt:
    """``update_token_counts``'s UPDATE for one shape of call (see there)."""
    values: dict = {}
    if first_route:
        values.update({name: _param(name) for name in _ROUTE_FIELDS})
    for name in filled:
        values[name] = sa.func.coalesce(S.c[name], _param(name))
    if absolute:
        values.update({name: _param(name) for name in
                       (*_TOKEN_FIELDS, "api_call_count", "estimated_cost_usd")})
        if actual:
            values["actual_cost_usd"] = _param("actual_cost_usd")
    else:
        for name in (*_TOKEN_FIELDS, "api_call_count", "estimated_cost_usd"):
            values[name] = sa.func.coalesce(S.c[name], 0) + _param(name)
        if actual:
            values["actual_cost_usd"] = sa.func.coalesce(S.c.actual_cost_usd, 0) + \
                _param("actual_cost_usd")
    values.update({name: _param(name) for name in given})
    return Prebuilt(sa.update(S).where(S.c.id == _SID).values(**values))


_USAGE_KEY = ("session_id", "model", "billing_provider", "billing_base_url", "billing_mode",
              "task")
_USAGE_COLUMNS = (*_USAGE_KEY, *_TOKEN_FIELDS, "api_call_count", "estimated_cost_usd",
                  "actual_cost_usd", "cost_status", "cost_source", "first_seen", "last_seen")


@lru_cache(maxsize=8)
def _usage_upsert(backend) -> Prebuilt:
    """The ``session_model_usage`` upsert in this engine's dialect (``_add_usage``)."""
    stmt = backend.insert(U).values(
        {name: sa.bindparam(f"p_{name}", type_=U.c[name].type) for name in _USAGE_COLUMNS})
    new = stmt.excluded
    return Prebuilt(stmt.on_conflict_do_update(
        index_elements=[U.c[name] for name in _USAGE_KEY],
        set_={
            **{name: U.c[name] + new[name] for name in _TOKEN_FIELDS},
            "api_call_count": U.c.api_call_count + new.api_call_count,
            "estimated_cost_usd": U.c.estimated_cost_usd + new.estimated_cost_usd,
            "actual_cost_usd": U.c.actual_cost_usd + new.actual_cost_usd,
            "cost_status": sa.func.coalesce(new.cost_status, U.c.cost_status),
            "cost_source": sa.func.coalesce(new.cost_source, U.c.cost_source),
            "last_seen": new.last_seen,
        },
    ))


def _ensure_row(conn: sa.Connection, session_id: str, model: str | None) -> tuple:
    """The session's accounting fields (model, billing provider, base URL and mode,
    API calls), creating a bare ``source='unknown'`` row first when it is missing (usage
    may arrive before a racing ``create_session``). A NULL model is filled from
    ``model`` either way."""
    rows = _ACCOUNTING.rows(conn, {"p_sid": session_id})
    if rows and not (rows[0][0] is None and model is not None):
        return tuple(rows[0])
    if not rows:
        _BARE_ROW.execute(conn, {"p_sid": session_id, "p_model": model, "p_now": time.time()})
    else:
        _FILL_MODEL.execute(conn, {"p_sid": session_id, "p_model": model})
    return tuple(_ACCOUNTING.rows(conn, {"p_sid": session_id})[0])


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
    values = {
        "p_session_id": session_id, "p_model": model, "p_billing_provider": billing_provider,
        "p_billing_base_url": billing_base_url, "p_billing_mode": billing_mode,
        "p_task": task, "p_api_call_count": api_call_count,
        "p_estimated_cost_usd": estimated_cost_usd, "p_actual_cost_usd": actual_cost_usd,
        "p_cost_status": cost_status, "p_cost_source": cost_source,
        "p_first_seen": now, "p_last_seen": now,
        **{f"p_{name}": value for name, value in tokens.items()},
    }
    _usage_upsert(backend_of(conn)).execute(conn, values)


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
            row_model, row_provider, _url, _mode, row_calls = _ensure_row(
                conn, session_id, model)
            params: dict = {"p_sid": session_id}
            first_route = (
                int(row_calls or 0) == 0 and has_usage and bool(model)
                and bool(billing_provider)
                and (row_model != model or row_provider != billing_provider)
            )
            route = {"model": model, "billing_provider": billing_provider,
                     "billing_base_url": billing_base_url, "billing_mode": billing_mode}
            filled: tuple = ()
            if first_route:
                params.update({f"p_{name}": value for name, value in route.items()})
            elif has_usage:  # fill only what is still NULL
                filled = tuple(name for name, given in route.items() if given is not None)
                params.update({f"p_{name}": route[name] for name in filled})
            params.update({f"p_{name}": value for name, value in tokens.items()})
            params["p_api_call_count"] = api_call_count or 0
            params["p_estimated_cost_usd"] = estimated_cost_usd or 0
            if actual_cost_usd is not None:
                params["p_actual_cost_usd"] = actual_cost_usd
            given = tuple(name for name, value in (
                ("cost_status", cost_status), ("cost_source", cost_source),
                ("pricing_version", pricing_version)) if value is not None)
            params.update({"p_cost_status": cost_status, "p_cost_source": cost_source,
                           "p_pricing_version": pricing_version})
            _counts_update(first_route, filled, absolute, actual_cost_usd is not None,
                           given).execute(conn, params)
            if not absolute and (any(tokens.values()) or api_call_count or estimated_cost_usd):
                stored = dict(zip(_ROUTE_FIELDS, _ROUTE.rows(conn, {"p_sid": session_id})[0]))
                _add_usage(
                    conn, session_id,
                    model=model or stored["model"] or "unknown",
                    billing_provider=billing_provider or stored["billing_provider"] or "",
                    billing_base_url=billing_base_url or stored["billing_base_url"] or "",
                    billing_mode=billing_mode or stored["billing_mode"] or "",
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
