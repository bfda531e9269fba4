from __future__ import annotations

import pytest

from rooflab.reports.errors import ReportInputError
from rooflab.reports.walls.predict import parse_shape, predict
from tests.reports.synth import H100, device_rows, frame


def test_big_gemm_on_h100_datasheet_matches_the_hand_computation():
    p = predict("matmul", parse_shape("m=8192,n=8192,k=8192"), "bfloat16", "NVIDIA H100 80GB HBM3")
    flops = 2 * 8192**3
    nbytes = 3 * 8192 * 8192 * 2
    assert p.flops == flops and p.bytes == nbytes
    assert p.intensity == pytest.approx(flops / nbytes)  # 2730.7 FLOP/byte
    assert p.ridge_flop_per_byte == pytest.approx(989.4e12 / 3350e9)  # 295.3 FLOP/byte
    assert p.wall == "compute"
    assert p.roofline_ms == pytest.approx(flops / 989.4e12 * 1e3)  # 1.111 ms
    assert p.attainable_tflops == pytest.approx(989.4)
    assert p.compute_origin == "datasheet" and p.bandwidth_origin == "datasheet"


def test_copy_on_h100_is_bandwidth_bound():
    p = predict("copy", {"n": 1 << 28}, "float32", "H100 SXM")
    assert p.bytes == 2 * 4 * (1 << 28) and p.flops == 0
    assert p.wall == "bandwidth"
    assert p.roofline_ms == pytest.approx(2 * 4 * (1 << 28) / 3350e9 * 1e3)  # 0.641 ms
    assert p.attainable_tflops == 0


def test_small_gemm_below_the_ridge_on_a100():
    p = predict("matmul", {"m": 64, "n": 64, "k": 64}, "float16", "NVIDIA A100-SXM4-80GB")
    assert p.intensity == pytest.approx(2 * 64**3 / (3 * 64 * 64 * 2))  # 21.3 FLOP/byte
    assert p.wall == "bandwidth"
    assert p.attainable_tflops == pytest.approx(p.intensity * 2039e9 / 1e12)


def test_measured_ceilings_are_used_when_the_database_has_them():
    df = frame(device_rows(hbm_gbps=3000.0, bf16_tflops=700.0, launch_ms=0.005))
    p = predict("matmul", {"m": 8192, "n": 8192, "k": 8192}, "bfloat16", "h100", df)
    assert p.device == H100
    assert p.compute_origin == "measured" and p.compute_tflops == pytest.approx(700.0)
    # its own mix: A and B read at the read-only roof (stream_dot, 3150 GB/s), C written at the
    # read-write roof (no write-only roof measured): 3 n^2 bytes over 2 n^2 / 3150 + n^2 / 3000
    assert p.bandwidth_origin == "measured" and p.bandwidth_gbps == pytest.approx(3 / (2 / 3150 + 1 / 3000))
    assert p.launch_floor_ms == pytest.approx(0.005)
    tiny = predict("add", {"n": 256}, "float32", "h100", df)
    assert tiny.wall == "overhead"
    # a dtype without a measured ceiling falls back to the datasheet
    fp8 = predict("matmul", {"m": 4096, "n": 4096, "k": 4096}, "float8_e4m3fn", "h100", df)
    assert fp8.compute_origin == "datasheet" and fp8.compute_tflops == pytest.approx(1978.9)


@pytest.mark.parametrize("args, match", [
    (("nope", {}, "float32", "H100 SXM"), "known ops: .*matmul"),
    (("matmul", {"q": 3}, "float32", "H100 SXM"), "parameters: m, n, k"),
    (("matmul", {"m": -3}, "float32", "H100 SXM"),
     "--shape: m must be positive \\(a size\\), got -3; allowed: integers > 0"),
    (("matmul", {"m": 64}, "int32", "H100 SXM"), "allowed: float64"),
    (("matmul", {"m": 64}, "float32", "Voodoo 5"), "known: .*H100 SXM"),
])
def test_bad_input_names_what_is_allowed(args, match):
    with pytest.raises(ReportInputError, match=match):
        predict(*args)


def test_parse_shape():
    assert (parse_shape("m=4096, n=2.5,causal=true,kernel=naive")
            == {"m": 4096, "n": 2.5, "causal": True, "kernel": "naive"})
    with pytest.raises(ReportInputError, match="name=value"):
        parse_shape("m4096")


def test_half_precision_pointwise_falls_back_to_the_float32_vector_roof():
    p = predict("softmax", {"rows": 8192, "cols": 8192}, "float16", "MI300X")
    assert p.compute_tflops == pytest.approx(163.4) and "MLE" in p.compute_source
    assert p.wall == "bandwidth"
