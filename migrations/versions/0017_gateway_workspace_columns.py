"""v17: gateway and workspace columns.

Upstream schema version 17, shipped in hermes-agent 0.18.0.

Sessions learn where they came from and where they ran: the gateway routing key and
peer (``session_key``, ``chat_id``, ``chat_type``, ``thread_id``), the git workspace
(``git_branch``, ``git_repo_root``) and the compression back-off state
(``compression_failure_cooldown_until``, ``compression_failure_error``). Messages get
``compacted`` (a message folded into a compression summary stays visible in history).
Three indexes serve the gateway's "latest session for this peer/key" lookups and the
hand-off sweep. No data changes.
"""

from __future__ import annotations

import sqlalchemy as sa

from hermes_store.migrations import helpers

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

SESSION_COLUMNS = (
    ("session_key", sa.Text),
    ("chat_id", sa.Text),
    ("chat_type", sa.Text),
    ("thread_id", sa.Text),
    ("git_branch", sa.Text),
    ("git_repo_root", sa.Text),
    ("compression_failure_cooldown_until", sa.REAL),
    ("compression_failure_error", sa.Text),
)

INDEXES = (
    ("idx_sessions_session_key", ["session_key", sa.text("started_at DESC")]),
    ("idx_sessions_gateway_peer",
     ["source", "user_id", "chat_id", "chat_type", "thread_id", sa.text("started_at DESC")]),
    ("idx_sessions_handoff_state", ["handoff_state", "started_at"]),
)


def upgrade() -> None:
    helpers.add_columns("sessions", *(sa.Column(name, type_()) for name, type_ in SESSION_COLUMNS))
    helpers.add_columns(
        "messages", sa.Column("compacted", sa.Integer(), nullable=False, server_default=sa.text("0"))
    )
    for name, columns in INDEXES:
        helpers.create_index(name, "sessions", columns)


def downgrade() -> None:
    for name, _columns in INDEXES:
        helpers.drop_index(name)
    helpers.drop_columns("messages", "compacted")
    helpers.drop_columns("sessions", *(name for name, _type in SESSION_COLUMNS))
