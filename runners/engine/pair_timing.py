"""Timing one round of the link matrix: disjoint pairs of a group's ranks, all at once.

Every rank of the group runs `time_round` at once (runners/orchestration/rank_pairs.py), with its
call in the round: a send, a receive or both to its partner, or nothing when it rests that round.
A sample is taken as every collective's is, in the case's mode (runners.engine.group_timing): in a
stream, a barrier of the whole group and then each rank's N calls back to back under its own clock,
/ N; isolated, a barrier and one call. The pairs then run side by side, each with its own partner,
as a round-robin round does.

What differs from one collective: a round holds several measurements, one per pair. A pair's sample
is its two ends' figures combined as the mode combines a collective's ranks (stream: their mean,
nccl-tests' default; isolated: the slower end), every pair its own series. N of a stream is sized
from the slowest rank's warmup time per call (rank 0 may rest), and the stopping rule runs on every
pair's series at once (runners.engine.stopping.sample_until_all_stable): the round ends when every
pair's median is known well enough, or at the bounds, and each pair keeps its own exit.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rooflab.record import Statistics
from rooflab.runners.engine.group_timing import (
    END,
    GroupTimingControl,
    combine,
    follow,
    lead_warmup,
    rank_clock,
)
from rooflab.runners.engine.stopping import sample_until_all_stable
from rooflab.suite.timing import TimingSettings
from rooflab.vocab import CollectiveMode, StopReason

Pair = tuple[int, int]


@dataclass(frozen=True)
class PairSeries:
    """One pair's samples in its round: its ends' figures combined, and each end's own median."""

    pair: Pair
    samples_ms: tuple[float, ...]
    stats: Statistics
    stop_reason: StopReason
    end_medians_ms: tuple[float, float]  # a's and b's own medians over the same samples


@dataclass(frozen=True)
class RoundTiming:
    """What rank 0 knows after a round: each pair's series and how the round was timed."""

    pairs: tuple[PairSeries, ...]
    warmup_calls: int
    warmup_ms: float
    sampling_ms: float
    clock: str
    sync_method: str
    pace: str
    calls_per_sample: int  # N of a stream sample; 1 when isolated


def pair_samples(per_rank: Sequence[Sequence[float]], pairs: Sequence[Pair], mode: CollectiveMode) -> list[list[float]]:
    """Each pair's samples of a batch from every rank's own figures (`per_rank[r][i]`): its two
    ends' figures combined as the mode combines a collective's ranks (group_timing.combine)."""
    return [combine([per_rank[a], per_rank[b]], mode) for a, b in pairs]


def time_round(fn: Callable[[], object], *, pairs: Sequence[Pair], control: GroupTimingControl, torch_device: str,
               settings: TimingSettings, mode: CollectiveMode = CollectiveMode.STREAM) -> RoundTiming | None:
    """Warm up and sample this rank's `fn` of a round of `pairs` with the whole group; rank 0 gets the
    RoundTiming, the other ranks None. Every rank calls it with the same pairs, settings and mode."""
    clock = rank_clock(mode, fn, None, control, torch_device)
    if control.rank != 0:
        control.gather([follow(clock, control, warm=True)])
        clock.calls = control.decide(END)
        follow(clock, control)
        return None
    warmup_calls, warmup_ms, own_ms = lead_warmup(clock, control, settings)
    slowest_ms = max(v[0] for v in control.gather([own_ms]))  # a resting rank 0 calls nothing
    clock.calls = control.decide(clock.size(slowest_ms))
    rank_samples: list[list[float]] = [[] for _ in range(control.size)]

    def take_batch(k: int) -> list[list[float]]:
        control.decide(k)
        per_rank = control.gather(clock.take(k))
        for own, new in zip(rank_samples, per_rank, strict=True):
            own.extend(new)
        return pair_samples(per_rank, pairs, clock.mode)

    outcomes = sample_until_all_stable(take_batch, settings, series=len(pairs),
                                       resolution_ms=clock.resolution_ms / clock.calls)
    control.decide(END)
    series = tuple(
        PairSeries(pair=(a, b), samples_ms=o.samples_ms, stats=o.stats, stop_reason=o.stop_reason,
                   end_medians_ms=(statistics.median(rank_samples[a]), statistics.median(rank_samples[b])))
        for (a, b), o in zip(pairs, outcomes, strict=True)
    )
    sampling_ms = outcomes[0].elapsed_ms if outcomes else 0.0
    return RoundTiming(pairs=series, warmup_calls=warmup_calls, warmup_ms=warmup_ms, sampling_ms=sampling_ms,
                       clock=clock.clock, sync_method=clock.sync_method, pace=clock.pace,
                       calls_per_sample=clock.calls)
