"""The `cupyx` peer: `cupyx.profiler.benchmark(func, n_repeat=..., n_warmup=10, max_duration=...)`.

Its number is the GPU time per call (`gpu_times`, seconds, shape (devices, repeats)): an event
pair recorded on CuPy's current stream around each call, with no flush (a hot number) and no
blocking kernel (a call shorter than its launch also holds the wait for the host). rooflab's ops
run on torch's current stream, so the benchmark runs with that stream as CuPy's current one.
"""
from __future__ import annotations

import statistics
from typing import ClassVar

from rooflab.runners.crosscheck.mode import Clock, Sample, TimerMode, hot_mode
from rooflab.runners.crosscheck.peer import Call, PeerClock, PeerName, PeerTiming
from rooflab.runners.engine.stream_hold import HoldMode
from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops.common import cupy_module
from rooflab.suite.ops.pointwise import external_stream
from rooflab.vocab import CacheMode

N_WARMUP = 10  # cupyx's default
N_REPEAT = 10_000  # cupyx's default; max_duration ends it earlier for slow calls
MAX_DURATION_S = 1.0


class CupyxPeer:
    name: ClassVar[PeerName] = PeerName.CUPYX

    def version(self) -> str | None:
        cupy = cupy_module()
        return str(cupy.__version__) if cupy is not None else None

    def unavailable_reason(self, device: DeviceInfo) -> str | None:
        if not device.is_cuda:
            return "cupyx.profiler.benchmark reports GPU times: it needs a CUDA device"
        try:
            import cupyx.profiler  # noqa: F401 - imported only to see that it is installed
        except Exception as exc:  # noqa: BLE001 - any import failure means the peer is unavailable
            return f"cupy is not importable: {exc}"
        return None

    def mode_for(self, case: Case, device: DeviceInfo, *, op_syncs: bool = False) -> TimerMode:
        """Hot (no flush); an event pair around each call, recorded before the host launches it, and a
        synchronisation after each (no hold, no rest); median of the calls."""
        return hot_mode(device, hold=HoldMode.SYNC_PER_SAMPLE, clock=Clock.DEVICE, sample=Sample.PER_CALL)

    def time(self, fn: Call, *, case: Case, device: DeviceInfo, sync: Call | None) -> PeerTiming:
        import cupy
        import torch
        from cupyx.profiler import benchmark

        index = torch.device(device.torch_device).index or 0
        handle = torch.cuda.current_stream(torch.device(device.torch_device)).cuda_stream
        with cupy.cuda.Device(index), external_stream(cupy, handle):
            result = benchmark(fn, n_repeat=N_REPEAT, n_warmup=N_WARMUP, max_duration=MAX_DURATION_S, devices=(index,))
        samples = tuple(float(t) * 1e3 for t in result.gpu_times[0])
        return PeerTiming(float(statistics.median(samples)), samples, CacheMode.HOT, PeerClock.DEVICE_EVENTS_PER_CALL)
