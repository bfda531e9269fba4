"""From per-round figures to a verdict: medians, spreads, the ratio, disagreements and their likely reason.

Pure functions on plain numbers; nothing here times anything.

- A timer's figure for a case is the median of its per-round medians.
- Its spread (relative) is the larger of half the range of its per-round medians (drift between
  rounds) and the median over rounds of the 95 % CI half-width of the median of the samples it
  handed back in that round (noise within a round; runners.engine.stats, None below 6 samples).
- ratio = rooflab median / peer median (below 1: rooflab's figure is the smaller).
- The two disagree when |rooflab - peer| is larger than the spread of either, in ms:
  larger than max(rooflab spread x rooflab median, peer spread x peer median).
- A disagreement gets the first likely reason that the facts support (`likely_reason`); a case timed
  while the machine was contended (runners/machine/contention.py: load above the CPUs, CPU steal, another
  process on the GPU) gets `contended` before any other, since such figures explain nothing else.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from rooflab.runners.crosscheck.peer import PeerClock
from rooflab.runners.engine.stats import summarize
from rooflab.vocab import CacheMode

# Below this duration a kernel is about as short as its launch from Python (a few to tens of µs),
# so a timer whose event pair is not held behind a blocking kernel measures launches, not kernels.
LAUNCH_SCALE_MS = 0.05


class Reason(StrEnum):
    CONTENDED = "contended"  # something else competed for the machine while the case was timed
    COLD_VS_HOT = "cold_vs_hot"  # one figure flushed the cache before each call, the other did not
    MEAN_VS_MEDIAN = "mean_vs_median"  # the peer averages calls; rooflab's calls are skewed (its mean is near the peer)
    HOST_TIME = "host_time"  # the peer's figure is host wall time, which holds the launch and the sync
    LAUNCH_OVERHEAD = "launch_overhead"  # a short kernel: the peer's event pair also holds the wait for the host


REASON_TEXT = {
    Reason.CONTENDED: "the machine was contended while the case was timed: neither figure can be trusted",
    Reason.COLD_VS_HOT: "cold against hot: one timer flushes the cache before each call, the other runs warm",
    Reason.MEAN_VS_MEDIAN: "the peer averages blocks of calls; "
                           "rooflab's per-call samples are skewed and its mean is near the peer",
    Reason.HOST_TIME: "host time inside the peer's number (launch, synchronisation and Python around the kernel)",
    Reason.LAUNCH_OVERHEAD: "launch overhead: the kernel is shorter than its launch, "
                            "and the peer's events do not hold the stream",
}


@dataclass(frozen=True)
class TimerSummary:
    median_ms: float
    spread: float  # relative, see the module doc
    rounds_ms: tuple[float, ...]  # the per-round medians


@dataclass(frozen=True)
class Agreement:
    ratio: float  # rooflab / peer
    disagrees: bool
    reason: Reason | None  # only when disagrees


def within_round_spread(samples_ms: Sequence[float]) -> float | None:
    """The 95 % CI half-width of the median of one round's samples, relative; None below 6 samples."""
    if len(samples_ms) < 6:
        return None
    return summarize(samples_ms).rel_ci_halfwidth


def summarize_timer(round_medians_ms: Sequence[float],
                    round_samples_ms: Iterable[Sequence[float]] = ()) -> TimerSummary:
    """A timer's figure and spread over the rounds (see the module doc)."""
    rounds = tuple(float(m) for m in round_medians_ms)
    if not rounds or not all(math.isfinite(m) and m > 0 for m in rounds):
        raise ValueError(f"need positive finite per-round medians, got {rounds}")
    median = float(statistics.median(rounds))
    between = (max(rounds) - min(rounds)) / 2.0 / median
    within = [s for s in (within_round_spread(x) for x in round_samples_ms) if s is not None]
    spread = max(between, float(statistics.median(within)) if within else 0.0)
    return TimerSummary(median, spread, rounds)


def disagrees(rooflab: TimerSummary, peer: TimerSummary) -> bool:
    gap_ms = abs(rooflab.median_ms - peer.median_ms)
    return gap_ms > max(rooflab.spread * rooflab.median_ms, peer.spread * peer.median_ms)


def likely_reason(
    *,
    rooflab_ms: float,
    rooflab_mean_ms: float,
    peer_ms: float,
    case_cache: str,
    peer_cache: CacheMode,
    peer_clock: PeerClock,
    on_gpu: bool,
    contended: bool = False,
) -> Reason | None:
    """The first known explanation the figures support, or None."""
    if contended:
        return Reason.CONTENDED
    rooflab_slower = rooflab_ms > peer_ms
    if case_cache != peer_cache.value and rooflab_slower == (case_cache == CacheMode.COLD.value):
        return Reason.COLD_VS_HOT
    averaging = peer_clock in (PeerClock.HOST_BLOCK_MEAN, PeerClock.DEVICE_BATCH_MEAN)
    if averaging and abs(rooflab_mean_ms - peer_ms) <= 0.5 * abs(rooflab_ms - peer_ms):
        return Reason.MEAN_VS_MEDIAN
    if on_gpu and not rooflab_slower and peer_clock is PeerClock.HOST_BLOCK_MEAN:
        return Reason.HOST_TIME
    if (on_gpu and not rooflab_slower and peer_clock is PeerClock.DEVICE_EVENTS_PER_CALL
            and rooflab_ms < LAUNCH_SCALE_MS):
        return Reason.LAUNCH_OVERHEAD
    return None


def agreement(
    rooflab: TimerSummary,
    peer: TimerSummary,
    *,
    rooflab_mean_ms: float,
    case_cache: str,
    peer_cache: CacheMode,
    peer_clock: PeerClock,
    on_gpu: bool,
    contended: bool = False,
) -> Agreement:
    ratio = rooflab.median_ms / peer.median_ms
    if not disagrees(rooflab, peer):
        return Agreement(ratio, False, None)
    reason = likely_reason(
        rooflab_ms=rooflab.median_ms, rooflab_mean_ms=rooflab_mean_ms, peer_ms=peer.median_ms,
        case_cache=case_cache, peer_cache=peer_cache, peer_clock=peer_clock, on_gpu=on_gpu, contended=contended,
    )
    return Agreement(ratio, True, reason)
