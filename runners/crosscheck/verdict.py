"""From per-round figures to a verdict: medians, spreads, the two ratios, disagreements and their reason.

Pure functions on plain numbers; nothing here times anything.

- A timer's figure for a case is the median of its per-round medians.
- Its spread (relative) is the larger of half the range of its per-round medians (drift between
  rounds) and the median over rounds of the 95 % CI half-width of the median of the samples it
  handed back in that round (noise within a round; runners.engine.stats, None below 6 samples).
- ratio = rooflab as configured / peer (below 1: rooflab's figure is the smaller): the difference
  of method, named by the aspects of the two modes that differ (runners.crosscheck.mode.differences).
- in-mode ratio = rooflab timed in the peer's mode / peer: the engines' agreement.
- The two disagree when |rooflab in the peer's mode - peer| is larger than the spread of either,
  in ms, and than AGREEMENT_FLOOR of the peer's figure: larger than max(in-mode spread x in-mode
  median, peer spread x peer median, AGREEMENT_FLOOR x peer median). The floor is the 2 % the
  engines are held to on a GPU, and it is needed on a CPU too: a spread from two or three rounds
  reads far below their real scatter (half the range of two rounds is 0.56 of their standard
  deviation on average): on this project's 2-core machine, the same planted case timed the same
  way read 0.984 to 1.017 from one test run to the next with spreads of 0.2-0.7 %. The first
  ratio is never judged: a method difference is explained by its modes, not a disagreement.
- A disagreement on a contended machine (runners/machine/contention.py: load above the CPUs, CPU
  steal, another process on the GPU) is put down to that (`contended`), since such figures explain
  nothing else; otherwise no reason is known: the two timed the same way.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from rooflab.runners.engine.stats import summarize


class Reason(StrEnum):
    CONTENDED = "contended"  # something else competed for the machine while the case was timed
    # the reasons of rows stored before revision 0009, judged on rooflab as configured against the
    # peer (the method difference); they are read back and shown, never given now
    COLD_VS_HOT = "cold_vs_hot"
    MEAN_VS_MEDIAN = "mean_vs_median"
    HOST_TIME = "host_time"
    LAUNCH_OVERHEAD = "launch_overhead"


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
    ratio: float  # rooflab in the peer's mode / peer
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


AGREEMENT_FLOOR = 0.02  # relative: closer than this, two figures agree whatever their spreads say


def disagrees(rooflab: TimerSummary, peer: TimerSummary) -> bool:
    gap_ms = abs(rooflab.median_ms - peer.median_ms)
    return gap_ms > max(rooflab.spread * rooflab.median_ms, peer.spread * peer.median_ms,
                        AGREEMENT_FLOOR * peer.median_ms)


def agreement(in_mode: TimerSummary, peer: TimerSummary, *, contended: bool = False) -> Agreement:
    """The engines' agreement: rooflab timed in the peer's mode against the peer (see the module doc)."""
    ratio = in_mode.median_ms / peer.median_ms
    if not disagrees(in_mode, peer):
        return Agreement(ratio, False, None)
    return Agreement(ratio, True, Reason.CONTENDED if contended else None)
