"""``tests/`` mirrors ``hermes_store/`` (issue 33): every test file's path names the area
of the package it tests or the engine it needs, and every helper lives in the one
support package.

========================================  ==================================================
``tests/…``                               what is there
========================================  ==================================================
``<area>/`` (``agent``, ``cli``,          an area of the package: ``hermes_store/<area>/``,
``dbcopy``, ``transfer``, …)              or ``migrations/`` (the revisions)
``test_<module>.py``                      a root module, ``hermes_store/<module>.py``
                                          (``location``, ``paths``, ``schema``)
``backends/``                             the two engines as one table (``backends/*/``)
``backends/sqlite/``                      what only SQLite has: files, WAL and checkpoints,
                                          the library, journal modes, identity, FTS5
``backends/postgresql/``                  what only PostgreSQL has: the server, poolers,
                                          outages, codec, commit outcome, roles, its FTS
                                          layer and migrations
``repository/``                           the repository on both engines, in one place (the
                                          ``backend``/``db`` fixtures; the host leg and the
                                          pooler subset run it)
``support/``                              the one support package: fixtures, helpers, the
                                          suite's servers; ``support/workers/`` the
                                          processes tests start
``data/``                                 fixture files (no code)
========================================  ==================================================

The ``CROSS_CUTTING`` entries below are the only paths that name no area, each with its
reason. Engine packages (``backends/sqlite``, ``backends/postgresql``) are Python
packages so that both can use the package's module names (``test_store.py``,
``test_fts.py``); an ``__init__.py`` here holds a docstring and nothing else.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
PACKAGE = ROOT / "hermes_store"
REVISIONS = ROOT / "migrations"
SUPPORT = TESTS / "support"

#: paths (relative to tests/) that name no area of the package, and why
CROSS_CUTTING = {
    "architecture": "rules over the whole package (the import graph, module sizes, the "
                    "public names, packaging): no one area has them",
    "reliability": "the whole store under load and failure (processes killed, many "
                   "writers and readers, hostile input, user-pain regressions), on both "
                   "engines where a test asks for backend; one of the pooler suites "
                   "(support/pgbouncer.POOLER_SUITES)",
    "faults": "the storage failures users met (issue 31, decision D20), one module per "
              "failure, each caused for real and checked against an oracle of "
              "acknowledged writes; a failure crosses engine, files and repository",
    "test_layout.py": "this file: it tests tests/ itself",
}


def _is_test(path: Path) -> bool:
    return path.name.startswith("test_") or path.name.endswith("_test.py")


def _python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def _areas() -> set[str]:
    """Every package directory, as a path: ``cli``, ``backends/sqlite``, ``migrations``…"""
    areas = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*")
             if p.is_dir() and "__pycache__" not in p.parts}
    areas |= {"migrations/" + p.relative_to(REVISIONS).as_posix() for p in REVISIONS.rglob("*")
              if p.is_dir() and "__pycache__" not in p.parts}
    return areas | {"migrations"}


def _root_modules() -> set[str]:
    return {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}


def _names_an_area(rel: Path, areas: set[str], modules: set[str]) -> bool:
    if rel.parts[0] in CROSS_CUTTING or rel.as_posix() in CROSS_CUTTING:
        return True
    if len(rel.parts) > 1:
        return rel.parent.as_posix() in areas
    stem = rel.stem.removeprefix("test_").removesuffix("_test")
    return any(stem == m or stem.startswith(m + "_") for m in modules)


def test_every_test_file_names_its_area_or_engine():
    areas, modules = _areas(), _root_modules()
    stray = [p.relative_to(TESTS).as_posix() for p in _python_files()
             if _is_test(p) and not p.is_relative_to(SUPPORT)
             and not _names_an_area(p.relative_to(TESTS), areas, modules)]
    assert not stray, (
        f"test files whose path names no area of the package: {stray}; put each under "
        "tests/<area>/ (a directory of hermes_store/ or migrations/), tests/backends/"
        "<engine>/ for what one engine has, or tests/test_<module>.py for a root module, "
        "or add it to CROSS_CUTTING with the reason")


def test_every_helper_lives_in_the_support_package():
    def is_package_marker(path: Path) -> bool:  # a docstring and nothing else
        body = ast.parse(path.read_text()).body
        return path.name == "__init__.py" and all(
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in body)

    stray = [p.relative_to(TESTS).as_posix() for p in _python_files()
             if not p.is_relative_to(SUPPORT) and not _is_test(p)
             and p != TESTS / "conftest.py" and not is_package_marker(p)]
    assert not stray, f"helpers outside tests/support/ (move them there): {stray}"
    tests_in_support = [p.relative_to(TESTS).as_posix() for p in SUPPORT.rglob("*.py")
                        if _is_test(p)]
    assert not tests_in_support, f"test files in the support package: {tests_in_support}"


def test_the_named_subsets_name_test_files_that_exist():
    """The pysqlite3 leg (``LIBRARY_SUBSET``, ``SQLITE_TESTS``) and the pooler runs
    (``POOLER_SUBSET``, ``POOLER_SUITES``) name tests by path: a file moved or renamed
    without them would shrink them silently."""
    from conftest import LIBRARY_SUBSET, SQLITE_TESTS
    from support.pgbouncer import POOLER_SUBSET, POOLER_SUITES

    missing = [p for p in sorted(LIBRARY_SUBSET) if not (ROOT / p).is_file()]
    missing += [f for f in sorted({n.split("::")[0] for n in POOLER_SUBSET})
                if not (TESTS / f).is_file()]
    missing += [d for d in (SQLITE_TESTS, *(f"tests/{s}" for s in POOLER_SUITES))
                if not (ROOT / d).is_dir()]
    assert not missing, f"named in the subsets but not there: {missing}"


def test_the_cross_cutting_entries_exist():
    assert all((TESTS / name).exists() for name in CROSS_CUTTING), \
        [name for name in CROSS_CUTTING if not (TESTS / name).exists()]
