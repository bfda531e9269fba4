from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rooflab.reports.pages.report import render_device_page, render_report
from tests.reports.synth import H100, collective_sweep, device_rows, frame, gemm, history, layer_block, noisy, row

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
EVIL = "<script>alert('x')</script>"


BLOCK_ROWS, BLOCK_PROFILES, BLOCK_PARTS = layer_block(matrix_tflops=700.0, hbm_gbps=3000.0, gap_ms=0.05,
                                                     compiled_speedup=1.25)
NEWEST = "run-0036"  # the H100's newest run in _site_frame
# a second profile of the same block, in the newest run, its parts twice as long (told apart from run-1's)
NEWEST_ROWS, _NEWEST_PROFILES, _NEWEST_PARTS = layer_block(matrix_tflops=700.0, hbm_gbps=3000.0, gap_ms=0.05,
                                                           compiled_speedup=1.25, measurement_id=2, run_id=NEWEST,
                                                           run_order=36)
NEWEST_PARTS = _NEWEST_PARTS.assign(time_ms=_NEWEST_PARTS["time_ms"] * 2.0)
BOTH = (pd.concat([BLOCK_PROFILES, _NEWEST_PROFILES], ignore_index=True),
        pd.concat([BLOCK_PARTS, NEWEST_PARTS], ignore_index=True))
LONGEST_MS, LONGEST_BEFORE_MS = NEWEST_PARTS["time_ms"].max(), BLOCK_PARTS["time_ms"].max()
A100 = "NVIDIA A100-SXM4-80GB"


def _site_frame() -> pd.DataFrame:
    a100: dict[str, Any] = dict(device_name=A100, fingerprint="fp-a100", run_id="run-a100",
                                l2_bytes=40 << 20)
    rows = device_rows() + device_rows(hbm_gbps=1800.0, bf16_tflops=270.0, **a100) + BLOCK_ROWS
    n = 1 << 24
    for kw in ({}, a100):
        rows.append(row(op="cos_cos", family="pointwise", params={"n": n}, flops=2 * n, nbytes=8 * n, median_ms=0.2,
                        **kw))
        rows.append(row(op="cos_cos", family="pointwise", params={"n": n}, flops=2 * n, nbytes=8 * n, median_ms=0.1,
                        backend="compiled", **kw))
        rows.append(gemm(4096, 4096, 4096, 300.0, **kw))
    # strings from the database that must come out escaped
    rows.append(row(op=EVIL, family="pointwise", params={"n": EVIL}, flops=n, nbytes=8 * n, median_ms=0.1,
                    host=EVIL, run_id=EVIL))
    rows += history(noisy(25, 1.0, 0.02, 3) + [1.2, 1.21], start_order=10)
    # the newest H100 run also measured collectives over 8 GPUs: the interconnect section
    rows += collective_sweep("all_reduce", 8, peak_gbps=370.0, latency_ms=0.02, run_id=NEWEST, run_order=36)
    rows += history(noisy(25, 0.5, 0.02, 4) + [0.51], start_order=10, device_name=EVIL + " GPU", fingerprint=EVIL)
    return frame(rows)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return render_report(_site_frame(), tmp_path_factory.mktemp("report") / "site",
                         layer_profiles=(BLOCK_PROFILES, BLOCK_PARTS)).parent


def test_report_pages_are_written_and_escaped(site):
    names = sorted(p.name for p in site.glob("*.html"))
    assert "index.html" in names and "compare.html" in names and "regressions.html" in names
    assert sum(n.startswith("device-") for n in names) == 3
    for page in site.glob("*.html"):
        text = page.read_text()
        assert "http://" not in text and "https://" not in text, page.name
        if page.name.startswith("history"):  # the one page with a script: its own, inline, no source file
            assert re.findall(r"<script[^>]*>", text) == ['<script type="application/json" id="history-data">',
                                                          "<script>"], page.name
            assert EVIL not in text and "\\u003cscript>alert" in text  # the data cannot end its element
        else:
            assert "<script" not in text, page.name
    assert "&lt;script&gt;" in (site / "index.html").read_text()
    for svg in site.glob("figures/*.svg"):
        text = svg.read_text()
        assert "<script" not in text and text.lstrip().startswith("<?xml")
    # every referenced figure exists
    for page in site.glob("*.html"):
        for src in re.findall(r'src="([^"]+)"', page.read_text()):
            assert (site / src).is_file(), src
    reg = (site / "regressions.html").read_text()
    assert "status-regression" in reg and "stream_triad.v1" in reg
    dev = next(site.glob("device-nvidia-h100*.html")).read_text()
    # the H100 page shows its newest run only, and says so
    assert "Ceilings against the datasheet" in dev and "Showing the newest run on this device" in dev
    assert '<span class="key">run-0036</span>' in dev and "28 other run(s)" in dev
    assert "<title>" in dev and 'href="#pt-1"' in dev and 'id="pt-1"' in dev  # hoverable points, linked to the table
    assert "eager vs compiled" not in dev  # run-1's workload is not shown by default
    assert "Interconnect: collectives" in dev and "figures/interconnect-" in dev
    other = next(site.glob("device-nvidia-a100*.html")).read_text()
    assert "No profiled blocks" in other and "Interconnect: collectives" not in other


def test_a_chosen_run_is_shown_instead_with_the_profiles_of_that_run(tmp_path: Path) -> None:
    """The H100 page of a report of chosen runs (that page drawn alone): the block profiled in run-1,
    though the newest run profiled it too (its parts twice as long), in the layer breakdown: inline
    SVG bars, the parts' table, MFU and the fusion estimate beside the measured compiled speedup, and
    the run it was profiled in."""
    dev = render_device_page(_site_frame(), H100, tmp_path / "site", runs=["run-1"], layer_profiles=BOTH).read_text()
    assert "Showing the chosen run(s)" in dev and "eager vs compiled" in dev
    section = _breakdown(dev)
    assert section.count("<svg") == 1 and "<rect" in section and "mlp_down" in section
    assert "of the measured matrix ceiling" in section and "measured eager/compiled speedup 1.25" in section
    assert section.count("<h3>") == 1 and 'Profiled in run <span class="key">run-1</span>' in section
    assert f">{LONGEST_BEFORE_MS:.4g}<" in section and f">{LONGEST_MS:.4g}<" not in section


def _breakdown(page: str) -> str:
    """The breakdown section of a device page (up to the interconnect section that follows it)."""
    section = page[page.index("Where a block"):]
    return section.split('<h2 id="interconnect">')[0]


def test_the_breakdown_shows_only_the_profiles_of_the_runs_the_page_shows(site: Path, tmp_path: Path) -> None:
    """The block was profiled in run-1; by default the H100 page shows its newest run (run-0036),
    so its breakdown section must not show run-1's block (the `site` fixture). A second profile of
    the same block in the newest run, with other part times, is the one shown then, and the page
    names its run (that page drawn alone, render_device_page; the chosen run-1: the test above)."""
    section = _breakdown(next(site.glob("device-nvidia-h100*.html")).read_text())
    assert "mlp_down" not in section and "<svg" not in section
    assert "No profiled blocks" in section and "run-1" in section  # where the profiles that exist are

    both = render_device_page(frame(list(_site_frame().to_dict("records")) + NEWEST_ROWS), H100, tmp_path / "both",
                              layer_profiles=BOTH)
    section = _breakdown(both.read_text())
    assert section.count("<h3>") == 1 and f'Profiled in run <span class="key">{NEWEST}</span>' in section
    assert "runs not shown here: <span class=\"key\">run-1</span>" in section
    assert 1e-3 < LONGEST_BEFORE_MS < LONGEST_MS < 1e6
    assert f">{LONGEST_MS:.4g}<" in section and f">{LONGEST_BEFORE_MS:.4g}<" not in section


def test_a_device_page_drawn_alone_is_the_page_of_the_site(site: Path, tmp_path: Path) -> None:
    """render_device_page (which the tests above use to draw one page) writes the page render_report
    writes for the same results, with its figures, and nothing else: the A100's, and the H100's with
    its breakdown and interconnect sections; an unknown device is refused."""
    for device in (A100, H100):
        out = tmp_path / device.replace(" ", "_")
        alone = render_device_page(_site_frame(), device, out, layer_profiles=(BLOCK_PROFILES, BLOCK_PARTS))
        assert alone.read_text() == (site / alone.name).read_text()
        figures = sorted(p.name for p in (out / "figures").iterdir())
        assert sorted(p.name for p in out.iterdir()) == [alone.name, "figures"] and figures
        assert all((site / "figures" / name).read_text() == (out / "figures" / name).read_text() for name in figures)
    with pytest.raises(ValueError, match="NVIDIA A100-SXM4-80GB"):
        render_device_page(_site_frame(), "NVIDIA B200", tmp_path / "none")


def test_empty_database_says_there_is_nothing_yet(tmp_path):
    index = render_report(pd.DataFrame(), tmp_path / "empty")
    assert "nothing here yet" in index.read_text()
    assert (index.parent / "regressions.html").is_file()


def _console(url: str, tmp_path: Path, shot: Path) -> list[str]:
    """Console lines (the report has no scripts, so any console message is an error) of one page load."""
    assert CHROMIUM is not None  # the tests that load a page need chromium
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
           "--enable-logging=stderr", "--v=0", "--window-size=1280,1600", f"--screenshot={shot}", url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    log = proc.stdout + proc.stderr
    return [line for line in log.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def _blank(shot: Path) -> bool:
    from PIL import Image

    img = Image.open(shot).convert("RGB")
    colors = img.getcolors(maxcolors=1 << 20)
    # few distinct colours, or one colour covering nearly everything
    return colors is None or len(colors) <= 50 or max(n for n, _ in colors) >= 0.97 * img.width * img.height


needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")


@pytest.mark.browser
@needs_chromium
@pytest.mark.parametrize("page", ["index.html", "device"])
def test_report_opens_in_headless_chromium_without_console_errors(site, tmp_path, page):
    target = next(site.glob("device-nvidia-h100*.html")) if page == "device" else site / page
    shot = tmp_path / "shot.png"
    console = _console(target.as_uri(), tmp_path, shot)
    assert not console, "\n".join(console)
    assert shot.is_file()
    assert not _blank(shot), "screenshot looks blank"


@pytest.mark.browser
@needs_chromium
def test_the_browser_check_catches_a_broken_page(tmp_path):
    page = tmp_path / "broken.html"
    page.write_text("<html><body><script>console.error('planted'); missingFunction();</script></body></html>")
    shot = tmp_path / "shot.png"
    console = _console(page.as_uri(), tmp_path, shot)
    assert any("planted" in line for line in console) and any("missingFunction" in line for line in console)
    assert _blank(shot)


# the tables after the interconnect section's heading, up to the next h2: each a list of rows of cell texts
SECTION_TABLES_JS = """(() => { const tables = [];
  for (let el = document.getElementById('interconnect').nextElementSibling; el && el.tagName !== 'H2';
       el = el.nextElementSibling) {
    if (el.tagName === 'TABLE') tables.push([...el.rows].map(r => [...r.cells].map(c => c.textContent.trim())));
  }
  return tables; })()"""


@pytest.mark.browser
@needs_chromium
def test_the_interconnect_section_in_chromium(tmp_path):
    """The device page of a database holding collectives (8 GPUs, one straggling rank), as Chromium
    builds it: the section, its ceiling and latency-floor row, the stragglers table, the chart
    loaded, the interconnect ceiling measured hot and back to back, and no console message."""
    from tests.reports.cdp import Browser

    rows = device_rows() + collective_sweep("all_reduce", 8, peak_gbps=370.0, latency_ms=0.02)
    big = rows[-1]
    groups = pd.DataFrame([{
        "run_id": big["run_id"], "device_name": big["device_name"], "device_fingerprint": big["device_fingerprint"],
        "case_key": big["case_key"], "op": "all_reduce", "backend": "nccl", "dtype": "bfloat16", "params": {},
        "cache": "hot", "timing_mode": "launch", "status": "ok", "median_ms": big["median_ms"], "bytes": big["bytes"],
        "gbps": big["gbps"], "ranks": 8, "rank_medians_ms": [1.0, 1.0, 1.0, 1.5, 1.0, 1.0, 1.0, 1.0],
        "rank_devices": [f"node1 cuda:{r} GPU-{r}" for r in range(8)], "comm_version": "2.21.5",
        "comm_settings": {"NCCL_ALGO": "Ring"}, "slowest_rank": 3, "straggler_excess": 0.5,
    }])
    page = render_device_page(frame(rows), H100, tmp_path / "site", collectives=groups)
    with Browser() as b:
        b.open(page.as_uri())
        assert b.js("document.getElementById('interconnect').textContent") == "Interconnect: collectives"
        roofs, stragglers, libraries = b.js(SECTION_TABLES_JS)
        assert roofs[0][:3] == ["collective", "ranks", "best busbw GB/s"] and len(roofs) == 2
        assert roofs[1][:2] == ["all_reduce", "8"] and float(roofs[1][2]) == pytest.approx(370, rel=0.05)
        smallest = next(r for r in rows if r["op"] == "all_reduce")
        assert roofs[1][3] == "450" and roofs[1][5] == big["case_key"] and roofs[1][7] == smallest["case_key"]
        assert stragglers[0][3] == "slowest rank" and len(stragglers) == 2
        assert stragglers[1][3:5] == ["3", "node1 cuda:3 GPU-3"] and stragglers[1][-1] == "50.0 %"
        assert libraries[1] == ["nccl", "2.21.5", "NCCL_ALGO=Ring", "1"]
        assert b.js("document.querySelector('img[src*=\"interconnect-\"]').naturalWidth") > 0
        # the page's ceilings table: the interconnect ceiling, measured hot and back to back
        measured_as = b.js("[...document.querySelectorAll('tr')].filter(r => r.cells[0]?.textContent === "
                           "'interconnect').map(r => r.cells[6].textContent)")
        assert measured_as == ["hot, back_to_back"]
        assert not b.console and not b.exceptions, (b.console, b.exceptions)
