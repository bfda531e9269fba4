"""The device index in run order: `ix_measurements_device` on `measurements (device_key, run_id, case_id)`.

Revision 0012 ordered it (device_key, case_id, run_id): each of a night's results then went into its
own series' place in the index, one leaf page a result, 128,000 pages a fleet's night, read from disk
when the index outgrew memory and written back (and logged whole after each checkpoint). In run order
a night's results go to the end of each device's part of the index, a few pages a device. A device's
results since a run read one range of it; one series (a case on one device) reads the device's part
in run order and keeps its case's entries, checked in the index (docs/database.md: both measured on a
fleet's year). On a year of 64 GPUs (46.7 M results) rebuilding it takes a minute or two; writes to
the table wait meanwhile.

Revision ID: 0014
Revises: 0013
"""
from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_measurements_device", table_name="measurements")
    op.create_index("ix_measurements_device", "measurements", ["device_key", "run_id", "case_id"])


def downgrade() -> None:
    op.drop_index("ix_measurements_device", table_name="measurements")
    op.create_index("ix_measurements_device", "measurements", ["device_key", "case_id", "run_id"])
