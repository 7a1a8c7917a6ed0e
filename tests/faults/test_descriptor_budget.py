"""Issue 31, row 6 (upstream #98573): descriptor exhaustion from unbounded connections.

Upstream's agent ran out of descriptors (EMFILE) when many threads read through several
stores: every thread kept connections of its own. Here 200 threads read (and 20 of them
append) through 4 stores of one process, in a worker process that counts, while they
run, the descriptors that name the store's file and sidecars (SQLite) or its sockets to
the server (PostgreSQL). Every read must succeed, and the peak must stay within the
documented budget (``connections.most_connections``; docs/operations.md, "Descriptors
and connections"): before the budget, 200 threads on 4 stores held about 1 750. With
``RLIMIT_NOFILE`` lowered below the store's headroom the same 200 threads still all
succeed (they share lent connections), and with no descriptor left the reads fail with
``DescriptorLimitError`` naming the limit.
"""

from __future__ import annotations

from hermes_store import SessionDB, errors
from support import reliability as rs
from support.faults import Oracle, assert_no_strays, assert_sound
from support.reliability import backend, store_target  # noqa: F401

THREADS, STORES, ROUNDS = 200, 4, 3
SESSION = "shared"


def _prepare(target, oracle: Oracle) -> None:
    with SessionDB(target) as db:
        assert oracle.create_session(db, SESSION)
        for n in range(3):
            assert isinstance(oracle.append(db, SESSION, f"needle number {n}"), int)


def _load(target, oracle: Oracle, *options) -> dict:
    """Run the worker; every append it reports goes to the oracle. Its summary."""
    proc = rs.spawn("descriptor_load", target, THREADS, STORES, ROUNDS, SESSION, *options)
    out, err = rs.finish(proc, timeout=240)
    assert proc.returncode == 0, f"the worker failed:\n{err}"
    lines = rs.json_lines(out)
    summary = lines[-1]
    assert summary.get("done"), out
    for line in lines[:-1]:
        oracle.acknowledge(line["id"], line["session"], line["content"])
    return summary


def _budget(target) -> int:
    """The most descriptors the stores may hold: each SQLite connection holds the file
    and its -wal (the -shm is one per file and process); a PostgreSQL connection is
    one socket, at most ``pool_size + max_overflow`` per store."""
    if rs.is_server(target):
        from hermes_store.backends.postgresql.engine import (DEFAULT_MAX_OVERFLOW,
                                                              DEFAULT_POOL_SIZE)

        return STORES * (DEFAULT_POOL_SIZE + DEFAULT_MAX_OVERFLOW)
    from hermes_store.connections import DESCRIPTORS_PER_CONNECTION, most_connections

    return DESCRIPTORS_PER_CONNECTION * most_connections(STORES) + 1


def _assert_nothing_lost(target, oracle: Oracle) -> None:
    stored = rs.message_ids(target)
    lost = [mid for mid, want in oracle.messages.items() if stored.get(mid) != want]
    assert lost == [], f"acknowledged appends missing: {lost}"
    if rs.is_server(target):
        rs.assert_store_whole(target)
    else:
        assert oracle.missing(target) == []
        assert_sound(target)
        assert_no_strays(target.parent)


def test_200_threads_on_4_stores_stay_within_the_descriptor_budget(store_target):
    oracle = Oracle()
    _prepare(store_target, oracle)

    summary = _load(store_target, oracle)

    assert summary["errors"] == []
    assert len(oracle.messages) == 3 + STORES * THREADS // 10
    budget = _budget(store_target)
    assert 0 < summary["peak"] <= budget, (
        f"{THREADS} threads on {STORES} stores held {summary['peak']} descriptors at once; "
        f"the budget is {budget}")
    _assert_nothing_lost(store_target, oracle)
    print(f"\n{THREADS} threads on {STORES} stores: peak {summary['peak']} descriptors "
          f"(budget {budget})")


def test_a_descriptor_limit_below_the_headroom_still_serves_every_thread(tmp_path):
    """``RLIMIT_NOFILE`` a few dozen above what the process has open: no thread may keep
    a connection of its own (the headroom), so all 200 wait their turn for the few the
    stores lend, and none fails."""
    from hermes_store.connections import DESCRIPTOR_HEADROOM

    path = rs.fresh_store_file(tmp_path / "state.db")
    oracle = Oracle()
    _prepare(path, oracle)

    summary = _load(path, oracle, "--spare", DESCRIPTOR_HEADROOM - 16)

    assert summary["errors"] == []
    assert len(oracle.messages) == 3 + STORES * THREADS // 10
    assert summary["peak"] <= DESCRIPTOR_HEADROOM - 16
    _assert_nothing_lost(path, oracle)


def test_no_descriptor_left_is_a_clear_error_naming_the_limit(tmp_path):
    path = rs.fresh_store_file(tmp_path / "state.db")
    oracle = Oracle()
    _prepare(path, oracle)

    summary = _load(path, oracle, "--starve")

    assert len(summary["errors"]) == THREADS
    name = errors.DescriptorLimitError.__name__
    assert all(e.startswith(f"{name}: ") for e in summary["errors"]), summary["errors"][:3]
    assert "RLIMIT_NOFILE" in summary["errors"][0] and str(path) in summary["errors"][0]
    assert len(oracle.messages) == 3  # nothing was acknowledged, nothing written
    _assert_nothing_lost(path, oracle)
