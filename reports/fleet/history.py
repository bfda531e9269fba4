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
    line = np.where(out["sigma_own"].notna(), warn_line_pct(100.0 * out["sigma_own"].to_numpy(), options.warn_pct),
                    np.inf)
    now, before = pct_array(out["change"]), pct_array(change1)
    verdict = np.full(len(out), Verdict.OK.value, dtype=object)
    verdict[(now >= line) & (before >= line)] = Verdict.IMPROVEMENT.value
    verdict[now <= -line] = Verdict.SUSPECT.value
    verdict[(now <= -line) & (before <= -line)] = Verdict.REGRESSION.value
    verdict[out["nights"].to_numpy() < MIN_HISTORY_NIGHTS] = Verdict.INSUFFICIENT_DATA.value
    out["verdict"] = verdict
    out["z_own"] = out["change"] / out["sigma_own"]
    return out.set_index(DEVICE_WALL)[["verdict", "change", "z_own", "nights"]]


def fleet_shifts(cases: pd.DataFrame, options: FleetOptions, nights: list[Night]) -> list[FleetShift]:
    """The walls (and lone cases) whose fleet median moved tonight beyond their line, per model: each
    case's shift night by night is the history's median of its fleet median minus that night's (log;
    negative: slower), a wall's the weighted mean of its cases' (weights 1 / their spread^2)."""
    fleet = cases.drop_duplicates([*MODEL, "case_key", "night"])[
        [*MODEL, "case_key", "wall", "night", "fleet_y", "devices", "sigma_case"]]
    fleet = fleet[fleet["night"] <= options.history_nights]
    hist = fleet[fleet["night"] >= 1]
    base = hist.groupby([*MODEL, "case_key"], sort=False)["fleet_y"].agg(["median", "size"]).rename(
        columns={"median": "base", "size": "nights"})
    fleet = fleet.join(base, on=[*MODEL, "case_key"])
    fleet = fleet[fleet["nights"] >= MIN_HISTORY_NIGHTS].copy()
    if not (fleet["night"] == 0).any():
        return []
    fleet["s"] = fleet["base"] - fleet["fleet_y"]
    sigma = group_spread(fleet[fleet["night"] >= 1], [*MODEL, "case_key"], "s").rename("sigma_f")
    fleet = fleet.join(sigma, on=[*MODEL, "case_key"])
    fleet["w"] = 1.0 / fleet["sigma_f"] ** 2
    fleet["median_var"] = (MEDIAN_SE_FACTOR * fleet["sigma_case"]) ** 2 / fleet["devices"]
    walls = _levels(_wall_series(fleet), [*MODEL, "wall"], options)
    cases_ = _levels(fleet.assign(level=fleet["s"]), [*MODEL, "wall", "case_key"], options)
    shifted = walls[walls["shifted"]]
    lone = cases_[cases_["shifted"]].merge(shifted[[*MODEL, "wall"]], on=[*MODEL, "wall"], how="left",
                                            indicator=True)
    lone = lone[lone["_merge"] == "left_only"]
    moved = _own_moves(cases, options)
    out = [_record(r, None, nights, walls_series, moved) for r, walls_series in _with_series(shifted, fleet, True)]
    out += [_record(r, r["case_key"], nights, series, {}) for r, series in _with_series(lone, fleet, False)]
    order = {str(w): i for i, w in enumerate(FLEET_WALLS)}
    return sorted(out, key=lambda s: (s.device_name, s.memory_bytes, order.get(s.wall, len(order)), s.case_key or ""))


def _wall_series(fleet: pd.DataFrame) -> pd.DataFrame:
    """Per (model, wall, night): the wall's shift (`level`), its weight sum and tonight's median variance."""
    parts = fleet[fleet["wall"].notna()].assign(ws=lambda f: f["w"] * f["s"],
                                               wv=lambda f: f["w"] ** 2 * f["median_var"])
    grouped = parts.groupby([*MODEL, "wall", "night"], sort=False)
    agg = grouped[["w", "ws", "wv"]].sum().join(grouped["devices"].max()).reset_index()
    agg["level"] = agg["ws"] / agg["w"]
    agg["median_var"] = agg["wv"] / agg["w"] ** 2
    return agg


def _levels(series: pd.DataFrame, keys: list[str], options: FleetOptions) -> pd.DataFrame:
    """Tonight's row of each group of `keys` with its spread over the history nights, the standard
    error of tonight's level, the line and whether it shifted."""
    hist = series[series["night"] >= 1]
    sigma = group_spread(hist, keys, "level").rename("sigma")
    count = hist.groupby(keys, sort=False)["night"].size().rename("history")
    tonight = series[series["night"] == 0].join(sigma, on=keys).join(count, on=keys)
    tonight = tonight[tonight["history"] >= MIN_HISTORY_NIGHTS].copy()
    tonight["se"] = np.sqrt(math.pi / 2 * tonight["sigma"] ** 2 / tonight["history"] + tonight["median_var"])
    tonight["line"] = warn_line_pct(100.0 * tonight["sigma"].to_numpy(), options.warn_pct)
    tonight["shifted"] = np.abs(pct_array(tonight["level"])) >= tonight["line"]
    return tonight


def _with_series(rows: pd.DataFrame, fleet: pd.DataFrame, wall: bool) -> list[tuple[dict, pd.Series]]:
    """Each shifted row with its level night by night (the wall's, or the case's), read in one pass."""
    keys = [*MODEL, "wall"] if wall else [*MODEL, "case_key"]
    if rows.empty:
        return []
    part = fleet.merge(rows[keys].drop_duplicates(), on=keys)
    levels = _wall_series(part) if wall else part.rename(columns={"s": "level"})
    series = {k: g.set_index("night")["level"].sort_index() for k, g in levels.groupby(keys, sort=False)}
    return [(r, series[tuple(r[k] for k in keys)]) for r in rows.to_dict("records")]


def _record(r: dict, case_key: str | None, nights: list[Night], series: pd.Series,
            moved: dict[tuple[str, int, str], np.ndarray]) -> FleetShift:
    level, line = float(r["level"]), float(r["line"])
    low, high = interval(level, float(r["se"]))
    own = moved.get((str(r["device_name"]), int(r["memory_bytes"]), str(r["wall"])), np.array([]))
    same_way = int(np.sum((np.sign(own) == np.sign(level)) & (np.abs(own) >= abs(level) / 2)))
    return FleetShift(str(r["device_name"]), int(r["memory_bytes"]), str(r["wall"]) if r["wall"] else "none",
                      case_key, pct(level), pct(low), pct(high), line, same_way, int(r["devices"]),
                      _since(series, line, nights))


def _since(series: pd.Series, line_pct: float, nights: list[Night]) -> datetime | None:
    """The first night of the run of nights, back from tonight, whose shift is beyond the line the
    same way as tonight's."""
    sign = np.sign(series.get(0, 0.0))
    first = None
    for k in series.index:
        if sign * pct(float(series[k])) >= line_pct and k < len(nights):
            first = nights[int(k)].first_started_at
        else:
            break
    return first


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
