"""Run shards (which "I/N" ran where and whether it finished) and the case-history index.

Before this revision a sharded run could not tell a finished run from one whose shard died;
and a case's history on one device scanned every measurement of the case.

Revision ID: 0002
Revises: 0001
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_ts = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "run_shards",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("shard", sa.String(32), nullable=False),
        sa.Column("shard_count", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("started_at", _ts, nullable=False),
        sa.Column("finished_at", _ts, nullable=True),
        sa.UniqueConstraint("run_id", "shard", name="uq_run_shards_run_shard"),
    )
    op.create_index(
        "ix_measurements_history", "measurements", ["case_id", "environment_id", "run_id"]
    )


def downgrade() -> None:
    op.drop_index("ix_measurements_history", table_name="measurements")
    op.drop_table("run_shards")
