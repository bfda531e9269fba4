"""Reads for the history and the comparison: raw samples, case keys, and every result's few numbers.

Like db.query, each function takes a database URL (or an open db.handle.Database), checks that the
schema is current, and returns new objects. `history_columns` reads the whole history as numpy
columns (integer keys and codes, no Python object per result): what the history page draws of a
year of nightlies (2.19 M results) and what the report counts its runs from.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import Select, case, literal, select

from rooflab.db import models
from rooflab.db.columns import canonical_json
from rooflab.db.handle import Db, reading
from rooflab.db.samples import unpack

_PARTITION_ROWS = 50_000
CODED = ("status", "quality", "stop_reason", "flush_method")  # string columns read as codes (-1: NULL)


def raw_samples(url: Db, *, run_id: Sequence[str], case_key: Sequence[str] | None = None) -> pd.DataFrame:
    """The raw samples of the measurements of `run_id` (of `case_key` only, when given): one row per
    measurement that still has them, with run_id, case_key, device_fingerprint, device_uuid and
    samples_ms (a tuple of floats). Measurements whose samples were pruned, or that were imported
    from an export (which carries none), have no row."""
    r, c, e, m, s = models.Run, models.Case, models.Environment, models.Measurement, models.Sample
    query = (select(r.run_id, c.case_key, e.device_fingerprint, m.device_uuid, s.count, s.values_f64le)
             .select_from(s).join(m, m.id == s.measurement_id).join(r, r.id == m.run_id)
             .join(c, c.id == m.case_id).join(e, e.id == m.environment_id)
             .where(r.run_id.in_(list(run_id))))
    if case_key is not None:
        query = query.where(c.case_key.in_(list(case_key)))
    with reading(url) as engine, engine.connect() as conn:
        rows = [(run, key, fp, uuid, unpack(blob, count)) for run, key, fp, uuid, count, blob in conn.execute(query)]
    return pd.DataFrame(rows, columns=["run_id", "case_key", "device_fingerprint", "device_uuid", "samples_ms"])


def case_keys(url: Db, *, op: str | None = None) -> list[str]:
    """Every case key in the database (of one op when given), sorted."""
    c = models.Case
    query = select(c.case_key).order_by(c.case_key)
    if op is not None:
        query = query.where(c.op == op)
    with reading(url) as engine, engine.connect() as conn:
        return [row[0] for row in conn.execute(query)]


def cases(url: Db) -> pd.DataFrame:
    """The cases table: case_id, case_key, op, op_version, family, backend, dtype, params (JSON text)."""
    with reading(url) as engine, engine.connect() as conn:
        return _case_frame(conn)


def _case_frame(conn: Any) -> pd.DataFrame:
    c = models.Case
    frame = pd.DataFrame([tuple(x) for x in conn.execute(
        select(c.id, c.case_key, c.op, c.op_version, c.family, c.backend, c.dtype, c.params).order_by(c.id))],
        columns=["case_id", "case_key", "op", "op_version", "family", "backend", "dtype", "params"])
    frame["params"] = [canonical_json(p) for p in frame["params"]]
    return frame


@dataclass(frozen=True)
class HistoryColumns:
    """Every result's numbers as numpy columns (one entry per measurement, in no particular order)
    and the small tables their integer keys point into."""

    case_id: np.ndarray  # int32: cases.id (the `cases` frame's case_id)
    environment_id: np.ndarray  # int32: environments.id
    run_index: np.ndarray  # int32: row of `runs` (0-based run order)
    median_ms: np.ndarray  # float64 (the stored value, which the regression check judges), NaN where none
    p10_ms: np.ndarray  # float32 (drawn only), NaN where none
    p90_ms: np.ndarray
    rel_ci_halfwidth: np.ndarray  # float64 (the noise rule compares it with its bound)
    throttled: np.ndarray  # bool
    codes: dict[str, np.ndarray]  # CODED column -> int16 code into `values[column]` (-1: NULL)
    values: dict[str, tuple[str, ...]]  # CODED column -> its distinct values
    runs: pd.DataFrame  # run_id, started_at, host, suite, git_commit: one row per run, in run order
    environments: pd.DataFrame  # environment_id, device_fingerprint, device_name, device_kind, versions
    cases: pd.DataFrame  # case_id, case_key, op, op_version, family, backend, dtype, params (JSON text)

    def __len__(self) -> int:
        return len(self.case_id)

    def tables_only(self) -> HistoryColumns:
        """This history without its per-result columns (the small tables and the coded values)."""
        empty = np.empty(0, dtype=np.int32)
        return replace(self, case_id=empty, environment_id=empty, run_index=empty, median_ms=empty, p10_ms=empty,
                       p90_ms=empty, rel_ci_halfwidth=empty, throttled=empty,
                       codes={k: empty for k in self.codes})

    def decoded(self, column: str) -> np.ndarray:
        """A CODED column as an object array of its values (None where NULL)."""
        table = np.array(list(self.values[column]) + [None], dtype=object)
        return table[self.codes[column]]  # -1 picks the trailing None


def _coded(column: Any, values: Sequence[str]) -> Any:
    if not values:  # only NULLs
        return literal(-1)
    return case({v: i for i, v in enumerate(values)}, value=column, else_=-1)


def _bulk_query(values: dict[str, tuple[str, ...]]) -> Select:
    m = models.Measurement
    return select(m.case_id, m.environment_id, m.run_id, m.median_ms, m.p10_ms, m.p90_ms, m.rel_ci_halfwidth,
                  m.throttled, *(_coded(getattr(m, name), values[name]) for name in CODED))


def _dimension_frames(conn: Any) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    r, e = models.Run, models.Environment
    runs = pd.DataFrame([tuple(x) for x in conn.execute(
        select(r.id, r.run_id, r.started_at, r.host, r.suite, r.git_commit).order_by(r.started_at, r.run_id))],
        columns=["run_pk", "run_id", "started_at", "host", "suite", "git_commit"])
    runs["started_at"] = pd.to_datetime(runs["started_at"], utc=True)
    envs = pd.DataFrame([tuple(x) for x in conn.execute(
        select(e.id, e.device_fingerprint, e.device_name, e.device_kind, e.driver_version, e.cuda_version,
               e.torch_version))],
        columns=["environment_id", "device_fingerprint", "device_name", "device_kind", "driver_version",
                 "cuda_version", "torch_version"])
    return runs, envs, _case_frame(conn)


def history_columns(url: Db) -> HistoryColumns:
    """Every measurement's case, environment, run, median, p10, p90, CI, throttled flag, status,
    quality, stop reason and flush method (the four strings as codes), read in partitions straight
    from the database driver into numpy arrays: one pass, a few bytes per result."""
    m = models.Measurement
    with reading(url) as engine:
        with engine.connect() as conn:
            runs, envs, cases = _dimension_frames(conn)
            distinct = conn.execute(select(*(getattr(m, n) for n in CODED)).distinct()).all()
        values = {name: tuple(sorted({row[i] for row in distinct if row[i] is not None}))
                  for i, name in enumerate(CODED)}
        statement = str(_bulk_query(values).compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True}))
        pks = runs["run_pk"].to_numpy(dtype=np.int64)
        lut = np.full(int(pks.max()) + 1 if len(pks) else 1, -1, dtype=np.int32)
        lut[pks] = np.arange(len(pks), dtype=np.int32)
        kinds = (np.int32, np.int32, None, np.float64, np.float32, np.float32, np.float64, bool) \
            + (np.int16,) * len(CODED)
        parts: list[list[np.ndarray]] = [[] for _ in kinds]
        raw = engine.raw_connection()  # the driver's own cursor: no per-row processing above it
        try:
            cursor = raw.cursor()
            cursor.execute(statement)
            while part := cursor.fetchmany(_PARTITION_ROWS):
                block = np.array(part, dtype=np.float64).T
                for i, kind in enumerate(kinds):
                    parts[i].append(lut[block[i].astype(np.int64)] if kind is None
                                    else block[i] > 0 if kind is bool else block[i].astype(kind))
            cursor.close()
        finally:
            raw.close()
    cols = [np.concatenate(p) if p else np.empty(0, dtype=k or np.int32) for p, k in zip(parts, kinds, strict=True)]
    return HistoryColumns(
        case_id=cols[0], environment_id=cols[1], run_index=cols[2], median_ms=cols[3], p10_ms=cols[4],
        p90_ms=cols[5], rel_ci_halfwidth=cols[6], throttled=cols[7],
        codes={name: cols[8 + i] for i, name in enumerate(CODED)}, values=values,
        runs=runs.drop(columns="run_pk"), environments=envs, cases=cases,
    )
