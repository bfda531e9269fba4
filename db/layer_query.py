"""Reading the layer attribution back: profiles (one row per profiled measurement) and parts."""
from __future__ import annotations

import json

import pandas as pd
from sqlalchemy import select

from rooflab.db import models
from rooflab.db.handle import Db, reading

PROFILE_COLUMNS: tuple[str, ...] = (
    "measurement_id", "run_id", "run_order", "measured_at", "device_name", "device_fingerprint", "case_key", "op",
    "backend", "dtype", "params", "cache", "timing_mode", "status", "median_ms", "flops", "bytes", "clock",
    "whole_ms", "gap_ms", "unattributed_ms", "overlap_ms", "host_ms", "events",
)
PART_COLUMNS: tuple[str, ...] = ("measurement_id", "position", "name", "kind", "time_ms", "flops", "bytes", "events")


def layer_profiles(url: Db) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(profiles, parts) of every profiled measurement in the database at `url`."""
    m, c, e, r = models.Measurement, models.Case, models.Environment, models.Run
    lp, part = models.LayerProfile, models.LayerPart
    profiles_query = (
        select(
            m.id, r.run_id, r.id, m.measured_at, e.device_name, e.device_fingerprint, c.case_key, c.op, c.backend,
            c.dtype, c.params, m.cache, m.timing_mode, m.status, m.median_ms, m.flops, m.bytes, lp.clock,
            lp.whole_ms, lp.gap_ms, lp.unattributed_ms, lp.overlap_ms, lp.host_ms, lp.events,
        )
        .join(m, m.id == lp.measurement_id)
        .join(c, c.id == m.case_id)
        .join(e, e.id == m.environment_id)
        .join(r, r.id == m.run_id)
        .order_by(r.id, m.id)
    )
    parts_query = select(
        part.measurement_id, part.position, part.name, part.kind, part.time_ms, part.flops, part.bytes, part.events
    ).order_by(part.measurement_id, part.position)
    with reading(url) as engine, engine.connect() as conn:
        profiles = pd.DataFrame([tuple(row) for row in conn.execute(profiles_query)], columns=list(PROFILE_COLUMNS))
        parts = pd.DataFrame([tuple(row) for row in conn.execute(parts_query)], columns=list(PART_COLUMNS))
    if not profiles.empty:
        profiles["params"] = profiles["params"].map(lambda v: json.loads(v) if isinstance(v, str) else dict(v))
    return profiles, parts
