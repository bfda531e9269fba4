"""The report's links page: a heatmap per kind of pair (within nodes, between nodes) with the
flagged pairs outlined, the slow ends and the slow links; linked from the index."""
from __future__ import annotations

import random
from pathlib import Path

import pandas as pd

from rooflab.reports.fleet.links import judge_links
from rooflab.reports.fleet.options import FleetOptions
from rooflab.reports.pages.report import render_report
from tests.reports.fleet.test_links import night_rows


def test_the_links_page_draws_each_matrix_and_names_the_slow_end_and_link(tmp_path: Path) -> None:
    slow: dict[object, float] = {"GPU-0102": 1.3, ("GPU-0003", "GPU-0005"): 1.4}
    night = judge_links(pd.DataFrame(night_rows(0, 3, 8, slow, random.Random())), FleetOptions(suite="links"))
    index = render_report(pd.DataFrame(), tmp_path, links=night)
    page = (tmp_path / "links.html").read_text()
    for kind in ("same_node", "across_nodes"):
        assert f'src="figures/links-{kind}.svg"' in page and (tmp_path / "figures" / f"links-{kind}.svg").exists()
    svg = (tmp_path / "figures" / "links-same_node.svg").read_text()
    outlined = sum(svg.count(f"stroke: {c}") for c in ("#e6a100", "#d4572a", "#8b0000"))
    assert outlined == 2 * (7 + 1)  # the slow GPU's 7 pairs and the slow link, each cell both ways
    assert '<td class="key">GPU-0102</td><td>node1</td><td>same_node</td>' in page
    assert '<td class="key">GPU-0003</td><td class="key">GPU-0005</td>' in page
    assert 'href="links.html"' in index.read_text()
    render_report(pd.DataFrame(), tmp_path / "none")
    assert not (tmp_path / "none" / "links.html").exists()
