"""The migration lock (``files/ops.migration_lock``): one holder at a time, and no lock
file left beside the store once nobody holds it — the holder removes it before letting
go, and a waiter that got the lock of the removed file takes it again at the path."""

from __future__ import annotations

import os
import threading
import time

from hermes_store.backends.sqlite.files.ops import migration_lock


def test_one_holder_at_a_time_and_nothing_left_behind(tmp_path):
    db = tmp_path / "state.db"
    counter = tmp_path / "counter"
    counter.write_text("0")
    inside, most, errors = [0], [0], []
    guard = threading.Lock()

    def worker():
        try:
            for _ in range(25):
                with migration_lock(db):
                    with guard:
                        inside[0] += 1
                        most[0] = max(most[0], inside[0])
                    value = int(counter.read_text())  # read, wait, write: a lost update
                    time.sleep(0.0005)                # shows if two ever hold it
                    counter.write_text(str(value + 1))
                    with guard:
                        inside[0] -= 1
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert most[0] == 1
    assert int(counter.read_text()) == 8 * 25
    assert sorted(os.listdir(tmp_path)) == ["counter"]  # no state.db.migrate.lock
