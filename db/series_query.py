"""Reads for the history and the comparison: raw samples, case keys, and every result's few numbers.

Like db.query, each function takes a database URL (or an open db.handle.Database), checks that the
schema is current, and returns new objects. `history_columns` reads the whole history as numpy
columns (integer keys and codes, no Python object per result): what the history page draws of a
year of nightlies (2.19 M results) and what the report counts its runs from.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import case, func, literal, select

from rooflab.db import models
from rooflab.db.columns import canonical_json
from rooflab.db.copy_stream import copied_csv
from rooflab.db.handle import Db, reading
from rooflab.db.samples import unpack
from rooflab.vocab import ResultStatus

_PARTITION_ROWS = 50_000
# string columns read as codes (-1: NULL); the device UUID and the tool name a series' device
# (reports.data.devices)
CODED = ("status", "quality", "stop_reason", "flush_method", "pace", "collective_mode", "device_uuid", "tool")
CODE_TYPES = {"device_uuid": np.int32}  # a fleet's years may hold more UUIDs than an int16 counts; others int16


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
    codes: dict[str, np.ndarray]  # CODED column -> code into `values[column]` (-1: NULL; int16, CODE_TYPES)
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

    def subset(self, rows: np.ndarray) -> HistoryColumns:
        """This history with the results `rows` (indices, in their order) alone, and every table."""
        return replace(self, case_id=self.case_id[rows], environment_id=self.environment_id[rows],
                       run_index=self.run_index[rows], median_ms=self.median_ms[rows], p10_ms=self.p10_ms[rows],
                       p90_ms=self.p90_ms[rows], rel_ci_halfwidth=self.rel_ci_halfwidth[rows],
                       throttled=self.throttled[rows], codes={k: v[rows] for k, v in self.codes.items()})

    def decoded(self, column: str, rows: np.ndarray | None = None) -> np.ndarray:
        """A CODED column (of `rows` only, when given) as an object array of its values (None where NULL)."""
        table = np.array(list(self.values[column]) + [None], dtype=object)
        codes = self.codes[column] if rows is None else self.codes[column][rows]
        return table[codes]  # -1 picks the trailing None

    def code_of(self, column: str, value: str) -> int:
        """The code of `value` in a CODED column (-2, which no row has, when no row has the value)."""
        return self.values[column].index(value) if value in self.values[column] else -2


def _coded(column: Any, values: Sequence[str]) -> Any:
    if not values:  # only NULLs
        return literal(-1)
    return case({v: i for i, v in enumerate(values)}, value=column, else_=-1)


# the numeric columns of HistoryColumns: (field, the measurement's column, its dtype; None: a run index)
NUMBERS = (("case_id", "case_id", np.int32), ("environment_id", "environment_id", np.int32),
           ("run_index", "run_id", None), ("median_ms", "median_ms", np.float64), ("p10_ms", "p10_ms", np.float32),
           ("p90_ms", "p90_ms", np.float32), ("rel_ci_halfwidth", "rel_ci_halfwidth", np.float64),
           ("throttled", "throttled", bool))
KEYS = ("case_id", "environment_id", "run_index", "median_ms", "status")  # what `keys_only` reads
DEVICE_KEYS = ("device_uuid", "tool")  # and what it adds with `devices`


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


def history_columns(url: Db, *, keys_only: bool = False, devices: bool = False,
                    runs: Sequence[str] | None = None) -> HistoryColumns:
    """Every measurement's case, environment, run, median, p10, p90, CI, throttled flag, status,
    quality, stop reason, flush method, pace, collective mode, device UUID and tool (the strings as
    codes), read in partitions straight
    from the database driver into numpy arrays: one pass, a few bytes per result. `keys_only`: only
    the case, environment, run, status and whether the median is positive (median_ms 1.0 where it
    is, NaN elsewhere; the other columns are left empty): what the run counts and the comparison's
    pairing need; with `devices`, the device UUID and tool too (which physical device each result
    is: a comparison whose side names one). `runs`: the results of those runs only (run ids; each run's
    results lie together, so they are read in the table's order, not a case at a time); the run,
    environment and case tables stay whole."""
    m = models.Measurement
    numbers = [f for f in NUMBERS if not keys_only or f[0] in KEYS]
    coded = [name for name in CODED if not keys_only or name in KEYS or (devices and name in DEVICE_KEYS)]
    with reading(url) as engine:
        with engine.connect() as conn:
            run_frame, envs, cases = _dimension_frames(conn)
            picked = [int(pk) for pk in run_frame.loc[run_frame["run_id"].isin(list(runs or ())), "run_pk"]]
            # the range as well as the list: from a list alone PostgreSQL's planner does not see that
            # the newest runs' results lie together at the table's end, and reads it whole
            chosen = ((m.run_id.in_(picked), m.run_id.between(min(picked, default=0), max(picked, default=0)))
                      if runs is not None else ())
            found = [n for n in coded if n != "status"]
            distinct = (conn.execute(select(*(getattr(m, n) for n in found)).where(*chosen).distinct()).all()
                        if found else [])
            total = conn.execute(select(func.count()).select_from(m).where(*chosen)).scalar_one()
        values = {name: tuple(sorted({row[i] for row in distinct if row[i] is not None}))
                  for i, name in enumerate(found)}
        values["status"] = tuple(sorted(str(s) for s in ResultStatus))
        # with keys only, the median is read as 1 where it is positive (NULL elsewhere): a small
        # integer is one shared object, a float a new one per row
        read_as = {"median_ms": case((m.median_ms > 0, 1))} if keys_only else {}
        query = select(*(read_as.get(column, getattr(m, column)) for _, column, _ in numbers),
                       *(_coded(getattr(m, name), values[name]) for name in coded)).where(*chosen)
        statement = str(query.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True}))
        pks = run_frame["run_pk"].to_numpy(dtype=np.int64)
        lut = np.full(int(pks.max()) + 1 if len(pks) else 1, -1, dtype=np.int32)
        lut[pks] = np.arange(len(pks), dtype=np.int32)
        kinds = [kind for _, _, kind in numbers] + [CODE_TYPES.get(name, np.int16) for name in coded]
        cols = _read(engine, statement, kinds, total, lut)
    read = dict(zip([f for f, _, _ in numbers] + coded, cols, strict=True))

    def field(name: str, dtype: Any) -> np.ndarray:
        return read.get(name, np.empty(0, dtype=dtype))

    return HistoryColumns(
        **{name: field(name, kind or np.int32) for name, _, kind in NUMBERS},
        codes={name: field(name, CODE_TYPES.get(name, np.int16)) for name in CODED},
        values={n: values.get(n, ()) for n in CODED},
        runs=run_frame.drop(columns="run_pk"), environments=envs, cases=cases,
    )


def _read(engine: Any, statement: str, kinds: list, total: int, lut: np.ndarray) -> list[np.ndarray]:
    """The rows of `statement`, read with the driver's own cursor (no per-row processing above it;
    on PostgreSQL by COPY, parsed by pandas' C reader a block at a time, where a cursor would hold
    every row in the client first) into one preallocated array per column (no second copy); a kind
    of None maps run keys to run indices through `lut`."""
    cols = [np.empty(total, dtype=kind or np.int32) for kind in kinds]
    done = 0
    raw = engine.raw_connection()
    try:
        for block in (_copied_blocks(raw, statement) if engine.dialect.name == "postgresql"
                      else _fetched_blocks(raw, statement)):
            end = min(done + block.shape[1], total)  # results added since the count: read next time
            block = block[:, :end - done]
            for i, kind in enumerate(kinds):
                cols[i][done:end] = (lut[block[i].astype(np.int64)] if kind is None
                                     else block[i] > 0 if kind is bool else block[i])
            done = end
    finally:
        raw.close()
    return [c[:done] for c in cols]


def _fetched_blocks(raw: Any, statement: str) -> Iterator[np.ndarray]:
    """The rows as float64 blocks (a column a row, None as NaN), fetched a partition at a time."""
    cursor = raw.cursor()
    try:
        cursor.execute(statement)
        while part := cursor.fetchmany(_PARTITION_ROWS):
            yield np.array(part, dtype=np.float64).T
    finally:
        cursor.close()


def _copied_blocks(raw: Any, statement: str) -> Iterator[np.ndarray]:
    """PostgreSQL: the rows by COPY as float64 blocks (booleans 1 and 0, NULL NaN)."""
    with copied_csv(raw.driver_connection, statement) as rows:
        if rows is None:
            return
        for chunk in pd.read_csv(rows, header=None, chunksize=_PARTITION_ROWS,
                                 true_values=["t"], false_values=["f"], keep_default_na=False, na_values=[""]):
            yield chunk.to_numpy(dtype=np.float64, na_value=np.nan).T
