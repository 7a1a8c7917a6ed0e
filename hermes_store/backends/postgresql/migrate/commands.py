"""Moving a PostgreSQL database between revisions: upgrade (an empty one starts from the
baseline), downgrade and stamp, never below the baseline; what ``SessionDB`` needs at open."""

from __future__ import annotations

from alembic import command
from alembic.script import ScriptDirectory

from .... import errors, location
from ....location import Target
from ....migrate.scripts import (
    config,
    head,
    is_at,
    scripts,
)
from .create import BASELINE
from .inspect import current


def _config(target: Target, progress=None):
    return config(target=target, progress=progress)


def upgrade(target: Target, revision: str = "head", *, progress=None) -> str | None:
    """Upgrade to ``revision`` (an empty database starts from the baseline); returns the
    revision reached. A database already there is left alone (no lock, no DDL)."""
    if is_at(current(target), revision):
        return revision if revision not in ("head", "heads") else head()
    command.upgrade(_config(target, progress), revision)
    return current(target)


def downgrade(target: Target, revision: str) -> str | None:
    """Downgrade to ``revision``; below the baseline (``0030``) is refused."""
    command.downgrade(_config(target), revision)
    return current(target)


def refuse_below_baseline(target: Target, revision: str) -> None:
    """Raise the error :func:`downgrade` would raise for a revision below the baseline
    (or ``base``), before anything is asked or run."""
    if revision == "base" or revision in below_baseline(scripts()):
        raise refusal(target, f"cannot downgrade below {BASELINE}")


def stamp(target: Target, revision: str) -> None:
    command.stamp(_config(target), revision)


def ensure_schema(target: Target, *, auto_upgrade: bool = True, read_only: bool = False) -> None:
    """Bring the database to head, or raise the error that says what to run (what
    ``SessionDB`` does at open, as ``store.ensure_schema`` for a file)."""
    newest = head()
    at = current(target)
    if at == newest:
        return
    if read_only or not auto_upgrade:
        state = "has no schema yet" if at is None else f"is at schema revision {at}"
        why = "it is opened read-only" if read_only else "auto_upgrade=False"
        raise errors.SchemaOutOfDateError(
            f"{target.display} {state}, head is {newest}, and {why}: "
            f"{location.upgrade_hint(target)}"
        )
    upgrade(target, "head")




def below_baseline(scripts: ScriptDirectory) -> frozenset[str]:
    """Revisions older than the baseline (they never run on PostgreSQL)."""
    older = {r.revision for r in scripts.iterate_revisions(BASELINE, "base")}
    older.discard(BASELINE)
    return frozenset(older)


def refusal(target: Target, what: str) -> errors.SchemaError:
    return errors.SchemaError(
        f"{target.display}: {what}. A PostgreSQL database starts at revision {BASELINE} "
        f"(the head schema of schema version 30, in one step); revisions before {BASELINE} "
        "exist for SQLite files only"
    )
