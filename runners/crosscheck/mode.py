"""A timer's mode: everything about how it takes a number that can make two timers differ on the same
kernel, and rooflab's engine run in another timer's mode.

A mode is the cache state before a call (cold with a flush of some kind and size, or hot), the pace
of the samples, whether the stream is held while a sample is enqueued, whose clock reads the time,
and what one sample is (one call, or the mean of a block of calls). Each peer states its own
(`Peer.mode_for`, written down from the peer's code in docs/crosscheck.md); `configured_mode` is
rooflab's as a run would time the case. `measure_in_mode` times a ready case with rooflab's own
engine (runners.engine.timing.measure) in any mode: the cross-check's second ratio, rooflab in the
peer's mode / the peer, is the engines' agreement, and the first, rooflab as configured / the
peer, is the method difference that `differences` names.
"""
from __future__ import annotations

import statistics
import time
import timeit
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from rooflab.runners.engine import timing  # timing.measure looked up at each call: tests replace it
from rooflab.runners.engine.flush import CpuFlusher, CudaFlusher, flush_size_bytes, make_flusher
from rooflab.runners.engine.group_timing import MODE_COMBINATION, MODE_PACE
from rooflab.runners.engine.stream_hold import HoldMode
from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.timing import TimingSettings
from rooflab.vocab import CacheMode, CollectiveMode, FlushMethod, Pace, RankCombination, SampleKind, TimingMode

MIB = 1 << 20
# torch.utils.benchmark.Timer.blocked_autorange's block size rule: the smallest power of ten of calls
# whose block lasts at least min_run_time / 1000 with the timer's own overhead at most 1e-4 of it, or
# that lasts longer than min_run_time
TIMER_MIN_RUN_S = 0.2
TIMER_MAX_OVERHEAD = 1e-4
# nvbench's batch (hot) measurement: back-to-back launches between one event pair, at least 4; nvbench
# sizes a batch to its 0.5 s target, the engine to BATCH_MS per sample (the mean is the same figure)
BATCH_MIN_CALLS = 4
BATCH_MS = 2.0
ESTIMATE_CALLS = 3


class Clock(StrEnum):
    DEVICE = "device"  # CUDA events on the device's stream
    HOST = "host"  # host wall clock (with a device synchronisation at each end, on a GPU)


class Sample(StrEnum):
    """What one of the timer's samples is; its figure is the median of them."""

    PER_CALL = "per_call"  # one call
    BLOCK_MEAN = "block_mean"  # a block of calls back to back, divided by the calls


@dataclass(frozen=True)
class TimerMode:
    cache: str  # CacheMode
    flush_method: str  # FlushMethod (none when hot)
    flush_bytes: int  # 0 when hot
    pace: str  # Pace
    hold: str | None  # HoldMode on a GPU; None on a CPU (samples are host time)
    clock: Clock
    sample: Sample
    timing_mode: str = TimingMode.LAUNCH.value
    ranks: RankCombination | None = None  # a collective: how the ranks' figures are combined

    def aspects(self) -> dict[str, str]:
        """The mode as short named texts: what `label` and `differences` print."""
        cache = self.cache
        if self.cache == CacheMode.COLD:
            cache = f"cold ({self.flush_method} {_size(self.flush_bytes)})"
        out = {"cache": cache, "pace": self.pace, "hold": self.hold or "", "clock": self.clock.value,
               "sample": self.sample.value.replace("_", " "), "timing": self.timing_mode,
               "ranks": f"{self.ranks} rank" if self.ranks else ""}
        return {k: v for k, v in out.items() if v}

    def label(self) -> str:
        """e.g. `cold (write_sweep 256 MiB), back_to_back, unheld, device, per call`."""
        a = self.aspects()
        return ", ".join(a[k] for k in ("cache", "pace", "hold", "clock", "sample", "timing", "ranks")
                         if k in a and (k != "timing" or a[k] != TimingMode.LAUNCH))


def _size(nbytes: int) -> str:
    return f"{nbytes / MIB:.4g} MiB"


def differences(ours: TimerMode, theirs: TimerMode) -> tuple[str, ...]:
    """`aspect: ours / theirs` for each aspect in which two modes differ (empty: the same mode)."""
    a, b = ours.aspects(), theirs.aspects()
    return tuple(f"{k}: {a.get(k, '-')} / {b.get(k, '-')}" for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k))


def configured_mode(case: Case, settings: TimingSettings, device: DeviceInfo) -> TimerMode:
    """How a rooflab run times `case`: its cache mode with the configured flush (FLUSH_FACTOR x the
    cache), pace, the stream held on a GPU, one call per sample (per launch of a graph replay)."""
    cold = case.cache == CacheMode.COLD
    return TimerMode(
        cache=case.cache,
        flush_method=settings.flush_method if cold else FlushMethod.NONE.value,
        flush_bytes=flush_size_bytes(device.l2_bytes) if cold else 0,
        pace=settings.pace,
        hold=HoldMode.HELD.value if device.is_cuda else None,
        clock=Clock.DEVICE if device.is_cuda else Clock.HOST,
        sample=Sample.PER_CALL,
        timing_mode=case.timing_mode,
    )


def hot_mode(device: DeviceInfo, *, hold: HoldMode | None, clock: Clock, sample: Sample) -> TimerMode:
    """A hot mode, back to back (no flush); `hold` is dropped on a CPU."""
    return TimerMode(CacheMode.HOT.value, FlushMethod.NONE.value, 0, Pace.BACK_TO_BACK.value,
                     hold.value if hold is not None and device.is_cuda else None, clock, sample)


def collective_mode(mode: CollectiveMode, device: DeviceInfo) -> TimerMode:
    """How rooflab times a collective in `mode` (runners/engine/group_timing.py): hot; stream, a host
    clock around N calls back to back / N, the ranks averaged; isolated, one call after a barrier
    (CUDA events on a GPU), the slowest rank."""
    stream = mode is CollectiveMode.STREAM
    return TimerMode(
        CacheMode.HOT.value, FlushMethod.NONE.value, 0, MODE_PACE[mode].value, None,
        Clock.HOST if stream or not device.is_cuda else Clock.DEVICE,
        Sample.BLOCK_MEAN if stream else Sample.PER_CALL,
        ranks=MODE_COMBINATION[mode],
    )


def cold_mode(device: DeviceInfo, *, flush_bytes: int, pace: Pace, hold: HoldMode) -> TimerMode:
    """A cold mode with a write flush of `flush_bytes`, device clock, one call per sample."""
    return TimerMode(CacheMode.COLD.value, FlushMethod.WRITE_SWEEP.value, flush_bytes, pace.value,
                     hold.value if device.is_cuda else None, Clock.DEVICE if device.is_cuda else Clock.HOST,
                     Sample.PER_CALL)


# ---------------------------------------------------------------- timing a ready case in a mode

_BUFFERS: dict[tuple[str, int], CpuFlusher | CudaFlusher] = {}  # (device, bytes) -> flusher, one buffer each


def shared_flusher(device: DeviceInfo, mode: TimerMode) -> CpuFlusher | CudaFlusher:
    key = (device.torch_device, mode.flush_bytes)
    flusher = _BUFFERS.get(key)
    if flusher is None:
        flusher = _BUFFERS[key] = make_flusher(device, mode.flush_method, mode.flush_bytes)
    return flusher.using(mode.flush_method)


def release_buffers() -> None:
    """Free the flush buffers the peer modes made (between cases, so a peer's process finds the memory)."""
    _BUFFERS.clear()


def measure_in_mode(ready: Any, device: DeviceInfo, mode: TimerMode,
                    block_calls: Callable[[TimerMode], int | None]) -> Any:
    """Time a ready case (runners.orchestration.worker.ReadyCase) with rooflab's engine in `mode`;
    `block_calls(mode)` is the calls per sample of a block-mean mode. A runners.engine.timing.TimingResult."""
    prepared = ready.prepared
    cold = mode.cache == CacheMode.COLD
    overrides: dict[str, Any] = {"pace": mode.pace}
    if cold:
        overrides["flush_method"] = mode.flush_method
    host_block = mode.clock is Clock.HOST and (device.is_cuda or mode.sample is Sample.BLOCK_MEAN)
    return timing.measure(
        prepared.fn, device=device, settings=ready.settings.override(overrides), cache=mode.cache,
        timing_mode=mode.timing_mode, sync=prepared.sync, graph_safe=prepared.graph_safe,
        flusher=shared_flusher(device, mode) if cold else None,
        sample_kind=SampleKind.HOST_PER_LAUNCH if host_block else SampleKind.DEVICE_TIME,
        first_call_ms=ready.first_call_ms, hold=mode.hold or HoldMode.HELD.value,
        calls_per_sample=block_calls(mode) if mode.sample is Sample.BLOCK_MEAN else None,
    )


# ---------------------------------------------------------------- block sizes, as the peers choose them


def timer_block_calls(call: Callable[[], Any], synchronize: Callable[[], None],
                      clock_s: Callable[[], float] = time.perf_counter) -> int:
    """The calls per block torch's Timer.blocked_autorange(min_run_time=0.2) would take for `call`,
    by its own rule on the standard library's timeit (which torch's Timer runs on): the overhead is
    the median of five `timeit(0)` (a synchronisation in each clock read on a GPU); the block grows
    tenfold until it lasts at least 0.2 ms with the overhead at most 1e-4 of it, or longer than 0.2 s."""

    def timer() -> float:
        synchronize()
        return clock_s()

    timed = timeit.Timer(stmt="call()", timer=timer, globals={"call": call}).timeit
    overhead = statistics.median(timed(0) for _ in range(5))
    number = 1
    while True:
        took = timed(number)
        if took > 0 and overhead / took <= TIMER_MAX_OVERHEAD and took >= TIMER_MIN_RUN_S / 1000:
            return number
        if took > TIMER_MIN_RUN_S or number * 10 > 2**31 - 1:
            return number
        number *= 10


def batch_calls(call: Callable[[], Any], synchronize: Callable[[], None],
                clock_s: Callable[[], float] = time.perf_counter) -> int:
    """The calls per sample of a device batch mean: BATCH_MS of back-to-back calls, at least
    BATCH_MIN_CALLS (the per-call estimate is the median of ESTIMATE_CALLS synchronised calls)."""
    took = []
    for _ in range(ESTIMATE_CALLS):
        synchronize()
        start = clock_s()
        call()
        synchronize()
        took.append((clock_s() - start) * 1e3)
    per_call_ms = max(statistics.median(took), 1e-6)
    return max(BATCH_MIN_CALLS, int(BATCH_MS / per_call_ms + 0.5))
