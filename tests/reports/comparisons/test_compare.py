from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest

from rooflab.reports.comparisons.compare_devices import compare_devices
from rooflab.reports.comparisons.speedup_table import geomean, most_deviating
from rooflab.reports.data.run_counts import counts_of
from rooflab.reports.errors import ReportInputError
from tests.reports.synth import device_rows, frame, gemm, launch, row

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"


def _cases(scale_bw: float, scale_compute: float, **kw) -> list[dict]:
    """Workload cases whose times shrink by the given factors."""
    n = 1 << 28
    return [
        row(op="copy", family="pointwise", params={"n": n}, flops=0, nbytes=8 * n, median_ms=1.0 / scale_bw, **kw),
        row(op="add", family="pointwise", params={"n": n}, flops=n, nbytes=12 * n, median_ms=1.5 / scale_bw, **kw),
        row(op="sum", family="reduction", params={"rows": 4096, "cols": 65536}, flops=4096 * 65536,
            nbytes=4 * 4096 * 65537, median_ms=0.6 / scale_bw, **kw),
        gemm(16384, 16384, 16384, 250.0 * scale_compute, **kw),
        gemm(8192, 8192, 8192, 240.0 * scale_compute, dtype="float16", **kw),
    ]


def _two_devices():
    a_kw: dict[str, Any] = dict(device_name=A100, fingerprint="fp-a100", run_id="run-a", l2_bytes=40 << 20)
    b_kw: dict[str, Any] = dict(device_name=H100, fingerprint="fp-h100", run_id="run-b", run_order=2)
    # the workload on each device stays below its probes (a faster one would raise the roof)
    a = (device_rows(hbm_gbps=2400.0, fp32_tflops=40.0, bf16_tflops=270.0, launch_ms=0.006, **a_kw)
         + _cases(1.0, 1.0, **a_kw))
    a.append(gemm(8192, 8192, 8192, 260.0, dtype="float16", op="matmul_bias_gelu", **a_kw))
    b = device_rows(hbm_gbps=3600.0, bf16_tflops=810.0, launch_ms=0.006, **b_kw) + _cases(1.5, 3.0, **b_kw)
    return frame(a + b)


def _compare(df: pd.DataFrame, baseline: str, candidate: str):
    return compare_devices(df, counts_of(df), baseline, candidate)


def test_two_devices_compare_at_their_known_ratio():
    df = _two_devices()
    result = _compare(df, "A100", "run-b")
    cmp = result.cases.set_index("case_key")
    work = [r["case_key"] for r in _cases(1, 1)]
    assert set(work) <= set(cmp.index)
    assert "matmul_bias_gelu" not in set(cmp["op"])  # not measured on the candidate
    for key in work[:3]:
        assert cmp.loc[key, "speedup"] == pytest.approx(1.5)
        assert cmp.loc[key, "wall"] == "bandwidth"
        assert cmp.loc[key, "predicted_speedup"] == pytest.approx(1.5)  # 3600 / 2400 measured HBM
        assert cmp.loc[key, "deviation"] == pytest.approx(1.0)
    g = cmp.loc[work[3]]
    assert g["speedup"] == pytest.approx(3.0) and g["wall"] == "compute"
    assert g["predicted_speedup"] == pytest.approx(3.0)  # 810 / 270 measured bf16 matrix
    s = result.summary.set_index(["family", "dtype"])
    assert s.loc[("pointwise", "float32"), "speedup_geomean"] == pytest.approx(1.5)
    assert s.loc[("gemm", "bfloat16"), "speedup_geomean"] == pytest.approx(3.0)
    assert s.loc[("all", ""), "cases"] == len(cmp)
    # the run named on one side, the device on the other: its runs of the same suite
    assert result.pairing.baseline.runs == ("run-a",) and result.pairing.candidate.runs == ("run-b",)


def test_deviation_finds_the_case_that_misses_its_prediction():
    df = _two_devices()
    cmp = _compare(df, A100, H100).cases
    work = [r["case_key"] for r in _cases(1, 1)]
    top = most_deviating(cmp[cmp["case_key"].isin(work)], limit=3)
    # fp16 GEMM: the fp16 matrix ceilings are the best fp16 gemm results: 720 on H100, but 260 on A100
    # (from matmul_bias_gelu, measured only there), so 720/260 is predicted and 3.0 measured
    first = top.iloc[0]
    assert first["case_key"] in work and first["op"] == "matmul" and first["dtype"] == "float16"
    assert first["predicted_speedup"] == pytest.approx(720 / 260)
    assert first["deviation"] == pytest.approx(3.0 / (720 / 260))
    assert top["deviation"].map(lambda d: abs(math.log(d))).is_monotonic_decreasing


def test_geomean_and_bad_sides():
    assert geomean(pd.Series([2.0, 8.0, -1.0, None])) == pytest.approx(4.0)
    df = _two_devices()
    with pytest.raises(ReportInputError, match="run-a"):
        _compare(df, "B200", "H100")
    with pytest.raises(ReportInputError, match="name two of its runs"):
        _compare(df, "H100", "fp-h100")


def _launch_bound(ms: float, **kw) -> dict:
    """A hot copy of 2^15 floats: far below any roof, so it is launch-bound."""
    n = 1 << 15
    return row(op="stream_copy", family="probe", params={"n": n}, flops=0, nbytes=8 * n, median_ms=ms, cache="hot",
               **kw)


def _floors_frame(second_ms: float) -> pd.DataFrame:
    """An H100 whose launch floor moved from 9.1 to 7.1 us between two runs, an H200 at 8.1 us."""
    h100: dict[str, Any] = dict(device_name=H100, fingerprint="fp-h100")
    h200: dict[str, Any] = dict(device_name="NVIDIA H200", fingerprint="fp-h200", run_id="h200-1", run_order=3)
    rows = (device_rows(launch_ms=0.0091, run_id="h100-1", run_order=1, **h100)
            + [launch(0.0071, run_id="h100-2", run_order=2, **h100)]
            + device_rows(hbm_gbps=4300.0, launch_ms=0.0081, **h200)
            + [_launch_bound(0.0045, run_id="h100-1", run_order=1, **h100), _launch_bound(0.0045 / 1.05, **h200)])
    second = _launch_bound(0.0045, run_id="h100-1", run_order=1, **h100)
    second["case_key"] = second["case_key"].replace("n=32768", "n=65536")
    rows += [second, {**second, **h200, "run_id": "h200-1", "run_order": 3, "median_ms": 0.0045 / second_ms}]
    for r in rows:
        r["suite"] = "roofline" if r["run_id"] == "h100-2" else "quick"
    return frame(rows)


def test_a_launch_bound_prediction_is_the_range_of_the_floors_and_no_deviation_inside_it():
    cmp = _compare(_floors_frame(1.25), H100, "H200").cases.set_index("case_key")
    bound = cmp[cmp["wall"] == "overhead"]
    inside = bound.loc[bound.index.str.contains("n=32768")].iloc[0]
    # central: the paired (quick) runs' floors, 9.1 / 8.1; range: every run's, 7.1 / 8.1 to 9.1 / 8.1
    assert inside["predicted_speedup"] == pytest.approx(9.1 / 8.1)
    assert inside["predicted_low"] == pytest.approx(7.1 / 8.1) and inside["predicted_high"] == pytest.approx(9.1 / 8.1)
    assert inside["speedup"] == pytest.approx(1.05) and inside["deviation"] == 1.0
    assert inside["predicted_from"] == "eager launch floors"
    outside = bound.loc[bound.index.str.contains("n=65536")].iloc[0]
    assert outside["deviation"] == pytest.approx(1.25 / (9.1 / 8.1))
    top = most_deviating(cmp.reset_index())
    assert outside.name in set(top["case_key"]) and inside.name not in set(top["case_key"])


def test_different_flush_methods_are_not_paired_and_untrusted_results_not_judged():
    df = _two_devices()
    copy = df["op"] == "copy"
    df.loc[copy & (df["device_name"] == A100), "flush_method"] = "read_sweep"
    df.loc[copy & (df["device_name"] == H100), "flush_method"] = "write_sweep"
    df.loc[(df["op"] == "add") & (df["device_name"] == H100), "quality"] = "noisy"
    result = _compare(df, A100, H100)
    cmp = result.cases.set_index("op")
    assert cmp.loc["copy", "standing"] == "not_comparable" and "read_sweep / write_sweep" in cmp.loc["copy", "note"]
    assert cmp.loc["add", "standing"] == "untrusted" and "candidate noisy" in cmp.loc["add", "note"]
    for op in ("copy", "add"):
        assert math.isnan(cmp.loc[op, "deviation"]) and pd.isna(cmp.loc[op, "speedup_low"])
    assert cmp.loc["sum", "standing"] in ("faster", "not_significant", "no_interval")
    point = result.summary.set_index(["family", "dtype"]).loc[("pointwise", "float32")]
    assert point["cases"] == 2 and point["compared"] == 0 and point["left_out"] == 2
    assert math.isnan(point["speedup_geomean"])
    # the same method on both sides, or one not recorded (results stored before it was), pairs
    df.loc[copy & (df["device_name"] == H100), "flush_method"] = "read_sweep"
    df.loc[copy & (df["device_name"] == A100), "flush_method"] = None
    assert _compare(df, A100, H100).cases.set_index("op").loc["copy", "standing"] != "not_comparable"


def test_two_collective_modes_are_not_paired() -> None:
    """The same case key timed isolated on one side (as collectives were before the modes) and stream
    on the other is not compared, even where the pace recorded is the same (a database upgraded to
    revision 0010 before its pace backfill)."""
    df = _two_devices()
    copy = df["op"] == "copy"
    df.loc[copy & (df["device_name"] == A100), "collective_mode"] = "isolated"
    df.loc[copy & (df["device_name"] == H100), "collective_mode"] = "stream"
    cmp = _compare(df, A100, H100).cases.set_index("op")
    assert cmp.loc["copy", "standing"] == "not_comparable" and "isolated / stream" in cmp.loc["copy", "note"]
    df.loc[copy & (df["device_name"] == A100), "collective_mode"] = "stream"
    assert _compare(df, A100, H100).cases.set_index("op").loc["copy", "standing"] != "not_comparable"
