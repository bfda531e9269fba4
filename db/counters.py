"""Hardware-counter readings: one row per case, device and counters run, beside the op's model.

`add_counters` writes one row in one transaction (nothing when the run already holds it);
`checked_run` finds the measurement a reading checks (the newest ok measurement of the same case,
cache mode, timing mode and device); `counters_frame` reads the rows back with the comparison
against the model, which `check_model` computes: the one place where model / measured ratios, the
10 % rule (and what it allows for: output written back after a cold kernel ended), which FLOPs the
counters can count (not the tensor cores') and the likeliest reason of a difference are decided
(`rooflab counters`, the report and the diagnosis all read them from here).
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
from rooflab.record import CaseRecord
from rooflab.vocab import CHECK_STATUSES, BytesReason, CacheMode, ResultStatus, allowed, on_tensor_cores

# |measured / model - 1| above this: the counters contradict the model (the total, for a reading
# without the model's split)
MODEL_TOLERANCE = 0.10
# each side on its own (docs/counters.md): reads are counted from a clean cache and match a model to
# well within this; writes also carry the write-back caught by the sweep less the sweep's own writes
READ_TOLERANCE = 0.05
WRITE_TOLERANCE = 0.10
# a side differs only by more than this many bytes as well (2048 sectors of 32 B): what a kernel writes
# besides its output (a reduction's partial sums, a scalar, a semaphore) is not a contradiction
SIDE_SLACK_BYTES = 64 * 1024


REASON_TEXT = {
    BytesReason.EXTRA_TRAFFIC: "more DRAM traffic than the minimum: intermediates written and read back, or inputs "
                               "read more than once (what fusion or a better kernel would remove)",
    BytesReason.SERVED_FROM_L2: "less DRAM traffic than the minimum: part of the data was served from or left in "
                                "the L2 (a hot case's inputs, data re-read within the call, output still dirty in the "
                                "L2 when the kernel ended), so not all of it was cold DRAM traffic",
    BytesReason.FEWER_WRITES: "fewer DRAM writes than the model, the write-back caught inside the profiled range: "
                              "the model counts writes the call did not make",
}


@dataclass(frozen=True)
class CounterRecord:
    run_id: str  # the counters run
    case: CaseRecord  # as a run stores it (runners.orchestration.records.case_record)
    device_fingerprint: str
    device_uuid: str | None
    cache: str
    timing_mode: str
    status: str  # one of CHECK_STATUSES
    measured_at: datetime
    model_flops: int
    model_bytes: int
    model_bytes_read: int | None = None  # the model's split of model_bytes (None: the op has none)
    model_bytes_written: int | None = None
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
    # the write-back pass (runners.counters.writeback): the call's dirty lines that a read sweep after
    # it wrote back inside the profiled range (in dram_write_bytes), less what the sweep wrote on its own
    # (measured by a second sweep); None: no write-back pass (a reading stored before revision 0011)
    caught_write_back_bytes: int | None = None
    sweep_own_write_bytes: int | None = None


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
                model_flops=int(r.model_flops), model_bytes=int(r.model_bytes),
                model_bytes_read=r.model_bytes_read, model_bytes_written=r.model_bytes_written, **values,
            )
            .returning(models.CounterReading.id)
        )
        return new_id is not None

    return store.transaction(body)


_COUNT_COLUMNS = ("kernels", "kernel_ms", "dram_read_bytes", "dram_write_bytes", "l2_traffic_bytes", "fp64_flops",
                  "fp32_flops", "fp16_flops", "tensor_instructions", "caught_write_back_bytes", "sweep_own_write_bytes")


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


WRITE_BACK_TEXT = ("fewer DRAM bytes than the model, by no more than the output an L2 can still hold dirty when a "
                   "kernel ends (written back after the kernel, outside what ncu measured): not a difference, and "
                   "no sign that the case was not cold")
TENSOR_FLOPS_TEXT = ("FLOPs not countable by these counters: the model's FLOPs run on the tensor cores, which ncu "
                     "counts in instructions, not FLOPs")
WRITES_NOT_JUDGED_TEXT = ("writes not judged: the reading has no write-back pass, so what was still dirty in the L2 "
                          "when the kernels ended is missing from its DRAM writes")


@dataclass(frozen=True)
class SideCheck:
    """One side (reads or writes) of the model against its DRAM counter; `judged` False: no verdict
    (the model has no split, the metric is missing, or the writes lack their write-back)."""

    judged: bool = False
    ratio: float | None = None  # model / measured
    differ: bool = False  # off by more than the side's tolerance and SIDE_SLACK_BYTES
    reason: BytesReason | None = None


@dataclass(frozen=True)
class ModelCheck:
    """The op's model against what the counters measured (None where a figure is missing)."""

    dram_bytes: int | None  # read + write
    measured_flops: int | None  # FFMA·2 + FADD + FMUL over the three precisions (tensor pipe not included)
    bytes_ratio: float | None  # model_bytes / dram_bytes
    flops_ratio: float | None  # model_flops / measured_flops; None when the FLOPs are not countable
    # either side differs (check_model); without the model's split: |dram / model - 1| > MODEL_TOLERANCE,
    # less the write-back allowance
    bytes_differ: bool
    flops_differ: bool
    excess_bytes: int | None  # dram_bytes - model_bytes (negative: fewer)
    reason: BytesReason | None  # the likeliest reason of a bytes difference
    # False: the model's FLOPs run on the tensor cores (rooflab.vocab.on_tensor_cores), or the tensor pipe did
    # work: these counters cannot count them, so there is no FLOP comparison
    flops_countable: bool = True
    # a reading without the model's split or the write-back pass: a cold case's DRAM bytes fewer than the
    # model by no more than the output left dirty in the L2 when its kernels ended (written back outside
    # the measurement): that shortfall, else None
    write_back_bytes: int | None = None
    reads: SideCheck = SideCheck()  # model bytes read against dram__bytes_read.sum
    writes: SideCheck = SideCheck()  # model bytes written against dram__bytes_write.sum

    @property
    def reason_text(self) -> str | None:
        return REASON_TEXT[self.reason] if self.reason else None

    @property
    def note_text(self) -> str | None:
        """What the comparison leaves out and why (the write-back, tensor-core FLOPs), or None."""
        notes = ([WRITE_BACK_TEXT] if self.write_back_bytes is not None else []) + (
            [WRITES_NOT_JUDGED_TEXT] if self.reads.judged and not self.writes.judged else []) + (
            [] if self.flops_countable else [TENSOR_FLOPS_TEXT])
        return "; ".join(notes) or None


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


def _side(model: int | None, measured: int | None, tolerance: float, fewer: BytesReason,
          judged: bool = True) -> SideCheck:
    """One side: judged when the model and the count are both there (and `judged`)."""
    if model is None or measured is None or not judged:
        return SideCheck()
    differ = abs(measured - model) > max(tolerance * model, SIDE_SLACK_BYTES)
    reason = (BytesReason.EXTRA_TRAFFIC if measured > model else fewer) if differ else None
    return SideCheck(True, _ratio(model, measured), differ, reason)


def _total_check(model_bytes: int, dram: int | None, cache: str | None, l2_bytes: int | None,
                 kernels: int | None) -> tuple[bool, int | None]:
    """(differ, write-back allowance) of the total, for a reading without the model's split: |DRAM /
    model - 1| > MODEL_TOLERANCE, less what a cold case's L2 could still hold dirty per kernel."""
    differ = _differs(model_bytes, dram)
    if differ and dram is not None and dram < model_bytes and cache == CacheMode.COLD and l2_bytes:
        shortfall = int(model_bytes) - dram
        if shortfall <= int(l2_bytes) * max(int(kernels or 1), 1):
            return False, shortfall
    return differ, None


def check_model(*, model_bytes: int, model_flops: int, dram_read_bytes: int | None, dram_write_bytes: int | None,
                fp64_flops: int | None = None, fp32_flops: int | None = None, fp16_flops: int | None = None,
                tensor_instructions: int | None = None, family: str | None = None, dtype: str | None = None,
                cache: str | None = None, l2_bytes: int | None = None, kernels: int | None = None,
                model_bytes_read: int | None = None, model_bytes_written: int | None = None,
                caught_write_back_bytes: int | None = None) -> ModelCheck:
    """The comparison of one reading with its model (see ModelCheck). A figure that a metric did not
    report stays None: a missing count is never read as zero.

    - With the model's split (`model_bytes_read`, `model_bytes_written`), each side is held against
      its own counter and tolerance: reads against `dram_read_bytes` (READ_TOLERANCE), writes against
      `dram_write_bytes` (WRITE_TOLERANCE), each also by more than SIDE_SLACK_BYTES, and each flagged
      on its own; the writes only when the reading caught the write-back inside the profiled range
      (`caught_write_back_bytes` not None: runners.counters.writeback). Bytes differ when either side does.
    - Without the split (a reading stored before revision 0011), the total is held against read +
      written: bytes differ when |DRAM / model - 1| > MODEL_TOLERANCE, with one allowance: a cold
      case (`cache`) whose DRAM bytes fall short of the model by no more than one L2 (`l2_bytes`) per
      kernel (`kernels`) is not judged different (`write_back_bytes`), since output still dirty when
      a kernel ends was written back outside that measurement. A hot case's shortfall stays
      served_from_l2 (its inputs come from the L2 by design).
    - FLOPs are compared only where the counters can count them: not for a case whose model FLOPs
      run on the tensor cores (`family`, `dtype`: rooflab.vocab.on_tensor_cores, decided from the
      case, since the tensor-pipe counter may read 0 for Hopper's warpgroup MMA), nor where the
      tensor pipe did work (`tensor_instructions`). A float32 GEMM without TF32 runs on FFMA and is
      compared."""
    dram = _sum([dram_read_bytes, dram_write_bytes])
    flops = _sum([fp64_flops, fp32_flops, fp16_flops])
    countable = not (on_tensor_cores(family, dtype) or bool(tensor_instructions))
    reads = _side(model_bytes_read, dram_read_bytes, READ_TOLERANCE, BytesReason.SERVED_FROM_L2)
    writes = _side(model_bytes_written, dram_write_bytes, WRITE_TOLERANCE, BytesReason.FEWER_WRITES,
                   judged=caught_write_back_bytes is not None)
    write_back = None
    if reads.judged:
        bytes_differ = reads.differ or writes.differ
        reason = reads.reason or writes.reason
    else:
        bytes_differ, write_back = _total_check(model_bytes, dram, cache, l2_bytes, kernels)
        reason = None
        if bytes_differ and dram is not None:
            reason = BytesReason.EXTRA_TRAFFIC if dram > model_bytes else BytesReason.SERVED_FROM_L2
    return ModelCheck(
        dram_bytes=dram, measured_flops=flops, bytes_ratio=_ratio(model_bytes, dram),
        flops_ratio=_ratio(model_flops, flops) if countable else None, bytes_differ=bytes_differ,
        flops_differ=_differs(model_flops, flops) if countable else False,
        excess_bytes=None if dram is None else dram - int(model_bytes), reason=reason,
        flops_countable=countable, write_back_bytes=write_back, reads=reads, writes=writes,
    )


def check_reading(r: CounterRecord, *, l2_bytes: int | None) -> ModelCheck:
    """check_model on a CounterRecord, on a device whose L2 holds `l2_bytes`."""
    return check_model(model_bytes=r.model_bytes, model_flops=r.model_flops, dram_read_bytes=r.dram_read_bytes,
                       dram_write_bytes=r.dram_write_bytes, fp64_flops=r.fp64_flops, fp32_flops=r.fp32_flops,
                       fp16_flops=r.fp16_flops, tensor_instructions=r.tensor_instructions,
                       family=getattr(r.case, "family", None), dtype=getattr(r.case, "dtype", None), cache=r.cache,
                       l2_bytes=l2_bytes, kernels=r.kernels, model_bytes_read=r.model_bytes_read,
                       model_bytes_written=r.model_bytes_written, caught_write_back_bytes=r.caught_write_back_bytes)


FRAME_COLUMNS: tuple[str, ...] = (
    "run_id", "checked_run_id", "device_name", "device_kind", "device_fingerprint", "device_key", "case_key", "op",
    "family", "backend", "dtype", "params", "cache", "timing_mode", "status", "error", "measured_at", "ncu_version",
    "metrics", "missing_metrics", "metric_values", "kernels", "kernel_ms", "dram_read_bytes", "dram_write_bytes",
    "l2_traffic_bytes", "fp64_flops", "fp32_flops", "fp16_flops", "tensor_instructions", "model_flops", "model_bytes",
    "l2_bytes", "model_bytes_read", "model_bytes_written", "caught_write_back_bytes", "sweep_own_write_bytes",
)
CHECK_COLUMNS: tuple[str, ...] = (
    "dram_bytes", "measured_flops", "bytes_ratio", "flops_ratio", "bytes_differ", "flops_differ", "excess_bytes",
    "reason", "reason_text", "flops_countable", "write_back_bytes", "note_text",
    *(f"{side}_{name}" for side in ("read", "write") for name in ("judged", "ratio", "differ", "reason")),
)


def check_values(c: ModelCheck) -> tuple[object, ...]:
    """A ModelCheck as the values of CHECK_COLUMNS, in their order."""
    sides = tuple(v for side in (c.reads, c.writes)
                  for v in (side.judged, side.ratio, side.differ, side.reason.value if side.reason else None))
    return (c.dram_bytes, c.measured_flops, c.bytes_ratio, c.flops_ratio, c.bytes_differ, c.flops_differ,
            c.excess_bytes, c.reason.value if c.reason else None, c.reason_text, c.flops_countable,
            c.write_back_bytes, c.note_text, *sides)


def with_model_check(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` (FRAME_COLUMNS) with CHECK_COLUMNS added, row by row from `check_model`."""
    checks = []
    for row in frame.itertuples(index=False):
        c = check_model(
            model_bytes=int(row.model_bytes), model_flops=int(row.model_flops),
            dram_read_bytes=_int(row.dram_read_bytes), dram_write_bytes=_int(row.dram_write_bytes),
            fp64_flops=_int(row.fp64_flops),
            fp32_flops=_int(row.fp32_flops), fp16_flops=_int(row.fp16_flops),
            tensor_instructions=_int(row.tensor_instructions), family=row.family, dtype=row.dtype, cache=row.cache,
            l2_bytes=_int(row.l2_bytes), kernels=_int(row.kernels), model_bytes_read=_int(row.model_bytes_read),
            model_bytes_written=_int(row.model_bytes_written),
            caught_write_back_bytes=_int(row.caught_write_back_bytes),
        )
        checks.append(check_values(c))
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
            x.model_flops, x.model_bytes, e.l2_bytes, x.model_bytes_read, x.model_bytes_written,
            x.caught_write_back_bytes, x.sweep_own_write_bytes,
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
