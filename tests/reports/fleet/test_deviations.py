"""Each device against its fleet, case by case and wall by wall: known answers on a hand-made night."""
from __future__ import annotations

import math
from datetime import UTC, datetime

import pandas as pd
import pytest

from rooflab.reports.fleet.deviations import case_deviations, prepare, wall_deviations
from rooflab.reports.fleet.options import FleetOptions
from rooflab.reports.fleet.robust import MEDIAN_SE_FACTOR, MIN_SPREAD_PCT, Z95, log_of_pct

START = datetime(2026, 4, 1, 2, 0, tzinfo=UTC)
CASES = {  # case_key: (op, family, cache, medians of devices 0..4)
    "copy": ("stream_copy", "probe", "cold", [1.0, 1.0, 1.0, 1.0, 1.0 / 0.9]),  # device 4: 10 % slower
    "triad": ("stream_triad", "probe", "cold", [2.0, 2.0, 2.02, 2.0, 2.0 / 0.9]),
    "gemm": ("matmul", "gemm", "hot", [5.0, 5.0, 5.0 / 0.95, 5.0, 5.0]),  # device 2: 5 % slower
}
CI = 0.004


def _night() -> pd.DataFrame:
    rows = []
    for key, (op, family, cache, medians) in CASES.items():
        for d, median in enumerate(medians):
            rows.append({"run_id": "r1", "started_at": START, "host": "h1", "device_key": f"d{d}",
                         "device_uuid": f"d{d}", "device_name": "GPU X", "memory_bytes": 8, "case_key": key, "op": op,
                         "family": family, "cache": cache, "status": "ok", "median_ms": median,
                         "rel_ci_halfwidth": CI, "throttled": False, "quality": "good"})
    return pd.DataFrame(rows)


def test_deviations_of_a_hand_made_night() -> None:
    options = FleetOptions()
    prepared = prepare(_night(), options)
    cases = case_deviations(prepared.rows, options).set_index(["device_key", "case_key"])
    assert cases.loc[("d4", "copy"), "dev"] == pytest.approx(math.log(0.9))  # fleet median 1.0 against 1/0.9
    assert cases.loc[("d0", "copy"), "dev"] == 0.0 and cases.loc[("d0", "copy"), "devices"] == 5
    floor = log_of_pct(MIN_SPREAD_PCT)
    assert cases.loc[("d0", "copy"), "sigma_case"] == floor  # four equal devices: a MAD of 0, the floor
    walls = wall_deviations(case_deviations(prepared.rows, options), options).set_index(["device_key", "wall"])
    # both HBM cases weigh the same (equal spreads): device 4's wall is its two cases' mean
    assert walls.loc[("d4", "hbm_rw"), "d"] == pytest.approx(math.log(0.9))
    assert walls.loc[("d2", "hbm_rw"), "d"] == pytest.approx(math.log(2.0 / 2.02) / 2)
    assert walls.loc[("d2", "matrix"), "d"] == pytest.approx(math.log(0.95))
    assert walls.loc[("d2", "hbm_rw"), "cases"] == 2
    # one night: how far a device moves night to night is unknown, so the whole spread is taken for it;
    # the standard error adds each result's own CI and the fleet median's error, weighted
    sigma_wall = walls.loc[("d4", "hbm_rw"), "sigma_wall"]
    u = math.log1p(CI) / Z95
    w = 1 / floor ** 2
    weighted = 2 * (w * u) ** 2 + 2 * (w * MEDIAN_SE_FACTOR * floor) ** 2 / 5
    expected = math.sqrt(sigma_wall ** 2 + weighted / (2 * w) ** 2)
    assert walls.loc[("d4", "hbm_rw"), "se"] == pytest.approx(expected)
    assert walls.loc[("d4", "hbm_rw"), "sigma_night"] == sigma_wall


def test_a_case_on_too_few_devices_is_left_out() -> None:
    night = _night()
    night = night[~((night["case_key"] == "gemm") & night["device_key"].isin(["d0", "d1"]))]
    cases = case_deviations(prepare(night, FleetOptions()).rows, FleetOptions())
    assert "gemm" not in set(cases["case_key"])  # 3 devices < --min-devices 4
    assert "gemm" in set(case_deviations(prepare(night, FleetOptions(min_devices=3)).rows,
                                         FleetOptions(min_devices=3))["case_key"])


def test_a_device_a_wall_and_a_case_keep_their_model_apart() -> None:
    night = _night()
    other = night.assign(device_name="GPU Y", device_key=night["device_key"] + "y", median_ms=night["median_ms"] * 3)
    cases = case_deviations(prepare(pd.concat([night, other]), FleetOptions()).rows, FleetOptions())
    by = cases.set_index(["device_key", "case_key"])
    assert by.loc[("d4y", "copy"), "dev"] == pytest.approx(math.log(0.9))  # against GPU Y's median, not GPU X's
    assert by.loc[("d0y", "copy"), "fleet_y"] == pytest.approx(math.log(3.0))
