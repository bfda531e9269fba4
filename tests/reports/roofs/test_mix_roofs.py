"""The three memory roofs (read-write, read-only, write-only), a case's roof from its own mix of
reads and writes, the cache roof for a working set that fits in the L2, and no efficiency above
100 % of the roof a result is judged against (nvbench issue 270's fill, planted)."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from rooflab.reports.roofs.ceilings import Traffic, bandwidth_roof, compute_ceilings, mixed_gbps
from rooflab.reports.walls.diagnosis import diagnose
from rooflab.reports.walls.roofline_rule import SUSPECT_ABOVE, Roofs, roofline_bound
from rooflab.vocab import CeilingKind
from tests.reports.synth import H100, device_rows, stream

MIB = 1 << 20
BIG = 128 * MIB  # float32 elements: a 512 MiB array, ten times an H100's L2
RW, RO, WO, L2 = 3000.0, 3150.0, 2800.0, 9000.0


def rows_with_a_write_roof(**kw) -> list[dict]:
    """device_rows (hbm_rw 3000 from a triad, hbm_ro 3150 from a dot, l2 9000) and a cold fill of
    512 MiB at 2800 GB/s, the write-only roof; a fill of 16 MiB, in the L2, sets no HBM roof."""
    return device_rows(hbm_gbps=RW, l2_gbps=L2, launch_ms=0.001, **kw) + [
        stream("stream_fill", BIG, WO, split=True, **kw),
        stream("stream_fill", 4 * MIB, 4000.0, split=True, run_id="run-small", **kw),
    ]


def test_the_write_only_roof_comes_from_a_cold_fill_of_at_least_four_l2s() -> None:
    dc = compute_ceilings(pd.DataFrame(rows_with_a_write_roof()), H100)
    wo = dc.get(CeilingKind.HBM_WO)
    assert wo is not None and wo.value == pytest.approx(WO) and "n=134217728" in wo.case_key
    assert (dc.get(CeilingKind.HBM_RW).value, dc.get(CeilingKind.HBM_RO).value) == pytest.approx((RW, RO))  # type: ignore[union-attr]
    without = compute_ceilings(pd.DataFrame(device_rows(hbm_gbps=RW)), H100)
    assert without.get(CeilingKind.HBM_WO) is None


def test_a_case_is_held_against_its_own_mix_of_reads_and_writes() -> None:
    dc = compute_ceilings(pd.DataFrame(rows_with_a_write_roof()), H100)
    big = 3 * BIG * 4  # a triad's bytes, far beyond the L2
    triad = Traffic(big, "cold", 2 * BIG * 4, BIG * 4)
    roof = bandwidth_roof(dc, triad)
    assert roof is not None and roof.label == "hbm_ro+hbm_wo mix"
    assert roof.value == pytest.approx(3 / (2 / RO + 1 / WO)) == pytest.approx(mixed_gbps(2, 1, RO, WO))
    assert bandwidth_roof(dc, Traffic(big, "cold", big, 0)).label == CeilingKind.HBM_RO  # type: ignore[union-attr]
    assert bandwidth_roof(dc, Traffic(big, "cold", 0, big)).label == CeilingKind.HBM_WO  # type: ignore[union-attr]
    # no write-only roof measured: the writes at the read-write roof
    no_wo = compute_ceilings(pd.DataFrame(device_rows(hbm_gbps=RW)), H100)
    mixed = bandwidth_roof(no_wo, triad)
    assert mixed is not None and mixed.label == "hbm_ro+hbm_rw mix"
    assert mixed.value == pytest.approx(3 / (2 / (RW * 1.05) + 1 / RW))
    # the split unknown (a result stored before it): the read-write roof, or the read-only one for an op that only reads
    assert bandwidth_roof(dc, Traffic(big, "cold")).value == pytest.approx(RW)  # type: ignore[union-attr]
    assert bandwidth_roof(dc, Traffic(big, "cold", read_only=True)).value == pytest.approx(RO)  # type: ignore[union-attr]


def test_a_working_set_that_fits_in_the_l2_is_held_against_the_cache_roof_hot_or_cold() -> None:
    dc = compute_ceilings(pd.DataFrame(rows_with_a_write_roof()), H100)
    for cache in ("cold", "hot"):
        roof = bandwidth_roof(dc, Traffic(16 * MIB, cache, 0, 16 * MIB))
        assert roof is not None and roof.label == CeilingKind.L2 and roof.value == pytest.approx(L2)
    no_cache_roof = compute_ceilings(pd.DataFrame([r for r in rows_with_a_write_roof() if r["cache"] != "hot"]), H100)
    assert no_cache_roof.get(CeilingKind.L2) is None
    assert bandwidth_roof(no_cache_roof, Traffic(16 * MIB, "cold", 0, 16 * MIB)) is None  # never HBM


def test_nvbench_270s_fill_smaller_than_the_cache_is_never_above_its_roof() -> None:
    """nvbench issue 270: a write-only fill at 114 % of HBM at 16 MiB (its writes stayed in a 96 MB
    L2) and 94 % at 256 MiB, both judged against HBM. Planted on a device with that L2: the small
    fill is judged against the cache roof, the large one against the write-only roof, and no
    efficiency anywhere exceeds 100 %."""
    l2 = 96 * 10**6
    rows = rows_with_a_write_roof(l2_bytes=l2)
    small = stream("stream_fill", 4 * MIB, 1.14 * WO, split=True, run_id="run-270", l2_bytes=l2)  # 16 MiB
    large = stream("stream_fill", 64 * MIB, 0.94 * WO, split=True, run_id="run-270", l2_bytes=l2)  # 256 MiB
    diag = diagnose(pd.DataFrame([*rows, small, large]), compute_ceilings(pd.DataFrame(rows), H100)).set_index(
        "case_key")
    got_small, got_large = diag.loc[small["case_key"]], diag.loc[large["case_key"]]
    assert got_small["bandwidth_roof_gbps"] == pytest.approx(L2) and got_small["wall_roof"] == CeilingKind.L2
    assert got_small["efficiency"] == pytest.approx(1.14 * WO / L2)
    assert got_large["wall_roof"] == CeilingKind.HBM_WO and got_large["efficiency"] == pytest.approx(0.94)
    assert (got_small["bytes_read"], got_small["bytes_written"]) == (0, 16 * MIB)
    efficiencies = diag["efficiency"].dropna()
    assert len(efficiencies) > 5 and (efficiencies <= SUSPECT_ABOVE).all(), diag[["efficiency", "wall_roof"]]


def test_the_fill_against_hbm_would_read_above_100_percent_and_no_efficiency_is_ever_given_above_it() -> None:
    """The old judgement of the small fill (the HBM write roof) puts it at 114 %: the roofline rule
    gives no efficiency there and marks the result above its roof; every caller takes it from there."""
    nbytes = 16 * MIB
    median_ms = nbytes / (1.14 * WO * 1e9) * 1e3
    against_hbm = roofline_bound(0, nbytes, Roofs(None, WO), median_ms)
    assert against_hbm.above_roof and math.isnan(against_hbm.efficiency)
    within = roofline_bound(0, nbytes, Roofs(None, L2), median_ms)
    assert not within.above_roof and within.efficiency == pytest.approx(1.14 * WO / L2)
