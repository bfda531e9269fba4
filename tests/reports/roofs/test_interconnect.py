"""The interconnect wall, built from synthetic collective results whose roofs are known exactly:
ceilings and latency floors per collective and world size against the datasheet link, the walls
comms/overhead, a comparison of two systems predicted from their interconnect roofs, `predict` for a
collective, and the device page's interconnect section."""
from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest

from rooflab.reports.comparisons.speedup_table import Side, compare
from rooflab.reports.errors import ReportInputError
from rooflab.reports.pages.plots import roofline_points
from rooflab.reports.pages.report import render_device_page
from rooflab.reports.roofs.ceilings import compute_ceilings
from rooflab.reports.roofs.gpu_specs import match_device
from rooflab.reports.roofs.interconnect import interconnect_roof
from rooflab.reports.walls.diagnosis import diagnose
from rooflab.reports.walls.predict import predict
from tests.present import present
from tests.reports.synth import H100, collective, collective_sweep, device_rows, frame

B200 = "NVIDIA B200"


def _h100(**kw) -> list[dict]:
    """8 H100s: all_reduce peaks at 370 GB/s busbw over a 20 us floor, all_gather at 350 over 12 us."""
    return (device_rows(**kw) + collective_sweep("all_reduce", 8, peak_gbps=370.0, latency_ms=0.020, **kw)
            + collective_sweep("all_gather", 8, peak_gbps=350.0, latency_ms=0.012, **kw))


def test_interconnect_ceilings_are_the_best_busbw_and_the_fastest_median_per_collective_and_size():
    rows = _h100()
    rows.append(collective("all_reduce", 1 << 20, 8, busbw_gbps=900.0, rel_ci_halfwidth=0.3,
                           stop_reason="max_time"))  # noisy: never a roof
    rows += collective_sweep("all_reduce", 4, peak_gbps=300.0, latency_ms=0.015)
    dc = compute_ceilings(frame(rows), H100)
    ar8 = present(dc.get("interconnect", collective="all_reduce", ranks=8))
    peak = max(r["gbps"] for r in rows
               if r["op"] == "all_reduce" and r["ranks"] == 8 and r["stop_reason"] == "converged")
    assert ar8.value == pytest.approx(peak) and 300 < ar8.value < 370
    assert ar8.datasheet == 450.0 and ar8.ratio == pytest.approx(ar8.value / 450.0)  # NVLink 4 per direction
    assert present(dc.get("interconnect", collective="all_reduce", ranks=4)).value < 300
    floor = present(dc.get("comm_latency", collective="all_reduce", ranks=8))
    assert floor.unit == "ms" and floor.value == pytest.approx(0.020, rel=1e-3)  # the 8 B message: the latency
    assert present(dc.get("interconnect", collective="all_gather", ranks=8)).label == "interconnect all_gather x8"
    # a bus bandwidth never raises a DRAM roof, and a collective is no point of the roofline
    hbm = present(dc.get("hbm_rw"))
    assert hbm.value == pytest.approx(3000.0) and hbm.case_key.startswith("stream_")
    assert not (roofline_points(frame(rows))["op"] == "all_reduce").any()


def test_small_collectives_are_overhead_bound_and_large_ones_comms_bound():
    rows = _h100()
    df = frame(rows)
    diag = diagnose(df, compute_ceilings(df, H100)).set_index("case_key")
    ar = diag[diag["op"] == "all_reduce"].sort_values("bytes")
    assert ar["wall"].iloc[0] == "overhead" and ar["wall"].iloc[-1] == "comms"
    assert (ar["ranks"] == 8).all() and ar["bandwidth_roof_origin"].eq("measured").all()
    # the largest all_reduce is the roof itself: efficiency 1; a mid-size one in between
    assert ar["efficiency"].iloc[-1] == pytest.approx(1.0)
    big = ar.iloc[-1]
    assert big["roofline_ms"] == pytest.approx(big["bytes"] / (big["bandwidth_roof_gbps"] * 1e9) * 1e3)
    # with no measured roof (a device with only its datasheet), the NVLink figure is the roof
    one = frame([collective("all_reduce", 1 << 28, 8, busbw_gbps=360.0)])
    alone = diagnose(one, compute_ceilings(one.assign(quality="noisy"), H100)).iloc[0]
    assert alone["bandwidth_roof_origin"] == "datasheet" and alone["bandwidth_roof_gbps"] == 450.0
    assert alone["efficiency"] == pytest.approx(360.0 / 450.0) and alone["wall"] == "comms"


def test_compare_predicts_a_collective_from_the_two_interconnect_roofs():
    b_kw: dict[str, Any] = dict(device_name=B200, fingerprint="fp-b200", run_id="run-b200")
    base_rows = frame(_h100())
    cand_rows = frame(device_rows(hbm_gbps=7000.0, **b_kw)
                      + collective_sweep("all_reduce", 8, peak_gbps=740.0, latency_ms=0.010, **b_kw)
                      + collective_sweep("all_gather", 8, peak_gbps=700.0, latency_ms=0.006, **b_kw))
    base = Side(H100, H100, base_rows, compute_ceilings(base_rows, H100))
    cand = Side(B200, B200, cand_rows, compute_ceilings(cand_rows, B200))
    cmp = compare(base, cand)
    coll = cmp[cmp["family"] == "collective"].sort_values("intensity")
    big = cmp[cmp["case_key"].str.contains("all_reduce") & (cmp["wall"] == "comms")]
    ratio = (present(cand.ceilings.get("interconnect", collective="all_reduce", ranks=8)).value
             / present(base.ceilings.get("interconnect", collective="all_reduce", ranks=8)).value)
    assert ratio == pytest.approx(2.0, rel=0.02) and not big.empty
    assert big["predicted_speedup"].tolist() == pytest.approx([ratio] * len(big))
    small = cmp[cmp["case_key"].str.contains("all_reduce") & (cmp["wall"] == "overhead")]
    assert small["predicted_speedup"].tolist() == pytest.approx([2.0] * len(small))  # 20 us / 10 us floors
    assert len(coll) == 20 and coll["speedup"].notna().all()


def test_predict_a_collective_from_the_datasheet_link_or_the_measured_roof():
    datasheet = predict("all_reduce", {"n": 1 << 29, "ranks": 8}, "bfloat16", "H100 SXM")
    assert datasheet.collective and datasheet.wall == "comms" and datasheet.bandwidth_origin == "datasheet"
    # 1 GiB per rank, bus bytes x 2(8-1)/8, at 450 GB/s
    assert datasheet.roofline_ms == pytest.approx((1 << 30) * 1.75 / 450e9 * 1e3)
    measured = predict("all_reduce", {"n": 1 << 29, "ranks": 8}, "bfloat16", H100, frame(_h100()))
    assert measured.bandwidth_origin == "measured" and measured.bandwidth_gbps < 370
    tiny = predict("all_reduce", {"n": 4, "ranks": 8}, "bfloat16", H100, frame(_h100()))
    assert tiny.wall == "overhead" and tiny.roofline_ms == pytest.approx(tiny.launch_floor_ms)
    with pytest.raises(ReportInputError, match="world size as a number"):
        predict("all_reduce", {"n": 1 << 20, "ranks": "all"}, "bfloat16", "H100 SXM")
    with pytest.raises(ReportInputError, match="no interconnect roof"):
        predict("all_reduce", {"n": 1 << 20, "ranks": 2}, "float32", "AMD EPYC",
                frame(device_rows(device_name="AMD EPYC", fingerprint="fp-cpu")))


def test_the_datasheet_links_are_per_direction_and_nvlink_first():
    h100, l40s = present(match_device("H100 SXM")), present(match_device("L40S"))
    nvlink = present(h100.nvlink_gbps)
    assert nvlink.value == 450.0 and present(h100.pcie_gbps).value == 64.0
    assert h100.interconnect_gbps is nvlink and "900 GB/s both directions" in nvlink.source
    assert l40s.nvlink_gbps is None and present(l40s.interconnect_gbps).value == 32.0
    assert present(present(match_device("B200")).interconnect_gbps).value == 900.0
    assert {"NVLink per direction", "PCIe per direction"} <= {f["quantity"] for f in h100.figures()}


def test_the_device_page_has_an_interconnect_section_with_the_straggler(tmp_path):
    rows = _h100()
    df = frame(rows)
    big = [r for r in rows if r["op"] == "all_reduce"][-1]
    groups = pd.DataFrame([{
        "run_id": big["run_id"], "device_name": H100, "device_fingerprint": big["device_fingerprint"],
        "case_key": big["case_key"], "op": "all_reduce", "backend": "nccl", "dtype": "bfloat16",
        "params": {}, "cache": "hot", "timing_mode": "launch", "status": "ok", "median_ms": big["median_ms"],
        "bytes": big["bytes"], "gbps": big["gbps"], "ranks": 8,
        "rank_medians_ms": [1.0, 1.0, 1.0, 1.5, 1.0, 1.0, 1.0, 1.0],
        "rank_devices": [f"node1 cuda:{r} GPU-{r}" for r in range(8)], "comm_version": "2.21.5",
        "comm_settings": {"NCCL_ALGO": "Ring"}, "slowest_rank": 3, "straggler_excess": 0.5,
    }])
    page_path = render_device_page(df, H100, tmp_path / "site", collectives=groups)
    site, page = page_path.parent, page_path.read_text()
    assert "Interconnect: collectives" in page and "<td>all_reduce x8</td>" in page  # in the ceilings table
    assert "node1 cuda:3 GPU-3" in page and "50.0 %" in page and "NCCL_ALGO=Ring" in page and "2.21.5" in page
    assert next(site.glob("figures/interconnect-*.svg")).read_text().lstrip().startswith("<?xml")
    # the bandwidth-against-working-set chart and the roofline keep their own families only
    assert "all_reduce" not in next(site.glob("figures/bandwidth-*.svg")).read_text()


def test_a_device_without_collectives_has_no_interconnect_section(tmp_path):
    page = render_device_page(frame(device_rows()), H100, tmp_path / "site")
    assert "Interconnect: collectives" not in page.read_text()
    site = page.parent
    assert not list(site.glob("figures/interconnect-*.svg"))


def test_a_roof_for_a_collective_never_measured_falls_back_to_the_datasheet_only():
    dc = compute_ceilings(frame(device_rows()), H100)
    roof = present(interconnect_roof(dc, "broadcast", 8))
    assert roof.origin == "datasheet" and math.isclose(roof.value, 450.0)
