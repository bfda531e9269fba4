"""The device access path: a device's results, and one series (a case on one device) in run order.

`ix_measurements_device` on `measurements (device_key, case_id, run_id)`. Series are kept per
physical device (a GPU's UUID: `device_key`), and a fleet's database holds thousands of them: without
it, a device's history (its page, the fleet's look at one GPU, one series' window) read every result
of its case or of its runs. The case path (`ix_measurements_history`, revision 0002) and the run path
(the unique key, which begins with `run_id`) stay as they are. On a year of 64 GPUs (46.7 M results)
building it takes minutes (docs/database.md); writes to the table wait meanwhile.

Revision ID: 0012
Revises: 0011
"""
from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_measurements_device", "measurements", ["device_key", "case_id", "run_id"])


def downgrade() -> None:
    op.drop_index("ix_measurements_device", table_name="measurements")
