"""Reading results into pandas DataFrames, for notebooks and for `reports/`.

Every function takes a database URL (or the command's open db.handle.Database), checks that the
schema is current, and returns a new DataFrame. Timestamps are tz-aware UTC; `params` and
`throttle_reasons` are JSON strings
(sorted keys) so that columns stay hashable (`json.loads` gives the object back). `run_order`
numbers runs by (started_at, run_id): history is ordered by run, never by the wall clock of
individual measurements.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import date, datetime
from typing import Any

import pandas as pd
from sqlalchemy import Connection, Text, cast, func, or_, select, text

from rooflab.db import models, series_facts
from rooflab.db.columns import ALL_COLUMNS, COLUMN_KINDS, JSON_COLUMNS, canonical_json, column_sources, result_select
from rooflab.db.copy_stream import copied_csv
from rooflab.db.errors import DatabaseInputError
from rooflab.db.handle import Db, reading
from rooflab.db.run_order import run_orders
from rooflab.db.series_facts import FactKind
from rooflab.db.series_state import read_facts
from rooflab.db.timeparse import parse_since
from rooflab.vocab import ResultStatus, RunStatus

RESULT_COLUMNS: tuple[str, ...] = ALL_COLUMNS + ("run_order",)
# how the frame holds a column follows its kind (db/columns.py COLUMN_KINDS)
_DATETIME_COLUMNS = tuple(name for name in ALL_COLUMNS if COLUMN_KINDS[name].kind == "datetime")
_BOOL_COLUMNS = tuple(name for name in ALL_COLUMNS if COLUMN_KINDS[name].kind == "bool")
_PARTITION_ROWS = 20_000
# the columns of the runs and environments tables that `runs` and `environments` return, in the
# order those public frames have (rooflab.runs); the spec text and the table keys stay in the database
RUN_FRAME_COLUMNS = ("run_id", "suite", "status", "started_at", "finished_at", "host", "git_commit", "git_dirty",
                     "spec_hash", "command_line", "rooflab_version")
ENVIRONMENT_FRAME_COLUMNS = ("device_fingerprint", "device_name", "device_kind", "compute_capability", "sm_count",
                             "l2_bytes", "memory_bytes", "driver_version", "cuda_version", "torch_version", "identity",
                             "first_seen_at")

_connect = reading  # a URL or the command's db.handle.Database -> an engine to read it with


def _fetch_all_scalars(url: Db, query: Any) -> list[Any]:
    return [row[0] for row in _fetch_all(url, query)]


def _fetch_all(url: Db, query: Any) -> list[Any]:
    """All rows of one read-only query."""
    with _connect(url) as engine, engine.connect() as conn:
        return list(conn.execute(query).all())


def results(
    url: Db,
    *,
    run_id: str | Sequence[str] | None = None,
    since: str | date | datetime | None = None,
    device: str | None = None,
    status: str | Sequence[str] | None = None,
    case_key: str | Sequence[str] | None = None,
    device_key: Sequence[str] | None = None,
    columns: Sequence[str] | None = None,
) -> pd.DataFrame:
    """One row per measurement: the export columns (docs/design.md) first, then the extra columns and `run_order`.

    `device` matches a fingerprint, a device name or a device UUID; `since` keeps runs started
    at or after that date (UTC); `status`, `run_id` and `case_key` take one value or several;
    `device_key` keeps the results of those physical devices (a GPU's UUID; a device without one is
    keyed by its fingerprint), through the device's index. `columns` (names
    of RESULT_COLUMNS) reads only those columns, in that order, with the same values and types as
    the full frame has in them: much less to read and convert when a report needs a few columns.
    """
    names = result_columns(columns)
    fetched = _fetched(names)
    sources = column_sources()
    own = [n for n in fetched if n not in sources]  # the measurement's own columns
    m = models.Measurement
    keys = (m.run_id.label("_run_pk"), m.case_id.label("_case_pk"), m.environment_id.label("_environment_pk"))
    query = result_select(own, json_as_text=True).add_columns(*keys)
    if run_id is not None:
        query = query.where(models.Run.run_id.in_(_as_list(run_id)))
    if since is not None:
        query = query.where(models.Run.started_at >= parse_since(since))
    if device is not None:
        query = query.where(
            or_(
                models.Environment.device_fingerprint == device,
                models.Environment.device_name == device,
                models.Measurement.device_uuid == device,
            )
        )
    if status is not None:
        query = query.where(models.Measurement.status.in_(_as_list(status)))
    if case_key is not None:
        query = query.where(models.Case.case_key.in_(_as_list(case_key)))
    if device_key is not None:
        query = query.where(models.Measurement.device_key.in_(list(device_key)))
    with _connect(url) as engine, engine.connect() as conn:
        orders = run_orders(conn) if "run_order" in names else {}
        copied = _copied_lists(conn, query, [COLUMN_KINDS[n].kind for n in own] + ["int"] * len(keys))
        column_lists = copied if copied is not None else _column_lists(
            conn.execute(query).partitions(_PARTITION_ROWS), len(own) + len(keys))
        n_rows = len(column_lists[0])
        values = dict(zip(own, column_lists, strict=False))  # the key columns follow the own ones
        for table, pks in zip((models.Run, models.Case, models.Environment), column_lists[len(own):], strict=True):
            values.update(_dimension_columns(conn, table, [n for n in fetched if n in sources
                                                           and sources[n].class_ is table], pks))
    return _frame_from_columns({n: values[n] for n in fetched}, n_rows, names, orders)


def _column_lists(parts: Iterable[Sequence[Any]], width: int) -> list[list]:
    """The rows of `parts` (one part of Row objects at a time) as `width` column lists, built part by
    part so that no list of every row is ever held; equal strings in a column become one object (a
    status or stop reason repeats on most rows: a year of results would hold millions of copies)."""
    lists: list[list] = [[] for _ in range(width)]
    shared: list[dict] = [{} for _ in range(width)]
    for part in parts:
        for j, col in enumerate(zip(*part, strict=True)):
            if isinstance(col[0], str) or (col[0] is None and any(isinstance(v, str) for v in col)):
                lists[j].extend(shared_strings(col, shared[j]))
            else:
                lists[j].extend(col)
    return lists


_COPY_NULL = "\\N"  # how the COPY below writes NULL (an empty field is an empty string)


def _copied_lists(conn: Connection, query: Any, kinds: Sequence[str]) -> list[list] | None:
    """PostgreSQL: the rows of `query` as column lists (each column's values of the kind `kinds`
    names, db/columns.py COLUMN_KINDS), sent by COPY as CSV and parsed by pandas' C reader: no
    Python object per value on the way, and equal strings one object (a category's). The lists hold
    what `_column_lists` would (None for NULL text, NaN for a NULL number, as the frame makes of
    None). None where COPY does not apply (another database, or a query with a value PostgreSQL's
    SQL text cannot carry)."""
    if conn.dialect.name != "postgresql":
        return None
    try:
        sql = str(query.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
    except Exception:  # noqa: BLE001 - a bound value without a literal form: read row by row
        return None
    names = [f"c{i}" for i in range(len(kinds))]
    numeric = {n for n, kind in zip(names, kinds, strict=True) if kind in ("int", "float")}
    with copied_csv(conn.connection.driver_connection, sql, null=_COPY_NULL) as rows:
        if rows is None:
            return [[] for _ in kinds]
        frame = pd.read_csv(rows, names=names, header=None,
                            dtype={n: "category" for n in names if n not in numeric},
                            keep_default_na=False, na_values={n: [_COPY_NULL] for n in names})
    lists = []
    for name, kind in zip(names, kinds, strict=True):
        column = frame.pop(name)
        if name in numeric:  # a column of NULLs alone: None, as the rows give it (a frame keeps it so)
            lists.append([None] * len(column) if column.isna().all() else column.tolist())
        elif kind == "datetime":  # PostgreSQL's text of a timestamp leaves out a zero fraction: ISO 8601 either way
            lists.append(pd.to_datetime(column.astype(object), utc=True, format="ISO8601").tolist())
        elif kind == "bool":
            lists.append([None if v is None else v == "t" for v in column.astype(object).where(column.notna(), None)])
        else:
            lists.append(column.astype(object).where(column.notna(), None).tolist())
    return lists


def shared_strings(values: Iterable[object], seen: dict[str, str] | None = None) -> list[object]:
    """`values` with equal strings made one object (`seen`: the strings met so far, kept by the
    caller across calls). A column with few distinct strings (a status, a run id) would otherwise
    hold one string object per row: millions on a year of results."""
    seen = {} if seen is None else seen
    return [seen.setdefault(v, v) if isinstance(v, str) else v for v in values]


def _dimension_columns(conn: Connection, table: Any, names: list[str], pks: list[int]) -> dict[str, list]:
    """The columns `names` of a run, case or environment row for each of the primary keys `pks`:
    each row of that table is read once (a results frame repeats a run's columns on every
    measurement of it)."""
    if not names:
        return {}
    sources = column_sources()
    wanted = sorted(set(pks))
    selected = [cast(sources[n], Text) if n in JSON_COLUMNS else sources[n] for n in names]
    lookup: dict[int, tuple] = {}
    for i in range(0, len(wanted), 5_000):
        for row in conn.execute(select(table.id, *selected).where(table.id.in_(wanted[i:i + 5_000]))):
            lookup[row[0]] = tuple(row[1:])
    return {name: [lookup[pk][j] for pk in pks] for j, name in enumerate(names)}


def result_columns(columns: Sequence[str] | None) -> tuple[str, ...]:
    """RESULT_COLUMNS, or the requested subset (validated, duplicates dropped, order kept)."""
    if columns is None:
        return RESULT_COLUMNS
    if isinstance(columns, str):
        columns = [columns]
    names = tuple(dict.fromkeys(columns))
    unknown = [n for n in names if n not in RESULT_COLUMNS]
    if unknown:
        raise DatabaseInputError(f"unknown result column(s): {', '.join(unknown)}; known: {', '.join(RESULT_COLUMNS)}")
    if not names:
        raise DatabaseInputError("columns: name at least one result column")
    return names


def _fetched(names: Sequence[str]) -> list[str]:
    """The database columns to select for `names` (`run_order` is derived from `run_id`)."""
    fetched = [n for n in names if n != "run_order"]
    if "run_order" in names and "run_id" not in fetched:
        fetched.append("run_id")
    return fetched


def _frame_from_columns(
    values: dict[str, list], n_rows: int, names: Sequence[str], orders: dict[str, int]
) -> pd.DataFrame:
    """The results frame of column lists (JSON columns as stored text, canonicalised by `_finish`)."""
    frame = pd.DataFrame(values, columns=list(values)) if n_rows else pd.DataFrame([], columns=list(values))
    return _finish(frame, names, orders)


def _finish(frame: pd.DataFrame, names: Sequence[str], orders: dict[str, int]) -> pd.DataFrame:
    for name in JSON_COLUMNS:
        if name in frame.columns:
            frame[name] = _canonical_text(frame[name])
    for name in _DATETIME_COLUMNS:
        if name in frame.columns:
            frame[name] = pd.to_datetime(frame[name], utc=True)
    for name in _BOOL_COLUMNS:
        if name in frame.columns:
            frame[name] = frame[name].astype(bool)
    if "run_order" in names:
        frame["run_order"] = frame["run_id"].map(orders).astype("int64")
    return frame[list(names)] if list(frame.columns) != list(names) else frame


def _canonical_text(values: pd.Series) -> list[str]:
    """canonical_json of each stored JSON text (a driver may hand back decoded objects instead);
    each distinct text is decoded once."""
    seen: dict[str, str] = {}
    out = []
    for value in values:
        if isinstance(value, str):
            text = seen.get(value)
            if text is None:
                text = seen[value] = canonical_json(json.loads(value))
            out.append(text)
        else:
            out.append(canonical_json(value))
    return out


def case_history(url: Db, case_key: str, device_fingerprint: str | None = None) -> pd.DataFrame:
    """Every result of one case (on one device fingerprint when given), ordered by run."""
    frame = results(url, case_key=case_key, device=device_fingerprint)
    if device_fingerprint is not None:
        frame = frame[frame["device_fingerprint"] == device_fingerprint]
    return frame.sort_values(["run_order", "device_fingerprint", "device_uuid"], kind="stable").reset_index(drop=True)


def run_ids(url: Db) -> list[str]:
    """Every run_id, in run order (by started_at, then run_id)."""
    return list(_fetch_all_scalars(url, select(models.Run.run_id).order_by(models.Run.started_at, models.Run.run_id)))


def series_parts(per_device: bool) -> tuple[str, ...]:
    """The columns that name a series within its case (db.series_facts): by model the device
    fingerprint; by device the parts of its device key and the tool that measured it."""
    return series_facts.series_parts(per_device)


def series_summary(url: Db, *, per_device: bool = False) -> pd.DataFrame:
    """One row per series (case_key and the series' parts, `series_parts(per_device)`) that has any
    result: `n_ok_runs`, the runs in which it has an ok result with a positive median, and
    `first_ok_run`, the earliest of those runs in run order (None without one). No row per result
    is read (db.series_state.read_facts: on PostgreSQL the state kept between nights)."""
    kind = FactKind.SUMMARY_BY_DEVICE if per_device else FactKind.SUMMARY_BY_MODEL
    rows, run_starts = read_facts(url, kind)
    by_start = _runs_by_start(run_starts)
    # runs that started at the same instant: the earliest of them in run order that holds an ok result
    tied = sorted({row.first_ok_start for row in rows
                   if row.first_ok_start is not None and len(by_start[row.first_ok_start]) > 1})
    ok_in_tied: set[tuple[str | None, ...]] = set()
    if tied:
        with _connect(url) as engine, engine.connect() as conn:
            for started in tied:
                ok_in_tied |= series_facts.ok_runs_started_at(conn, per_device, started)
    out = []
    for row in rows:
        first = None
        if row.first_ok_start is not None:
            candidates = by_start[row.first_ok_start]
            first = candidates[0] if len(candidates) == 1 else next(
                run for run in candidates if (row.case_key, *row.key, run) in ok_in_tied)
        out.append((row.case_key, *row.key, row.n_ok_runs, first))
    return pd.DataFrame(out, columns=["case_key", *series_parts(per_device), "n_ok_runs", "first_ok_run"])


def _runs_by_start(run_starts: Iterable[tuple[str, datetime]]) -> dict[datetime | None, list[str]]:
    """Run ids by their start, each list in run order."""
    by_start: dict[datetime | None, list[str]] = {}
    for run_id_, started in run_starts:
        by_start.setdefault(started, []).append(run_id_)
    return by_start


def series_method_spans(url: Db, *, per_device: bool = False) -> pd.DataFrame:
    """One row per series (case_key and `series_parts(per_device)`) and way of measuring it
    (flush_method, pace, both recorded) that has an ok result with a positive median: the start
    times of the earliest and of the newest run holding one (`first_ok_start`, `last_ok_start`), and
    `first_ok_run`, that earliest run (None when another run started at the same instant: run
    order alone does not tell which came first among their ok results). Results that do not record
    their way (stored before the columns existed) are left out: they belong to whichever way
    follows them. No row per result is read (as series_summary)."""
    return _spans(url, FactKind.METHODS_BY_DEVICE if per_device else FactKind.METHODS_BY_MODEL)


def series_fingerprint_spans(url: Db) -> pd.DataFrame:
    """series_method_spans by device, with the device fingerprint as the way: where each environment
    of a device's series (a driver, CUDA or torch change) starts and ends among its ok results."""
    return _spans(url, FactKind.ENVIRONMENTS)


def _spans(url: Db, kind: FactKind) -> pd.DataFrame:
    rows, run_starts = read_facts(url, kind)
    by_start = _runs_by_start(run_starts)

    def run_of(started: datetime | None) -> str | None:
        """The run that started at `started`, where no other run started with it."""
        runs = by_start.get(started, [])
        return runs[0] if len(runs) == 1 else None

    out = [(row.case_key, *row.key, row.first_ok_start, row.last_ok_start,
            run_of(row.first_ok_start)) for row in rows]
    names = ["case_key", *series_facts.SHAPES[kind].key_names]
    return pd.DataFrame(out, columns=[*names, "first_ok_start", "last_ok_start", "first_ok_run"])


def run_devices(url: Db) -> pd.DataFrame:
    """Every (run_id, device_key) a run recorded a device under (run_environments): which devices
    each run measured, without reading a result."""
    r, re_ = models.Run, models.RunEnvironment
    rows = _fetch_all(url, select(r.run_id, re_.device_key).distinct().select_from(re_).join(r, r.id == re_.run_id))
    return pd.DataFrame([tuple(row) for row in rows], columns=["run_id", "device_key"])


def device_hosts(url: Db, run_ids: Sequence[str]) -> dict[str, str]:
    """Per device UUID measured in `run_ids`, its host in the newest of them: the host its
    environment row of that run names (a run of several nodes records each node's devices), else
    the run's host."""
    r, re_ = models.Run, models.RunEnvironment
    query = (select(re_.device_uuid, re_.info, r.host).select_from(re_).join(r, r.id == re_.run_id)
             .where(re_.device_uuid.is_not(None)).order_by(r.started_at, r.run_id))
    out: dict[str, str] = {}  # `run_ids` come in run order: a newer run's host is written last
    for i in range(0, len(run_ids), 5_000):
        for uuid, info, host in _fetch_all(url, query.where(r.run_id.in_(list(run_ids[i:i + 5_000])))):
            named = info.get("host") if isinstance(info, dict) else None
            out[str(uuid)] = str(named or host)
    return out


def result_estimate(url: Db) -> int:
    """About how many results the database holds, at once: on PostgreSQL the larger of the planner's
    estimate (ANALYZE's) and the statistics' live rows (kept as rows are written; a count where
    neither is known yet), on SQLite a count."""
    m = models.Measurement
    with _connect(url) as engine, engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            estimate = conn.execute(text(
                "SELECT greatest(c.reltuples, coalesce(s.n_live_tup, 0)) FROM pg_class c LEFT JOIN "
                "pg_stat_user_tables s ON s.relid = c.oid WHERE c.oid = 'measurements'::regclass")).scalar()
            if estimate is not None and estimate > 0:
                return int(estimate)
        return int(conn.execute(select(func.count()).select_from(m)).scalar_one())


def result_devices(url: Db) -> pd.DataFrame:
    """device_name, device_fingerprint and device_kind of every environment that has a result."""
    e, m = models.Environment, models.Measurement
    query = (select(e.device_name, e.device_fingerprint, e.device_kind)
             .where(select(m.id).where(m.environment_id == e.id).exists())
             .order_by(e.device_name, e.device_fingerprint))
    return pd.DataFrame([tuple(row) for row in _fetch_all(url, query)],
                        columns=["device_name", "device_fingerprint", "device_kind"])


def runs(url: Db) -> pd.DataFrame:
    """One row per run, in run order, with counts of its measurements and shards."""
    r, m, s = models.Run, models.Measurement, models.RunShard
    n_measurements = select(func.count()).where(m.run_id == r.id).scalar_subquery()
    n_ok = select(func.count()).where(m.run_id == r.id, m.status == ResultStatus.OK).scalar_subquery()
    n_shards = select(func.max(s.shard_count)).where(s.run_id == r.id).scalar_subquery()
    n_shards_finished = select(func.count()).where(s.run_id == r.id, s.status != RunStatus.RUNNING).scalar_subquery()
    counts = (n_measurements.label("n_measurements"), n_ok.label("n_ok"), n_shards.label("n_shards"),
              n_shards_finished.label("n_shards_finished"))
    query = select(*(getattr(r, name) for name in RUN_FRAME_COLUMNS), *counts).order_by(r.started_at, r.run_id)
    rows = _fetch_all(url, query)
    columns = [*RUN_FRAME_COLUMNS, *(c.name for c in counts)]
    frame = pd.DataFrame([tuple(row) for row in rows], columns=columns)
    frame.insert(1, "run_order", pd.Series(range(1, len(frame) + 1), dtype="int64"))
    for name in ("started_at", "finished_at"):
        frame[name] = pd.to_datetime(frame[name], utc=True)
    frame["n_shards"] = frame["n_shards"].fillna(0).astype("int64")
    return frame


def result_counts(url: Db) -> pd.DataFrame:
    """How many results each run has, per device, op and status: one grouped query, so that a
    report can choose which runs to read (and list every run) without reading the results.

    Columns: run_id, run_order, started_at, host, suite, git_commit, device_name, device_fingerprint,
    op, family, status, n."""
    r, c, e, m = models.Run, models.Case, models.Environment, models.Measurement
    keys = (r.run_id, e.device_name, e.device_fingerprint, c.op, c.family, m.status)
    query = (select(*keys, func.count().label("n")).select_from(m)
             .join(r, r.id == m.run_id).join(c, c.id == m.case_id).join(e, e.id == m.environment_id)
             .group_by(*keys))
    with _connect(url) as engine, engine.connect() as conn:
        orders = run_orders(conn)
        meta = {row[0]: tuple(row[1:]) for row in conn.execute(
            select(r.run_id, r.started_at, r.host, r.suite, r.git_commit))}
        rows = conn.execute(query).all()
    names = ["run_id", "device_name", "device_fingerprint", "op", "family", "status", "n"]
    frame = pd.DataFrame([tuple(row) for row in rows], columns=names)
    frame.insert(1, "run_order", frame["run_id"].map(orders).astype("int64"))
    for i, name in enumerate(("started_at", "host", "suite", "git_commit")):
        frame.insert(2 + i, name, frame["run_id"].map(lambda run, i=i: meta[run][i]))
    frame["started_at"] = pd.to_datetime(frame["started_at"], utc=True)
    return frame.sort_values(["run_order", "device_name", "op", "status"], kind="stable").reset_index(drop=True)


def environments(url: Db) -> pd.DataFrame:
    """One row per device fingerprint, with its identity (JSON) and how many runs used it."""
    e, re_ = models.Environment, models.RunEnvironment
    n_runs = select(func.count(func.distinct(re_.run_id))).where(re_.environment_id == e.id).scalar_subquery()
    query = select(*(getattr(e, name) for name in ENVIRONMENT_FRAME_COLUMNS), n_runs.label("n_runs")).order_by(
        e.first_seen_at, e.device_fingerprint)
    rows = _fetch_all(url, query)
    frame = pd.DataFrame([tuple(row) for row in rows], columns=[*ENVIRONMENT_FRAME_COLUMNS, "n_runs"])
    frame["identity"] = [canonical_json(v) for v in frame["identity"]]
    frame["first_seen_at"] = pd.to_datetime(frame["first_seen_at"], utc=True)
    return frame


def _as_list(value: str | Sequence[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)
