"""What ``db copy`` copies: the head tables in dependency order, the progress record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import sqlalchemy as sa

from .. import schema, telegram_schema
from ..display_order import TRIGGER_NAMES
from ..repository.system_prompts import INLINE_PROMPTS_KEY

#: the most rows one batch reads and writes (``--batch-rows``)
BATCH_ROWS = 5000
#: ... and about the most bytes of text and BLOBs (fewer rows when rows are large)
BATCH_BYTES = 8 * 1024 * 1024
#: the destination's progress record: present from "prepared" until "verified"
PROGRESS_TABLE = "hermes_store_copy"
#: ``state_meta`` keys the full-text layer owns: rebuilt in the destination, never copied
DERIVED_META_PREFIXES = ("fts_",)

#: ``progress(phase, table, done, total)``; phase is "copy" or "verify"
ProgressCallback = Callable[[str, str, int, int], None]

_progress_md = sa.MetaData()
progress_table = sa.Table(
    PROGRESS_TABLE,
    _progress_md,
    # "source" (value: the source copied from), "table" (value: last key copied, as
    # JSON), "ddl" (value: a suspended object's definition; rows: its position),
    # "state" (name "finished": the finish step committed)
    sa.Column("kind", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("value", sa.Text),
    sa.Column("rows", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    sa.Column("done", sa.Integer, nullable=False, server_default=sa.text("0")),
)
P = progress_table.c

#: the display-order triggers (same names on both engines), suspended during the load
DISPLAY_TRIGGERS = TRIGGER_NAMES


@dataclass(frozen=True)
class Spec:
    """One table to copy: its head columns, in order, and its primary key."""

    table: sa.Table

    @property
    def name(self) -> str:
        return self.table.name

    @property
    def columns(self) -> list[sa.Column]:
        return list(self.table.columns)

    @property
    def key(self) -> list[sa.Column]:
        return list(self.table.primary_key.columns)

    @property
    def key_positions(self) -> list[int]:
        names = [c.name for c in self.columns]
        return [names.index(c.name) for c in self.key]

    def keep(self, row: Sequence) -> bool:
        """Rows that are copied and compared (``state_meta``: not the FTS layer's keys,
        nor a file's own identity, nor its sharing with pre-v25 readers)."""
        if self.table is schema.state_meta:
            key = str(row[0])
            return not key.startswith(DERIVED_META_PREFIXES) and key != schema.FILE_IDENTITY_KEY \
                and key != INLINE_PROMPTS_KEY
        return True

    @property
    def compared_columns(self) -> list[sa.ColumnElement]:
        """The columns as verification reads them (``columns``' order and names): a
        session's inline prompt counts as none where it repeats the prompt the row
        references — a copy into a file keeps prompts inline for pre-v25 readers
        (``copy._share_prompts_inline``), and the same prompt is the same data."""
        if self.table is not schema.sessions:
            return self.columns
        return [_prompt_as_compared() if c is _S.c.system_prompt else c for c in self.columns]


_S, _P = schema.sessions, schema.system_prompts


def _prompt_as_compared() -> sa.ColumnElement:
    referenced = sa.select(_P.c.prompt).where(_P.c.hash == _S.c.system_prompt_hash)
    return sa.case((_S.c.system_prompt == referenced.scalar_subquery(), sa.null()),
                   else_=_S.c.system_prompt).label(_S.c.system_prompt.name)


#: head tables in dependency order; ``schema_version`` is the destination's own
HEAD = [t for t in schema.metadata.sorted_tables if t is not schema.schema_version]
TOPICS = list(telegram_schema.TABLES)
#: the version tables: each database keeps its own (the destination is created at head)
BOOKKEEPING = {"schema_version", "alembic_version", telegram_schema.VERSION_TABLE}


def specs(with_topics: bool) -> list[Spec]:
    return [Spec(t) for t in HEAD + (TOPICS if with_topics else [])]


__all__ = ["BATCH_BYTES", "BATCH_ROWS", "BOOKKEEPING", "DERIVED_META_PREFIXES",
           "DISPLAY_TRIGGERS", "HEAD", "P", "PROGRESS_TABLE", "ProgressCallback", "Spec",
           "TOPICS", "progress_table", "specs"]
