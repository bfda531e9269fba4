"""Sample sources: the two clocks of the timing engine.

A source times one unit of work per sample and knows how to run one untimed unit (warmup):
- `PerfCounterSource`: host wall time (`time.perf_counter_ns`) around one call (CPU devices);
- `CudaEventSource`: a CUDA event pair per sample on the current stream (GPU devices). A batch of
  samples is enqueued (flush -> start event -> fn -> end event, in that order on one stream) and
  synchronised once at its end; then the elapsed times are read.

In cold mode the flusher writes its buffer before each sample, outside the timed region: on the
host before the first clock read, on the GPU before the start event in stream order.
"""
from __future__ import annotations

import time
from typing import Any, Callable

from runners.flush import Flusher

Sync = Callable[[], None]


class PerfCounterSource:
    clock = "perf_counter"

    def __init__(self, fn: Callable[[], Any], *, flusher: Flusher | None, sync: Sync | None) -> None:
        self._fn = fn
        self._flusher = flusher
        self._sync = sync
        self.launches_per_sample = 1

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
            samples.append((t1 - t0) / 1e6)
        return samples


class CudaEventSource:
    """CUDA events around `fn` on torch's current stream of `torch_device`.

    Assumption: everything `fn` launches runs on torch's current stream (a CuPy op must wrap that
    stream, e.g. with `cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)`); work on
    another stream is not inside the event pair. `sync`, when given, is called with the device
    synchronisation at the end of each batch and of each warmup unit.
    """

    clock = "cuda_events"

    def __init__(
        self,
        fn: Callable[[], Any],
        *,
        torch_device: str,
        flusher: Flusher | None,
        sync: Sync | None,
        launches_per_sample: int = 1,
    ) -> None:
        import torch

        self._torch = torch
        self._device = torch.device(torch_device)
        self._fn = fn
        self._flusher = flusher
        self._sync = sync
        self.launches_per_sample = launches_per_sample

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
        torch = self._torch
        stream = torch.cuda.current_stream(self._device)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(k)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(k)]
        fn, flusher = self._fn, self._flusher
        for start, end in zip(starts, ends):
            if flusher is not None:
                flusher.flush()
            start.record(stream)
            out = fn()
            end.record(stream)
            del out
        self.synchronize()
        per = float(self.launches_per_sample)
        return [start.elapsed_time(end) / per for start, end in zip(starts, ends)]

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
