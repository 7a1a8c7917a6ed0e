"""Copy a whole store from one engine to the other: ``hermes-store db copy SRC DST`` (D14).

A SQLite file into PostgreSQL to scale out, a PostgreSQL database into a SQLite file to
take a snapshot home (and file → file, server → server). ``SRC`` and ``DST`` are paths
or SQLAlchemy URLs (:mod:`hermes_store.location`).

``copy_store(source, destination, *, resume=False, …) -> CopyReport``
    In order:

    1. **Source.** It must be at head (and so must its Telegram topic tables, when it
       has them): otherwise :class:`~hermes_store.errors.SchemaOutOfDateError` naming
       ``hermes-store db upgrade``. It is only read, in one read-only snapshot per run.
       A SQLite source whose rows break a foreign key or hold an empty key is refused
       (PostgreSQL would reject those rows; ``hermes-store recover`` repairs them).
    2. **Destination.** Missing or empty: created at head (``migrate.upgrade``: SQLite's
       migrations, or PostgreSQL's baseline), with the Telegram topic tables when the
       source has them. A destination that holds rows is refused (:class:`CopyError`)
       unless ``resume`` is given and it holds the progress record of an interrupted
       copy of the same source.
    3. **Prepare** (one transaction). The progress record (table
       ``hermes_store_copy``) is created. What would slow the load or change the
       copied rows is suspended, its definition kept in the record so an interrupted
       run can restore it: secondary indexes (and on PostgreSQL the foreign keys:
       a parent session may come after its children in key order), the display-order
       triggers (they would number rows whose order is NULL). Full-text: on SQLite
       the migrations' rebuild window (``fts_rebuild_high_water`` /
       ``fts_rebuild_progress``) is opened over the source's message ids, so the gated
       triggers skip the rows; on PostgreSQL the two GIN indexes are dropped
       (``fts.postgres.drop_indexes``).
    4. **Load**, table by table: batches read by keyset pagination on the primary key
       (bounded in rows and in bytes, never a whole table), written with ``COPY`` on
       PostgreSQL and ``executemany`` on SQLite; each batch commits together with its
       last key in the progress record, so a rerun with ``resume`` continues after the
       last committed batch and never writes a row twice.
    5. **Finish** (one transaction): the suspended objects come back from their recorded
       definitions; the full-text indexes are built (SQLite: ``fts.maintenance.rebuild``,
       which also closes the window; PostgreSQL: ``fts.postgres.create_indexes``);
       ``messages``' id counter is carried over (``setval`` / ``sqlite_sequence``), so
       ids are never reused; SQLite's ``foreign_key_check`` must be clean.
    6. **Verify** (:func:`verify_copy`): every table's row count and content hash on
       both sides; a mismatch raises :class:`CopyMismatchError` naming the tables. The
       progress record is removed only once verification passed — into a file, in the
       transaction that puts every system prompt back on its session row and marks the
       file to keep them there (``repository.system_prompts.share_prompts_inline``): a
       file is what a user takes back to a pre-v25 agent, which reads prompts only there.

What is copied: every table of the head schema but ``schema_version`` (the destination
is created at head itself), the Telegram topic tables when the source has them, and
every ``state_meta`` key but the full-text layer's own (``fts_*``: derived data is
rebuilt in the destination, never copied) and a file's own (its identity, its
``inline_system_prompts`` mark). Ids and values come through unchanged:
``messages.id``, every character of text (NUL and the ``"\\x00json:"`` marker through
PostgreSQL's NUL encoding), REAL values bit for bit, 64-bit integers, BLOBs.

The content hash of a table: each row's values (in the head schema's column order, as
Python reads them from either engine; a session's inline system prompt as none where it
repeats the prompt the row references) hashed with BLAKE2b, and the row hashes summed
modulo 2**128. The sum does not depend on the order rows are read in, so the two engines'
collations (and the NUL encoding's effect on the order of keys) cannot make equal tables
differ; rows are still streamed in key order in bounded batches.

Copy a store nobody writes to (stop the gateway and agents, or copy a
``hermes-store db backup``): each run reads one snapshot, but a resumed copy reads a
later one, and verification compares with the source as it is at the end.

The package, by step: ``tables`` (what is copied, the progress record), ``sides`` (one
database of the copy and the checks on it), ``reading`` (keyset batches and the content
hash), ``copy`` (prepare, load, finish, verify), ``report``. Engine specifics (COPY or
``executemany``, what is suspended, the id counter, the full-text set-up) are each side's
backend's (``Backend.copying``).
"""

from .copy import copy_store, verify_copy
from .reading import Batch, read_batches, row_digest, table_digest
from .report import CopyError, CopyMismatchError, CopyReport, TableReport
from .tables import BATCH_BYTES, BATCH_ROWS, PROGRESS_TABLE

__all__ = [
    "BATCH_BYTES",
    "BATCH_ROWS",
    "Batch",
    "CopyError",
    "CopyMismatchError",
    "CopyReport",
    "PROGRESS_TABLE",
    "TableReport",
    "copy_store",
    "read_batches",
    "row_digest",
    "table_digest",
    "verify_copy",
]
