"""Timing one collective on every rank of a group, in one of two modes (vocab.CollectiveMode).

Every rank runs this module's `time_group` at once, in a process group (runners/orchestration/ranks.py
starts it). The case's collective mode (suite.case.Case.collective_mode) chooses what one sample is:

- `stream` (the default; nccl-tests' method): on every rank

      reset (restore an overwritten input) -> [synchronise the GPU] -> barrier -> clock
      -> N calls back to back -> [synchronise the GPU] -> clock

  and the rank's figure is that clock / N. The sample is the mean of the ranks' figures (what
  nccl-tests reports by default, its `-a 1`); every rank's own figures are kept, so the slowest
  rank shows beside the mean (its median, CollectiveRecord.rank_medians_ms). The clock is the host's
  (`perf_counter_ns`) on a CPU and on a GPU, as nccl-tests times its loop: the calls are enqueued back
  to back and the device is synchronised before the second reading. N is sized once per case by rank
  0 from the warmup's per-call time, so that a stream lasts about STREAM_SAMPLE_MS, with at least
  STREAM_MIN_CALLS calls (nccl-tests' 20 iterations per timed loop), and told to every rank. An
  all_reduce's input is restored only before each stream: within it the calls run on what the
  previous call left, as in a plain loop.
- `isolated`: on every rank

      reset -> [synchronise the GPU] -> barrier -> clock -> one call -> clock

  and the sample is the slowest rank's time of that call. The clock is `perf_counter_ns` on a CPU
  (gloo returns when the collective is done) and a CUDA event pair on torch's current stream on a
  GPU (the GPU is idle at the start event, so the host's enqueue lies inside the pair: `host_sync`).

The barrier runs on the group of decisions (`control`; on gloo the measured group itself), after
the device is synchronised. Rank 0 decides for the group, once, and broadcasts each decision: how
many samples the next batch takes (`batch`), 0 to end the phase. Warmup takes batches until
`warmup_calls` calls (at least one: a stream's N is sized from it) and `warmup_ms` have passed (on
rank 0's clock) and discards them; in stream
mode a warmup batch of k calls is one stream of k calls after a barrier. Sampling is the adaptive
stopping rule of every case (runners.engine.stopping.sample_until_stable), run on rank 0 over the
combined samples (a stream sample is one stream's clock / N, as any other sample is one figure):
after each batch every rank's own figures are gathered and combined (`combine`).
"""
from __future__ import annotations

import math
import statistics
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from rooflab.record import Statistics
from rooflab.runners.engine.stopping import sample_until_stable
from rooflab.runners.engine.timers import CUDA_EVENT_RESOLUTION_MS, perf_counter_resolution_ms
from rooflab.suite.timing import TimingSettings
from rooflab.vocab import CollectiveMode, DeviceKind, Pace, RankCombination, StopReason, SyncMethod, device_kind_of

if TYPE_CHECKING:  # torch loads in the rank processes only
    from torch.distributed import ProcessGroup

T = TypeVar("T")
END = 0  # the batch size that ends a phase
WARMUP_BATCH_MAX = 64  # warmup calls between two of rank 0's checks of its bounds
STREAM_SAMPLE_MS = 10.0  # a stream sample lasts about this long (N = this / the warmup's time per call) ...
# ... with at least nccl-tests' default calls per timed loop (its `-n 20`): two or three long calls
# after a barrier, which leaves every rank aligned and idle, are mostly the first calls of a loop, not
# the loop a user times (tests/runners/test_group_timing.py plants the difference) ...
STREAM_MIN_CALLS = 20
STREAM_MAX_CALLS = 100_000  # ... and at most this many
# how a mode's calls follow one another: the measurement's `pace`
MODE_PACE = {CollectiveMode.STREAM: Pace.BACK_TO_BACK, CollectiveMode.ISOLATED: Pace.BARRIER}
# how a mode makes one sample of the ranks' figures of it (`combine`)
MODE_COMBINATION = {CollectiveMode.STREAM: RankCombination.MEAN, CollectiveMode.ISOLATED: RankCombination.SLOWEST}
_COMBINE: dict[RankCombination, Callable[[Sequence[float]], float]] = {
    RankCombination.MEAN: statistics.fmean, RankCombination.SLOWEST: max}


@dataclass(frozen=True)
class GroupTiming:
    """What rank 0 knows after timing: the combined samples and every rank's own figures."""

    samples_ms: tuple[float, ...]  # per sample, the ranks combined (`combine`: stream the mean, isolated the slowest)
    rank_samples_ms: tuple[tuple[float, ...], ...]  # per rank, its own figures of the same samples
    stats: Statistics  # of samples_ms
    stop_reason: StopReason
    warmup_calls: int
    warmup_ms: float
    sampling_ms: float
    clock: str
    sync_method: str
    mode: CollectiveMode
    calls_per_sample: int  # N of a stream sample; 1 when isolated

    @property
    def pace(self) -> str:
        return MODE_PACE[self.mode].value

    @property
    def rank_medians_ms(self) -> tuple[float, ...]:
        return tuple(statistics.median(s) for s in self.rank_samples_ms)


class GroupTimingControl(Protocol):
    """What `time_group` asks of its group: this rank's place, barriers, rank 0's decisions and every
    rank's figures (`Control` over torch.distributed; the tests' fake groups)."""

    rank: int
    size: int

    def barrier(self) -> None: ...
    def decide(self, value: int) -> int: ...
    def gather(self, values: Sequence[float]) -> list[list[float]]: ...


class GroupControl(GroupTimingControl, Protocol):
    """What a rank's case asks of its group besides the timing: every rank's small answer to a question
    (runners.orchestration.rank_case: whether to skip, whether each output was right)."""

    def agree(self, mine: T) -> list[T]: ...


class Control:
    """The decisions, barriers and gathers of a group, over a gloo process group (CPU tensors):
    `group` None is the default group (a gloo group itself). A GroupControl."""

    def __init__(self, group: ProcessGroup | None, rank: int, size: int) -> None:
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

    def agree(self, mine: T) -> list[T]:
        """Every rank's small picklable `mine`, by rank, on every rank."""
        out: list[Any] = [None] * self.size  # all_gather_object puts each rank's `mine` in its slot
        self._dist.all_gather_object(out, mine, group=self.group)
        return out


def combine(per_rank: Sequence[Sequence[float]], mode: CollectiveMode) -> list[float]:
    """The samples of a batch from every rank's own figures of it (`per_rank[r][i]`: rank r's figure
    of sample i): stream, the mean over the ranks (nccl-tests' default); isolated, the slowest rank
    (MODE_COMBINATION)."""
    pick = _COMBINE[MODE_COMBINATION[mode]]
    return [float(pick(column)) for column in zip(*per_rank, strict=True)]


def stream_calls(per_call_ms: float, target_ms: float = STREAM_SAMPLE_MS) -> int:
    """N of a stream sample: calls lasting about `target_ms` at `per_call_ms` each, within
    STREAM_MIN_CALLS .. STREAM_MAX_CALLS."""
    wanted = math.ceil(target_ms / per_call_ms) if per_call_ms > 0 else STREAM_MAX_CALLS
    return int(min(max(wanted, STREAM_MIN_CALLS), STREAM_MAX_CALLS))


class RankClock(ABC):
    """This rank's samples of `fn`: reset, barrier, clock (the subclasses: what lies between the readings)."""

    mode: CollectiveMode
    clock: str  # a Clock: what reads the time
    sync_method: str  # a SyncMethod
    resolution_ms: float  # the clock's smallest step, per reading
    calls = 1  # calls per sample

    @property
    def pace(self) -> str:
        return MODE_PACE[self.mode].value

    def __init__(self, fn: Callable[[], object], reset: Callable[[], object] | None, control: GroupTimingControl,
                 torch_device: str) -> None:
        self.fn, self.reset, self.control = fn, reset, control
        self.cuda = device_kind_of(torch_device) is DeviceKind.CUDA
        if self.cuda:
            import torch

            self._torch, self._device = torch, torch.device(torch_device)

    def _ready(self) -> None:
        """Restore the input, synchronise the GPU, wait for every rank."""
        if self.reset is not None:
            self.reset()
        if self.cuda:
            self._torch.cuda.synchronize(self._device)
        self.control.barrier()

    def size(self, per_call_ms: float) -> int:
        """The calls per sample for a call of `per_call_ms` (rank 0 decides it after the warmup)."""
        return 1

    @abstractmethod
    def take(self, k: int) -> list[float]:
        """k samples: this rank's figure of each (ms per call)."""

    @abstractmethod
    def warm(self, k: int) -> float:
        """k warmup calls; this rank's time per call (ms)."""


class _StreamClock(RankClock):
    """A sample: N calls back to back under one host clock (a GPU synchronised before its end), / N."""

    mode = CollectiveMode.STREAM
    clock = "perf_counter"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.sync_method = SyncMethod.HOST_SYNC.value if self.cuda else SyncMethod.NONE.value
        self.resolution_ms = perf_counter_resolution_ms()

    def _stream_ms(self, calls: int) -> float:
        fn = self.fn
        self._ready()
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        if self.cuda:
            self._torch.cuda.synchronize(self._device)
        return (time.perf_counter_ns() - t0) / 1e6

    def size(self, per_call_ms: float) -> int:
        return stream_calls(per_call_ms)

    def take(self, k: int) -> list[float]:
        return [self._stream_ms(self.calls) / self.calls for _ in range(k)]

    def warm(self, k: int) -> float:
        return self._stream_ms(k) / k


class _IsolatedClock(RankClock):
    """A sample: one call after a barrier, between two readings of the clock."""

    mode = CollectiveMode.ISOLATED

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.clock = "cuda_events" if self.cuda else "perf_counter"
        self.sync_method = SyncMethod.HOST_SYNC.value if self.cuda else SyncMethod.NONE.value
        self.resolution_ms = CUDA_EVENT_RESOLUTION_MS if self.cuda else perf_counter_resolution_ms()

    def take(self, k: int) -> list[float]:
        return self._take_cuda(k) if self.cuda else self._take_cpu(k)

    def warm(self, k: int) -> float:
        return statistics.median(self.take(k))

    def _take_cpu(self, k: int) -> list[float]:
        fn, ready, clock = self.fn, self._ready, time.perf_counter_ns
        out = []
        for _ in range(k):
            ready()
            t0 = clock()
            fn()
            t1 = clock()
            out.append((t1 - t0) / 1e6)
        return out

    def _take_cuda(self, k: int) -> list[float]:
        torch = self._torch
        pairs = []
        for _ in range(k):
            self._ready()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            self.fn()
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize(self._device)
        return [float(s.elapsed_time(e)) for s, e in pairs]


def rank_clock(mode: CollectiveMode, fn: Callable[[], object], reset: Callable[[], object] | None,
               control: GroupTimingControl, torch_device: str) -> RankClock:
    """This rank's clock of `fn` in `mode`: what one sample is (the module docstring)."""
    return (_StreamClock if mode is CollectiveMode.STREAM else _IsolatedClock)(fn, reset, control, torch_device)


def time_group(fn: Callable[[], object], *, reset: Callable[[], object] | None, control: GroupTimingControl,
               torch_device: str, settings: TimingSettings,
               mode: CollectiveMode = CollectiveMode.STREAM) -> GroupTiming | None:
    """Warm up and sample `fn` on every rank of `control`'s group in `mode`; rank 0 gets the
    GroupTiming, the other ranks None. Every rank must call it with the same settings and mode."""
    clock = rank_clock(mode, fn, reset, control, torch_device)
    if control.rank != 0:
        follow(clock, control, warm=True)
        clock.calls = control.decide(END)
        follow(clock, control)
        return None
    warmup_calls, warmup_ms, per_call_ms = lead_warmup(clock, control, settings)
    clock.calls = control.decide(clock.size(per_call_ms))
    rank_samples: list[list[float]] = [[] for _ in range(control.size)]

    def take_batch(k: int) -> list[float]:
        control.decide(k)
        per_rank = control.gather(clock.take(k))
        for own, new in zip(rank_samples, per_rank, strict=True):
            own.extend(new)
        return combine(per_rank, clock.mode)

    outcome = sample_until_stable(take_batch, settings, resolution_ms=clock.resolution_ms / clock.calls)
    control.decide(END)
    return GroupTiming(
        samples_ms=outcome.samples_ms, rank_samples_ms=tuple(tuple(s) for s in rank_samples), stats=outcome.stats,
        stop_reason=outcome.stop_reason, warmup_calls=warmup_calls, warmup_ms=warmup_ms,
        sampling_ms=outcome.elapsed_ms, clock=clock.clock, sync_method=clock.sync_method, mode=clock.mode,
        calls_per_sample=clock.calls,
    )


def lead_warmup(clock: RankClock, control: GroupTimingControl, settings: TimingSettings) -> tuple[int, float, float]:
    """Rank 0's warmup: batches until both bounds are met; (calls, ms, the last batch's ms per call)."""
    start = time.perf_counter()
    calls, per_call_ms = 0, 0.0
    while True:
        elapsed_ms = (time.perf_counter() - start) * 1e3
        if calls >= max(1, settings.warmup_calls) and elapsed_ms >= settings.warmup_ms:
            control.decide(END)
            return calls, elapsed_ms, per_call_ms
        k = max(1, settings.warmup_calls - calls)
        if calls:  # enough calls to reach warmup_ms at the pace so far, at most WARMUP_BATCH_MAX at once
            per_call = max(elapsed_ms / calls, 1e-6)
            k = max(k, math.ceil((settings.warmup_ms - elapsed_ms) / per_call))
        k = min(k, WARMUP_BATCH_MAX)
        control.decide(k)
        per_call_ms = clock.warm(k)
        calls += k


def follow(clock: RankClock, control: GroupTimingControl, *, warm: bool = False) -> float:
    """A rank other than 0: take the batches rank 0 asks for until it ends the phase (the warmup's
    are discarded; the sampling's are gathered); the last warmup batch's time per call (0 without one)."""
    per_call_ms = 0.0
    while True:
        k = control.decide(END)
        if k == END:
            return per_call_ms
        if warm:
            per_call_ms = clock.warm(k)
        else:
            control.gather(clock.take(k))
