"""Process entry points for the concurrency tests (importable by spawned children)."""

from __future__ import annotations

import time

import sqlalchemy as sa

from hermes_store import SessionDB, schema


def hold_write_lock(path: str, locked, release, hold_seconds: float) -> None:
    """Take the write lock in one unit, tell the parent, keep it until released or
    ``hold_seconds`` pass."""
    db = SessionDB(path)

    def unit(conn):
        conn.execute(sa.insert(schema.state_meta).values(key="holder", value="yes"))
        locked.set()
        release.wait(hold_seconds)

    db._write(unit)
    db.close()


def bump_counter(path: str, units: int, start, results) -> None:
    """Run ``units`` read-modify-write units on one counter; report executions."""
    db = SessionDB(path)
    executions = 0
    start.wait()
    meta = schema.state_meta
    for _ in range(units):
        def unit(conn):
            nonlocal executions
            executions += 1
            value = conn.execute(sa.select(meta.c.value).where(meta.c.key == "counter")).scalar()
            conn.execute(sa.update(meta).where(meta.c.key == "counter")
                         .values(value=str(int(value) + 1)))
        db._write(unit)
    results.put((executions, db._units.retries))
    db.close()


def append_many(path: str, session_id: str, count: int, start) -> None:
    db = SessionDB(path)
    start.wait()
    for i in range(count):
        db.append_message(session_id, "user" if i % 2 else "assistant", f"message {i}")
        db.update_token_counts(session_id, input_tokens=3, output_tokens=1, api_call_count=1,
                               model="m-a" if i % 3 else "m-b")
        time.sleep(0.001)
    db.close()
