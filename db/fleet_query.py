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
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import Connection, Select, select

from rooflab.db import models
from rooflab.db.copy_stream import copied_csv
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


_TEXT = ("device_key", "device_uuid", "cache", "status", "quality")  # few distinct values each
_MEASURED = ("run_pk", "case_pk", "environment_pk", *_TEXT[:4], "median_ms", "rel_ci_halfwidth", "throttled",
             _TEXT[4])
_PARTITION_ROWS = 100_000  # rows turned into a frame at a time where there is no COPY


def _measurements_query(run_pks: Sequence[int]) -> Select[Any]:
    m = models.Measurement
    t = m.__table__.c  # the record's columns the model does not name (db/models.py derives them)
    return select(m.run_id, m.case_id, m.environment_id, m.device_key, m.device_uuid, m.cache, m.status, m.median_ms,
                  t.rel_ci_halfwidth, t.throttled, t.quality).where(m.run_id.in_([int(pk) for pk in run_pks]))


def _shared_text(frame: pd.DataFrame) -> pd.DataFrame:
    """The text columns as objects that share one string per distinct value (not one per row)."""
    for name in _TEXT:
        shared = frame[name].astype("category").astype(object)
        frame[name] = shared.where(shared.notna(), None)
    return frame


def _copied(conn: Connection, query: Select[Any]) -> pd.DataFrame:
    """PostgreSQL: the rows as CSV by COPY, parsed by pandas' C reader (no Python object per value)."""
    sql = str(query.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
    with copied_csv(conn.connection.driver_connection, sql) as rows:
        if rows is None:
            return pd.DataFrame({name: pd.Series(dtype=object) for name in _MEASURED})
        frame = pd.read_csv(rows, names=list(_MEASURED), header=None,
                            dtype={name: "category" for name in _TEXT}, true_values=["t"], false_values=["f"],
                            keep_default_na=False, na_values=[""])
    return _shared_text(frame)


def _streamed(conn: Connection, query: Select[Any]) -> pd.DataFrame:
    """Elsewhere: the rows a partition at a time, each made a frame (its text shared) before the next."""
    result = conn.execution_options(yield_per=_PARTITION_ROWS).execute(query)
    parts = [_shared_text(pd.DataFrame([tuple(row) for row in part], columns=list(_MEASURED)))
             for part in result.partitions()]
    if not parts:
        return pd.DataFrame({name: pd.Series(dtype=object) for name in _MEASURED})
    return pd.concat(parts, ignore_index=True)


def _looked_up(keys: pd.Series, table: pd.DataFrame) -> pd.DataFrame:
    """`table`'s rows (indexed by id) for each of `keys`, in their order."""
    return table.iloc[table.index.get_indexer(keys.to_numpy())].reset_index(drop=True)


def _device_hosts(frame: pd.DataFrame, hosts: dict[tuple[str, str], str]) -> np.ndarray:
    """Each row's host: the one `hosts` names for its (run id, device key), else the run's (`host`).
    Looked up by the run's and the device's codes, the pairs `hosts` names sorted once (a night with
    its history is millions of rows and a few thousand pairs; memory grows with them, not with
    runs x devices)."""
    run_codes, run_names = pd.factorize(frame["run_id"])
    device_codes, device_names = pd.factorize(frame["device_key"])
    runs, devices = {r: i for i, r in enumerate(run_names)}, {d: i for i, d in enumerate(device_names)}
    width = len(device_names) + 1
    named = [(runs[run] * width + devices[device], host) for (run, device), host in hosts.items()
             if run in runs and device in devices]
    out = frame["host"].to_numpy(dtype=object).copy()
    if not named:
        return out
    named.sort(key=lambda pair: pair[0])
    pair_keys = np.array([k for k, _ in named], dtype=np.int64)
    pair_hosts = np.array([h for _, h in named], dtype=object)
    row_keys = run_codes.astype(np.int64) * width + device_codes
    at = np.minimum(np.searchsorted(pair_keys, row_keys), len(pair_keys) - 1)
    hit = (run_codes >= 0) & (device_codes >= 0) & (pair_keys[at] == row_keys)
    out[hit] = pair_hosts[at[hit]]
    return out


def fleet_results(url: Db, run_ids: Sequence[str]) -> pd.DataFrame:
    """The measurements of `run_ids` with the columns the fleet judges (reports/fleet/deviations.py
    FLEET_COLUMNS): each with its run's start, its device's key, UUID, model and host (the host the
    device's environment row of that run names, else the run's host).

    Read narrow: the measurements with their run's, case's and environment's ids (by COPY on
    PostgreSQL), then those few tables once, joined on in memory: a night of 128,000 results with 14
    nights of history is 1.9 M rows, a Python object per value of which would take gigabytes."""
    r, c, e, re = models.Run, models.Case, models.Environment, models.RunEnvironment
    ids = list(dict.fromkeys(run_ids))
    with reading(url) as engine, engine.connect() as conn:
        runs = pd.DataFrame([tuple(row) for row in conn.execute(
            select(r.id, r.run_id, r.started_at, r.host).where(r.run_id.in_(ids)))],
            columns=["id", "run_id", "started_at", "host"]).set_index("id")
        pks = list(runs.index)
        read = _copied if conn.dialect.name == "postgresql" else _streamed
        measured = pd.concat([read(conn, _measurements_query(pks[i:i + _CHUNK_RUNS]))
                              for i in range(0, len(pks), _CHUNK_RUNS)] or [read(conn, _measurements_query([]))],
                             ignore_index=True)
        cases = pd.DataFrame([tuple(row) for row in conn.execute(
            select(c.id, c.case_key, c.op, c.family).where(c.id.in_(measured["case_pk"].unique().tolist())))],
            columns=["id", "case_key", "op", "family"]).set_index("id")
        envs = pd.DataFrame([tuple(row) for row in conn.execute(
            select(e.id, e.device_name, e.memory_bytes).where(e.id.in_(measured["environment_pk"].unique().tolist())))],
            columns=["id", "device_name", "memory_bytes"]).set_index("id")
        hosts = {(run_id, key): str(info["host"]) for run_id, key, info in conn.execute(
            select(r.run_id, re.device_key, re.info).join(r, r.id == re.run_id).where(r.id.in_(pks)))
                 if info and info.get("host")}
    frame = pd.concat([_looked_up(measured["run_pk"], runs), _looked_up(measured["case_pk"], cases),
                       _looked_up(measured["environment_pk"], envs),
                       measured[[n for n in _MEASURED if not n.endswith("_pk")]]], axis=1)
    frame["started_at"] = pd.to_datetime(frame["started_at"], utc=True)
    if hosts:
        frame["host"] = _device_hosts(frame, hosts)
    return frame[["run_id", "started_at", "host", "device_key", "device_uuid", "device_name", "memory_bytes",
                  "case_key", "op", "family", "cache", "status", "median_ms", "rel_ci_halfwidth", "throttled",
                  "quality"]]
