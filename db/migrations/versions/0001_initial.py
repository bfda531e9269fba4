"""The first schema: environments, runs, run environments, cases, measurements, samples.

Revision ID: 0001
Revises:
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_key = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_ts = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "environments",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("device_fingerprint", sa.String(128), nullable=False),
        sa.Column("device_name", sa.String(255), nullable=False),
        sa.Column("device_kind", sa.String(16), nullable=False),
        sa.Column("identity", sa.JSON(), nullable=False),
        sa.Column("memory_bytes", sa.BigInteger(), nullable=False),
        sa.Column("l2_bytes", sa.BigInteger(), nullable=False),
        sa.Column("sm_count", sa.Integer(), nullable=False),
        sa.Column("compute_capability", sa.String(16), nullable=True),
        sa.Column("driver_version", sa.String(64), nullable=True),
        sa.Column("cuda_version", sa.String(64), nullable=True),
        sa.Column("torch_version", sa.String(64), nullable=True),
        sa.Column("first_seen_at", _ts, nullable=False),
        sa.UniqueConstraint("device_fingerprint", name="uq_environments_device_fingerprint"),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("run_id", sa.String(128), nullable=False),
        sa.Column("suite", sa.String(128), nullable=False),
        sa.Column("spec_text", sa.Text(), nullable=False),
        sa.Column("spec_hash", sa.String(64), nullable=False),
        sa.Column("started_at", _ts, nullable=False),
        sa.Column("finished_at", _ts, nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("git_commit", sa.String(64), nullable=True),
        sa.Column("git_dirty", sa.Boolean(), nullable=False),
        sa.Column("command_line", sa.Text(), nullable=False),
        sa.Column("rooflab_version", sa.String(64), nullable=False),
        sa.UniqueConstraint("run_id", name="uq_runs_run_id"),
    )
    op.create_index("ix_runs_started_at", "runs", ["started_at"])
    op.create_table(
        "run_environments",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("environment_id", sa.Integer(), sa.ForeignKey("environments.id"), nullable=False),
        sa.Column("device_key", sa.String(128), nullable=False),
        sa.Column("device_uuid", sa.String(128), nullable=True),
        sa.Column("info", sa.JSON(), nullable=False),
        sa.UniqueConstraint("run_id", "environment_id", "device_key", name="uq_run_environments_device"),
    )
    op.create_table(
        "cases",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("case_key", sa.String(512), nullable=False),
        sa.Column("op", sa.String(64), nullable=False),
        sa.Column("op_version", sa.Integer(), nullable=False),
        sa.Column("family", sa.String(32), nullable=False),
        sa.Column("backend", sa.String(32), nullable=False),
        sa.Column("dtype", sa.String(32), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.UniqueConstraint("case_key", name="uq_cases_case_key"),
    )
    op.create_table(
        "measurements",
        sa.Column("id", _key, primary_key=True),
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("case_id", sa.Integer(), sa.ForeignKey("cases.id"), nullable=False),
        sa.Column("environment_id", sa.Integer(), sa.ForeignKey("environments.id"), nullable=False),
        sa.Column("device_key", sa.String(128), nullable=False),
        sa.Column("device_uuid", sa.String(128), nullable=True),
        sa.Column("shard", sa.String(32), nullable=True),
        sa.Column("cache", sa.String(16), nullable=False),
        sa.Column("timing_mode", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("clock", sa.String(32), nullable=True),
        sa.Column("measured_at", _ts, nullable=False),
        sa.Column("median_ms", sa.Float(), nullable=True),
        sa.Column("mean_ms", sa.Float(), nullable=True),
        sa.Column("min_ms", sa.Float(), nullable=True),
        sa.Column("max_ms", sa.Float(), nullable=True),
        sa.Column("p10_ms", sa.Float(), nullable=True),
        sa.Column("p90_ms", sa.Float(), nullable=True),
        sa.Column("iqr_ms", sa.Float(), nullable=True),
        sa.Column("std_ms", sa.Float(), nullable=True),
        sa.Column("n_samples", sa.Integer(), nullable=False),
        sa.Column("rel_ci_halfwidth", sa.Float(), nullable=True),
        sa.Column("stop_reason", sa.String(32), nullable=True),
        sa.Column("first_call_ms", sa.Float(), nullable=True),
        sa.Column("warmup_calls", sa.Integer(), nullable=False),
        sa.Column("launches_per_sample", sa.Integer(), nullable=False),
        sa.Column("flush_bytes", sa.BigInteger(), nullable=False),
        sa.Column("flops", sa.BigInteger(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("intensity", sa.Float(), nullable=True),
        sa.Column("tflops", sa.Float(), nullable=True),
        sa.Column("gbps", sa.Float(), nullable=True),
        sa.Column("sm_clock_start_mhz", sa.Float(), nullable=True),
        sa.Column("sm_clock_end_mhz", sa.Float(), nullable=True),
        sa.Column("sm_clock_max_mhz", sa.Float(), nullable=True),
        sa.Column("throttle_reasons", sa.JSON(), nullable=False),
        sa.Column("throttled", sa.Boolean(), nullable=False),
        sa.UniqueConstraint(
            "run_id", "case_id", "cache", "timing_mode", "device_key", name="uq_measurements_run_case_device"
        ),
    )
    op.create_table(
        "samples",
        sa.Column(
            "measurement_id", _key, sa.ForeignKey("measurements.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("values_f64le", sa.LargeBinary(), nullable=False),
    )


def downgrade() -> None:
    for table in ("samples", "measurements", "cases", "run_environments"):
        op.drop_table(table)
    op.drop_index("ix_runs_started_at", table_name="runs")
    op.drop_table("runs")
    op.drop_table("environments")
