"""The report's regressions page: change points on each trend plot, run dates on its x-axis, the
first bad run and its commit named, a legend entry for every marker, zero counts not in alarm colour."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from rooflab.reports.pages.report import render_report
from tests.reports import gen_series as g
from tests.reports.synth import frame, history


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    # a +8 % step at night 30 and a +15 % step on the newest two nights: two change points and a regression
    values = g.step(size=0.08, at=30, noise=0.01, seed=7).values_ms
    values[-2:] *= 1.15
    rows = history(list(values))
    for r in rows:
        r["git_commit"] = f"c{int(r['run_id'][4:]):04d}"
    return render_report(frame(rows), tmp_path_factory.mktemp("regpage") / "site").parent


def test_page_names_the_first_bad_run_its_commit_and_the_change_points(site):
    page = (site / "regressions.html").read_text()
    assert "run-0059</span>, commit <span class=\"key\">c0059" in page  # first of the newest two slow runs
    assert "run-0031" in page and "c0031" in page and "2026-02-01" in page  # the mid-history change point
    assert '<span class="status-regression">1 regressions</span>' in page
    assert "0 suspect" in page and "0 improvements" in page  # zero counts are not coloured
    assert 'status-suspect">0' not in page and 'status-improvement">0' not in page


def test_trend_plot_marks_change_points_with_dates_and_a_legend(site):
    (src,) = re.findall(r'src="(figures/trend-[^"]+)"', (site / "regressions.html").read_text())
    svg = (site / src).read_text()
    # matplotlib writes each text element's string as a comment beside its glyph paths
    texts = set(re.findall(r"<!-- (.*?) -->", svg))
    for label in ("change point, slower", "first bad run run-0059 (c0059)", "newest runs, flagged", "good",
                  "baseline median", "run date (UTC)"):
        assert label in texts, (label, sorted(texts)[:40])
    assert any(re.fullmatch(r"(2026-)?\d\d-\d\d|\w{3} \d\d|2026-\d\d-\d\d", t) for t in texts), sorted(texts)
