"""Cross-checks: each case timed by rooflab and by a peer timer in one process.

Revision ID: 0004
Revises: 0003
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_ts = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "crosschecks",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("case_id", sa.Integer(), sa.ForeignKey("cases.id"), nullable=False),
        sa.Column("environment_id", sa.Integer(), sa.ForeignKey("environments.id"), nullable=False),
        sa.Column("device_key", sa.String(128), nullable=False),
        sa.Column("cache", sa.String(16), nullable=False),
        sa.Column("timing_mode", sa.String(16), nullable=False),
        sa.Column("peer", sa.String(32), nullable=False),
        sa.Column("peer_version", sa.String(64), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("peer_cache", sa.String(16), nullable=True),
        sa.Column("peer_clock", sa.String(32), nullable=True),
        sa.Column("rounds", sa.Integer(), nullable=False),
        sa.Column("rooflab_median_ms", sa.Float(), nullable=True),
        sa.Column("rooflab_spread", sa.Float(), nullable=True),
        sa.Column("peer_median_ms", sa.Float(), nullable=True),
        sa.Column("peer_spread", sa.Float(), nullable=True),
        sa.Column("ratio", sa.Float(), nullable=True),
        sa.Column("disagrees", sa.Boolean(), nullable=False),
        sa.Column("likely_reason", sa.String(32), nullable=True),
        sa.Column("rooflab_rounds_ms", sa.JSON(), nullable=False),
        sa.Column("peer_rounds_ms", sa.JSON(), nullable=False),
        sa.Column("measured_at", _ts, nullable=False),
        sa.UniqueConstraint(
            "run_id", "case_id", "cache", "timing_mode", "device_key", "peer", name="uq_crosschecks_run_case_peer"
        ),
    )


def downgrade() -> None:
    op.drop_table("crosschecks")
