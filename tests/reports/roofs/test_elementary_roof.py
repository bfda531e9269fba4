"""The elementary-function roofs (reports/roofs/elementary.py) and the diagnosis that uses them: the ceilings
are the probe's best rates, and an op whose elementary functions take longer than its bytes gets the
compute wall with that roof named."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from rooflab.reports.roofs.ceilings import compute_ceilings
from rooflab.reports.roofs.elementary import elementary_roof, elementary_time
from rooflab.reports.walls.diagnosis import diagnose
from tests.present import present
from tests.reports.synth import H100, SIZES, device_rows, row

N = 1 << 26


def probe(fn: str, k: int, gevals: float, *, dtype: str = "float32", n: int = N, **kw) -> dict:
    evaluations = k * n
    flops = evaluations * (2 if fn == "erf" else 1)
    return row(op="elementary", family="probe", dtype=dtype, params={"n": n, "k": k, "fn": fn},
               median_ms=evaluations / (gevals * 1e9) * 1e3, flops=flops, nbytes=2 * n * SIZES[dtype],
               backend="compiled", **kw)


def cos_cos(median_ms: float, *, dtype: str = "bfloat16", n: int = N) -> dict:
    return row(op="cos_cos", family="pointwise", dtype=dtype, params={"n": n}, median_ms=median_ms, flops=2 * n,
               nbytes=2 * n * SIZES[dtype], backend="compiled")


def test_ceilings_are_the_best_rate_per_function_and_dtype():
    rows = pd.DataFrame(device_rows() + [
        probe("cos", 16, 800.0), probe("cos", 256, 1000.0), probe("cos", 64, 990.0),
        probe("exp", 256, 2500.0), probe("cos", 256, 1200.0, dtype="bfloat16"),
        probe("erf", 256, 9000.0, rel_ci_halfwidth=0.2, stop_reason="max_time"),  # noisy: never a roof
    ])
    dc = compute_ceilings(rows, H100)
    found = {(c.function, c.dtype): c for c in dc.ceilings if c.kind == "elementary"}
    assert set(found) == {("cos", "float32"), ("exp", "float32"), ("cos", "bfloat16")}
    assert found[("cos", "float32")].value == pytest.approx(1000.0)
    assert "k=256" in found[("cos", "float32")].case_key
    assert found[("cos", "float32")].label == "elementary cos float32" and found[("cos", "float32")].unit == "Geval/s"
    assert found[("exp", "float32")].value == pytest.approx(2500.0)
    assert present(elementary_roof(dc, "cos", "bfloat16")).value == pytest.approx(1200.0)
    assert present(elementary_roof(dc, "exp", "bfloat16")).dtype == "float32"  # a 16-bit dtype falls back to float32's
    assert elementary_roof(dc, "erf", "float32") is None
    assert elementary_roof(dc, "cos", "float64") is None  # float64 has no fallback


def test_a_cos_heavy_op_gets_the_compute_wall_at_the_elementary_roof():
    # cos_cos compiled, bf16, 2^26 elements at 134.2 us: 2,000 GB/s against a 3,000 GB/s roof, but
    # 2^27 cos at 1,000 Geval/s take 134.2 us: the cosines are the wall, not the bytes
    median_ms = 2 * N / 1e12 * 1e3
    with_probe = pd.DataFrame(device_rows(hbm_gbps=3000.0) + [probe("cos", 256, 1000.0), cos_cos(median_ms)])
    diag = diagnose(with_probe, compute_ceilings(with_probe, H100)).set_index("op")
    r = diag.loc["cos_cos"]
    assert r["wall"] == "compute" and r["wall_roof"] == "elementary cos float32"
    assert r["elementary_ms"] == pytest.approx(median_ms)
    assert r["memory_ms"] == pytest.approx(2 * N * 2 / 3000e9 * 1e3)
    assert r["roofline_ms"] == pytest.approx(median_ms) and r["efficiency"] == pytest.approx(1.0)

    without = pd.DataFrame(device_rows(hbm_gbps=3000.0) + [cos_cos(median_ms)])
    r = diagnose(without, compute_ceilings(without, H100)).set_index("op").loc["cos_cos"]
    assert r["wall"] == "bandwidth" and r["wall_roof"] == "hbm_rw"
    assert r["efficiency"] == pytest.approx(2 * N * 2 / 3000e9 * 1e3 / median_ms)
    assert r["elementary_missing"] == "cos" and math.isnan(r["elementary_ms"])


def test_an_op_with_few_elementary_functions_keeps_its_bandwidth_wall():
    # one cos per element at 1,000 Geval/s takes less than its 4 bytes at 3,000 GB/s (eager cos_cos
    # has two: 2n cos = 0.134 ms against 2n·s = 0.089 ms; a float32 gelu's n erf at 2,000: 0.034 ms)
    gelu = row(op="gelu", family="pointwise", dtype="float32", params={"n": N}, median_ms=0.2, flops=5 * N,
               nbytes=2 * N * 4)
    rows = pd.DataFrame(device_rows(hbm_gbps=3000.0) + [probe("erf", 256, 2000.0), gelu])
    r = diagnose(rows, compute_ceilings(rows, H100)).set_index("op").loc["gelu"]
    assert r["wall"] == "bandwidth" and r["wall_roof"] == "hbm_rw"
    assert r["elementary_ms"] == pytest.approx(N / 2000e9 * 1e3)
    assert r["elementary_missing"] == ""


def test_elementary_time_adds_the_functions_and_names_the_largest():
    rows = pd.DataFrame(device_rows() + [probe("cos", 64, 1000.0), probe("exp", 64, 4000.0)])
    dc = compute_ceilings(rows, H100)
    t = elementary_time(dc, {"cos": 10**9, "exp": 8 * 10**9}, "float32")
    assert t.ms == pytest.approx(1.0 + 2.0) and t.roof == "elementary exp float32" and t.missing == ()
    assert elementary_time(dc, {}, "float32").ms == 0.0
    missing = elementary_time(dc, {"cos": 10, "erf": 10}, "float32")
    assert math.isnan(missing.ms) and missing.missing == ("erf",)


def test_a_part_with_more_bandwidth_and_the_same_cos_roof_is_predicted_no_faster():
    # the H100/H200 story: 1.39x the bandwidth, the same SMs and clocks: a case at its cos roof
    # is predicted 1.00x, where the bandwidth wall would have predicted 1.39x
    from rooflab.reports.comparisons.speedup_table import Side, compare

    median_ms = 2 * N / 1e12 * 1e3
    base_rows = pd.DataFrame(device_rows(hbm_gbps=3139.0) + [probe("cos", 256, 1000.0), cos_cos(median_ms)])
    cand_rows = pd.DataFrame(
        [dict(r, device_name="NVIDIA H200", device_fingerprint="fp-h200")
         for r in device_rows(hbm_gbps=4373.0) + [probe("cos", 256, 1000.0), cos_cos(median_ms * 1.01)]])
    base = Side(H100, H100, base_rows, compute_ceilings(base_rows, H100))
    cand = Side("NVIDIA H200", "NVIDIA H200", cand_rows, compute_ceilings(cand_rows, "NVIDIA H200"))
    got = compare(base, cand).set_index("op").loc["cos_cos"]
    assert got["wall"] == "compute" and got["predicted_speedup"] == pytest.approx(1.0)
    assert got["deviation"] == pytest.approx(1 / 1.01)
