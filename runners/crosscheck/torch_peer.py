"""The `torch` peer: `torch.utils.benchmark.Timer(...).blocked_autorange()`.

Its number is host wall time: blocks of N calls, each block timed once (synchronising the
accelerator before each clock read) and divided by N; the median over blocks. Nothing is flushed,
so it is a hot number. `num_threads` is the thread count rooflab's worker runs with (torch's
default, `torch.get_num_threads()`): the Timer's own default of one thread would time a
different CPU program.
"""
from __future__ import annotations

from typing import ClassVar

from rooflab.runners.crosscheck.mode import Clock, Sample, TimerMode, hot_mode
from rooflab.runners.crosscheck.peer import Call, PeerClock, PeerName, PeerTiming, package_version
from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.vocab import CacheMode

MIN_RUN_TIME_S = 0.2  # blocked_autorange's own default


def worker_thread_count() -> int:
    """The intra-op thread count a rooflab worker uses: torch's default, which it never changes."""
    import torch

    return int(torch.get_num_threads())


class TorchTimerPeer:
    name: ClassVar[PeerName] = PeerName.TORCH

    def __init__(self, min_run_time_s: float = MIN_RUN_TIME_S, num_threads: int | None = None) -> None:
        self.min_run_time_s = min_run_time_s
        self.num_threads = num_threads

    def version(self) -> str | None:
        return package_version("torch")

    def unavailable_reason(self, device: DeviceInfo) -> str | None:
        try:
            from torch.utils.benchmark import Timer  # noqa: F401 - imported only to see that it is installed
        except Exception as exc:  # noqa: BLE001 - any import failure means the peer is unavailable
            return f"torch.utils.benchmark is not importable: {exc}"
        return None

    def mode_for(self, case: Case, device: DeviceInfo, *, op_syncs: bool = False) -> TimerMode:
        """Hot (it cannot flush), back to back, host clock around a synchronised block of calls; the
        figure is the median of the block means."""
        return hot_mode(device, hold=None, clock=Clock.HOST, sample=Sample.BLOCK_MEAN)

    def time(self, fn: Call, *, case: Case, device: DeviceInfo, sync: Call | None) -> PeerTiming:
        from torch.utils.benchmark import Timer

        def call() -> None:
            fn()
            if sync is not None:
                sync()

        threads = self.num_threads if self.num_threads is not None else worker_thread_count()
        timer = Timer(stmt="call()", globals={"call": call}, num_threads=threads, label=case.case_key)
        measurement = timer.blocked_autorange(min_run_time=self.min_run_time_s)
        return PeerTiming(
            median_ms=float(measurement.median) * 1e3,
            samples_ms=tuple(float(t) * 1e3 for t in measurement.times),
            cache=CacheMode.HOT,
            clock=PeerClock.HOST_BLOCK_MEAN,
            calls_per_sample=int(measurement.number_per_run),
        )
