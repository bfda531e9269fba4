"""The adaptive stopping rule driven by synthetic timers on a fake clock."""
from __future__ import annotations

import numpy as np
import pytest

from rooflab.runners.engine.stopping import NOISE_MIN_HISTORY, NoiseTracker, next_batch_size, sample_until_stable
from rooflab.suite.timing import TimingSettings


class SyntheticTimer:
    """Draws sample times from `draw` and advances a fake clock by each sample plus an overhead."""

    def __init__(self, draw, overhead_ms: float = 0.05) -> None:
        self.draw = draw
        self.overhead_ms = overhead_ms
        self.now_s = 100.0
        self.batch_sizes: list[int] = []

    def clock_s(self) -> float:
        return self.now_s

    def take_batch(self, k: int) -> list[float]:
        self.batch_sizes.append(k)
        out = [float(self.draw()) for _ in range(k)]
        self.now_s += (sum(out) + k * self.overhead_ms) / 1e3
        return out


class DriftingDraw:
    """`draw()` scaled by 1 + per_sample x (samples drawn so far): a clock that keeps drifting, so
    neither the median nor the noise estimate ever settles."""

    def __init__(self, draw, per_sample: float) -> None:
        self.draw = draw
        self.per_sample = per_sample
        self.i = 0

    def __call__(self) -> float:
        self.i += 1
        return self.draw() * (1.0 + self.per_sample * self.i)


def quantised(draw, step_ms: float):
    """`draw()` rounded to the nearest multiple of `step_ms` (a clock that ticks in steps)."""
    return lambda: round(draw() / step_ms) * step_ms


def run(timer: SyntheticTimer, settings: TimingSettings, resolution_ms: float = 0.0):
    return sample_until_stable(timer.take_batch, settings, resolution_ms=resolution_ms, clock_s=timer.clock_s)


def test_converges_on_a_low_noise_timer() -> None:
    rng = np.random.default_rng(1)
    timer = SyntheticTimer(lambda: rng.normal(1.0, 0.001))  # 1 ms +- 0.1 %
    out = run(timer, TimingSettings(min_samples=10, min_time_ms=50, max_time_ms=3000, target_precision=0.005))
    assert out.stop_reason == "converged"
    assert out.stats.rel_ci_halfwidth <= 0.005
    assert out.stats.median_ms == pytest.approx(1.0, rel=0.002)
    assert out.elapsed_ms >= 50  # min_time respected
    assert out.elapsed_ms < 100  # ... and not much more: it stopped at the first check after it
    assert out.batches == len(timer.batch_sizes) <= 3


def test_hits_max_time_on_a_heavy_tailed_timer() -> None:
    rng = np.random.default_rng(2)
    timer = SyntheticTimer(lambda: 1.0 + rng.pareto(1.1))  # heavy tail, infinite variance
    settings = TimingSettings(min_samples=10, min_time_ms=50, max_time_ms=500, target_precision=1e-5, max_samples=10**6)
    out = run(timer, settings)
    assert out.stop_reason == "max_time"
    assert out.elapsed_ms >= 500
    assert out.stats.rel_ci_halfwidth > 1e-5
    assert out.elapsed_ms < 1.5 * 500  # a single tail sample may overshoot, a whole batch does not


def test_max_time_overshoot_is_about_one_sample_on_a_noisy_timer() -> None:
    rng = np.random.default_rng(5)
    draw = DriftingDraw(lambda: rng.lognormal(0.0, 0.5), per_sample=0.002)
    timer = SyntheticTimer(draw)
    settings = TimingSettings(min_samples=10, min_time_ms=0, max_time_ms=400, target_precision=1e-6, max_samples=10**6)
    out = run(timer, settings)
    assert out.stop_reason == "max_time"
    per_sample = out.elapsed_ms / out.stats.n_samples
    assert 400 <= out.elapsed_ms <= 400 + 5 * per_sample  # batches are cut to end near max_time


def test_max_samples_caps_sampling() -> None:
    rng = np.random.default_rng(3)
    timer = SyntheticTimer(lambda: rng.normal(1.0, 0.2))
    settings = TimingSettings(min_samples=10, max_samples=37, min_time_ms=0, max_time_ms=10**6, target_precision=1e-6)
    out = run(timer, settings)
    assert out.stop_reason == "max_samples"
    assert out.stats.n_samples == 37 == sum(timer.batch_sizes)


def test_min_samples_respected_even_when_converged_earlier() -> None:
    timer = SyntheticTimer(lambda: 2.0)  # no noise at all: CI width 0 from 6 samples on
    out = run(timer, TimingSettings(min_samples=40, min_time_ms=0, max_time_ms=10**6))
    assert out.stop_reason == "converged"
    assert out.stats.n_samples == 40
    assert timer.batch_sizes == [40]


def test_min_samples_is_a_floor_even_past_max_time() -> None:
    timer = SyntheticTimer(lambda: 50.0)  # each sample lasts longer than the whole time budget
    out = run(timer, TimingSettings(min_samples=10, min_time_ms=0, max_time_ms=20))
    assert out.stats.n_samples == 10 and out.stop_reason in ("converged", "max_time")
    noisy = np.random.default_rng(6)
    out = run(SyntheticTimer(lambda: noisy.normal(50.0, 10.0)),
              TimingSettings(min_samples=10, min_time_ms=0, max_time_ms=20))
    assert out.stats.n_samples == 10 and out.stop_reason == "max_time" and out.batches == 1


def test_min_time_respected_even_when_converged_earlier() -> None:
    timer = SyntheticTimer(lambda: 2.0, overhead_ms=0.0)
    out = run(timer, TimingSettings(min_samples=10, min_time_ms=300, max_time_ms=10**6))
    assert out.stop_reason == "converged"
    assert out.elapsed_ms >= 300
    # the second batch is sized to reach min_time (one more sample may come from rounding)
    assert 150 <= out.stats.n_samples <= 151
    assert len(timer.batch_sizes) == 2


def test_ci_is_checked_once_per_batch_with_geometric_growth() -> None:
    rng = np.random.default_rng(4)
    timer = SyntheticTimer(DriftingDraw(lambda: rng.normal(1.0, 0.01), per_sample=0.002))
    out = run(timer,
              TimingSettings(min_samples=10, min_time_ms=0, max_time_ms=10**6, max_samples=1000, target_precision=1e-9))
    assert out.stop_reason == "max_samples"
    assert out.batches == len(timer.batch_sizes)
    assert out.batches < 40  # ~log_{1.25}(100) checks, not one per sample
    assert all(b >= a for a, b in zip(timer.batch_sizes[1:-1], timer.batch_sizes[2:-1], strict=False))


def test_next_batch_size_bounds() -> None:
    s = TimingSettings(min_samples=10, min_time_ms=0, max_time_ms=100, max_samples=1000)
    assert next_batch_size(100, 50.0, s) == 25  # a quarter more
    assert next_batch_size(100, 99.0, s) == 1  # max_time nearly reached: at least one more sample
    assert next_batch_size(100, 90.0, s) == 11  # cut to what fits in the 10 ms left (0.9 ms each)
    assert next_batch_size(990, 1.0, s) == 10  # cut to max_samples


def test_source_returning_wrong_count_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="expected 10"):
        sample_until_stable(lambda k: [1.0], TimingSettings(min_samples=10))


EVENT_STEP_MS = 0.0005  # CUDA events tick in steps of about 0.5 us
DEFAULTS = TimingSettings()  # min 10 samples, 50 ms, 0.5 % target, 3 s budget


def test_quantised_timer_between_two_steps_ends_at_the_clock_resolution() -> None:
    # a 3.25 us kernel with 0.1 us of jitter: every sample reads 3.0 or 3.5 us, about half each, so
    # the median's CI spans one step (7.7 % of the median) forever and 0.5 % is never reached
    rng = np.random.default_rng(11)
    timer = SyntheticTimer(quantised(lambda: rng.normal(0.00325, 0.0001), EVENT_STEP_MS), overhead_ms=0.01)
    out = run(timer, DEFAULTS, resolution_ms=EVENT_STEP_MS)
    assert out.stop_reason == "clock_resolution"
    assert out.stats.ci_high_ms - out.stats.ci_low_ms == pytest.approx(EVENT_STEP_MS)
    assert out.stats.rel_ci_halfwidth > DEFAULTS.target_precision
    assert out.elapsed_ms < 2 * DEFAULTS.min_time_ms  # the first check past min_time, not max_time


def test_quantised_timer_without_a_known_resolution_ends_when_the_noise_settles() -> None:
    rng = np.random.default_rng(12)
    timer = SyntheticTimer(quantised(lambda: rng.normal(0.00325, 0.0001), EVENT_STEP_MS), overhead_ms=0.01)
    out = run(timer, DEFAULTS)
    assert out.stop_reason == "noise_settled"
    assert out.elapsed_ms < DEFAULTS.max_time_ms / 2


def test_stationary_noisy_timer_ends_when_the_noise_settles() -> None:
    rng = np.random.default_rng(13)
    timer = SyntheticTimer(lambda: rng.lognormal(0.0, 0.3))  # 30 % noise: 0.5 % needs ~10^4 samples
    settings = TimingSettings(min_samples=10, min_time_ms=50, max_time_ms=30_000, target_precision=0.005,
                              max_samples=10**6)
    out = run(timer, settings, resolution_ms=EVENT_STEP_MS)
    assert out.stop_reason == "noise_settled"
    assert out.stats.n_samples > NOISE_MIN_HISTORY
    assert out.stats.median_ms == pytest.approx(1.0, rel=0.1)
    assert out.elapsed_ms < settings.max_time_ms / 4


def test_drifting_timer_is_never_called_converged_or_settled() -> None:
    rng = np.random.default_rng(14)
    # a 30 us kernel (60 clock steps) that slows by 0.1 % per sample: the median keeps moving and
    # the noise estimate keeps growing, so no exit but max_time may fire
    draw = DriftingDraw(quantised(lambda: rng.normal(0.030, 0.0003), EVENT_STEP_MS), per_sample=0.001)
    timer = SyntheticTimer(draw, overhead_ms=0.01)
    out = run(timer, TimingSettings(min_samples=10, min_time_ms=10, max_time_ms=60, max_samples=10**6),
              resolution_ms=EVENT_STEP_MS)
    assert out.stop_reason == "max_time"
    assert out.stats.n_samples > 2 * NOISE_MIN_HISTORY  # the settled check had its chances


def test_resolution_exit_needs_min_samples_and_min_time() -> None:
    timer = SyntheticTimer(quantised(lambda: 0.00325 + 1e-5 * np.random.default_rng(0).standard_normal(),
                                     EVENT_STEP_MS))
    out = run(timer, TimingSettings(min_samples=30, min_time_ms=100, max_time_ms=10**5), resolution_ms=EVENT_STEP_MS)
    assert out.stats.n_samples >= 30 and out.elapsed_ms >= 100


def test_noise_tracker_matches_numpy_and_settles_only_past_its_history() -> None:
    rng = np.random.default_rng(15)
    x = rng.normal(1.0, 0.1, 200)
    tracker = NoiseTracker()
    tracker.add(x[:NOISE_MIN_HISTORY].tolist())
    assert tracker.estimates[-1] == pytest.approx(x[:NOISE_MIN_HISTORY].std(ddof=1) / x[:NOISE_MIN_HISTORY].mean())
    assert len(tracker.estimates) == NOISE_MIN_HISTORY - 1 and not tracker.settled()
    tracker.add(x[NOISE_MIN_HISTORY:].tolist())
    assert tracker.estimates[-1] == pytest.approx(x.std(ddof=1) / x.mean())
