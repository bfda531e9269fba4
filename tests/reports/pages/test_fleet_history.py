"""A fleet's history (reports.pages.history_judge.judge_fleet_history): the history pages draw the
flagged series only, series.html lists every series, and the verdicts are those of the check."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from rooflab.reports.data import reads
from rooflab.reports.pages import history_judge
from rooflab.reports.pages.series_index import index_data
from rooflab.reports.regressions.database_check import load_verdicts
from tests.reports.synth import row, write_db

RUNS, GPUS, CASES = 40, 4, 3


@pytest.fixture(scope="module")
def url(tmp_path_factory) -> str:
    """Three cases on four GPUs over 40 nights; case n=2 on GPU-2 slows by 20 % in its newest two."""
    rng = np.random.default_rng(11)
    rows = []
    for night in range(1, RUNS + 1):
        for n in range(1, CASES + 1):
            for gpu in range(GPUS):
                slow = 1.2 if (n, gpu) == (2, 2) and night > RUNS - 2 else 1.0
                rows.append(row(op="stream_triad", family="probe", params={"n": n},
                                median_ms=n * slow * float(1 + 0.004 * rng.standard_normal()), flops=2 * n,
                                nbytes=12 * n, run_id=f"run-{night:03d}", run_order=night))
                rows[-1]["device_uuid"] = f"GPU-{gpu}"
    path = tmp_path_factory.mktemp("fleet-history") / "r.db"
    write_db(f"sqlite:///{path}", rows)
    return f"sqlite:///{path}"


def _page_series(html: str, element: str) -> dict:
    found = re.search(rf'<script type="application/json" id="{element}">(.*?)</script>', html, re.S)
    assert found is not None
    return json.loads(found.group(1))


def test_a_fleet_history_draws_the_flagged_series_and_lists_every_one(url, tmp_path, monkeypatch):
    monkeypatch.setattr(reads, "FLEET_RESULTS", 0)
    verdicts, pages = history_judge.judge_history(url, out_dir=tmp_path)
    checked = load_verdicts(url)
    assert [(v.key, v.status) for v in verdicts] == [(v.key, v.status) for v in checked]
    flagged = [v for v in checked if v.flagged]
    assert {v.key[1] for v in flagged} == {"GPU-2"} and len(flagged) == 1
    assert [p.n_series for p in pages] == [1]
    page = (tmp_path / pages[0].file).read_text()
    assert "all 12 series are listed" in page
    drawn = _page_series(page, "history-data")
    assert drawn["series"]["key"] == [flagged[0].case_key]
    listing = _page_series((tmp_path / "series.html").read_text(), "series-data")
    assert len(listing["rows"]["case"]) == GPUS * CASES
    assert listing == json.loads(json.dumps(index_data(checked)))
    slow = [i for i, v in enumerate(listing["rows"]["v"]) if listing["verdicts"][v] != "ok"]
    assert [listing["devices"][listing["rows"]["dev"][i]][0] for i in slow] == ["GPU-2"]
    assert all(n == RUNS for n in listing["rows"]["n"])


def test_a_smaller_history_draws_every_series(url, tmp_path):
    _, pages = history_judge.judge_history(url, out_dir=tmp_path)
    assert sum(p.n_series for p in pages) == GPUS * CASES
    assert not (tmp_path / "series.html").exists()
