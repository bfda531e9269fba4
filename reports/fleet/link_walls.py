"""The `link` wall: a device's place among the ends of the night's link matrices, beside its other walls.

Where the night `rooflab fleet` judges holds pairs of a link matrix (a suite whose spec measures one,
as `links` does), the links are judged as `rooflab fleet --links` judges them (links.py) and each
device that is an end gets a `link` wall: its end's status, deviation, interval, z and lines (the
worst of its ends where it is one within its node and, as the GPU its node's pairs go through,
between nodes). The wall counts toward the device's status as its other walls do, so a GPU whose
every pair is slow is flagged by `rooflab fleet` itself, and its node with it. The wall has no own
history (the ends are fitted night by night) and no evidence cases: the links page and `--links` show
its pairs. An end that is not a device of the night (a CPU's rank: its ranks share one device; a GPU
with no result of its own in the night) gives no wall.
"""
from __future__ import annotations

import dataclasses
from collections import Counter

import pandas as pd

from rooflab.reports.fleet.link_records import EndJudgement, LinksNight
from rooflab.reports.fleet.links import NoLinks, judge_links
from rooflab.reports.fleet.options import FleetOptions
from rooflab.reports.fleet.records import DeviceJudgement, OwnHistory, WallJudgement
from rooflab.reports.fleet.status import SEVERITY, worst
from rooflab.reports.fleet.walls import LINK_WALL
from rooflab.reports.regressions.verdicts import Verdict
from rooflab.suite.ops.pairs import PAIRS_OP


def links_of_night(results: pd.DataFrame, options: FleetOptions, run_ids: tuple[str, ...]) -> LinksNight | None:
    """The links judged on the night of `run_ids` (None: the night holds no pair)."""
    if not (results["op"] == PAIRS_OP).any():
        return None
    try:
        night = judge_links(results, options)
    except NoLinks:
        return None
    return night if set(night.night.run_ids) <= set(run_ids) else None


def _worst_ends(night: LinksNight) -> dict[str, EndJudgement]:
    """Each device key's worst judged end (the lower deviation between two of one status); ends that
    share one device within a kind (a CPU's ranks) are not that device's."""
    shared = Counter((end.kind, end.device_key) for end in night.ends)
    found: dict[str, EndJudgement] = {}
    for end in night.ends:
        if end.judged is None or shared[(end.kind, end.device_key)] > 1:
            continue
        kept = found.get(end.device_key)
        if kept is None or kept.judged is None or (SEVERITY[end.status], -end.judged.deviation_pct) > (
                SEVERITY[kept.status], -kept.judged.deviation_pct):
            found[end.device_key] = end
    return found


def _wall(end: EndJudgement) -> WallJudgement:
    judged = end.judged
    assert judged is not None
    return WallJudgement(LINK_WALL, judged.status, judged.deviation_pct, judged.low_pct, judged.high_pct, judged.z,
                         judged.spread_pct, judged.warn_line_pct, judged.drain_line_pct, end.pairs, None, False,
                         OwnHistory(Verdict.INSUFFICIENT_DATA, None, None, 0))


def with_link_walls(devices: tuple[DeviceJudgement, ...], night: LinksNight | None) -> tuple[DeviceJudgement, ...]:
    """`devices` with a `link` wall for each that is an end of `night`'s matrices, and its status again."""
    ends = _worst_ends(night) if night is not None else {}
    out = []
    for device in devices:
        end = ends.get(device.device_key)
        if end is None:
            out.append(device)
            continue
        walls = {**device.walls, LINK_WALL: _wall(end)}
        out.append(dataclasses.replace(device, walls=walls, status=worst(w.status for w in walls.values()),
                                       reason=None))
    return tuple(out)
