"""The launch floors a launch-bound prediction rests on, with their spread across runs.

The launch floor is host time per launch (the `launch` probe, version 2 on: reports.roofs.ceilings), and
host time moves between runs of one device (on one H100, 9.1 us in one run and 7.1 us in the
next). A launch-bound case's predicted speedup is the ratio of the two sides' floors; here it is
given as a range: from the floors of the paired runs (the central value) and from every run of
that device in the database that measured the floor (the spread).

A floor belongs to a backend (a cupy case pays cupy's launch, an eager case torch's) and a timing
mode (launch, or a graph replay's launch). A case uses its backend's floor where both sides
measured one, else the eager floor; within a run, the median of that run's trustworthy launch
results of that backend and mode (several GPUs of a node).
"""
from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass

import pandas as pd

from rooflab.reports.data.frames import trustworthy
from rooflab.reports.roofs.ceilings import LAUNCH_FLOOR_MIN_VERSION

FLOOR_COLUMNS = ("run_id", "run_order", "device_name", "case_key", "op", "op_version", "backend", "timing_mode",
                 "status", "median_ms", "throttled", "quality", "rel_ci_halfwidth", "stop_reason")
DEFAULT_BACKEND = "eager"
LAUNCH_OP = "launch"  # the launch probe's op name


@dataclass(frozen=True)
class Floor:
    """One side's launch floor for a backend and timing mode: central (the paired runs) and range (all runs)."""

    central_ms: float
    low_ms: float
    high_ms: float
    runs: int  # runs the range rests on


@dataclass(frozen=True)
class PredictedRange:
    value: float
    low: float
    high: float

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high


def per_run_floors(launch_rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (device, run, backend, timing mode): the median of the run's trustworthy launch
    results (version 2 on) there, and the run's order."""
    cols = ["device_name", "run_id", "run_order", "backend", "timing_mode", "floor_ms"]
    if launch_rows is None or launch_rows.empty:
        return pd.DataFrame(columns=cols)
    rows = launch_rows[launch_rows["op"] == LAUNCH_OP]
    if "op_version" in rows.columns:
        rows = rows[pd.to_numeric(rows["op_version"], errors="coerce").fillna(1) >= LAUNCH_FLOOR_MIN_VERSION]
    rows = trustworthy(rows)
    if rows.empty:
        return pd.DataFrame(columns=cols)
    rows = rows.assign(floor_ms=pd.to_numeric(rows["median_ms"], errors="coerce"))
    return (rows.groupby(["device_name", "run_id", "run_order", "backend", "timing_mode"], sort=True)["floor_ms"]
            .median().reset_index()[cols])


def side_floor(floors: pd.DataFrame, device_name: str, paired_runs: Collection[str], backend: str,
               timing_mode: str) -> Floor | None:
    """The floor of one backend and mode on one device: central from its paired runs (the median
    over them, else the newest run that measured it), range over every run that measured it."""
    if floors.empty:
        return None
    sel = floors[(floors["device_name"] == device_name) & (floors["backend"] == backend)
                 & (floors["timing_mode"] == timing_mode)]
    if sel.empty:
        return None
    paired = sel[sel["run_id"].isin(list(paired_runs))]
    central = (float(paired["floor_ms"].median()) if not paired.empty
               else float(sel.sort_values("run_order")["floor_ms"].iloc[-1]))
    return Floor(central, float(sel["floor_ms"].min()), float(sel["floor_ms"].max()), int(sel["run_id"].nunique()))


def predicted_launch_range(floors: pd.DataFrame, base: tuple[str, Collection[str]], cand: tuple[str, Collection[str]],
                           backend: str, timing_mode: str) -> tuple[PredictedRange | None, str]:
    """(baseline floor / candidate floor with its range, the backend whose floors it rests on);
    (None, "") when a side has no floor for the case's backend nor for eager."""
    for which in dict.fromkeys((backend, DEFAULT_BACKEND)):
        b = side_floor(floors, base[0], base[1], which, timing_mode)
        c = side_floor(floors, cand[0], cand[1], which, timing_mode)
        if b is not None and c is not None and c.central_ms > 0 and c.low_ms > 0:
            value = b.central_ms / c.central_ms
            return PredictedRange(value, b.low_ms / c.high_ms, b.high_ms / c.low_ms), which
    return None, ""


def describe_floors(floors: pd.DataFrame, device_name: str, backend: str, timing_mode: str) -> str:
    """'7.109-9.137 us over 2 runs' for one device's floor, or '' without one."""
    if floors.empty:
        return ""
    sel = floors[(floors["device_name"] == device_name) & (floors["backend"] == backend)
                 & (floors["timing_mode"] == timing_mode)]
    if sel.empty:
        return ""
    lo, hi = 1e3 * float(sel["floor_ms"].min()), 1e3 * float(sel["floor_ms"].max())
    n = sel["run_id"].nunique()
    span = f"{lo:.3g} us" if math.isclose(lo, hi) else f"{lo:.3g}-{hi:.3g} us"
    return f"{span} over {n} run{'s' if n != 1 else ''}"
