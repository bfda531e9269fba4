"""The two-run check of a collective test (reports.regressions.link_check): known answers on planted series."""
from __future__ import annotations

import math
import random

import pytest

from rooflab.reports.regressions.gate import Point, SeriesVerdict
from rooflab.reports.regressions.link_check import (
    FLOOR_FACTOR,
    MIN_SIZES,
    link_checked,
    t975,
    table_of,
    table_speedups,
)
from rooflab.reports.regressions.verdicts import Verdict

KEY = "all_reduce.v1:nccl:float32:hot:launch:n={n},ranks=16,reduce_op=sum"
SIZES = [1 << k for k in range(10, 31, 2)]


def _time(n: int) -> float:
    return 0.02 + n * 4 / 20e6  # ms: 20 us of latency, then 20 GB/s


def verdicts(ratio: float, *, jitter: float, seed: int, fingerprint: str = "f0") -> list[SeriesVerdict]:
    """One insufficient_data series per size, two runs each: run b's times are run a's x `ratio`
    (sizes above the latency floor only), each size with its own random jitter."""
    rng = random.Random(seed)
    out = []
    for n in SIZES:
        t = _time(n)
        later = t * (ratio if t > FLOOR_FACTOR * _time(SIZES[0]) else 1.0) * math.exp(rng.gauss(0, jitter))
        points = (Point("a", 1, t * math.exp(rng.gauss(0, jitter)), True, None, 0),
                  Point("b", 2, later, True, None, 0))
        out.append(SeriesVerdict(case_key=KEY.format(n=n), device_fingerprint=fingerprint, device_name="H100",
                                 status=Verdict.INSUFFICIENT_DATA, latest=None, previous=None, baseline=None,
                                 points=points, segment_start_run="a"))
    return out


def test_a_slower_link_is_a_regression_of_the_sizes_that_move_data() -> None:
    judged = link_checked(verdicts(1.6, jitter=0.03, seed=1))
    big = [v for v in judged if _time(int(v.case_key.split("n=")[1].split(",")[0])) > FLOOR_FACTOR * _time(SIZES[0])]
    assert {v.status for v in big} == {Verdict.REGRESSION}
    assert all(v.first_bad is not None and v.first_bad.run_id == "b" for v in big)
    assert "x1.6" in big[0].note or "x1.5" in big[0].note
    small = [v for v in judged if v not in big]
    assert small and {v.status for v in small} == {Verdict.INSUFFICIENT_DATA}


def test_the_same_link_within_its_noise_is_no_regression() -> None:
    for seed in range(20):
        judged = link_checked(verdicts(1.0, jitter=0.03, seed=seed))
        assert Verdict.REGRESSION not in {v.status for v in judged}


def test_a_faster_link_is_an_improvement_and_a_small_change_is_none() -> None:
    assert {v.status for v in link_checked(verdicts(0.6, jitter=0.02, seed=4))} >= {Verdict.IMPROVEMENT}
    # 3 % slower, measured precisely: real, but below the 5 % a regression needs
    assert Verdict.REGRESSION not in {v.status for v in link_checked(verdicts(1.03, jitter=0.002, seed=5))}


def test_only_insufficient_collective_series_are_touched() -> None:
    judged = verdicts(1.6, jitter=0.03, seed=2)
    judged[-1] = SeriesVerdict(**{**judged[-1].__dict__, "status": Verdict.OK})
    other = SeriesVerdict(case_key="copy.v1:eager:float32:cold:launch:n=1024", device_fingerprint="f0",
                          device_name="H100", status=Verdict.INSUFFICIENT_DATA, latest=None, previous=None,
                          baseline=None, points=judged[0].points, segment_start_run="a")
    out = link_checked([*judged, other])
    assert out[-1] is other and out[-2].status == Verdict.OK
    assert table_of(other.case_key) is None
    two = verdicts(1.6, jitter=0.03, seed=3)[-(MIN_SIZES - 1):]  # too few sizes to judge
    assert {v.status for v in link_checked(two)} == {Verdict.INSUFFICIENT_DATA}


def test_two_fingerprints_are_two_tests() -> None:
    mixed = verdicts(1.6, jitter=0.03, seed=6)[::2] + verdicts(1.6, jitter=0.03, seed=7, fingerprint="f1")[1::2]
    judged = link_checked(mixed)
    assert all(v.status in (Verdict.REGRESSION, Verdict.INSUFFICIENT_DATA) for v in judged)
    by_fp = {v.device_fingerprint for v in judged if v.status == Verdict.REGRESSION}
    assert by_fp == {"f0", "f1"}  # each judged on its own sizes


def test_table_speedups_known_answer() -> None:
    keys = [KEY.format(n=n) for n in SIZES]
    base = [_time(n) for n in SIZES]
    cand = [t * 2.0 if t > FLOOR_FACTOR * base[0] else t for t in base]
    (found,) = table_speedups(keys, base, cand)
    assert found.speedup == pytest.approx(0.5) and found.standing == "slower"
    assert found.sizes == sum(t > FLOOR_FACTOR * base[0] for t in base)


@pytest.mark.parametrize("df,value", [(1, 12.706), (9, 2.262), (30, 2.042), (100, 1.96)])
def test_t_quantiles(df: int, value: float) -> None:
    assert t975(df) == value


def test_a_size_that_got_faster_in_a_regressed_test_is_no_regression() -> None:
    judged = verdicts(1.6, jitter=0.03, seed=8)
    moved = [v for v in judged if _time(int(v.case_key.split("n=")[1].split(",")[0])) > FLOOR_FACTOR * _time(SIZES[0])]
    faster = moved[len(moved) // 2]  # this size's newer run 10 % faster than its older one
    older, newer = faster.points
    faster_points = (older, Point(newer.run_id, newer.run_order, older.median_ms * 0.9, True, None, 0))
    judged[judged.index(faster)] = SeriesVerdict(**{**faster.__dict__, "points": faster_points})
    out = {v.case_key: v for v in link_checked(judged)}
    assert out[faster.case_key].status == Verdict.INSUFFICIENT_DATA and "two-run check" in out[faster.case_key].note
    assert {out[v.case_key].status for v in moved if v is not faster} == {Verdict.REGRESSION}
