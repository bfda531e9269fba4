"""Hardware-counter readings: one row per case, device and counters run, beside the op's model.

`add_counters` writes one row in one transaction (nothing when the run already holds it);
`checked_run` finds the measurement a reading checks (the newest ok measurement of the same case,
cache mode, timing mode and device); `counters_frame` reads the rows back with the comparison
against the model, which `check_model` computes: the one place where model / measured ratios, the
10 % rule and the likeliest reason of a difference are decided (`rooflab counters`, the report and
the diagnosis all read them from here).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pandas as pd
from sqlalchemy import Connection, select
from sqlalchemy.orm import aliased

from rooflab.db import models
from rooflab.db.dialect import insert_ignore
from rooflab.db.errors import DatabaseInputError
from rooflab.db.handle import Db, reading
from rooflab.db.measurement_columns import device_key
from rooflab.db.store import ResultStore, require_aware, upsert_case
from rooflab.vocab import CHECK_STATUSES, BytesReason, ResultStatus, allowed

# |measured / model - 1| above this: the counters contradict the model
MODEL_TOLERANCE = 0.10


REASON_TEXT = {
    BytesReason.EXTRA_TRAFFIC: "more DRAM traffic than the minimum: intermediates written and read back, or inputs "
                               "read more than once (what fusion or a better kernel would remove)",
    BytesReason.SERVED_FROM_L2: "less DRAM traffic than the minimum: part of the data was served from or left in "
                                "the L2 (a hot case's inputs, data re-read within the call, output still dirty in the "
                                "L2 when the kernel ended), so not all of it was cold DRAM traffic",
}


@dataclass(frozen=True)
class CounterRecord:
    run_id: str  # the counters run
    case: Any  # suite.case.Case or rooflab.record.CaseRecord
    device_fingerprint: str
    device_uuid: str | None
    cache: str
    timing_mode: str
    status: str  # one of CHECK_STATUSES
    measured_at: datetime
    model_flops: int
    model_bytes: int
    checked_run_id: str | None = None  # the run of the measurement this reading checks
    error: str | None = None
    ncu_version: str | None = None
    metrics: tuple[str, ...] = ()  # the metric names asked of ncu, in order
    missing_metrics: tuple[str, ...] = ()  # asked for, not reported
    metric_values: Mapping[str, float] = field(default_factory=dict)  # metric -> sum over the kernels, base units
    kernels: int | None = None
    kernel_ms: float | None = None
    dram_read_bytes: int | None = None
    dram_write_bytes: int | None = None
    l2_traffic_bytes: int | None = None
    fp64_flops: int | None = None
    fp32_flops: int | None = None
    fp16_flops: int | None = None
    tensor_instructions: int | None = None


def add_counters(store: ResultStore, r: CounterRecord) -> bool:
    """Store one reading; False (writing nothing) when the run already has it. The run and the
    device must have been stored first (`start_run`, `add_environment`)."""
    if r.status not in CHECK_STATUSES:
        raise DatabaseInputError(f"invalid counters status {r.status!r}; allowed: {allowed(CHECK_STATUSES)}")
    require_aware("measured_at", r.measured_at)

    def body(conn: Connection) -> bool:
        run_pk = _run_pk(conn, r.run_id)
        if run_pk is None:
            raise DatabaseInputError(f"run {r.run_id!r} is not in the database: call start_run first")
        checked_pk = _run_pk(conn, r.checked_run_id) if r.checked_run_id else None
        env_pk = conn.scalar(
            select(models.Environment.id).where(models.Environment.device_fingerprint == r.device_fingerprint)
        )
        if env_pk is None:
            raise DatabaseInputError(f"device {r.device_fingerprint!r} is not in the database: "
                                     "call add_environment first")
        values = {name: getattr(r, name) for name in _COUNT_COLUMNS}
        new_id = conn.scalar(
            insert_ignore(conn, models.CounterReading.__table__)
            .values(
                run_id=run_pk, case_id=upsert_case(conn, r.case), environment_id=env_pk,
                device_key=device_key(r.device_uuid, r.device_fingerprint), cache=r.cache,
                timing_mode=r.timing_mode, checked_run_id=checked_pk, status=r.status, error=r.error,
                measured_at=r.measured_at, ncu_version=r.ncu_version, metrics=list(r.metrics),
                missing_metrics=list(r.missing_metrics),
                metric_values={str(k): float(v) for k, v in r.metric_values.items()},
                model_flops=int(r.model_flops), model_bytes=int(r.model_bytes), **values,
            )
            .returning(models.CounterReading.id)
        )
        return new_id is not None

    return store.transaction(body)


_COUNT_COLUMNS = ("kernels", "kernel_ms", "dram_read_bytes", "dram_write_bytes", "l2_traffic_bytes", "fp64_flops",
                  "fp32_flops", "fp16_flops", "tensor_instructions")


def _run_pk(conn: Connection, run_id: str | None) -> int | None:
    return conn.scalar(select(models.Run.id).where(models.Run.run_id == run_id)) if run_id else None


def checked_run(url: Db, case_key: str, cache: str, timing_mode: str, device: str) -> str | None:
    """The run id of the newest ok measurement of this case, cache mode and timing mode on the device
    `device` (its device_key: UUID, or fingerprint without one), or None."""
    m, r, c = models.Measurement, models.Run, models.Case
    query = (
        select(r.run_id).join(m, m.run_id == r.id).join(c, c.id == m.case_id)
        .where(c.case_key == case_key, m.cache == cache, m.timing_mode == timing_mode, m.device_key == device,
               m.status == ResultStatus.OK)
        .order_by(r.id.desc()).limit(1)
    )
    with reading(url) as engine, engine.connect() as conn:
        found = conn.scalar(query)
    return None if found is None else str(found)


# ---------------------------------------------------------------- the model against the counters


@dataclass(frozen=True)
class ModelCheck:
    """The op's model against what the counters measured (None where a figure is missing)."""

    dram_bytes: int | None  # read + write
    measured_flops: int | None  # FFMA·2 + FADD + FMUL over the three precisions (tensor pipe not included)
    bytes_ratio: float | None  # model_bytes / dram_bytes
    flops_ratio: float | None  # model_flops / measured_flops; None when the tensor pipe did work
    bytes_differ: bool  # |dram / model - 1| > MODEL_TOLERANCE
    flops_differ: bool
    excess_bytes: int | None  # dram_bytes - model_bytes (negative: fewer)
    reason: BytesReason | None  # the likeliest reason of a bytes difference

    @property
    def reason_text(self) -> str | None:
        return REASON_TEXT[self.reason] if self.reason else None


def _sum(values: Sequence[Any]) -> int | None:
    present = [int(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(present) if len(present) == len(values) else None


def _ratio(model: float, measured: int | None) -> float | None:
    return None if not measured else float(model) / float(measured)


def _differs(model: float, measured: int | None) -> bool:
    if measured is None:
        return False
    if model <= 0:
        return measured > 0
    return abs(measured / model - 1.0) > MODEL_TOLERANCE


def check_model(*, model_bytes: int, model_flops: int, dram_read_bytes: int | None, dram_write_bytes: int | None,
                fp64_flops: int | None = None, fp32_flops: int | None = None, fp16_flops: int | None = None,
                tensor_instructions: int | None = None) -> ModelCheck:
    """The comparison of one reading with its model (see ModelCheck). A figure that a metric did not
    report stays None: a missing count is never read as zero."""
    dram = _sum([dram_read_bytes, dram_write_bytes])
    flops = _sum([fp64_flops, fp32_flops, fp16_flops])
    tensor = bool(tensor_instructions)
    bytes_differ = _differs(model_bytes, dram)
    reason = None
    if bytes_differ and dram is not None:
        reason = BytesReason.EXTRA_TRAFFIC if dram > model_bytes else BytesReason.SERVED_FROM_L2
    return ModelCheck(
        dram_bytes=dram, measured_flops=flops, bytes_ratio=_ratio(model_bytes, dram),
        flops_ratio=None if tensor else _ratio(model_flops, flops), bytes_differ=bytes_differ,
        flops_differ=False if tensor else _differs(model_flops, flops),
        excess_bytes=None if dram is None else dram - int(model_bytes), reason=reason,
    )


FRAME_COLUMNS: tuple[str, ...] = (
    "run_id", "checked_run_id", "device_name", "device_kind", "device_fingerprint", "device_key", "case_key", "op",
    "family", "backend", "dtype", "params", "cache", "timing_mode", "status", "error", "measured_at", "ncu_version",
    "metrics", "missing_metrics", "metric_values", "kernels", "kernel_ms", "dram_read_bytes", "dram_write_bytes",
    "l2_traffic_bytes", "fp64_flops", "fp32_flops", "fp16_flops", "tensor_instructions", "model_flops", "model_bytes",
)
CHECK_COLUMNS: tuple[str, ...] = (
    "dram_bytes", "measured_flops", "bytes_ratio", "flops_ratio", "bytes_differ", "flops_differ", "excess_bytes",
    "reason", "reason_text",
)


def with_model_check(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` (FRAME_COLUMNS) with CHECK_COLUMNS added, row by row from `check_model`."""
    checks = []
    for row in frame.itertuples(index=False):
        c = check_model(
            model_bytes=int(row.model_bytes), model_flops=int(row.model_flops),
            dram_read_bytes=_int(row.dram_read_bytes), dram_write_bytes=_int(row.dram_write_bytes),
            fp64_flops=_int(row.fp64_flops),
            fp32_flops=_int(row.fp32_flops), fp16_flops=_int(row.fp16_flops),
            tensor_instructions=_int(row.tensor_instructions),
        )
        checks.append((c.dram_bytes, c.measured_flops, c.bytes_ratio, c.flops_ratio, c.bytes_differ, c.flops_differ,
                       c.excess_bytes, c.reason.value if c.reason else None, c.reason_text))
    return pd.concat([frame.reset_index(drop=True),
                      pd.DataFrame(checks, columns=list(CHECK_COLUMNS), dtype=object)], axis=1)


def _int(value: Any) -> int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return None
    return int(value)


def counters_frame(url: Db, run_ids: Sequence[str] | None = None) -> pd.DataFrame:
    """Every reading (of the counters runs `run_ids` when given), FRAME_COLUMNS then CHECK_COLUMNS,
    in the order stored."""
    x, r, e, c = models.CounterReading, models.Run, models.Environment, models.Case
    checked = aliased(models.Run)
    query = (
        select(
            r.run_id, checked.run_id, e.device_name, e.device_kind, e.device_fingerprint, x.device_key, c.case_key,
            c.op, c.family, c.backend, c.dtype, c.params, x.cache, x.timing_mode, x.status, x.error, x.measured_at,
            x.ncu_version, x.metrics, x.missing_metrics, x.metric_values, x.kernels, x.kernel_ms, x.dram_read_bytes,
            x.dram_write_bytes, x.l2_traffic_bytes, x.fp64_flops, x.fp32_flops, x.fp16_flops, x.tensor_instructions,
            x.model_flops, x.model_bytes,
        )
        .join(r, r.id == x.run_id)
        .outerjoin(checked, checked.id == x.checked_run_id)
        .join(e, e.id == x.environment_id)
        .join(c, c.id == x.case_id)
        .order_by(x.id)
    )
    if run_ids:
        query = query.where(r.run_id.in_(list(run_ids)))
    with reading(url) as engine, engine.connect() as conn:
        rows = conn.execute(query).all()
    frame = pd.DataFrame([tuple(row) for row in rows], columns=list(FRAME_COLUMNS), dtype=object)
    return with_model_check(frame)
