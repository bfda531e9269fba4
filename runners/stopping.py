"""The adaptive stopping rule: sample in batches until the median is known well enough.

Sampling stops at the first batch boundary where one of these holds, checked in this order:
- `converged`: at least `min_samples` samples, at least `min_time_ms` elapsed, and the 95 % CI of
  the median has a half-width <= `target_precision` x median;
- `max_samples`: `max_samples` samples taken;
- `max_time`: `max_time_ms` elapsed (wall time of the sampling phase, overheads included).

`min_samples` is a floor that outranks `max_time_ms`: the first batch always takes `min_samples`
samples (a slow case overruns `max_time_ms` rather than report statistics of two or three samples).
The CI is evaluated once per batch, not per sample. The first batch is `min_samples` long; later
batches add about a quarter of the samples so far (so the number of checks grows with log n), are
long enough to reach `min_time_ms` when it is still ahead, and are cut so that, at the observed
time per sample, they end by `max_time_ms`.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from runners.stats import SampleStats, summarize
from suite.timing import TimingSettings

GROWTH_FRACTION = 0.25  # each later batch adds ~this fraction of the samples taken so far

TakeBatch = Callable[[int], Sequence[float]]  # k -> k samples in ms


@dataclass(frozen=True)
class SamplingOutcome:
    samples_ms: tuple[float, ...]
    stats: SampleStats
    stop_reason: str  # "converged" | "max_time" | "max_samples"
    elapsed_ms: float  # wall time of the sampling phase
    batches: int  # how many times the stopping rule was evaluated


def sample_until_stable(
    take_batch: TakeBatch,
    settings: TimingSettings,
    *,
    clock_s: Callable[[], float] = time.perf_counter,
) -> SamplingOutcome:
    """Call `take_batch(k)` with growing k until the stopping rule holds; see the module doc."""
    _check_settings(settings)
    samples: list[float] = []
    start = clock_s()
    k = min(max(1, settings.min_samples), settings.max_samples)
    batches = 0
    while True:
        batch = list(take_batch(k))
        if len(batch) != k:
            raise RuntimeError(f"sample source returned {len(batch)} samples, expected {k}")
        samples.extend(batch)
        batches += 1
        elapsed_ms = (clock_s() - start) * 1e3
        n = len(samples)
        stats = summarize(samples)
        reason = _stop_reason(stats, n, elapsed_ms, settings)
        if reason is not None:
            return SamplingOutcome(tuple(samples), stats, reason, elapsed_ms, batches)
        k = next_batch_size(n, elapsed_ms, settings)


def _stop_reason(stats: SampleStats, n: int, elapsed_ms: float, s: TimingSettings) -> str | None:
    rel = stats.rel_ci_halfwidth
    if n >= s.min_samples and elapsed_ms >= s.min_time_ms and rel is not None and rel <= s.target_precision:
        return "converged"
    if n >= s.max_samples:
        return "max_samples"
    if elapsed_ms >= s.max_time_ms:
        return "max_time"
    return None


def next_batch_size(n: int, elapsed_ms: float, s: TimingSettings) -> int:
    """Samples to take before the next check, given n samples taken in `elapsed_ms`."""
    per_sample_ms = max(elapsed_ms / n, 1e-6)
    k = max(1, math.ceil(n * GROWTH_FRACTION), s.min_samples - n)
    if elapsed_ms < s.min_time_ms:
        k = max(k, math.ceil((s.min_time_ms - elapsed_ms) / per_sample_ms))
    fits = math.floor((s.max_time_ms - elapsed_ms) / per_sample_ms)
    k = min(k, max(1, fits), s.max_samples - n)
    return max(1, k)


def _check_settings(s: TimingSettings) -> None:
    if s.min_samples < 1 or s.max_samples < 1:
        raise ValueError("min_samples and max_samples must be >= 1")
    if s.max_time_ms <= 0:
        raise ValueError("max_time_ms must be > 0")
    if s.target_precision <= 0:
        raise ValueError("target_precision must be > 0")
