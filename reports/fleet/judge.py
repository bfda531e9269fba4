"""The judgement of one night: every device's status wall by wall, its node's, the fleet's shifts.

`judge_fleet(results, options)` is the whole of `rooflab fleet` after the read: pure, on the results
frame of the suite's runs (deviations.FLEET_COLUMNS), so that a test or a benchmark can plant a
fleet and judge it without a database. The steps: deviations.py (each device against the fleet,
case by case and wall by wall), statuses.py (each wall's status tonight), history.py (each device
against its own past, and the fleet against its own), link_walls.py (a `link` wall for each device that
is an end of the night's link matrices); here they are put together into records.
"""
from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from rooflab.db.nights import Night
from rooflab.reports.fleet.deviations import MODEL, Prepared, case_deviations, prepare, wall_deviations
from rooflab.reports.fleet.history import fleet_shifts, own_history
from rooflab.reports.fleet.link_walls import links_of_night, with_link_walls
from rooflab.reports.fleet.options import FleetOptions
from rooflab.reports.fleet.records import (
    CaseEvidence,
    DeviceJudgement,
    FleetNight,
    ModelSummary,
    NightInfo,
    NodeJudgement,
    OwnHistory,
    WallJudgement,
)
from rooflab.reports.fleet.robust import pct
from rooflab.reports.fleet.status import FLAGGED, SEVERITY, FleetStatus, worst
from rooflab.reports.fleet.statuses import wall_statuses
from rooflab.reports.fleet.walls import WALL_ORDER
from rooflab.reports.regressions.verdicts import Verdict

_WALL_ORDER = {w: i for i, w in enumerate(WALL_ORDER)}
_VERDICT_RANK = {Verdict.REGRESSION: 4, Verdict.SUSPECT: 3, Verdict.OK: 2, Verdict.IMPROVEMENT: 1,
                 Verdict.INSUFFICIENT_DATA: 0}


class NoNight(ValueError):
    """The suite has no run to judge (at or before the time asked)."""


def judge_fleet(results: pd.DataFrame, options: FleetOptions = FleetOptions()) -> FleetNight:
    """The judgement of the newest night of `results` (at or before `options.at`); NoNight without one."""
    prepared = prepare(results, options)
    if not prepared.nights:
        when = f" at or before {options.at.isoformat()}" if options.at is not None else ""
        raise NoNight(f"no run of suite {options.suite!r}{when}")
    cases = case_deviations(prepared.rows, options)
    walls = wall_deviations(cases, options)
    judged = wall_statuses(walls, own_history(walls, options), options)
    devices = with_link_walls(_devices(prepared, cases, walls, judged, options),
                              links_of_night(results, options, prepared.night_runs[0]))
    night = prepared.nights[0]
    info = NightInfo(options.suite, night.first_started_at, night.last_started_at, prepared.night_runs[0],
                     len(prepared.nights) - 1)
    return FleetNight(info, options, devices, _nodes(devices), tuple(fleet_shifts(cases, options, prepared.nights)),
                      _models(prepared, cases), _missing(prepared))


def _devices(prepared: Prepared, cases: pd.DataFrame, walls: pd.DataFrame, judged: pd.DataFrame,
             options: FleetOptions) -> tuple[DeviceJudgement, ...]:
    tonight = prepared.devices[prepared.devices["night"] == 0]
    siblings = tonight.groupby(MODEL)["device_key"].transform("size")
    walls_of: dict[str, list[dict]] = {}
    for r in sorted(judged.to_dict("records"), key=lambda r: _WALL_ORDER.get(r["wall"], len(_WALL_ORDER))):
        walls_of.setdefault(str(r["device_key"]), []).append(r)
    flagged_keys = set(judged.loc[judged["status"].isin([str(s) for s in FLAGGED]), "device_key"])
    night_walls = walls[walls["device_key"].isin(flagged_keys)]
    series_of = {key: rows for key, rows in night_walls.groupby(["device_key", "wall"], sort=False)}
    evidence_of = {key: rows for key, rows in
                   cases[(cases["night"] == 0) & cases["device_key"].isin(flagged_keys)].groupby("device_key")}
    out = []
    for row, count in zip(tonight.to_dict("records"), siblings, strict=True):
        key = str(row["device_key"])
        wall_records = {str(r["wall"]): _wall(r, series_of.get((key, r["wall"])), prepared.nights)
                        for r in walls_of.get(key, [])}
        out.append(_device(row, int(count), wall_records, evidence_of.get(key), options))
    return tuple(sorted(out, key=lambda d: (d.host, d.device_key)))


def _device(row: Mapping[str, Any], siblings: int, walls: Mapping[str, WallJudgement], cases: pd.DataFrame | None,
            options: FleetOptions) -> DeviceJudgement:
    key, host, uuid = str(row["device_key"]), str(row["host"]), row["device_uuid"]
    name, memory, faults = str(row["device_name"]), int(row["memory_bytes"]), int(row["faults"])
    uuid = None if uuid is None or pd.isna(uuid) else str(uuid)
    if not walls:
        reason = (f"{siblings} device(s) of this model tonight, fewer than --min-devices {options.min_devices}"
                  if siblings < options.min_devices
                  else f"no wall of it was measured tonight on {options.min_devices} devices ({faults} fault(s))")
        return DeviceJudgement(key, uuid, host, name, memory, FleetStatus.NOT_JUDGED, siblings, faults=faults,
                               reason=reason)
    status = worst(w.status for w in walls.values())
    flagged = sorted(((w.since, not w.since_open) for w in walls.values()
                      if w.status in FLAGGED and w.since is not None), key=lambda s: s[0])
    since, since_open = (flagged[0][0], not flagged[0][1]) if flagged else (None, False)
    verdict = max((w.history.verdict for w in walls.values()), key=_VERDICT_RANK.__getitem__)
    evidence = _evidence(cases) if cases is not None else ()
    return DeviceJudgement(key, uuid, host, name, memory, status, siblings, walls, since, since_open, verdict,
                           faults, None, evidence)


def _wall(r: Mapping[str, Any], series: pd.DataFrame | None, nights: list[Night]) -> WallJudgement:
    """One wall's record from its row of the judged frame; `series` (its deviations night by night)
    for a flagged wall: since when, and its trend."""
    status = FleetStatus(r["status"])
    since: datetime | None = None
    since_open = False
    trend: tuple[tuple[datetime, float], ...] = ()
    if status in FLAGGED and series is not None:
        series = series.sort_values("night")
        beyond = {int(k): pct(float(d)) <= -float(r["warn_line_pct"])
                  for k, d in zip(series["night"], series["d"], strict=True)}
        first = _streak_start(beyond)
        since, since_open = nights[first].first_started_at, first == len(nights) - 1
        trend = tuple((nights[int(k)].first_started_at, pct(float(d)))
                      for k, d in zip(series["night"][::-1], series["d"][::-1], strict=True))
    return WallJudgement(
        str(r["wall"]), status, float(r["deviation_pct"]), float(r["low_pct"]), float(r["high_pct"]), float(r["z"]),
        float(r["spread_pct"]), float(r["warn_line_pct"]), float(r["drain_line_pct"]), int(r["cases"]), since,
        since_open, _own(r), trend)


def _own(r: Mapping[str, Any]) -> OwnHistory:
    change, z, nights = float(r["change"]), float(r["z_own"]), float(r["nights"])
    if not np.isfinite(nights):
        return OwnHistory(Verdict.INSUFFICIENT_DATA, None, None, 0)
    return OwnHistory(Verdict(r["verdict"]), pct(change) if np.isfinite(change) else None,
                      z if np.isfinite(z) else None, int(nights))


def _evidence(cases: pd.DataFrame) -> tuple[CaseEvidence, ...]:
    rows = cases.assign(order=cases["wall"].map(lambda w: _WALL_ORDER.get(w, len(_WALL_ORDER)))).sort_values(
        ["order", "case_key"])
    return tuple(CaseEvidence(str(r.case_key), r.wall, pct(r.dev), float(r.median_ms), float(np.exp(r.fleet_y)),
                              int(r.devices), bool(r.throttled), r.quality)
                 for r in rows.itertuples(index=False))


def _streak_start(beyond: Mapping[int, bool]) -> int:
    """The night (index) that began the flagged streak reaching tonight: nights beyond the warn line
    back from tonight, a single night inside the line between two beyond it not ending the streak."""
    first, misses = 0, 0
    for k in sorted(beyond):
        if beyond[k]:
            first, misses = k, 0
        else:
            misses += 1
            if misses >= 2:
                break
    return first


def _nodes(devices: tuple[DeviceJudgement, ...]) -> tuple[NodeJudgement, ...]:
    """Every host, its worst device's status first (worst nodes first)."""
    by_host: dict[str, list[DeviceJudgement]] = {}
    for d in devices:
        by_host.setdefault(d.host, []).append(d)
    nodes = []
    for host, members in by_host.items():
        status = worst(d.status for d in members)
        worst_device = max(members, key=lambda d: (SEVERITY[d.status], -_lowest(d)))
        nodes.append(NodeJudgement(host, status, worst_device.device_key if status != FleetStatus.NOT_JUDGED
                                   else None, len(members)))
    return tuple(sorted(nodes, key=lambda n: (-SEVERITY[n.status], n.host)))


def _lowest(device: DeviceJudgement) -> float:
    """Its most negative wall deviation (0 without a wall): the tie-break for a node's worst device."""
    return min((w.deviation_pct for w in device.walls.values()), default=0.0)


def _models(prepared: Prepared, cases: pd.DataFrame) -> tuple[ModelSummary, ...]:
    rows = prepared.rows[prepared.rows["night"] == 0]
    judged = cases[cases["night"] == 0].groupby(MODEL)["case_key"].nunique()
    every = rows.groupby(MODEL)["case_key"].nunique()
    devices = prepared.devices[prepared.devices["night"] == 0].groupby(MODEL)["device_key"].nunique()
    out = []
    for (name, memory), count in devices.items():
        n_judged = int(judged.get((name, memory), 0))
        out.append(ModelSummary(str(name), int(memory), int(count), n_judged,
                                int(every.get((name, memory), 0)) - n_judged))
    return tuple(out)


def _missing(prepared: Prepared) -> tuple[str, ...]:
    nights = prepared.devices.groupby("night")["device_key"].agg(set)
    if 1 not in nights.index:
        return ()
    return tuple(sorted(nights[1] - nights.get(0, set())))
