"""What every command shares: the global options, the database they work on (a SQLite
file or a PostgreSQL URL), opening the store, error -> exit code.

``--db`` is kept as typed and resolved by ``hermes_store.location`` on first use, so
``--help`` and SQLite commands never import the PostgreSQL side (psycopg,
``hermes_store.backends.postgresql``), and a URL is never turned into a path.
"""

from __future__ import annotations

import contextlib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Callable, Iterator

import typer
from typer.core import TyperGroup

from .. import errors
from ..paths import expand_home
from . import output
from .output import Output

if TYPE_CHECKING:
    from ..location import Target

JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document (for scripts).")]
YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]


@dataclass
class State:
    #: ``--db`` as given (a path or a URL); None: ``$HERMES_STATE_DATABASE_URL``, else
    #: the default file
    given: str | None = None
    json: bool = False
    _target: "Target | None" = field(default=None, repr=False)

    @property
    def target(self) -> "Target":
        """The database the command works on (resolved once; URL errors raise here)."""
        if self._target is None:
            from ..location import resolve

            self._target = resolve(self.given)
        return self._target


def backend_for(target: "Target"):
    """The target's backend: the CLI's one call of the registry (``backends.base.get``),
    made where a command opens what ``--db`` names."""
    from ..backends.base import get

    return get(target.backend)


def state(ctx: typer.Context) -> State:
    root = ctx.find_root()
    if not isinstance(root.obj, State):
        root.obj = State()
    return root.obj


class SQLiteOnlyError(errors.InvalidArgumentError):
    """A command that works on SQLite files was pointed at a PostgreSQL database."""


def sqlite_file(ctx: typer.Context, command: str, instead: str) -> Path:
    """The SQLite file of a command that only makes sense for one (backup, recover,
    repair); on a PostgreSQL database, :class:`SQLiteOnlyError` (exit 2) saying what to
    use there instead."""
    target = state(ctx).target
    if target.is_file:
        return target.path
    raise SQLiteOnlyError(
        f"`hermes-store {command}` works on SQLite files only, and {target.display} is a "
        f"PostgreSQL database: {instead}"
    )


#: a URL (``scheme://``), or what a path made of one (``postgresql+psycopg:/…``)
_URL_LIKE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]+:/")  # two letters at least: not C:/


def local_path(what: str, instead: str = "") -> Callable[[str], Path]:
    """A parser for an option or argument that names a local file: a database URL
    there is refused (exit 2) instead of becoming a path (``Path`` would collapse the
    ``//`` and create a directory named after the scheme)."""

    def parse(value: str) -> Path:
        if isinstance(value, Path):  # a default
            return value
        if _URL_LIKE.match(value):
            from ..location import mask

            raise typer.BadParameter(
                f"{mask(value)} is a URL; {what} is a local file path"
                + (f" ({instead})" if instead else "")
            )
        return expand_home(value).absolute()

    return parse


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
def open_store(target: "Target", *, write: bool = False) -> Iterator:
    """A SessionDB on ``target`` (a SQLite file or a PostgreSQL database); closed on exit.

    Commands that only read open it read-only: they never change the database, so a
    store below head is refused with the command to run (``db upgrade``) instead of
    being upgraded behind the operator's back (on PostgreSQL every transaction is
    read-only on the server too). Commands that write open it normally, which adopts
    and upgrades an older file first (decision D5) and creates a missing one (a
    missing PostgreSQL database is an error: the server's administrator creates it).
    """
    from .. import SessionDB

    if not write and target.is_file:
        require_file(target.path)
    db = SessionDB(target, read_only=not write)
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
        except Exception as exc:
            mapped = None if ctx.parent is not None else _translated(exc, ctx)
            if mapped is None:
                raise
            output.Output(False).error(str(mapped))
            raise typer.Exit(exit_code_for(mapped)) from None


def _translated(exc: BaseException, ctx) -> errors.HermesStoreError | None:
    """A driver error that reached the CLI unmapped, as the package's error naming the
    database (password masked): the driver's own message on one line rather than a
    traceback. None for anything else."""
    sa_exc = getattr(sys.modules.get("sqlalchemy"), "exc", None)  # loaded if it raised
    if sa_exc is None or not isinstance(exc, sa_exc.DBAPIError):
        return None
    from ..backends.base import get, loaded

    root = ctx.find_root().obj
    target = root.target if isinstance(root, State) and root._target is not None else None
    where = target if target is not None else "database"
    candidates = [backend_for(target)] if target is not None else [
        get(name) for name in loaded()]
    mapped = next((m for m in (b.translate_error(exc, where) for b in candidates)
                   if m is not None), None)
    if isinstance(mapped, errors.HermesStoreError):
        return mapped
    orig = getattr(exc, "orig", None) or exc
    first = " ".join(str(orig).split("\n")[0].split())
    return errors.HermesStoreError(
        f"{where}: the database refused the operation ({type(orig).__name__}: {first})")
