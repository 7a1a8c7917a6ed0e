"""The packaged Alembic scripts: configs, the script directories, head and history.

Both chains live in ``migrations/`` (installed as ``hermes_store.migrations``): the main
chain ``0001``…``0030`` (revision ``00NN`` = upstream schema version N, decision D2) and
the opt-in Telegram topic branch (``migrations/telegram_topics/``: ``t001``, ``t002``, its
own version table). Everything runs them through an in-memory :class:`Config`, so no
``alembic.ini`` is needed on disk; the repository's ``alembic.ini`` runs the very same
``env.py`` for ``alembic -x db=PATH …``. Nothing here knows an engine.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any, Callable

import sqlalchemy as sa
from alembic.config import Config
from alembic.script import ScriptDirectory

from .. import location, telegram_schema
from ..revisions import migrations_dir

#: the packaged Alembic scripts (env.py, versions/)
MIGRATIONS_DIR = migrations_dir()
#: the Telegram topic branch's scripts (env.py, versions/t00N_….py), named after the branch
TELEGRAM_TOPICS_DIR = MIGRATIONS_DIR / telegram_schema.BRANCH

#: ``progress(revision, description)`` is called after each applied step
Progress = Callable[[str, str], None]

#: Alembic's ``context`` is a process-wide proxy: two threads' stores migrating at once
#: (each inside its own write unit, on its own file or after the other) take turns
ALEMBIC_RUN = threading.RLock()


def config(
    path: str | os.PathLike | None = None,
    *,
    connection: sa.Connection | None = None,
    progress: Progress | None = None,
    target: location.Target | None = None,
) -> Config:
    """An Alembic Config on the packaged scripts, bound to a file, a resolved target
    (a URL) or a live connection."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("file_template", "%%(rev)s_%%(slug)s")
    if connection is not None:
        cfg.attributes["connection"] = connection
    if path is not None:
        cfg.attributes["db_path"] = str(path)
    if target is not None:
        cfg.attributes["db_target"] = target
    if progress is not None:
        cfg.attributes["progress"] = progress
    return cfg


@functools.lru_cache(maxsize=1)
def scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(config())


def head() -> str:
    """The newest revision id (``"0030a"``: a step of the store's own after upstream
    schema version 30; ``hermes_store.revisions``)."""
    return scripts().get_current_head()


#: a revision's module attribute naming the engines whose schema it changes (on the
#: others it only moves the stamp); a revision without it changes both
ENGINES_CHANGED_ATTRIBUTE = "engines_changed"


def same_schema_as_head(revision: str | None, dialect: str) -> bool:
    """True when ``revision`` is head, or below it by revisions that leave a ``dialect``
    database as it is: one stamped ``revision`` has head's schema on that engine. False
    for no revision, and for one that does not sort below head (unknown, or newer)."""
    newest = head()
    if revision == newest:
        return True
    if revision is None or not revision < newest:
        return False
    for script in scripts().iterate_revisions(newest, revision):
        if script.revision == revision:
            continue
        if dialect in getattr(script.module, ENGINES_CHANGED_ATTRIBUTE, ("sqlite", "postgresql")):
            return False
    return True


def _history(directory: ScriptDirectory) -> list[tuple[str, str]]:
    revisions = list(directory.walk_revisions())
    revisions.reverse()
    return [(r.revision, (r.doc or "").strip().splitlines()[0] if r.doc else "") for r in revisions]


def history() -> list[tuple[str, str]]:
    """``(revision, one-line description)`` for every revision, oldest first."""
    return _history(scripts())


def is_at(current_rev: str | None, target: str, directory: ScriptDirectory | None = None) -> bool:
    """Whether a database at ``current_rev`` is already at ``target`` (``head`` too)."""
    directory = directory or scripts()
    try:
        wanted = directory.get_revision(target)
    except Exception:
        return False
    return wanted is not None and wanted.revision == current_rev


def read_only_command(context) -> bool:
    """Whether the Alembic command running an env.py only reads: ``alembic current`` and
    ``history`` pass ``dont_mutate=True``; ``alembic check`` and ``revision
    --autogenerate`` hand in a ``revision_context`` (they compare the database with the
    metadata). None of them may adopt, create or migrate anything."""
    env = getattr(context, "_proxy", None)
    if env is None:
        return False
    opts = env.context_opts
    return bool(opts.get("dont_mutate") or opts.get("revision_context") is not None)


def significant_only(keep: Callable[[Any, list], list]):
    """An Alembic ``process_revision_directives`` hook that leaves out of an
    autogenerated revision what ``keep(connection, diffs)`` drops — the differences an
    engine's ``migrate.check`` does not count as drift (its reflection's artefacts) — so
    that ``alembic check`` and ``db check`` agree (one filter for both)."""
    from alembic.operations import ops

    def hook(context, _revision, directives) -> None:
        for script in directives:
            for upgrade in script.upgrade_ops_list:
                leaves = []  # (the list holding the op, the op, its diff)
                for op in upgrade.ops:
                    if isinstance(op, ops.ModifyTableOps):
                        leaves += [(op.ops, sub, sub.to_diff_tuple()) for sub in op.ops]
                    else:
                        leaves.append((upgrade.ops, op, op.to_diff_tuple()))
                kept = keep(context.connection, [diff for _, _, diff in leaves])
                for holder, op, diff in leaves:
                    if not any(diff is k for k in kept):
                        holder.remove(op)
                upgrade.ops[:] = [op for op in upgrade.ops
                                  if not (isinstance(op, ops.ModifyTableOps) and not op.ops)]

    return hook


# --------------------------------------------------------------------------- the topic branch


def telegram_topics_config(
    path: str | os.PathLike | None = None, *, connection: sa.Connection | None = None,
    target: location.Target | None = None,
) -> Config:
    """An Alembic Config on the Telegram topic branch's scripts (file or live connection)."""
    cfg = config(path, connection=connection, target=target)
    cfg.set_main_option("script_location", str(TELEGRAM_TOPICS_DIR))
    return cfg


@functools.lru_cache(maxsize=1)
def topic_scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(telegram_topics_config())


def telegram_topics_head() -> str:
    """The branch's newest revision (``"t002"`` = upstream's topic schema version 2)."""
    return topic_scripts().get_current_head()


def telegram_topics_history() -> list[tuple[str, str]]:
    """``(revision, one-line description)`` of the branch, oldest first."""
    return _history(topic_scripts())


def topic_version(revision: str) -> int:
    """Revision ``t00N`` is upstream's ``telegram_dm_topic_schema_version`` N."""
    return int(revision[1:])


# --------------------------------------------------------------------------- reading diffs


def fk_key(fk) -> tuple:
    return (
        fk.parent.name,
        tuple(c.name for c in fk.columns),
        fk.referred_table.name,
        tuple(e.column.name for e in fk.elements),
    )


def describe(diff) -> str:
    """One readable line per Alembic autogenerate difference."""
    if isinstance(diff, list):  # column modifications come as a list of tuples
        return "; ".join(describe(d) for d in diff)
    kind, *rest = diff
    if kind in ("add_table", "remove_table"):
        return f"{kind} {rest[0].name}"
    if kind in ("add_column", "remove_column"):
        return f"{kind} {rest[1]}.{rest[2].name}"
    if kind in ("add_index", "remove_index"):
        ix = rest[0]
        return f"{kind} {ix.name} on {ix.table.name}({', '.join(c.name for c in ix.columns)})"
    if kind in ("add_fk", "remove_fk"):
        table, cols, ref, ref_cols = fk_key(rest[0])
        on_delete = f" ON DELETE {rest[0].ondelete}" if rest[0].ondelete else ""
        return f"{kind} {table}({', '.join(cols)}) -> {ref}({', '.join(ref_cols)}){on_delete}"
    if kind.startswith("modify_"):
        _, table, column, _info, old, new = rest
        return f"{kind} {table}.{column}: {old!r} -> {new!r}"
    return f"{kind} {rest!r}"


__all__ = [
    "ALEMBIC_RUN",
    "MIGRATIONS_DIR",
    "Progress",
    "TELEGRAM_TOPICS_DIR",
    "config",
    "describe",
    "fk_key",
    "head",
    "history",
    "is_at",
    "read_only_command",
    "scripts",
    "significant_only",
    "telegram_topics_config",
    "telegram_topics_head",
    "telegram_topics_history",
    "topic_scripts",
    "topic_version",
]
