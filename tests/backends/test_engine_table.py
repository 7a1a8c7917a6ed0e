"""The two engine packages read as one table (issue 33, decision D21).

Derived from ``hermes_store/backends/*/`` itself: both packages have the same module names
for the same concerns, the same facets with classes named by one rule, and the methods
they share with the interface take what the interface says — apart from the concerns only
one engine has, listed here with the reason (and in docs/architecture.md, "The two engines
as one table"). Nothing of ``backends/base.py`` is dead: every public member of the
interface is read somewhere.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from hermes_store.backends import base, facets
from hermes_store.backends.base import get

PACKAGE = Path(base.__file__).resolve().parent
ENGINES = {"sqlite": "SQLite", "postgresql": "Postgresql"}  # the class-name prefix of each

#: modules one engine has and the other cannot, and why
ONLY_ONE = {
    "sqlite": {
        "library.py": "which sqlite3 runs the store, one per process (a server has no library)",
        "files/": "the operations of a store that is one file (backup, recovery, identity, …)",
        "migrate/adopt.py": "adopting the files upstream Hermes wrote (a server starts at 0030)",
        "migrate/head_schema.py": "the frozen head DDL a new file is made from in one step",
        "fts/scope.py": "a session's rows moved in the trigram index when its scope changes "
                        "(a server's trigger on sessions does it)",
    },
    "postgresql": {
        "codec.py": "text cannot hold NUL on a server: the reversible codec (D12)",
        "locks.py": "advisory locks: units side by side lock what they decide on (D13)",
        "outcome.py": "a COMMIT lost on the network: asking the server what became of it",
        "server.py": "what the server must offer (version, encoding, pg_trgm); VACUUM",
        "roles.py": "who may use the database: grants for a runtime role",
        "storage.py": "how a server compresses long text (lz4); SQLite stores text as it is",
        "fts/tsquery.py": "an FTS5 expression as a tsquery (FTS5 reads its own expressions)",
        "fts/substrings.py": "a query's terms as substrings, and their snippets (FTS5's "
                             "trigram tokenizer reads its own terms)",
    },
}
#: facets one engine has (the other's property answers None), and why
ONLY_ONE_FACET = {"files": "sqlite", "roles": "postgresql"}
FACETS = ("search", "migrations", "copying", "files", "roles")


def _modules(engine: str) -> set[str]:
    root = PACKAGE / engine
    found = set()
    for path in root.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        found.add(path.relative_to(root).as_posix())
    return found


def _allowed(engine: str, module: str) -> bool:
    return any(module == key or (key.endswith("/") and module.startswith(key))
               for key in ONLY_ONE[engine])


def test_both_packages_have_the_same_module_names_but_the_listed_ones():
    sqlite, postgresql = _modules("sqlite"), _modules("postgresql")
    assert sorted(m for m in sqlite - postgresql if not _allowed("sqlite", m)) == []
    assert sorted(m for m in postgresql - sqlite if not _allowed("postgresql", m)) == []
    # the list holds only what is really one engine's (no stale entry)
    for engine, modules in (("sqlite", sqlite), ("postgresql", postgresql)):
        for key in ONLY_ONE[engine]:
            assert any(m == key or m.startswith(key) for m in modules), (engine, key)
    shared = sqlite & postgresql
    assert {"__init__.py", "engine.py", "errors.py", "constructs.py", "copying.py",
            "display_order.py", "fts/search.py", "fts/ddl.py", "fts/maintenance.py",
            "migrate/__init__.py", "migrate/env.py", "migrate/check.py",
            "migrate/commands.py", "migrate/create.py", "migrate/inspect.py",
            "migrate/head.py", "migrate/topics.py"} <= shared


@pytest.mark.parametrize("facet", FACETS)
def test_facets_are_objects_of_one_naming_rule(facet):
    for name, prefix in ENGINES.items():
        value = getattr(get(name), facet)
        if ONLY_ONE_FACET.get(facet, name) != name:
            assert value is None, (name, facet)
            continue
        assert value is not None and not inspect.ismodule(value), (name, facet)
        cls = type(value).__name__
        assert cls.startswith(prefix), (name, facet, cls)


def _shared_methods(base_cls, impl_cls):
    for name, member in vars(impl_cls).items():
        if name.startswith("_") or not callable(member) or isinstance(member, property):
            continue
        declared = getattr(base_cls, name, None)
        if declared is not None and callable(declared):
            yield name, declared, member


def _shape(fn) -> list[tuple]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("engine", list(ENGINES))
def test_the_methods_an_engine_shares_with_the_interface_take_what_it_says(engine):
    backend = get(engine)
    pairs = [(base.Backend, type(backend))]
    for facet, base_cls in (("search", facets.SearchRoute), ("migrations", facets.Migrations),
                            ("copying", facets.CopySide)):
        pairs.append((base_cls, type(getattr(backend, facet))))
    differing = []
    for base_cls, impl_cls in pairs:
        for name, declared, member in _shared_methods(base_cls, impl_cls):
            if _shape(declared) != _shape(member):
                differing.append(f"{impl_cls.__name__}.{name}{inspect.signature(member)} "
                                 f"vs {base_cls.__name__}.{name}{inspect.signature(declared)}")
    assert differing == []


def _attribute_names_used() -> set[str]:
    """Every ``x.name`` read in the package (a definition is not an attribute access)."""
    root = PACKAGE.parent  # hermes_store/
    used = set()
    for path in list(root.rglob("*.py")) + list((root.parent / "migrations").rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute):
                used.add(node.attr)
    return used


def test_no_member_of_the_interface_is_dead():
    used = _attribute_names_used()
    dead = []
    for cls in (base.Backend, facets.SearchRoute, facets.Migrations, facets.CopySide):
        for name in vars(cls):
            if name.startswith("_"):
                continue
            if name not in used:
                dead.append(f"{cls.__name__}.{name}")
    assert dead == []
