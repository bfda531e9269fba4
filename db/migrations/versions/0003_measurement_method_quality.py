"""How a measurement was taken and how far it can be trusted.

- `sync_method`: what held the stream while a batch was enqueued, so that no host time lands in a
  sample (`blocking_kernel`, `sleep_kernel`, `host_sync`; `none` on a CPU).
- `flush_method`: how the cache was cleaned before a cold sample (`none` when hot).
- `power_w`, `energy_j`: the board's average power and the energy per call while the case ran
  (NVML's energy counter; None without NVML).
- `quality`: `good`, `noisy` (the confidence interval stayed wide) or `contended` (other load was
  seen on the machine while the case ran); `quality_reasons` says what was seen.
- `cpu_threads`: the intra-op thread count a CPU case ran with.

Revision ID: 0003
Revises: 0002
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

def _columns() -> tuple[sa.Column, ...]:
    """Fresh Column objects each time (a Column belongs to the one table it is added to)."""
    return (
        sa.Column("sync_method", sa.String(32), nullable=True),
        sa.Column("flush_method", sa.String(32), nullable=True),
        sa.Column("power_w", sa.Float(), nullable=True),
        sa.Column("energy_j", sa.Float(), nullable=True),
        sa.Column("quality", sa.String(16), nullable=True),
        sa.Column("quality_reasons", sa.JSON(), nullable=False, server_default=sa.text("'[]'")),
        sa.Column("cpu_threads", sa.Integer(), nullable=True),
    )


def upgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        for column in _columns():
            batch.add_column(column)


def downgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        for column in reversed(_columns()):
            batch.drop_column(column.name)
