"""Moving a file between revisions: what an open needs (:func:`ensure_schema`: a file at
head is recognised without importing Alembic), upgrade (what ``migrate.upgrade`` and an
open below head run), downgrade, stamp. Alembic is imported by the functions that run it."""

from __future__ import annotations

from pathlib import Path

from ....errors import SchemaOutOfDateError, SchemaTooNewError
from ..errors import sqlite_errors
from .head import stamped_at_head


def upgrade_hint(path: Path) -> str:
    return (f"run `hermes-store db upgrade --db {path}` (or `alembic -x db={path} upgrade "
            "head`), or open it with auto_upgrade=True")



def ensure_schema(path: Path, *, auto_upgrade: bool, read_only: bool) -> None:
    """Bring the file to head, or raise the error that says what to run."""
    if stamped_at_head(path):
        return  # the usual open: answered without importing Alembic
    from ....migrate.scripts import head as newest
    from ....migrate.scripts import same_schema_as_head
    from . import topics
    from .inspect import inspect_file

    head = newest()
    at = inspect_file(path).revision
    if at == head:
        if not read_only:
            # at head but short of an index another tool dropped: the migrations heal
            # the rows it guarded and put it back (adopt.py), whatever auto_upgrade says,
            # since no schema version changes
            with sqlite_errors(path):
                command_upgrade(path)
        return
    if (read_only or not auto_upgrade) and same_schema_as_head(at, "sqlite"):
        return  # behind only by steps that change other engines (e.g. 0030a): as at head
    if at is not None and at > head:
        raise SchemaTooNewError(
            f"{path} has schema revision {at}, newer than this hermes_store knows ({head}); "
            "it was not touched. Upgrade hermes_store to open it."
        )
    if read_only or not auto_upgrade:
        state = "has no schema yet" if at is None else f"is at schema revision {at}"
        why = "it is opened read-only" if read_only else "auto_upgrade=False"
        raise SchemaOutOfDateError(
            f"{path} {state}, head is {head}, and {why}: {upgrade_hint(path)}"
        )
    upgrade_file(path, "head")
    # Topic tables a user already opted into (e.g. in upstream Hermes) come along;
    # absent ones are never created here.
    topics.upgrade_file(path, "head", only_if_present=True)


def command_upgrade(path: Path, revision: str = "head", *, progress=None) -> None:
    """``alembic upgrade`` of the file, its adoption (``adopt.py``) first."""
    from alembic import command

    from ....migrate.scripts import config

    command.upgrade(config(path, progress=progress), revision)


def upgrade_file(path: Path, revision: str = "head", *, progress=None) -> str | None:
    """Upgrade (adopting first if needed) a file to ``revision``; returns the new revision.

    A missing file is created, owner-only (with its directory); a missing or empty one
    going to head gets the head schema in one step (``create``). A file already at the
    target is left alone, even when it is read-only.
    """
    from ....migrate.scripts import head, is_at
    from .inspect import inspect_file

    state = inspect_file(path)
    if state.kind == "alembic" and is_at(state.revision, revision):
        return state.revision
    if state.kind in ("missing", "empty") and state.writable and is_at(head(), revision):
        # a new file: the head schema in one step (D18), not every revision
        from .create import PROGRESS, create_file
        from ..files.ops import create_private_file

        create_private_file(path)
        with sqlite_errors(path):
            if create_file(path):
                if progress is not None:
                    progress(head(), PROGRESS)
                return head()
    with sqlite_errors(path):
        command_upgrade(path, revision, progress=progress)
    return inspect_file(path).revision


def downgrade_file(path: Path, revision: str) -> str | None:
    """Downgrade a file to ``revision``; returns the revision it is at afterwards."""
    from alembic import command

    from ....migrate.scripts import config
    from .inspect import inspect_file

    inspect_file(path)
    with sqlite_errors(path):
        command.downgrade(config(path), revision)
    return inspect_file(path).revision


def stamp_file(path: Path, revision: str) -> None:
    """Record ``revision`` as the file's, without running a step."""
    from alembic import command

    from ....migrate.scripts import config
    from .inspect import inspect_file

    inspect_file(path)
    with sqlite_errors(path):
        command.stamp(config(path), revision)


__all__ = ["downgrade_file", "ensure_schema", "stamp_file", "upgrade_file", "upgrade_hint"]
