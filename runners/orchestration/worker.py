"""The worker process: measures cases one at a time for the supervisor.

The worker lives in its own process (multiprocessing `spawn`, which CUDA needs) so that a case that
kills its process (segfault, illegal memory access, `os._exit`) takes only itself down. It talks
to the supervisor over a `Pipe` with typed, picklable messages (frozen dataclasses, nothing read back
with `.get`):

    worker -> supervisor   ("ready", WorkerReady) | ("setup_error", str)
    supervisor -> worker   ("case", CaseRequest) | ("stop", None)
    worker -> supervisor   ("result", CaseOutcome)

The worker ignores SIGINT (the supervisor decides what an interrupt means) and exits on its own
when its supervisor disappears. It never touches the database: it returns data, the supervisor
builds and stores the records.
"""
from __future__ import annotations

import gc
import hashlib
import os
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rooflab.record import EnvironmentRecord, LayerProfileRecord, MachineObservation, Statistics, TimingMethod
from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops.base import case_skip_reason, format_bytes
from rooflab.vocab import CacheMode, DeviceKind, ResultStatus, TimingMode, device_kind_of


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
    timing_overrides: Mapping[str, Any] = field(default_factory=dict)  # CLI overrides, non-None only
    cpu_threads: int | None = None  # intra-op threads of a CPU case; None: one per physical core


@dataclass(frozen=True)
class CaseOutcome:
    """One case as the worker measured it: the parts of the measurement record it fills (status,
    method, statistics, machine observation, raw samples, layer profile) and the worker's own
    bookkeeping. The supervisor adds the identity and the work model (supervisor.build_record)."""

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


def case_seed(base_seed: int, case_key: str) -> int:
    """A per-case seed: deterministic in (base seed, case key), independent of the case's position."""
    digest = hashlib.sha256(f"{base_seed}:{case_key}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFF_FFFF


def describe_exception(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


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


def generic_skip_reason(op: Any, case: Case, device: DeviceInfo) -> str | None:
    """suite.ops.base.case_skip_reason, then what only a running worker can see: the memory free now."""
    reason = case_skip_reason(op, case, device)
    if reason:
        return reason
    need = int(op.memory_bytes(op.resolved_params(case.params), case.dtype))
    free = _available_memory_bytes(device)
    if free is not None and need > free:
        return f"would not fit: needs {format_bytes(need)}, only {format_bytes(free)} free on {device.torch_device}"
    return None


def _synchronize(device: DeviceInfo, extra_sync: Any) -> None:
    if extra_sync is not None:
        extra_sync()
    if device.is_cuda:
        import torch

        torch.cuda.synchronize(torch.device(device.torch_device))


def _release(device: DeviceInfo) -> None:
    """Collect garbage and return torch's cached blocks to the driver: after a case that raised
    (an out-of-memory error leaves cached blocks, and a traceback can hold inputs in a cycle).
    After a case that ended normally its tensors are freed by reference counting and the cached
    blocks serve the next case, so this is not done."""
    gc.collect()
    if device.is_cuda:
        import torch

        torch.cuda.empty_cache()


def _context_usable(device: DeviceInfo) -> bool:
    """False when the CUDA context is broken (sticky error such as an illegal memory access)."""
    if not device.is_cuda:
        return True
    try:
        import torch

        torch.cuda.synchronize(torch.device(device.torch_device))
        torch.empty(1, device=device.torch_device).add_(1)
        torch.cuda.synchronize(torch.device(device.torch_device))
        return True
    except Exception:  # noqa: BLE001 - any failure here means the context cannot be trusted
        return False


# check verdicts of this worker, by check_key: None (correct) or the message
_CHECK_VERDICTS: dict[str, str | None] = {}


def check_key(case: Case) -> str:
    """What decides a check's verdict: the op, backend, dtype and params, not the cache or timing
    mode (the cases of one shape in cold/hot and launch/graph run the same code on inputs of the
    same shape and distribution)."""
    from rooflab.suite.case import canonical_params

    return f"{case.op}.v{case.op_version}:{case.backend}:{case.dtype}:{canonical_params(case.params)}"


class _Laps:
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

    prepared: Any  # suite.ops.base.Prepared
    settings: Any  # suite.timing.TimingSettings: the case's settings with the overrides applied
    first_call_ms: float
    cpu_threads: int | None = None  # intra-op threads set for a CPU case
    sample_kind: Any = None  # suite.timing.SampleKind: what one sample of the op is
    check_cached: bool = False  # the check verdict came from an earlier case with the same check_key


def ready_case(request: CaseRequest, device: DeviceInfo, started: float,
               laps: _Laps | None = None) -> ReadyCase | CaseOutcome:
    """Skip checks, prepare, first call + correctness check: everything `run_case` does before it
    times. A skipped or incorrect case comes back as its CaseOutcome; exceptions propagate.

    The float64 check runs once per check_key in a worker: a later case with the same key (another
    cache or timing mode) makes and times its first call but takes the verdict of the first."""
    from rooflab.suite.ops.registry import get_op

    laps = laps if laps is not None else _Laps()
    case = request.case
    key = case.case_key
    op = get_op(case.op)
    reason = generic_skip_reason(op, case, device)
    if reason:
        return CaseOutcome(key, ResultStatus.SKIPPED, reason, time.perf_counter() - started)
    settings = case.timing.override(dict(request.timing_overrides))
    cpu_threads = _apply_cpu_threads(device, request.cpu_threads)
    laps.restart()
    prepared = op.prepare(case, device, case_seed(request.seed, key))
    if case.timing_mode == TimingMode.GRAPH and not prepared.graph_safe:
        # known only once the op is prepared (e.g. cupy's matmul); a combination the op does
        # not support is skipped, as an unsupported dtype or backend is
        reason = f"{op.name} with the {case.backend} backend cannot be captured in a CUDA graph (timing mode graph)"
        return CaseOutcome(key, ResultStatus.SKIPPED, reason, time.perf_counter() - started)
    _synchronize(device, prepared.sync)
    laps.lap("prepare")
    t0 = time.perf_counter_ns()
    output = prepared.fn()
    _synchronize(device, prepared.sync)
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


def time_ready(ready: ReadyCase, case: Case, device: DeviceInfo) -> Any:
    """Time a ready case with the engine, as `run_case` does (a cold case uses the worker's flusher).

    The first call was made and timed by `ready_case`: the engine does not make another."""
    from rooflab.runners.engine.timing import measure

    prepared = ready.prepared
    return measure(
        prepared.fn,
        device=device,
        settings=ready.settings,
        cache=case.cache,
        timing_mode=case.timing_mode,
        sync=prepared.sync,
        graph_safe=prepared.graph_safe,
        flusher=_flusher(device, ready.settings.flush_method) if case.cache == CacheMode.COLD else None,
        sample_kind=ready.sample_kind,
        first_call_ms=ready.first_call_ms,
    )


def run_case(request: CaseRequest, device: DeviceInfo) -> CaseOutcome:
    """Skip checks, prepare, first call + correctness check (ready_case), then timing; never raises."""
    from rooflab.runners.engine.attribution import attribute
    from rooflab.runners.machine.observe import watching

    case = request.case
    key = case.case_key
    started = time.perf_counter()
    laps = _Laps()
    ready = None
    raised = False
    try:
        ready = ready_case(request, device, started, laps)
        if isinstance(ready, CaseOutcome):
            return ready
        with watching(device) as watch:
            result = time_ready(ready, case, device)
        laps.lap("measure")
        layer_profile, attribution_error = attribute(ready.prepared, device)
        return CaseOutcome(
            key,
            ResultStatus.OK,
            attribution_error,
            time.perf_counter() - started,
            method=result.method,
            stats=result.stats,
            machine=watch.observation(result.stats, result.method.stop_reason, ready.cpu_threads),
            samples_ms=tuple(float(x) for x in result.samples_ms),
            layer_profile=layer_profile,
            phases_ms=_phases(laps.phases, result.method),
            check_cached=ready.check_cached,
        )
    except Exception as exc:  # noqa: BLE001 - an exception in a case is data: status failed
        message = describe_exception(exc)
        raised = True
        # leaving this block drops the traceback, and with it the frames that hold the inputs
    finally:
        ready = None
    if raised:
        _release_quietly(device)
    if _context_usable(device):
        return CaseOutcome(key, ResultStatus.FAILED, message, time.perf_counter() - started)
    # a sticky CUDA error (illegal memory access, device-side assert): the context is lost with
    # everything on it, as if the process had died; a fresh worker takes the next case
    return CaseOutcome(
        key, ResultStatus.CRASHED, f"device context lost: {message}", time.perf_counter() - started,
        worker_unusable=True,
    )


def _phases(laps: Mapping[str, float], method: TimingMethod) -> dict[str, float]:
    """The case's phases (PHASES) from the worker's laps and the engine's own warmup and sampling times."""
    phases = dict(laps)
    measure_ms = phases.pop("measure")
    warmup_ms, sampling_ms = float(method.warmup_ms or 0.0), float(method.sampling_ms or 0.0)
    phases["warmup"] = warmup_ms
    phases["sampling"] = sampling_ms
    phases["timing_first_call"] = max(0.0, measure_ms - warmup_ms - sampling_ms)
    return phases


def _apply_cpu_threads(device: DeviceInfo, wanted: int | None) -> int | None:
    """Set torch's intra-op threads for a CPU case (`wanted`, else one per physical core) and
    return the count; None on a GPU, where the host threads are not what is measured."""
    if device.is_cuda:
        return None
    import torch

    from rooflab.runners.machine.cpuinfo import default_cpu_threads

    threads = wanted or default_cpu_threads()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


_FLUSHERS: dict[str, Any] = {}


def _flusher(device: DeviceInfo, method: str) -> Any:
    """One flush buffer per worker and device, reused by every cold case, swept by `method`."""
    flusher = _FLUSHERS.get(device.torch_device)
    if flusher is None:
        from rooflab.runners.engine.flush import make_flusher

        flusher = _FLUSHERS[device.torch_device] = make_flusher(device, method)
    return flusher.using(method)


def _release_quietly(device: DeviceInfo) -> None:
    """Free what a case held (an out-of-memory error leaves cached blocks behind); never raises."""
    try:
        _release(device)
    except Exception:  # noqa: BLE001 - a broken context is detected by _context_usable
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _watch_supervisor(supervisor_pid: int) -> None:
    """Exit when the supervisor is gone (killed with SIGKILL), even in the middle of a case.

    The worker's parent is the supervisor (spawn) or the fork server, which exits with it."""
    parent = os.getppid()
    while True:
        time.sleep(1.0)
        if os.getppid() != parent or not _alive(supervisor_pid):
            os._exit(1)


def _pin(torch_device: str) -> None:
    if device_kind_of(torch_device) is DeviceKind.CUDA:
        import torch

        torch.cuda.set_device(torch.device(torch_device))


def worker_main(
    conn: Any, torch_device: str, supervisor_pid: int, environ: Mapping[str, str] | None = None
) -> None:
    """Entry point of the worker process (multiprocessing target).

    `environ` is the supervisor's environment at the time the worker was asked for (a fork
    server's own environment is that of an earlier moment): ROOFLAB_PLUGINS and CUDA settings
    are read from it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if environ is not None:
        os.environ.clear()
        os.environ.update(environ)
    threading.Thread(target=_watch_supervisor, args=(supervisor_pid,), daemon=True, name="supervisor-watch").start()
    try:
        from rooflab.runners.machine.environment import capture

        _pin(torch_device)
        environment, device = capture(torch_device)
        from rooflab.suite.ops.registry import all_ops

        all_ops()  # load the ops (and ROOFLAB_PLUGINS) before the first case
    except Exception as exc:  # noqa: BLE001 - reported to the supervisor, which gives up on this device
        conn.send(("setup_error", describe_exception(exc)))
        conn.close()
        return
    conn.send(("ready", WorkerReady(os.getpid(), device, environment)))
    while True:
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):
            return
        if kind == "stop":
            conn.close()
            return
        outcome = run_case(payload, device)
        conn.send(("result", outcome))
        if outcome.worker_unusable:
            conn.close()
            os._exit(0)
