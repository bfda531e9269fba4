"""The `do_bench` peer: `triton.testing.do_bench(fn, warmup=25, rep=100, return_mode=...)`.

Its number is device time per call: an event pair on the current stream around each call, with
triton's own 256 MiB buffer zeroed before each call, outside the pair (so a cold number, whatever
the case asks for; do_bench has no hot mode). The host does not hold the stream, so for kernels
shorter than their launch the pair also holds the wait for the host. `return_mode="all"` gives
the raw per-call times (recent triton); an older triton that only knows min/max/mean/median is
asked for the median and hands back no samples.
"""
from __future__ import annotations

import statistics
from typing import ClassVar

from rooflab.runners.crosscheck.mode import TimerMode, cold_mode
from rooflab.runners.crosscheck.peer import Call, PeerClock, PeerName, PeerTiming, package_version
from rooflab.runners.engine.stream_hold import HoldMode
from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.vocab import CacheMode, Pace

WARMUP_MS = 25  # do_bench's defaults: target durations in milliseconds, not call counts
REP_MS = 100
FLUSH_BYTES = 256 * 1024 * 1024  # triton's cache buffer on NVIDIA: 256 MiB of int32, zeroed before each call


class DoBenchPeer:
    name: ClassVar[PeerName] = PeerName.DO_BENCH

    def version(self) -> str | None:
        return package_version("triton")

    def unavailable_reason(self, device: DeviceInfo) -> str | None:
        if not device.is_cuda:
            return "do_bench times with CUDA events: it needs a CUDA device"
        try:
            import triton.testing  # noqa: F401 - imported only to see that it is installed
        except Exception as exc:  # noqa: BLE001 - any import failure means the peer is unavailable
            return f"triton is not importable: {exc}"
        return None

    def mode_for(self, case: Case, device: DeviceInfo, *, op_syncs: bool = False) -> TimerMode:
        """Cold, always: 256 MiB zeroed (a write) before each call; event pairs queued back to back on
        the current stream with no hold and one synchronisation at the end; median of the calls."""
        return cold_mode(device, flush_bytes=FLUSH_BYTES, pace=Pace.BACK_TO_BACK, hold=HoldMode.UNHELD)

    def time(self, fn: Call, *, case: Case, device: DeviceInfo, sync: Call | None) -> PeerTiming:
        from triton.testing import do_bench

        def call() -> None:
            fn()
            if sync is not None:
                sync()

        try:
            times = do_bench(call, warmup=WARMUP_MS, rep=REP_MS, return_mode="all")
        except (AssertionError, ValueError, TypeError):  # a triton without return_mode="all"
            times = None
        if isinstance(times, (list, tuple)) and times:
            samples = tuple(float(t) for t in times)
            median_ms = float(statistics.median(samples))
        else:
            median_ms = float(do_bench(call, warmup=WARMUP_MS, rep=REP_MS, return_mode="median"))
            samples = ()
        return PeerTiming(median_ms, samples, CacheMode.COLD, PeerClock.DEVICE_EVENTS_PER_CALL)
