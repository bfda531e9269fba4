"""Statistics of raw timing samples: what a measurement reports, derived from what it keeps.

Percentiles use numpy's default linear interpolation between order statistics (`method="linear"`,
type 7 of Hyndman & Fan): the p-th percentile of sorted x[0..n-1] is x[h] + (h - floor(h)) *
(x[floor(h) + 1] - x[floor(h)]) with h = (n - 1) * p / 100.

The 95 % confidence interval of the median is distribution-free: for sorted samples x(1) <= ... <=
x(n), the interval [x(j), x(n-j+1)] covers the true median with probability 1 - 2 P(B <= j - 1),
B ~ Binomial(n, 1/2). We take the largest j whose coverage is still >= 95 %. Below 6 samples no
such j exists (even [min, max] covers only 1 - 2/2^n < 95 %), so the interval is None.
"""
from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache

import numpy as np

from rooflab.record import Statistics

CONFIDENCE = 0.95


@lru_cache(maxsize=4096)
def median_ci_ranks(n: int, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """1-based ranks (j, n - j + 1) of the order statistics bounding the median's CI, or None.

    Exact binomial arithmetic on integers: coverage >= confidence  <=>
    2 * sum_{i < j} C(n, i) <= (1 - confidence) * 2^n.
    """
    if n < 1:
        raise ValueError("need at least one sample")
    alpha = 1.0 - confidence
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    # compare 2 * tail <= alpha * 2^n exactly with a rational alpha
    num, den = _as_fraction(alpha)
    total = 1 << n
    best = 0
    tail = 0  # sum_{i <= j-1} C(n, i)
    term = 1  # C(n, j-1)
    for j in range(1, n // 2 + 2):
        tail += term
        if 2 * tail * den > num * total:
            break
        best = j
        term = term * (n - (j - 1)) // j
    if best == 0:
        return None
    return best, n - best + 1


def _as_fraction(x: float) -> tuple[int, int]:
    f = Fraction(x).limit_denominator(1_000_000)
    return f.numerator, f.denominator


def summarize(samples_ms: Sequence[float] | np.ndarray) -> Statistics:
    """Median, mean, extremes, p10/p90, IQR, sample std and the median's 95 % CI of `samples_ms`."""
    x = np.sort(np.asarray(samples_ms, dtype=np.float64))
    n = int(x.size)
    if n == 0:
        raise ValueError("summarize() needs at least one sample")
    if not np.all(np.isfinite(x)):
        raise ValueError("samples must be finite")
    p10, p25, p50, p75, p90 = np.percentile(x, [10, 25, 50, 75, 90])
    median = float(p50)
    ranks = median_ci_ranks(n)
    if ranks is None:
        ci_low = ci_high = rel = None
    else:
        ci_low, ci_high = float(x[ranks[0] - 1]), float(x[ranks[1] - 1])
        rel = (ci_high - ci_low) / 2.0 / median if median > 0 else None
    return Statistics(
        median_ms=median,
        mean_ms=float(x.mean()),
        min_ms=float(x[0]),
        max_ms=float(x[-1]),
        p10_ms=float(p10),
        p90_ms=float(p90),
        iqr_ms=float(p75 - p25),
        std_ms=float(x.std(ddof=1)) if n > 1 else None,
        n_samples=n,
        ci_low_ms=ci_low,
        ci_high_ms=ci_high,
        rel_ci_halfwidth=rel,
    )
