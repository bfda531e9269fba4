"""The detector's goals, measured on generated 60-night series with fixed seeds (tests/reports/gen_series.py).

Each rate is counted over SEEDS series; tests/perf/bench_regressions.py prints the full table.
"""
from __future__ import annotations

import numpy as np
import pytest

from rooflab.reports.regressions.changepoints import change_points, drift, t_sf
from rooflab.reports.regressions.gate import Point, history_pass, judge
from tests.present import present
from tests.reports import gen_series as g

SEEDS = range(200)


def _points(values: np.ndarray) -> list[Point]:
    return [Point(f"r{i}", i, float(x), True, None, 0) for i, x in enumerate(values)]


def _rate(series: list[g.Series], status: str = "regression") -> float:
    return sum(judge(_points(s.values_ms)).status == status for s in series) / len(series)


@pytest.mark.parametrize("size, noise, goal", [(0.10, 0.02, 0.90), (0.20, 0.05, 0.80)])
def test_step_on_the_newest_two_nights_is_a_regression(size, noise, goal):
    rate = _rate([g.step(size=size, at=-2, noise=noise, seed=s) for s in SEEDS])
    assert rate >= goal, rate


@pytest.mark.parametrize("noise", [0.005, 0.02, 0.05])
def test_noise_and_improvements_are_not_regressions(noise):
    assert _rate([g.noise_only(noise=noise, seed=s) for s in SEEDS]) <= 0.01
    assert _rate([g.step(size=-0.10, at=-2, noise=noise, seed=s) for s in SEEDS]) == 0.0


@pytest.mark.parametrize("at", [-1, -2])
@pytest.mark.parametrize("size", [0.10, 0.30, 1.0])
def test_one_night_spike_is_not_a_regression(at, size):
    assert _rate([g.spike(size=size, at=at, noise=0.02, seed=s) for s in SEEDS]) <= 0.01


@pytest.mark.parametrize("upper_share", [0.5, 0.15])
@pytest.mark.parametrize("noise", [0.005, 0.01])
def test_two_band_baseline_raises_no_regression(upper_share, noise):
    """The scaled MAD collapses onto one band; the spread and the repeated-range rule do not."""
    series = [g.two_band(gap=0.10, upper_share=upper_share, noise=noise, seed=s) for s in SEEDS]
    assert _rate(series) <= 0.01
    assert sum(bool(change_points(s.values_ms, min_rel_change=0.025)) for s in series) / len(series) <= 0.01


def test_a_mid_history_step_is_a_change_point_at_its_night():
    found = 0
    for s in SEEDS:
        series = g.step(size=0.05, at=int(20 + s % 25), noise=0.01, seed=s)
        changes = history_pass(_points(series.values_ms)).changes
        found += any(c.direction == "slower" and abs(c.run_order - present(series.change_at)) <= 3 for c in changes)
    assert found / len(SEEDS) >= 0.90


def test_a_step_is_flagged_within_three_nights_of_it():
    """Replayed night by night: a regression or a slower change point flags the step by its third night."""
    flagged = 0
    for s in SEEDS:
        series = g.step(size=0.05, at=40, noise=0.01, seed=s)
        for night in range(40, 43):
            pts = _points(series.values_ms[: night + 1])
            changes = history_pass(pts).changes
            if judge(pts).status == "regression" or any(c.direction == "slower" for c in changes):
                flagged += 1
                break
    assert flagged / len(SEEDS) >= 0.90


def test_drift_over_the_last_thirty_nights_is_reported_and_steps_are_not_drift():
    drifts = [g.drift(size=0.10, over=30, noise=0.01, seed=s) for s in SEEDS]
    assert sum(history_pass(_points(s.values_ms)).drift is not None for s in drifts) / len(SEEDS) >= 0.80
    steps = [g.step(size=0.10, at=45, noise=0.01, seed=s) for s in SEEDS]
    assert sum(drift(s.values_ms) is not None for s in steps) / len(SEEDS) <= 0.05
    faster = [g.drift(size=-0.10, over=30, noise=0.01, seed=s) for s in SEEDS]
    assert all(drift(s.values_ms) is None for s in faster)


@pytest.mark.parametrize("noise", [0.01, 0.05])
def test_noise_only_history_has_no_change_point_and_no_drift(noise):
    series = [g.noise_only(noise=noise, seed=s) for s in SEEDS]
    assert sum(bool(change_points(s.values_ms, min_rel_change=0.025)) for s in series) / len(series) <= 0.01
    assert all(drift(s.values_ms) is None for s in series)


@pytest.mark.parametrize("at", [-1, -2, -3, 30])
def test_a_spike_is_never_a_change_point(at):
    series = [g.spike(size=0.30, at=at, noise=0.02, seed=s) for s in SEEDS]
    assert sum(bool(change_points(s.values_ms, min_rel_change=0.025)) for s in series) == 0


def test_change_point_statistics_are_those_of_its_neighbouring_segments():
    rng = np.random.default_rng(5)
    x = np.r_[1.0 + 0.01 * rng.standard_normal(30), 1.2 + 0.01 * rng.standard_normal(30)]
    (c,) = change_points(x)
    assert c.index == 30 and c.n_before == 30 and c.n_after == 30
    assert c.mean_before == pytest.approx(x[:30].mean()) and c.mean_after == pytest.approx(x[30:].mean())
    assert c.rel_change == pytest.approx(0.2, abs=0.01) and c.p_value < 1e-20


def test_student_t_tail_known_values():
    assert t_sf(2.0, 10) == pytest.approx(0.036694017385370, rel=1e-9)
    assert t_sf(0.0, 5) == pytest.approx(0.5)
    assert t_sf(-1.812461, 10) == pytest.approx(0.95, abs=1e-6)  # t_{0.95, 10}
    assert t_sf(1.0, 1) == pytest.approx(0.25)  # Cauchy
