"""Whole runs of measurement records into a database in one transaction (the peers' imports).

A runner that has every result of a run at once (an imported file) hands its run, devices and
measurements here instead of writing them one transaction per case through `ResultStore`: the rows
are made exactly as the store makes them (`measurement_row`, the samples packed, the `collectives`
row) and loaded by `db.load.load`, which keeps whatever the target already holds (runs by id, devices
by fingerprint, cases by key, results by run, case, modes and device), so loading the same runs again
adds nothing, and a failure leaves nothing of them behind.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rooflab.db import models
from rooflab.db.engine import retry_locked
from rooflab.db.errors import DatabaseInputError
from rooflab.db.handle import Database, as_database
from rooflab.db.load import AttachedRow, Batch, LoadCounts, load
from rooflab.db.measurement_columns import device_key, measurement_row
from rooflab.db.samples import pack
from rooflab.record import EnvironmentRecord, MeasurementRecord, RunRecord
from rooflab.vocab import ResultStatus, RunStatus, allowed


@dataclass
class RecordRun:
    """One run to load: its record, the devices its results ran on, its results."""

    run: RunRecord
    environments: Sequence[EnvironmentRecord]
    measurements: Sequence[MeasurementRecord]
    status: str = RunStatus.COMPLETE
    finished_at: datetime | None = None
    infos: dict[str, dict[str, object]] = field(default_factory=dict)  # fingerprint -> the run's device info


def _require_aware(name: str, value: datetime) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise DatabaseInputError(f"{name} {value.isoformat()} has no time zone")


def _row_of(table: Any, record: Any, **overrides: Any) -> dict[str, Any]:
    """The columns of `table` (a model) that `record` (a dataclass) holds under the same names, with
    `overrides`: the records' fields are the tables' columns (db/models.py), never listed again here."""
    names = {c.name for c in table.__table__.columns} - {"id"}
    row = {f.name: getattr(record, f.name) for f in dataclasses.fields(record) if f.name in names}
    return {**row, **overrides}


def _add_run(batch: Batch, item: RecordRun) -> None:
    run = item.run
    _require_aware("started_at", run.started_at)
    batch.runs[run.run_id] = _row_of(models.Run, run, finished_at=item.finished_at or run.started_at,
                                     status=item.status, git_dirty=bool(run.git_dirty))
    for env in item.environments:
        batch.environments.setdefault(env.device_fingerprint, _row_of(
            models.Environment, env, identity=dict(env.identity), memory_bytes=int(env.memory_bytes),
            l2_bytes=int(env.l2_bytes), sm_count=int(env.sm_count), first_seen_at=run.started_at))


def _add_measurement(batch: Batch, run: RecordRun, m: MeasurementRecord, infos: dict[str, dict[str, object]]) -> None:
    if m.status not in tuple(ResultStatus):
        raise DatabaseInputError(f"invalid status {m.status!r}; allowed: {allowed(ResultStatus)}")
    _require_aware("measured_at", m.identity.measured_at)
    fingerprint, case = m.identity.device_fingerprint, m.identity.case
    if fingerprint not in batch.environments:
        raise DatabaseInputError(f"device {fingerprint!r} of a result is not among the run's devices")
    key = device_key(m.identity.device_uuid, fingerprint)
    batch.run_environments.setdefault((run.run.run_id, fingerprint, key),
                                      {"device_uuid": m.identity.device_uuid, "info": infos.get(fingerprint, {})})
    batch.cases.setdefault(case.case_key, _row_of(models.Case, case, op_version=int(case.op_version),
                                                   params=dict(case.params)))
    row = measurement_row(m)
    samples = (len(m.samples_ms), pack(m.samples_ms)) if m.samples_ms else None
    batch.measurements.append((run.run.run_id, case.case_key, fingerprint, row, samples))
    if m.collective is not None:
        c = m.collective
        batch.collectives.append(AttachedRow(
            run_id=run.run.run_id, case_key=case.case_key, cache=m.method.cache, timing_mode=m.method.timing_mode,
            device_key=key, measured_at=m.identity.measured_at,
            row={"rank_medians_ms": [float(v) for v in c.rank_medians_ms],
                 "rank_devices": [str(v) for v in c.rank_devices], "comm_version": c.comm_version,
                 "comm_settings": {str(k): str(v) for k, v in dict(c.comm_settings).items()}}))


def batch_of(runs: Sequence[RecordRun]) -> Batch:
    """The rows of `runs` as db.load.load takes them."""
    batch = Batch()
    for item in runs:
        _add_run(batch, item)
        infos = {**{e.device_fingerprint: _jsonable(dict(e.info)) for e in item.environments}, **item.infos}
        for m in item.measurements:
            _add_measurement(batch, item, m, infos)
    return batch


def _jsonable(value: object) -> dict[str, object]:
    return dict(json.loads(json.dumps(value, default=str)))


def load_runs(url: str | Database, runs: Sequence[RecordRun]) -> LoadCounts:
    """Load `runs` into the database at `url` in one transaction (created at the schema head when new);
    what it already holds is kept and counted as present."""
    batch = batch_of(runs)
    database, owned = as_database(url)
    try:
        engine = database.writer()

        def body() -> LoadCounts:
            with engine.begin() as conn:
                return load(conn, batch)

        return retry_locked(body)
    finally:
        if owned:
            database.close()
