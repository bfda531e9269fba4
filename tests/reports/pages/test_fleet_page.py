"""The report's fleet page: the night's heatmap, its nodes worst first, each flagged device with its
evidence and sparkline, the fleet's shifts; linked from the index when the database holds a health night."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from rooflab.db.importer import import_file
from rooflab.reports.fleet.judge import judge_fleet
from rooflab.reports.pages.fleet_page import load_fleet_night
from rooflab.reports.pages.report import render_report, write_report
from tests.reports.fleet_sim import FleetStep, SimFleet, Slowdown, device_key, simulate, write_export


@pytest.fixture(scope="module")
def night():
    sim = SimFleet(nodes=4, gpus_per_node=8, nights=16, seed=21, slowdowns=(
        Slowdown(9, "hbm_rw", 10.0, 12), Slowdown(30, "matrix", 6.0, 0)), steps=(FleetStep(15, 6.0, ("launch",)),))
    return sim, judge_fleet(simulate(sim))


def test_the_fleet_page_draws_the_night(night, tmp_path: Path) -> None:
    sim, judged = night
    index = render_report(pd.DataFrame(), tmp_path, fleet=judged)
    page = (tmp_path / "fleet.html").read_text()
    # the heatmap, with a row per device grouped by node, the worst node first
    assert 'src="figures/fleet-heatmap.svg"' in page and (tmp_path / "figures" / "fleet-heatmap.svg").exists()
    hosts = re.findall(r"<tr><td>(node\d\d)</td><td class=\"status-(\w+)\"", page)
    assert hosts[:2] == [("node01", "drain"), ("node03", "slow")] and len(hosts) == 4
    # each flagged device: its status, evidence (every case) and a sparkline
    for index_, status in ((9, "drain"), (30, "slow")):
        key = device_key(sim, index_)
        assert f'<h3 id="{key}"><span class="status-{status}">{status}</span>' in page
        assert f'src="figures/fleet-{key.lower()}-' in page  # its sparkline
    assert page.count("fleet median") >= 1 and "stream_copy.v1:eager:float32:cold:launch" in page
    assert len(list((tmp_path / "figures").glob("fleet-gpu-*.svg"))) == 2
    # the fleet's shift on the launch wall, once
    assert re.search(r"<td>launch</td><td class=\"key\">\(the wall\)</td>", page)
    assert index.read_text().count('href="fleet.html"') >= 1


def test_write_report_judges_the_newest_health_night(tmp_path: Path) -> None:
    sim = SimFleet(nodes=1, gpus_per_node=6, nights=4, seed=2, slowdowns=(Slowdown(4, "matrix", 12.0, 2),))
    url = f"sqlite:///{tmp_path / 'r.db'}"
    import_file(url, write_export(simulate(sim), sim, tmp_path / "health.jsonl"))
    judged = load_fleet_night(url)
    assert judged is not None and {d.device_key for d in judged.flagged} == {device_key(sim, 4)}
    index = write_report(url, tmp_path / "report")
    assert (tmp_path / "report" / "fleet.html").exists() and 'href="fleet.html"' in index.read_text()


def test_no_health_night_no_fleet_page(tmp_path: Path) -> None:
    sim = SimFleet(nodes=1, gpus_per_node=4, nights=1, suite="quick")
    url = f"sqlite:///{tmp_path / 'r.db'}"
    import_file(url, write_export(simulate(sim), sim, tmp_path / "quick.jsonl"))
    assert load_fleet_night(url) is None
    index = write_report(url, tmp_path / "report")
    assert not (tmp_path / "report" / "fleet.html").exists() and "fleet.html" not in index.read_text()
