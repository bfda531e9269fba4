"""The fleet page of the report: the night's heatmap, its nodes worst first, each flagged device
with its evidence and sparkline, the fleet's shifts; and the links page: the night's matrices of
pairs, its slow ends and slow links (reports.fleet judges; this draws)."""
from __future__ import annotations

from collections.abc import Callable

import jinja2

from rooflab.db.handle import Db
from rooflab.reports.data.fleet_reads import NoSuiteRuns
from rooflab.reports.errors import ReportInputError
from rooflab.reports.fleet.link_records import LinksNight
from rooflab.reports.fleet.night import judge_links_night, judge_night
from rooflab.reports.fleet.options import FleetOptions
from rooflab.reports.fleet.records import FleetNight
from rooflab.reports.fleet.status import FleetStatus
from rooflab.reports.pages.fleet_plots import heatmap_svg, link_heatmaps, ordered_devices, sparkline_svg, walls_shown

LINKS_SUITE = "links"  # the suite whose newest night the links page judges


def load_fleet_night(db: Db, options: FleetOptions = FleetOptions()) -> FleetNight | None:
    """The judgement of the newest night of `options.suite` in `db`, None when it holds no such run."""
    try:
        return judge_night(db, options)
    except NoSuiteRuns:
        return None


def fleet_page(env: jinja2.Environment, write_svg: Callable[[str, str], str], slug: Callable[[str], str],
               night: FleetNight) -> str:
    """The HTML of fleet.html; its figures are written with `write_svg(name, svg)` (which returns
    the path the page links)."""
    heatmap = write_svg("fleet-heatmap.svg", heatmap_svg(night))
    flagged = []
    for device in sorted(night.flagged, key=lambda d: (d.status != FleetStatus.DRAIN, d.status != FleetStatus.SLOW,
                                                       d.host, d.device_key)):
        flagged.append({"device": device.as_dict(),
                        "sparkline": write_svg(f"fleet-{slug(device.device_key)}.svg", sparkline_svg(device))})
    return env.get_template("fleet.html").render(
        title="rooflab: fleet", night=night.as_dict(), heatmap=heatmap, flagged=flagged,
        nodes=[{"node": n.as_dict(), "devices": [d.as_dict() for d in members]} for n, members in
               ordered_devices(night)],
        walls=walls_shown(night), counts=night.as_dict()["counts"],
    )


def load_links_night(db: Db, options: FleetOptions = FleetOptions(suite=LINKS_SUITE)) -> LinksNight | None:
    """The judgement of the link matrices of the newest night of `options.suite` (links) in `db`, None
    when it holds no run of it (or no pair in it)."""
    try:
        return judge_links_night(db, options)
    except (NoSuiteRuns, ReportInputError):
        return None


def links_page(env: jinja2.Environment, write_svg: Callable[[str, str], str], night: LinksNight) -> str:
    """The HTML of links.html: a heatmap per kind of pair, the slow ends and the slow links."""
    heatmaps = {kind: write_svg(f"links-{kind}.svg", svg) for kind, svg in link_heatmaps(night).items()}
    return env.get_template("links.html").render(
        title="rooflab: links", night=night.as_dict(), heatmaps=heatmaps,
        flagged_ends=[e.as_dict() for e in night.flagged_ends], slow_links=[k.as_dict() for k in night.slow_links])
