"""Only trustworthy results set roofs; a result that beats a probe raises it; the newest run is shown."""
from __future__ import annotations

import numpy as np
import pytest

from rooflab.reports.data.frames import quality_of
from rooflab.reports.data.run_counts import counts_of
from rooflab.reports.pages.report import render_device_page
from rooflab.reports.roofs.ceilings import compute_ceilings
from rooflab.reports.roofs.shown_runs import choose_runs
from rooflab.reports.walls.diagnosis import diagnose
from rooflab.runners.engine.stats import summarize
from rooflab.suite.quality import noise_reasons
from tests.present import present
from tests.reports.synth import H100, device_rows, frame, row, stream


def _wide_ci_stats(median_ms: float, seed: int) -> dict:
    """Statistics of planted samples with a wide spread: their CI half-width is far above the bound."""
    rng = np.random.default_rng(seed)
    samples = median_ms * np.exp(rng.normal(0.0, 0.8, size=12))
    st = summarize(list(samples))
    return {"median_ms": st.median_ms, "rel_ci_halfwidth": st.rel_ci_halfwidth, "stop_reason": "max_time"}


def test_a_noisy_planted_result_does_not_set_a_ceiling():
    rows = device_rows(hbm_gbps=3000.0)
    fast = stream("stream_triad", 1 << 27, 4000.0)
    stats = _wide_ci_stats(fast["median_ms"], seed=5)
    assert noise_reasons(stats["rel_ci_halfwidth"], "max_time")  # the planted samples really are noisy
    fast.update(stats, median_ms=fast["median_ms"])  # keep its figure: 4000 GB/s, but noisy
    rows.append(fast)
    df = frame(rows)
    assert quality_of(df).tolist().count("noisy") == 1
    dc = compute_ceilings(df, H100)
    assert present(dc.get("hbm_rw")).value == pytest.approx(3000.0)
    # the stored quality decides where it was recorded: the same result marked good would set it
    df.loc[df.index[-1], "quality"] = "good"
    assert present(compute_ceilings(df, H100).get("hbm_rw")).value == pytest.approx(4000.0)


def test_a_contended_result_does_not_set_a_ceiling_and_is_marked():
    rows = device_rows(hbm_gbps=3000.0)
    contended = stream("stream_copy", 1 << 27, 5000.0)
    contended.update(quality="contended", quality_reasons='["load average 5.00 above 2 logical CPUs"]')
    rows.append(contended)
    df = frame(rows)
    dc = compute_ceilings(df, H100)
    assert present(dc.get("hbm_rw")).value == pytest.approx(3000.0)
    diag = diagnose(df, dc).set_index("case_key")
    marked = diag[diag["quality"] == "contended"]
    assert len(marked) == 1 and marked["roof_suspect"].iloc[0]  # 5000 GB/s against 3000: never printed as 167 %
    assert marked["efficiency"].isna().all()


def test_a_trustworthy_op_beating_the_probe_raises_the_roof():
    rows = device_rows(hbm_gbps=3000.0)
    n = 1 << 27
    rows.append(row(op="copy", family="pointwise", params={"n": n}, flops=0, nbytes=8 * n,
                    median_ms=8 * n / 3300e9 * 1e3))
    df = frame(rows)
    dc = compute_ceilings(df, H100)
    hbm = present(dc.get("hbm_rw"))
    assert hbm.value == pytest.approx(3300.0) and hbm.case_key.startswith("copy.v1")
    assert hbm.probe_value == pytest.approx(3000.0) and present(hbm.probe_case_key).startswith("stream_triad")
    diag = diagnose(df, dc)
    assert (diag["efficiency"].dropna() <= 1.0 + 1e-9).all() and not diag["roof_suspect"].any()


def test_the_device_page_shows_only_the_newest_run_by_default(tmp_path):
    old = device_rows(hbm_gbps=2000.0, run_id="run-old", run_order=1)
    new = device_rows(hbm_gbps=3000.0, run_id="run-new", run_order=2)
    df = frame(old + new)
    plan = choose_runs(counts_of(df))[H100]
    assert plan.shown == ("run-new",) and plan.roof_runs == ("run-new",) and plan.other_runs == 1
    page = render_device_page(df, H100, tmp_path / "site").read_text()
    assert "run-old" not in page.split("Points of the roofline")[1]  # no point of the old run
    assert page.count('<tr id="pt-') == sum(1 for r in new if r["op"] != "launch" and r["flops"] > 0)
    both = choose_runs(counts_of(df), runs=["run-old", "run-new"])[H100]
    assert both.shown == ("run-new", "run-old")


def test_roofs_come_from_the_newest_probe_run_when_the_shown_run_has_none():
    probes = device_rows(hbm_gbps=3000.0, run_id="run-probes", run_order=1)
    n = 1 << 26
    nightly = [row(op="copy", family="pointwise", params={"n": n}, flops=0, nbytes=8 * n, median_ms=0.5,
                   run_id="run-nightly", run_order=2)]
    plan = choose_runs(counts_of(frame(probes + nightly)))[H100]
    assert plan.shown == ("run-nightly",) and plan.roof_runs == ("run-probes",) and plan.roofs_elsewhere


def test_a_page_whose_probes_were_all_contended_says_why_it_has_no_roof(tmp_path):
    rows = device_rows(hbm_gbps=3000.0, device_name="AMD EPYC", fingerprint="fp-cpu")
    for r in rows:
        r.update(quality="contended", quality_reasons='["load average 5.00 above 2 logical CPUs"]')
    page = render_device_page(frame(rows), "AMD EPYC", tmp_path / "site").read_text()
    assert "No trustworthy probe result in the shown run(s)" in page and "No probe results yet" not in page
    assert "no wall can be named without a roof" in page and "walls: ." not in page


def test_worker_ceilings_and_gate_judge_old_rows_by_one_noise_rule():
    """Rows stored without a quality (before it was recorded): the worker's rule (suite.quality),
    the ceilings' (reports.data.frames.quality_of, through `trustworthy`) and the regression gate's
    (reports.regressions.series.run_points) call the same rows noisy. The gate used to apply a rule of its own
    (a wide CI alone, or IQR over median), so a converged row with a wide CI, or an unconverged one
    with a narrow CI and a wide IQR, was noisy for the gate and good for the ceilings."""
    from rooflab.reports.data.frames import trustworthy
    from rooflab.reports.regressions.series import run_points

    rng = np.random.default_rng(20261124)
    stops = ["converged", "clock_resolution", "noise_settled", "max_samples", "max_time"]
    rows = []
    for i in range(300):
        ci = [float(rng.uniform(0.0, 0.12)), 0.05, float("nan")][i % 3]
        r = row(op="stream_triad", family="probe", params={"n": 1 << 20}, median_ms=float(rng.uniform(0.5, 2.0)),
                flops=2 << 20, nbytes=12 << 20, run_id=f"run-{i:04d}", run_order=i + 1, rel_ci_halfwidth=ci,
                stop_reason=stops[int(rng.integers(len(stops)))], iqr_ms=float(rng.uniform(0.0, 0.5)))
        r["quality"] = None
        rows.append(r)
    df = frame(rows)
    worker = [bool(noise_reasons(None if np.isnan(r["rel_ci_halfwidth"]) else r["rel_ci_halfwidth"], r["stop_reason"]))
              for r in rows]
    ceilings = (quality_of(df) == "noisy").tolist()
    kept = set(trustworthy(df)["run_id"])
    gate = run_points(df).set_index("run_id").loc[df["run_id"], "noisy"].tolist()
    assert 30 < sum(worker) < 270  # both kinds present
    assert ceilings == worker
    assert [r["run_id"] not in kept for r in rows] == worker
    assert gate == worker
