"""state_meta and compression locks/cooldowns: api-catalog §10, §11."""

from __future__ import annotations

import time

import sqlalchemy as sa

from hermes_store import schema
from support.repository import backend, db, db_path, db_target  # noqa: F401


def test_meta_roundtrip(db):
    assert db.get_meta("k") is None
    db.set_meta("k", "v1")
    db.set_meta("k", "v2")
    assert db.get_meta("k") == "v2"
    db.set_meta("n", 5)
    assert db.get_meta("n") == "5"
    db.set_meta("none", None)
    assert db.get_meta("none") is None


def test_compression_lock_protocol(db):
    assert db.try_acquire_compression_lock("s1", "h1") is True
    assert db.try_acquire_compression_lock("s1", "h1") is True  # same holder again
    assert db.try_acquire_compression_lock("s1", "h2") is False
    assert db.get_compression_lock_holder("s1") == "h1"
    assert db.refresh_compression_lock("s1", "h2") is False
    assert db.refresh_compression_lock("s1", "h1", ttl_seconds=60) is True
    db.release_compression_lock("s1", "h2")  # not the holder: nothing happens
    assert db.get_compression_lock_holder("s1") == "h1"
    db.release_compression_lock("s1", "h1")
    assert db.get_compression_lock_holder("s1") is None
    assert db.try_acquire_compression_lock("", "h1") is False
    assert db.get_compression_lock_holder("") is None


def test_expired_lock_is_reclaimed(db):
    assert db.try_acquire_compression_lock("s1", "crashed", ttl_seconds=-1) is True
    assert db.get_compression_lock_holder("s1") is None  # expired
    assert db.refresh_compression_lock("s1", "crashed") is False
    assert db.try_acquire_compression_lock("s1", "new") is True
    assert db.get_compression_lock_holder("s1") == "new"
    with db._read() as conn:
        rows = conn.execute(sa.select(schema.compression_locks)).all()
    assert [r.holder for r in rows] == ["new"]


def test_lock_failure_is_fail_closed(db, monkeypatch):
    def broken(fn, **locks):
        raise sa.exc.OperationalError("INSERT", {}, Exception("disk I/O error"))

    monkeypatch.setattr(db, "_write", broken)
    assert db.try_acquire_compression_lock("s1", "h") is False
    assert db.refresh_compression_lock("s1", "h") is False
    assert db.release_compression_lock("s1", "h") is None


def test_cooldown_and_streak(db):
    db.create_session("s", "cli")
    assert db.get_compression_failure_cooldown("s") is None
    db.record_compression_failure_cooldown("s", time.time() + 60, error="too big")
    info = db.get_compression_failure_cooldown("s")
    assert info["error"] == "too big" and 0 < info["remaining_seconds"] <= 60
    db.record_compression_failure_cooldown("s", time.time() - 1)
    assert db.get_compression_failure_cooldown("s") is None
    db.record_compression_failure_cooldown("s", time.time() + 60)
    db.clear_compression_failure_cooldown("s")
    assert db.get_compression_failure_cooldown("s") is None
    assert db.get_compression_fallback_streak("s") == 0
    db.set_compression_fallback_streak("s", 3)
    assert db.get_compression_fallback_streak("s") == 3
    db.set_compression_fallback_streak("s", -4)
    assert db.get_compression_fallback_streak("s") == 0
    assert db.get_compression_fallback_streak("missing") == 0
