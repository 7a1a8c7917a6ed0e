"""What a SQLite process loads (issue 19): never SQLAlchemy's PostgreSQL dialect (nor
psycopg, nor our PostgreSQL backend), and no Alembic once a file is at head — through
the library and through the CLI, from a new file on; and no rich where the CLI prints
JSON."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NEVER_ON_SQLITE = ("sqlalchemy.dialects.postgresql", "psycopg", "hermes_store.backends.postgresql")



def _loaded(names) -> dict[str, list[str]]:
    names = set(names)
    found = {prefix: sorted(n for n in names if n == prefix or n.startswith(prefix + "."))
             for prefix in (*NEVER_ON_SQLITE, "alembic")}
    return {prefix: hits for prefix, hits in found.items() if hits}


def test_a_sqlite_store_never_loads_the_postgresql_dialect(tmp_path):
    path = tmp_path / "home" / "state.db"
    code = textwrap.dedent("""
        import json, sys
        from hermes_store import SessionDB
        with SessionDB(sys.argv[1]) as db:            # a new file
            db.create_session("s1", "cli", model="m")
            db.append_message("s1", role="user", content="how do I fix the docker build?")
            db.append_message("s1", role="assistant", content="记忆断裂 and docker compose")
            assert db.search_messages("docker") and db.search_messages("记忆")
            db.set_session_title("s1", "Docker")
            db.list_sessions_rich(limit=5)
        with SessionDB(sys.argv[1]) as db:            # at head
            assert db.get_session("s1")["title"] == "Docker"
            db.get_messages_as_conversation("s1")
        print(json.dumps(sorted(sys.modules)))
    """)
    run = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, cwd=REPO, timeout=120)
    assert run.returncode == 0, run.stderr
    assert _loaded(json.loads(run.stdout)) == {}


def test_the_cli_on_a_sqlite_store_never_loads_the_postgresql_dialect(tmp_path):
    from hermes_store import SessionDB

    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s1", "cli")
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "hermes_store", "--db", str(path),
         "sessions", "show", "s1", "--json"],
        capture_output=True, text=True, cwd=REPO, timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["session"]["id"] == "s1"
    imported = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", run.stderr, re.M)
    assert "hermes_store.store" in imported  # the parse saw the imports
    assert _loaded(imported) == {}
    # one JSON document to print: nothing of rich (its console alone is ~20 ms)
    assert [name for name in imported if name == "rich" or name.startswith("rich.")] == []


def test_opening_a_file_at_head_defines_no_dataclass_and_skips_the_repair_module(tmp_path):
    """Creating a dataclass class costs ~0.5 ms (it execs its generated methods): the
    open path's records are NamedTuples, and the repair module is for a damaged file
    only (hermes_store/startup.py). Counted with the dataclasses module's own hook."""
    from hermes_store import SessionDB

    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s1", "cli")
    code = textwrap.dedent("""
        import dataclasses, json, sys
        made = []
        process = dataclasses._process_class
        def counted(cls, *args, **kwargs):
            if cls.__module__.startswith("hermes_store"):
                made.append(f"{cls.__module__}.{cls.__qualname__}")
            return process(cls, *args, **kwargs)
        dataclasses._process_class = counted
        from hermes_store import SessionDB
        db = SessionDB(sys.argv[1])
        assert db.get_session("s1") is not None
        db.close()
        print(json.dumps({"dataclasses": made,
                          "repair": "hermes_store.backends.sqlite.files.repair" in sys.modules}))
    """)
    run = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, cwd=REPO, timeout=120)
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout)
    # RetryPolicy stays a dataclass: it validates its fields and is public API
    assert found["dataclasses"] == ["hermes_store.policy.RetryPolicy"]
    assert found["repair"] is False
