"""From a worker's outcome to the measurement record: the identity and the op's work model added to
the parts the worker filled (rooflab/record.py). The supervisor, the collective phase and a
collective rank step build their records here.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from rooflab.record import CaseRecord, Identity, MeasurementRecord, TimingMethod, WorkModel
from rooflab.runners.orchestration.messages import CaseOutcome
from rooflab.runners.orchestration.worker import describe_exception
from rooflab.suite.case import Case
from rooflab.suite.ops.base import work_model
from rooflab.suite.ops.registry import get_op
from rooflab.vocab import ResultStatus


def op_work_model(case: Case) -> WorkModel:
    """The FLOPs and bytes (read and written apart, where the op splits them) of one call, from the
    op's pure functions."""
    op = get_op(case.op)
    return work_model(op, op.resolved_params(case.params), case.dtype)


def case_record(case: Case) -> CaseRecord:
    """What the database keeps of a case (its identity across runs): its params as its key reads
    them, a collective's mode among them (`mode: isolated`, as stored before the mode was a field)."""
    return CaseRecord(case_key=case.case_key, op=case.op, op_version=case.op_version, family=case.family,
                      backend=case.backend, dtype=case.dtype, params=case.key_params)


def build_record(
    case: Case,
    outcome: CaseOutcome,
    *,
    run_id: str,
    device_fingerprint: str,
    device_uuid: str | None,
    shard: str | None,
    work_model: Callable[[Case], WorkModel],
) -> MeasurementRecord:
    """The worker's outcome with the identity and the work model added; the work model is filled
    in whatever the status, and so is the case's collective mode (the one place a result gets it:
    every collective says which mode it was asked for, its `pace` what its samples did, none without
    samples). Only an ok result keeps its statistics, samples and profile."""
    try:
        work = work_model(case)
    except Exception as exc:  # noqa: BLE001 - an op whose model fails still gets its status stored
        work = WorkModel()
        outcome = _with_error(outcome, f"work model failed: {describe_exception(exc)}")
    ok = outcome.status == ResultStatus.OK
    return MeasurementRecord(
        identity=Identity(run_id=run_id, case=case_record(case), device_fingerprint=device_fingerprint,
                          device_uuid=device_uuid, shard=shard, measured_at=datetime.now(UTC)),
        status=outcome.status,
        error=outcome.error,
        method=replace(outcome.method or TimingMethod(cache=case.cache, timing_mode=case.timing_mode),
                       collective_mode=case.collective_mode),
        stats=outcome.stats if ok else None,
        machine=outcome.machine,
        work=work,
        samples_ms=tuple(outcome.samples_ms) if ok else (),
        layer_profile=outcome.layer_profile if ok else None,
    )


def _with_error(outcome: CaseOutcome, extra: str) -> CaseOutcome:
    error = f"{outcome.error}; {extra}" if outcome.error else extra
    return replace(outcome, error=error)
