"""Sample sources: the two clocks of the timing engine.

A source times one unit of work per sample and knows how to run one untimed unit (warmup):
- `PerfCounterSource`: host wall time (`time.perf_counter_ns`) around one call (CPU devices);
- `CudaEventSource`: a CUDA event pair per sample on the current stream (GPU devices). A batch of
  samples is enqueued (flush -> start event -> fn -> end event, in that order on one stream) in
  chunks of at most MAX_SAMPLES_PER_HOLD samples, each chunk behind a stream hold
  (`runners.engine.stream_hold`) released once the chunk is enqueued, so a sample is device time only;
  the batch is synchronised once at its end, then the elapsed times are read. Without a hold
  (`host_sync`) the device is synchronised after every sample instead.

In cold mode the flusher sweeps its buffer before each sample, outside the timed region: on the
host before the first clock read, on the GPU before the start event in stream order.

Pace `idle` (suite.timing.Pace) takes samples one at a time instead: flush, synchronise, the
sample (behind its own hold on a GPU), synchronise, then the device is left idle for
`suite.timing.idle_after_ms(sample)` (the sample's own duration, within bounds) before the next.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rooflab.runners.engine.flush import Flusher
from rooflab.runners.engine.stream_hold import MAX_SAMPLES_PER_HOLD, StreamHold, StreamHoldFailed
from rooflab.suite.timing import idle_after_ms
from rooflab.vocab import Pace, SyncMethod

Sync = Callable[[], None]
Sleep = Callable[[float], None]  # seconds


def pause_s(seconds: float) -> None:
    """Leave the device idle (pace idle): the host sleeps and enqueues nothing."""
    time.sleep(seconds)

CUDA_EVENT_RESOLUTION_MS = 0.0005  # cudaEventElapsedTime resolves about 0.5 us
HOLD_RETAKES = 3  # a batch whose hold ended too early is taken again at most this many times


class _Paced:
    """What pace idle adds to a source: a rest after each sample (see the module doc)."""

    _sleep_s: Sleep | None = None

    def _rest(self, sample_ms: float) -> None:
        (self._sleep_s or pause_s)(idle_after_ms(sample_ms) / 1e3)


def perf_counter_resolution_ms() -> float:
    return time.get_clock_info("perf_counter").resolution * 1e3


class PerfCounterSource(_Paced):
    clock = "perf_counter"
    sync_method = SyncMethod.NONE.value

    def __init__(self, fn: Callable[[], object], *, flusher: Flusher | None, sync: Sync | None,
                 pace: str = Pace.BACK_TO_BACK, launches_per_sample: int = 1,
                 sleep_s: Sleep | None = None) -> None:
        self._fn = fn
        self._flusher = flusher
        self._sync = sync
        self._idle = Pace(pace) is Pace.IDLE
        self._sleep_s = sleep_s
        self.launches_per_sample = launches_per_sample  # calls of `fn` per sample's call (a block); divided out
        self.resolution_ms = perf_counter_resolution_ms() / launches_per_sample

    def call(self) -> None:
        """One untimed unit: flush (cold) then the call, completed."""
        if self._flusher is not None:
            self._flusher.flush()
        out = self._fn()
        if self._sync is not None:
            self._sync()
        del out

    def take_batch(self, k: int) -> list[float]:
        fn, flusher, sync, clock = self._fn, self._flusher, self._sync, time.perf_counter_ns
        per = float(self.launches_per_sample)
        samples = []
        for _ in range(k):
            if flusher is not None:
                flusher.flush()
            t0 = clock()
            out = fn()
            if sync is not None:
                sync()
            t1 = clock()
            del out  # freeing the output stays outside the timed region
            samples.append((t1 - t0) / 1e6 / per)
            if self._idle:
                self._rest((t1 - t0) / 1e6)
        return samples


class CudaEventSource(_Paced):
    """CUDA events around `fn` on torch's current stream of `torch_device`.

    Assumption: everything `fn` launches runs on torch's current stream (a CuPy op must wrap that
    stream, e.g. with `cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)`); work on
    another stream is not inside the event pair. `sync`, when given, is called with the device
    synchronisation at the end of each batch and of each warmup unit. `hold` keeps the stream
    from starting a chunk before it is enqueued (None: `host_sync`, a synchronisation per sample).
    """

    clock = "cuda_events"

    def __init__(
        self,
        fn: Callable[[], object],
        *,
        torch_device: str,
        flusher: Flusher | None,
        sync: Sync | None,
        launches_per_sample: int = 1,
        hold: StreamHold | None = None,
        pace: str = Pace.BACK_TO_BACK,
        sleep_s: Sleep | None = None,
    ) -> None:
        import torch

        self._torch = torch
        self._device = torch.device(torch_device)
        self._fn = fn
        self._flusher = flusher
        self._sync = sync
        self._hold = hold
        self._idle = Pace(pace) is Pace.IDLE
        self._sleep_s = sleep_s
        self.launches_per_sample = launches_per_sample
        self.resolution_ms = CUDA_EVENT_RESOLUTION_MS / launches_per_sample

    @property
    def sync_method(self) -> str:
        return self._hold.method if self._hold is not None else SyncMethod.HOST_SYNC.value

    def without_hold(self) -> None:
        """Sample with a synchronisation per sample from now on (the hold cannot cover this call)."""
        self._hold = None

    def synchronize(self) -> None:
        if self._sync is not None:
            self._sync()
        self._torch.cuda.synchronize(self._device)

    def call(self) -> None:
        if self._flusher is not None:
            self._flusher.flush()
        out = self._fn()
        del out
        self.synchronize()

    def take_batch(self, k: int) -> list[float]:
        if self._idle:
            return [self._take_paced() for _ in range(k)]
        if self._hold is None:
            return self._take_synced(k)
        for _ in range(HOLD_RETAKES):
            samples = self._take_held(k, self._hold)
            if samples is not None:
                return samples
        raise StreamHoldFailed(
            f"the {self._hold.method} hold ended before a chunk was enqueued in {HOLD_RETAKES} tries"
        )

    def _take_held(self, k: int, hold: StreamHold) -> list[float] | None:
        """k samples behind holds, or None when a hold ended before its chunk was enqueued."""
        torch = self._torch
        stream = torch.cuda.current_stream(self._device)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(k)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(k)]
        fn, flusher = self._fn, self._flusher
        held = True
        for first in range(0, k, MAX_SAMPLES_PER_HOLD):
            hold.hold(stream)
            try:
                for start, end in zip(starts[first : first + MAX_SAMPLES_PER_HOLD],
                                      ends[first : first + MAX_SAMPLES_PER_HOLD], strict=True):
                    if flusher is not None:
                        flusher.flush()
                    start.record(stream)
                    out = fn()
                    end.record(stream)
                    del out
            finally:  # a call that raises must not leave the stream held
                held = hold.release() and held
        self.synchronize()
        if hold.timed_out():
            raise StreamHoldFailed(
                f"the {hold.method} hold timed out: the timed call seems to wait for the device on the host"
            )
        if not held:
            return None
        return self._elapsed(starts, ends)

    def _take_paced(self) -> float:
        """One sample at pace idle: the flush completes first, the sample runs behind its own hold (if
        any), then the device is synchronised and left idle (see the module doc)."""
        torch = self._torch
        stream = torch.cuda.current_stream(self._device)
        for _ in range(HOLD_RETAKES):
            if self._flusher is not None:
                self._flusher.flush()
                self.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            hold = self._hold
            held = True
            if hold is not None:
                hold.hold(stream)
            try:
                start.record(stream)
                out = self._fn()
                end.record(stream)
                del out
            finally:  # a call that raises must not leave the stream held
                if hold is not None:
                    held = hold.release()
            self.synchronize()
            if hold is not None and hold.timed_out():
                raise StreamHoldFailed(
                    f"the {hold.method} hold timed out: the timed call seems to wait for the device on the host"
                )
            if held:
                device_ms = start.elapsed_time(end)
                self._rest(device_ms)
                return device_ms / float(self.launches_per_sample)
        raise StreamHoldFailed(f"the {self._hold.method if self._hold else ''} hold ended before a sample was "
                               f"enqueued in {HOLD_RETAKES} tries")

    def _take_synced(self, k: int) -> list[float]:
        torch = self._torch
        stream = torch.cuda.current_stream(self._device)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(k)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(k)]
        fn, flusher = self._fn, self._flusher
        for start, end in zip(starts, ends, strict=True):
            if flusher is not None:
                flusher.flush()
            start.record(stream)
            out = fn()
            end.record(stream)
            del out
            self.synchronize()
        return self._elapsed(starts, ends)

    def _elapsed(self, starts: list[Any], ends: list[Any]) -> list[float]:
        per = float(self.launches_per_sample)
        return [start.elapsed_time(end) / per for start, end in zip(starts, ends, strict=True)]

    def time_once_ms(self) -> float:
        """Event time of one unit, without flush (used to size graphs)."""
        torch = self._torch
        stream = torch.cuda.current_stream(self._device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        out = self._fn()
        end.record(stream)
        del out
        self.synchronize()
        return start.elapsed_time(end)


class HostLaunchSource(_Paced):
    """Host wall time per launch of back-to-back launches, one synchronisation at the end.

    A sample: synchronise (untimed, so the queue starts empty), read the clock, call `call`
    `calls_per_sample` times without waiting, synchronise once, read the clock; divided by the
    launches (`calls_per_sample` x `launches_per_call`). This is what a user pays per launch from
    Python (`launch` op); with `call` a graph replay of N launches it is the per-launch replay time.
    The final synchronisation's own latency is spread over the launches of the sample.
    """

    clock = "perf_counter"
    sync_method = SyncMethod.HOST_SYNC.value

    def __init__(
        self,
        call: Callable[[], object],
        *,
        synchronize: Sync,
        calls_per_sample: int,
        launches_per_call: int = 1,
        clock_ns: Callable[[], int] = time.perf_counter_ns,
        pace: str = Pace.BACK_TO_BACK,
        sleep_s: Sleep | None = None,
    ) -> None:
        if calls_per_sample < 1 or launches_per_call < 1:
            raise ValueError("calls_per_sample and launches_per_call must be >= 1")
        self._clock_ns = clock_ns
        self._idle = Pace(pace) is Pace.IDLE
        self._sleep_s = sleep_s
        self._call = call
        self._synchronize = synchronize
        self._calls = calls_per_sample
        self.launches_per_sample = calls_per_sample * launches_per_call
        self.resolution_ms = perf_counter_resolution_ms() / self.launches_per_sample

    def call(self) -> None:
        """One untimed unit: one sample's launches, completed."""
        for _ in range(self._calls):
            out = self._call()
            del out
        self._synchronize()

    def take_batch(self, k: int) -> list[float]:
        call, synchronize, calls, clock = self._call, self._synchronize, self._calls, self._clock_ns
        per = float(self.launches_per_sample)
        samples = []
        for _ in range(k):
            synchronize()
            t0 = clock()
            for _ in range(calls):
                out = call()
                del out
            synchronize()
            t1 = clock()
            samples.append((t1 - t0) / 1e6 / per)
            if self._idle:
                self._rest((t1 - t0) / 1e6)
        return samples
