"""The cross-check page: written when the database holds cross-checks, one section per device."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd

from rooflab.db.crosscheck import FRAME_COLUMNS
from rooflab.reports.pages.report import render_report


def _row(device: str, run_id: str, key: str, peer: str, ratio: float | None, *, disagrees: bool = False,
         reason: str | None = None, status: str = "ok", age_h: int = 0, contended: bool = False) -> dict:
    rooflab = 0.01 + 10 * (hash(key) % 100) / 100
    return {c: None for c in FRAME_COLUMNS} | {
        "run_id": run_id, "device_name": device, "device_kind": "cpu", "device_fingerprint": "fp-" + device,
        "case_key": key, "op": key.split(".")[0], "family": "pointwise", "backend": "eager", "dtype": "float32",
        "cache": "hot", "timing_mode": "launch", "peer": peer, "peer_version": "2.13", "status": status,
        "error": None if status == "ok" else "needs a CUDA device", "peer_cache": "hot",
        "peer_clock": "host_block_mean",
        "rounds": 3, "rooflab_median_ms": rooflab if ratio else None, "rooflab_spread": 0.02,
        "peer_median_ms": rooflab / ratio if ratio else None, "peer_spread": 0.03, "ratio": ratio,
        "disagrees": disagrees, "likely_reason": reason,
        "measured_at": datetime(2026, 1, 1, tzinfo=UTC) - timedelta(hours=age_h),
        "contended": contended, "contention_reasons": ["load average 9.00 above 2 logical CPUs"] if contended else [],
    }


def test_crosscheck_page_per_device_newest_run(tmp_path: Path) -> None:
    frame = pd.DataFrame([
        _row("CPU A", "cc-new", "add.v1:n=1", "torch", 1.02),
        _row("CPU A", "cc-new", "copy.v1:n=1", "torch", 0.31, disagrees=True, reason="mean_vs_median"),
        _row("CPU A", "cc-new", "copy.v1:n=1", "do_bench", None, status="skipped"),
        _row("CPU A", "cc-old", "add.v1:n=1", "torch", 7.77, age_h=48),
        _row("GPU B", "cc-gpu", "add.v1:n=1", "nvbench", 0.99),
    ])
    index = render_report(pd.DataFrame(), tmp_path / "site", crosschecks=frame)
    assert 'href="crosscheck.html"' in index.read_text()
    page = (tmp_path / "site" / "crosscheck.html").read_text()
    assert page.count("<h2>") == 2 and "CPU A" in page and "GPU B" in page
    # only the newest run of a device (the old run's ratio cell, not a digit string that a random
    # median elsewhere may contain: hash() of a string differs between processes)
    assert "cc-new" in page and "cc-old" not in page and '<td class="n">7.77</td>' not in page
    assert "disagree</strong>: peer averages calls" in page and "do_bench skipped (needs a CUDA device)" in page
    svgs = sorted((tmp_path / "site" / "figures").glob("crosscheck-*.svg"))
    assert len(svgs) == 2 and all(s.read_text().lstrip().startswith("<?xml") for s in svgs)


def test_no_crosscheck_no_page(tmp_path: Path) -> None:
    index = render_report(pd.DataFrame(), tmp_path / "site", crosschecks=pd.DataFrame())
    assert "crosscheck.html" not in index.read_text()
    assert not (tmp_path / "site" / "crosscheck.html").exists()


def test_a_contended_row_is_marked_and_left_out_of_the_summary(tmp_path: Path) -> None:
    from rooflab.reports.pages.crosscheck_page import summary

    frame = pd.DataFrame([
        _row("CPU A", "cc", "add.v1:n=1", "torch", 1.0),
        _row("CPU A", "cc", "copy.v1:n=1", "torch", 1.21),
        _row("CPU A", "cc", "scale.v1:n=1", "torch", 5.0, disagrees=True, reason="contended", contended=True),
    ])
    (group,) = summary(frame)
    assert (group["cases"], group["contended"], group["disagreements"]) == (3, 1, 1)
    assert abs(group["ratio_geomean"] - 1.1) < 1e-9 and group["worst_case_key"] == "copy.v1:n=1"
    render_report(pd.DataFrame(), tmp_path / "site", crosschecks=frame)
    page = (tmp_path / "site" / "crosscheck.html").read_text()
    assert "disagree</strong>: the machine was contended" in page
    assert page.count('class="quality-contended" title="load average 9.00 above 2 logical CPUs"') == 1
    # cases, disagree, contended; then the geomean of the two others and their worst
    assert ('<td class="n">3</td><td class="n">1</td><td class="n">1</td>\n'
            '<td class="n">1.1</td><td class="n">1.21</td>' in page)
