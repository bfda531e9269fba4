"""Generation comparison: each case's speedup on a candidate against a baseline, with its 95 %
interval, beside the speedup the roofs predict.

Which runs each side draws from is reports.comparisons.pairing's rule (the CLI and the report page share it).
Per case (case_key ok on both sides; the newest result of each side's paired runs), speedup =
baseline median / candidate median (> 1: the candidate is faster), with its interval from the raw
samples of both sides, else from their stored CIs, else none (reports.comparisons.intervals), widened by the
run-to-run spread of each side's device (reports.comparisons.run_spread; a side whose device has no estimate
takes the other side's, and with neither the interval is the samples' alone, as the note says). A
case is compared only when both results were timed alike and are trustworthy:

- results of different flush methods (read_sweep, write_sweep) or paces (back_to_back, idle) are
  not paired, as the regression check starts a new segment where either changes: the case is
  listed as not_comparable and left out of everything else; so are results two different tools
  measured (rooflab's own and an imported nccl-tests result of the same case: runners/peer_import);
- a noisy or contended result on either side (reports.data.frames.quality_of) makes the case untrusted:
  shown, but left out of the geometric means and the deviations, as it never sets a ceiling either.

The predicted speedup follows the case's wall on the baseline: the bandwidth-roof ratio (L2 for
hot cases) when bandwidth-bound, the compute-roof ratio of its dtype when compute-bound (the ratio
of its elementary-function times when those are its wall), the launch-floor ratio when
overhead-bound, where it is a range over the floors measured in every run of both devices
(reports.roofs.launch_floors). A collective (family collective) is predicted from the two systems' interconnect
roofs of that collective, each at its own world size, or from their latency floors when
overhead-bound (reports/roofs/interconnect.py). The deviation is measured / predicted, against the
nearest end of the predicted range: a speedup inside the range is no deviation.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
import pandas as pd

from rooflab.reports.comparisons import intervals as iv
from rooflab.reports.comparisons.run_spread import Spread, Spreads
from rooflab.reports.data.frames import params_of, quality_of
from rooflab.reports.data.op_facts import elementary_counts
from rooflab.reports.roofs.ceilings import Traffic, bandwidth_roof, compute_roof, launch_floor_ms, uses_matrix_units
from rooflab.reports.roofs.elementary import elementary_time
from rooflab.reports.roofs.interconnect import predicted_speedup as collective_speedup
from rooflab.reports.roofs.launch_floors import PredictedRange, predicted_launch_range
from rooflab.reports.roofs.models import COLLECTIVE_FAMILY, DeviceCeilings
from rooflab.reports.walls.diagnosis import diagnose, latest_per_case
from rooflab.vocab import CeilingKind, Quality, Wall

SampleKey = tuple[str, str, str]  # run_id, case_key, device_uuid ("" without one)


class Standing(StrEnum):
    """What a compared case's speedup says (the first four are reports.comparisons.intervals.Significance)."""

    FASTER = "faster"  # the interval lies above 1
    SLOWER = "slower"  # the interval lies below 1
    NOT_SIGNIFICANT = "not_significant"  # the interval contains 1
    NO_INTERVAL = "no_interval"  # no raw samples nor stored CI on a side: the ratio alone
    UNTRUSTED = "untrusted"  # a side is noisy or contended: shown, not judged
    NOT_COMPARABLE = "not_comparable"  # the two sides used different flush methods or paces: not paired


COMPARED = (Standing.FASTER, Standing.SLOWER, Standing.NOT_SIGNIFICANT, Standing.NO_INTERVAL)


@dataclass(frozen=True)
class Side:
    label: str
    device_name: str
    rows: pd.DataFrame  # the side's results (its paired runs)
    ceilings: DeviceCeilings
    runs: tuple[str, ...] = ()  # the paired runs (the launch floors' central value comes from them)
    samples: Mapping[SampleKey, Any] = field(default_factory=dict)  # raw samples of the paired results


def _ratio(a, b) -> float:
    return a.value / b.value if (a is not None and b is not None and b.value) else math.nan


def predicted_speedup(case: Mapping[str, Any], base: DeviceCeilings, cand: DeviceCeilings) -> float:
    """Candidate roof / baseline roof for the wall the case hits on the baseline (the launch
    floors of the ceilings for an overhead-bound case; `predict_range` gives their spread)."""
    if case["family"] == COLLECTIVE_FAMILY:
        return collective_speedup(pd.Series(case), base, cand)
    wall = case["wall"]
    if wall == Wall.BANDWIDTH:
        traffic = Traffic.of(pd.Series(case))
        return _ratio(bandwidth_roof(cand, traffic), bandwidth_roof(base, traffic))
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


def predict_range(case: Mapping[str, Any], base: Side, cand: Side,
                  floors: pd.DataFrame | None) -> tuple[PredictedRange, str]:
    """The predicted speedup as a range, and what it rests on ("" for a roof ratio)."""
    if case["wall"] == Wall.OVERHEAD and case["family"] != COLLECTIVE_FAMILY and floors is not None:
        found, backend = predicted_launch_range(floors, (base.device_name, base.runs), (cand.device_name, cand.runs),
                                                str(case["backend"]), str(case["timing_mode"]))
        if found is not None:
            return found, f"{backend} launch floors"
    value = predicted_speedup(case, base.ceilings, cand.ceilings)
    return PredictedRange(value, value, value), ""


def _deviation(speedup: float, pred: PredictedRange) -> float:
    """measured / predicted, against the nearest end of the predicted range (1.0 inside it)."""
    if not (speedup > 0) or not (pred.low > 0) or math.isnan(pred.value):
        return math.nan
    if pred.contains(speedup):
        return 1.0
    return speedup / (pred.high if speedup > pred.high else pred.low)


COMPARE_COLUMNS = ["case_key", "op", "family", "backend", "dtype", "cache", "timing_mode", "intensity", "wall",
                   "baseline_run", "candidate_run", "baseline_ms", "candidate_ms", "speedup", "speedup_low",
                   "speedup_high", "interval", "standing", "predicted_speedup", "predicted_low", "predicted_high",
                   "predicted_from", "deviation", "run_spread_pct", "note"]


def _side_info(side: Side) -> dict[str, dict[str, Any]]:
    """case_key -> run_id, median_ms, quality, flush, pace, rel_ci, uuid of the row diagnose judges for it."""
    rows = latest_per_case(side.rows)
    if rows.empty:
        return {}
    uuids = rows["device_uuid"] if "device_uuid" in rows.columns else pd.Series("", index=rows.index)
    info = pd.DataFrame({
        "run_id": rows["run_id"].astype(str), "median_ms": pd.to_numeric(rows["median_ms"], errors="coerce"),
        "quality": quality_of(rows).astype(str),
        "flush": rows["flush_method"] if "flush_method" in rows.columns else None,
        "pace": rows["pace"] if "pace" in rows.columns else None,
        "collective_mode": rows["collective_mode"] if "collective_mode" in rows.columns else None,
        "tool": rows["tool"] if "tool" in rows.columns else None,
        "rel_ci": rows["rel_ci_halfwidth"] if "rel_ci_halfwidth" in rows.columns else math.nan,
        "uuid": uuids.astype(object).where(uuids.notna(), "").astype(str),
    })
    records = info.to_dict("records")
    return dict(zip(rows["case_key"].astype(str), records, strict=True))


def _differs(a: Any, b: Any) -> bool:
    """Two recorded methods that differ (a result stored before the method was recorded pairs with either)."""
    known = [x for x in (a, b) if isinstance(x, str) and x]
    return len(known) == 2 and known[0] != known[1]


def _case_ratio(key: str, b: dict, c: dict, base: Side, cand: Side) -> tuple[iv.Ratio, str]:
    bs, cs = base.samples.get((b["run_id"], key, b["uuid"])), cand.samples.get((c["run_id"], key, c["uuid"]))
    ratio = iv.speedup(key, float(b["median_ms"]), float(c["median_ms"]), baseline_samples=bs, candidate_samples=cs,
                       baseline_rel_ci=b["rel_ci"], candidate_rel_ci=c["rel_ci"])
    missing = [name for name, s in (("baseline", bs), ("candidate", cs)) if s is None]
    note = ""
    if missing:
        why = " and ".join(missing) + " without raw samples (pruned, or imported from an export)"
        note = why + ("; interval from the stored CIs of the medians" if ratio.method == iv.Method.STORED_CI
                      else "; the ratio alone")
    return ratio, note


def _run_spread(ratio: iv.Ratio, case: Mapping[str, Any], base: Side, cand: Side,
                spreads: Spreads) -> tuple[iv.Ratio, float, str]:
    """`ratio` widened by both sides' run-to-run spreads (a side without an estimate takes the
    other's), the combined spread in per cent (NaN: none known) and what the note says of it."""
    key, family, backend = str(case["case_key"]), str(case["family"]), str(case["backend"])
    found = [spreads.spread_of(side.device_name, key, family, backend) for side in (base, cand)]
    known: list[Spread] = [f for f in found if f is not None]
    if not known:
        return ratio, math.nan, "run-to-run spread unknown (fewer than two runs of its cases on either device)"
    b, c = (f if f is not None else known[0] for f in found)
    log_sd = math.hypot(b.log_sd, c.log_sd)
    pct = 100 * math.expm1(log_sd)
    note = f"run-to-run spread {pct:.2g} %" + (" (from one device's runs, taken for both)" if len(known) == 1 else "")
    return iv.widened(ratio, log_sd), pct, note


def _standing(ratio: iv.Ratio, b: dict, c: dict) -> tuple[Standing, str]:
    if _differs(b["flush"], c["flush"]):
        return Standing.NOT_COMPARABLE, f"flush methods differ ({b['flush']} / {c['flush']}): not paired"
    if _differs(b["pace"], c["pace"]):
        return Standing.NOT_COMPARABLE, f"paces differ ({b['pace']} / {c['pace']}): not paired"
    if _differs(b.get("collective_mode"), c.get("collective_mode")):
        return (Standing.NOT_COMPARABLE,
                f"collective modes differ ({b['collective_mode']} / {c['collective_mode']}): not paired")
    if _differs(b.get("tool"), c.get("tool")):
        return Standing.NOT_COMPARABLE, f"measured by different tools ({b['tool']} / {c['tool']}): not paired"
    bad = [f"{name} {s['quality']}" for name, s in (("baseline", b), ("candidate", c)) if s["quality"] != Quality.GOOD]
    if bad:
        return Standing.UNTRUSTED, ", ".join(bad) + ": not judged"
    return Standing(str(ratio.significance)), ""


def compare(base: Side, cand: Side, floors: pd.DataFrame | None = None, spreads: Spreads | None = None) -> pd.DataFrame:
    """One row per case ok on both sides (COMPARE_COLUMNS, and `ratio`: its reports.comparisons.intervals.Ratio).
    `floors`: reports.roofs.launch_floors.per_run_floors of both devices' launch results (the overhead range);
    `spreads`: reports.comparisons.run_spread.estimate_spreads of both devices' recent runs."""
    spreads = spreads if spreads is not None else Spreads({}, {}, {})
    db_ = diagnose(base.rows, base.ceilings)
    dc_ = diagnose(cand.rows, cand.ceilings)
    if db_.empty or dc_.empty:
        return pd.DataFrame(columns=COMPARE_COLUMNS + ["ratio"])
    keys = db_[db_["case_key"].isin(set(dc_["case_key"]))]
    cand_ranks = dict(zip(dc_["case_key"].astype(str), dc_["ranks"], strict=True))
    bi, ci = _side_info(base), _side_info(cand)
    out = []
    for case in keys.to_dict("records"):
        key = str(case["case_key"])
        case["ranks_cand"] = cand_ranks.get(key)  # a collective's world size on the candidate
        b, c = bi[key], ci[key]
        ratio, note = _case_ratio(key, b, c, base, cand)
        ratio, spread_pct, spread_note = _run_spread(ratio, case, base, cand, spreads)
        standing, why = _standing(ratio, b, c)
        pred, source = predict_range(case, base, cand, floors)
        judged = standing in COMPARED
        out.append({
            **{k: case[k] for k in ("case_key", "op", "family", "backend", "dtype", "cache", "timing_mode",
                                     "intensity", "wall")},
            "baseline_run": b["run_id"], "candidate_run": c["run_id"], "baseline_ms": float(b["median_ms"]),
            "candidate_ms": float(c["median_ms"]), "speedup": ratio.value,
            "speedup_low": ratio.low if judged else None, "speedup_high": ratio.high if judged else None,
            "interval": str(ratio.method), "standing": str(standing), "predicted_speedup": pred.value,
            "predicted_low": pred.low, "predicted_high": pred.high, "predicted_from": source,
            "deviation": _deviation(ratio.value, pred) if judged else math.nan, "run_spread_pct": spread_pct,
            "note": "; ".join(x for x in (why, note, spread_note) if x), "ratio": ratio,
        })
    return pd.DataFrame(out, columns=COMPARE_COLUMNS + ["ratio"]).reset_index(drop=True)


def geomean(values: pd.Series) -> float:
    v = pd.to_numeric(values, errors="coerce").dropna()
    v = v[v > 0]
    return float(np.exp(np.log(v).mean())) if len(v) else math.nan


SUMMARY_COLUMNS = ["cases", "compared", "faster", "slower", "not_significant", "no_interval", "left_out",
                   "speedup_geomean", "speedup_low", "speedup_high", "predicted_geomean"]


def _summary_row(g: pd.DataFrame) -> list:
    judged = g[g["standing"].isin([str(s) for s in COMPARED])]
    mean = iv.geomean_ratio(list(judged["ratio"])) if len(judged) else iv.Ratio(math.nan, None, None, iv.Method.NONE)
    counts = [int((judged["standing"] == str(s)).sum()) for s in COMPARED]
    return [len(g), len(judged), *counts, len(g) - len(judged), mean.value, mean.low, mean.high,
            geomean(judged["predicted_speedup"])]


def summary(cmp: pd.DataFrame, by: tuple[str, ...] = ("family", "dtype")) -> pd.DataFrame:
    """Per group and overall: cases, how many are compared (not untrusted or not comparable) and
    how each stands, the geometric mean of their speedups with its 95 % interval, and of the
    predicted speedups."""
    cols = list(by) + SUMMARY_COLUMNS
    if cmp.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for key, g in cmp.groupby(list(by), sort=True):
        key = key if isinstance(key, tuple) else (key,)
        rows.append([*key, *_summary_row(g)])
    rows.append(["all"] + [""] * (len(by) - 1) + _summary_row(cmp))
    return pd.DataFrame(rows, columns=cols)


def most_deviating(cmp: pd.DataFrame, limit: int = 15) -> pd.DataFrame:
    """Compared cases whose measured speedup lies furthest (in log ratio) outside the predicted one
    (a speedup inside the predicted range is no deviation)."""
    rows = cmp[cmp["deviation"].notna() & (cmp["deviation"] > 0) & (cmp["deviation"] != 1.0)].copy()
    rows["log_deviation"] = np.log(rows["deviation"].astype(float)).abs()
    return rows.sort_values("log_deviation", ascending=False).head(limit).drop(columns="log_deviation")
