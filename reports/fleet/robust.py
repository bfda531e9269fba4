"""The robust statistics of the fleet, in one place: spreads from the median absolute deviation, the
lines a deviation is held against, and the conversion between log time and percent.

Every figure inside the judgement is a difference of natural logs of median times (`log_fleet -
log_device`: negative when the device is slower); what is shown is that difference as a percent
of speed (`pct`: -5.0 is 5 % slower than the fleet).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

MAD_TO_SIGMA = 1.4826  # the MAD of a normal sample times this is its standard deviation
MEDIAN_SE_FACTOR = 1.2533  # the standard error of a median is this times sigma / sqrt(n) (sqrt(pi / 2))
Z95 = 1.959964  # the two-sided 95 % normal quantile
# the robust z at which a deviation is an outlier among siblings, and the z a percent threshold must
# also reach (so that a threshold inside a wall's own noise flags nobody)
Z_OUTLIER = 3.0
Z_FLOOR = 2.0
MIN_SPREAD_PCT = 0.1  # a spread below 0.1 % is taken as 0.1 %: finer differences are not a device's health


def pct(log_ratio: float) -> float:
    """A log speed ratio as a percent of speed (0.0 for equal, negative for slower)."""
    return 100.0 * math.expm1(log_ratio)


def pct_array(log_ratio: np.ndarray | pd.Series) -> np.ndarray:
    """`pct` element-wise."""
    return 100.0 * np.expm1(np.asarray(log_ratio, dtype=float))


def log_of_pct(percent: float) -> float:
    """The log speed ratio of a percent of speed (`pct`'s inverse)."""
    return math.log1p(percent / 100.0)


def spread(values: np.ndarray | pd.Series) -> float:
    """The robust standard deviation of `values` (MAD x 1.4826; NaN ignored), at least MIN_SPREAD_PCT
    as a log ratio; MIN_SPREAD_PCT when nothing is left."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    floor = log_of_pct(MIN_SPREAD_PCT)
    if x.size == 0:
        return floor
    return max(MAD_TO_SIGMA * float(np.median(np.abs(x - np.median(x)))), floor)


def warn_line_pct(spread_pct: float | np.ndarray, warn_pct: float) -> float | np.ndarray:
    """How far below its siblings (percent, positive) a figure is beyond the warn line: the warn
    threshold, moved in to Z_OUTLIER spreads where the fleet agrees closely (never nearer than half the
    threshold), and out to Z_FLOOR spreads where the figure's own noise is wider than the threshold.
    Element-wise on an array of spreads."""
    return np.maximum(np.maximum(np.minimum(warn_pct, Z_OUTLIER * spread_pct), Z_FLOOR * spread_pct), warn_pct / 2.0)


def drain_line_pct(spread_pct: float | np.ndarray, drain_pct: float) -> float | np.ndarray:
    """How far below (percent, positive) a figure is beyond the drain line: the drain threshold, or
    Z_OUTLIER spreads where the figure's noise is wider than that. Element-wise on an array of spreads."""
    return np.maximum(drain_pct, Z_OUTLIER * spread_pct)
