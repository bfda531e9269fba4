"""TFLOP/s and GB/s come from one pair of functions (db.rates), with known answers."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rooflab.db import rates
from rooflab.reports.roofs.ceilings import compute_ceilings
from rooflab.reports.walls.diagnosis import diagnose
from tests.reports.synth import H100, device_rows, frame, row


def test_known_answers_for_numbers_and_series() -> None:
    rng = np.random.default_rng(14)
    flops, nbytes, ms = rng.uniform(1e9, 1e13, 5), rng.uniform(1e6, 1e10, 5), rng.uniform(0.01, 100.0, 5)
    assert rates.tflops(3e12, 1500.0) == pytest.approx(2.0)
    assert rates.gbps(5e9, 2.0) == pytest.approx(2500.0)
    assert rates.ms_at_tflops(3e12, 2.0) == pytest.approx(1500.0)
    assert rates.ms_at_gbps(5e9, 2500.0) == pytest.approx(2.0)
    series = rates.tflops(pd.Series(flops), pd.Series(ms))
    assert list(series) == pytest.approx(list(flops / (ms / 1e3) / 1e12))
    assert rates.ms_at_gbps(nbytes, rates.gbps(nbytes, ms)) == pytest.approx(ms)


def test_a_report_row_shows_the_rate_the_store_would_write() -> None:
    n = 1 << 26
    case = row(op="copy", family="pointwise", params={"n": n}, flops=0, nbytes=8 * n, median_ms=0.3)
    df = frame(device_rows() + [case])
    d = diagnose(df, compute_ceilings(df, H100)).set_index("case_key").loc[case["case_key"]]
    assert d["gbps"] == rates.gbps(8 * n, 0.3)
