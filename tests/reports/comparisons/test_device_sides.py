"""reports.comparisons.device_sides: a model's side is its median device of each case, a physical
device's side is that device alone."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from rooflab.reports.comparisons.compare_devices import compare_devices
from rooflab.reports.comparisons.device_sides import DeviceSide, median_devices, relabelled
from rooflab.reports.data.run_counts import counts_of
from tests.reports.synth import device_rows, frame, row

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
N = 1 << 28


def _copy(median_ms: float, uuid: str, **kw) -> dict:
    r = row(op="copy", family="pointwise", params={"n": N}, flops=0, nbytes=8 * N, median_ms=median_ms, **kw)
    r["device_uuid"] = uuid
    return r


def test_the_median_device_of_each_case_is_kept() -> None:
    rng = np.random.default_rng()
    medians = rng.uniform(1.0, 2.0, 5)
    rows = [_copy(float(m), f"GPU-{i}") for i, m in enumerate(medians)]
    rows.append(_copy(0.5, "GPU-failed", status="failed"))  # not usable: never the median, counted as a device
    shuffled = frame(rows).sample(frac=1.0, random_state=int(rng.integers(1 << 20)))
    (kept,) = median_devices(shuffled).to_dict("records")
    assert kept["median_ms"] == pytest.approx(float(np.sort(medians)[2])) and kept["n_devices"] == 6
    even = frame([_copy(float(m), f"GPU-{i}") for i, m in enumerate(medians[:4])])
    assert median_devices(even)["median_ms"].item() == pytest.approx(float(np.sort(medians[:4])[1]))  # the lower


def _fleet_side(values: list[float], **kw) -> list[dict]:
    return [_copy(v, f"GPU-{kw['run_id']}-{i}", **kw) for i, v in enumerate(values)]


def test_a_model_against_a_model_is_median_device_against_median_device() -> None:
    """Eight A100s and eight H100s, one result of each in one run: the comparison holds the median
    devices (today's code took whichever GPU came last in the run)."""
    a_kw: dict[str, Any] = dict(device_name=A100, fingerprint="fp-a100", run_id="run-a", l2_bytes=40 << 20)
    b_kw: dict[str, Any] = dict(device_name=H100, fingerprint="fp-h100", run_id="run-b", run_order=2)
    a_values = [1.30, 1.02, 1.00, 0.98, 1.01, 0.99, 1.03, 0.70]  # the last GPU of the run is an outlier
    b_values = [0.66, 0.65, 0.67, 0.50, 0.64, 0.68, 0.66, 0.90]
    rows = (device_rows(hbm_gbps=2400.0, **a_kw) + _fleet_side(a_values, **a_kw)
            + device_rows(hbm_gbps=3600.0, **b_kw) + _fleet_side(b_values, **b_kw))
    df = frame(rows)
    cmp = compare_devices(df, counts_of(df), "A100", "H100")
    copy = cmp.cases.set_index("op").loc["copy"]
    assert copy["baseline_ms"] == pytest.approx(sorted(a_values)[3]) and copy["candidate_ms"] == pytest.approx(
        sorted(b_values)[3])
    assert cmp.devices == {"baseline": 8, "candidate": 8}


def test_a_physical_device_stands_beside_its_model_under_its_own_name() -> None:
    kw = dict(device_name=H100, fingerprint="fp-h100", run_id="run-b")
    df = frame(_fleet_side([0.66, 0.65, 0.90], **kw))
    side = DeviceSide("GPU-run-b-2", H100, "node1")
    both = relabelled(df, [side])
    assert len(both) == 4 and (both["device_name"] == side.label).sum() == 1
    assert both.loc[both["device_name"] == side.label, "median_ms"].item() == pytest.approx(0.90)
    assert relabelled(df, []) is df
    assert isinstance(both, pd.DataFrame)
