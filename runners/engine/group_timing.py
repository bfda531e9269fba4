"""Timing one collective on every rank of a group: a sample is the slowest rank's time.

Every rank runs this module's `time_group` at once, in a process group (runners/orchestration/ranks.py
starts it). One sample, on every rank:

    reset (restore an overwritten input) -> [synchronise the GPU] -> barrier -> clock -> fn -> clock

The clock is `perf_counter_ns` on a CPU (gloo returns when the collective is done) and a CUDA event
pair on a GPU, recorded on torch's current stream around the call: NCCL's stream waits for the
start event and the current stream for the collective's end, so the pair brackets the collective
on the device. The barrier runs on a gloo group of its own (`control`), after the device is
synchronised, so every rank starts a sample at the same moment up to the barrier's own skew; the
host's enqueue of the collective falls inside the pair (the GPU is idle at the start event): the
sync method is `host_sync`.

Rank 0 decides for the group, once, and broadcasts each decision: how many samples the next batch
takes (`batch`), 0 to end the phase. Warmup takes batches until `warmup_calls` calls and
`warmup_ms` have passed (on rank 0's clock) and discards them. Sampling is the adaptive stopping
rule of every case (runners.engine.stopping.sample_until_stable), run on rank 0: after each batch
every rank's samples are gathered, and the sample the rule sees is the slowest rank's time of that
collective. Every rank's own samples are kept, so a straggler shows in its per-rank median.
"""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rooflab.record import Statistics
from rooflab.runners.engine.stopping import sample_until_stable
from rooflab.runners.engine.timers import CUDA_EVENT_RESOLUTION_MS, perf_counter_resolution_ms
from rooflab.suite.timing import TimingSettings
from rooflab.vocab import DeviceKind, StopReason, SyncMethod, device_kind_of

END = 0  # the batch size that ends a phase
WARMUP_BATCH_MAX = 64  # warmup calls between two of rank 0's checks of its bounds


@dataclass(frozen=True)
class GroupTiming:
    """What rank 0 knows after timing: the slowest-rank samples and every rank's own."""

    samples_ms: tuple[float, ...]  # per sample, the slowest rank's time
    rank_samples_ms: tuple[tuple[float, ...], ...]  # per rank, its own times of the same samples
    stats: Statistics  # of samples_ms
    stop_reason: StopReason
    warmup_calls: int
    warmup_ms: float
    sampling_ms: float
    clock: str
    sync_method: str

    @property
    def rank_medians_ms(self) -> tuple[float, ...]:
        return tuple(statistics.median(s) for s in self.rank_samples_ms)


class Control:
    """The decisions, barriers and gathers of a group, over a gloo process group (CPU tensors):
    `group` None is the default group (a gloo group itself)."""

    def __init__(self, group: Any, rank: int, size: int) -> None:
        import torch
        import torch.distributed as dist

        self._torch, self._dist = torch, dist
        self.group, self.rank, self.size = group, rank, size

    def barrier(self) -> None:
        self._dist.barrier(group=self.group)

    def decide(self, value: int) -> int:
        """Rank 0's `value`, on every rank."""
        t = self._torch.tensor([value if self.rank == 0 else 0], dtype=self._torch.int64)
        self._dist.broadcast(t, src=0, group=self.group)
        return int(t.item())

    def gather(self, values: Sequence[float]) -> list[list[float]]:
        """Every rank's `values` (all of the same length), by rank, on every rank."""
        torch = self._torch
        mine = torch.tensor(list(values), dtype=torch.float64)
        parts = [torch.empty_like(mine) for _ in range(self.size)]
        self._dist.all_gather(parts, mine, group=self.group)
        return [p.tolist() for p in parts]

    def agree(self, mine: Any) -> list[Any]:
        """Every rank's small picklable `mine`, by rank, on every rank."""
        out: list[Any] = [None] * self.size
        self._dist.all_gather_object(out, mine, group=self.group)
        return out


class _Clock:
    """One sample on this rank: reset, barrier, clock around `fn`."""

    def __init__(self, fn: Callable[[], Any], reset: Callable[[], Any] | None, control: Control,
                 torch_device: str) -> None:
        self.fn, self.reset, self.control = fn, reset, control
        self.cuda = device_kind_of(torch_device) is DeviceKind.CUDA
        if self.cuda:
            import torch

            self._torch, self._device = torch, torch.device(torch_device)
        self.clock = "cuda_events" if self.cuda else "perf_counter"
        self.sync_method = SyncMethod.HOST_SYNC.value if self.cuda else SyncMethod.NONE.value
        self.resolution_ms = CUDA_EVENT_RESOLUTION_MS if self.cuda else perf_counter_resolution_ms()

    def take(self, k: int) -> list[float]:
        return self._take_cuda(k) if self.cuda else self._take_cpu(k)

    def _take_cpu(self, k: int) -> list[float]:
        fn, reset, barrier, clock = self.fn, self.reset, self.control.barrier, time.perf_counter_ns
        out = []
        for _ in range(k):
            if reset is not None:
                reset()
            barrier()
            t0 = clock()
            fn()
            t1 = clock()
            out.append((t1 - t0) / 1e6)
        return out

    def _take_cuda(self, k: int) -> list[float]:
        torch, device = self._torch, self._device
        pairs = []
        for _ in range(k):
            if self.reset is not None:
                self.reset()
            torch.cuda.synchronize(device)
            self.control.barrier()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            self.fn()
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize(device)
        return [float(s.elapsed_time(e)) for s, e in pairs]


def time_group(fn: Callable[[], Any], *, reset: Callable[[], Any] | None, control: Control,
               torch_device: str, settings: TimingSettings) -> GroupTiming | None:
    """Warm up and sample `fn` on every rank of `control`'s group; rank 0 gets the GroupTiming,
    the other ranks None. Every rank must call it with the same settings."""
    clock = _Clock(fn, reset, control, torch_device)
    if control.rank != 0:
        _follow(clock, control)  # warmup
        _follow(clock, control, gather=True)  # sampling
        return None
    warmup_calls, warmup_ms = _lead_warmup(clock, control, settings)
    rank_samples: list[list[float]] = [[] for _ in range(control.size)]

    def take_batch(k: int) -> list[float]:
        control.decide(k)
        per_rank = control.gather(clock.take(k))
        for own, new in zip(rank_samples, per_rank, strict=True):
            own.extend(new)
        return [max(column) for column in zip(*per_rank, strict=True)]

    outcome = sample_until_stable(take_batch, settings, resolution_ms=clock.resolution_ms)
    control.decide(END)
    return GroupTiming(
        samples_ms=outcome.samples_ms, rank_samples_ms=tuple(tuple(s) for s in rank_samples), stats=outcome.stats,
        stop_reason=outcome.stop_reason, warmup_calls=warmup_calls, warmup_ms=warmup_ms,
        sampling_ms=outcome.elapsed_ms, clock=clock.clock, sync_method=clock.sync_method,
    )


def _lead_warmup(clock: _Clock, control: Control, settings: TimingSettings) -> tuple[int, float]:
    """Rank 0's warmup: batches until both bounds are met; (calls, ms)."""
    start = time.perf_counter()
    calls = 0
    while True:
        elapsed_ms = (time.perf_counter() - start) * 1e3
        if calls >= settings.warmup_calls and elapsed_ms >= settings.warmup_ms:
            control.decide(END)
            return calls, elapsed_ms
        k = max(1, settings.warmup_calls - calls)
        if calls:  # enough calls to reach warmup_ms at the pace so far, at most WARMUP_BATCH_MAX at once
            per_call_ms = max(elapsed_ms / calls, 1e-6)
            k = max(k, math.ceil((settings.warmup_ms - elapsed_ms) / per_call_ms))
        k = min(k, WARMUP_BATCH_MAX)
        control.decide(k)
        clock.take(k)
        calls += k


def _follow(clock: _Clock, control: Control, *, gather: bool = False) -> None:
    """A rank other than 0: take the batches rank 0 asks for until it ends the phase."""
    while True:
        k = control.decide(END)
        if k == END:
            return
        samples = clock.take(k)
        if gather:
            control.gather(samples)
