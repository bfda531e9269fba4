"""The adaptive stopping rule: sample in batches until the median is known well enough.

Sampling stops at the first batch boundary where one of these holds, checked in this order:
- `converged`: the 95 % CI of the median has a half-width <= `target_precision` x median;
- `clock_resolution`: the whole 95 % CI of the median (high - low) is no wider than the clock's
  resolution (`resolution_ms`, per sample). Quantised samples (CUDA events tick in steps of about
  0.5 us) put the CI's ends on two neighbouring steps, and more samples cannot narrow it further:
  the median is then known as well as the clock can tell;
- `noise_settled`: the noise estimate has itself stopped moving. The noise is the relative standard
  deviation of all samples so far, tracked after every sample; once more than NOISE_MIN_HISTORY
  estimates exist, the last NOISE_HISTORY of them are compared with the current one, and when
  their relative spread around it is below NOISE_SETTLED_REL, more samples would only describe the
  same noise again (an inherently noisy case ends here instead of at `max_time`);
- `max_samples`: `max_samples` samples taken;
- `max_time`: `max_time_ms` elapsed (wall time of the sampling phase, overheads included).
The first three (the converging exits) also need at least `min_samples` samples and `min_time_ms`
elapsed. Which exit fired is recorded as the measurement's stop reason.

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
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rooflab.record import Statistics
from rooflab.runners.engine.stats import summarize
from rooflab.suite.timing import TimingSettings
from rooflab.vocab import StopReason

GROWTH_FRACTION = 0.25  # each later batch adds ~this fraction of the samples taken so far
NOISE_HISTORY = 512  # noise estimates kept (one per sample, the newest)
NOISE_MIN_HISTORY = 64  # more than this many estimates before `noise_settled` is considered
NOISE_SETTLED_REL = 0.05  # relative spread of the kept estimates around the current one
# a CI is "no wider than the resolution" up to float rounding of the quantised values
_RESOLUTION_SLACK = 1e-9

TakeBatch = Callable[[int], Sequence[float]]  # k -> k samples in ms


@dataclass(frozen=True)
class SamplingOutcome:
    samples_ms: tuple[float, ...]
    stats: Statistics
    stop_reason: StopReason
    elapsed_ms: float  # wall time of the sampling phase
    batches: int  # how many times the stopping rule was evaluated


class NoiseTracker:
    """Relative standard deviation (Bessel-corrected) of the samples so far, after every sample.

    Welford's online update; the newest NOISE_HISTORY finite estimates are kept."""

    def __init__(self, history: int = NOISE_HISTORY) -> None:
        self.estimates: deque[float] = deque(maxlen=history)
        self._n = 0
        self._mean = 0.0
        self._m2 = 0.0

    def add(self, samples_ms: Sequence[float]) -> None:
        for x in samples_ms:
            self._n += 1
            delta = x - self._mean
            self._mean += delta / self._n
            self._m2 += delta * (x - self._mean)
            if self._n > 1 and self._mean > 0:
                rel = math.sqrt(self._m2 / (self._n - 1)) / self._mean
                if math.isfinite(rel):
                    self.estimates.append(rel)

    def settled(self, *, min_history: int = NOISE_MIN_HISTORY, max_rel: float = NOISE_SETTLED_REL) -> bool:
        """True when more than `min_history` estimates exist and their spread around the current
        one, relative to it, is below `max_rel`."""
        m = len(self.estimates)
        if m <= min_history:
            return False
        current = self.estimates[-1]
        if current <= 0:
            return False  # no noise at all: the CI exits decide
        spread = math.sqrt(sum((v - current) ** 2 for v in self.estimates) / (m - 1))
        return spread / current < max_rel


def sample_until_stable(
    take_batch: TakeBatch,
    settings: TimingSettings,
    *,
    resolution_ms: float = 0.0,
    clock_s: Callable[[], float] = time.perf_counter,
) -> SamplingOutcome:
    """Call `take_batch(k)` with growing k until the stopping rule holds; see the module doc.

    `resolution_ms` is the smallest step the sample clock can show, per sample (0: unknown, the
    `clock_resolution` exit is off)."""
    (outcome,) = sample_until_all_stable(lambda k: (take_batch(k),), settings, series=1, resolution_ms=resolution_ms,
                                         clock_s=clock_s)
    return outcome


def sample_until_all_stable(
    take_batch: Callable[[int], Sequence[Sequence[float]]],
    settings: TimingSettings,
    *,
    series: int,
    resolution_ms: float = 0.0,
    clock_s: Callable[[], float] = time.perf_counter,
) -> tuple[SamplingOutcome, ...]:
    """The stopping rule over `series` series sampled together (the pairs of one round of the link
    matrix, runners.engine.pair_timing): `take_batch(k)` gives k samples of every series, and
    sampling stops at the first batch boundary where every series has an exit of its own, which
    each keeps (the time and count bounds hold for all of them at once)."""
    if resolution_ms < 0:
        raise ValueError("resolution_ms must be >= 0")
    samples: list[list[float]] = [[] for _ in range(series)]
    noises = [NoiseTracker() for _ in range(series)]
    start = clock_s()
    k = min(max(1, settings.min_samples), settings.max_samples)
    batches = 0
    while True:
        batch = [list(b) for b in take_batch(k)]
        if len(batch) != series or any(len(b) != k for b in batch):
            got = ", ".join(str(len(b)) for b in batch)
            raise RuntimeError(f"sample source returned {got} samples, expected {k}"
                               + (f" for each of {series} series" if series > 1 else ""))
        for own, noise, new in zip(samples, noises, batch, strict=True):
            own.extend(new)
            noise.add(new)
        batches += 1
        elapsed_ms = (clock_s() - start) * 1e3
        n = len(samples[0])
        stats = [summarize(own) for own in samples]
        reasons = [stop_reason(st, n, elapsed_ms, settings, resolution_ms=resolution_ms, noise=noise)
                   for st, noise in zip(stats, noises, strict=True)]
        if all(reason is not None for reason in reasons):
            return tuple(SamplingOutcome(tuple(own), st, reason, elapsed_ms, batches)
                         for own, st, reason in zip(samples, stats, reasons, strict=True) if reason is not None)
        k = next_batch_size(n, elapsed_ms, settings)


def stop_reason(
    stats: Statistics,
    n: int,
    elapsed_ms: float,
    s: TimingSettings,
    *,
    resolution_ms: float = 0.0,
    noise: NoiseTracker | None = None,
) -> StopReason | None:
    """The exit that holds after n samples in `elapsed_ms`, in the module doc's order, or None."""
    if n >= s.min_samples and elapsed_ms >= s.min_time_ms:
        rel = stats.rel_ci_halfwidth
        if rel is not None and rel <= s.target_precision:
            return StopReason.CONVERGED
        if resolution_ms > 0 and stats.ci_low_ms is not None and stats.ci_high_ms is not None:
            if stats.ci_high_ms - stats.ci_low_ms <= resolution_ms * (1 + _RESOLUTION_SLACK):
                return StopReason.CLOCK_RESOLUTION
        if noise is not None and noise.settled():
            return StopReason.NOISE_SETTLED
    if n >= s.max_samples:
        return StopReason.MAX_SAMPLES
    if elapsed_ms >= s.max_time_ms:
        return StopReason.MAX_TIME
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
