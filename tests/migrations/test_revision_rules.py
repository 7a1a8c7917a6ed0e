"""House rules every revision file follows (decisions D2, D3)."""

from __future__ import annotations

import ast
import re

from hermes_store import migrate, revisions

VERSIONS = migrate.MIGRATIONS_DIR / "versions"
FILES = sorted(VERSIONS.glob("[0-9][0-9][0-9][0-9]_*.py"))


def test_one_linear_chain_numbered_by_schema_version():
    numbers = [int(f.name[:4]) for f in FILES]
    assert numbers == list(range(1, len(FILES) + 1))
    assert [rev for rev, _ in migrate.history()] == [f.name[:4] for f in FILES]
    assert migrate.head() == FILES[-1].name[:4]


def test_head_read_from_the_file_names_is_alembics_head():
    # SessionDB's open compares a file's stamp with revisions.head() without Alembic
    assert revisions.head() == migrate.head()
    assert revisions.migrations_dir() == migrate.MIGRATIONS_DIR


def test_each_file_declares_its_own_revision_and_the_previous_one():
    for n, path in enumerate(FILES, start=1):
        module = ast.parse(path.read_text())
        values = {
            node.targets[0].id: node.value.value
            for node in module.body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
        }
        assert values.get("revision") == f"{n:04d}", path.name
        assert values.get("down_revision") == (f"{n - 1:04d}" if n > 1 else None), path.name
        doc = ast.get_docstring(module) or ""
        assert re.search(rf"schema version:? {n}\b", doc, re.IGNORECASE), (
            f"{path.name}: the docstring must name upstream schema version {n}"
        )


def test_revisions_are_frozen_they_never_import_the_head_schema():
    forbidden = ("hermes_store.schema", "hermes_store.fts", "hermes_store.display_order",
                 "hermes_store.store", "hermes_store.repository")
    for path in FILES:
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                assert not name.startswith(forbidden), f"{path.name} imports {name}"
