"""The group timing's arithmetic on a fake clock, in one process: a stream sample is one stream's
clock / N, the ranks' figures are averaged (nccl-tests' default) and a planted slow rank stays
visible beside the mean; an isolated sample is the slowest rank's time of one call. The group is
faked (`FakeControl`: rank 0 of two, rank 1's figures planted as a multiple of rank 0's)."""
from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from rooflab.db.collectives import straggler
from rooflab.runners.engine import group_timing
from rooflab.runners.engine.group_timing import (
    STREAM_MAX_CALLS,
    STREAM_MIN_CALLS,
    STREAM_SAMPLE_MS,
    GroupTiming,
    combine,
    stream_calls,
    time_group,
)
from rooflab.suite.timing import TimingSettings
from rooflab.vocab import CollectiveMode, Pace


class FakeClock:
    """perf_counter_ns that moves only when the code under test does something."""

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


class FakeControl:
    """Rank 0 of a group of two: decisions and barriers local; rank 1's gathered figures are rank
    0's times `slow_factor`. Counts the barriers, and moves the clock inside them (outside any
    sample's clock: a barrier must never be timed)."""

    rank, size = 0, 2

    def __init__(self, clock: FakeClock, slow_factor: float) -> None:
        self.clock, self.slow_factor, self.barriers = clock, slow_factor, 0

    def barrier(self) -> None:
        self.barriers += 1
        self.clock.ns += 7_000_000  # 7 ms of waiting for the other rank

    def decide(self, value: int) -> int:
        return value

    def gather(self, values: Sequence[float]) -> list[list[float]]:
        return [list(values), [v * self.slow_factor for v in values]]


def _time(mode: CollectiveMode, call_ns: int, slow_factor: float,
          monkeypatch: pytest.MonkeyPatch) -> tuple[GroupTiming, FakeControl, list[int]]:
    clock = FakeClock()
    monkeypatch.setattr(group_timing.time, "perf_counter_ns", clock)
    control = FakeControl(clock, slow_factor)
    calls: list[int] = [0]

    def fn() -> None:
        calls[0] += 1
        clock.ns += call_ns

    def reset() -> None:
        clock.ns += 3_000_000  # restoring the input: outside the clock

    settings = TimingSettings(warmup_ms=0, warmup_calls=3, min_samples=6, max_samples=6, min_time_ms=0)
    timing = time_group(fn, reset=reset, control=control, torch_device="cpu",
                        settings=settings, mode=mode)
    assert timing is not None
    return timing, control, calls


def test_a_stream_sample_is_its_clock_over_n_averaged_over_the_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    call_ms = random.uniform(0.05, 0.5)
    slow = random.uniform(1.5, 3.0)
    timing, control, calls = _time(CollectiveMode.STREAM, round(call_ms * 1e6), slow, monkeypatch)
    n = stream_calls(round(call_ms * 1e6) / 1e6)
    assert timing.calls_per_sample == n and n * call_ms == pytest.approx(STREAM_SAMPLE_MS, rel=0.1)
    # every sample: reset and barrier outside the clock, then n calls under it, / n: exactly call_ms
    mine = round(call_ms * 1e6) / 1e6
    assert timing.rank_samples_ms[0] == pytest.approx([mine] * 6, rel=1e-9)
    assert timing.rank_samples_ms[1] == pytest.approx([mine * slow] * 6, rel=1e-9)
    assert timing.samples_ms == pytest.approx([mine * (1 + slow) / 2] * 6, rel=1e-9)  # the ranks' mean
    assert timing.stats.median_ms == pytest.approx(mine * (1 + slow) / 2, rel=1e-9)
    # the slow rank stays visible beside the mean
    rank, excess = straggler(timing.rank_medians_ms)
    assert rank == 1 and excess == pytest.approx(slow - 1, rel=1e-9)
    # 3 warmup calls in one stream, then 6 streams of n calls; one barrier per stream
    assert calls[0] == 3 + 6 * n and control.barriers == 1 + 6
    assert timing.mode is CollectiveMode.STREAM and timing.pace == Pace.BACK_TO_BACK


def test_an_isolated_sample_is_the_slowest_ranks_time_of_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    call_ms = random.uniform(0.05, 0.5)
    slow = random.uniform(1.5, 3.0)
    timing, control, calls = _time(CollectiveMode.ISOLATED, round(call_ms * 1e6), slow, monkeypatch)
    mine = round(call_ms * 1e6) / 1e6
    assert timing.calls_per_sample == 1 and calls[0] == 3 + 6 and control.barriers == 3 + 6
    assert timing.samples_ms == pytest.approx([mine * slow] * 6, rel=1e-9)  # the slowest rank
    assert timing.rank_medians_ms == pytest.approx((mine, mine * slow), rel=1e-9)
    assert timing.mode is CollectiveMode.ISOLATED and timing.pace == Pace.BARRIER


def test_combine_and_the_stream_length_known_answers() -> None:
    per_rank = [[1.0, 2.0, 4.0], [3.0, 2.0, 8.0], [2.0, 5.0, 0.0]]
    assert combine(per_rank, CollectiveMode.STREAM) == pytest.approx([2.0, 3.0, 4.0])
    assert combine(per_rank, CollectiveMode.ISOLATED) == [3.0, 5.0, 8.0]
    assert stream_calls(0.1) == round(STREAM_SAMPLE_MS / 0.1)
    assert stream_calls(STREAM_SAMPLE_MS * 10) == STREAM_MIN_CALLS  # a long call: still a stream
    assert stream_calls(1e-9) == STREAM_MAX_CALLS and stream_calls(0.0) == STREAM_MAX_CALLS


def test_a_long_call_still_streams_nccl_tests_twenty_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted group whose first calls after a barrier run fast (the ranks start aligned and idle,
    as a busy machine's scheduler favours a process that has just slept) and whose later calls are
    slower: nccl-tests' loop of 20 calls reads their mix, and so must a stream of calls too long for
    the time target to ask more than a few of."""
    clock = FakeClock()
    monkeypatch.setattr(group_timing.time, "perf_counter_ns", clock)
    control = FakeControl(clock, slow_factor=1.0)
    fast_ns, steady_ns = random.randint(500_000, 1_500_000), random.randint(12_000_000, 15_000_000)
    since_barrier = [0]
    barrier = control.barrier

    def barrier_and_count() -> None:
        since_barrier[0] = 0
        barrier()

    monkeypatch.setattr(control, "barrier", barrier_and_count)

    def fn() -> None:
        clock.ns += fast_ns if since_barrier[0] < 2 else steady_ns
        since_barrier[0] += 1

    settings = TimingSettings(warmup_ms=0, warmup_calls=3, min_samples=6, max_samples=6, min_time_ms=0)
    timing = time_group(fn, reset=None, control=control, torch_device="cpu",
                        settings=settings, mode=CollectiveMode.STREAM)
    assert timing is not None
    nccl_tests_loop_ms = (2 * fast_ns + 18 * steady_ns) / 20 / 1e6  # its default: -n 20 calls per timed loop
    assert timing.calls_per_sample == STREAM_MIN_CALLS == 20
    assert timing.stats.median_ms == pytest.approx(nccl_tests_loop_ms, rel=1e-9)
