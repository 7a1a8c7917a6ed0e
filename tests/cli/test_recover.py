"""`hermes-store recover`: salvage from a fixture copy with pages overwritten by random
bytes; the damaged file stays byte-identical."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys

import pytest
from support.cli import *  # noqa: F403
from conftest import copy_fixture

from hermes_store import SessionDB, migrate

STEM = "upstream-0.19.0-v22"


#: asks ``dbstat`` where a table's pages are, in a child on the standard library's
#: SQLite (pysqlite3's wheel is built without dbstat; a child keeps this process on one
#: copy of SQLite)
_PAGES = (
    "import json, sqlite3, sys\n"
    "conn = sqlite3.connect(f'file:{sys.argv[1]}?mode=ro', uri=True)\n"
    "print(json.dumps([p for (p,) in conn.execute('SELECT pageno FROM dbstat WHERE name = ? "
    "AND pagetype = ? ORDER BY pageno', (sys.argv[2], sys.argv[3]))]))\n"
)


def _pages(db, table: str, kind: str) -> list[int]:
    out = subprocess.run([sys.executable, "-c", _PAGES, str(db), table, kind],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def _overwrite(db, pages: list[int], seed: int) -> None:
    rng = random.Random(seed)
    with open(db, "r+b") as fh:
        for page in pages:
            fh.seek((page - 1) * 4096)
            fh.write(bytes(rng.getrandbits(8) for _ in range(4096)))


@pytest.fixture
def pristine(tmp_path):
    return copy_fixture(STEM, tmp_path)


def _damaged(pristine, tmp_path, pages) -> tuple:
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(pristine.read_bytes())
    _overwrite(damaged, pages, seed=len(pages))
    return damaged, hashlib.sha256(damaged.read_bytes()).hexdigest()


def test_recover_salvages_readable_rows_and_reports_the_lost(cli, pristine, tmp_path):
    message_leaves = _pages(pristine, "messages", "leaf")
    assert len(message_leaves) >= 2, "the fixture needs several message pages for this test"
    # The last message leaf, an index page and a trigram page: middle of the file.
    hit = [message_leaves[-1], _pages(pristine, "idx_messages_session", "leaf")[0],
           _pages(pristine, "messages_fts_trigram_data", "leaf")[0]]
    damaged, digest = _damaged(pristine, tmp_path, hit)
    original = rows(pristine, "messages", "id")
    output = tmp_path / "recovered.db"

    result = cli(damaged, "--json", "recover", "--output", output)
    assert result.exit_code == 1, result.output  # rows were lost: partial
    report = parse_json(result)
    assert {"source", "output", "complete", "verified", "source_unchanged", "source_integrity",
            "tables", "placeholder_sessions", "detached_links", "dropped_orphans", "fts_rebuilt",
            "verification", "seconds"} == set(report)
    assert report["complete"] is False and report["verified"] is True
    assert report["source_unchanged"] is True
    assert report["verification"] == {"integrity_check": "ok", "foreign_key_check": "ok", "row_counts": "ok", "fts": "ok"}
    tables = {t["name"]: t for t in report["tables"]}
    messages = tables["messages"]
    assert messages["lost_ranges"], "the overwritten leaf must be reported"
    lost_ids = {i for lo, hi in messages["lost_ranges"] for i in range(lo, hi + 1)}

    # Exactly the rows outside the lost ranges came through, unchanged.
    salvaged = rows(output, "messages", "id")
    expected = [m for m in original if m["id"] not in lost_ids]
    drop = ("display_identity", "display_order")
    assert [{k: v for k, v in m.items() if k not in drop and k in expected[0]} for m in salvaged] == expected
    assert messages["copied"] == len(expected) and messages["found"] == len(expected)
    assert 0 < len(original) - len(expected) <= messages["lost_estimate"]
    assert tables["sessions"]["copied"] == 6 and not tables["sessions"]["lost_ranges"]

    # The damaged file is byte-identical; the output is a working head store.
    assert hashlib.sha256(damaged.read_bytes()).hexdigest() == digest
    assert migrate.current(output) == migrate.head()
    survivor = expected[0]["content"].split()[1]
    with SessionDB(output) as db:
        assert db.fts_integrity_check() == []
        assert any(h["id"] == expected[0]["id"] for h in db.search_messages(survivor, limit=50))

    human = cli(damaged, "recover", "--output", tmp_path / "again.db")
    assert human.exit_code == 1
    assert "Partial" in human.stdout and "left unchanged" in flat(human.stdout)
    assert_fits(human.stdout)


def test_lost_session_rows_get_placeholders_so_messages_stay_reachable(cli, pristine, tmp_path):
    damaged, digest = _damaged(pristine, tmp_path, _pages(pristine, "sessions", "leaf"))
    output = tmp_path / "recovered.db"
    report = parse_json(cli(damaged, "--json", "recover", "--output", output))
    tables = {t["name"]: t for t in report["tables"]}
    assert tables["sessions"]["copied"] == 0
    assert "root page" in tables["sessions"]["unreadable"]
    assert tables["messages"]["copied"] == len(rows(pristine, "messages", "id"))
    with_messages = {m["session_id"] for m in rows(pristine, "messages", "id")}
    assert report["placeholder_sessions"] == len(with_messages)
    assert {r["source"] for r in rows(output, "sessions", "id")} == {"recovered"}
    assert report["verification"]["foreign_key_check"] == "ok"
    assert hashlib.sha256(damaged.read_bytes()).hexdigest() == digest


def test_an_intact_file_recovers_completely(cli, pristine, tmp_path):
    output = tmp_path / "copy.db"
    result = cli(pristine, "--json", "recover", "--output", output)
    assert result.exit_code == 0, result.output
    report = parse_json(result)
    assert report["complete"] is True and report["source_integrity"] == []
    assert len(rows(output, "messages", "id")) == len(rows(pristine, "messages", "id"))


def test_recover_refuses_unsafe_targets_and_hopeless_files(cli, pristine, tmp_path):
    exists = tmp_path / "exists.db"
    exists.write_bytes(b"keep me")
    refused = cli(pristine, "recover", "--output", exists)
    assert refused.exit_code == 8 and "never overwrites" in flat(refused.stderr)
    assert exists.read_bytes() == b"keep me"

    same = cli(pristine, "recover", "--output", pristine)
    assert same.exit_code == 8

    header_gone = tmp_path / "noheader.db"
    header_gone.write_bytes(pristine.read_bytes())
    _overwrite(header_gone, [1], seed=1)
    hopeless = cli(header_gone, "recover", "--output", tmp_path / "out.db")
    assert hopeless.exit_code == 4
    assert not (tmp_path / "out.db").exists()
