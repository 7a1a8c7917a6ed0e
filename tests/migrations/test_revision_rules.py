"""House rules every revision file follows (decisions D2, D3)."""

from __future__ import annotations

import ast
import re

from hermes_store import migrate, revisions

VERSIONS = migrate.MIGRATIONS_DIR / "versions"
FILES = sorted(VERSIONS.glob("[0-9][0-9][0-9][0-9]*_*.py"))
IDS = [f.name.split("_", 1)[0] for f in FILES]


def test_one_linear_chain_numbered_by_schema_version():
    # 0001 … 0030, one per upstream version; a step of the store's own follows the
    # version it belongs to, lettered in order (0030a, 0030b)
    assert all(revisions.REVISION_ID.match(rev) for rev in IDS), IDS
    versions = [revisions.upstream_version(rev) for rev in IDS]
    assert sorted(set(versions)) == list(range(1, max(versions) + 1))
    for previous, rev in zip(IDS, IDS[1:]):
        letter = rev[4:]
        if letter:
            assert previous == rev[:4] + (chr(ord(letter) - 1) if letter > "a" else ""), rev
        else:
            assert int(rev) == revisions.upstream_version(previous) + 1, rev
    assert [rev for rev, _ in migrate.history()] == IDS
    assert migrate.head() == IDS[-1]


def test_revision_ids_sort_in_chain_order():
    assert sorted(IDS) == IDS
    assert [revisions.is_newer(b, a) for a, b in zip(IDS, IDS[1:])] == [True] * (len(IDS) - 1)
    assert revisions.upstream_version("0030a") == 30 and revisions.upstream_version("t002") is None


def test_head_read_from_the_file_names_is_alembics_head():
    # SessionDB's open compares a file's stamp with revisions.head() without Alembic
    assert revisions.head() == migrate.head()
    assert revisions.migrations_dir() == migrate.MIGRATIONS_DIR


def test_each_file_declares_its_own_revision_and_the_previous_one():
    for n, path in enumerate(FILES):
        module = ast.parse(path.read_text())
        values = {
            node.targets[0].id: node.value.value
            for node in module.body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
        }
        assert values.get("revision") == IDS[n], path.name
        assert values.get("down_revision") == (IDS[n - 1] if n else None), path.name
        doc = ast.get_docstring(module) or ""
        version = revisions.upstream_version(IDS[n])
        assert re.search(rf"schema version:? {version}\b", doc, re.IGNORECASE), (
            f"{path.name}: the docstring must name upstream schema version {version}"
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
