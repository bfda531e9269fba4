"""The device index in run order: `ix_measurements_device` on `measurements (device_key, run_id, case_id)`.

Revision 0012 ordered it (device_key, case_id, run_id): each of a night's results then went into its
own series' place in the index, one leaf page a result, 128,000 pages a fleet's night, read from disk
when the index outgrew memory and written back (and logged whole after each checkpoint). In run order
a night's results go to the end of each device's part of the index, a few pages a device. A device's
results since a run read one range of it; one series (a case on one device) reads the device's part
in run order and keeps its case's entries, checked in the index (docs/database.md: both measured on a
fleet's year). On a year of 64 GPUs (46.7 M results) building it by hand took 85 s. On PostgreSQL the new
index is built beside the old one under another name (writes to the table wait meanwhile, reads do
not), then the old one dropped and the new one renamed, which locks the table only for those two
steps; SQLite, which cannot rename an index, drops the old one and builds the new.

Revision ID: 0014
Revises: 0013
"""
from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


NAME = "ix_measurements_device"


def _rebuild(columns: list[str]) -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.create_index(f"{NAME}_new", "measurements", columns)
        op.drop_index(NAME, table_name="measurements")
        op.execute(f"ALTER INDEX {NAME}_new RENAME TO {NAME}")
    else:
        op.drop_index(NAME, table_name="measurements")
        op.create_index(NAME, "measurements", columns)


def upgrade() -> None:
    _rebuild(["device_key", "run_id", "case_id"])


def downgrade() -> None:
    _rebuild(["device_key", "case_id", "run_id"])
