"""The messages between the supervisor and a worker process: typed, picklable, frozen dataclasses
(nothing is a dict read back with `.get`):

    worker -> supervisor   ("ready", WorkerReady) | ("setup_error", str)
    supervisor -> worker   ("case", CaseRequest) | ("stop", None)
    worker -> supervisor   ("result", CaseOutcome)
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from rooflab.record import EnvironmentRecord, LayerProfileRecord, MachineObservation, Statistics, TimingMethod
from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.timing import TimingValue


@dataclass(frozen=True)
class WorkerReady:
    """What a freshly started worker reports: the device it is pinned to and its environment."""

    pid: int
    device: DeviceInfo
    environment: EnvironmentRecord


@dataclass(frozen=True)
class CaseRequest:
    case: Case
    seed: int  # base seed of the run; the case's own seed is derived from it and the case key
    timing_overrides: Mapping[str, TimingValue] = field(default_factory=dict)  # CLI overrides, non-None only
    cpu_threads: int | None = None  # intra-op threads of a CPU case; None: one per physical core


@dataclass(frozen=True)
class CaseOutcome:
    """One case as the worker measured it: the parts of the measurement record it fills (status,
    method, statistics, machine observation, raw samples, layer profile) and the worker's own
    bookkeeping. The supervisor adds the identity and the work model (records.build_record)."""

    case_key: str
    status: str  # ok | incorrect | failed | skipped, or crashed when the device context was lost
    error: str | None = None
    elapsed_s: float = 0.0  # wall time of the whole case inside the worker
    method: TimingMethod | None = None  # None: nothing was timed (the supervisor records the case's modes)
    stats: Statistics | None = None  # summary of samples_ms (status ok only)
    machine: MachineObservation = MachineObservation()
    samples_ms: tuple[float, ...] = ()
    layer_profile: LayerProfileRecord | None = None  # of an op made of parts (runners.engine.attribution)
    worker_unusable: bool = False  # the device context is broken: the worker exits after this case
    # host wall time of the case's phases in the worker, ms (PHASES; not stored, for overhead studies)
    phases_ms: Mapping[str, float] = field(default_factory=dict)
    check_cached: bool = False  # the check verdict came from an earlier case with the same inputs' shape


# prepare: inputs and callable; first_call: the worker's timed first call (the only one: the timing
# engine is told it was made); check: float64 check; timing_first_call: the timing engine's set-up
# before its warmup (the flusher, CUDA graph capture in graph mode); warmup; sampling
PHASES = ("prepare", "first_call", "check", "timing_first_call", "warmup", "sampling")


# what a parent sends down a worker's (or a rank's) pipe: a case to measure, or the order to stop
ToWorker = tuple[Literal["case"], CaseRequest] | tuple[Literal["stop"], None]
