"""The timing engine: one method, two clocks (CUDA events on a GPU, perf_counter on a CPU).

`measure` does, in order:
1. the first call, timed apart on the host (with synchronisation): `first_call_ms` holds compile,
   autotune and allocator warmup, which never enter the samples. A caller that has made and
   timed the first call itself (the worker, which needs its output for the correctness check)
   passes `first_call_ms=` and `measure` goes straight to step 2;
2. warmup, discarded, lasting at least `settings.warmup_ms` and `settings.warmup_calls` units,
   each unit run exactly as a sample is (flush included in cold mode) and completed;
3. sampling in batches under the adaptive stopping rule (`runners.engine.stopping`); each sample is one
   call (`launch` mode) or one replay of a CUDA graph of N launches divided by N (`graph` mode);
   in `cold` mode the cache is flushed before each sample, outside the timed region, by the sweep
   `settings.flush_method` names (`cold` with `graph` is refused: see `suite.case.mode_conflict`);
   `settings.pace` says whether samples follow back to back or one at a time with the device left
   idle between them (runners.engine.timers).
On a GPU a sample is device time: the stream is held (`runners.engine.stream_hold`) while a chunk of
samples is enqueued; when the hold cannot cover the timed call (it waits for the device on the
host), sampling starts again with a synchronisation per sample (`host_sync`). The method is
returned as `sync_method`.
An op whose `sample_kind` is `host_per_launch` (the `launch` op) is timed instead on the host, per
launch of back-to-back launches with one synchronisation at the end (`timers.HostLaunchSource`).
Raw samples are returned with their statistics.

A caller that must time a case the way another timer does (runners.crosscheck's peer modes) can
also ask for a flusher of its own size and kind (`flusher=`), no hold (`hold=`), host time per
block of calls (`sample_kind=host_per_launch` with `calls_per_sample=`), or a device-time mean
over a block of calls (`calls_per_sample=` with device time); the method is the same engine.
"""
from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rooflab.record import Statistics, TimingMethod
from rooflab.runners.engine import graphs
from rooflab.runners.engine.flush import Flusher, make_flusher
from rooflab.runners.engine.stopping import sample_until_stable
from rooflab.runners.engine.stream_hold import HoldMode, NoHold, StreamHold, StreamHoldFailed, stream_hold_for
from rooflab.runners.engine.timers import CudaEventSource, HostLaunchSource, PerfCounterSource
from rooflab.suite.case import modes_problem
from rooflab.suite.device import DeviceInfo
from rooflab.suite.timing import TimingSettings
from rooflab.vocab import CacheMode, FlushMethod, Pace, SampleKind, TimingMode

GRAPH_ESTIMATE_CALLS = 5  # eager launches timed to size a graph
HOST_LAUNCHES_PER_SAMPLE = 100  # back-to-back eager launches per host-timed sample


class GraphModeUnavailable(RuntimeError):
    """Graph mode was asked for where it cannot run (a CPU device, or an op that is not graph-safe)."""


@dataclass(frozen=True)
class TimingResult:
    """What the engine measured: the kept samples (per launch: graph replay times are divided by
    launches_per_sample), their statistics, and the method it used (rooflab.record)."""

    samples_ms: tuple[float, ...]
    stats: Statistics
    method: TimingMethod


def measure(
    fn: Callable[[], object],
    *,
    device: DeviceInfo,
    settings: TimingSettings,
    cache: str,
    timing_mode: str,
    sync: Callable[[], None] | None = None,
    graph_safe: bool = True,
    flusher: Flusher | None = None,
    stream_hold: StreamHold | None = None,
    sample_kind: str = SampleKind.DEVICE_TIME,
    first_call_ms: float | None = None,
    hold: str = HoldMode.HELD,
    calls_per_sample: int | None = None,
) -> TimingResult:
    """Time `fn` on `device`; see the module doc. `flusher` replaces the default one (cold mode:
    `settings.flush_method` over FLUSH_FACTOR x the cache), `stream_hold` the default hold (GPU,
    device-time samples, `hold` held). `first_call_ms`: the caller has already made the first call
    of `fn` (synchronised) and timed it; it is reported as given and `fn` is not called before
    warmup. None: `measure` makes and times the first call itself. `hold`: a HoldMode (GPU only).
    `calls_per_sample`: calls of `fn` per sample, the sample being their mean (host_per_launch:
    default HOST_LAUNCHES_PER_SAMPLE; device time: default 1, launch mode only)."""
    if first_call_ms is not None and not (math.isfinite(first_call_ms) and first_call_ms >= 0):
        raise ValueError(f"first_call_ms must be a finite duration >= 0 (or None), got {first_call_ms!r}")
    kind, hold_mode, block = _checked(device, cache, timing_mode, graph_safe, sample_kind, hold, calls_per_sample)
    pace = Pace(settings.pace)
    with _on_device(device):
        used_flusher = (flusher or make_flusher(device, settings.flush_method)) if cache == CacheMode.COLD else None
        if first_call_ms is None:
            first_call_ms = _first_call_ms(fn, device, sync)
        if kind is SampleKind.HOST_PER_LAUNCH:
            used_flusher = None  # back-to-back launches: nothing is flushed between them
            source: Any = _host_launch_source(fn, device, settings, timing_mode, sync, calls_per_sample)
        else:
            source = _device_time_source(fn, device, settings, timing_mode, sync, used_flusher,
                                         _hold_for(device, hold_mode, stream_hold) if device.is_cuda else None,
                                         pace, block)
        warmup_calls, warmup_ms = warm_up(source.call, settings)
        try:
            outcome = sample_until_stable(source.take_batch, settings, resolution_ms=source.resolution_ms)
        except StreamHoldFailed:
            if hold_mode is not HoldMode.HELD:
                raise
            # the hold cannot cover this call: start sampling again, synchronised per sample
            source.without_hold()
            outcome = sample_until_stable(source.take_batch, settings, resolution_ms=source.resolution_ms)
    return TimingResult(
        samples_ms=tuple(outcome.samples_ms),
        stats=outcome.stats,
        method=TimingMethod(
            cache=cache, timing_mode=timing_mode, clock=source.clock, stop_reason=outcome.stop_reason.value,
            first_call_ms=first_call_ms, warmup_calls=warmup_calls, launches_per_sample=source.launches_per_sample,
            flush_bytes=used_flusher.flush_bytes if used_flusher is not None else 0,
            sync_method=source.sync_method,
            flush_method=used_flusher.flush_method if used_flusher is not None else FlushMethod.NONE.value,
            warmup_ms=warmup_ms, sampling_ms=outcome.elapsed_ms, pace=pace.value,
        ),
    )


def _device_time_source(fn: Callable[[], object], device: DeviceInfo, settings: TimingSettings, timing_mode: str,
                        sync: Callable[[], None] | None, flusher: Flusher | None, held: StreamHold | None,
                        pace: Pace, block: int) -> Any:
    """The sample source of a device-time op: the host clock on a CPU, an event pair per call (or
    per block of `block` calls) in launch mode, a graph replay in graph mode."""
    timed = fn if block == 1 else _block_of(fn, block)
    if not device.is_cuda:
        return PerfCounterSource(timed, flusher=flusher, sync=sync, pace=pace, launches_per_sample=block)
    if timing_mode == TimingMode.LAUNCH:
        return CudaEventSource(timed, torch_device=device.torch_device, flusher=flusher, sync=sync, hold=held,
                               pace=pace, launches_per_sample=block)
    return _graph_source(fn, device, settings, flusher, sync, held)


def _checked(device: DeviceInfo, cache: str, timing_mode: str, graph_safe: bool, sample_kind: str, hold: str,
             calls_per_sample: int | None) -> tuple[SampleKind, HoldMode, int]:
    """The request's sample kind, hold mode and calls per device-time sample, or the error it makes."""
    problem = modes_problem(cache, timing_mode)
    if problem:
        raise ValueError(problem)
    if calls_per_sample is not None and calls_per_sample < 1:
        raise ValueError(f"calls_per_sample must be >= 1, got {calls_per_sample}")
    kind = SampleKind(sample_kind)
    block = calls_per_sample if kind is SampleKind.DEVICE_TIME and calls_per_sample else 1
    if block > 1 and timing_mode == TimingMode.GRAPH:
        raise ValueError("calls_per_sample applies to launch mode (a graph sample is already a block of launches)")
    if timing_mode == TimingMode.GRAPH:
        if not device.is_cuda:
            raise GraphModeUnavailable(f"graph timing needs a CUDA device, not {device.torch_device}")
        if not graph_safe:
            raise GraphModeUnavailable("this op cannot be captured in a CUDA graph (graph_safe=False)")
    return kind, HoldMode(hold), block


def _hold_for(device: DeviceInfo, mode: HoldMode, given: StreamHold | None) -> StreamHold | None:
    """The hold of a GPU source: the given or default hold (held), none (sync per sample), NoHold (unheld)."""
    if mode is HoldMode.HELD:
        return given if given is not None else stream_hold_for(device.torch_device)
    return NoHold() if mode is HoldMode.UNHELD else None


def _block_of(fn: Callable[[], object], calls: int) -> Callable[[], None]:
    """A call of `fn` `calls` times in a row (one sample of a block mean)."""

    def block() -> None:
        for _ in range(calls):
            out = fn()
            del out

    return block


def warm_up(call: Callable[[], None], settings: TimingSettings) -> tuple[int, float]:
    """Run `call` until both `warmup_calls` units and `warmup_ms` have passed; (units, wall ms)."""
    calls = 0
    start = time.perf_counter()
    elapsed_ms = 0.0
    while calls < settings.warmup_calls or elapsed_ms < settings.warmup_ms:
        call()
        calls += 1
        elapsed_ms = (time.perf_counter() - start) * 1e3
    return calls, elapsed_ms


def _first_call_ms(fn: Callable[[], object], device: DeviceInfo, sync: Callable[[], None] | None) -> float:
    synchronize = _synchronizer(device, sync)
    synchronize()
    start = time.perf_counter_ns()
    out = fn()
    synchronize()
    elapsed_ms = (time.perf_counter_ns() - start) / 1e6
    del out
    return elapsed_ms


def _synchronizer(device: DeviceInfo, sync: Callable[[], None] | None) -> Callable[[], None]:
    if not device.is_cuda:
        return sync or (lambda: None)
    import torch

    def synchronize() -> None:
        if sync is not None:
            sync()
        torch.cuda.synchronize(device.torch_device)

    return synchronize


def _sized_graph(
    fn: Callable[[], object], device: DeviceInfo, settings: TimingSettings, sync: Callable[[], None] | None
) -> tuple[Any, int]:
    """A CUDA graph of N launches of `fn` and N (see runners.engine.graphs for how N is chosen)."""
    eager = CudaEventSource(fn, torch_device=device.torch_device, flusher=None, sync=sync)
    graphs.warm_on_side_stream(fn, device.torch_device)
    if settings.graph_launches > 0:
        launches = settings.graph_launches
        return graphs.capture(fn, launches, device.torch_device), launches
    estimate_ms = sorted(eager.time_once_ms() for _ in range(GRAPH_ESTIMATE_CALLS))[GRAPH_ESTIMATE_CALLS // 2]
    launches = graphs.launches_for(estimate_ms)
    graph = graphs.capture(fn, launches, device.torch_device)
    replay = CudaEventSource(graph.replay, torch_device=device.torch_device, flusher=None, sync=sync)
    replay.call()  # the first replay uploads the graph
    replay_ms = replay.time_once_ms()
    if replay_ms < graphs.TARGET_REPLAY_MS / 2 and launches < graphs.MAX_GRAPH_LAUNCHES:
        better = graphs.launches_for(replay_ms / launches)
        if better > launches:
            del graph, replay
            launches = better
            graph = graphs.capture(fn, launches, device.torch_device)
    return graph, launches


def _graph_source(
    fn: Callable[[], object],
    device: DeviceInfo,
    settings: TimingSettings,
    flusher: Flusher | None,
    sync: Callable[[], None] | None,
    hold: StreamHold | None,
) -> CudaEventSource:
    """Capture N launches of `fn` and wrap the graph's replay as the timed unit."""
    graph, launches = _sized_graph(fn, device, settings, sync)
    return CudaEventSource(
        graph.replay,
        torch_device=device.torch_device,
        flusher=flusher,
        sync=sync,
        launches_per_sample=launches,
        hold=hold,
        pace=settings.pace,
    )


def _host_launch_source(
    fn: Callable[[], object],
    device: DeviceInfo,
    settings: TimingSettings,
    timing_mode: str,
    sync: Callable[[], None] | None,
    calls_per_sample: int | None = None,
) -> HostLaunchSource:
    """Host time per launch: `calls_per_sample` (default HOST_LAUNCHES_PER_SAMPLE) eager calls, or one
    replay of a graph of N."""
    synchronize = _synchronizer(device, sync)
    pace = settings.pace
    if timing_mode == TimingMode.GRAPH:
        graph, launches = _sized_graph(fn, device, settings, sync)
        return HostLaunchSource(graph.replay, synchronize=synchronize, calls_per_sample=1, launches_per_call=launches,
                                pace=pace)
    return HostLaunchSource(fn, synchronize=synchronize, calls_per_sample=calls_per_sample or HOST_LAUNCHES_PER_SAMPLE,
                            pace=pace)


@contextlib.contextmanager
def _on_device(device: DeviceInfo) -> Iterator[None]:
    """Make `device` torch's current CUDA device for the duration (no-op on a CPU)."""
    if not device.is_cuda:
        yield
        return
    import torch

    with torch.cuda.device(torch.device(device.torch_device)):
        yield
