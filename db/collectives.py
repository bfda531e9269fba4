"""The group a collective measurement ran in: written with its measurement, read back for reports.

`add_collective` writes the `collectives` row of a measurement in the measurement's transaction
(db.store.ResultStore.add_measurement calls it); `collective_frame` reads every collective
measurement with its per-rank medians, the rank that was slowest and by how much, and where each
rank ran, keyed like the results frame (run_id, case_key, device_fingerprint, cache, timing_mode).
"""
from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select

from rooflab.db import models
from rooflab.db.handle import Db, reading
from rooflab.record import CollectiveRecord

if TYPE_CHECKING:
    import pandas as pd

COLLECTIVE_COLUMNS: tuple[str, ...] = (
    "run_id", "device_name", "device_fingerprint", "case_key", "op", "backend", "dtype", "params",
    "cache", "timing_mode", "status", "median_ms", "bytes", "gbps", "ranks", "rank_medians_ms", "rank_devices",
    "comm_version", "comm_settings", "slowest_rank", "straggler_excess",
)


def add_collective(conn: Connection, measurement_pk: int, record: CollectiveRecord) -> None:
    """The `collectives` row of the measurement `measurement_pk` (its `ranks` is the measurement's column)."""
    conn.execute(models.Collective.__table__.insert().values(
        measurement_id=measurement_pk,
        rank_medians_ms=[float(v) for v in record.rank_medians_ms],
        rank_devices=[str(v) for v in record.rank_devices],
        comm_version=record.comm_version,
        comm_settings={str(k): str(v) for k, v in dict(record.comm_settings).items()},
    ))


def straggler(rank_medians_ms: Sequence[float]) -> tuple[int | None, float | None]:
    """(the slowest rank, how much slower its median is than the median of the others' medians:
    0.25 = 25 % slower); (None, None) without two ranks."""
    medians = [float(v) for v in rank_medians_ms]
    if len(medians) < 2:
        return None, None
    slowest = max(range(len(medians)), key=lambda r: (medians[r], -r))
    others = statistics.median(m for r, m in enumerate(medians) if r != slowest)
    return slowest, (medians[slowest] / others - 1.0) if others > 0 else None


def _decoded(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def collective_frame(url: Db, *, run_ids: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per collective measurement (of `run_ids` when given), in storage order, with the
    straggler of each (`slowest_rank`, `straggler_excess`)."""
    m, c, e, r, g = models.Measurement, models.Case, models.Environment, models.Run, models.Collective
    query = (
        select(r.run_id, e.device_name, e.device_fingerprint, c.case_key, c.op, c.backend, c.dtype, c.params,
               m.cache, m.timing_mode, m.status, m.median_ms, m.bytes, m.gbps, m.ranks, g.rank_medians_ms,
               g.rank_devices, g.comm_version, g.comm_settings)
        .join(m, m.id == g.measurement_id)
        .join(c, c.id == m.case_id)
        .join(e, e.id == m.environment_id)
        .join(r, r.id == m.run_id)
        .order_by(r.id, m.id)
    )
    if run_ids is not None:
        query = query.where(r.run_id.in_(list(run_ids)))
    with reading(url) as engine, engine.connect() as conn:
        rows = [list(row) for row in conn.execute(query)]
    out = []
    for row in rows:
        medians = [float(v) for v in _decoded(row[15]) or []]
        slowest, excess = straggler(medians)
        row[7] = _decoded(row[7])
        row[15], row[16], row[18] = medians, list(_decoded(row[16]) or []), dict(_decoded(row[18]) or {})
        out.append([*row, slowest, excess])
    import pandas as pd  # here: `rooflab run` stores through this module and never reads a frame

    return pd.DataFrame(out, columns=list(COLLECTIVE_COLUMNS))
