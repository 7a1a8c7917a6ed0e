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


def append_concurrently(path: str, n: int, rounds: int, start, results) -> None:
    """Per round: one message to the shared session, a batch of two to it (one with a
    tool call), one message to this worker's own session; report every id."""
    db = SessionDB(path)
    start.wait()
    ids = []
    for r in range(rounds):
        ids.append(db.append_message("shared", "user", f"{n}:{r}:0"))
        ids.extend(db.append_messages("shared", [
            {"role": "assistant", "content": f"{n}:{r}:1", "tool_calls": [{"id": "c"}]},
            {"role": "tool", "content": f"{n}:{r}:2", "tool_call_id": "c"},
        ]))
        ids.append(db.append_message(f"own-{n}", "user", f"{n}:{r}"))
    results.put(ids)
    db.close()


def claim_titles(path: str, session_id: str, rounds: int, barriers, results) -> None:
    """Claim "Deploy <r>" for ``session_id`` in each round, both processes released
    together by the round's barrier; report "won" or the error text per round."""
    from hermes_store import TitleError

    db = SessionDB(path)
    outcomes = []
    for r in range(rounds):
        barriers[r].wait(60)
        try:
            db.set_session_title(session_id, f"Deploy {r}")
            outcomes.append("won")
        except TitleError as exc:
            outcomes.append(str(exc))
    results.put((session_id, outcomes))
    db.close()


def number_title(path: str, session_id: str, base: str, barrier, results) -> None:
    """Give ``session_id`` the next free title of ``base``'s lineage (``base``, ``base #2``
    …), all processes released together: read the next number, claim it, and on a
    collision (another process claimed that number first) read again. Reports the
    title won and the collisions met."""
    from hermes_store import TitleError

    db = SessionDB(path)
    barrier.wait(60)
    collisions = 0
    for _ in range(100):
        title = db.get_next_title_in_lineage(base)
        try:
            db.set_session_title(session_id, title)
            break
        except TitleError:
            collisions += 1
    results.put((session_id, db.get_session(session_id)["title"], collisions))
    db.close()
