"""How sure a speedup is: the ratio of two medians with a 95 % interval, and geometric means of ratios.

Pure: numpy in, numbers out (no pandas, no database). docs/history.md gives the method and its
measured coverage; in short:

- speedup = median(baseline samples) / median(candidate samples) (> 1: the candidate is faster).
- From the raw samples of both sides (`bootstrap_ratio`): a percentile bootstrap of the log of
  that ratio. Each side is resampled with replacement, independently, N_DRAWS times; the interval
  is the 2.5th and 97.5th percentiles of the log ratios of the resampled medians. The median of a
  resample is drawn exactly without building the resample: the k-th smallest of n indices drawn
  uniformly is floor(n * U_(k)), where U_(k), the k-th order statistic of n uniforms, is
  Beta(k, n - k + 1), and the next one up is U_(k) + (1 - U_(k)) * Beta(1, n - k). So a side of
  10,000 samples costs what a side of 10 does, and the draws are those of the plain bootstrap.
- From the stored 95 % CIs of the two medians (`stored_ci_ratio`), when a side has no raw samples
  (pruned, or imported from an export, which carries none): the log ratio's standard error is the
  two CIs' log half-widths added in quadrature, over 1.96.
- Seeded: each case's draws come from a generator seeded by the case key (`case_seed`), so the
  interval of a case is the same on every call, on the page and on the terminal, whatever else is
  compared beside it.
- A geometric mean of ratios (`geomean_ratio`) takes the mean of its cases' log draws, draw by
  draw: its interval is the percentile interval of those means (the cases are independent).
- An interval that contains 1 is `not_significant`; a ratio without an interval (no samples and no
  stored CI on a side) is `no_interval` and is shown alone.
"""
from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

LEVEL = 0.95
N_DRAWS = 4000
Z95 = 1.959963984540054  # the standard normal's 97.5th percentile
BASE_SEED = 20240


class Method(StrEnum):
    """Where a ratio's interval comes from."""

    BOOTSTRAP = "bootstrap"  # the raw samples of both sides
    STORED_CI = "stored_ci"  # a side without raw samples: the stored 95 % CIs of the two medians
    NONE = "none"  # neither: the ratio alone


class Significance(StrEnum):
    """What a ratio's interval says about it (> 1 is faster)."""

    FASTER = "faster"  # the whole interval above 1
    SLOWER = "slower"  # the whole interval below 1
    NOT_SIGNIFICANT = "not_significant"  # the interval contains 1
    NO_INTERVAL = "no_interval"  # no interval: the ratio alone


@dataclass(frozen=True)
class Ratio:
    """A ratio with its interval (low, high: None without one) and what its log-ratio draws come
    from: the bootstrap's own (kept, as float32), or a normal of standard error `log_se` drawn again
    from the generator of `key` when asked (a year's comparison is thousands of cases)."""

    value: float
    low: float | None
    high: float | None
    method: Method
    log_draws: np.ndarray | None = field(default=None, repr=False, compare=False)
    log_se: float | None = None
    key: str = ""

    @property
    def has_draws(self) -> bool:
        return self.log_draws is not None or self.log_se is not None

    def draws(self, n_draws: int = N_DRAWS) -> np.ndarray:
        """The log-ratio draws (float64): the bootstrap's, or the stored-CI normal's, reproducibly."""
        if self.log_draws is not None:
            return self.log_draws.astype(np.float64)
        if self.log_se is None:
            raise ValueError("a ratio without an interval has no draws")
        return math.log(self.value) + self.log_se * case_seed(self.key, BASE_SEED + 1).standard_normal(n_draws)

    @property
    def significance(self) -> Significance:
        if self.low is None or self.high is None:
            return Significance.NO_INTERVAL
        if self.low > 1.0:
            return Significance.FASTER
        if self.high < 1.0:
            return Significance.SLOWER
        return Significance.NOT_SIGNIFICANT

    @property
    def contains_one(self) -> bool:
        return self.significance == Significance.NOT_SIGNIFICANT


def case_seed(key: str, base: int = BASE_SEED) -> np.random.Generator:
    """The generator of one case's draws: seeded by its key, so its interval never depends on the
    order or the company it is computed in."""
    return np.random.default_rng([base, zlib.crc32(key.encode("utf-8"))])


def bootstrap_medians(samples: Sequence[float] | np.ndarray, rng: np.random.Generator,
                      n_draws: int = N_DRAWS) -> np.ndarray:
    """`n_draws` medians of resamples (with replacement, of the same size) of `samples`, drawn
    through the order statistics of uniforms (see the module doc): the plain bootstrap's
    distribution, at a cost independent of the number of samples."""
    x = np.sort(np.asarray(samples, dtype=float))
    n = len(x)
    if n == 0:
        raise ValueError("no samples to bootstrap")
    k = (n + 1) // 2  # 1-based rank of the (lower) middle order statistic
    u = rng.beta(k, n - k + 1, n_draws)
    lower = x[np.minimum((u * n).astype(np.int64), n - 1)]
    if n % 2:
        return lower
    u_next = u + (1.0 - u) * rng.beta(1, n - k, n_draws)
    upper = x[np.minimum((u_next * n).astype(np.int64), n - 1)]
    return (lower + upper) / 2.0


def _percentiles(log_draws: np.ndarray, level: float) -> tuple[float, float]:
    tail = 100.0 * (1.0 - level) / 2.0
    lo, hi = np.percentile(log_draws, [tail, 100.0 - tail])
    return math.exp(float(lo)), math.exp(float(hi))


def bootstrap_ratio(baseline: Sequence[float] | np.ndarray, candidate: Sequence[float] | np.ndarray, *,
                    rng: np.random.Generator, n_draws: int = N_DRAWS, level: float = LEVEL, key: str = "") -> Ratio:
    """median(baseline) / median(candidate) with its percentile-bootstrap interval."""
    base, cand = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    if len(base) == 0 or len(cand) == 0 or not (np.all(base > 0) and np.all(cand > 0)):
        raise ValueError("both sides need positive samples")
    value = float(np.median(base) / np.median(cand))
    draws = np.log(bootstrap_medians(base, rng, n_draws)) - np.log(bootstrap_medians(cand, rng, n_draws))
    low, high = _percentiles(draws, level)
    return Ratio(value, low, high, Method.BOOTSTRAP, draws.astype(np.float32), key=key)


def stored_ci_ratio(baseline_ms: float, baseline_rel_ci: float, candidate_ms: float, candidate_rel_ci: float, *,
                    key: str = "") -> Ratio:
    """baseline_ms / candidate_ms with a 95 % interval from each median's stored 95 % CI (half-width
    over the median): normal on the log scale, the two log half-widths added in quadrature."""
    value = baseline_ms / candidate_ms
    se = math.hypot(math.log1p(baseline_rel_ci), math.log1p(candidate_rel_ci)) / Z95
    return Ratio(value, value * math.exp(-Z95 * se), value * math.exp(Z95 * se), Method.STORED_CI, log_se=se,
                 key=key)


def ratio_alone(baseline_ms: float, candidate_ms: float) -> Ratio:
    return Ratio(baseline_ms / candidate_ms, None, None, Method.NONE)


def usable_ci(rel_ci: float | None) -> bool:
    """A stored CI to build on: known and below the median itself. Zero is kept: the two order
    statistics of the median's CI fell on the same clock tick (the interval is then as narrow as
    the clock can show)."""
    return rel_ci is not None and rel_ci == rel_ci and 0 <= rel_ci < 1


def speedup(key: str, baseline_ms: float, candidate_ms: float, *,
            baseline_samples: Sequence[float] | np.ndarray | None = None,
            candidate_samples: Sequence[float] | np.ndarray | None = None,
            baseline_rel_ci: float | None = None, candidate_rel_ci: float | None = None,
            n_draws: int = N_DRAWS) -> Ratio:
    """The speedup of one case (baseline / candidate) with the best interval its inputs allow: the
    bootstrap when both sides have raw samples, else the stored CIs when both have one, else none.
    With samples the ratio is that of the samples' medians (the stored medians are those)."""
    if baseline_samples is not None and candidate_samples is not None and len(baseline_samples) \
            and len(candidate_samples):
        return bootstrap_ratio(baseline_samples, candidate_samples, rng=case_seed(key), n_draws=n_draws, key=key)
    if usable_ci(baseline_rel_ci) and usable_ci(candidate_rel_ci):
        assert baseline_rel_ci is not None and candidate_rel_ci is not None  # usable_ci checked them
        return stored_ci_ratio(baseline_ms, baseline_rel_ci, candidate_ms, candidate_rel_ci, key=key)
    return ratio_alone(baseline_ms, candidate_ms)


def widened(ratio: Ratio, log_sd: float) -> Ratio:
    """`ratio` with a further normal term of standard deviation `log_sd` on the log scale (the
    run-to-run spread of both sides, reports.comparisons.run_spread), drawn from the case's own generator: the
    bootstrap's draws each get a draw of it, a stored-CI ratio adds it in quadrature. A ratio
    without an interval, or a spread of 0, is returned as it is."""
    if not (log_sd > 0) or not ratio.has_draws:
        return ratio
    if ratio.log_draws is None:
        assert ratio.log_se is not None  # has_draws: draws or a standard error
        se = math.hypot(ratio.log_se, log_sd)
        return Ratio(ratio.value, ratio.value * math.exp(-Z95 * se), ratio.value * math.exp(Z95 * se), ratio.method,
                     log_se=se, key=ratio.key)
    noise = log_sd * case_seed(ratio.key, BASE_SEED + 2).standard_normal(len(ratio.log_draws))
    draws = ratio.log_draws.astype(np.float64) + noise
    low, high = _percentiles(draws, LEVEL)
    return Ratio(ratio.value, low, high, ratio.method, draws.astype(np.float32), key=ratio.key)


def geomean_ratio(ratios: Sequence[Ratio], level: float = LEVEL, n_draws: int = N_DRAWS) -> Ratio:
    """The geometric mean of `ratios`; its interval from the cases' draws, averaged draw by draw,
    when every case has draws (else the geometric mean alone)."""
    if not ratios:
        return Ratio(math.nan, None, None, Method.NONE)
    value = math.exp(sum(math.log(r.value) for r in ratios) / len(ratios))
    if not all(r.has_draws for r in ratios):
        return Ratio(value, None, None, Method.NONE)
    total = np.zeros(next((len(r.log_draws) for r in ratios if r.log_draws is not None), n_draws))
    for r in ratios:  # a running sum: one case's draws at a time
        total += r.draws(len(total))
    mean = total / len(ratios)
    low, high = _percentiles(mean, level)
    methods = {r.method for r in ratios}
    method = Method.BOOTSTRAP if methods == {Method.BOOTSTRAP} else Method.STORED_CI
    return Ratio(value, low, high, method, mean.astype(np.float32))
