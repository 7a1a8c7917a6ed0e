"""Where the schema revisions live and which one is head, without importing Alembic.

Opening a store asks one question every time: is it at head? Alembic answers it by
loading every revision script (and Mako and Pygments on the way: docs/performance.md,
"Start-up"), which the answer does not need: revision ``00NN`` lives in
``migrations/versions/00NN_<slug>.py`` (decision D2; the house rules in
``tests/migrations/test_revision_rules.py`` hold every file to it), so head is the
highest id there, and the database's stamp is one row of ``alembic_version`` (each
backend reads it: each engine's ``migrate/head.py``). Anything but a clean "at head"
goes to ``hermes_store.migrate`` (Alembic), which adopts, upgrades or refuses the
database.

The id names the upstream schema version a revision leaves in ``schema_version``:
``0030`` is upstream's version 30. A step of the store's own that is no upstream
version (a fix to how one engine represents version N) takes N's id and a letter,
``0030a``, ``0030b``, and leaves ``schema_version`` at N, so upstream's next version
is still ``0031`` and upstream reading the file sees the version it wrote
(docs/migrations.md, "The store's own steps"). Ids in this form sort in chain order
as strings.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from pathlib import Path

from . import errors

#: a revision id of the main chain: upstream's schema version, four digits, then a
#: letter for a step of the store's own after that version
REVISION_ID = re.compile(r"^(\d{4})([a-z]?)$")
#: a revision script's file name: the revision id, then its slug
_SCRIPT_NAME = re.compile(r"^(\d{4}[a-z]?)_\w+\.py$")


def migrations_dir() -> Path:
    """The packaged Alembic scripts (``env.py``, ``versions/``).

    ``migrations/`` at the repository root installs as the subpackage
    ``hermes_store.migrations`` (pyproject's package-dir); find_spec locates it the same
    way in a wheel and in an editable checkout, without importing env.py.
    """
    spec = importlib.util.find_spec("hermes_store.migrations")
    if spec is None or not spec.submodule_search_locations:
        raise errors.HermesStoreError(
            "hermes_store.migrations is missing from this installation; reinstall hermes_store"
        )
    return Path(next(iter(spec.submodule_search_locations))).resolve()


@functools.lru_cache(maxsize=1)
def head() -> str:
    """The newest revision id, from the scripts' file names (equal to ``migrate.head()``)."""
    ids = [m.group(1) for m in map(_SCRIPT_NAME.match,
                                       os.listdir(migrations_dir() / "versions")) if m]
    if not ids:
        raise errors.HermesStoreError(
            "hermes_store.migrations has no revision scripts; reinstall hermes_store"
        )
    return max(ids)


def upstream_version(revision: str | None) -> int | None:
    """The upstream schema version revision ``revision`` leaves in ``schema_version``
    (``"0030"`` and ``"0030a"``: 30); None for an id outside the main chain."""
    match = REVISION_ID.match(revision or "")
    return int(match.group(1)) if match else None


def is_newer(revision: str | None, than: str) -> bool:
    """True when both are main-chain ids and ``revision`` comes after ``than``."""
    return bool(REVISION_ID.match(revision or "") and REVISION_ID.match(than)
                and revision > than)


def at_or_after(revision: str | None, than: str) -> bool:
    """True when ``revision`` is ``than`` or a main-chain id after it."""
    return revision == than or is_newer(revision, than)
