"""Each device against its own past, and the fleet against its own past (pure, on frames).

- `own_history`: a device wall's deviation from the fleet tonight against the median of its own
  deviations over the history nights. Because the deviation is taken against the fleet of each night,
  a change of the whole fleet (a driver, a library, the site's power) does not move it: what moves it
  is this device leaving its usual place among its siblings.
- `fleet_shifts`: the fleet's median of each case tonight against the median of its history nights,
  per case and per wall. A shift of every device at once shows here once, not as N slow devices.

Both hold a change against a line drawn from their own robust spread (robust.warn_line_pct), and
need MIN_HISTORY_NIGHTS nights of history.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pandas as pd

from rooflab.db.nights import Night
from rooflab.reports.fleet.deviations import DEVICE_WALL, MIN_HISTORY_NIGHTS, MODEL, group_spread, interval
from rooflab.reports.fleet.options import FleetOptions
from rooflab.reports.fleet.records import FleetShift
from rooflab.reports.fleet.robust import MEDIAN_SE_FACTOR, pct, pct_array, warn_line_pct
from rooflab.reports.fleet.walls import FLEET_WALLS
from rooflab.reports.regressions.verdicts import Verdict


def _history(frame: pd.DataFrame, options: FleetOptions) -> pd.Series:
    return (frame["night"] >= 1) & (frame["night"] <= options.history_nights)


def own_history(walls: pd.DataFrame, options: FleetOptions) -> pd.DataFrame:
    """One row per (model, device, wall) measured tonight: verdict, change (log), z_own and history nights."""
    hist = walls[_history(walls, options)]
    base = hist.groupby(DEVICE_WALL, sort=False)["d"].agg(["median", "size"]).rename(
        columns={"median": "base", "size": "nights"})
    scatter = hist.join(base, on=DEVICE_WALL)
    scatter = scatter.assign(own=scatter["d"] - scatter["base"])
    sigma = group_spread(scatter, [*MODEL, "wall"], "own").rename("sigma_own")
    tonight = walls[walls["night"] == 0][[*DEVICE_WALL, "d"]]
    yesterday = walls[walls["night"] == 1][[*DEVICE_WALL, "d"]].rename(columns={"d": "d1"})
    out = tonight.merge(yesterday, on=DEVICE_WALL, how="left").join(base, on=DEVICE_WALL)
    out = out.join(sigma, on=[*MODEL, "wall"])
    out["nights"] = out["nights"].fillna(0).astype(int)
    out["change"] = out["d"] - out["base"]
    change1 = out["d1"] - out["base"]
    line = np.array([warn_line_pct(100.0 * s, options.warn_pct) if math.isfinite(s) else np.inf
                     for s in out["sigma_own"].fillna(np.nan)])
    now, before = pct_array(out["change"]), pct_array(change1)
    verdict = np.full(len(out), Verdict.OK.value, dtype=object)
    verdict[(now >= line) & (before >= line)] = Verdict.IMPROVEMENT.value
    verdict[now <= -line] = Verdict.SUSPECT.value
    verdict[(now <= -line) & (before <= -line)] = Verdict.REGRESSION.value
    verdict[out["nights"].to_numpy() < MIN_HISTORY_NIGHTS] = Verdict.INSUFFICIENT_DATA.value
    out["verdict"] = verdict
    out["z_own"] = out["change"] / out["sigma_own"]
    return out.set_index(DEVICE_WALL)[["verdict", "change", "z_own", "nights"]]


@dataclass(frozen=True)
class _Level:
    """The fleet's level of one case (or wall) night by night against its history's median."""

    shift: pd.Series  # log shift per night (negative: slower), indexed by night
    se: float  # standard error of tonight's shift
    sigma: float  # the robust spread of the history nights' shifts


def _since(level: _Level, line_pct: float, nights: list[Night]) -> datetime | None:
    """The first night of the run of nights, back from tonight, whose shift is beyond the line the
    same way as tonight's."""
    sign = np.sign(level.shift.get(0, 0.0))
    first = None
    for k in sorted(level.shift.index):
        if sign * pct(level.shift[k]) >= line_pct and k < len(nights):
            first = nights[k].first_started_at
        else:
            break
    return first


def fleet_shifts(cases: pd.DataFrame, options: FleetOptions, nights: list[Night]) -> list[FleetShift]:
    """The walls (and lone cases) whose fleet median moved tonight beyond their line, per model."""
    fleet = cases.drop_duplicates([*MODEL, "case_key", "night"])[
        [*MODEL, "case_key", "wall", "night", "fleet_y", "devices", "sigma_case"]]
    hist = fleet[_history(fleet, options)]
    base = hist.groupby([*MODEL, "case_key"], sort=False)["fleet_y"].agg(["median", "size"]).rename(
        columns={"median": "base", "size": "nights"})
    fleet = fleet.join(base, on=[*MODEL, "case_key"])
    fleet = fleet[(fleet["nights"] >= MIN_HISTORY_NIGHTS) & (fleet["night"] <= options.history_nights)].copy()
    if fleet.empty or not (fleet["night"] == 0).any():
        return []
    fleet["s"] = fleet["base"] - fleet["fleet_y"]
    sigma_case = group_spread(fleet[fleet["night"] >= 1], [*MODEL, "case_key"], "s").rename("sigma_f")
    fleet = fleet.join(sigma_case, on=[*MODEL, "case_key"])
    moved = _own_moves(cases, options)
    out: list[FleetShift] = []
    for (name, memory), model in fleet.groupby(MODEL, sort=False):
        devices = int(model.loc[model["night"] == 0, "devices"].max())
        shifted_walls = set()
        for wall in [str(w) for w in FLEET_WALLS if (model["wall"] == str(w)).any()]:
            level = _wall_level(model[model["wall"] == wall])
            if level is None:
                continue
            found = _shift(level, options, nights, name, int(memory), wall, None, devices,
                           moved.get((name, int(memory), wall), np.array([])))
            if found is not None:
                out.append(found)
                shifted_walls.add(wall)
        for key, rows in model.groupby("case_key", sort=False):
            wall = rows["wall"].iloc[0]
            if wall in shifted_walls or not (rows["night"] == 0).any():
                continue
            level = _case_level(rows)
            found = _shift(level, options, nights, name, int(memory), str(wall) if wall else "none", str(key),
                           devices, np.array([]))
            if found is not None:
                out.append(found)
    return out


def _case_level(rows: pd.DataFrame) -> _Level:
    shift = rows.set_index("night")["s"].sort_index()
    tonight = rows[rows["night"] == 0].iloc[0]
    sigma = float(tonight["sigma_f"])
    se = math.sqrt(math.pi / 2 * sigma ** 2 / float(tonight["nights"])
                   + (MEDIAN_SE_FACTOR * float(tonight["sigma_case"])) ** 2 / float(tonight["devices"]))
    return _Level(shift, se, sigma)


def _wall_level(rows: pd.DataFrame) -> _Level | None:
    """The wall's shift night by night: its cases' shifts weighted by 1 / their spread^2."""
    w = 1.0 / rows["sigma_f"] ** 2
    grouped = rows.assign(w=w, ws=w * rows["s"]).groupby("night")
    shift = (grouped["ws"].sum() / grouped["w"].sum()).sort_index()
    if 0 not in shift.index or len(shift) - 1 < MIN_HISTORY_NIGHTS:
        return None
    sigma = float(group_spread(pd.DataFrame({"k": 0, "s": shift[shift.index >= 1]}), ["k"], "s").iloc[0])
    tonight = rows[rows["night"] == 0]
    wt = 1.0 / tonight["sigma_f"] ** 2
    median_var = float(((wt * MEDIAN_SE_FACTOR * tonight["sigma_case"]) ** 2 / tonight["devices"]).sum()
                       / wt.sum() ** 2)
    se = math.sqrt(math.pi / 2 * sigma ** 2 / (len(shift) - 1) + median_var)
    return _Level(shift, se, sigma)


def _shift(level: _Level, options: FleetOptions, nights: list[Night], name: str, memory: int, wall: str,
           case_key: str | None, devices: int, own_moves: np.ndarray) -> FleetShift | None:
    tonight = float(level.shift.get(0, 0.0))
    line = warn_line_pct(100.0 * level.sigma, options.warn_pct)
    if abs(pct(tonight)) < line:
        return None
    low, high = interval(tonight, level.se)
    same_way = int(np.sum((np.sign(own_moves) == np.sign(tonight)) & (np.abs(own_moves) >= abs(tonight) / 2)))
    return FleetShift(name, memory, wall, case_key, pct(tonight), pct(low), pct(high), line, same_way, devices,
                      _since(level, line, nights))


def _own_moves(cases: pd.DataFrame, options: FleetOptions) -> dict[tuple[str, int, str], np.ndarray]:
    """Per (model, wall): each device's own change tonight (log, negative: slower) against the median
    of its own history nights, its cases weighted by 1 / spread^2 (the devices that moved with a shift)."""
    keys = [*MODEL, "device_key", "case_key"]
    hist = cases[_history(cases, options)]
    base = hist.groupby(keys, sort=False)["y"].median().rename("base_y")
    tonight = cases[(cases["night"] == 0) & cases["wall"].notna()].join(base, on=keys)
    tonight = tonight[tonight["base_y"].notna()]
    w = 1.0 / tonight["sigma_case"] ** 2
    parts = tonight.assign(w=w, wr=w * (tonight["base_y"] - tonight["y"]))
    per_device = parts.groupby([*MODEL, "device_key", "wall"], sort=False)[["w", "wr"]].sum()
    change = (per_device["wr"] / per_device["w"]).reset_index(name="r")
    return {(str(n), int(m), str(w)): g["r"].to_numpy()
            for (n, m, w), g in change.groupby([*MODEL, "wall"], sort=False)}
