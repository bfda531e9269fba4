"""Collectives: the world size of a collective result, and the group it ran in.

- `measurements.ranks`: the world size a collective case (family collective) resolved to; None for
  every other case (and for every row stored before this revision).
- `collectives`: one row per collective measurement: each rank's own median over the same samples
  (the measurement's samples are the slowest rank's), where each rank ran, and the NCCL version and
  the NCCL_* / TORCH_NCCL_* / GLOO_* settings the ranks ran with.

Revision ID: 0008
Revises: 0007
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_key = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("ranks", sa.Integer(), nullable=True))
    op.create_table(
        "collectives",
        sa.Column("measurement_id", _key, sa.ForeignKey("measurements.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("rank_medians_ms", sa.JSON(), nullable=False),
        sa.Column("rank_devices", sa.JSON(), nullable=False),
        sa.Column("comm_version", sa.String(64), nullable=True),
        sa.Column("comm_settings", sa.JSON(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("collectives")
    with op.batch_alter_table("measurements") as batch:
        batch.drop_column("ranks")
