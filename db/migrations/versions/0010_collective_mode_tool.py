"""The collective's timing mode, and the tool that measured a result.

- `measurements.collective_mode`: how a collective case was timed, `stream` (nccl-tests' method:
  calls back to back under one clock per rank) or `isolated` (a barrier, then one call per sample);
  None for every other case. Every collective stored before this revision was isolated, whatever
  its status. Those that were timed (a pace recorded) also get the pace they really had:
  `barrier` (each sample one call after a barrier of the group), not the `back_to_back` that was
  stored for them; so they never join the history of the stream results that follow them under
  the same case key (reports/regressions/series.py segments a series where the pace or the mode changes).
- `measurements.tool` and `tool_version`: which tool measured the result, `rooflab` for its own
  engine (every row stored before this revision) or the peer whose output was imported
  (`nccl-tests`, `rccl-tests`, `nvbench`, `babelstream`), and that tool's version.

Revision ID: 0010
Revises: 0009
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("collective_mode", sa.String(16), nullable=True))
        batch.add_column(sa.Column("tool", sa.String(32), nullable=False, server_default=sa.text("'rooflab'")))
        batch.add_column(sa.Column("tool_version", sa.String(64), nullable=True))
    measurements = sa.table("measurements", sa.column("ranks", sa.Integer),
                            sa.column("collective_mode", sa.String), sa.column("pace", sa.String))
    collective = measurements.c.ranks.is_not(None)
    op.execute(measurements.update().where(collective).values(collective_mode="isolated"))
    op.execute(measurements.update().where(collective & measurements.c.pace.is_not(None)).values(pace="barrier"))


def downgrade() -> None:
    measurements = sa.table("measurements", sa.column("ranks", sa.Integer), sa.column("pace", sa.String))
    op.execute(measurements.update().where(measurements.c.ranks.is_not(None) & (measurements.c.pace == "barrier"))
               .values(pace="back_to_back"))  # what revision 0009 stored for every timed collective
    with op.batch_alter_table("measurements") as batch:
        batch.drop_column("tool_version")
        batch.drop_column("tool")
        batch.drop_column("collective_mode")
