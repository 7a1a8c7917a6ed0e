"""The package's import graph, read from its own source with ``ast`` (decision D17).

Every ``import`` and ``from … import`` of ``hermes_store/``, ``migrations/`` (installed as
``hermes_store.migrations``) and ``benchmarks/`` — at module level, inside a function (a
lazy import is still a dependency) or under ``if TYPE_CHECKING:`` (an annotation names a
dependency too) — becomes an arrow between modules. The graph must
have no circle; the core and the SQLite backend must never import the PostgreSQL
backend or psycopg (a default install never has them: D11); the two backends never
import each other; and no module imports one of a higher layer (the layers of
``docs/architecture.md``, listed in ``LAYERS`` below).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {"hermes_store": ROOT / "hermes_store", "hermes_store.migrations": ROOT / "migrations",
           "benchmarks": ROOT / "benchmarks"}

#: (layer, module prefixes), lowest first: a module may import its own layer and below.
#: Keep in step with docs/architecture.md, "Layers".
LAYERS = [
    ("foundation", ["hermes_store.errors", "hermes_store.paths", "hermes_store.patterns",
                    "hermes_store.policy", "hermes_store.revisions",
                    "hermes_store.location", "hermes_store.schema", "hermes_store.telegram_schema",
                    "=hermes_store.fts", "hermes_store.fts.layout", "hermes_store.fts.query",
                    "hermes_store.fts.tokens", "hermes_store.fts.snippet",
                    "hermes_store.startup",
                    "=hermes_store.migrations", "=hermes_store.migrations.telegram_topics",
                    "hermes_store.migrations.helpers", "hermes_store.migrations.fts_history",
                    "hermes_store.migrations.pg_baseline", "hermes_store.migrations.versions",
                    "hermes_store.migrations.telegram_topics.versions"]),
    # the interface, its contract constants and the registry (decision D21)
    ("interface", ["=hermes_store.backends", "hermes_store.backends.base",
                   "hermes_store.backends.facets"]),
    ("engine core", ["hermes_store.driver", "hermes_store.connections", "hermes_store.units",
                     "hermes_store.unit_locks",
                     "hermes_store.display_order", "hermes_store.sql",
                     "hermes_store.migrate.scripts", "hermes_store.migrate.topics",
                     "hermes_store.migrate.results", "hermes_store.fts.maintenance"]),
    ("backends", ["hermes_store.backends.sqlite", "hermes_store.backends.postgresql"]),
    ("migrations API", ["=hermes_store.migrate"]),
    ("repository", ["hermes_store.repository"]),
    # the package itself: ``hermes_store.SessionDB`` is the store, imported on first use
    ("store and migrations", ["=hermes_store", "hermes_store.store",
                              "hermes_store.migrations.env",
                              "hermes_store.migrations.telegram_topics.env"]),
    ("tools", ["hermes_store.transfer", "hermes_store.dbcopy"]),
    # Hermes Agent's hermes_state and the switch (issue 16): the CLI drives the switch
    ("agent", ["hermes_store.agent"]),
    ("cli", ["hermes_store.cli", "hermes_store.__main__"]),
    ("benchmarks", ["benchmarks"]),
]
CORE_FORBIDDEN = ("hermes_store.backends.postgresql", "psycopg")


def _module_name(package: str, root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([package, *parts]) if parts else package


def _modules() -> dict[str, Path]:
    found = {}
    for package, root in SOURCES.items():
        for path in root.rglob("*.py"):
            # results: caches; scratch: git-ignored throwaway work (docs/performance.md)
            if {"results", "__pycache__", "scratch"} & set(path.parts):
                continue
            found[_module_name(package, root, path)] = path
    return found


MODULES = _modules()


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if path.name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, path: Path) -> set[str]:
    """Every module ``module`` imports (a name imported from a package is the submodule
    when one exists by that name)."""
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, path, node)
            subs = [f"{source}.{alias.name}" for alias in node.names]
            found = [s for s in subs if s in MODULES]
            targets.update(found)
            if len(found) < len(subs):
                targets.add(source)
    if module.startswith("benchmarks"):  # scripts that import each other by bare name
        targets = {f"benchmarks.{t}" if f"benchmarks.{t}" in MODULES else t for t in targets}
    return {t for t in targets if t != module}


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def _ours(name: str) -> bool:
    return name in MODULES


def _layer(module: str) -> int:
    best, rank = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if prefix.startswith("="):  # this module only, not its submodules
                if module == prefix[1:]:
                    return index
                continue
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > rank:
                best, rank = index, len(prefix)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS (and to "
                             "docs/architecture.md)")
    return best


def test_every_module_has_a_layer():
    for module in MODULES:
        _layer(module)


def test_there_is_no_import_circle():
    # Tarjan's strongly connected components over our own modules
    index, low, stack, on_stack, circles = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(GRAPH[v]):
            if not _ours(w):
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert circles == []


@pytest.mark.parametrize("side", ["core", "sqlite"])
def test_the_core_and_the_sqlite_backend_never_import_postgresql(side):
    offenders = []
    for module, targets in GRAPH.items():
        if module.startswith(("hermes_store.backends.postgresql", "benchmarks")):
            continue
        if side == "sqlite" and not module.startswith("hermes_store.backends.sqlite"):
            continue
        offenders += [(module, t) for t in targets if t.startswith(CORE_FORBIDDEN)]
    assert offenders == []


def test_the_backends_are_peers():
    crossing = [(m, t) for m, targets in GRAPH.items() for t in targets
                if m.startswith("hermes_store.backends.postgresql")
                and t.startswith("hermes_store.backends.sqlite")]
    assert crossing == []


def test_nothing_imports_upward():
    upward = [(m, LAYERS[_layer(m)][0], t, LAYERS[_layer(t)][0])
              for m, targets in GRAPH.items() for t in targets
              if _ours(t) and _layer(t) > _layer(m)]
    assert upward == []


def test_no_dialect_name_is_tested_outside_the_backends():
    import re

    # ``Target.is_sqlite``/``is_postgresql`` are kept for callers of the package: using
    # one to branch inside it is what this test catches
    pattern = re.compile(r"dialect\.name\s*[!=]=|_from_psycopg|\bis_pg\b"
                         r"|\.is_postgresql\b|\.is_sqlite\b")
    found = []
    for module, path in MODULES.items():
        # the backends hold what differs; the revisions are frozen history (a paired
        # revision after 0030 branches on ``helpers.dialect()`` by design)
        if module.startswith(("hermes_store.backends.", "hermes_store.migrations")) \
                or not module.startswith("hermes_store"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if pattern.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []


#: where a target becomes an open database: the backend is resolved there, once, from the
#: registry (``backends.base.get``) and carried from then on (``Backend.carry``,
#: ``backend_of``) — decision D21; docs/architecture.md, "One backend, chosen once"
OPENING_PATHS = (
    "hermes_store.store",                           # SessionDB
    "=hermes_store.migrate",                        # the migrations API
    "hermes_store.migrations.env",                  # alembic -x db=…
    "hermes_store.migrations.telegram_topics.env",
    "hermes_store.dbcopy.sides",                    # db copy opens both sides
    "hermes_store.transfer.formats",                # export/import of a path or URL
    "hermes_store.agent.health",                    # upstream's repair/probe of a path
    "hermes_store.cli",                             # the CLI resolves --db once
)
REGISTRY = "hermes_store.backends.base"
REGISTRY_NAMES = {"get", "loaded", "PACKAGES"}


def _registry_users() -> set[str]:
    users = set()
    for module, path in MODULES.items():
        if not module.startswith("hermes_store") or module.startswith("hermes_store.backends"):
            continue
        tree = ast.parse(path.read_text(), str(path))
        aliases = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _resolve(module, path, node)
                if source == REGISTRY and {a.name for a in node.names} & REGISTRY_NAMES:
                    users.add(module)
                for alias in node.names:  # ``from hermes_store.backends import base``
                    if f"{source}.{alias.name}" == REGISTRY:
                        aliases.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                aliases |= {a.asname for a in node.names if a.name == REGISTRY and a.asname}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr in REGISTRY_NAMES
                    and isinstance(node.value, ast.Name) and node.value.id in aliases):
                users.add(module)
    return users


def _opening(module: str) -> bool:
    for prefix in OPENING_PATHS:
        if prefix.startswith("="):
            if module == prefix[1:]:
                return True
        elif module == prefix or module.startswith(prefix + "."):
            return True
    return False


def test_only_the_opening_paths_and_the_cli_call_the_registry():
    users = _registry_users()
    assert "hermes_store.store" in users  # the check sees what it looks for
    assert sorted(m for m in users if not _opening(m)) == []
