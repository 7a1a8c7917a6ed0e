"""Where the schema revisions live and which one is head, without importing Alembic.

Opening a store asks one question every time: is it at head? Alembic answers it by
loading every revision script (and Mako and Pygments on the way: docs/performance.md,
"Start-up"), which the answer does not need: revision ``00NN`` lives in
``migrations/versions/00NN_<slug>.py`` (decision D2; the house rules in
``tests/migrations/test_revision_rules.py`` hold every file to it), so head is the
highest number there, and the database's stamp is one row of ``alembic_version`` (each
backend reads it: each engine's ``migrate/head.py``).
Anything but a clean "at head" goes to ``hermes_store.migrate`` (Alembic), which
adopts, upgrades or refuses the database.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from pathlib import Path

from . import errors

#: a revision script's file name: the revision id, then its slug
_SCRIPT_NAME = re.compile(r"^(\d{4})_\w+\.py$")


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
    numbers = [m.group(1) for m in map(_SCRIPT_NAME.match,
                                       os.listdir(migrations_dir() / "versions")) if m]
    if not numbers:
        raise errors.HermesStoreError(
            "hermes_store.migrations has no revision scripts; reinstall hermes_store"
        )
    return max(numbers)
