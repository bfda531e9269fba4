"""Hardware counters: each case's profiled pass under Nsight Compute, beside the op's model.

One row per case, device and counters run (`rooflab counters`): DRAM bytes read and written, L2
traffic, FLOPs by precision, tensor-pipe instructions, kernels and their time, the ncu version and
the exact metrics asked for, the op's model of the call, and the run of the measurement it checks.

Revision ID: 0007
Revises: 0006
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_ts = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "counter_readings",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("case_id", sa.Integer(), sa.ForeignKey("cases.id"), nullable=False),
        sa.Column("environment_id", sa.Integer(), sa.ForeignKey("environments.id"), nullable=False),
        sa.Column("device_key", sa.String(128), nullable=False),
        sa.Column("cache", sa.String(16), nullable=False),
        sa.Column("timing_mode", sa.String(16), nullable=False),
        sa.Column("checked_run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="SET NULL"), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("measured_at", _ts, nullable=False),
        sa.Column("ncu_version", sa.String(64), nullable=True),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("missing_metrics", sa.JSON(), nullable=False),
        sa.Column("metric_values", sa.JSON(), nullable=False),
        sa.Column("kernels", sa.Integer(), nullable=True),
        sa.Column("kernel_ms", sa.Float(), nullable=True),
        sa.Column("dram_read_bytes", sa.BigInteger(), nullable=True),
        sa.Column("dram_write_bytes", sa.BigInteger(), nullable=True),
        sa.Column("l2_traffic_bytes", sa.BigInteger(), nullable=True),
        sa.Column("fp64_flops", sa.BigInteger(), nullable=True),
        sa.Column("fp32_flops", sa.BigInteger(), nullable=True),
        sa.Column("fp16_flops", sa.BigInteger(), nullable=True),
        sa.Column("tensor_instructions", sa.BigInteger(), nullable=True),
        sa.Column("model_flops", sa.BigInteger(), nullable=False),
        sa.Column("model_bytes", sa.BigInteger(), nullable=False),
        sa.UniqueConstraint(
            "run_id", "case_id", "cache", "timing_mode", "device_key", name="uq_counter_readings_run_case_device"
        ),
    )


def downgrade() -> None:
    op.drop_table("counter_readings")
