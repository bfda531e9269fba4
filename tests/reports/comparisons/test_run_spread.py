"""The run-to-run spread of a device's results (reports.comparisons.run_spread) and the comparison intervals it
widens (reports.comparisons.intervals.widened, reports.comparisons.speedup_table): known answers on
generated histories, and two runs of one device, which differ by their runs' spread and not by the
samples' noise alone."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from rooflab.reports.comparisons import intervals as iv
from rooflab.reports.comparisons.compare_devices import Evidence, compare_devices
from rooflab.reports.comparisons.run_spread import (
    CASE_DIFFERENCES,
    MIN_DIFFERENCES,
    estimate_spreads,
    recent_runs,
    trusted_rows,
)
from rooflab.reports.data.run_counts import counts_of
from tests.present import present
from tests.reports.synth import H100, row

RUN_SD = 0.03  # the planted run-to-run spread: log sd of a run's median
SAMPLE_SD = 0.002  # the samples' own noise within a run


def _history(runs: int, cases: int, *, seed: int, run_sd: float = RUN_SD, device: str = H100,
             last_run_factor: float = 1.0) -> tuple[pd.DataFrame, dict]:
    """`runs` runs of `cases` copies on `device`, each run's median off its level by a normal of
    log sd `run_sd`, with 60 raw samples around it; the newest run's medians times `last_run_factor`."""
    rng = np.random.default_rng(seed)
    rows, samples = [], {}
    for c in range(cases):
        level = 0.5 + 0.1 * c
        for r in range(runs):
            median = level * math.exp(run_sd * rng.standard_normal()) * (last_run_factor if r == runs - 1 else 1.0)
            x = median * np.exp(SAMPLE_SD * rng.standard_normal(60))
            run_id = f"run-{r:02d}"
            rows.append(row(op="copy", family="pointwise", params={"n": 1 << (10 + c)}, median_ms=float(np.median(x)),
                            flops=0.0, nbytes=1e6 * (c + 1), device_name=device, run_id=run_id, run_order=r + 1,
                            rel_ci_halfwidth=0.002))
            samples[(run_id, rows[-1]["case_key"], rows[-1]["device_uuid"])] = x
    return pd.DataFrame(rows), samples


def test_the_spread_is_the_planted_one_and_a_step_in_one_series_barely_moves_it():
    df, _ = _history(12, 40, seed=1)
    spreads = estimate_spreads(trusted_rows(df))
    group = spreads.by_group[(H100, "pointwise", "eager")]
    assert group.differences == 11 * 40 and group.pooled_over == "family/backend"
    assert group.log_sd == pytest.approx(RUN_SD, rel=0.12)
    assert not spreads.by_case  # 11 differences a case: too few for a case's own estimate
    long, _ = _history(CASE_DIFFERENCES + 1, 10, seed=11)
    own = [s.log_sd for s in estimate_spreads(trusted_rows(long)).by_case.values()]
    assert len(own) == 10 and np.median(own) == pytest.approx(RUN_SD, rel=0.25)
    stepped = df.copy()
    first = stepped["case_key"] == stepped["case_key"].iloc[0]
    stepped.loc[first & (stepped["run_order"] > 6), "median_ms"] *= 1.3  # a real +30 % change in one series
    moved = estimate_spreads(trusted_rows(stepped)).by_group[(H100, "pointwise", "eager")]
    assert moved.log_sd == pytest.approx(group.log_sd, rel=0.02)


def test_a_case_without_runs_of_its_own_takes_its_groups_then_its_devices_spread():
    df, _ = _history(3, 4, seed=2)  # 2 differences a case (too few), 8 in the group
    spreads = estimate_spreads(trusted_rows(df))
    key = df["case_key"].iloc[0]
    assert not spreads.by_case
    assert present(spreads.spread_of(H100, key, "pointwise", "eager")).pooled_over == "family/backend"
    assert present(spreads.spread_of(H100, key, "gemm", "eager")).pooled_over == "device"  # no gemm: every case
    few, _ = _history(2, MIN_DIFFERENCES - 1, seed=3)  # 4 differences on the device: unknown
    assert estimate_spreads(trusted_rows(few)).spread_of(H100, key, "pointwise", "eager") is None
    assert estimate_spreads(pd.DataFrame()).spread_of(H100, key, "pointwise", "eager") is None


def test_untrusted_results_and_older_runs_than_the_newest_30_are_not_read():
    df, _ = _history(8, 6, seed=4)
    noisy = df.assign(quality="noisy")
    assert trusted_rows(noisy).empty
    many = pd.DataFrame([{"device_name": H100, "run_id": f"r{i}", "run_order": i} for i in range(40)]
                        + [{"device_name": "other", "run_id": "x", "run_order": 41}])
    assert recent_runs(many, [H100]) == sorted(f"r{i}" for i in range(10, 40))


def test_widening_adds_the_spread_in_quadrature_to_either_kind_of_interval():
    stored = iv.stored_ci_ratio(1.0, 0.01, 1.0, 0.01, key="k")
    wide = iv.widened(stored, 0.03)
    wide_se = present(wide.log_se)
    assert wide_se == pytest.approx(math.hypot(present(stored.log_se), 0.03))
    assert wide.value == stored.value and present(wide.high) / wide.value == pytest.approx(math.exp(iv.Z95 * wide_se))
    rng = np.random.default_rng(5)
    boot = iv.bootstrap_ratio(1 + 0.01 * rng.standard_normal(200), 1 + 0.01 * rng.standard_normal(200),
                              rng=iv.case_seed("b"), key="b")
    wide = iv.widened(boot, 0.03)
    assert wide.value == boot.value
    assert present(wide.low) < present(boot.low) and present(wide.high) > present(boot.high)
    assert np.std(present(wide.log_draws)) == pytest.approx(math.hypot(np.std(present(boot.log_draws)), 0.03), rel=0.05)
    assert iv.widened(boot, 0.03).low == wide.low  # drawn from the case's own generator: reproducible
    alone = iv.ratio_alone(1.0, 2.0)
    assert iv.widened(alone, 0.03) is alone and iv.widened(boot, 0.0) is boot


def _compare_two_runs(df: pd.DataFrame, samples: dict, a: str, b: str) -> pd.DataFrame:
    shown = df[df["run_id"].isin([a, b])]
    evidence = Evidence({k: v for k, v in samples.items() if k[0] in (a, b)}, pd.DataFrame(), None,
                        trusted_rows(df))
    return compare_devices(shown, counts_of(df), a, b, evidence=evidence).cases


def test_two_runs_of_one_device_differ_by_their_runs_spread_not_by_significance():
    # 12 runs: each case's median moves 3 % (log sd) from run to run; within a run its 60 samples
    # know it to 0.05 %. On the samples alone nearly every case of two runs would be significant.
    df, samples = _history(12, 60, seed=6)
    cases = _compare_two_runs(df, samples, "run-10", "run-11")
    assert len(cases) == 60
    significant = cases["standing"].isin(["faster", "slower"]).mean()
    assert significant <= 0.12, cases[["speedup", "speedup_low", "speedup_high", "note"]]
    assert cases["note"].str.contains("run-to-run spread").all()
    bare = [iv.speedup(k, 1, 1, baseline_samples=samples[("run-10", k, "GPU-fp-h100")],
                       candidate_samples=samples[("run-11", k, "GPU-fp-h100")]).significance for k in cases["case_key"]]
    assert np.mean([s in (iv.Significance.FASTER, iv.Significance.SLOWER) for s in bare]) > 0.6


def test_a_real_change_of_every_case_in_the_newest_run_stays_significant():
    df, samples = _history(12, 40, seed=7, last_run_factor=1 / 1.2)  # the newest run 20 % faster
    cases = _compare_two_runs(df, samples, "run-10", "run-11")
    assert (cases["standing"] == "faster").mean() >= 0.9, cases[["speedup", "speedup_low", "note"]]


def test_results_of_different_paces_are_not_paired_as_the_regression_check_segments_them():
    from tests.reports.comparisons.test_compare import A100, _compare, _two_devices

    df = _two_devices()
    copy = df["op"] == "copy"
    df.loc[copy & (df["device_name"] == A100), "pace"] = "idle"
    cmp = _compare(df, A100, H100).cases.set_index("op")
    assert cmp.loc["copy", "standing"] == "not_comparable", cmp.loc["copy", "note"]
    assert "paces differ (idle / back_to_back)" in cmp.loc["copy", "note"] and pd.isna(cmp.loc["copy", "speedup_low"])
    df.loc[copy & (df["device_name"] == A100), "pace"] = None  # stored before the pace was recorded: pairs
    assert _compare(df, A100, H100).cases.set_index("op").loc["copy", "standing"] != "not_comparable"
