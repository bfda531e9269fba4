"""The worker process: measures cases one at a time for the supervisor.

The worker lives in its own process (multiprocessing `spawn`, which CUDA needs) so that a case that
kills its process (segfault, illegal memory access, `os._exit`) takes only itself down. It talks
to the supervisor over a `Pipe` with plain, picklable messages:

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
from dataclasses import dataclass, field
from typing import Any, Mapping

from suite.case import Case
from suite.device import DeviceInfo

GIB = 1024**3


@dataclass(frozen=True)
class WorkerReady:
    """What a freshly started worker reports: the device it is pinned to and its environment."""

    pid: int
    device: DeviceInfo
    environment: Any  # db.records.EnvironmentRecord


@dataclass(frozen=True)
class CaseRequest:
    case: Case
    seed: int  # base seed of the run; the case's own seed is derived from it and the case key
    timing_overrides: Mapping[str, Any] = field(default_factory=dict)  # CLI overrides, non-None only


@dataclass(frozen=True)
class CaseOutcome:
    """The result of one case as plain data; the supervisor turns it into a MeasurementRecord."""

    case_key: str
    status: str  # ok | incorrect | failed | skipped, or crashed when the device context was lost
    error: str | None = None
    elapsed_s: float = 0.0  # wall time of the whole case inside the worker
    clock: str | None = None
    samples_ms: tuple[float, ...] = ()
    stats: Mapping[str, float | int | None] | None = None  # SampleStats fields (status ok only)
    stop_reason: str | None = None
    first_call_ms: float | None = None
    warmup_calls: int = 0
    launches_per_sample: int = 1
    flush_bytes: int = 0
    sm_clock_start_mhz: float | None = None
    sm_clock_end_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    throttle_reasons: tuple[str, ...] = ()
    throttled: bool = False
    worker_unusable: bool = False  # the device context is broken: the worker exits after this case
    layer_profile: Any = None  # db.records.LayerProfileRecord of an op made of parts (runners.attribution)


STATS_FIELDS = (
    "median_ms",
    "mean_ms",
    "min_ms",
    "max_ms",
    "p10_ms",
    "p90_ms",
    "iqr_ms",
    "std_ms",
    "n_samples",
    "rel_ci_halfwidth",
)


def case_seed(base_seed: int, case_key: str) -> int:
    """A per-case seed: deterministic in (base seed, case key), independent of the case's position."""
    digest = hashlib.sha256(f"{base_seed}:{case_key}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFF_FFFF


def describe_exception(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def format_bytes(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def _available_memory_bytes(device: DeviceInfo) -> int | None:
    """Free memory on the device now (CUDA: the driver's free count; CPU: MemAvailable), or None."""
    if device.is_cuda:
        import torch

        free, _total = torch.cuda.mem_get_info(torch.device(device.torch_device))
        return int(free)
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def generic_skip_reason(op: Any, case: Case, device: DeviceInfo) -> str | None:
    """The checks every case gets before anything is allocated; None when the case may run."""
    if case.timing_mode == "graph" and not device.is_cuda:
        return "graph timing mode needs CUDA"
    if case.backend not in op.backends:
        return f"backend {case.backend} is not supported by {op.name} (supported: {', '.join(op.backends)})"
    if case.dtype not in op.dtypes:
        return f"dtype {case.dtype} is not supported by {op.name} (supported: {', '.join(op.dtypes)})"
    if case.timing_mode not in op.timing_modes:
        return f"timing mode {case.timing_mode} is not supported by {op.name}"
    reason = op.skip_reason(case, device)
    if reason:
        return reason
    need = int(op.memory_bytes(op.resolved_params(case.params), case.dtype))
    if case.max_memory_fraction is not None and device.memory_bytes:
        allowed = case.max_memory_fraction * device.memory_bytes
        if need > allowed:
            return (
                f"would not fit: needs {format_bytes(need)}, more than max_memory_fraction "
                f"{case.max_memory_fraction:g} x {format_bytes(device.memory_bytes)} of device memory"
            )
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


def run_case(request: CaseRequest, device: DeviceInfo) -> CaseOutcome:
    """Skip checks, prepare, first call + correctness check, then timing; never raises."""
    from runners.attribution import attribute
    from runners.clocks import ClockMonitor
    from runners.timing import measure
    from suite.ops.registry import get_op

    case = request.case
    key = case.case_key
    started = time.perf_counter()
    prepared = None
    output = None
    try:
        op = get_op(case.op)
        reason = generic_skip_reason(op, case, device)
        if reason:
            return CaseOutcome(key, "skipped", reason, time.perf_counter() - started)
        settings = case.timing.override(dict(request.timing_overrides))
        prepared = op.prepare(case, device, case_seed(request.seed, key))
        if case.timing_mode == "graph" and not prepared.graph_safe:
            # known only once the op is prepared (e.g. cupy's matmul); a combination the op does
            # not support is skipped, as an unsupported dtype or backend is
            reason = f"{op.name} with the {case.backend} backend cannot be captured in a CUDA graph (timing mode graph)"
            return CaseOutcome(key, "skipped", reason, time.perf_counter() - started)
        _synchronize(device, prepared.sync)
        t0 = time.perf_counter_ns()
        output = prepared.fn()
        _synchronize(device, prepared.sync)
        first_call_ms = (time.perf_counter_ns() - t0) / 1e6
        problem = prepared.check(output)
        output = None
        if problem:
            return CaseOutcome(key, "incorrect", problem, time.perf_counter() - started, first_call_ms=first_call_ms)
        monitor = ClockMonitor(device)
        monitor.start()
        try:
            result = measure(
                prepared.fn,
                device=device,
                settings=settings,
                cache=case.cache,
                timing_mode=case.timing_mode,
                sync=prepared.sync,
                graph_safe=prepared.graph_safe,
                flusher=_flusher(device) if case.cache == "cold" else None,
            )
        finally:
            clocks = monitor.stop()
        stats = {name: getattr(result.stats, name) for name in STATS_FIELDS}
        layer_profile, attribution_error = attribute(prepared, device)
        return CaseOutcome(
            key,
            "ok",
            attribution_error,
            time.perf_counter() - started,
            clock=result.clock,
            samples_ms=tuple(float(x) for x in result.samples_ms),
            stats=stats,
            stop_reason=result.stop_reason,
            first_call_ms=first_call_ms,
            warmup_calls=int(result.warmup_calls),
            launches_per_sample=int(result.launches_per_sample),
            flush_bytes=int(result.flush_bytes),
            sm_clock_start_mhz=clocks.sm_clock_start_mhz,
            sm_clock_end_mhz=clocks.sm_clock_end_mhz,
            sm_clock_max_mhz=clocks.sm_clock_max_mhz,
            throttle_reasons=tuple(clocks.throttle_reasons),
            throttled=bool(clocks.throttled),
            layer_profile=layer_profile,
        )
    except Exception as exc:  # noqa: BLE001 - an exception in a case is data: status failed
        message = describe_exception(exc)
        # leaving this block drops the traceback, and with it the frames that hold the inputs
    finally:
        prepared = None
        output = None
        _release_quietly(device)
    if _context_usable(device):
        return CaseOutcome(key, "failed", message, time.perf_counter() - started)
    # a sticky CUDA error (illegal memory access, device-side assert): the context is lost with
    # everything on it, as if the process had died; a fresh worker takes the next case
    return CaseOutcome(
        key, "crashed", f"device context lost: {message}", time.perf_counter() - started, worker_unusable=True
    )


_FLUSHERS: dict[str, Any] = {}


def _flusher(device: DeviceInfo) -> Any:
    """One flush buffer per worker and device, reused by every cold case."""
    flusher = _FLUSHERS.get(device.torch_device)
    if flusher is None:
        from runners.flush import make_flusher

        flusher = _FLUSHERS[device.torch_device] = make_flusher(device)
    return flusher


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
    if torch_device.startswith("cuda"):
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
        from runners.environment import capture

        _pin(torch_device)
        environment, device = capture(torch_device)
        from suite.ops.registry import all_ops

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
