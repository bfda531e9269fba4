"""Reads for `rooflab fleet`: a suite's runs, then only the few columns of the nights it judges.

The fleet reads in two narrow steps: the suite's runs (id and start: a few hundred rows a year), from
which reports/fleet/nights.py picks the night judged and the history nights behind it; then those
runs' measurements, one row each with the device, the case and the figure, and the host of each
device from the run's environment row (reports/fleet/deviations.py `FLEET_COLUMNS`). Nothing else of
the history is read.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import pandas as pd
from sqlalchemy import and_, select

from rooflab.db import models
from rooflab.db.handle import Db, reading

_CHUNK_RUNS = 500  # run ids per IN (...) list


def suite_runs(url: Db, suite: str) -> pd.DataFrame:
    """The runs of `suite`: run_id, started_at (tz-aware UTC), host, oldest first."""
    r = models.Run
    query = select(r.run_id, r.started_at, r.host).where(r.suite == suite).order_by(r.started_at, r.run_id)
    with reading(url) as engine, engine.connect() as conn:
        rows = [tuple(row) for row in conn.execute(query)]
    frame = pd.DataFrame(rows, columns=["run_id", "started_at", "host"])
    frame["started_at"] = pd.to_datetime(frame["started_at"], utc=True)
    return frame


def run_of(url: Db, run_id: str) -> tuple[str, datetime] | None:
    """(suite, started_at as tz-aware UTC) of run `run_id`, None when there is no such run."""
    r = models.Run
    with reading(url) as engine, engine.connect() as conn:
        row = conn.execute(select(r.suite, r.started_at).where(r.run_id == run_id)).first()
    return None if row is None else (str(row[0]), row[1])  # UTCDateTime: tz-aware UTC


def suites(url: Db) -> list[str]:
    """Every suite with a run, sorted."""
    with reading(url) as engine, engine.connect() as conn:
        return sorted(row[0] for row in conn.execute(select(models.Run.suite).distinct()))


def fleet_results(url: Db, run_ids: Sequence[str]) -> pd.DataFrame:
    """The measurements of `run_ids` with the columns the fleet judges (reports/fleet/deviations.py
    FLEET_COLUMNS): each with its run's start, its device's key, UUID, model and host (the host the
    device's environment row of that run names, else the run's host)."""
    r, c, e, m, re = models.Run, models.Case, models.Environment, models.Measurement, models.RunEnvironment
    t = m.__table__.c  # the record's columns the model does not name (db/models.py derives them)
    rows: list[tuple] = []
    hosts: dict[tuple[str, str], str] = {}
    ids = list(dict.fromkeys(run_ids))
    with reading(url) as engine, engine.connect() as conn:
        for start in range(0, len(ids), _CHUNK_RUNS):
            chunk = ids[start:start + _CHUNK_RUNS]
            query = (select(r.run_id, r.started_at, r.host, m.device_key, m.device_uuid, e.device_name, e.memory_bytes,
                            c.case_key, c.op, c.family, m.cache, m.status, m.median_ms, t.rel_ci_halfwidth,
                            t.throttled, t.quality)
                     .select_from(m).join(r, r.id == m.run_id).join(c, c.id == m.case_id)
                     .join(e, e.id == m.environment_id).where(r.run_id.in_(chunk)))
            rows.extend(tuple(row) for row in conn.execute(query))
            envs = (select(r.run_id, re.device_key, re.info).select_from(re)
                    .join(r, and_(r.id == re.run_id)).where(r.run_id.in_(chunk)))
            for run_id, key, info in conn.execute(envs):
                host = (info or {}).get("host")
                if host:
                    hosts[(run_id, key)] = str(host)
    frame = pd.DataFrame(rows, columns=["run_id", "started_at", "host", "device_key", "device_uuid", "device_name",
                                        "memory_bytes", "case_key", "op", "family", "cache", "status", "median_ms",
                                        "rel_ci_halfwidth", "throttled", "quality"])
    frame["started_at"] = pd.to_datetime(frame["started_at"], utc=True)
    if hosts:
        frame["host"] = [hosts.get((run, key), host) for run, key, host in
                         zip(frame["run_id"], frame["device_key"], frame["host"], strict=True)]
    return frame
