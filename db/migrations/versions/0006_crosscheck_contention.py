"""Whether a cross-check row was timed on a contended machine.

- `contended`: something else competed for the machine while the case was timed by rooflab or by
  the peer (load average above the logical CPUs, CPU steal, another process computing on the GPU;
  runners/machine/contention.py). Such rows are shown, marked, and left out of the per-peer summaries.
- `contention_reasons`: what was seen.

Rows stored before this revision read as not contended with no reasons: nothing was watched then.

Revision ID: 0006
Revises: 0005
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("crosschecks") as batch:
        batch.add_column(sa.Column("contended", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("contention_reasons", sa.JSON(), nullable=False, server_default=sa.text("'[]'")))


def downgrade() -> None:
    with op.batch_alter_table("crosschecks") as batch:
        batch.drop_column("contention_reasons")
        batch.drop_column("contended")
