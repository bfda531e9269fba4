"""The regression check's faster data path (column lists instead of record dicts, plain-Python
quantiles, the change-point pass gated by changepoints.may_change) against a frozen copy of the
code before it (tests/reports/detect_reference.py): the same verdicts, to the last bit."""
from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pandas as pd
import pytest

from rooflab.reports.data.devices import device_keys
from rooflab.reports.regressions import changepoints as cp
from rooflab.reports.regressions.gate import robust_baseline
from rooflab.reports.regressions.series import detect
from rooflab.vocab import SeriesBy
from tests.reports import detect_reference as reference
from tests.reports import gen_series as gen
from tests.reports.synth import row


def _history(seed: int, n_series: int = 150, nights: int = 70) -> pd.DataFrame:
    """n_series series of every planted kind, with throttled, noisy and failed nights, an
    environment change in some, and two GPUs of one fingerprint in others (a copy of the frame
    built once per arguments: the tests of both settings judge the same histories)."""
    return _built_history(seed, n_series, nights).copy()


@functools.cache
def _built_history(seed: int, n_series: int, nights: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_series):
        kind = i % 7
        s = int(rng.integers(1 << 30))
        noise = float(rng.choice([0.005, 0.01, 0.03]))
        if kind == 0:
            series = gen.noise_only(noise=noise, seed=s, nights=nights)
        elif kind == 1:
            series = gen.step(size=float(rng.uniform(-0.3, 0.3)), at=int(rng.integers(5, nights)), noise=noise, seed=s,
                              nights=nights)
        elif kind == 2:
            series = gen.spike(size=float(rng.uniform(0.1, 0.5)), at=int(rng.integers(0, nights)), noise=noise, seed=s,
                               nights=nights)
        elif kind == 3:
            series = gen.drift(size=float(rng.uniform(0.02, 0.2)), over=int(rng.integers(10, 40)), noise=noise, seed=s,
                               nights=nights)
        elif kind == 4:
            series = gen.two_band(gap=float(rng.uniform(0.05, 0.2)), upper_share=0.5, noise=noise, seed=s,
                                  nights=nights)
        else:
            series = gen.step(size=float(rng.uniform(0.05, 0.2)), at=-2, noise=noise, seed=s, nights=nights)
        values = np.round(series.values_ms, 3) if kind == 6 else series.values_ms  # ties in the baseline
        first = int(rng.integers(1, 20)) if i % 5 == 0 else 1
        new_driver = int(rng.integers(20, nights)) if i % 11 == 0 else nights + 1
        for night in range(first, nights + 1):
            u = rng.random()
            status = "failed" if u < 0.03 else "ok"
            r = row(op="stream_triad", family="probe", params={"n": i}, median_ms=float(values[night - 1]),
                    flops=2.0, nbytes=12.0, run_id=f"run-{night:04d}", run_order=night, status=status,
                    fingerprint=f"fp-{i % 3}", throttled=0.03 <= u < 0.06,
                    rel_ci_halfwidth=0.2 if 0.06 <= u < 0.09 else 0.005,
                    driver_version="560.1" if night >= new_driver else "550.54")
            rows.append(r)
            if i % 13 == 0:  # a second GPU of the same fingerprint
                rows.append({**r, "device_uuid": "GPU-1",
                             "median_ms": float(values[night - 1]) * (1 + 0.01 * rng.standard_normal())})
    return pd.DataFrame(rows)


# 150 series (20 or more of each kind); seeds whose histories hold every verdict under both settings
@pytest.mark.parametrize("seed", [1, 3])
@pytest.mark.parametrize("kw", [{}, {"window": 8, "z_threshold": 3.0, "min_change": 0.02}])
def test_verdicts_equal_those_of_the_code_before(seed: int, kw: dict[str, Any]) -> None:
    df = _history(seed)
    new, old = detect(df, by=SeriesBy.MODEL, **kw), reference.detect(df, **kw)
    assert len(new) == len(old) == 150
    assert new == old  # every field of every verdict, points included
    statuses = {v.status for v in new}
    assert {"regression", "suspect", "improvement", "ok", "insufficient_data"} <= statuses, statuses
    assert sum(bool(v.change_points) for v in new) > 20 and any(v.drift for v in new)


def test_baseline_equals_numpys_percentile_and_median_to_the_last_bit() -> None:
    rng = np.random.default_rng(7)
    for i in range(1500):
        n = int(rng.integers(1, 70))
        v = [rng.normal(1, 0.01, n), rng.integers(0, 3, n).astype(float), np.exp(rng.normal(0, 2, n))][i % 3]
        assert robust_baseline(list(v)) == reference.robust_baseline(list(v))


def test_the_change_point_gate_never_skips_a_series_with_a_change_point() -> None:
    rng = np.random.default_rng(11)
    found = skipped = 0
    for i in range(1500):
        n = int(rng.integers(1, 61))
        x = rng.normal(1, 0.02, n)
        if i % 3 == 1:
            x[n // 2:] *= 1 + rng.uniform(0, 0.1)
        if i % 3 == 2:
            x = np.round(x, 2)  # ties, sometimes whole constant stretches
        has = bool(cp.change_points(x, min_rel_change=0.025))
        found += has
        gate = cp.may_change(x)
        skipped += not gate
        assert gate or not has
    assert found > 150 and skipped > 500  # both sides are exercised


@pytest.mark.parametrize("slice_rows", [1, 997, 5_000])
def test_judging_in_slices_of_case_keys_gives_the_same_verdicts_in_the_same_order(slice_rows: int) -> None:
    from rooflab.reports.regressions.series import detect_in_slices

    # 42 series of about 40 nights: one slice per case key, two slices, one slice
    df = _history(3, n_series=42, nights=40).sample(frac=1.0, random_state=5)  # rows in no particular order
    assert 997 < len(df) <= 2 * 997
    whole = detect(df)
    sliced = detect_in_slices(df, slice_rows=slice_rows)
    assert sliced == whole and len(whole) == 42 + 4  # the series with a second GPU: 4 more devices' series
    assert [v.key for v in sliced] == sorted(v.key for v in whole)


@pytest.mark.parametrize("seed", [1, 3])
def test_by_device_each_device_is_the_series_the_code_before_judged_alone(seed: int) -> None:
    """By device, a series is what the code before judged when each device was a fingerprint of its own."""
    df = _history(seed)
    new = detect(df)
    alone = reference.detect(df.assign(device_fingerprint=device_keys(df)))
    assert len(new) == len(alone) == 150 + 12  # every 13th series also ran on a second GPU
    assert [v.key for v in new] == [v.key for v in alone]
    fields = ("status", "latest", "previous", "baseline", "points", "segment_start_run", "note", "pooled",
              "change_points", "drift", "first_bad")
    assert [[getattr(v, f) for f in fields] for v in new] == [[getattr(v, f) for f in fields] for v in alone]
    assert {v.device_key for v in new} == {"GPU-fp-0", "GPU-fp-1", "GPU-fp-2", "GPU-1"}


def test_iso_times_equal_strftime_with_missing_times():
    from rooflab.reports.regressions.series import _iso_times

    rng = np.random.default_rng()
    when = pd.Series(pd.to_datetime(rng.integers(1_600_000_000, 1_800_000_000, 500), unit="s", utc=True))
    when[rng.random(500) < 0.1] = pd.NaT
    when = pd.concat([when, when.sample(300, replace=True)], ignore_index=True)  # repeated times
    expected = when.dt.strftime("%Y-%m-%dT%H:%M:%S%z").astype(object)
    got = _iso_times(when)
    assert [e if isinstance(e, str) else None for e in expected] == [g if isinstance(g, str) else None for g in got]
    assert all(isinstance(g, str) or g != g for g in got)  # NaN, as strftime gives, where the time is missing
