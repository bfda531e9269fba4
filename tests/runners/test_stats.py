"""Known-answer tests of runners.engine.stats (values computed by hand; percentiles are numpy-linear)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from rooflab.runners.engine.stats import median_ci_ranks, summarize


def test_known_answer_eight_samples() -> None:
    # sorted: 1 1 2 3 4 5 6 9; h = 7p for percentile p (linear interpolation)
    s = summarize([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0])
    assert s.n_samples == 8
    assert s.median_ms == pytest.approx(3.5)  # h=3.5: 3 + 0.5*(4-3)
    assert s.mean_ms == pytest.approx(31 / 8)
    assert (s.min_ms, s.max_ms) == (1.0, 9.0)
    assert s.p10_ms == pytest.approx(1.0)  # h=0.7 between 1 and 1
    assert s.p90_ms == pytest.approx(6.9)  # h=6.3: 6 + 0.3*(9-6)
    assert s.iqr_ms == pytest.approx(5.25 - 1.75)  # p75 h=5.25 -> 5.25, p25 h=1.75 -> 1.75
    assert s.std_ms == pytest.approx(math.sqrt(52.875 / 7))  # sum of squared deviations 52.875
    # n=8: only [x(1), x(8)] reaches 95 % (1 - 2/256); [x(2), x(7)] covers 1 - 18/256 < 95 %
    assert (s.ci_low_ms, s.ci_high_ms) == (1.0, 9.0)
    assert s.rel_ci_halfwidth == pytest.approx((9.0 - 1.0) / 2 / 3.5)


def test_known_answer_ten_samples_ci_uses_ranks_2_and_9() -> None:
    s = summarize([10.0, 2.0, 8.0, 4.0, 6.0, 1.0, 9.0, 3.0, 7.0, 5.0])  # 1..10 shuffled
    assert s.median_ms == pytest.approx(5.5)
    assert s.p10_ms == pytest.approx(1.9)  # h=0.9
    assert s.p90_ms == pytest.approx(9.1)  # h=8.1
    assert s.iqr_ms == pytest.approx(7.75 - 3.25)
    assert s.std_ms == pytest.approx(math.sqrt(82.5 / 9))
    assert (s.ci_low_ms, s.ci_high_ms) == (2.0, 9.0)
    assert s.rel_ci_halfwidth == pytest.approx(3.5 / 5.5)


def test_odd_count_median_is_middle_sample() -> None:
    s = summarize([0.5, 0.2, 0.9])
    assert s.median_ms == 0.5
    assert s.std_ms == pytest.approx(0.35118845842842)  # sqrt(((-0.0667)^2+(-0.3667)^2+0.3333^2)/2)


@pytest.mark.parametrize(
    "n, ranks",
    [(5, None), (6, (1, 6)), (8, (1, 8)), (9, (2, 8)), (10, (2, 9)), (20, (6, 15)), (100, (40, 61)),
     (1000, (469, 532))],
)
def test_median_ci_ranks_match_the_binomial_table(n: int, ranks: tuple[int, int] | None) -> None:
    assert median_ci_ranks(n) == ranks


def test_ci_ranks_have_95_percent_coverage_and_are_the_tightest() -> None:
    for n in (6, 7, 13, 31, 64, 257):
        ranks = median_ci_ranks(n)
        assert ranks is not None
        j, k = ranks
        assert k == n - j + 1
        tail = sum(math.comb(n, i) for i in range(j)) / 2**n
        assert 1 - 2 * tail >= 0.95
        tighter = sum(math.comb(n, i) for i in range(j + 1)) / 2**n
        assert 1 - 2 * tighter < 0.95


def test_small_samples_have_no_ci_and_single_sample_no_std() -> None:
    s = summarize([2.0, 3.0, 4.0, 5.0, 6.0])
    assert s.ci_low_ms is None and s.ci_high_ms is None and s.rel_ci_halfwidth is None
    one = summarize([1.25])
    assert one.std_ms is None and one.median_ms == one.min_ms == one.max_ms == 1.25 and one.iqr_ms == 0.0


def test_agrees_with_numpy_on_random_samples() -> None:
    rng = np.random.default_rng(12345)
    x = rng.lognormal(mean=0.0, sigma=0.3, size=257)
    s = summarize(x.tolist())
    assert s.median_ms == pytest.approx(float(np.median(x)))
    assert s.p90_ms == pytest.approx(float(np.percentile(x, 90)))
    assert s.std_ms == pytest.approx(float(np.std(x, ddof=1)))
    srt = np.sort(x)
    ranks = median_ci_ranks(257)
    assert ranks is not None
    j, k = ranks
    assert (s.ci_low_ms, s.ci_high_ms) == (srt[j - 1], srt[k - 1])
    assert s.ci_low_ms is not None and s.ci_high_ms is not None
    assert s.ci_low_ms <= s.median_ms <= s.ci_high_ms


def test_ci_covers_the_true_median_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(7)
    true_median = 1.0  # exponential with rate ln 2 has median 1
    hits = 0
    trials = 2000
    for _ in range(trials):
        s = summarize(rng.exponential(1 / math.log(2), size=30).tolist())
        assert s.ci_low_ms is not None and s.ci_high_ms is not None
        hits += s.ci_low_ms <= true_median <= s.ci_high_ms
    assert 0.93 <= hits / trials <= 0.995  # exact coverage for n=30 is 0.9572


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [float("inf")]])
def test_rejects_empty_or_non_finite(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        summarize(bad)
