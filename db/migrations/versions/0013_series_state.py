"""The per-series state of the regression check, and the journal of writes that keeps it honest.

`series_state` holds each series' whole-history facts (runs with an ok result, the first and last
of them; per way of measuring and per environment) over the runs folded in, which
`series_state_runs` lists with their count of journal writes then; `result_writes` is the journal:
on PostgreSQL statement-level triggers on `measurements` add one row per run a statement wrote,
changed or deleted (db.result_writes). A fleet's night then reads its own results and the state,
not a grouped pass over every result (docs/database.md). The state starts empty: the first check
after the upgrade folds the history in once.

Revision ID: 0013
Revises: 0012
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from rooflab.db import result_writes

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_key = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_ts = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "result_writes",
        sa.Column("id", _key, primary_key=True),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("writes", sa.Integer(), server_default=sa.text("1"), nullable=False),
    )
    op.create_index("ix_result_writes_run_id", "result_writes", ["run_id"])
    op.create_table(
        "series_state_runs",
        sa.Column("kind", sa.String(32), primary_key=True),
        sa.Column("run_id", sa.Integer(), primary_key=True),
        sa.Column("writes", sa.Integer(), nullable=False),
    )
    op.create_table(
        "series_state",
        sa.Column("id", _key, primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("case_id", sa.Integer(), nullable=False),
        sa.Column("series_key", sa.Text(), nullable=False),
        sa.Column("n_ok_runs", sa.Integer(), nullable=False),
        sa.Column("first_ok_start", _ts, nullable=True),
        sa.Column("last_ok_start", _ts, nullable=True),
        sa.UniqueConstraint("kind", "case_id", "series_key", name="uq_series_state_key"),
    )
    result_writes.install(op.get_bind())


def downgrade() -> None:
    result_writes.remove(op.get_bind())
    op.drop_table("series_state")
    op.drop_table("series_state_runs")
    op.drop_index("ix_result_writes_run_id", table_name="result_writes")
    op.drop_table("result_writes")
