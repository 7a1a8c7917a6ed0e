"""v22: ``task`` joins the primary key of ``session_model_usage``.

Upstream schema version 22 (#23270), shipped in hermes-agent 0.19.0.

Auxiliary model calls (``vision``, ``compression``, ``title_generation``, ...) are
accounted apart from the main loop (``task = ''``). SQLite cannot change a primary key,
so the table is rebuilt: rename aside, create the six-column-key table, copy, drop the
old one, re-create both indexes. Existing rows are main-loop usage, so they get
``task = ''`` - unless the file already has a plain ``task`` column (upstream adds
declared columns on every open, and some installs were stamped 22 before the rebuild
existed, #73823), whose values are kept. A file whose key already includes ``task`` is
left as it is (D4). Rows whose session no longer exists cannot satisfy the foreign key
of the new table and are not copied; their number is logged.

Downgrade rebuilds the five-column key. Rows of an auxiliary task are folded into the
main row of the same session/model/route - counters and costs summed, first/last seen
widened - so per-model totals stay right; the task split itself is what v21 cannot
represent. The number of folded rows is logged.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

from hermes_store.migrations import helpers

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

log = logging.getLogger(__name__)

TABLE = "session_model_usage"
ASIDE = "session_model_usage_v21"
INDEXES = (
    ("idx_session_model_usage_session", ["session_id"]),
    ("idx_session_model_usage_model", ["model"]),
)
ROUTE = ("session_id", "model", "billing_provider", "billing_base_url", "billing_mode")
SUMMED = ("api_call_count", "input_tokens", "output_tokens", "cache_read_tokens",
          "cache_write_tokens", "reasoning_tokens", "estimated_cost_usd", "actual_cost_usd")


def _columns(*, with_task: bool) -> list:
    def route(name: str) -> sa.Column:
        return sa.Column(name, sa.Text(), nullable=False, server_default=sa.text("''"))

    cols = [
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        route("billing_provider"),
        route("billing_base_url"),
        route("billing_mode"),
    ]
    if with_task:
        cols.append(route("task"))
    cols += [sa.Column(name, sa.Integer(), nullable=False, server_default=sa.text("0"))
             for name in SUMMED[:6]]
    cols += [sa.Column(name, sa.REAL(), nullable=False, server_default=sa.text("0"))
             for name in SUMMED[6:]]
    cols += [
        sa.Column("cost_status", sa.Text()),
        sa.Column("cost_source", sa.Text()),
        sa.Column("first_seen", sa.REAL()),
        sa.Column("last_seen", sa.REAL()),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint(*ROUTE, *(("task",) if with_task else ())),
    ]
    return cols


def _task_in_primary_key() -> bool:
    rows = op.get_bind().exec_driver_sql(f'PRAGMA table_info("{TABLE}")').fetchall()
    return any(r[1] == "task" and r[5] for r in rows)


def _scalar(sql: str):
    return op.get_bind().exec_driver_sql(sql).scalar()


def _set_aside() -> None:
    """Rename the table aside; its indexes travel with it and must free their names."""
    helpers.drop_objects("TABLE", ASIDE)
    for name, _columns in INDEXES:
        helpers.drop_index(name)
    op.rename_table(TABLE, ASIDE)


def _finish() -> None:
    op.drop_table(ASIDE)
    for name, columns in INDEXES:
        helpers.create_index(name, TABLE, columns)


def _orphans_warning(where: str) -> None:
    orphans = _scalar(f"SELECT COUNT(*) FROM {ASIDE} WHERE session_id NOT IN (SELECT id FROM sessions)")
    if orphans:
        log.warning("%s: %d %s rows belong to no existing session and are not copied",
                    where, orphans, TABLE)


def upgrade() -> None:
    if not helpers.has_table(TABLE):
        helpers.create_table(TABLE, *_columns(with_task=True))
    elif not _task_in_primary_key():
        task = "COALESCE(task, '')" if helpers.has_column(TABLE, "task") else "''"
        _set_aside()
        op.create_table(TABLE, *_columns(with_task=True))
        _orphans_warning("v22 rebuild")
        copied = ", ".join(ROUTE + SUMMED + ("cost_status", "cost_source", "first_seen", "last_seen"))
        op.execute(f"""
            INSERT INTO {TABLE} ({copied}, task)
            SELECT {copied}, {task} FROM {ASIDE}
            WHERE session_id IN (SELECT id FROM sessions)
        """)
        _finish()
    for name, columns in INDEXES:
        helpers.create_index(name, TABLE, columns)


def downgrade() -> None:
    if not helpers.has_table(TABLE) or not _task_in_primary_key():
        return
    folded = _scalar(f"SELECT COUNT(*) FROM {TABLE} WHERE task <> ''")
    if folded:
        log.warning("downgrade to v21: %d auxiliary-task usage rows folded into their main rows",
                    folded)
    _set_aside()
    op.create_table(TABLE, *_columns(with_task=False))
    _orphans_warning("v21 rebuild")
    sums = ", ".join(f"SUM({c})" for c in SUMMED)
    # The main loop's cost labels describe the folded row best; any task's otherwise.
    labels = ", ".join(
        f"COALESCE(MAX(CASE WHEN task = '' THEN {c} END), MAX({c}))" for c in ("cost_status", "cost_source")
    )
    op.execute(f"""
        INSERT INTO {TABLE} ({', '.join(ROUTE + SUMMED)}, cost_status, cost_source, first_seen, last_seen)
        SELECT {', '.join(ROUTE)}, {sums}, {labels}, MIN(first_seen), MAX(last_seen)
        FROM {ASIDE}
        WHERE session_id IN (SELECT id FROM sessions)
        GROUP BY {', '.join(ROUTE)}
    """)
    _finish()
