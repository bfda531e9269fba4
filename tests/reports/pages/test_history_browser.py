"""The history page opened in headless Chromium as a user would: its load time, every filter, the
text search, one series opened with its change point, a segment start, the flagged nights, and
no console message or uncaught error (tests/reports/cdp.py drives the browser)."""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from rooflab.reports.pages.history_page import history_site
from rooflab.reports.pages.report import _env
from rooflab.reports.pages.slugs import slug
from rooflab.reports.regressions.history_points import HistoryData, history_of_frame
from rooflab.reports.regressions.series import detect
from tests.reports.cdp import CHROMIUM, Browser
from tests.reports.gen_history import DEVICES, NEW_DRIVER, STEP, nightly_history, planted_keys

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")]
LOAD_BUDGET_MS = 2000


@dataclass(frozen=True)
class Site:
    page: Path  # history.html
    frame: pd.DataFrame  # the results it was drawn from
    history: HistoryData  # the frame's series, framed once for every page drawn of them
    verdicts: list


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    frame = nightly_history(nights=90, cases=150, devices=2)  # 300 series, 27,000 per-run points
    out = tmp_path_factory.mktemp("history")
    history, verdicts = history_of_frame(frame), detect(frame)
    for name, text in history_site(_env(), history, verdicts, slug).items():
        (out / name).write_text(text, encoding="utf-8")
    return Site(out / "history.html", frame, history, verdicts)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    """One Chromium for the module's tests (each opens a page of its own in it: `browser`)."""
    with Browser() as b:
        yield b


@pytest.fixture
def browser(chromium: Browser) -> Browser:
    """A fresh page, with no console message or exception yet, in the module's Chromium."""
    chromium.new_page()
    return chromium


def _matches(b: Browser) -> str:
    return b.js("document.getElementById('matches').textContent")


def _shown_keys(b: Browser) -> list[str]:
    return b.js("[...document.querySelectorAll('#series tbody a.open')].map(a => a.textContent)")


def _series(frame, **where) -> int:
    rows = frame.drop_duplicates(["case_key", "device_uuid"])
    for column, value in where.items():
        rows = rows[rows[column] == value]
    return len(rows)


def test_the_history_page_in_chromium(site: Site, browser: Browser, tmp_path: Path) -> None:
    page, frame = site.page, site.frame
    keys = planted_keys(frame)
    b = browser
    b.open(page.as_uri())
    ready_ms = b.js("performance.getEntriesByName('history-ready')[0].startTime")
    loaded_ms = b.js("performance.getEntriesByType('navigation')[0].loadEventEnd")
    assert 0 < ready_ms < LOAD_BUDGET_MS and loaded_ms < LOAD_BUDGET_MS, (ready_ms, loaded_ms)
    assert _matches(b).startswith("300 of 300 series match")
    assert len(_shown_keys(b)) == 100  # the first hundred, most urgent first
    assert _shown_keys(b)[0] == keys["step"]  # the regression heads the table
    for field, column, value in (("op", "op", "matmul"), ("family", "family", "reduction"),
                                 ("dtype", "dtype", "bfloat16"), ("backend", "backend", "eager"),
                                 ("cache", "cache", "hot"), ("model", "device_name", DEVICES[1]),
                                 ("device", "device_uuid", "GPU-1")):
        b.click("#f-clear")
        b.select(f"#f-{field}", f"node1 {value}" if field == "device" else value)
        n = _series(frame, **{column: value})
        assert _matches(b).startswith(f"{n} of 300"), (field, _matches(b))
        shown = b.js("[...document.querySelectorAll('#series tbody tr')].map(r => r.textContent)")
        assert len(shown) == min(n, 100) and all(value in text for text in shown
                                                 if field in ("op", "dtype", "cache", "model", "device")), field
    b.click("#f-clear")
    b.type_into("#f-q", "softmax bfloat16")
    n = len(frame[frame["case_key"].str.contains("softmax") & frame["case_key"].str.contains("bfloat16")]
            .drop_duplicates(["case_key", "device_uuid"]))
    assert n > 0 and _matches(b).startswith(f"{n} of 300")
    assert "q=softmax%20bfloat16" in b.js("location.hash")  # the view can be linked
    b.click("#f-clear")
    b.select("#f-verdict", "regression")
    assert _matches(b).startswith("1 of 300") and _shown_keys(b) == [keys["step"]]
    b.click("#series tbody tr:first-child a.open")  # open the series, as a user clicks it
    b.wait_for("!document.getElementById('detail').hidden")
    cp = b.js("[...document.querySelectorAll('#detail text.cp-label')].map(t => t.textContent)")
    assert len(cp) == 1 and cp[0].startswith(f"change +{100 * STEP:.0f}".rstrip("0")[:9]), cp
    assert b.js("document.querySelectorAll('#detail line.cp-slower').length") == 1
    assert b.js("document.querySelectorAll('#detail circle.flagged').length") == 2  # the two newest nights
    assert b.js("document.querySelectorAll('#detail circle.first-bad').length") == 1
    assert b.js("document.querySelectorAll('#detail circle.pt').length") == 90
    titles = b.js("[...document.querySelectorAll('#detail circle.pt title')].map(t => t.textContent)")
    assert "run nightly-089" in titles[-1] and "commit 0089c0ffee" in titles[-1]
    assert "first bad run" in b.js("document.getElementById('detail').textContent")
    b.click("#detail a.close")
    b.wait_for("document.getElementById('detail').hidden")
    b.js(f"location.hash = {json.dumps('#open=' + keys['flush'] + '@GPU-0')}")
    b.wait_for("!!document.querySelector('#detail text.seg-label')")
    segments = b.js("[...document.querySelectorAll('#detail text.seg-label')].map(t => t.textContent)")
    assert segments == ["pace back_to_back \u2192 idle", "flush method read_sweep \u2192 write_sweep"]
    assert b.js("document.querySelectorAll('#detail line.segment').length") == 2
    b.js(f"location.hash = {json.dumps('#open=' + keys['driver'] + '@GPU-0')}")  # a driver update: one series
    b.wait_for("!!document.querySelector('#detail text.seg-label')")
    segments = b.js("[...document.querySelectorAll('#detail text.seg-label')].map(t => t.textContent)")
    assert segments == [f"driver 550.54 \u2192 {NEW_DRIVER}"]
    assert b.js("document.querySelectorAll('#detail circle.pt').length") == 90  # both environments' nights
    assert "environment changed" in b.js("document.getElementById('detail').textContent")
    b.js(f"location.hash = {json.dumps('#open=' + keys['throttled'] + '@GPU-0')}")
    assert b.wait_for("document.querySelectorAll('#detail circle.excluded').length") == 1
    b.screenshot(tmp_path / "history.png")
    assert not b.console and not b.exceptions, (b.console, b.exceptions)
    from tests.reports.pages.test_html import _blank

    assert not _blank(tmp_path / "history.png")


def test_the_browser_client_catches_a_broken_page(browser: Browser, tmp_path: Path) -> None:
    page = tmp_path / "broken.html"
    page.write_text("<html><body><script>console.error('planted'); missingFunction();</script></body></html>")
    b = browser
    b.open(page.as_uri())
    assert any("planted" in line for line in b.console)
    assert any("missingFunction" in text for text in b.exceptions)


def test_a_page_over_the_point_budget_is_split_per_device(site: Site) -> None:
    pages = history_site(_env(), site.history, site.verdicts, slug, page_points=10_000)
    names = sorted(pages)
    assert names == sorted(["history.html"] + [f"history-{slug(d)}.html" for d in DEVICES[:2]])
    index = pages["history.html"]
    assert all(f'href="history-{slug(d)}.html"' in index for d in DEVICES[:2]) and "<script" not in index
    one = pages[f"history-{slug(DEVICES[0])}.html"]
    data = json.loads(one.split('id="history-data">', 1)[1].split("</script>", 1)[0])
    assert len(data["series"]["key"]) == 150 and {f["device"] for f in data["fps"]} == {DEVICES[0]}
