from __future__ import annotations

import math

import pandas as pd
import pytest

from rooflab.reports.compare import geomean, most_deviating
from rooflab.reports.comparison import compare_devices
from rooflab.reports.errors import ReportInputError
from rooflab.reports.runsel import counts_of
from tests.reports.synth import device_rows, frame, gemm, row

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
    a_kw = dict(device_name=A100, fingerprint="fp-a100", run_id="run-a", l2_bytes=40 << 20)
    b_kw = dict(device_name=H100, fingerprint="fp-h100", run_id="run-b", run_order=2)
    # the workload on each device stays below its probes (a faster one would raise the roof)
    a = device_rows(hbm_gbps=2400.0, fp32_tflops=40.0, bf16_tflops=270.0, launch_ms=0.006, **a_kw) + _cases(1.0, 1.0, **a_kw)
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
