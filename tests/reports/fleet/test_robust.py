"""The fleet's robust statistics: known answers for the spread and the lines."""
from __future__ import annotations

import math

import numpy as np
import pytest

from rooflab.reports.fleet.robust import (
    MAD_TO_SIGMA,
    MIN_SPREAD_PCT,
    drain_line_pct,
    log_of_pct,
    pct,
    spread,
    warn_line_pct,
)


def test_the_spread_is_the_mad_times_1_4826_and_ignores_an_outlier() -> None:
    # median 0.03, absolute deviations 0.02 0.01 0 0.01 0.97 -> MAD 0.01
    assert spread(np.array([0.01, 0.02, 0.03, 0.04, 1.0])) == pytest.approx(MAD_TO_SIGMA * 0.01)
    assert spread([0.05, np.nan, 0.07, 0.06]) == pytest.approx(MAD_TO_SIGMA * 0.01)  # NaN ignored


def test_a_normal_sample_gives_its_sigma() -> None:
    rng = np.random.default_rng()
    sigma = rng.uniform(0.005, 0.02)
    assert spread(rng.normal(0.0, sigma, 40_000)) == pytest.approx(sigma, rel=0.03)


def test_the_spread_has_a_floor() -> None:
    floor = log_of_pct(MIN_SPREAD_PCT)
    assert spread([0.001, 0.001, 0.001]) == floor and spread([]) == floor


@pytest.mark.parametrize(("spread_pct", "warn", "line"), [
    (0.2, 3.5, 1.75),  # a quiet wall: 3 spreads would be 0.6 %, never nearer than half the threshold
    (0.75, 3.5, 2.25),  # 3 spreads inside the threshold
    (1.5, 3.5, 3.5),  # the threshold itself
    (3.0, 3.5, 6.0),  # a noisy wall: 2 spreads beyond the threshold
    (0.75, 5.0, 2.5),
])
def test_the_warn_line(spread_pct: float, warn: float, line: float) -> None:
    assert warn_line_pct(spread_pct, warn) == pytest.approx(line)


def test_the_drain_line_is_the_threshold_or_three_spreads() -> None:
    assert drain_line_pct(1.0, 7.0) == 7.0
    assert drain_line_pct(3.0, 7.0) == pytest.approx(9.0)


def test_percent_and_log_are_inverse() -> None:
    assert pct(math.log(0.95)) == pytest.approx(-5.0)
    assert log_of_pct(pct(-0.0123)) == pytest.approx(-0.0123)
