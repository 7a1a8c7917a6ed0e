"""What every command shares: the global options, opening the store, error -> exit code."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Iterator

import typer
from typer.core import TyperGroup

from .. import errors
from ..paths import default_db_path
from . import output
from .output import Output

JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document (for scripts).")]
YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]


@dataclass
class State:
    db: Path
    json: bool = False


def state(ctx: typer.Context) -> State:
    root = ctx.find_root()
    if not isinstance(root.obj, State):
        root.obj = State(default_db_path())
    return root.obj


def out(ctx: typer.Context, json_flag: bool = False) -> Output:
    """The command's Output; ``--json`` counts whether given globally or on the command."""
    st = state(ctx)
    return Output(st.json or json_flag)


def require_file(path: Path) -> None:
    if not path.exists():
        raise errors.StoreNotFoundError(
            f"no database at {path}; create it with `hermes-store db upgrade` or pass --db PATH"
        )


@contextlib.contextmanager
def open_store(path: Path, *, write: bool = False) -> Iterator:
    """A SessionDB on ``path``; closed on exit.

    Commands that only read open it read-only: they never change the file, so a
    store below head is refused with the command to run (``db upgrade``) instead of
    being upgraded behind the operator's back. Commands that write open it normally,
    which adopts and upgrades an older file first (decision D5) and creates a
    missing one.
    """
    from ..store import SessionDB

    if not write:
        require_file(path)
    db = SessionDB(path, read_only=not write)
    try:
        yield db
    finally:
        db.close()


def confirm(question: str, *, yes: bool, out: Output) -> None:
    """Ask unless ``--yes``; a "no" (or no terminal to ask on) exits with EXIT_CANCELLED."""
    if yes:
        return
    try:
        agreed = typer.confirm(question, default=False, err=True)
    except typer.Abort:  # Ctrl-C, or no input at all (stdin closed)
        agreed = False
        out.err.print()
    if not agreed:
        out.warn("Cancelled; nothing was changed. (Pass --yes to skip this question.)")
        raise typer.Exit(output.EXIT_CANCELLED)


def exit_code_for(exc: BaseException) -> int:
    if isinstance(exc, (errors.SessionNotFoundError, FileNotFoundError)):
        return output.EXIT_NOT_FOUND
    if isinstance(exc, (errors.DatabaseDamagedError, errors.NotADatabaseError)):
        return output.EXIT_DAMAGED
    if isinstance(exc, errors.SchemaError):
        return output.EXIT_SCHEMA
    if isinstance(exc, errors.StoreBusyError):
        return output.EXIT_BUSY
    if isinstance(exc, ValueError):  # TitleError, ImportFileError: bad input
        return output.EXIT_USAGE
    return output.EXIT_ERROR


class HermesGroup(TyperGroup):
    """Turns the package's errors into one clear line on stderr and a documented exit
    code, for every subcommand (the root group's invoke wraps them all)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except errors.HermesStoreError as exc:
            if ctx.parent is not None:  # only the root reports, once
                raise
            output.Output(False).error(str(exc))
            raise typer.Exit(exit_code_for(exc)) from None
