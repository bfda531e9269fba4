"""Each device against its fleet, case by case and wall by wall, night by night (pure, on frames).

The steps, in the order `rooflab fleet` takes them (docs/fleet.md, "How the statistics work"):

1. `prepare`: the night's results and the history's, one row per night, device and case with a figure
   (the night's newest result of it: a rerun replaces), `y` = log of its median time, `u` = its own
   95 % CI as a log standard error;
2. `case_deviations`: per model (device name and memory), case and night, the fleet's median of `y`
   over the devices that measured it (kept where at least `min_devices` did) and each device's
   deviation `dev` = fleet - device (negative: slower); the case's robust spread pooled over the
   fleet and the newest `spread_nights` nights;
3. `wall_deviations`: per device, wall and night, the deviations of the wall's cases averaged with
   weights 1 / spread^2 (a noisy case counts less), re-centred on the fleet's median device; the
   wall's robust spread, how far a device's wall moves from night to night, and each figure's
   standard error (that night-to-night movement, the result's own CI, the fleet median's error).

Every step is a groupby over the rows it is given, so that the medians of step 2 can move into SQL
where a database is large.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from rooflab.db.nights import Night, group_nights
from rooflab.db.usable import figure_mask
from rooflab.reports.fleet.options import FleetOptions
from rooflab.reports.fleet.robust import MAD_TO_SIGMA, MEDIAN_SE_FACTOR, MIN_SPREAD_PCT, Z95, log_of_pct
from rooflab.reports.fleet.walls import wall_of
from rooflab.vocab import FAULTS, ResultStatus

# the columns of the results the fleet reads (reports/data/fleet_reads.py reads no others)
FLEET_COLUMNS: tuple[str, ...] = (
    "run_id", "started_at", "host", "device_key", "device_uuid", "device_name", "memory_bytes", "case_key", "op",
    "family", "cache", "status", "median_ms", "rel_ci_halfwidth", "throttled", "quality",
)
MODEL = ["device_name", "memory_bytes"]
DEVICE_WALL = [*MODEL, "device_key", "wall"]  # one wall of one device
MIN_HISTORY_NIGHTS = 3  # nights a device (or the fleet) needs before tonight for a baseline of its own


@dataclass(frozen=True)
class Prepared:
    """The rows the judgement works on, and what it says beside them."""

    rows: pd.DataFrame  # night, model, device_key, case_key, wall, y, u, median_ms, throttled, quality
    devices: pd.DataFrame  # one row per (night, device_key): host, device_uuid, model, faults
    nights: list[Night]
    night_runs: list[tuple[str, ...]]  # the run ids of each night, newest night first


def prepare(results: pd.DataFrame, options: FleetOptions) -> Prepared:
    """The results of the suite (FLEET_COLUMNS) grouped into nights; see the module doc, step 1.

    The text columns are taken as categories (integer codes), so that a night of 128,000 results is
    sorted, de-duplicated and grouped on integers."""
    runs = results[["run_id", "started_at"]].drop_duplicates("run_id").reset_index(drop=True)
    nights = group_nights(list(runs["started_at"]), at=options.at, hours=options.night_hours)
    nights = nights[:options.nights_needed]
    night_of = {runs.at[i, "run_id"]: n.index for n in nights for i in n.runs}
    night_runs = [tuple(sorted(str(runs.at[i, "run_id"]) for i in n.runs)) for n in nights]
    run = pd.Categorical(results["run_id"])
    night = np.array([night_of.get(r, -1) for r in run.categories], dtype=np.int64)[run.codes]
    order = np.argsort(pd.DatetimeIndex(results["started_at"]).asi8, kind="stable")
    order = order[night[order] >= 0]  # the rows of the nights read, oldest run first
    device, case = pd.Categorical(results["device_key"]), pd.Categorical(results["case_key"])
    ok = figure_mask((results["status"] == ResultStatus.OK).to_numpy(), results["median_ms"].fillna(0.0).to_numpy())
    # the night's newest result of each device and case (a rerun replaces): a key of three integers
    key = (night * len(device.categories) + device.codes) * len(case.categories) + case.codes
    usable = order[ok[order]]
    picked = usable[~pd.Series(key[usable]).duplicated(keep="last").to_numpy()]
    ci = results["rel_ci_halfwidth"].astype(float).fillna(0.0).clip(lower=0.0).to_numpy()[picked]
    median = results["median_ms"].astype(float).to_numpy()[picked]
    rows = pd.DataFrame({
        "night": night[picked], "device_name": _take(results["device_name"], picked),
        "memory_bytes": results["memory_bytes"].to_numpy(dtype=np.int64)[picked],
        "device_key": pd.Categorical.from_codes(device.codes[picked], device.categories),
        "case_key": pd.Categorical.from_codes(case.codes[picked], case.categories),
        "wall": _walls(results, case, picked), "y": np.log(median), "u": np.log1p(ci) / Z95, "median_ms": median,
        "throttled": results["throttled"].fillna(False).astype(bool).to_numpy()[picked],
        "quality": _take(results["quality"], picked),
    })
    return Prepared(rows, _devices(results, night, device, order), nights, night_runs)


def _take(column: pd.Series, positions: np.ndarray) -> pd.Categorical:
    """A text column's values at `positions`, as categories."""
    values = pd.Categorical(column)
    return pd.Categorical.from_codes(values.codes[positions], values.categories)


def _walls(results: pd.DataFrame, case: pd.Categorical, positions: np.ndarray) -> pd.Categorical:
    """The wall of each result at `positions` (walls.wall_of of its case), as categories."""
    firsts = results.drop_duplicates("case_key")
    wall_by_case = {k: wall_of(op, family, cache) for k, op, family, cache in
                    zip(firsts["case_key"], firsts["op"], firsts["family"], firsts["cache"], strict=True)}
    names = sorted({str(w) for w in wall_by_case.values() if w is not None})
    code_of_case = np.array([names.index(str(w)) if (w := wall_by_case[k]) is not None else -1
                             for k in case.categories], dtype=np.int64)
    return pd.Categorical.from_codes(code_of_case[case.codes[positions]], names)


def _devices(results: pd.DataFrame, night: np.ndarray, device: pd.Categorical, order: np.ndarray) -> pd.DataFrame:
    """One row per (night, device): its host, UUID and model as its newest result says, and its faults."""
    fault = results["status"].isin([str(s) for s in FAULTS]).to_numpy()
    key = night[order] * len(device.categories) + device.codes[order]
    newest = order[~pd.Series(key).duplicated(keep="last").to_numpy()]
    faults = pd.Series(fault[order]).groupby(key).sum()
    picked = results.iloc[newest]
    return pd.DataFrame({
        "night": night[newest], "device_key": picked["device_key"].to_numpy(dtype=object),
        "host": picked["host"].to_numpy(dtype=object), "device_uuid": picked["device_uuid"].to_numpy(dtype=object),
        "device_name": picked["device_name"].to_numpy(dtype=object),
        "memory_bytes": picked["memory_bytes"].to_numpy(dtype=np.int64),
        "faults": faults.reindex(key[~pd.Series(key).duplicated(keep="last").to_numpy()]).to_numpy(dtype=np.int64),
    })


def group_spread(frame: pd.DataFrame, keys: list[str], column: str) -> pd.Series:
    """The robust spread (MAD x 1.4826, at least MIN_SPREAD_PCT) of `column` per group of `keys`."""
    floor = log_of_pct(MIN_SPREAD_PCT)
    if frame.empty:
        index = (pd.MultiIndex.from_arrays([[] for _ in keys], names=keys) if len(keys) > 1
                 else pd.Index([], name=keys[0]))
        return pd.Series([], index=index, dtype=float, name=column)
    grouped = frame.groupby(keys, sort=False)[column]
    centred = (frame[column] - grouped.transform("median")).abs()
    mad = centred.groupby([frame[k] for k in keys], sort=False).median()
    return (MAD_TO_SIGMA * mad).clip(lower=floor).rename(column)


def case_deviations(rows: pd.DataFrame, options: FleetOptions) -> pd.DataFrame:
    """Step 2 of the module doc: `rows` with fleet_y, devices, dev and sigma_case, where the case had
    at least `min_devices` devices that night."""
    keys = [*MODEL, "case_key", "night"]
    grouped = rows.groupby(keys, sort=False)["y"]
    out = rows.assign(fleet_y=grouped.transform("median"), devices=grouped.transform("size"))
    out = out[out["devices"] >= options.min_devices].copy()
    out["dev"] = out["fleet_y"] - out["y"]
    window = out[out["night"] < options.spread_nights]
    sigma = group_spread(window, [*MODEL, "case_key"], "dev").rename("sigma_case")
    return out.join(sigma, on=[*MODEL, "case_key"])


def wall_deviations(cases: pd.DataFrame, options: FleetOptions) -> pd.DataFrame:
    """Step 3 of the module doc: one row per (model, device, wall, night) with d (re-centred deviation),
    se (its standard error), cases, sigma_wall (the wall's spread) and sigma_night."""
    keys = [*MODEL, "device_key", "wall", "night"]
    c = cases[cases["wall"].notna()]
    w = 1.0 / c["sigma_case"] ** 2
    parts = pd.DataFrame({
        **{k: c[k] for k in keys}, "w": w, "wd": w * c["dev"], "w2u2": (w * c["u"]) ** 2,
        "w2f": (w * MEDIAN_SE_FACTOR * c["sigma_case"]) ** 2 / c["devices"],
    })
    agg = parts.groupby(keys, sort=False).agg(sw=("w", "sum"), swd=("wd", "sum"), sw2u2=("w2u2", "sum"),
                                              sw2f=("w2f", "sum"), cases=("w", "size")).reset_index()
    d_raw = agg["swd"] / agg["sw"]
    agg["d"] = d_raw - d_raw.groupby([agg[k] for k in [*MODEL, "wall", "night"]], sort=False).transform("median")
    window = agg[agg["night"] < options.spread_nights]
    sigma_wall = group_spread(window, [*MODEL, "wall"], "d").rename("sigma_wall")
    own = window["d"] - window.groupby([*MODEL, "device_key", "wall"], sort=False)["d"].transform("median")
    moved = window.assign(own=own)
    sigma_night = group_spread(moved, [*MODEL, "wall"], "own").rename("sigma_night")
    nights_seen = window.groupby([*MODEL, "wall"], sort=False)["night"].nunique().rename("nights_seen")
    agg = agg.join(sigma_wall, on=[*MODEL, "wall"]).join(sigma_night, on=[*MODEL, "wall"])
    agg = agg.join(nights_seen, on=[*MODEL, "wall"])
    # too few nights to see a device move: take the whole spread as night-to-night movement
    short = agg["nights_seen"].fillna(0) < MIN_HISTORY_NIGHTS
    agg.loc[short, "sigma_night"] = agg.loc[short, "sigma_wall"]
    agg["se"] = np.sqrt(agg["sigma_night"] ** 2 + (agg["sw2u2"] + agg["sw2f"]) / agg["sw"] ** 2)
    return agg[[*keys, "d", "se", "cases", "sigma_wall", "sigma_night"]]


def interval(d: float, se: float) -> tuple[float, float]:
    """The 95 % interval of a log deviation with standard error `se`."""
    half = Z95 * se
    return d - half, d + half


def finite(value: float) -> bool:
    return value is not None and math.isfinite(value)
