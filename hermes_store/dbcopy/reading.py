"""Reading a table in key order, in bounded batches, and hashing what was read.

The content hash of a table: each row's values (in the head schema's column order, as
Python reads them from either engine) hashed with BLAKE2b, and the row hashes summed
modulo 2**128. The sum does not depend on the order rows are read in, so the two
engines' collations (and the NUL encoding's effect on the order of keys) cannot make
equal tables differ; rows are still streamed in key order in bounded batches.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .tables import BATCH_BYTES, BATCH_ROWS, Spec


def _after(spec: Spec, last: Sequence | None):
    """The keyset condition "key greater than ``last``" (a row value for composite keys)."""
    key = spec.key
    if last is None:
        return None
    if len(key) == 1:
        return key[0] > sa.bindparam("k0", last[0], type_=key[0].type)
    return sa.tuple_(*key) > sa.tuple_(*[
        sa.bindparam(f"k{i}", v, type_=c.type) for i, (c, v) in enumerate(zip(key, last))
    ])


def _approx_bytes(rows: list) -> int:
    """About how many bytes of values ``rows`` hold, from a sample of up to 64 rows
    (summing every value of every row would cost more than the copy's own work)."""
    step = max(1, len(rows) // 64)
    sample = rows[::step]
    size = sum(len(v) if isinstance(v, (str, bytes)) else 8 for row in sample for v in row)
    return size * len(rows) // len(sample)


@dataclass(frozen=True)
class Batch:
    rows: list[tuple]
    #: the key of the last row (where the next batch starts)
    last: tuple
    #: no row comes after this batch
    final: bool


def read_batches(
    conn: Connection,
    spec: Spec,
    after: Sequence | None = None,
    *,
    max_rows: int = BATCH_ROWS,
    max_bytes: int = BATCH_BYTES,
    columns: Sequence[sa.ColumnElement] | None = None,
) -> Iterator[Batch]:
    """Batches of ``spec``'s table after key ``after``, in key order. Each batch is one
    ``SELECT … WHERE key > last ORDER BY key LIMIT n``; ``n`` shrinks when rows are
    large so that a batch holds about ``max_bytes``. ``columns``: what is read of each
    row (``spec.columns``, or expressions in their places)."""
    if max_rows < 1:
        raise ValueError(f"max_rows must be at least 1, got {max_rows!r}")
    positions = spec.key_positions
    limit = max_rows
    last = tuple(after) if after is not None else None
    base = sa.select(*(columns or spec.columns)).order_by(*spec.key)
    while True:
        stmt = base
        condition = _after(spec, last)
        if condition is not None:
            stmt = stmt.where(condition)
        rows = [tuple(r) for r in conn.execute(stmt.limit(limit))]
        if not rows:
            return
        last = tuple(rows[-1][i] for i in positions)
        final = len(rows) < limit
        yield Batch(rows, last, final)
        if final:
            return
        size = _approx_bytes(rows)
        limit = max(1, min(max_rows, max_bytes * len(rows) // max(size, 1)))



_MASK = (1 << 128) - 1


def row_digest(row: tuple) -> int:
    """One row's hash: BLAKE2b-128 of the repr of its values. ``repr`` is exact for
    every type a column holds here (int, float — shortest round-trip form, str, bytes,
    None; both drivers return BLOBs as ``bytes``) and tells them apart (``5`` vs
    ``5.0``, ``'5'`` vs ``b'5'``)."""
    text = repr(row).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(text, digest_size=16).digest(), "big")


def table_digest(conn: Connection, spec: Spec, *, tick: Callable[[int], None] | None = None,
                 max_rows: int = BATCH_ROWS) -> tuple[int, str]:
    """``(rows, hash)`` of one table as the connection reads it (streamed), each row as
    verification compares it (``Spec.compared_columns``)."""
    count = 0
    total = 0
    for batch in read_batches(conn, spec, max_rows=max_rows, columns=spec.compared_columns):
        for row in batch.rows:
            if spec.keep(row):
                count += 1
                total = (total + row_digest(row)) & _MASK
        if tick is not None:
            tick(count)
    return count, f"{total:032x}"


__all__ = ["Batch", "read_batches", "row_digest", "table_digest"]
