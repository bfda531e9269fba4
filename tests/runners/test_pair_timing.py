"""A round of the link matrix timed on a fake group, in one process: each pair's sample is its two
ends' figures combined as the mode combines a collective's ranks, every pair keeps its own series and
its own exit of the stopping rule, and a stream's N is sized from the slowest rank (rank 0 may rest).
The group is faked (`FakeRound`: rank 0 of four, the other ranks' figures planted)."""
from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence

import pytest

from rooflab.runners.engine import group_timing
from rooflab.runners.engine.group_timing import stream_calls
from rooflab.runners.engine.pair_timing import RoundTiming, pair_samples, time_round
from rooflab.runners.engine.stopping import sample_until_all_stable
from rooflab.suite.timing import TimingSettings
from rooflab.vocab import CollectiveMode, StopReason


class FakeClock:
    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


class FakeRound:
    """Rank 0 of a group of four. Its own figures are what its clock read; rank r's gathered figures
    are `planted[r]()` each (ms per call), so a rank can be steady, slow or noisy."""

    rank, size = 0, 4

    def __init__(self, clock: FakeClock, planted: dict[int, Callable[[], float]]) -> None:
        self.clock, self.planted, self.barriers = clock, planted, 0

    def barrier(self) -> None:
        self.barriers += 1
        self.clock.ns += 5_000_000  # waiting for the others: outside every sample's clock

    def decide(self, value: int) -> int:
        return value

    def gather(self, values: Sequence[float]) -> list[list[float]]:
        return [list(values)] + [[self.planted[r]() for _ in values] for r in range(1, self.size)]


def _round(pairs: Sequence[tuple[int, int]], call_ns: int, planted: dict[int, Callable[[], float]],
           mode: CollectiveMode, monkeypatch: pytest.MonkeyPatch, settings: TimingSettings) -> RoundTiming:
    clock = FakeClock()
    monkeypatch.setattr(group_timing.time, "perf_counter_ns", clock)
    control = FakeRound(clock, planted)

    def fn() -> None:
        clock.ns += call_ns

    timing = time_round(fn, pairs=pairs, control=control, torch_device="cpu", settings=settings, mode=mode)
    assert timing is not None
    return timing


def test_each_pair_is_its_two_ends_and_keeps_its_own_series_and_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Round {(0, 3), (1, 2)}: rank 0 times its own calls, rank 3 is planted steady and twice as slow,
    ranks 1 and 2 noisy. Each pair's samples are its ends' mean (stream), the steady pair converges,
    the noisy one runs to the sample bound, and each keeps its own ends' medians."""
    call_ms = random.uniform(0.05, 0.2)
    call_ns = round(call_ms * 1e6)
    mine = call_ns / 1e6
    rng = random.Random()
    planted = {3: lambda: 2 * mine, 1: lambda: rng.uniform(1.0, 3.0), 2: lambda: rng.uniform(0.5, 4.0)}
    settings = TimingSettings(warmup_ms=0, warmup_calls=3, min_samples=6, max_samples=40, min_time_ms=0,
                              max_time_ms=1e9, target_precision=0.01)
    timing = _round(((0, 3), (1, 2)), call_ns, planted, CollectiveMode.STREAM, monkeypatch, settings)
    steady, noisy = timing.pairs
    assert steady.pair == (0, 3) and noisy.pair == (1, 2)
    assert steady.samples_ms == pytest.approx([1.5 * mine] * len(steady.samples_ms), rel=1e-9)
    assert steady.end_medians_ms == pytest.approx((mine, 2 * mine), rel=1e-9)
    assert steady.stop_reason == StopReason.CONVERGED and noisy.stop_reason == StopReason.MAX_SAMPLES
    # both pairs were sampled together, batch by batch: the steady one waited for the noisy one
    assert len(steady.samples_ms) == len(noisy.samples_ms) == 40
    assert all(0.75 <= s <= 3.5 for s in noisy.samples_ms)  # the mean of a 1-3 ms and a 0.5-4 ms figure
    assert noisy.stats.median_ms == pytest.approx(statistics.median(noisy.samples_ms))


def test_a_resting_rank_0_does_not_size_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """Round {(1, 3)} (one pair at a time): rank 0 rests (its calls take no time), the pair's calls take
    2 ms. N is sized from the slowest rank's warmup, not rank 0's; isolated, a sample is the slower end."""
    slow_ms = random.uniform(1.5, 3.0)
    planted = {1: lambda: slow_ms, 2: lambda: 0.0, 3: lambda: slow_ms / 2}
    settings = TimingSettings(warmup_ms=0, warmup_calls=2, min_samples=5, max_samples=5, min_time_ms=0)
    stream = _round(((1, 3),), 0, planted, CollectiveMode.STREAM, monkeypatch, settings)
    assert stream.calls_per_sample == stream_calls(slow_ms)
    (pair,) = stream.pairs
    assert pair.samples_ms == pytest.approx([0.75 * slow_ms] * 5) and pair.end_medians_ms == (slow_ms, slow_ms / 2)
    isolated = _round(((1, 3),), 0, planted, CollectiveMode.ISOLATED, monkeypatch, settings)
    (pair,) = isolated.pairs
    assert isolated.calls_per_sample == 1 and pair.samples_ms == pytest.approx([slow_ms] * 5)


def test_pair_samples_known_answers() -> None:
    per_rank = [[1.0, 2.0], [3.0, 6.0], [5.0, 2.0], [7.0, 10.0]]
    assert pair_samples(per_rank, [(0, 3), (1, 2)], CollectiveMode.STREAM) == [[4.0, 6.0], [4.0, 4.0]]
    assert pair_samples(per_rank, [(0, 3), (1, 2)], CollectiveMode.ISOLATED) == [[7.0, 10.0], [5.0, 6.0]]


def test_the_stopping_rule_over_several_series_refuses_a_short_batch() -> None:
    with pytest.raises(RuntimeError, match="returned 3, 2 samples, expected 3 for each of 2 series"):
        sample_until_all_stable(lambda k: ([1.0] * k, [1.0] * (k - 1)), TimingSettings(min_samples=3), series=2)
