"""The engines behind the store, one package each, chosen once per store (decision D17).

What differs between SQLite and PostgreSQL lives behind one interface,
:class:`~hermes_store.backends.base.Backend` (as Alembic's ``DefaultImpl`` with its
``SQLiteImpl``/``PostgresqlImpl``): ``backends/sqlite/`` and ``backends/postgresql/``
each implement all of it and never import each other. The rest of the package — the
core — asks :func:`get` (by a target's ``backend`` name), :func:`of` (a target, an
engine, a connection or a dialect) for the backend and calls it; it never tests a
dialect's name and never imports a driver.

A backend's package is imported on first use, from its name in :data:`PACKAGES`, so a
process that only opens SQLite files never imports the PostgreSQL side (nor psycopg).
A third engine is one more package implementing ``Backend`` and one more line here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .base import Backend

#: backend name (a SQLAlchemy dialect name) -> the package that implements it
PACKAGES = {
    "sqlite": "hermes_store.backends.sqlite",
    "postgresql": "hermes_store.backends.postgresql",
}

_loaded: dict[str, "Backend"] = {}


def get(name: str) -> "Backend":
    """The backend called ``name`` (a ``Target.backend``, or a dialect's name)."""
    try:
        return _loaded[name]
    except KeyError:
        pass
    try:
        package = PACKAGES[name]
    except KeyError:
        from ..errors import UnsupportedBackendError

        raise UnsupportedBackendError(
            f"no hermes_store backend for the database {name!r} (known: "
            f"{', '.join(sorted(PACKAGES))})"
        ) from None
    backend = _loaded[name] = importlib.import_module(package).BACKEND
    return backend


def of_dialect(dialect) -> "Backend":
    """The backend of a SQLAlchemy ``Dialect`` (the hot paths' lookup: one dict get)."""
    backend = _loaded.get(dialect.name)
    return backend if backend is not None else get(dialect.name)


def of(thing) -> "Backend":
    """The backend of a ``Target``, an ``Engine``, a ``Connection`` or a ``Dialect``."""
    backend = getattr(thing, "backend", None)
    if isinstance(backend, str):  # a location.Target
        return get(backend)
    dialect = getattr(thing, "dialect", thing)  # Engine, Connection -> their dialect
    return get(dialect.name)


def loaded() -> list[str]:
    """The backends this process has imported so far (for tests and ``status``)."""
    return sorted(_loaded)


__all__ = ["PACKAGES", "get", "loaded", "of", "of_dialect"]
