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
import os
import signal
import threading
import time
from collections.abc import Mapping
from multiprocessing.connection import Connection

from rooflab.record import TimingMethod
from rooflab.runners.engine.attribution import attribute
from rooflab.runners.machine.environment import capture
from rooflab.runners.machine.observe import watching
from rooflab.runners.orchestration.messages import CaseOutcome, CaseRequest, WorkerReady
from rooflab.runners.orchestration.prepare import Laps, ready_case, time_ready
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops.registry import all_ops
from rooflab.vocab import DeviceKind, ResultStatus, device_index_of, device_kind_of


def describe_exception(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


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


def run_case(request: CaseRequest, device: DeviceInfo) -> CaseOutcome:
    """Skip checks, prepare, first call + correctness check (ready_case), then timing; never raises."""
    case = request.case
    key = case.case_key
    started = time.perf_counter()
    laps = Laps()
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


def _pin_core(torch_device: str) -> None:
    """A CPU core's worker (`cpu:N`) runs on logical CPU N only from its first case on (its CPU cases
    then take one thread: runners/machine/cpuinfo.py `default_cpu_threads`); its start-up, before,
    runs wherever the kernel puts it, so that a busy core slows its cases and not its start."""
    if device_kind_of(torch_device) is DeviceKind.CPU and (core := device_index_of(torch_device)) is not None:
        os.sched_setaffinity(0, {core})


def worker_main(
    conn: Connection, torch_device: str, supervisor_pid: int, environ: Mapping[str, str] | None = None
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
        _pin(torch_device)
        environment, device = capture(torch_device)

        all_ops()  # load the ops (and ROOFLAB_PLUGINS) before the first case
        _pin_core(torch_device)
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
