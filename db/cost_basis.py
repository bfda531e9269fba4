"""The medians a sharded run's split is balanced by: per case, its median in the latest earlier run
that measured it (runners/orchestration/shards.py turns them into costs).

Every shard of a night reads them when it starts, before it measures anything: one query over the
ok results of the suite (and device) with a figure, their runs' order, and a little arithmetic, with
no pandas to import and no frame of the whole history to build.
"""
from __future__ import annotations

import statistics
from typing import cast

from sqlalchemy import select

from rooflab.db import models
from rooflab.db.handle import Db, reading
from rooflab.db.run_order import run_orders
from rooflab.db.usable import figure_mask
from rooflab.vocab import ResultStatus


def latest_medians(db: Db, *, suite: str | None = None, device_fingerprint: str | None = None,
                   current_run_id: str | None = None) -> tuple[str | None, dict[str, float]]:
    """(the newest run that gave a median, case_key -> median_ms) over the ok results with a figure
    (db/usable.py), of `suite` and on `device_fingerprint` where given.

    Each case's median is the one of the latest run (db/run_order.py) that measured it, the median
    of its medians where that run measured it on several devices. The run `current_run_id` and the
    runs ordered after it are left out. No such result: (None, {})."""
    r, c, e, m = models.Run, models.Case, models.Environment, models.Measurement
    query = (select(c.case_key, r.run_id, m.median_ms).select_from(m)
             .join(r, r.id == m.run_id).join(c, c.id == m.case_id).join(e, e.id == m.environment_id)
             .where(figure_mask(m.status == ResultStatus.OK, m.median_ms)))
    if suite is not None:
        query = query.where(r.suite == suite)
    if device_fingerprint is not None:
        query = query.where(e.device_fingerprint == device_fingerprint)
    if current_run_id is not None:
        query = query.where(r.run_id != current_run_id)
    with reading(db) as engine, engine.connect() as conn:
        orders = run_orders(conn)
        rows = conn.execute(query).all()
    before = orders.get(current_run_id) if current_run_id is not None else None
    latest: dict[str, tuple[int, list[float]]] = {}  # case_key -> (its latest run's order, that run's medians)
    by_order: dict[int, str] = {}
    for case_key, run_id, stored_ms in rows:
        median_ms = float(cast(float, stored_ms))  # the query kept positive medians only
        order = orders[run_id]
        if before is not None and order >= before:
            continue
        by_order[order] = run_id
        held = latest.get(case_key)
        if held is None or order > held[0]:
            latest[case_key] = (order, [median_ms])
        elif order == held[0]:
            held[1].append(median_ms)
    if not latest:
        return None, {}
    return by_order[max(by_order)], {key: statistics.median(medians) for key, (_, medians) in latest.items()}
