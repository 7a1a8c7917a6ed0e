"""``copy_store`` and ``verify_copy``: the copy's steps, in order (see the package's doc)."""

from __future__ import annotations

import json
import time

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .. import errors, schema, telegram_schema
from ..repository.system_prompts import share_prompts_inline
from .reading import read_batches, table_digest
from ..errors import CopyError, CopyMismatchError
from .report import CopyReport, mismatch_message
from .sides import (
    Side,
    check_source,
    create_destination,
    destination_state,
    id_high_water,
    refuse_rows,
    resolve_pair,
)
from .tables import (
    BATCH_BYTES,
    BATCH_ROWS,
    DISPLAY_TRIGGERS,
    PROGRESS_TABLE,
    P,
    ProgressCallback,
    Spec,
    progress_table,
    specs,
)


class _Writer:
    """Writes batches of one table into the destination (its backend's bulk write;
    ``state_meta`` as an upsert: the source's value wins over a key the destination's
    own schema creation wrote, the Telegram topic version)."""

    def __init__(self, dst: Side, spec: Spec) -> None:
        self.dst = dst
        self.spec = spec
        self.upsert = spec.table is schema.state_meta

    def write(self, conn: Connection, rows: list[tuple]) -> None:
        if not self.upsert:
            self.dst.copying.write_rows(conn, self.spec.table, rows)
            return
        names = [c.name for c in self.spec.columns]
        keys = {c.name for c in self.spec.key}
        stmt = self.dst.backend.insert(self.spec.table)
        stmt = stmt.on_conflict_do_update(
            index_elements=[c.name for c in self.spec.key],
            set_={n: stmt.excluded[n] for n in names if n not in keys},
        )
        conn.execute(stmt, [dict(zip(names, row)) for row in rows])


def copy_store(
    source,
    destination,
    *,
    resume: bool = False,
    batch_rows: int = BATCH_ROWS,
    batch_bytes: int = BATCH_BYTES,
    progress: ProgressCallback | None = None,
) -> CopyReport:
    """Copy the whole store ``source`` into ``destination`` (see module docstring).

    Raises :class:`CopyMismatchError` when verification fails (the report says which
    tables), :class:`CopyError` when the copy cannot start or go on, the package's
    schema and connection errors otherwise. Nothing is written anywhere before both
    sides passed their checks.
    """
    if batch_rows < 1:
        raise errors.InvalidArgumentError(f"batch_rows must be at least 1, got {batch_rows!r}")
    started = time.monotonic()
    src_target, dst_target = resolve_pair(source, destination)
    src = Side(src_target, writable=False)
    dst = Side(dst_target, writable=True)
    report = CopyReport(source=src.display, destination=dst.display)
    try:
        with_topics = check_source(src, strict_destination=dst.strict_types)
        to_copy = specs(with_topics)
        dst_state = destination_state(dst)
        recorded = False
        if dst_state == "head":
            with dst.snapshot() as conn:
                present = dst.tables(conn)
                recorded = PROGRESS_TABLE in present
                if not recorded:
                    refuse_rows(dst, conn, present)
        if recorded:
            _check_resumable(dst, src, resume)
            report.resumed = True
        else:
            create_destination(dst, dst_state == "new", with_topics)
            report.created = dst_state == "new"
            _begin(dst, src, to_copy)
        load_started = time.monotonic()
        _load(src, dst, to_copy, report, batch_rows, batch_bytes, progress)
        report.load_seconds = time.monotonic() - load_started
        finish_started = time.monotonic()
        _finish(src, dst)
        report.finish_seconds = time.monotonic() - finish_started
        verify_started = time.monotonic()
        _verify_into(src, dst, report, progress, batch_rows)
        report.verify_seconds = time.monotonic() - verify_started
        if not report.ok:
            raise CopyMismatchError(mismatch_message(report), report)
        with dst.unit() as conn:
            report.inline_prompts = _share_prompts_inline(dst, conn)
            progress_table.drop(conn)
    finally:
        report.seconds = time.monotonic() - started
        src.close()
        dst.close()
    return report


def _share_prompts_inline(dst: Side, conn: Connection) -> int | None:
    """A file is what a user takes back to the agent version they came from, which reads
    a system prompt only inline (pre-v25): every prompt goes back there and the file is
    marked to keep them so (``repository.system_prompts``), as the agent's own file is.
    Nothing on a server: no such reader opens it."""
    if not dst.backend.stores_files:
        return None
    return share_prompts_inline(conn)


def _check_resumable(dst: Side, src: Side, resume: bool) -> None:
    with dst.snapshot() as conn:
        recorded_source = conn.execute(
            sa.select(P.value).where(P.kind == "source")).scalar()
    if not resume:
        raise CopyError(
            f"the destination {dst.display} holds an interrupted copy (of {recorded_source}); "
            "finish it with `hermes-store db copy SRC DST --resume`, or choose another "
            "destination"
        )
    if recorded_source != src.display:
        raise CopyError(
            f"the destination {dst.display} holds an interrupted copy of {recorded_source}, "
            f"not of {src.display}; resume it from that source, or choose another destination"
        )


def _begin(dst: Side, src: Side, specs: list[Spec]) -> None:
    """Refuse a destination that holds rows; then, in one transaction, the progress
    record, the suspended objects and the full-text set-up for the load."""
    with src.snapshot() as conn:
        low, high = conn.execute(sa.select(
            sa.func.min(schema.messages.c.id), sa.func.max(schema.messages.c.id))).one()
    with dst.unit() as conn:
        refuse_rows(dst, conn, dst.tables(conn))  # again, inside the unit: no race
        progress_table.create(conn)
        conn.execute(progress_table.insert(), [
            {"kind": "source", "name": "", "value": src.display},
            *({"kind": "table", "name": s.name, "value": None} for s in specs),
        ])
        objects = dst.copying.suspended_objects(conn, [s.name for s in specs], DISPLAY_TRIGGERS)
        if objects:
            conn.execute(progress_table.insert(), [
                {"kind": "ddl", "name": name, "value": create, "rows": position}
                for position, (name, _drop, create) in enumerate(objects)
            ])
        for _name, drop, _create in objects:
            conn.exec_driver_sql(drop)
        dst.copying.before_load(conn, low, high)


def _load(src: Side, dst: Side, specs: list[Spec], report: CopyReport,
          batch_rows: int, batch_bytes: int, progress: ProgressCallback | None) -> None:
    with dst.snapshot() as conn:
        state = {name: (value, rows, done) for name, value, rows, done in conn.execute(
            sa.select(P.name, P.value, P.rows, P.done).where(P.kind == "table"))}
    missing = [s.name for s in specs if s.name not in state]
    if missing:  # e.g. a source that gained topic tables: continue with an empty record
        with dst.unit() as conn:
            conn.execute(progress_table.insert(),
                         [{"kind": "table", "name": n, "value": None} for n in missing])
        state.update({n: (None, 0, 0) for n in missing})
    with src.snapshot() as sconn:
        report.source_id_high_water = id_high_water(src, sconn)
        totals = {
            s.name: sconn.execute(sa.select(sa.func.count()).select_from(s.table)).scalar()
            for s in specs if not state[s.name][2]
        }
        empty = [name for name, total in totals.items() if total == 0]
        if empty:  # one transaction for every empty table, not one each
            with dst.unit() as conn:
                conn.execute(sa.update(progress_table).where(
                    P.kind == "table", P.name.in_(empty)).values(done=1))
        for spec in specs:
            report.table(spec.name)
            if totals.get(spec.name):
                _load_table(sconn, dst, spec, state[spec.name], totals[spec.name],
                            report, batch_rows, batch_bytes, progress)


def _load_table(sconn: Connection, dst: Side, spec: Spec, state: tuple, total: int,
                report: CopyReport, batch_rows: int, batch_bytes: int,
                progress: ProgressCallback | None) -> None:
    """One table: each batch, and the key it ends at, in one destination transaction
    (the last batch also marks the table done)."""
    last_json, done_rows, _done = state
    item = report.table(spec.name)
    if progress is not None:
        progress("copy", spec.name, done_rows, total)
    after = json.loads(last_json) if last_json is not None else None
    writer = _Writer(dst, spec)
    finished = False
    for batch in read_batches(sconn, spec, after, max_rows=batch_rows, max_bytes=batch_bytes):
        rows = batch.rows
        kept = rows if spec.table is not schema.state_meta else [r for r in rows if spec.keep(r)]
        new_json = json.dumps(list(batch.last))
        with dst.unit() as dconn:
            claimed = dconn.execute(
                sa.update(progress_table)
                .where(P.kind == "table", P.name == spec.name,
                       P.value.is_not_distinct_from(last_json))
                .values(value=new_json, rows=P.rows + len(rows), done=int(batch.final))
            ).rowcount
            if claimed != 1:
                raise CopyError(
                    f"another copy is writing into {dst.display} ({spec.name} moved on under "
                    "this one); let one copy run at a time"
                )
            if kept:
                writer.write(dconn, kept)
        finished = batch.final
        last_json = new_json
        done_rows += len(rows)
        item.copied += len(kept)
        if progress is not None:
            progress("copy", spec.name, done_rows, total)
    if not finished:  # the last batch was full: nothing came after it
        with dst.unit() as dconn:
            dconn.execute(sa.update(progress_table).where(
                P.kind == "table", P.name == spec.name).values(done=1))


def _finish(src: Side, dst: Side) -> None:
    """One transaction: suspended objects back, full-text indexes built, the id
    counter carried over, references checked."""
    with src.snapshot() as conn:
        high_water = id_high_water(src, conn)
    with dst.unit() as conn:
        if conn.execute(sa.select(P.done).where(P.kind == "state", P.name == "finished")
                        ).scalar():
            return
        for create in conn.execute(sa.select(P.value).where(P.kind == "ddl")
                                   .order_by(P.rows)).scalars().all():
            conn.exec_driver_sql(create)
        conn.execute(sa.delete(progress_table).where(P.kind == "ddl"))
        dst.copying.after_load(conn, dst.display)
        dst.copying.carry_id_high_water(conn, max(high_water, id_high_water(dst, conn)))
        conn.execute(progress_table.insert().values(kind="state", name="finished", done=1))
    with dst.errors():
        dst.copying.after_finish(dst.engine)


# --------------------------------------------------------------------------- verify


def _verify_into(src: Side, dst: Side, report: CopyReport,
                 progress: ProgressCallback | None, batch_rows: int) -> None:
    with src.snapshot() as sconn, dst.snapshot() as dconn:
        with_topics = bool(set(telegram_schema.TABLE_NAMES) & (src.tables(sconn) | dst.tables(dconn)))
        report.source_id_high_water = id_high_water(src, sconn)
        report.destination_id_high_water = id_high_water(dst, dconn)
        for spec in specs(with_topics):
            item = report.table(spec.name)
            for side, conn, rows_attr, hash_attr in (
                (src, sconn, "source_rows", "source_hash"),
                (dst, dconn, "destination_rows", "destination_hash"),
            ):
                if spec.name not in side.tables(conn):
                    setattr(item, rows_attr, 0)
                    setattr(item, hash_attr, f"{0:032x}")
                    continue
                tick = None
                if progress is not None:
                    label = f"{spec.name} ({'source' if side is src else 'destination'})"
                    total = conn.execute(
                        sa.select(sa.func.count()).select_from(spec.table)).scalar()
                    progress("verify", label, 0, total)
                    tick = lambda done, label=label, total=total: progress(  # noqa: E731
                        "verify", label, done, total)
                rows, digest = table_digest(conn, spec, tick=tick, max_rows=batch_rows)
                setattr(item, rows_attr, rows)
                setattr(item, hash_attr, digest)
    report.verified = True


def verify_copy(source, destination, *, progress: ProgressCallback | None = None,
                batch_rows: int = BATCH_ROWS) -> CopyReport:
    """Compare two stores table by table (row counts and content hashes), reading only.

    Returns the report; ``report.ok`` says whether they match (no exception for a
    mismatch: the caller decides). Both must exist.
    """
    started = time.monotonic()
    src_target, dst_target = resolve_pair(source, destination)
    src = Side(src_target, writable=False)
    dst = Side(dst_target, writable=False)
    report = CopyReport(source=src.display, destination=dst.display)
    try:
        for side in (src, dst):
            if not side.exists:
                raise errors.StoreNotFoundError(f"no database at {side.display}")
        _verify_into(src, dst, report, progress, batch_rows)
        with dst.snapshot() as conn:
            report.unfinished = PROGRESS_TABLE in dst.tables(conn)
    finally:
        report.verify_seconds = report.seconds = time.monotonic() - started
        src.close()
        dst.close()
    return report


__all__ = ["copy_store", "verify_copy"]
