"""rooflab.reports.walls.breakdown against a synthetic block whose parts run at known fractions of known roofs."""
from __future__ import annotations

import pytest

from rooflab.reports.roofs.ceilings import compute_ceilings
from rooflab.reports.roofs.gpu_specs import match_device
from rooflab.reports.walls.breakdown import breakdowns
from tests.reports.synth import H100, device_rows, frame, layer_block


def _breakdown(gap_ms: float = 0.05, **profile_changes):
    rows, profiles, parts = layer_block(matrix_tflops=700.0, hbm_gbps=3000.0, gap_ms=gap_ms, compiled_speedup=1.25)
    for column, value in profile_changes.items():
        profiles[column] = value
    results = frame(device_rows(hbm_gbps=3000.0, bf16_tflops=700.0) + rows)
    (b,) = breakdowns(profiles, parts, results, compute_ceilings(results, H100))
    return b


def test_parts_walls_efficiency_mfu_and_fusion_have_their_known_values() -> None:
    b = _breakdown()
    ridge = 700e12 / 3000e9  # FLOP/byte
    for p in b.parts:
        compute_ms, memory_ms = p.flops / 700e12 * 1e3, p.bytes / 3000e9 * 1e3
        assert p.wall == ("compute" if p.flops / p.bytes >= ridge else "bandwidth"), p.name
        assert p.efficiency == pytest.approx(max(compute_ms, memory_ms) / p.time_ms, rel=1e-9), p.name
        if p.kind == "matmul":
            assert p.wall == "compute" and p.efficiency == pytest.approx(0.7, rel=1e-9), p.name
        if p.kind == "memory":
            assert p.wall == "bandwidth" and p.efficiency == pytest.approx(0.4, rel=1e-9), p.name
    assert b.sums_ok and b.sum_error == pytest.approx(0.0, abs=1e-12)
    achieved = b.flops / (b.median_ms * 1e-3) / 1e12
    assert b.mfu_measured == pytest.approx(achieved / 700.0)
    spec = match_device(H100)
    assert spec is not None
    peak = spec.peak_tflops("bfloat16", matrix=True)
    assert peak is not None
    sheet = peak.value
    assert b.mfu_datasheet == pytest.approx(achieved / sheet)
    assert 0 < b.mfu_datasheet < b.mfu_measured < 0.7  # memory-bound parts and the gap pull it below 70 %
    (chain,) = [c for c in b.chains if c.saved_bytes]
    assert chain.parts == ("residual1", "norm2")
    assert chain.saved_bytes == 8 * 1024 * 768 * 2 and chain.saved_ms == pytest.approx(chain.saved_bytes / 3000e9 * 1e3)
    assert b.estimated_speedup == pytest.approx(b.median_ms / (b.median_ms - chain.saved_ms))
    assert b.compiled_speedup == pytest.approx(1.25)
    walls = b.by_wall()
    assert walls["overhead"] == pytest.approx(0.05) and sum(walls.values()) == pytest.approx(b.whole_ms)


def test_parts_that_do_not_add_up_are_flagged() -> None:
    b = _breakdown(gap_ms=0.05, whole_ms=1e9)  # a whole no sum of parts reaches
    assert not b.sums_ok and b.as_dict()["sums_ok"] is False
