"""The roofline rule (reports/walls/roofline_rule.py) against hand-computed answers, on random
work and roofs: the terms, the wall on each side of the ridge and of the floor, the efficiency,
the attainable rate, and a collective against its interconnect roof and latency floor."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from rooflab.reports.walls.roofline_rule import (
    OVERHEAD_FACTOR,
    Roofs,
    attainable_tflops,
    ridge_flop_per_byte,
    roofline_bound,
)
from rooflab.vocab import Wall


@pytest.fixture
def rng() -> random.Random:
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    return random.Random(seed)


def _roofs(rng: random.Random) -> tuple[float, float]:
    return rng.uniform(10.0, 2000.0), rng.uniform(100.0, 8000.0)  # TFLOP/s, GB/s


def test_a_case_above_the_ridge_is_compute_bound_at_flops_over_the_roof(rng: random.Random) -> None:
    compute, bandwidth = _roofs(rng)
    ridge = compute * 1e12 / (bandwidth * 1e9)
    nbytes = rng.uniform(1e6, 1e9)
    flops = nbytes * ridge * rng.uniform(1.5, 50.0)
    median = flops / (compute * 1e12) * 1e3 * rng.uniform(1.1, 3.0)  # slower than the roof
    b = roofline_bound(flops, nbytes, Roofs(compute, bandwidth, floor_ms=1e-6), median)
    assert b.compute_ms == pytest.approx(flops / (compute * 1e12) * 1e3)
    assert b.memory_ms == pytest.approx(nbytes / (bandwidth * 1e9) * 1e3)
    assert b.roofline_ms == b.compute_ms and b.wall == Wall.COMPUTE
    assert b.efficiency == pytest.approx(b.compute_ms / median)
    assert b.ridge_flop_per_byte == pytest.approx(ridge)
    assert b.attainable_tflops == pytest.approx(compute)


def test_a_case_below_the_ridge_is_bandwidth_bound(rng: random.Random) -> None:
    compute, bandwidth = _roofs(rng)
    ridge = compute * 1e12 / (bandwidth * 1e9)
    nbytes = rng.uniform(1e6, 1e9)
    flops = nbytes * ridge * rng.uniform(0.01, 0.7)
    b = roofline_bound(flops, nbytes, Roofs(compute, bandwidth), rng.uniform(1.0, 10.0))
    assert b.wall == Wall.BANDWIDTH and b.roofline_ms == b.memory_ms
    assert b.attainable_tflops == pytest.approx(flops / nbytes * bandwidth / 1e3)  # intensity x GB/s
    assert b.attainable_tflops < compute


def test_the_floor_makes_a_case_overhead_bound_from_either_side(rng: random.Random) -> None:
    compute, bandwidth = _roofs(rng)
    nbytes, flops = rng.uniform(1e3, 1e5), rng.uniform(1e3, 1e5)
    roofline = roofline_bound(flops, nbytes, Roofs(compute, bandwidth)).roofline_ms
    floor = roofline * rng.uniform(2.0, 5.0)  # the roofs allow less time than one launch costs
    assert roofline_bound(flops, nbytes, Roofs(compute, bandwidth, floor), floor * 10).wall == Wall.OVERHEAD
    assert roofline_bound(flops, nbytes, Roofs(compute, bandwidth, floor)).wall == Wall.OVERHEAD  # a prediction
    big = nbytes * 1e6  # now the bytes take far longer than the floor
    slow_floor = roofline_bound(flops, big, Roofs(compute, bandwidth)).roofline_ms / 100
    near = slow_floor * OVERHEAD_FACTOR * rng.uniform(0.5, 0.99)  # but the measured time is within the factor
    assert roofline_bound(flops, big, Roofs(compute, bandwidth, slow_floor), near).wall == Wall.OVERHEAD
    far = slow_floor * OVERHEAD_FACTOR * rng.uniform(1.01, 2.0)
    assert roofline_bound(flops, big, Roofs(compute, bandwidth, slow_floor), far).wall == Wall.BANDWIDTH


def test_elementary_functions_are_a_compute_side_term(rng: random.Random) -> None:
    compute, bandwidth = _roofs(rng)
    nbytes = rng.uniform(1e6, 1e8)
    memory_ms = nbytes / (bandwidth * 1e9) * 1e3
    elementary = memory_ms * rng.uniform(1.5, 4.0)
    b = roofline_bound(1.0, nbytes, Roofs(compute, bandwidth, elementary_ms=elementary), elementary * 2)
    assert b.wall == Wall.COMPUTE and b.elementary_limits and b.roofline_ms == elementary
    few = roofline_bound(1.0, nbytes, Roofs(compute, bandwidth, elementary_ms=memory_ms / 3), memory_ms * 2)
    assert few.wall == Wall.BANDWIDTH and few.elementary_limits  # slower than its FLOPs, not than its bytes


def test_unknown_terms_are_left_out_and_no_time_no_work_decide_nothing(rng: random.Random) -> None:
    nbytes = rng.uniform(1e6, 1e9)
    no_compute_roof = roofline_bound(nbytes * 1000, nbytes, Roofs(None, rng.uniform(100, 4000)), 1.0)
    assert math.isnan(no_compute_roof.compute_ms) and no_compute_roof.wall == Wall.BANDWIDTH
    assert math.isnan(no_compute_roof.attainable_tflops) and math.isnan(no_compute_roof.ridge_flop_per_byte)
    no_work = roofline_bound(0.0, 0.0, Roofs(100.0, 1000.0), 1.0)
    assert no_work.wall is None and math.isnan(no_work.efficiency)  # nothing to hold against, no floor
    assert roofline_bound(0.0, 0.0, Roofs(100.0, 1000.0, floor_ms=0.005), 1.0).wall == Wall.OVERHEAD
    not_timed = roofline_bound(1e9, 1e6, Roofs(100.0, 1000.0, floor_ms=0.005), 0.0)
    assert not_timed.wall is None and math.isnan(not_timed.efficiency)


def test_a_collective_is_held_against_its_interconnect_roof_and_latency_floor(rng: random.Random) -> None:
    busbw, latency = rng.uniform(50.0, 900.0), rng.uniform(0.005, 0.05)
    nbytes = rng.uniform(1e8, 1e10)  # far above the latency floor
    time_ms = nbytes / (busbw * 1e9) * 1e3
    b = roofline_bound(nbytes / 4, nbytes, Roofs(None, busbw, latency, collective=True), time_ms * 1.25)
    assert b.wall == Wall.COMMS and b.compute_ms == 0.0 and b.roofline_ms == pytest.approx(time_ms)
    assert b.efficiency == pytest.approx(0.8) and math.isnan(b.attainable_tflops)
    small = roofline_bound(1.0, 64.0, Roofs(None, busbw, latency, collective=True), latency * 1.5)
    assert small.wall == Wall.OVERHEAD
    no_roof = roofline_bound(1.0, nbytes, Roofs(None, None, None, collective=True), time_ms)
    assert no_roof.wall is None and math.isnan(no_roof.roofline_ms)


def test_the_chart_draws_the_rule_s_attainable_rate_and_ridge(rng: random.Random) -> None:
    compute, bandwidth = _roofs(rng)
    grid = np.logspace(-2, 4, 50)
    drawn = attainable_tflops(grid, compute, bandwidth)
    ridge = ridge_flop_per_byte(compute, bandwidth)
    above, below = grid >= ridge, grid < ridge
    assert np.allclose(drawn[above], compute) and np.allclose(drawn[below], grid[below] * bandwidth / 1e3)
    for intensity in grid:
        nbytes = 1e9
        b = roofline_bound(intensity * nbytes, nbytes, Roofs(compute, bandwidth))
        assert b.attainable_tflops == pytest.approx(min(compute, intensity * bandwidth / 1e3))
        if not math.isclose(intensity, ridge, rel_tol=1e-9):  # the two terms are equal at the ridge itself
            assert b.wall == (Wall.COMPUTE if intensity > ridge else Wall.BANDWIDTH)
