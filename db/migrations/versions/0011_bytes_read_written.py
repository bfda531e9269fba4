"""Bytes read and bytes written apart: in each result's work model, and in each counter reading.

- `measurements.bytes_read`, `measurements.bytes_written`: of a result's `bytes` (the op's minimum
  traffic of one call), those read and those written; their sum is `bytes`. Rows stored before this
  revision keep their total and get NULL for both: the split of a result measured without it is
  unknown, and is not guessed from the op's model of today.
- `counter_readings.model_bytes_read`, `model_bytes_written`: the op's split, beside its total
  (`model_bytes`), so that reads are held against `dram_read_bytes` and writes against
  `dram_write_bytes` apart; NULL for readings stored before (judged on the total, as then).
- `counter_readings.caught_write_back_bytes`: the call's dirty lines written back inside the
  profiled range (a read sweep after the call evicts them; the sweep's own writes, counted in a
  second sweep, are taken off: `sweep_own_write_bytes`). NULL for readings stored before, whose
  written bytes left out what was still dirty in the L2 when the kernels ended.

Revision ID: 0011
Revises: 0010
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_COUNTER_COLUMNS = ("model_bytes_read", "model_bytes_written", "caught_write_back_bytes",
                    "sweep_own_write_bytes")


def upgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("bytes_read", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("bytes_written", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("counter_readings") as batch:
        for name in _COUNTER_COLUMNS:
            batch.add_column(sa.Column(name, sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("counter_readings") as batch:
        for name in reversed(_COUNTER_COLUMNS):
            batch.drop_column(name)
    with op.batch_alter_table("measurements") as batch:
        batch.drop_column("bytes_written")
        batch.drop_column("bytes_read")
