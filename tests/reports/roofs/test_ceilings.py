from __future__ import annotations

import pytest

from rooflab.reports.data.frames import select_device
from rooflab.reports.errors import ReportInputError
from rooflab.reports.roofs.ceilings import bandwidth_roof, compute_ceilings, compute_roof
from rooflab.reports.walls.diagnosis import diagnose, fusion_gains, most_left_on_table, unfused_bytes
from tests.present import present
from tests.reports.synth import H100, H100_L2, device_rows, frame, gemm, launch, row, stream


def _dc(rows):
    df = frame(rows)
    return compute_ceilings(df, H100), df


def test_ceilings_equal_the_maxima_they_come_from():
    rows = device_rows(hbm_gbps=2900.0, l2_gbps=8000.0, fp32_tflops=55.0, bf16_tflops=720.0, launch_ms=0.006)
    dc, _ = _dc(rows)
    assert dc.get("hbm_rw").value == pytest.approx(2900.0)
    assert dc.get("hbm_ro").value == pytest.approx(2900.0 * 1.05)
    assert dc.get("l2").value == pytest.approx(8000.0)
    assert dc.get("vector", dtype="float32").value == pytest.approx(55.0)
    assert dc.get("matrix", dtype="bfloat16").value == pytest.approx(720.0)
    assert dc.get("launch", timing_mode="launch").value == pytest.approx(0.006)
    assert dc.get("launch", timing_mode="graph").value == pytest.approx(0.0012)
    hbm = dc.get("hbm_rw")
    assert hbm.case_key.startswith("stream_triad.v1:eager:float32:cold:")
    assert hbm.run_id == "run-1"
    assert hbm.datasheet == 3350 and hbm.ratio == pytest.approx(2900 / 3350)
    assert dc.get("matrix", dtype="bfloat16").ratio == pytest.approx(720 / 989.4)
    assert dc.spec.key == "H100 SXM" and dc.l2_bytes == H100_L2


def test_below_4x_l2_and_throttled_results_are_ignored():
    rows = device_rows(hbm_gbps=3000.0)
    # faster, but only 2x L2: not an HBM figure
    n_small = 2 * H100_L2 // 12
    rows.append(stream("stream_triad", n_small, 5000.0))
    # faster and big, but throttled (nonsense, but must be excluded) or failed
    rows.append(stream("stream_copy", 1 << 27, 4000.0, throttled=True))
    rows.append(gemm(4096, 4096, 4096, 900.0, throttled=True))
    bad = stream("stream_copy", 1 << 27, 4500.0)
    bad["status"] = "incorrect"
    rows.append(bad)
    # a hot result above the L2 size is not an L2 figure
    rows.append(stream("stream_copy", 1 << 26, 20000.0, cache="hot"))
    dc, _ = _dc(rows)
    assert dc.get("hbm_rw").value == pytest.approx(3000.0)
    assert dc.get("matrix", dtype="bfloat16").value == pytest.approx(700.0)
    assert dc.get("l2").value == pytest.approx(9000.0)


def test_unknown_device_has_measured_roofs_only():
    rows = device_rows(device_name="Mystery GPU 9000")
    dc = compute_ceilings(frame(rows), "Mystery GPU 9000")
    assert dc.spec is None
    assert all(c.datasheet is None and c.ratio is None for c in dc.ceilings)
    assert compute_roof(dc, "float8_e4m3fn", matrix=True) is None
    assert present(bandwidth_roof(dc)).origin == "measured"


def test_roofs_fall_back_to_the_datasheet():
    dc, _ = _dc([launch(0.005)])
    roof = present(compute_roof(dc, "float8_e4m3fn", matrix=True))
    assert roof.origin == "datasheet" and roof.value == pytest.approx(1978.9)
    assert present(bandwidth_roof(dc)).value == 3350


def test_walls_of_known_cases():
    rows = device_rows(hbm_gbps=3000.0, bf16_tflops=700.0, launch_ms=0.005)
    big_gemm = gemm(16384, 16384, 16384, 600.0)  # 86 % of the matrix roof
    big_copy = row(op="copy", family="pointwise", params={"n": 1 << 28}, flops=0, nbytes=2 * 4 << 28,
                   median_ms=(2 * 4 << 28) / 2.5e12 * 1e3)
    tiny = row(op="add", family="pointwise", params={"n": 1024}, flops=1024, nbytes=3 * 4 * 1024, median_ms=0.007)
    small_gemm = gemm(128, 128, 128, 2.0)
    df = frame(rows + [big_gemm, big_copy, tiny, small_gemm])
    dc = compute_ceilings(df, H100)
    diag = diagnose(df, dc).set_index("case_key")
    g = diag.loc[big_gemm["case_key"]]
    assert g["wall"] == "compute" and g["efficiency"] == pytest.approx(600 / 700)
    c = diag.loc[big_copy["case_key"]]
    assert c["wall"] == "bandwidth" and c["efficiency"] == pytest.approx(2500 / 3000)
    assert diag.loc[tiny["case_key"]]["wall"] == "overhead"
    assert diag.loc[small_gemm["case_key"]]["wall"] == "overhead"  # roofline time below the launch floor
    left = most_left_on_table(diagnose(df, dc))
    assert (left["wall"] != "overhead").all()
    assert list(left["efficiency"]) == sorted(left["efficiency"])


def test_hot_cases_are_held_against_l2():
    rows = device_rows(hbm_gbps=3000.0, l2_gbps=9000.0)
    hot = row(op="copy", family="pointwise", params={"n": 1 << 20}, flops=0, nbytes=8 << 20, cache="hot",
              median_ms=(8 << 20) / 4.5e12 * 1e3)
    df = frame(rows + [hot])
    d = diagnose(df, compute_ceilings(df, H100)).set_index("case_key").loc[hot["case_key"]]
    assert d["bandwidth_roof_gbps"] == pytest.approx(9000.0) and d["efficiency"] == pytest.approx(0.5)


def test_fusion_gains_pair_eager_with_compiled_and_naive_with_fused_attention():
    n = 1 << 24
    eager = row(op="cos_cos", family="pointwise", params={"n": n}, flops=2 * n, nbytes=2 * 4 * n, median_ms=0.2)
    compiled = row(op="cos_cos", family="pointwise", params={"n": n}, flops=2 * n, nbytes=2 * 4 * n, median_ms=0.11,
                   backend="compiled")
    other = row(op="cos_cos", family="pointwise", params={"n": n // 2}, flops=n, nbytes=4 * n, median_ms=0.05)
    shape = {"batch": 2, "heads": 8, "seq_q": 1024, "seq_k": 1024, "head_dim": 64, "causal": False}
    fl = 4 * 2 * 8 * 1024 * 1024 * 64
    fb = (2 * 1024 + 2 * 1024) * 2 * 8 * 64 * 2
    naive = row(op="attention", family="attention", dtype="float16", params={**shape, "kernel": "naive"},
                flops=fl, nbytes=fb, median_ms=1.0)
    flash = row(op="attention", family="attention", dtype="float16", params={**shape, "kernel": "sdpa_flash"},
                flops=fl, nbytes=fb, median_ms=0.25)
    naive_c = row(op="attention", family="attention", dtype="float16", params={**shape, "kernel": "naive"},
                  flops=fl, nbytes=fb, median_ms=0.5, backend="compiled")
    gains = fusion_gains(frame([eager, compiled, other, naive, flash, naive_c]))
    assert len(gains) == 3
    assert gains[gains["comparison"] == "naive vs compiled naive"].iloc[0]["speedup"] == pytest.approx(2.0)
    cc = gains[gains["op"] == "cos_cos"].iloc[0]
    assert cc["speedup"] == pytest.approx(0.2 / 0.11)
    assert cc["unfused_bytes"] == 4 * n * 4 and cc["bytes_saved"] == 2 * n * 4 and cc["bytes_ratio"] == 2
    at = gains[gains["comparison"] == "naive vs sdpa_flash"].iloc[0]
    assert at["comparison"] == "naive vs sdpa_flash" and at["speedup"] == pytest.approx(4.0)
    assert at["bytes_saved"] == 4 * 2 * 8 * 1024 * 1024 * 2
    assert unfused_bytes("matmul_bias_gelu", {"m": 2, "n": 3, "k": 4}, "float32") == (8 + 12 + 30 + 3) * 4


def test_select_device():
    df = frame(device_rows() + device_rows(device_name="NVIDIA A100-SXM4-80GB", fingerprint="fp-a100abcdef"))
    assert select_device(df, "h100")[0] == H100
    assert select_device(df, "fp-a100abc")[0] == "NVIDIA A100-SXM4-80GB"
    with pytest.raises(ReportInputError, match="NVIDIA A100-SXM4-80GB, NVIDIA H100 80GB HBM3"):
        select_device(df, "B200")
    with pytest.raises(ReportInputError, match="ambiguous"):
        select_device(df, "nvidia")


def test_float32_gemm_is_held_against_the_best_float32_gemm_not_the_fma_probe():
    rows = device_rows(fp32_tflops=50.0)
    best = gemm(8192, 8192, 8192, 45.0, dtype="float32")
    slow = gemm(2048, 2048, 2048, 30.0, dtype="float32")
    df = frame(rows + [best, slow])
    dc = compute_ceilings(df, H100)
    fp32 = present(dc.get("matrix", dtype="float32"))
    assert fp32.value == pytest.approx(45.0)
    assert fp32.datasheet == pytest.approx(66.9)  # vector fp32: no tensor cores
    diag = diagnose(df, dc).set_index("case_key")
    assert diag.loc[slow["case_key"], "efficiency"] == pytest.approx(30 / 45)
    assert diag.loc[best["case_key"], "compute_roof_origin"] == "measured"


def test_select_device_by_kind():
    df = frame(device_rows() + device_rows(device_name="AMD EPYC 7763", fingerprint="fp-cpu"))
    df.loc[df["device_name"] == "AMD EPYC 7763", "device_kind"] = "cpu"
    assert select_device(df, "cpu")[0] == "AMD EPYC 7763"
    assert select_device(df, "cuda")[0] == H100


def test_hot_cases_larger_than_the_l2_are_held_against_hbm():
    rows = device_rows(hbm_gbps=3000.0, l2_gbps=9000.0)
    n = 1 << 26  # 512 MiB moved: far beyond the 50 MiB L2
    big_hot = row(op="copy", family="pointwise", params={"n": n}, flops=0, nbytes=8 * n, cache="hot",
                  median_ms=8 * n / 1.5e12 * 1e3)
    df = frame(rows + [big_hot])
    d = diagnose(df, compute_ceilings(df, H100)).set_index("case_key").loc[big_hot["case_key"]]
    assert d["bandwidth_roof_gbps"] == pytest.approx(3000.0) and d["efficiency"] == pytest.approx(0.5)


def test_launch_floor_ignores_version_1_results_that_timed_the_kernel() -> None:
    # v1 of the launch op reported a kernel's event time (2 us); v2 the host time per launch (6 us)
    old = [launch(0.002, op_version=1, run_id=f"old-{i}") for i in range(3)]
    dc, _ = _dc(old + [launch(0.006)])
    assert dc.get("launch", timing_mode="launch").value == pytest.approx(0.006)


def test_each_ceiling_says_how_the_result_that_set_it_was_measured():
    rows = device_rows(hbm_gbps=2900.0, bf16_tflops=720.0)
    rows.append(gemm(8192, 8192, 8192, 790.0, cache="hot", pace="back_to_back"))  # the peak finder, hot
    rows.append(gemm(8192, 8192, 4096, 760.0, cache="cold", pace="idle", flush_method="read_sweep"))
    dc, _ = _dc(rows)
    matrix = dc.get("matrix", dtype="bfloat16")
    assert matrix.value == pytest.approx(790.0)
    assert (matrix.cache, matrix.pace, matrix.method) == ("hot", "back_to_back", "hot, back_to_back")
    hbm = dc.get("hbm_rw")
    assert (hbm.cache, hbm.flush_method, hbm.method) == ("cold", "write_sweep", "cold write_sweep, back_to_back")
    assert hbm.as_dict()["method"] == hbm.method and hbm.as_dict()["pace"] == "back_to_back"
    # a result stored without a method (an old frame) says nothing rather than something wrong
    old = stream("stream_copy", 1 << 27, 3100.0)
    del old["flush_method"], old["pace"]
    dc_old, _ = _dc([old])
    assert dc_old.get("hbm_rw").method == "cold" and dc_old.get("hbm_rw").pace is None
