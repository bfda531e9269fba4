"""The timing engine: one method, two clocks (CUDA events on a GPU, perf_counter on a CPU).

`measure` does, in order:
1. the first call, timed apart on the host (with synchronisation): `first_call_ms` holds compile,
   autotune and allocator warmup, which never enter the samples;
2. warmup, discarded, lasting at least `settings.warmup_ms` and `settings.warmup_calls` units,
   each unit run exactly as a sample is (flush included in cold mode) and completed;
3. sampling in batches under the adaptive stopping rule (`runners.stopping`); each sample is one
   call (`launch` mode) or one replay of a CUDA graph of N launches divided by N (`graph` mode);
   in `cold` mode the cache is flushed before each sample, outside the timed region.
Raw samples are returned with their statistics.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from runners import graphs
from runners.flush import Flusher, make_flusher
from runners.stats import SampleStats
from runners.stopping import sample_until_stable
from runners.timers import CudaEventSource, PerfCounterSource
from suite.case import CACHE_MODES, TIMING_MODES
from suite.device import DeviceInfo
from suite.timing import TimingSettings

GRAPH_ESTIMATE_CALLS = 5  # eager launches timed to size a graph


class GraphModeUnavailable(RuntimeError):
    """Graph mode was asked for where it cannot run (a CPU device, or an op that is not graph-safe)."""


@dataclass(frozen=True)
class TimingResult:
    samples_ms: tuple[float, ...]  # per launch: graph replay times are divided by launches_per_sample
    stats: SampleStats
    stop_reason: str  # "converged" | "max_time" | "max_samples"
    first_call_ms: float  # host wall time of the first call, synchronised (compile, autotune, ...)
    warmup_calls: int  # discarded units (calls in launch mode, graph replays in graph mode)
    warmup_ms: float  # host wall time of the warmup
    clock: str  # "perf_counter" | "cuda_events"
    timing_mode: str  # "launch" | "graph"
    cache: str  # "cold" | "hot"
    launches_per_sample: int  # 1 in launch mode; N launches per replayed graph in graph mode
    flush_bytes: int  # bytes written before each sample (0 in hot mode)
    sampling_ms: float  # host wall time of the sampling phase (flushes and overheads included)


def measure(
    fn: Callable[[], Any],
    *,
    device: DeviceInfo,
    settings: TimingSettings,
    cache: str,
    timing_mode: str,
    sync: Callable[[], None] | None = None,
    graph_safe: bool = True,
    flusher: Flusher | None = None,
) -> TimingResult:
    """Time `fn` on `device`; see the module doc. `flusher` replaces the default one (cold mode)."""
    if cache not in CACHE_MODES:
        raise ValueError(f"cache must be one of {CACHE_MODES}, got {cache!r}")
    if timing_mode not in TIMING_MODES:
        raise ValueError(f"timing_mode must be one of {TIMING_MODES}, got {timing_mode!r}")
    if timing_mode == "graph":
        if not device.is_cuda:
            raise GraphModeUnavailable(f"graph timing needs a CUDA device, not {device.torch_device}")
        if not graph_safe:
            raise GraphModeUnavailable("this op cannot be captured in a CUDA graph (graph_safe=False)")
    with _on_device(device):
        used_flusher = (flusher or make_flusher(device)) if cache == "cold" else None
        first_call_ms = _first_call_ms(fn, device, sync)
        if not device.is_cuda:
            source: Any = PerfCounterSource(fn, flusher=used_flusher, sync=sync)
        elif timing_mode == "launch":
            source = CudaEventSource(fn, torch_device=device.torch_device, flusher=used_flusher, sync=sync)
        else:
            source = _graph_source(fn, device, settings, used_flusher, sync)
        warmup_calls, warmup_ms = warm_up(source.call, settings)
        outcome = sample_until_stable(source.take_batch, settings)
    return TimingResult(
        samples_ms=outcome.samples_ms,
        stats=outcome.stats,
        stop_reason=outcome.stop_reason,
        first_call_ms=first_call_ms,
        warmup_calls=warmup_calls,
        warmup_ms=warmup_ms,
        clock=source.clock,
        timing_mode=timing_mode,
        cache=cache,
        launches_per_sample=source.launches_per_sample,
        flush_bytes=used_flusher.flush_bytes if used_flusher is not None else 0,
        sampling_ms=outcome.elapsed_ms,
    )


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


def _first_call_ms(fn: Callable[[], Any], device: DeviceInfo, sync: Callable[[], None] | None) -> float:
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


def _graph_source(
    fn: Callable[[], Any],
    device: DeviceInfo,
    settings: TimingSettings,
    flusher: Flusher | None,
    sync: Callable[[], None] | None,
) -> CudaEventSource:
    """Capture N launches of `fn` and wrap the graph's replay as the timed unit."""
    eager = CudaEventSource(fn, torch_device=device.torch_device, flusher=None, sync=sync)
    graphs.warm_on_side_stream(fn, device.torch_device)
    if settings.graph_launches > 0:
        launches = settings.graph_launches
        graph = graphs.capture(fn, launches, device.torch_device)
    else:
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
    return CudaEventSource(
        graph.replay,
        torch_device=device.torch_device,
        flusher=flusher,
        sync=sync,
        launches_per_sample=launches,
    )


@contextlib.contextmanager
def _on_device(device: DeviceInfo) -> Iterator[None]:
    """Make `device` torch's current CUDA device for the duration (no-op on a CPU)."""
    if not device.is_cuda:
        yield
        return
    import torch

    with torch.cuda.device(torch.device(device.torch_device)):
        yield
