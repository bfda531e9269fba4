"""A case made ready to time exactly as a run makes it: the skip checks, the inputs, the first call
and its check against the float64 reference, then the timing engine with the case's settings and the
worker's flush buffer. The worker (worker.py), the cross-check and the counters pass all prepare a
case here, so that each times the same callable a run times.
"""
from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rooflab.record import TimingMethod
from rooflab.runners.engine import timing  # timing.measure looked up at each call: tests replace it
from rooflab.runners.engine.flush import make_flusher
from rooflab.runners.machine.cpuinfo import default_cpu_threads
from rooflab.runners.orchestration.messages import CaseOutcome, CaseRequest
from rooflab.suite.case import Case, canonical_params
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops.base import Op, Prepared, case_skip_reason, format_bytes
from rooflab.suite.ops.registry import get_op
from rooflab.suite.timing import TimingSettings
from rooflab.vocab import CacheMode, ResultStatus, SampleKind, TimingMode

if TYPE_CHECKING:  # the engine loads when a case is timed
    from rooflab.runners.engine.flush import CpuFlusher, CudaFlusher
    from rooflab.runners.engine.timing import TimingResult


def case_seed(base_seed: int, case_key: str) -> int:
    """A per-case seed: deterministic in (base seed, case key), independent of the case's position."""
    digest = hashlib.sha256(f"{base_seed}:{case_key}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFF_FFFF


def _available_memory_bytes(device: DeviceInfo) -> int | None:
    """Free memory on the device now, or None. CUDA: the driver's free count plus what torch's
    caching allocator holds without using it (the worker does not empty that cache after every
    case); CPU: MemAvailable."""
    if device.is_cuda:
        import torch

        dev = torch.device(device.torch_device)
        free, _total = torch.cuda.mem_get_info(dev)
        cached = torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
        return int(free) + max(0, int(cached))
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def generic_skip_reason(op: Op, case: Case, device: DeviceInfo) -> str | None:
    """suite.ops.base.case_skip_reason, then what only a running worker can see: the memory free now."""
    reason = case_skip_reason(op, case, device)
    if reason:
        return reason
    need = int(op.memory_bytes(op.resolved_params(case.params), case.dtype))
    free = _available_memory_bytes(device)
    if free is not None and need > free:
        return f"would not fit: needs {format_bytes(need)}, only {format_bytes(free)} free on {device.torch_device}"
    return None


def synchronize(device: DeviceInfo, extra_sync: Callable[[], None] | None) -> None:
    if extra_sync is not None:
        extra_sync()
    if device.is_cuda:
        import torch

        torch.cuda.synchronize(torch.device(device.torch_device))


# check verdicts of this worker, by check_key: None (correct) or the message
_CHECK_VERDICTS: dict[str, str | None] = {}


def check_key(case: Case) -> str:
    """What decides a check's verdict: the op, backend, dtype and params, not the cache or timing
    mode (the cases of one shape in cold/hot and launch/graph run the same code on inputs of the
    same shape and distribution)."""
    return f"{case.op}.v{case.op_version}:{case.backend}:{case.dtype}:{canonical_params(case.params)}"


class Laps:
    """Host wall time of a case's phases in the worker (PHASES), ms."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self._mark = time.perf_counter()

    def restart(self) -> None:
        self._mark = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.phases[name] = (now - self._mark) * 1e3
        self._mark = now


@dataclass
class ReadyCase:
    """A case prepared on its device, its first call checked against the reference: ready to time."""

    prepared: Prepared
    settings: TimingSettings  # the case's settings with the overrides applied
    first_call_ms: float
    cpu_threads: int | None = None  # intra-op threads set for a CPU case
    sample_kind: SampleKind = SampleKind.DEVICE_TIME  # what one sample of the op is
    check_cached: bool = False  # the check verdict came from an earlier case with the same check_key


def ready_case(request: CaseRequest, device: DeviceInfo, started: float,
               laps: Laps | None = None) -> ReadyCase | CaseOutcome:
    """Skip checks, prepare, first call + correctness check: everything `run_case` does before it
    times. A skipped or incorrect case comes back as its CaseOutcome; exceptions propagate.

    The float64 check runs once per check_key in a worker: a later case with the same key (another
    cache or timing mode) makes and times its first call but takes the verdict of the first."""
    laps = laps if laps is not None else Laps()
    case = request.case
    key = case.case_key
    op = get_op(case.op)
    reason = generic_skip_reason(op, case, device)
    if reason:
        return CaseOutcome(key, ResultStatus.SKIPPED, reason, time.perf_counter() - started)
    settings = case.timing.override(dict(request.timing_overrides))
    cpu_threads = apply_cpu_threads(device, request.cpu_threads)
    laps.restart()
    prepared = op.prepare(case, device, case_seed(request.seed, key))
    if case.timing_mode == TimingMode.GRAPH and not prepared.graph_safe:
        # known only once the op is prepared (e.g. cupy's matmul); a combination the op does
        # not support is skipped, as an unsupported dtype or backend is
        reason = f"{op.name} with the {case.backend} backend cannot be captured in a CUDA graph (timing mode graph)"
        return CaseOutcome(key, ResultStatus.SKIPPED, reason, time.perf_counter() - started)
    synchronize(device, prepared.sync)
    laps.lap("prepare")
    t0 = time.perf_counter_ns()
    output = prepared.fn()
    synchronize(device, prepared.sync)
    first_call_ms = (time.perf_counter_ns() - t0) / 1e6
    laps.lap("first_call")
    verdict_key = check_key(case)
    check_cached = verdict_key in _CHECK_VERDICTS
    if check_cached:
        problem = _CHECK_VERDICTS[verdict_key]
    else:
        problem = _CHECK_VERDICTS[verdict_key] = prepared.check(output)
    output = None
    laps.lap("check")
    if problem:
        return CaseOutcome(
            key, ResultStatus.INCORRECT, problem, time.perf_counter() - started,
            method=TimingMethod(cache=case.cache, timing_mode=case.timing_mode, first_call_ms=first_call_ms),
            phases_ms=dict(laps.phases), check_cached=check_cached,
        )
    return ReadyCase(prepared, settings, first_call_ms, cpu_threads, op.sample_kind, check_cached)


def time_ready(ready: ReadyCase, case: Case, device: DeviceInfo) -> TimingResult:
    """Time a ready case with the engine, as `run_case` does (a cold case uses the worker's flusher).

    The first call was made and timed by `ready_case`: the engine does not make another."""
    prepared = ready.prepared
    return timing.measure(
        prepared.fn,
        device=device,
        settings=ready.settings,
        cache=case.cache,
        timing_mode=case.timing_mode,
        sync=prepared.sync,
        graph_safe=prepared.graph_safe,
        flusher=shared_flusher(device, ready.settings.flush_method) if case.cache == CacheMode.COLD else None,
        sample_kind=ready.sample_kind,
        first_call_ms=ready.first_call_ms,
    )


def apply_cpu_threads(device: DeviceInfo, wanted: int | None) -> int | None:
    """Set torch's intra-op threads for a CPU case (`wanted`, else one per physical core) and
    return the count; None on a GPU, where the host threads are not what is measured."""
    if device.is_cuda:
        return None
    import torch

    threads = wanted or default_cpu_threads()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


_FLUSHERS: dict[str, CpuFlusher | CudaFlusher] = {}


def shared_flusher(device: DeviceInfo, method: str) -> CpuFlusher | CudaFlusher:
    """One flush buffer per worker and device, reused by every cold case, swept by `method`."""
    flusher = _FLUSHERS.get(device.torch_device)
    if flusher is None:
        flusher = _FLUSHERS[device.torch_device] = make_flusher(device, method)
    return flusher.using(method)
