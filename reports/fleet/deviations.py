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
    """The results of the suite (FLEET_COLUMNS) grouped into nights; see the module doc, step 1."""
    runs = results[["run_id", "started_at"]].drop_duplicates("run_id").reset_index(drop=True)
    nights = group_nights(list(runs["started_at"]), at=options.at, hours=options.night_hours)
    nights = nights[:options.nights_needed]
    night_of = {runs.at[i, "run_id"]: n.index for n in nights for i in n.runs}
    night_runs = [tuple(sorted(str(runs.at[i, "run_id"]) for i in n.runs)) for n in nights]
    frame = results[results["run_id"].isin(night_of)].copy()
    frame["night"] = frame["run_id"].map(night_of).astype(int)
    frame["memory_bytes"] = frame["memory_bytes"].astype("int64")
    frame["fault"] = frame["status"].isin([str(s) for s in FAULTS])
    devices = (frame.sort_values("started_at")
               .groupby(["night", "device_key"], sort=False)
               .agg(host=("host", "last"), device_uuid=("device_uuid", "last"), device_name=("device_name", "last"),
                    memory_bytes=("memory_bytes", "last"), faults=("fault", "sum"))
               .reset_index())
    ok = frame[figure_mask(frame["status"] == ResultStatus.OK, frame["median_ms"].fillna(0.0))]
    ok = ok.sort_values("started_at").drop_duplicates(["night", "device_key", "case_key"], keep="last")
    walls = {key: wall_of(op, family, cache) for key, op, family, cache
             in ok[["case_key", "op", "family", "cache"]].drop_duplicates("case_key").itertuples(index=False)}
    ci = ok["rel_ci_halfwidth"].astype(float).fillna(0.0).clip(lower=0.0)
    rows = pd.DataFrame({
        "night": ok["night"].to_numpy(), "device_name": ok["device_name"].to_numpy(),
        "memory_bytes": ok["memory_bytes"].to_numpy(), "device_key": ok["device_key"].to_numpy(),
        "case_key": ok["case_key"].to_numpy(),
        "wall": [str(w) if (w := walls[k]) is not None else None for k in ok["case_key"]],
        "y": np.log(ok["median_ms"].astype(float).to_numpy()), "u": np.log1p(ci.to_numpy()) / Z95,
        "median_ms": ok["median_ms"].astype(float).to_numpy(),
        "throttled": ok["throttled"].fillna(False).astype(bool).to_numpy(), "quality": ok["quality"].to_numpy(),
    })
    return Prepared(rows, devices, nights, night_runs)


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
