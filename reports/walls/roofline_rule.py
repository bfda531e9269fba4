"""The roofline rule, written once: from a case's FLOPs and bytes and the roofs it is held against,
its time at those roofs, the wall it hits, its efficiency and the rate the roofs allow.

Every caller goes through `roofline_bound`: the diagnosis of measured cases (reports.walls.diagnosis),
the parts of a profiled block (reports.walls.breakdown), the prediction before a run
(reports.walls.predict) and the efficiency with the counted figures (reports.walls.counters_check).
They look the roofs up (reports.roofs) and hand over plain numbers (`Roofs`); nothing here reads a
frame. The rule:

- compute_ms = the FLOPs at the compute roof, memory_ms = the bytes at the bandwidth roof
  (db/rates.py); a term without work is 0, a term with work but no roof is unknown (NaN).
  elementary_ms, the op's elementary functions at their own roofs (reports.roofs.elementary), is
  a compute-side term beside the FLOPs. A collective has no compute term: its bus bytes at the
  interconnect roof of its collective and world size are its only term.
- roofline_ms = the largest known term (NaN when none is known).
- wall: `overhead` when a floor is known (the launch floor of the timing mode; a collective's
  latency floor) and the measured time is within OVERHEAD_FACTOR of it, or the roofline time is
  below it. Otherwise a collective is `comms`-bound when its roof is known; a kernel is
  `compute`-bound when its compute side (FLOPs or elementary functions, whichever takes longer)
  takes at least as long as its bytes, `bandwidth`-bound otherwise, and `overhead`-bound when
  neither takes any time but a floor is known. No wall (None) where nothing decides one.
- efficiency = roofline_ms / median_ms: NaN without a measured time or a positive roofline time,
  and never above 100 %: a case faster than its roofline time (efficiency above SUSPECT_ABOVE) is
  marked `above_roof` and gets no efficiency, since the roof it is held against is then suspect (a
  datasheet figure a result beats, a noisy or contended result, a model the hardware contradicts).
  Every efficiency rooflab shows or stores comes from here.
- attainable_tflops = min(compute roof, intensity x bandwidth roof), the rate the roofs allow at
  the case's intensity (the compute roof itself for a case without bytes); ridge_flop_per_byte =
  compute roof / bandwidth roof, the intensity at which the two roofs meet.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import overload

import numpy as np

from rooflab.db import rates
from rooflab.vocab import Wall

# a measured time within this factor of the floor is bound by launching (or, for a collective, by
# its latency), not by the device's roofs
OVERHEAD_FACTOR = 2.0
SUSPECT_ABOVE = 1.0 + 1e-9  # an efficiency above this: the roof is suspect, and no efficiency is given
_TFLOP_PER_GB = rates.TFLOP / rates.GB  # 1000: GB/s at one FLOP per byte is a thousandth of a TFLOP/s


@dataclass(frozen=True)
class Roofs:
    """What one case is held against, as plain numbers (None or NaN: not known)."""

    compute_tflops: float | None = None  # the compute roof of its dtype (a collective has none)
    bandwidth_gbps: float | None = None  # HBM or L2 roof of a kernel; interconnect busbw roof of a collective
    floor_ms: float | None = None  # the launch floor of its timing mode; a collective's latency floor
    elementary_ms: float = math.nan  # its elementary functions at their roofs (NaN: none, or no roof)
    collective: bool = False


@dataclass(frozen=True)
class RooflineBound:
    """A case against its roofs (see the module doc)."""

    compute_ms: float  # its FLOPs at the compute roof (0 for a collective)
    memory_ms: float  # its bytes at the bandwidth (or interconnect) roof
    elementary_ms: float  # its elementary functions at their roofs
    roofline_ms: float  # the largest known term
    wall: Wall | None
    efficiency: float  # roofline_ms / median_ms
    attainable_tflops: float  # the rate the roofs allow at its intensity (NaN for a collective)
    ridge_flop_per_byte: float  # where the compute and bandwidth roofs meet (NaN without both)
    elementary_limits: bool  # its elementary functions take longer than its FLOPs: the compute wall is theirs
    above_roof: bool = False  # faster than its roofline time: efficiency left NaN (the module doc)


def _known(value: float | None) -> bool:
    return value is not None and not math.isnan(value)


def _time_at(work: float, roof: float | None, ms_at: Callable[[float, float], float]) -> float:
    """The time `work` takes at `roof` (0 without work; NaN with work but no roof)."""
    if work == 0:
        return 0.0
    if roof is None or math.isnan(roof):
        return math.nan
    return float(ms_at(work, roof))


def _largest(*terms: float) -> float:
    known = [t for t in terms if not math.isnan(t)]
    return max(known) if known else math.nan


def _wall(median_ms: float | None, roofline_ms: float, compute_side_ms: float, memory_ms: float,
          roofs: Roofs) -> Wall | None:
    floor = roofs.floor_ms
    if floor is not None and ((median_ms is not None and median_ms <= OVERHEAD_FACTOR * floor)
                              or roofline_ms < floor):
        return Wall.OVERHEAD
    if roofs.collective:
        return Wall.COMMS if _known(roofs.bandwidth_gbps) else None
    c = 0.0 if math.isnan(compute_side_ms) else compute_side_ms
    m = 0.0 if math.isnan(memory_ms) else memory_ms
    if c == 0 and m == 0:
        return Wall.OVERHEAD if floor is not None else None
    return Wall.COMPUTE if c >= m else Wall.BANDWIDTH


def ridge_flop_per_byte(compute_tflops: float, bandwidth_gbps: float) -> float:
    """The intensity (FLOP/byte) at which a bandwidth roof meets a compute roof."""
    return compute_tflops * _TFLOP_PER_GB / bandwidth_gbps


@overload
def attainable_tflops(intensity: float, compute_tflops: float, bandwidth_gbps: float) -> float: ...


@overload
def attainable_tflops(intensity: np.ndarray, compute_tflops: float, bandwidth_gbps: float) -> np.ndarray: ...


def attainable_tflops(intensity: float | np.ndarray, compute_tflops: float,
                      bandwidth_gbps: float) -> float | np.ndarray:
    """The rate (TFLOP/s) the roofs allow at `intensity` (FLOP/byte): the bandwidth roof's slope,
    capped by the compute roof. Takes a number or a numpy array of intensities (the roofline chart
    draws its roofs with it)."""
    return np.minimum(intensity * bandwidth_gbps / _TFLOP_PER_GB, compute_tflops)


def _attainable(flops: float, nbytes: float, roofs: Roofs) -> tuple[float, float]:
    """(the rate the roofs allow at the case's intensity, the ridge point), both NaN without both roofs."""
    compute, memory = roofs.compute_tflops, roofs.bandwidth_gbps
    if roofs.collective or compute is None or memory is None or math.isnan(compute) or math.isnan(memory):
        return math.nan, math.nan
    rate = float(attainable_tflops(flops / nbytes, compute, memory)) if nbytes else compute
    return rate, ridge_flop_per_byte(compute, memory)


def roofline_bound(flops: float, nbytes: float, roofs: Roofs, median_ms: float | None = None) -> RooflineBound:
    """`flops` and `nbytes` of one call held against `roofs`; `median_ms`, the measured time per
    call, when there is one (a prediction has none: no efficiency, and only the roofline time is
    held against the floor)."""
    if roofs.collective:
        compute_ms, elementary_ms = 0.0, math.nan
        memory_ms = _time_at(nbytes, roofs.bandwidth_gbps, rates.ms_at_gbps)
        roofline_ms = compute_side_ms = memory_ms
    else:
        compute_ms = _time_at(flops, roofs.compute_tflops, rates.ms_at_tflops)
        memory_ms = _time_at(nbytes, roofs.bandwidth_gbps, rates.ms_at_gbps)
        elementary_ms = roofs.elementary_ms
        roofline_ms = _largest(compute_ms, memory_ms, elementary_ms)
        compute_side_ms = _largest(compute_ms, elementary_ms)
    if median_ms is None:  # a prediction: the roofline time alone is held against the floor
        wall, efficiency = _wall(None, roofline_ms, compute_side_ms, memory_ms, roofs), math.nan
    elif median_ms > 0:
        wall = _wall(median_ms, roofline_ms, compute_side_ms, memory_ms, roofs)
        efficiency = roofline_ms / median_ms if roofline_ms > 0 else math.nan
    else:  # no time measured: no wall
        wall, efficiency = None, math.nan
    attainable, ridge = _attainable(flops, nbytes, roofs)
    flops_ms = 0.0 if math.isnan(compute_ms) else compute_ms
    elementary_limits = not math.isnan(elementary_ms) and elementary_ms > flops_ms
    above = efficiency > SUSPECT_ABOVE
    return RooflineBound(compute_ms, memory_ms, elementary_ms, roofline_ms, wall,
                         math.nan if above else efficiency, attainable, ridge, elementary_limits, above)
