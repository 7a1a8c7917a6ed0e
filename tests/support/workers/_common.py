"""Shared bits of the worker scripts (run as plain `python3 worker.py ...`)."""

from __future__ import annotations

import json
import sys


def say(**fields) -> None:
    """One JSON line on stdout, flushed at once: what the parent test may rely on."""
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def signal_line(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def open_store(path: str, busy_timeout: float | None = None, attempts: int | None = None,
               jitter_max: float | None = None, outage_timeout: float | None = None):
    """A SessionDB on `path`, optionally with a tighter retry policy (to force retries,
    or to give up on a server that is away sooner)."""
    from hermes_store import SessionDB

    if busy_timeout is None and attempts is None and jitter_max is None \
            and outage_timeout is None:
        return SessionDB(path)
    from hermes_store.units import RetryPolicy

    fields = {}
    if outage_timeout is not None:
        fields["outage_timeout"] = outage_timeout
    if busy_timeout is not None:
        fields["busy_timeout"] = busy_timeout
    if attempts is not None:
        fields["attempts"] = attempts
    if jitter_max is not None:
        fields["jitter_min"] = 0.0
        fields["jitter_max"] = jitter_max
    return SessionDB(path, retry=RetryPolicy(**fields))


def write_units_of(db):
    from hermes_store.units import WriteUnits

    for value in vars(db).values():
        if isinstance(value, WriteUnits):
            return value
    raise RuntimeError("SessionDB exposes no WriteUnits instance")
