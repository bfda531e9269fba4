"""rooflab.reports.data.reads reads only what a report needs; what it returns equals the same selection made on
every result (db.query.results)."""
from __future__ import annotations

import filecmp
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rooflab.db import query
from rooflab.reports.data.frames import select_device
from rooflab.reports.data.reads import REPORT_COLUMNS, ROOFLINE_COLUMNS, load_device_results, load_results
from rooflab.reports.errors import ReportInputError
from rooflab.reports.pages import plots
from rooflab.reports.pages.report import render_report
from rooflab.reports.regressions.database_check import load_verdicts
from rooflab.reports.regressions.series import detect
from rooflab.reports.roofs.ceilings import compute_ceilings
from tests.reports.synth import device_rows, history, noisy, write_db


@pytest.fixture(scope="module")
def url(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('loaddb') / 'results.db'}"
    a100: dict[str, Any] = dict(device_name="NVIDIA A100-SXM4-80GB", fingerprint="fp-a100-1", run_id="run-a100",
                                l2_bytes=40 << 20)
    a100b = dict(a100, fingerprint="fp-a100-2", run_id="run-a100-b", driver_version="560.10")
    rows = (device_rows(hbm_gbps=3000.0, bf16_tflops=700.0) + device_rows(hbm_gbps=1500.0, bf16_tflops=250.0, **a100)
            + device_rows(hbm_gbps=1600.0, bf16_tflops=260.0, **a100b))
    for i, r in enumerate(rows):
        r["run_order"] = 40 + i // 11
        if r["device_fingerprint"] == "fp-a100-2":
            r["device_uuid"] = "GPU-9"
    rows += history(noisy(22, 1.0, 0.02, 5) + [1.25, 1.24])
    write_db(url, rows)
    return url


@pytest.mark.parametrize("device", ["NVIDIA H100 80GB HBM3", "h100", "A100", "fp-a100-2", "fp-a100", "fp-h100"])
def test_one_device_read_alone_equals_its_selection_from_every_result(url: str, device: str) -> None:
    everything = query.results(url)
    name, rows = select_device(everything, device)
    got_name, got = load_device_results(url, device)
    assert got_name == name
    pd.testing.assert_frame_equal(got.reset_index(drop=True), rows[list(REPORT_COLUMNS)].reset_index(drop=True))
    _, all_columns = load_device_results(url, device, columns=None)
    pd.testing.assert_frame_equal(all_columns.reset_index(drop=True), rows.reset_index(drop=True))
    _, roof = load_device_results(url, device, columns=ROOFLINE_COLUMNS)
    pd.testing.assert_frame_equal(roof.reset_index(drop=True),
                                  rows[list(ROOFLINE_COLUMNS)].reset_index(drop=True))
    assert compute_ceilings(roof, name) == compute_ceilings(rows, name)


@pytest.mark.parametrize("device", ["NVIDIA H100 80GB HBM3", "A100"])  # every row of each device
def test_the_columns_the_figures_read_draw_the_same_figures(url: str, device: str) -> None:
    name, rows = select_device(query.results(url), device)
    roof = rows[list(ROOFLINE_COLUMNS)]
    assert (plots.roofline_svg(roof, compute_ceilings(roof, name))
            == plots.roofline_svg(rows, compute_ceilings(rows, name)))
    assert plots.bandwidth_svg(roof, 50 << 20, name) == plots.bandwidth_svg(rows, 50 << 20, name)


@pytest.mark.parametrize("device", ["nvidia", "B200"])
def test_ambiguous_or_unknown_devices_give_the_same_error(url, device):
    with pytest.raises(ReportInputError) as expected:
        select_device(query.results(url), device)
    with pytest.raises(ReportInputError) as got:
        load_device_results(url, device)
    assert str(got.value) == str(expected.value)


def test_report_from_the_columns_it_reads_and_windowed_verdicts_equals_the_report_of_everything(url: str,
                                                                                            tmp_path: Path) -> None:
    full, lean, none = tmp_path / "full", tmp_path / "lean", tmp_path / "none"
    lean_rows = load_results(url, REPORT_COLUMNS)
    render_report(query.results(url), full, source="x")
    render_report(lean_rows, lean, source="x", verdicts=load_verdicts(url))
    names = sorted(p.relative_to(full) for p in full.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(lean) for p in lean.rglob("*") if p.is_file())
    assert any(n.name.startswith("trend-") for n in names)
    for n in names:
        assert filecmp.cmp(full / n, lean / n, shallow=False), n
    # the regression page shows the verdicts it is given, not those of the frame: drawn from the
    # planted series alone (its runs run-0001 ...: one device, no comparison), which `detect` would flag
    series = lean_rows[lean_rows["run_id"].str.fullmatch(r"run-\d{4}")]
    assert series["case_key"].nunique() == 1 and series["device_fingerprint"].nunique() == 1
    assert any(v.flagged for v in detect(series))
    render_report(series, none, source="x", verdicts=[])
    page = (none / "regressions.html").read_text()
    assert "<p>0 series" in page and "Nothing flagged." in page  # the verdicts given (none), not detect's
    assert not any(p.name.startswith("trend-") for p in none.rglob("*"))
