"""The pace of a measurement, and the cross-check's second ratio (rooflab timed in the peer's mode).

- `measurements.pace`: how the samples followed one another, `back_to_back` (each right behind the
  previous one) or `idle` (a synchronisation after each sample, then the device left idle about as
  long as the sample took). Every result stored before this revision ran back to back, and is
  marked so, so that a series does not start a new segment at the upgrade (reports/regressions/series.py
  segments by flush method and pace).
- `crosschecks`: besides rooflab-as-configured / peer (`ratio`), each row now holds rooflab timed
  the way the peer times (`peer_mode`: flush kind and size, pace, hold, clock), its figure, spread
  and per-round medians (`in_mode_*`) and `in_mode_ratio` = that figure / the peer's; `rooflab_mode`
  and `method_differences` say how rooflab's configured mode differs from the peer's. From this
  revision on `disagrees` and `likely_reason` judge the in-mode ratio; rows stored before it have no
  in-mode figures, and their `disagrees` judged `ratio`.

Revision ID: 0009
Revises: 0008
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

def _crosscheck_columns() -> tuple[sa.Column, ...]:
    """Fresh Column objects each time (a Column belongs to the one table it is added to)."""
    return (
        sa.Column("peer_mode", sa.String(200), nullable=True),
        sa.Column("rooflab_mode", sa.String(200), nullable=True),
        sa.Column("method_differences", sa.JSON(), nullable=False, server_default=sa.text("'[]'")),
        sa.Column("in_mode_median_ms", sa.Float(), nullable=True),
        sa.Column("in_mode_spread", sa.Float(), nullable=True),
        sa.Column("in_mode_ratio", sa.Float(), nullable=True),
        sa.Column("in_mode_rounds_ms", sa.JSON(), nullable=False, server_default=sa.text("'[]'")),
    )


def upgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("pace", sa.String(16), nullable=True))
    measurements = sa.table("measurements", sa.column("status", sa.String), sa.column("pace", sa.String))
    op.execute(measurements.update().where(measurements.c.status == "ok").values(pace="back_to_back"))
    with op.batch_alter_table("crosschecks") as batch:
        for column in _crosscheck_columns():
            batch.add_column(column)


def downgrade() -> None:
    with op.batch_alter_table("crosschecks") as batch:
        for column in reversed(_crosscheck_columns()):
            batch.drop_column(column.name)
    with op.batch_alter_table("measurements") as batch:
        batch.drop_column("pace")
