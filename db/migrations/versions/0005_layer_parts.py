"""Layer attribution: the profiled execution of a measured block and its parts.

A transformer_block measurement is split, through one profiled execution, into its parts (norms,
projections, attention, activation, residual adds); the parts carry their measured time and the
op library's FLOP and byte models, and the profile what no part accounts for.

Revision ID: 0005
Revises: 0004
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_key = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "layer_profiles",
        sa.Column("measurement_id", _key, sa.ForeignKey("measurements.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("clock", sa.String(32), nullable=False),
        sa.Column("whole_ms", sa.Float(), nullable=False),
        sa.Column("gap_ms", sa.Float(), nullable=False),
        sa.Column("unattributed_ms", sa.Float(), nullable=False),
        sa.Column("overlap_ms", sa.Float(), nullable=False),
        sa.Column("host_ms", sa.Float(), nullable=False),
        sa.Column("events", sa.Integer(), nullable=False),
    )
    op.create_table(
        "layer_parts",
        sa.Column("id", _key, primary_key=True),
        sa.Column("measurement_id", _key, sa.ForeignKey("measurements.id", ondelete="CASCADE"), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("time_ms", sa.Float(), nullable=False),
        sa.Column("flops", sa.BigInteger(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("events", sa.Integer(), nullable=False),
        sa.UniqueConstraint("measurement_id", "position", name="uq_layer_parts_position"),
    )


def downgrade() -> None:
    op.drop_table("layer_parts")
    op.drop_table("layer_profiles")
