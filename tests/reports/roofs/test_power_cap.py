"""A GEMM at the software power cap is a usable result: it sets the matrix ceiling and its diagnosis
says "at power cap"; a throttled one (clock under the floor) does not count."""
from __future__ import annotations

import json

import pytest

from rooflab.reports.roofs.ceilings import compute_ceilings, compute_roof
from rooflab.reports.walls.diagnosis import AT_POWER_CAP, at_power_cap, diagnose
from tests.reports.synth import H100, device_rows, frame, gemm


def _with(row: dict, **extra: object) -> dict:
    return {**row, **extra}


def test_power_capped_gemm_sets_the_matrix_ceiling_and_is_noted() -> None:
    rows = [_with(r, throttle_reasons="[]", power_w=None) for r in device_rows(bf16_tflops=600.0)]
    capped = _with(gemm(12288, 12288, 12288, 760.0), throttle_reasons=json.dumps(["sw_power_cap"]), power_w=695.0)
    df = frame(rows + [capped])
    dc = compute_ceilings(df, H100)
    roof = compute_roof(dc, "bfloat16", matrix=True)
    assert roof is not None and roof.value == pytest.approx(760.0)
    d = diagnose(df, dc).set_index("case_key")
    assert d.loc[capped["case_key"], "note"] == AT_POWER_CAP
    assert bool(d.loc[capped["case_key"], "at_power_cap"]) and d.loc[capped["case_key"], "power_w"] == 695.0
    others = d.drop(index=capped["case_key"])
    assert (others["note"] == "").all() and not others["at_power_cap"].any()


def test_throttled_gemm_does_not_set_the_ceiling() -> None:
    rows = device_rows(bf16_tflops=600.0)
    slow = _with(gemm(12288, 12288, 12288, 760.0), throttled=True, throttle_reasons=json.dumps(["hw_thermal_slowdown"]))
    dc = compute_ceilings(frame(rows + [slow]), H100)
    roof = compute_roof(dc, "bfloat16", matrix=True)
    assert roof is not None and roof.value == pytest.approx(600.0)


@pytest.mark.parametrize("reasons, expected", [
    (["sw_power_cap"], True), ('["sw_power_cap", "sync_boost"]', True), ([], False), ("[]", False),
    (None, False), (float("nan"), False), (("hw_slowdown",), False),
])
def test_at_power_cap_reads_lists_and_json_text(reasons: object, expected: bool) -> None:
    assert at_power_cap(reasons) is expected
