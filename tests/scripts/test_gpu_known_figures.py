"""scripts/gpu_known_figures.py and scripts/gpu_nightly_projection.py: the CPU-safe parts (the
timer's known answer, the checks catching a planted wrong result, the comparison table against
synthetic rooflab results, the projection arithmetic)."""
from __future__ import annotations

import json
import time

import pandas as pd
import pytest

from tests.reports import synth
from tests.scripts.load import load_script

kf = load_script("gpu_known_figures")
proj = load_script("gpu_nightly_projection")


def test_the_timer_reads_a_known_duration_and_flushes_before_each_call():
    flushes = []
    times = kf.time_calls_ms(lambda: time.sleep(0.005), "cpu", lambda: flushes.append(1), reps=20, warmup=2)
    assert len(times) == 20 and len(flushes) == 20
    assert 4.9 <= kf.median_ms(times) <= 30.0  # a sleep never returns early; a loaded CPU may add a lot


def test_fewer_than_twenty_reps_are_refused():
    with pytest.raises(ValueError, match="at least 20"):
        kf.time_calls_ms(lambda: None, "cpu", lambda: None, reps=5)


def test_tiny_cpu_run_measures_and_checks(tmp_path):
    out = tmp_path / "kf.json"
    rc = kf.main(["--device", "cpu", "--profile", "tiny", "--only", "stream,matmul", "--json", str(out)])
    data = json.loads(out.read_text())
    assert rc == 0, data
    figures = {f["key"]: f for f in data["figures"]}
    assert set(figures) == {"copy", "triad", "dot", "matmul"}
    for f in figures.values():
        assert f["value"] > 0 and f["reps"] == 20 and f["error"] is None
        assert "MISMATCH" not in f["check"]
    assert figures["copy"]["check"] == "copy equals its source"


def test_a_planted_wrong_dot_is_caught(tmp_path, monkeypatch):
    import torch

    real_dot = torch.dot
    monkeypatch.setattr(torch, "dot", lambda a, b: real_dot(a, b) * 1.01)
    out = tmp_path / "kf.json"
    rc = kf.main(["--device", "cpu", "--profile", "tiny", "--only", "stream", "--json", str(out)])
    figures = {f["key"]: f for f in json.loads(out.read_text())["figures"]}
    assert rc == 1
    assert "MISMATCH" in figures["dot"]["check"] and "MISMATCH" not in figures["triad"]["check"]


def measured(key: str, value: float, unit: str = "GB/s") -> object:
    return kf.Measured(key, "stream", key, unit, value, 1.0, 20, "shape")


def test_comparison_marks_a_ceiling_below_the_best_reference():
    rows = pd.DataFrame(synth.device_rows(hbm_gbps=2500.0, bf16_tflops=790.0))
    table = {r.figure: r for r in kf.compare([measured("copy", 2950.0), measured("dot", 2400.0),
                                              measured("matmul", 780.0, "TFLOP/s")], rows, synth.H100,
                                             kf.PROFILES["gpu"])}
    copy = table["HBM read+write (copy)"]
    assert copy.published == 3000.0 and copy.verdict == "below"  # 2500 against 3000 measured by torch
    assert copy.ratio_measured == pytest.approx(2500.0 / 2950.0)
    matrix = table["matrix bfloat16 (8192^3 matmul)"]
    assert matrix.rooflab == pytest.approx(790.0) and matrix.published == 794.5 and matrix.verdict == "ok"
    fused = table["cos_cos torch.compile"]
    assert fused.verdict == "no rooflab figure"


def test_h200_takes_its_own_copy_reference_and_no_h100_babelstream():
    assert kf.published_for("copy", "NVIDIA H200").value == 4300.0
    assert kf.published_for("triad", "NVIDIA H200") is None
    assert kf.published_for("triad", "NVIDIA H100 80GB HBM3").value == 2970.0
    assert kf.published_for("copy", "AMD EPYC") is None


def test_case_figure_picks_rooflabs_case_of_the_same_shape():
    n = 1 << 26
    rows = pd.DataFrame([
        synth.row(op="cos_cos", family="pointwise", dtype="bfloat16", backend="compiled", params={"n": n},
                  median_ms=0.1, flops=2 * n, nbytes=4 * n),
        synth.row(op="cos_cos", family="pointwise", dtype="bfloat16", backend="compiled", params={"n": n // 4},
                  median_ms=0.001, flops=n // 2, nbytes=n),  # faster, but another size
        synth.row(op="cos_cos", family="pointwise", dtype="bfloat16", backend="eager", params={"n": n},
                  median_ms=0.2, flops=2 * n, nbytes=4 * n),
    ])
    value, key = kf.case_figure(rows, "cos_cos", "GB/s", dtype="bfloat16", backend="compiled", n=n)
    assert value == pytest.approx(4 * n / 0.1e-3 / 1e9)
    assert key.startswith("cos_cos.v1:compiled:bfloat16") and f"n={n}" in key


def test_projection_is_stratified_by_benchmark():
    p = proj.project({"a": 10, "b": 20, "c": 5}, [("a", 1.0), ("a", 1.0), ("b", 2.0), ("b", 4.0)],
                     startup_s=5.0, sample_wall_s=20.0, shards=4)
    strata = {s.benchmark: s for s in p.strata}
    assert strata["a"].projected_s == pytest.approx(10.0)
    assert strata["b"].projected_s == pytest.approx(60.0)
    assert strata["c"].projected_s == pytest.approx(10.0) and p.unsampled == ("c",)  # overall mean 2 s
    assert p.stratified_s == pytest.approx(85.0)
    assert p.shard_scaled_s == pytest.approx(5.0 + 4 * 15.0)


def test_case_walls_are_the_gaps_between_stored_results():
    startup, walls = proj.case_walls(100.0, [112.0, 103.0, 104.5])
    assert startup == pytest.approx(3.0)
    assert walls == pytest.approx([1.5, 7.5])
