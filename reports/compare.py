"""Generation comparison: measured speedup of each case on a candidate against a baseline, beside
the speedup the roofs predict.

A side is a run id or a device (name, or fingerprint prefix). Per case (case_key ok on both sides,
newest result per side), speedup = baseline median / candidate median (> 1: the candidate is
faster). The predicted speedup follows the case's wall on the baseline: the bandwidth-roof ratio
(L2 for hot cases) when bandwidth-bound, the compute-roof ratio of its dtype when compute-bound (the
ratio of its elementary-function times when those are its wall), the launch-floor ratio when
overhead-bound; roofs are measured ceilings, else datasheet figures. A collective (family collective)
is predicted from the two systems' interconnect roofs of that collective, each at its own world
size, or from their latency floors when overhead-bound (reports/interconnect.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from rooflab.reports.ceilings import (
    COLLECTIVE_FAMILY,
    DeviceCeilings,
    bandwidth_roof,
    compute_ceilings,
    compute_roof,
    l2_resident,
    launch_floor_ms,
    uses_matrix_units,
)
from rooflab.reports.diagnosis import diagnose
from rooflab.reports.elementary import elementary_time
from rooflab.reports.errors import ReportInputError
from rooflab.reports.frames import params_of, select_device
from rooflab.reports.interconnect import predicted_speedup as collective_speedup
from rooflab.reports.opinfo import elementary_counts, reads_only
from rooflab.vocab import CeilingKind, Wall


@dataclass(frozen=True)
class Side:
    label: str
    device_name: str
    rows: pd.DataFrame  # the side's results
    ceilings: DeviceCeilings


def resolve_side(df: pd.DataFrame, text: str, *, option: str) -> Side:
    """A run id (exact) or a device; ReportInputError naming the runs and devices otherwise."""
    if not df.empty and text in set(df["run_id"].astype(str)):
        rows = df[df["run_id"].astype(str) == text]
        names = sorted(rows["device_name"].dropna().unique())
        if len(names) != 1:
            raise ReportInputError(f"{option}: run {text!r} measured several devices ({', '.join(names)}); "
                                   "name one device")
        name = str(names[0])
        device_rows = df[df["device_name"] == name]
        return Side(f"run {text}", name, rows, compute_ceilings(device_rows, name))
    try:
        name, rows = select_device(df, text)
    except ReportInputError as exc:
        runs = sorted(df["run_id"].astype(str).unique()) if not df.empty else []
        raise ReportInputError(f"{option}: {exc}; or a run id: {', '.join(runs[-10:]) or 'none'}") from None
    return Side(name, name, rows, compute_ceilings(rows, name))


def _ratio(a, b) -> float:
    return a.value / b.value if (a is not None and b is not None and b.value) else math.nan


def predicted_speedup(case: pd.Series, base: DeviceCeilings, cand: DeviceCeilings) -> float:
    """Candidate roof / baseline roof for the wall the case hits on the baseline."""
    if case["family"] == COLLECTIVE_FAMILY:
        return collective_speedup(case, base, cand)
    wall = case["wall"]
    if wall == Wall.BANDWIDTH:
        nbytes, cache, ro = float(case["bytes"]), str(case["cache"]), reads_only(case["op"])
        return _ratio(bandwidth_roof(cand, hot=l2_resident(cand, cache, nbytes), read_only=ro),
                      bandwidth_roof(base, hot=l2_resident(base, cache, nbytes), read_only=ro))
    if wall == Wall.COMPUTE and str(case.get("wall_roof") or "").startswith(CeilingKind.ELEMENTARY):
        counts = elementary_counts(str(case["op"]), params_of(case.get("params")), str(case["dtype"]))
        base_ms = elementary_time(base, counts, str(case["dtype"])).ms
        cand_ms = elementary_time(cand, counts, str(case["dtype"])).ms
        return base_ms / cand_ms if cand_ms > 0 else math.nan
    if wall == Wall.COMPUTE:
        matrix = uses_matrix_units(str(case["family"]), str(case["dtype"]))
        return _ratio(compute_roof(cand, str(case["dtype"]), matrix=matrix),
                      compute_roof(base, str(case["dtype"]), matrix=matrix))
    if wall == Wall.OVERHEAD:
        a, b = launch_floor_ms(base, str(case["timing_mode"])), launch_floor_ms(cand, str(case["timing_mode"]))
        return a / b if a and b else math.nan
    return math.nan


COMPARE_COLUMNS = ["case_key", "op", "family", "backend", "dtype", "cache", "timing_mode", "intensity", "wall",
                   "baseline_ms", "candidate_ms", "speedup", "predicted_speedup", "deviation"]


def compare(base: Side, cand: Side) -> pd.DataFrame:
    """One row per case ok on both sides."""
    db, dc = diagnose(base.rows, base.ceilings), diagnose(cand.rows, cand.ceilings)
    if db.empty or dc.empty:
        return pd.DataFrame(columns=COMPARE_COLUMNS)
    merged = db.merge(dc[["case_key", "median_ms", "ranks"]], on="case_key", suffixes=("", "_cand"))
    out = pd.DataFrame({
        "case_key": merged["case_key"], "op": merged["op"], "family": merged["family"],
        "backend": merged["backend"], "dtype": merged["dtype"], "cache": merged["cache"],
        "timing_mode": merged["timing_mode"], "intensity": merged["intensity"], "wall": merged["wall"],
        "baseline_ms": merged["median_ms"], "candidate_ms": merged["median_ms_cand"],
    })
    out["speedup"] = out["baseline_ms"] / out["candidate_ms"]
    out["predicted_speedup"] = [predicted_speedup(r, base.ceilings, cand.ceilings) for _, r in merged.iterrows()]
    out["deviation"] = out["speedup"] / out["predicted_speedup"]
    return out.reset_index(drop=True)


def geomean(values: pd.Series) -> float:
    v = pd.to_numeric(values, errors="coerce").dropna()
    v = v[v > 0]
    return float(np.exp(np.log(v).mean())) if len(v) else math.nan


def summary(cmp: pd.DataFrame, by: tuple[str, ...] = ("family", "dtype")) -> pd.DataFrame:
    """Geometric mean of measured and predicted speedups per group, plus the overall row."""
    cols = list(by) + ["cases", "speedup_geomean", "predicted_geomean"]
    if cmp.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for key, g in cmp.groupby(list(by), sort=True):
        key = key if isinstance(key, tuple) else (key,)
        rows.append([*key, len(g), geomean(g["speedup"]), geomean(g["predicted_speedup"])])
    rows.append(["all"] + [""] * (len(by) - 1) + [len(cmp), geomean(cmp["speedup"]), geomean(cmp["predicted_speedup"])])
    return pd.DataFrame(rows, columns=cols)


def most_deviating(cmp: pd.DataFrame, limit: int = 15) -> pd.DataFrame:
    """Cases whose measured speedup differs most (in log ratio) from the predicted one."""
    rows = cmp[cmp["deviation"].notna() & (cmp["deviation"] > 0)].copy()
    rows["log_deviation"] = np.log(rows["deviation"]).abs()
    return rows.sort_values("log_deviation", ascending=False).head(limit).drop(columns="log_deviation")
