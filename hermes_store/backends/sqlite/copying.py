"""A SQLite file as one side of ``db copy`` (``Backend.copying``; see ``hermes_store.dbcopy``).

As a destination: foreign keys are not enforced while loading (a parent session can
come after its children in key order; ``PRAGMA foreign_key_check`` runs at the end), WAL
with ``synchronous=NORMAL`` (a crash can lose the last batches, never consistency: each
batch commits with its progress), rows written with ``executemany``, the full-text layer
skipped through the migrations' rebuild window and rebuilt once at the end. As a
source: rows that break a foreign key, hold an empty key, or hold a value of another
storage class than their column declares (SQLite takes any) are named before anything
is copied.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

import sqlalchemy as sa

from ...connections import BEGIN_MODE, autocommit, writer
from ..facets import CopySide

#: SQLite storage classes (``typeof``) a strictly typed column of each declared type holds
#: exactly; SQLite's columns take any value whatever they declare
_STORAGE = ((sa.Integer, "integer"), (sa.Float, "real"), (sa.Text, "text"),
            (sa.LargeBinary, "blob"))


def _quote(dialect, name: str) -> str:
    return dialect.identifier_preparer.quote(name)


def _storage_class(column: sa.Column) -> str:
    for type_, storage in _STORAGE:
        if isinstance(column.type, type_):
            return storage
    raise TypeError(f"no storage class for {column.table.name}.{column.name}")  # pragma: no cover


class SQLiteCopySide(CopySide):
    strict_types = False

    def exists(self, target) -> bool:
        return target.path.exists()

    def engine(self, target, *, writable: bool):
        from .engine import create_engine, synchronous_normal

        engine = create_engine(
            target.path, read_only=not writable, foreign_keys=False,
            journal_mode="WAL" if writable else None,
        )
        if not writable:
            return engine
        sa.event.listen(engine, "connect", synchronous_normal)
        return writer(engine)

    def close(self, engine, target, *, writable: bool) -> None:
        if writable and target.path.exists():
            from .engine import checkpoint

            checkpoint(autocommit(engine), target.display)
        engine.dispose()

    @contextlib.contextmanager
    def snapshot(self, conn) -> Iterator[sa.Connection]:
        # a plain deferred BEGIN even on the writer engine: reading takes no lock
        conn = conn.execution_options(**{BEGIN_MODE: "DEFERRED"})
        with conn.begin():
            yield conn

    def own_object(self, name: str) -> bool:
        from .fts.ddl import is_fts_object

        return is_fts_object(name)

    def check_source_rows(self, conn, specs: Sequence, *, where: str,
                          strict_destination: bool) -> None:
        from ...errors import CopyError

        broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
        if broken:
            by_table: dict[str, int] = {}
            for table, _rowid, parent, _fk in broken:
                key = f"{table} → {parent}"
                by_table[key] = by_table.get(key, 0) + 1
            listed = ", ".join(f"{n} in {k}" for k, n in sorted(by_table.items()))
            raise CopyError(
                f"the source {where} has rows whose references are broken ({listed}); "
                "a copy must keep them valid: repair the file with `hermes-store recover "
                "--output NEW.db` and copy NEW.db"
            )
        for spec in specs:
            empty = sa.or_(*[c.is_(None) for c in spec.key])
            count = conn.execute(
                sa.select(sa.func.count()).select_from(spec.table).where(empty)).scalar()
            if count:
                raise CopyError(
                    f"the source {where}: {count} row(s) of {spec.name} have an empty "
                    f"(NULL) key, which a copy cannot address (nor a strict engine hold); "
                    f"delete or fix them first"
                )
            if strict_destination:
                self._check_types(conn, spec, where)

    def _check_types(self, conn, spec, where: str) -> None:
        """A value whose storage class differs from its column's declared type (text in an
        INTEGER column, a BLOB in a TEXT column…) cannot go into a strictly typed engine
        unchanged: name the first such values before copying anything."""
        from ...errors import CopyError

        q = lambda n: _quote(conn.dialect, n)  # noqa: E731
        odd = [f"(typeof({q(c.name)}) NOT IN ('null', '{_storage_class(c)}'))"
               for c in spec.columns]
        key = ", ".join(q(c.name) for c in spec.key)
        cases = ", ".join(
            f"CASE WHEN {cond} THEN typeof({q(c.name)}) END"
            for c, cond in zip(spec.columns, odd))
        rows = conn.exec_driver_sql(
            f"SELECT {key}, {cases} FROM {q(spec.name)} WHERE {' OR '.join(odd)} LIMIT 3"
        ).all()
        if rows:
            width = len(spec.key)
            found = []
            for row in rows:
                at = ", ".join(str(v) for v in row[:width])
                found += [f"{c.name} holds {v} at key ({at})"
                          for c, v in zip(spec.columns, row[width:]) if v is not None]
            raise CopyError(
                f"the source {where}: {spec.name} has values PostgreSQL cannot hold "
                f"as declared ({'; '.join(found[:3])}); fix them, or copy to a SQLite file"
            )

    def write_rows(self, conn, table: sa.Table, rows: list[tuple]) -> None:
        conn.exec_driver_sql(str(table.insert().compile(dialect=conn.dialect)), rows)

    def suspended_objects(self, conn, names, triggers):
        q = lambda n: _quote(conn.dialect, n)  # noqa: E731
        marks = ", ".join("?" for _ in names)
        rows = conn.exec_driver_sql(
            f"SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
            f"AND tbl_name IN ({marks}) ORDER BY name", tuple(names),
        ).all()
        items = [(n, f"DROP INDEX {q(n)}", sql) for n, sql in rows]
        marks = ", ".join("?" for _ in triggers)
        rows = conn.exec_driver_sql(
            f"SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name IN ({marks}) "
            "ORDER BY name", tuple(triggers),
        ).all()
        items += [(n, f"DROP TRIGGER {q(n)}", sql) for n, sql in rows]
        return items

    def before_load(self, conn, low, high) -> None:
        """The migrations' rebuild window over ids ``low..high``: the gated FTS triggers
        leave those rows alone; ``after_load``'s rebuild fills the indexes and closes
        the window (its keys)."""
        if high is None:
            return
        from sqlalchemy.dialects.sqlite import insert

        from ... import schema
        from .fts import ddl as fts_ddl

        present = set(conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'table'").scalars())
        pairs = [(fts_ddl.REBUILD_HIGH_WATER_KEY, fts_ddl.REBUILD_PROGRESS_KEY)]
        if fts_ddl.CJK_TABLE in present:
            pairs.append((fts_ddl.CJK_REBUILD_HIGH_WATER_KEY, fts_ddl.CJK_REBUILD_PROGRESS_KEY))
        meta = schema.state_meta
        for high_key, progress_key in pairs:
            for key, value in ((high_key, high), (progress_key, low - 1)):
                stmt = insert(meta).values(key=key, value=str(value))
                conn.execute(stmt.on_conflict_do_update(index_elements=["key"],
                                                        set_={"value": stmt.excluded.value}))

    def after_load(self, conn, where: str) -> None:
        from ...errors import CopyError
        from .fts import maintenance

        maintenance.rebuild(conn)
        broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
        if broken:
            raise CopyError(
                f"the destination {where}: {len(broken)} row(s) break a foreign key "
                f"after the load (first: {broken[0][0]} → {broken[0][2]}); the source "
                "changed during the copy? Nothing of the finish step was kept; rerun with "
                "--resume once writers are stopped"
            )

    def id_high_water(self, conn, top: int) -> int:
        has_sequence = conn.exec_driver_sql(
            "SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'").first()
        if has_sequence:
            seq = conn.exec_driver_sql(
                "SELECT seq FROM sqlite_sequence WHERE name = 'messages'").scalar()
            top = max(top, seq or 0)
        return top

    def carry_id_high_water(self, conn, high_water: int) -> None:
        if high_water <= 0:
            return
        updated = conn.exec_driver_sql(
            "UPDATE sqlite_sequence SET seq = ? WHERE name = 'messages'", (high_water,)).rowcount
        if not updated:
            conn.exec_driver_sql(
                "INSERT INTO sqlite_sequence (name, seq) VALUES ('messages', ?)", (high_water,))


COPYING = SQLiteCopySide()

__all__ = ["COPYING", "SQLiteCopySide"]
