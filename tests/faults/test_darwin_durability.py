"""Issue 31, row 11: power loss on macOS (upstream #30636).

macOS's ``fsync`` hands the data to the drive, whose cache a power cut empties: only
``F_FULLFSYNC`` reaches the platter. SQLite uses it when ``fullfsync`` (every sync) and
``checkpoint_fullfsync`` (a checkpoint's syncs) are on. The store's engine sets both on
darwin itself, beside ``synchronous=FULL``, so every process that opens a store gets
them, not only the agent through its shim. This machine is not a Mac: a child process
runs with ``sys.platform`` set to "darwin" before the package is imported and reads the
pragmas back from the store's own connection (and from one of the agent's own
databases after the shim's ``apply_wal_with_fallback``, which applies the engine's list);
a native run shows SQLite's defaults are left alone elsewhere.
"""

from __future__ import annotations

from support import reliability as rs
from support.faults import Oracle, assert_no_strays, assert_sound

#: SQLite's answers: synchronous FULL is 2; the fsync switches are 1 when on, 0 off
FULL = 2


def _open_as(platform: str, tmp_path):
    path = rs.fresh_store_file(tmp_path / "state.db")
    done = rs.run("darwin_pragmas", path, platform, timeout=60)
    assert done.returncode == 0, done.stderr
    report = rs.json_lines(done.stdout)[-1]
    oracle = Oracle()
    oracle.acknowledge(report["message_id"], "s", "survives a power cut")
    return path, report, oracle


def _assert_whole(path, oracle) -> None:
    assert oracle.missing(path) == []
    assert_sound(path)
    assert_no_strays(path.parent, "state.db.kanban.db*")  # the agent's own database


def test_the_engine_sets_full_fsync_on_darwin(tmp_path):
    path, report, oracle = _open_as("darwin", tmp_path)
    assert report["platform"] == "darwin"
    assert report["pragmas"] == {"checkpoint_fullfsync": 1, "fullfsync": 1, "synchronous": FULL}
    assert report["agents"] == report["pragmas"]  # the shim applies the engine's list
    _assert_whole(path, oracle)


def test_other_platforms_keep_sqlites_defaults(tmp_path):
    path, report, oracle = _open_as("native", tmp_path)
    assert report["platform"] != "darwin"
    assert report["pragmas"] == {"checkpoint_fullfsync": 0, "fullfsync": 0, "synchronous": FULL}
    assert report["agents"]["checkpoint_fullfsync"] == report["agents"]["fullfsync"] == 0
    _assert_whole(path, oracle)
