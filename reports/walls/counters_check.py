"""The model against the hardware counters, on a device page and in the diagnosis.

Reads nothing itself: it takes the frame db.counters.counters_frame gives (the comparison with the
model, db.counters.check_model, is already in it) and the page's results and diagnosis.

- `latest_readings`: per case of the device, the reading that checks the shown measurement (same
  run), else the newest one of the case on that device;
- `annotate`: the diagnosis with, per case, the counted DRAM bytes and their ratio to the model,
  which model the counters contradict where the wall's efficiency rests on it (`contradicted`:
  "bytes" on a bandwidth wall, "FLOPs" on a compute wall at the FMA or matrix roof), and the
  efficiency with the counted figure in place of the model's (`efficiency_counted`), and whether
  the counters could count its FLOPs at all (`counters_flops_countable`: not a GEMM's, an
  attention's or a layer's on the tensor cores, whose FLOPs are never "contradicted");
- `section`: the rows of the device page's table.
"""
from __future__ import annotations

import math
from typing import Any

import pandas as pd

from rooflab.reports.walls.roofline_rule import Roofs, roofline_bound
from rooflab.vocab import ResultStatus

COUNTED_COLUMNS = ["counted_dram_bytes", "counters_bytes_ratio", "counters_flops_ratio", "contradicted",
                   "efficiency_counted", "counters_reason", "counters_flops_countable"]


def latest_readings(counters: pd.DataFrame | None, rows: pd.DataFrame) -> pd.DataFrame:
    """One ok-or-not reading per case_key of the device whose results are `rows` (see the module doc)."""
    if counters is None or counters.empty or rows.empty:
        return pd.DataFrame(columns=list(counters.columns) if counters is not None else [])
    mine = counters[counters["device_fingerprint"].isin(set(rows["device_fingerprint"].dropna()))]
    if mine.empty:
        return mine
    shown = set(rows["run_id"].astype(str))
    mine = mine.assign(_checks_shown=mine["checked_run_id"].astype(str).isin(shown),
                       _order=range(len(mine)))
    mine = mine.sort_values(["_checks_shown", "_order"], kind="stable")
    return mine.drop_duplicates("case_key", keep="last").drop(columns=["_checks_shown", "_order"])


def _float(value: Any) -> float:
    try:
        return math.nan if value is None else float(value)
    except (TypeError, ValueError):
        return math.nan


def _contradicted(d: pd.Series, r: pd.Series) -> str:
    if d["wall"] == "bandwidth" and bool(r["bytes_differ"]):
        return "bytes"
    roof = str(d.get("wall_roof") or "")
    if d["wall"] == "compute" and not roof.startswith("elementary") and bool(r["flops_differ"]):
        return "FLOPs"
    return ""


def _counted_efficiency(d: pd.Series, r: pd.Series) -> float:
    """The case's efficiency by the roofline rule with the counted DRAM bytes (and FLOPs, where
    counted) in place of the model's, against the roofs its diagnosis used; NaN without counted bytes."""
    dram, flops = _float(r["dram_bytes"]), _float(r["measured_flops"])
    bandwidth, compute = _float(d["bandwidth_roof_gbps"]), _float(d["compute_roof_tflops"])
    if math.isnan(dram) or math.isnan(bandwidth) or bandwidth <= 0:
        return math.nan
    counted_flops = r.get("flops_ratio") is not None and not math.isnan(flops) and compute > 0
    roofs = Roofs(compute, bandwidth, elementary_ms=_float(d["elementary_ms"]))
    bound = roofline_bound(flops if counted_flops else _float(d["flops"]), dram, roofs, float(d["median_ms"]))
    return bound.efficiency


def annotate(diag: pd.DataFrame, readings: pd.DataFrame) -> pd.DataFrame:
    """`diag` (reports.walls.diagnosis.diagnose) with COUNTED_COLUMNS from `readings` (latest_readings)."""
    out = diag.copy()
    for column in COUNTED_COLUMNS:
        out[column] = None
    if diag.empty or readings.empty:
        return out
    ok = readings[readings["status"] == ResultStatus.OK].set_index("case_key")
    for i, d in diag.iterrows():
        if d["case_key"] not in ok.index:
            continue
        r = ok.loc[d["case_key"]]
        out.at[i, "counted_dram_bytes"] = r["dram_bytes"]
        out.at[i, "counters_bytes_ratio"] = r["bytes_ratio"]
        out.at[i, "counters_flops_ratio"] = r["flops_ratio"]
        out.at[i, "contradicted"] = _contradicted(d, r)
        out.at[i, "efficiency_counted"] = _counted_efficiency(d, r)
        out.at[i, "counters_reason"] = r["reason"]
        out.at[i, "counters_flops_countable"] = bool(r["flops_countable"])
    return out


SECTION_COLUMNS = ["case_key", "status", "error", "run_id", "checked_run_id", "kernels", "kernel_ms", "model_bytes",
                   "dram_bytes", "bytes_ratio", "excess_bytes", "bytes_differ", "reason_text", "l2_traffic_bytes",
                   "model_flops", "measured_flops", "flops_ratio", "tensor_instructions", "missing_metrics",
                   "ncu_version", "flops_countable", "write_back_bytes", "note_text", "model_bytes_read",
                   "model_bytes_written", "dram_read_bytes", "dram_write_bytes", "caught_write_back_bytes",
                   "read_differ", "read_reason", "write_differ", "write_reason"]


def section(readings: pd.DataFrame) -> list[dict[str, Any]]:
    """The device page's rows: every reading of `readings`, those whose DRAM bytes differ first."""
    if readings.empty:
        return []
    ordered = readings.assign(_differ=readings["bytes_differ"].astype(bool)).sort_values(
        ["_differ", "case_key"], ascending=[False, True], kind="stable")
    rows = []
    for _, r in ordered.iterrows():
        row = {c: r.get(c) for c in SECTION_COLUMNS}
        row["missing_metrics"] = ", ".join(r.get("missing_metrics") or [])
        row["flops_countable"] = bool(row["flops_countable"])
        missing = f"not reported: {row['missing_metrics']}" if row["missing_metrics"] else None
        # why: the error of a reading that is not ok; else the reason of a difference, what the
        # comparison leaves out (db.counters.ModelCheck.note_text) and the metrics not reported
        sides = "; ".join(f"{side} {r.get(f'{side}_reason')}" for side in ("read", "write")
                          if bool(r.get(f"{side}_differ")))
        row["why"] = (row["error"] or "") if row["status"] != ResultStatus.OK else "; ".join(
            str(text) for text in (sides, row["reason_text"], row["note_text"], missing) if text)
        rows.append(row)
    return rows
