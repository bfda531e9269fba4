"""How far one device's result of a case moves from one run to the next: the part of a speedup's
uncertainty that the samples of one run cannot show.

A run's samples tell how well that run knew its median. Two runs of one device differ by more:
clocks, where the buffers landed, the host's load (a launch floor of 9.1 us in one H100 run and
7.1 us in the next). A comparison that used the samples alone would call most cases of two runs of
one device faster or slower. So each case's interval also carries the run-to-run spread of its
results on each side, estimated from the device's recent runs:

- Per case and device, its trustworthy ok results (quality good), one per run (the newest in the
  run), in run order, among the device's RECENT_RUNS newest runs; d = the difference of the log
  medians of consecutive runs.
- Pooled over the cases of one family and backend on that device: sigma = 1.4826 x median(|d|) /
  sqrt(2), the median absolute first difference. A step in a series (a real change) is one large d
  among many and moves it little, and it needs no model of each series. It is not centred: a
  change common to every case of a run (the whole run a few per cent slower) is part of what moves
  from one run to the next, so it counts as spread. With two runs only, that also means a change
  common to every case between exactly those two cannot be told from run-to-run variation.
- A case with CASE_DIFFERENCES differences of its own (that many runs and one) has its own
  estimate: a median of fewer would be too unsure of itself (of 11 differences it is off by a
  third often enough to call one case in five of two ordinary runs significant). Otherwise its
  family and backend's, when they pool at least MIN_DIFFERENCES; otherwise that of every case of
  the device; with fewer still, the device's spread is unknown.

`spread_of` gives one side's estimate for a case; reports.comparisons.speedup_table widens the case's interval by
both sides' (added in quadrature, reports.comparisons.intervals.widened) and says which it used. Pure: a
frame in, numbers out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from rooflab.reports.data.frames import trustworthy

RECENT_RUNS = 30  # the newest runs of a device the estimate reads
MIN_DIFFERENCES = 5  # consecutive-run differences a pooled estimate needs
CASE_DIFFERENCES = 20  # differences a case needs for an estimate of its own
MAD_TO_SD = 1.4826  # the median |x| of a centred normal's draws times this is its standard deviation
SPREAD_COLUMNS = ("device_name", "case_key", "family", "backend", "run_order", "median_ms")
# what is read to choose the trustworthy ones (reports.data.frames.trustworthy)
READ_COLUMNS = (*SPREAD_COLUMNS, "status", "throttled", "quality", "rel_ci_halfwidth", "stop_reason")


@dataclass(frozen=True)
class Spread:
    """A device's run-to-run spread: the standard deviation of a result's log median from one run
    to the next, over how many differences it was estimated, and over which cases ("case": its own
    runs, "family/backend", or "device": every case of the device)."""

    log_sd: float
    differences: int
    pooled_over: str


@dataclass(frozen=True)
class Spreads:
    """The estimates of every device of a frame: by (device, case), by (device, family, backend)
    and by device."""

    by_case: dict[tuple[str, str], Spread]
    by_group: dict[tuple[str, str, str], Spread]
    by_device: dict[str, Spread]

    def spread_of(self, device: str, case_key: str, family: str, backend: str) -> Spread | None:
        """The narrowest estimate there is for the case on `device` (None: unknown)."""
        return (self.by_case.get((device, case_key)) or self.by_group.get((device, family, backend))
                or self.by_device.get(device))


def _estimate(differences: np.ndarray, pooled_over: str, needed: int = MIN_DIFFERENCES) -> Spread | None:
    if len(differences) < needed:
        return None
    return Spread(MAD_TO_SD * float(np.median(np.abs(differences))) / math.sqrt(2.0), len(differences), pooled_over)


def _differences(frame: pd.DataFrame) -> pd.DataFrame:
    """Per case and device, the log-median differences of consecutive runs (columns device_name,
    case_key, family, backend, d)."""
    f = frame[pd.to_numeric(frame["median_ms"], errors="coerce") > 0]
    f = f.assign(log_median=np.log(f["median_ms"].astype(float)))
    f = f.sort_values(["device_name", "case_key", "run_order"]).drop_duplicates(
        ["device_name", "case_key", "run_order"], keep="last")
    d = f.groupby(["device_name", "case_key"], sort=False)["log_median"].diff()
    return f.assign(d=d)[d.notna()][["device_name", "case_key", "family", "backend", "d"]]


def estimate_spreads(frame: pd.DataFrame) -> Spreads:
    """The run-to-run spreads of the devices of `frame` (SPREAD_COLUMNS: trusted_rows of the
    devices' recent runs; of two results of a case in one run, the later one counts)."""
    if frame is None or frame.empty:
        return Spreads({}, {}, {})
    diffs = _differences(frame)
    by_case = {}
    for (device, case_key), g in diffs.groupby(["device_name", "case_key"], sort=True):
        found = _estimate(g["d"].to_numpy(float), "case", CASE_DIFFERENCES)
        if found is not None:
            by_case[(str(device), str(case_key))] = found
    by_group = {}
    for (device, family, backend), g in diffs.groupby(["device_name", "family", "backend"], sort=True):
        found = _estimate(g["d"].to_numpy(float), "family/backend")
        if found is not None:
            by_group[(str(device), str(family), str(backend))] = found
    by_device = {}
    for device, g in diffs.groupby("device_name", sort=True):
        found = _estimate(g["d"].to_numpy(float), "device")
        if found is not None:
            by_device[str(device)] = found
    return Spreads(by_case, by_group, by_device)


def trusted_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The trustworthy ok results of `frame` (reports.data.frames.trustworthy), SPREAD_COLUMNS only."""
    if frame is None or frame.empty or not {*SPREAD_COLUMNS, "status"} <= set(frame.columns):
        return pd.DataFrame(columns=list(SPREAD_COLUMNS))
    return trustworthy(frame)[list(SPREAD_COLUMNS)]


def recent_runs(counts: pd.DataFrame, devices: list[str], n_runs: int = RECENT_RUNS) -> list[str]:
    """The `n_runs` newest runs of each of `devices` (db.query.result_counts' frame)."""
    if counts is None or counts.empty:
        return []
    rows = counts[counts["device_name"].isin(devices)][["device_name", "run_id", "run_order"]].drop_duplicates()
    newest = rows.sort_values("run_order").groupby("device_name", sort=True).tail(n_runs)
    return sorted(set(newest["run_id"].astype(str)))
