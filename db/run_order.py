"""The order of runs, the one rule: by (started_at, run_id), never by the clock of single measurements.

Kept apart from db/query.py (which reads into pandas) so that a process that only needs the order,
such as a shard choosing its cases, imports neither pandas nor the frames.
"""
from __future__ import annotations

from sqlalchemy import Connection, select

from rooflab.db import models


def run_orders(conn: Connection) -> dict[str, int]:
    """run_id -> 1-based order by (started_at, run_id)."""
    rows = conn.execute(select(models.Run.run_id).order_by(models.Run.started_at, models.Run.run_id))
    return {run_id: order for order, (run_id,) in enumerate(rows, start=1)}
