"""Change points and drifts in one series of nightly figures.

Change points: e-divisive means (Matteson & James, "A nonparametric approach for multiple change
point analysis of multivariate data", JASA 2014) with the significance test of Hunter / Apache Otava
(Fleming et al., ICPE 2023): the energy statistic places the split, a two-sample Student t-test on
the two sides decides whether it is real, and binary segmentation repeats this on both sides.

- Energy statistic of a split at tau of x[0:n] (alpha = 1):
  Q(tau) = tau (n - tau) / n * (2 E|X - Y| - E|X - X'| - E|Y - Y'|), X = x[:tau], Y = x[tau:],
  each mean over the distinct pairs; all taus at once from 2-D prefix sums of |x_i - x_j|.
- Settling window: each side of a split holds at least `settle` points, the medians of the two
  sides move at least half as far as their means, and the median of the `settle` points after it
  (and before it) lies at least half-way to the new (old) median, so a one-night spike never becomes
  a change, not even at the ends of the series.
- Significance: the t-test's p-value times the number of candidate splits (Bonferroni), since the
  split tested is the most different one of them.
- After the segmentation, each change point's statistics are recomputed between its neighbours
  and the weakest (highest p, then smallest change) is dropped until all pass: no stale figures.

Drift: an ordinary least-squares line over the newest `window` points whose one-sided slope test
passes, whose rise over the window reaches `min_change`, and which explains the window at least as
well as the best single step does (so a step is a change point, not a drift).

Pure functions over numpy arrays; no I/O. The Student-t tail comes from the regularised incomplete
beta function (continued fraction), so nothing beyond numpy is needed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from functools import cache

import numpy as np

MAX_P = 0.001  # two-sided p-value a change point must beat (Otava's default)
SETTLE = 3  # points on each side of a change point, and in its settling medians
DRIFT_WINDOW = 30  # newest points the drift test looks at
DRIFT_MAX_P = 0.001  # one-sided p-value of the slope
DRIFT_MIN_POINTS = 10


class Direction(StrEnum):
    SLOWER = "slower"
    FASTER = "faster"


@dataclass(frozen=True)
class ChangePoint:
    """A change of level at `index` (the first point of the new level)."""

    index: int
    mean_before: float
    mean_after: float
    p_value: float  # two-sided Student t-test of the two neighbouring segments, x the splits it was chosen from
    n_before: int
    n_after: int

    @property
    def rel_change(self) -> float:
        """(after - before) / before; > 0 is slower for times."""
        return (self.mean_after - self.mean_before) / self.mean_before if self.mean_before else math.inf

    @property
    def direction(self) -> Direction:
        return Direction.SLOWER if self.mean_after > self.mean_before else Direction.FASTER


@dataclass(frozen=True)
class Drift:
    """A significant slow rise over the newest points: a trend, not a step."""

    start_index: int  # first point of the window
    n_points: int
    rel_change: float  # fitted rise over the window / fitted value at its start
    p_value: float  # one-sided test of a positive slope


# --- Student t tail ---------------------------------------------------------------------------


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom."""
    if math.isnan(t):
        return 1.0
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t > 0 else 1.0 - tail


def two_sample_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p-value of Student's t-test (pooled variance) between two samples."""
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return 1.0
    mean_a, mean_b = float(a.mean()), float(b.mean())
    diff = mean_b - mean_a
    pooled = (float(np.dot(a - mean_a, a - mean_a)) + float(np.dot(b - mean_b, b - mean_b))) / (na + nb - 2)
    if pooled <= 0.0:
        return 0.0 if diff else 1.0
    t = diff / math.sqrt(pooled * (1.0 / na + 1.0 / nb))
    return min(1.0, 2.0 * t_sf(abs(t), na + nb - 2))


# --- e-divisive -------------------------------------------------------------------------------


def energy_curve(x: np.ndarray, min_size: int = 2) -> np.ndarray:
    """Q(tau) for every tau in [0, n] (NaN where a side has fewer than `min_size` >= 2 points)."""
    n = len(x)
    q = np.full(n + 1, np.nan)
    if n < 2 * max(2, min_size):
        return q
    d = np.abs(x[:, None] - x[None, :])
    p = np.zeros((n + 1, n + 1))
    p[1:, 1:] = d.cumsum(0).cumsum(1)
    tau = np.arange(max(2, min_size), n - max(2, min_size) + 1)
    left = p[tau, tau]  # ordered pairs within x[:tau]
    cross = p[tau, n] - left  # pairs (i < tau <= j)
    right = p[n, n] - 2 * p[tau, n] + left  # ordered pairs within x[tau:]
    m = n - tau
    q[tau] = tau * m / n * (2 * cross / (tau * m) - left / (tau * (tau - 1)) - right / (m * (m - 1)))
    return q


def _median(values: np.ndarray) -> float:
    """Median of a short array (sorting in Python beats numpy's call overhead here)."""
    v = sorted(values.tolist())
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2.0


def _settles(x: np.ndarray, lo: int, tau: int, hi: int, settle: int) -> bool:
    """The split of x[lo:hi] at tau moves the medians of both sides at least half as far as their
    means, and the `settle` points after tau (before tau) lie at least half-way from the old (new)
    median to the new (old) one: a spike moves a mean, never a median of three."""
    shift = float(x[tau:hi].mean() - x[lo:tau].mean())
    before, after = _median(x[lo:tau]), _median(x[tau:hi])
    half = (after - before) / 2.0
    if shift == 0.0 or half / shift < 0.25:
        return False
    after_med = _median(x[tau:tau + settle])
    before_med = _median(x[tau - settle:tau])
    return (after_med - before) / half >= 1.0 and (after - before_med) / half >= 1.0


def _best_split(x: np.ndarray, lo: int, hi: int, settle: int, max_p: float) -> int | None:
    """The split of x[lo:hi] with the largest energy statistic that settles and is significant
    (the arg-max, or its neighbours within two points when the arg-max does not settle)."""
    q = energy_curve(x[lo:hi], settle)
    if np.all(np.isnan(q)):
        return None
    best = int(np.nanargmax(q))
    for offset in (0, 1, -1, 2, -2):
        tau = best + offset
        if np.isnan(q[tau]) if 0 <= tau < len(q) else True:
            continue
        if _corrected_p(x, lo, lo + tau, hi, settle) <= max_p and _settles(x, lo, lo + tau, hi, settle):
            return lo + tau
    return None


def _corrected_p(x: np.ndarray, lo: int, tau: int, hi: int, settle: int) -> float:
    """The t-test's p-value of the split at tau of x[lo:hi], times the number of splits that were
    candidates (Bonferroni): the split was chosen as the most different one, so its plain p-value
    would overstate the evidence."""
    candidates = max(1, hi - lo - 2 * settle + 1)
    return min(1.0, candidates * two_sample_p(x[lo:tau], x[tau:hi]))


def _stats(x: np.ndarray, cuts: list[int], i: int, settle: int) -> ChangePoint:
    lo = cuts[i - 1] if i > 0 else 0
    hi = cuts[i + 1] if i + 1 < len(cuts) else len(x)
    a, b = x[lo:cuts[i]], x[cuts[i]:hi]
    return ChangePoint(cuts[i], float(a.mean()), float(b.mean()), _corrected_p(x, lo, cuts[i], hi, settle), len(a),
                       len(b))


@cache
def _critical_t(n: int, max_p: float, settle: int) -> float:
    """The |t| at which a split of n points passes `_corrected_p` <= max_p (bisection on t_sf)."""
    target = max_p / (2.0 * max(1, n - 2 * settle + 1))
    lo, hi = 0.0, 1.0
    while t_sf(hi, n - 2) > target:
        hi *= 2.0
    for _ in range(80):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if t_sf(mid, n - 2) > target else (lo, mid)
    return lo


def may_change(values: np.ndarray | list[float], *, max_p: float = MAX_P, settle: int = SETTLE) -> bool:
    """False only where `change_points` certainly finds none: no split of the whole series that
    leaves `settle` points on each side passes the significance test (its t statistic, from prefix
    sums, is below the critical one by more than rounding could explain). The first split the
    segmentation makes is one of those, so without it there is none. A cheap gate in front of the
    e-divisive pass, which most series of a nightly history do not need."""
    x = np.asarray(values, dtype=float)
    settle = max(2, settle)
    n = len(x)
    if n < 2 * settle:
        return False  # energy_curve has no split: change_points returns ()
    y = x - x.mean()
    c1, c2 = np.cumsum(y), np.cumsum(y * y)
    tau = np.arange(settle, n - settle + 1)
    na, nb = tau.astype(float), (n - tau).astype(float)
    sa = c1[tau - 1]
    sb = c1[-1] - sa
    ss = (c2[tau - 1] - sa * sa / na) + ((c2[-1] - c2[tau - 1]) - sb * sb / nb)
    if not c2[-1] > 0 or np.min(ss) <= 1e-9 * c2[-1]:
        return True  # (nearly) constant sides: leave it to the exact test
    t = np.abs(sb / nb - sa / na) / np.sqrt(ss / (n - 2) * (1.0 / na + 1.0 / nb))
    return bool(np.max(t) >= 0.99 * _critical_t(n, max_p, settle))


def change_points(values: np.ndarray | list[float], *, max_p: float = MAX_P, min_rel_change: float = 0.0,
                  settle: int = SETTLE) -> tuple[ChangePoint, ...]:
    """Change points of the series, oldest first; each with its statistics against its neighbours."""
    x = np.asarray(values, dtype=float)
    settle = max(2, settle)
    cuts: list[int] = []
    stack = [(0, len(x))]
    while stack:
        lo, hi = stack.pop()
        tau = _best_split(x, lo, hi, settle, max_p)
        if tau is not None:
            cuts.append(tau)
            stack += [(lo, tau), (tau, hi)]
    cuts.sort()
    while cuts:  # drop the weakest until every change point passes against its current neighbours
        found = [_stats(x, cuts, i, settle) for i in range(len(cuts))]
        failing = [c for c in found if c.p_value > max_p or abs(c.rel_change) < min_rel_change]
        if not failing:
            return tuple(found)
        worst = max(failing, key=lambda c: (c.p_value, -abs(c.rel_change)))
        cuts.remove(worst.index)
    return ()


# --- drift ------------------------------------------------------------------------------------


def _best_step_rss(y: np.ndarray, min_size: int) -> float:
    """Residual sum of squares of the best single-step (two-level) fit."""
    n = len(y)
    c1 = np.concatenate([[0.0], np.cumsum(y)])
    c2 = np.concatenate([[0.0], np.cumsum(y * y)])
    tau = np.arange(min_size, n - min_size + 1)
    left = c2[tau] - c1[tau] ** 2 / tau
    right = (c2[n] - c2[tau]) - (c1[n] - c1[tau]) ** 2 / (n - tau)
    return float(np.min(left + right))


def drift(values: np.ndarray | list[float], *, window: int = DRIFT_WINDOW, max_p: float = DRIFT_MAX_P,
          min_change: float = 0.05, min_points: int = DRIFT_MIN_POINTS) -> Drift | None:
    """A slow rise (slower, for times) over the newest `window` values, or None."""
    x = np.asarray(values, dtype=float)
    y = x[-window:]
    n = len(y)
    if n < max(min_points, 4):
        return None
    t = np.arange(n, dtype=float)
    t_c = t - t.mean()
    sxx = float(np.sum(t_c * t_c))
    slope = float(np.sum(t_c * (y - y.mean()))) / sxx
    start = float(y.mean()) - slope * float(t.mean())
    rss_line = float(np.sum((y - start - slope * t) ** 2))
    if slope <= 0 or start <= 0:
        return None
    rise = slope * (n - 1) / start
    if rise < min_change:
        return None
    se = math.sqrt(rss_line / (n - 2) / sxx) if rss_line > 0 else 0.0
    p = 0.0 if se == 0 else t_sf(slope / se, n - 2)
    if p > max_p or rss_line > _best_step_rss(y, max(2, SETTLE)):
        return None
    return Drift(len(x) - n, n, rise, p)
