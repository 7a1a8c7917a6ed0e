"""Moving a file between revisions: upgrade (what ``migrate.upgrade`` and an open below
head run), downgrade, stamp."""

from __future__ import annotations

from pathlib import Path

from alembic import command

from ....migrate.scripts import config, head, is_at
from ..errors import sqlite_errors
from .inspect import inspect_file


def upgrade_file(path: Path, revision: str = "head", *, progress=None) -> str | None:
    """Upgrade (adopting first if needed) a file to ``revision``; returns the new revision.

    A missing file is created, owner-only (with its directory); a missing or empty one
    going to head gets the head schema in one step (``create``). A file already at the
    target is left alone, even when it is read-only.
    """
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
        command.upgrade(config(path, progress=progress), revision)
    return inspect_file(path).revision


def downgrade_file(path: Path, revision: str) -> str | None:
    """Downgrade a file to ``revision``; returns the revision it is at afterwards."""
    inspect_file(path)
    with sqlite_errors(path):
        command.downgrade(config(path), revision)
    return inspect_file(path).revision


def stamp_file(path: Path, revision: str) -> None:
    """Record ``revision`` as the file's, without running a step."""
    inspect_file(path)
    with sqlite_errors(path):
        command.stamp(config(path), revision)


__all__ = ["downgrade_file", "stamp_file", "upgrade_file"]
