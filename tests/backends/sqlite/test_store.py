"""The store on the filesystems and libraries it meets, and under a file replaced while
it runs — through ``SessionDB`` and the CLI, on real files and processes. The mount
table is the seam: ``filesystem.MOUNTINFO`` points at a file written here, in which the
test's folder is a network or VM-share mount."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hermes_store import SessionDB
from hermes_store.backends.sqlite.files import filesystem, journal
from hermes_store.backends.sqlite.library import connect, library
from hermes_store.cli import app
from hermes_store.errors import StoreReplacedError


WORKERS = Path(__file__).resolve().parents[2] / "support" / "workers"


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.delenv(journal.ENV, raising=False)
    monkeypatch.setattr(journal, "_warned", set())


def _mount(monkeypatch, tmp_path, folder: Path, fstype: str, source: str = "server:/export"):
    """Make ``folder`` a ``fstype`` mount in the table the store reads."""
    folder.mkdir(parents=True, exist_ok=True)
    table = tmp_path / "mountinfo"
    table.write_text(f"1 0 0:1 / / rw,relatime - ext4 /dev/vda rw\n"
                     f"2 1 0:2 / {os.path.realpath(folder)} rw,relatime - {fstype} {source} rw\n")
    monkeypatch.setattr(filesystem, "MOUNTINFO", str(table))
    return folder


def _journal_mode(path) -> str:
    conn = connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        conn.close()


def _cli(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.output


def _sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# --------------------------------------------------------------------------- filesystems

@pytest.mark.parametrize(("fstype", "source"), [
    ("nfs4", "fileserver:/export/home"), ("cifs", "//nas/share"),
    ("fuse.sshfs", "alice@build:/srv"), ("virtiofs", "mount0"), ("9p", "vol0"),
])
def test_a_new_store_on_a_network_or_vm_share_is_created_in_delete_mode(
        tmp_path, monkeypatch, caplog, fstype, source):
    folder = _mount(monkeypatch, tmp_path, tmp_path / "mnt", fstype, source)
    caplog.set_level(logging.WARNING, logger="hermes_store.backends.sqlite")
    path = folder / "state.db"
    with SessionDB(path) as db:
        db.create_session("s1", source="cli")
        db.append_message("s1", role="user", content="on a shared mount")
        assert [m["content"] for m in db.get_messages("s1")] == ["on a shared mount"]
    assert _journal_mode(path) == "delete"
    assert not Path(f"{path}-wal").exists()
    with SessionDB(path) as db:  # opened again: no second warning from this process
        assert len(db.get_messages("s1")) == 1
    ours = [r.getMessage() for r in caplog.records if "journal_mode=DELETE" in r.getMessage()]
    assert len(ours) == 1, ours
    assert fstype in ours[0] and str(path) in ours[0]


def test_an_existing_wal_file_there_is_not_downgraded_and_doctor_flags_it(tmp_path, monkeypatch):
    local = tmp_path / "local" / "state.db"
    with SessionDB(local) as db:  # a WAL file made on a local disk ...
        db.create_session("s1", source="cli")
    assert _journal_mode(local) == "wal"
    folder = _mount(monkeypatch, tmp_path, tmp_path / "share", "virtiofs", "mount0")
    path = folder / "state.db"
    os.rename(local, path)  # ... moved onto a virtiofs bind mount
    with SessionDB(path) as db:
        db.append_message("s1", role="user", content="still WAL")
    assert _journal_mode(path) == "wal"

    code, output = _cli("--db", path, "--json", "maintenance", "doctor")
    assert code == 1, output
    checks = {c["check"]: c for c in json.loads(output)["checks"]}
    flagged = checks["journal_mode"]
    assert flagged["status"] == "problem"
    assert "virtiofs" in flagged["detail"]
    assert f"hermes-store --db {path} maintenance journal-mode delete" in flagged["detail"]

    # the fix it names, with nothing else holding the file
    code, output = _cli("--db", path, "maintenance", "journal-mode", "delete")
    assert code == 0, output
    assert "journal_mode wal -> delete" in output
    assert _journal_mode(path) == "delete"
    code, output = _cli("--db", path, "--json", "maintenance", "doctor")
    assert code == 0, output
    checks = {c["check"]: c for c in json.loads(output)["checks"]}
    assert checks["journal_mode"]["status"] == "ok"


def test_journal_mode_conversion_is_refused_while_a_store_has_the_file_open(tmp_path):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s1", source="cli")
        code, output = _cli("--db", path, "maintenance", "journal-mode", "delete")
        assert code == 6, output
        assert "another connection has the file open" in " ".join(output.split())
        db.append_message("s1", role="user", content="the store goes on")
    assert _journal_mode(path) == "wal"


def test_an_explicit_setting_overrides_the_filesystem_either_way(tmp_path, monkeypatch):
    folder = _mount(monkeypatch, tmp_path, tmp_path / "nfs", "nfs4")
    with SessionDB(folder / "wal.db", journal_mode="wal") as db:  # the operator knows best
        db.create_session("s1", source="cli")
    assert _journal_mode(folder / "wal.db") == "wal"
    local = tmp_path / "disk"
    with SessionDB(local / "delete.db", journal_mode="DELETE") as db:
        db.create_session("s1", source="cli")
    assert _journal_mode(local / "delete.db") == "delete"  # the migration made it so, too
    monkeypatch.setenv(journal.ENV, "wal")
    with SessionDB(folder / "env.db") as db:
        db.create_session("s1", source="cli")
    assert _journal_mode(folder / "env.db") == "wal"
    monkeypatch.delenv(journal.ENV)
    code, output = _cli("--journal-mode", "delete", "--db", local / "cli.db", "db", "upgrade")
    assert code == 0, output
    assert _journal_mode(local / "cli.db") == "delete"
    code, output = _cli("--journal-mode", "truncate", "--db", local / "cli.db", "status")
    assert code == 2 and "'wal' or 'delete'" in " ".join(output.split())


def test_the_real_filesystem_of_this_run_keeps_wal(tmp_path):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s1", source="cli")
    assert _journal_mode(path) == "wal"
    code, output = _cli("--db", path, "--json", "status")
    assert code == 0, output
    fs = json.loads(output)["filesystem"]
    assert fs["kind"] == "local" and fs["wal_safe"] is True and fs["fstype"]


# --------------------------------------------------------------------------- the library

def test_status_reports_the_library_its_version_and_the_fix(tmp_path):
    path = tmp_path / "state.db"
    SessionDB(path).close()
    code, output = _cli("--db", path, "--json", "status")
    assert code == 0, output
    got = json.loads(output)["sqlite_library"]
    lib = library()
    assert got["name"] == lib.name and got["sqlite_version"] == lib.version_text
    assert got["wal_reset_fix"] is lib.has_wal_reset_fix
    assert got["chosen_by"] == lib.chosen_by
    assert got["wal_reset_race_closed_by"] == ("fixed library" if lib.has_wal_reset_fix
                                               else "writer-locked checkpoints")
    if os.environ.get("HERMES_STATE_SQLITE_MODULE") is None:  # one SQLite per process
        assert (got["name"], got["chosen_by"]) == ("sqlite3", "default")
    code, output = _cli("--db", path, "status")
    line = next(x for x in output.splitlines() if x.startswith("sqlite "))
    assert lib.version_text in line and lib.name in line
    words = " ".join(output.split())
    assert f"chosen by {lib.chosen_by}" in words
    assert f"WAL-reset race closed by {lib.race_guard}" in words
    # doctor says the same in words, and the opt-in's hazard while it runs
    code, output = _cli("--db", path, "--json", "maintenance", "doctor")
    finding = next(f for f in json.loads(output)["checks"] if f["check"] == "sqlite")
    assert finding["status"] == "ok"
    assert f"chosen by {lib.chosen_by}" in finding["detail"]
    assert f"WAL-reset race closed by {lib.race_guard}" in finding["detail"]
    assert ("drop each other's file locks" in finding["detail"]) is (lib.name == "pysqlite3")


# --------------------------------------------------------------------------- replaced files

def _new_file(folder: Path, name: str = "incoming.db") -> Path:
    """A valid store with one session of its own, closed (as a restore would bring)."""
    incoming = folder / name
    with SessionDB(incoming, journal_mode="delete") as other:
        other.create_session("restored", source="cli")
        other.append_message("restored", role="user", content="from the backup")
    return incoming


def test_replace_by_rename_under_an_open_store(tmp_path, monkeypatch):
    from hermes_store.backends.sqlite.files import repair as schema_repair

    path = tmp_path / "state.db"
    db = SessionDB(path)
    db.create_session("s1", source="cli")
    for i in range(5):
        db.append_message("s1", role="user", content=f"before {i}")
    incoming = _new_file(tmp_path)
    os.replace(incoming, path)
    sha = _sha(path)
    repairs = []
    monkeypatch.setattr(schema_repair, "repair", lambda *a, **k: repairs.append(a))
    monkeypatch.setattr(schema_repair, "probe_or_heal", lambda *a, **k: repairs.append(a))

    writes = [
        lambda: db.append_message("s1", role="user", content="after"),
        lambda: db.create_session("s2", source="cli"),
        lambda: db.set_session_title("s1", "Renamed"),
        lambda: db.delete_session("s1"),
        lambda: db.vacuum(),
    ]
    for attempt in range(3):  # every later write, not only the first
        for write in writes:
            with pytest.raises(StoreReplacedError) as err:
                write()
            assert str(path) in str(err.value) and "replaced while this store had it open" in str(err.value)
    # a thread of the store that connects only now does not reach the new file either
    seen = []
    thread = threading.Thread(target=lambda: seen.append(_try(lambda: db.get_session("s1"))))
    thread.start()
    thread.join()
    assert seen == ["StoreReplacedError"]
    assert db.replaced
    db.close()  # no checkpoint into the old file, nothing into the new one
    assert _sha(path) == sha and repairs == []
    assert not list(tmp_path.glob("*.schema-backup-*"))
    # the old file's log was moved out of the new file's way, and kept
    assert not Path(f"{path}-wal").exists()
    kept = sorted(p.name for p in tmp_path.glob("state.db.replaced-*"))
    assert [n[-4:] for n in kept] == ["-shm", "-wal"], kept
    with SessionDB(path) as fresh:  # picked up on the next open
        assert fresh.get_session("s1") is None
        assert [m["content"] for m in fresh.get_messages("restored")] == ["from the backup"]


def _try(fn) -> str:
    try:
        fn()
    except Exception as exc:
        return type(exc).__name__
    return "ok"


def test_reopen_picks_up_the_new_file_when_asked(tmp_path):
    path = tmp_path / "state.db"
    db = SessionDB(path)
    db.create_session("s1", source="cli")
    os.replace(_new_file(tmp_path), path)
    with pytest.raises(StoreReplacedError):
        db.append_message("s1", role="user", content="lost?")
    db.reopen()
    assert not db.replaced
    assert db.get_session("s1") is None and db.get_session("restored") is not None
    db.append_message("restored", role="user", content="written to the new file")
    db.close()
    with SessionDB(path) as check:
        assert [m["content"] for m in check.get_messages("restored")] == [
            "from the backup", "written to the new file"]


def test_a_file_moved_away_is_refused_too_and_left_whole(tmp_path):
    path = tmp_path / "state.db"
    db = SessionDB(path)
    db.create_session("s1", source="cli")
    db.append_message("s1", role="user", content="kept")
    moved = tmp_path / "moved.db"
    os.rename(path, moved)
    with pytest.raises(StoreReplacedError, match="moved away or deleted"):
        db.append_message("s1", role="user", content="nowhere")
    db.close()
    assert not path.exists()
    for suffix in ("-wal", "-shm"):  # put the old file's log back beside it, as docs say
        for kept in tmp_path.glob(f"state.db.replaced-*{suffix}"):
            os.rename(kept, f"{moved}{suffix}")
    with SessionDB(moved) as db:
        assert [m["content"] for m in db.get_messages("s1")] == ["kept"]


def test_replace_by_rename_under_two_writer_processes(tmp_path):
    path = tmp_path / "state.db"
    SessionDB(path).close()
    marker = tmp_path / "replaced"
    procs = [subprocess.Popen([sys.executable, str(WORKERS / "replaced_writer.py"), str(path),
                               str(i), str(marker), "12"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in (1, 2)]
    firsts = [p.stdout.readline() for p in procs]  # each has appended once: both are writing
    assert all('"ok"' in line for line in firsts), [p.stderr.read() for p in procs]
    time.sleep(0.3)
    incoming = _new_file(tmp_path)
    sha = _sha(incoming)
    os.replace(incoming, path)
    marker.write_text("done")
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    for report in reports:
        assert report["after"] == ["StoreReplacedError"] * 12, report
        assert report["library"] == library().name
    assert _sha(path) == sha  # untouched by the old handles, their close included
    assert not list(tmp_path.glob("*.schema-backup-*"))
    with SessionDB(path) as fresh:
        assert fresh.get_session("w1") is None and fresh.get_session("w2") is None
        assert [m["content"] for m in fresh.get_messages("restored")] == ["from the backup"]


def test_a_repair_never_heals_a_file_replaced_while_it_ran(tmp_path, monkeypatch):
    """The duplicated-schema heal (upstream #43149) checks, under its lock and again
    after its backup copy, that the file is still the one it diagnosed."""
    from hermes_store.backends.sqlite.files import repair as schema_repair

    path = tmp_path / "state.db"
    SessionDB(path).close()
    conn = connect(path, isolation_level=None)
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute("INSERT INTO sqlite_master SELECT type, name, tbl_name, rootpage, sql "
                 "FROM sqlite_master WHERE name = 'messages_fts'")
    conn.execute("PRAGMA writable_schema=OFF")
    conn.close()
    damaged = _sha(path)
    incoming = _new_file(tmp_path)
    real_backup = schema_repair._backup

    def backup_then_replace(p):  # a restore lands while the repair copies the file
        made = real_backup(p)
        os.rename(p, tmp_path / "was-state.db")
        os.replace(incoming, p)
        return made

    monkeypatch.setattr(schema_repair, "_backup", backup_then_replace)
    sha_new = _sha(incoming)
    with pytest.raises(StoreReplacedError):
        schema_repair.repair(path)
    assert _sha(path) == sha_new                        # the new file untouched
    assert _sha(tmp_path / "was-state.db") == damaged   # the old one not "healed" either
