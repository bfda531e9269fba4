"""Which wall each case hits, how far it is from it, and what fusion gains.

Each case's roofs are looked up here and the case is held against them by the roofline rule
(reports/walls/roofline_rule.py: roofline time, wall, efficiency). The roofs: the compute roof is,
for GEMM and attention, the matrix ceiling of the dtype (the best GEMM measured, else the
tensor-core datasheet peak, else the vector roof), and the vector ceiling for everything else; the
bandwidth roof is the L2 ceiling for a case whose working set fits in the L2, hot or cold, and the
HBM roof of its own mix of reads and writes otherwise (reports.roofs.ceilings.bandwidth_roof); the
floor is the launch floor of the
case's timing mode, what a user pays per launch (host time per launch from Python in launch mode,
per launch of a graph replay in graph mode), while a case's median is its device time. Measured
ceilings are used first, datasheet figures when a ceiling was not measured. An efficiency above
100 % is never reported (reports.walls.roofline_rule): it means the roof is suspect (a datasheet
figure that a result beats, or a noisy or contended result held against a measured roof), so
`efficiency` is left empty and `roof_suspect` is set. Every row carries its quality (reports.data.frames.quality_of).

elementary_ms is the time the op's elementary functions (cos, exp, erf: Op.elementary) take at the
device's measured elementary-function roofs (reports.roofs.elementary), a compute-side term of the
rule. `wall_roof` names the roof of the wall: "elementary cos float32", "vector float32", "matrix
bfloat16", "hbm_rw", ... (a datasheet roof says so); `elementary_missing` names functions of the op
that have no measured roof (their time is then unknown and left out).

A collective (family collective) is held against the interconnect roof of its collective and world
size and that collective's latency floor (reports/roofs/interconnect.py): `overhead` near its
floor, `comms` otherwise.

power: `power_w` is the board's average power while the case ran; `at_power_cap` is True when NVML
reported the software power cap (`sw_power_cap` among the throttle reasons). Such a case is not
throttled (its clock stayed above the floor, else it would not be usable): its note reads
"at power cap", which says that more FLOP/s at this clock would need more power, not more work.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from rooflab.reports.data.frames import params_of, quality_of, usable
from rooflab.reports.data.op_facts import elementary_counts, fusion_chain_ops, unfused_bytes
from rooflab.reports.roofs.ceilings import Traffic, bandwidth_roof, compute_roof, launch_floor_ms, uses_matrix_units
from rooflab.reports.roofs.elementary import elementary_time
from rooflab.reports.roofs.interconnect import interconnect_roof, latency_floor_ms, world_sizes
from rooflab.reports.roofs.models import COLLECTIVE_FAMILY, DeviceCeilings, Roof
from rooflab.reports.walls.roofline_rule import RooflineBound, Roofs, roofline_bound
from rooflab.vocab import Wall

DIAGNOSIS_COLUMNS = [
    "case_key", "op", "family", "backend", "dtype", "cache", "timing_mode", "params", "run_id",
    "median_ms", "flops", "bytes", "bytes_read", "bytes_written", "intensity", "tflops", "gbps",
    "compute_ms", "memory_ms", "elementary_ms", "roofline_ms", "efficiency", "wall", "wall_roof", "launch_floor_ms",
    "compute_roof_tflops", "compute_roof_origin", "bandwidth_roof_gbps", "bandwidth_roof_origin",
    "roof_suspect", "quality", "rel_ci_halfwidth", "stop_reason", "power_w", "at_power_cap", "note",
    "elementary_missing", "ranks",
]
POWER_CAP_REASON = "sw_power_cap"
AT_POWER_CAP = "at power cap"


def at_power_cap(throttle_reasons: object) -> bool:
    """True when the stored reasons (a list, or its JSON text) include the software power cap."""
    if throttle_reasons is None or (isinstance(throttle_reasons, float) and math.isnan(throttle_reasons)):
        return False
    if isinstance(throttle_reasons, str):
        try:
            parsed = json.loads(throttle_reasons)
        except ValueError:
            return POWER_CAP_REASON in throttle_reasons
        throttle_reasons = parsed
    if not isinstance(throttle_reasons, Iterable):
        raise TypeError(f"throttle reasons are a list or its JSON text, got {throttle_reasons!r}")
    return POWER_CAP_REASON in list(throttle_reasons)


def latest_per_case(df: pd.DataFrame) -> pd.DataFrame:
    """The newest usable result of each case_key (by run_order, then measured_at)."""
    rows = usable(df)
    if rows.empty:
        return rows
    sort_cols = [c for c in ("run_order", "measured_at") if c in rows.columns]
    if sort_cols:
        rows = rows.sort_values(sort_cols, kind="stable")
    return rows.drop_duplicates("case_key", keep="last")


def diagnose(df: pd.DataFrame, dc: DeviceCeilings) -> pd.DataFrame:
    """One row per case (its newest usable result) with roofline time, efficiency and wall."""
    latest = latest_per_case(df)
    latest = latest.assign(_quality=quality_of(latest)) if not latest.empty else latest
    sizes = world_sizes(latest) if not latest.empty else pd.Series(dtype=float)
    out = [_diagnosis_row(r, dc, ranks) for (_, r), ranks in zip(latest.iterrows(), sizes, strict=True)]
    return pd.DataFrame(out, columns=DIAGNOSIS_COLUMNS)


def _diagnosis_row(r: pd.Series, dc: DeviceCeilings, ranks: float) -> dict[str, Any]:
    """One case's row of the diagnosis: its roofs looked up, held against them by the roofline rule."""
    median_ms = float(r["median_ms"])
    flops = float(r["flops"] or 0)
    nbytes = float(r["bytes"] or 0)
    family = str(r["family"])
    collective = family == COLLECTIVE_FAMILY
    found = _collective_roofs(r, dc, ranks) if collective else _kernel_roofs(r, dc)
    b = roofline_bound(flops, nbytes, found.roofs, median_ms)
    capped = at_power_cap(r.get("throttle_reasons"))
    suspect = b.above_roof
    croof, broof = found.croof, found.broof
    traffic = Traffic.of(r)
    return {
        "case_key": r["case_key"], "op": r["op"], "family": family, "backend": r["backend"],
        "dtype": str(r["dtype"]), "cache": r["cache"], "timing_mode": r["timing_mode"], "params": r.get("params"),
        "run_id": r["run_id"], "median_ms": median_ms, "flops": flops, "bytes": nbytes,
        "bytes_read": traffic.bytes_read, "bytes_written": traffic.bytes_written,
        "intensity": flops / nbytes if nbytes else math.nan,
        "tflops": float(r["tflops"]), "gbps": float(r["gbps"]),  # as stored
        "compute_ms": b.compute_ms, "memory_ms": b.memory_ms, "elementary_ms": b.elementary_ms,
        "roofline_ms": b.roofline_ms, "efficiency": b.efficiency, "wall": b.wall,
        "wall_roof": _wall_roof(b, found),
        "launch_floor_ms": found.roofs.floor_ms,
        "compute_roof_tflops": croof.value if croof else math.nan,
        "compute_roof_origin": croof.origin if croof else None,
        "bandwidth_roof_gbps": broof.value if broof else math.nan,
        "bandwidth_roof_origin": broof.origin if broof else None,
        "roof_suspect": bool(suspect), "quality": r["_quality"],
        "rel_ci_halfwidth": r.get("rel_ci_halfwidth"), "stop_reason": r.get("stop_reason"),
        "power_w": _float_or_nan(r.get("power_w")),
        "at_power_cap": capped,
        "note": AT_POWER_CAP if capped else "",
        "elementary_missing": ", ".join(found.elementary_missing),
        "ranks": ranks if collective else None,
    }


@dataclass(frozen=True)
class FoundRoofs:
    """The roofs a case is held against: as the rule takes them, and as the page names them."""

    roofs: Roofs
    croof: Roof | None  # the compute roof
    broof: Roof | None  # the bandwidth (or interconnect) roof
    elementary_roof: str | None = None  # the elementary-function roof that limits it, named
    elementary_missing: tuple[str, ...] = ()  # elementary functions without a roof


def _kernel_roofs(r: pd.Series, dc: DeviceCeilings) -> FoundRoofs:
    """A kernel's roofs: the compute roof of its dtype (matrix units or not), the bandwidth roof of
    where its bytes go (the L2 for a working set that fits in it, else HBM by its mix of reads and
    writes), its elementary functions' roofs and the launch floor of its timing mode."""
    dtype, family = str(r["dtype"]), str(r["family"])
    croof = compute_roof(dc, dtype, matrix=uses_matrix_units(family, dtype))
    broof = bandwidth_roof(dc, Traffic.of(r))
    elem = elementary_time(dc, elementary_counts(str(r["op"]), params_of(r.get("params")), dtype), dtype)
    roofs = Roofs(croof.value if croof else None, broof.value if broof else None,
                  launch_floor_ms(dc, str(r["timing_mode"])), elem.ms)
    return FoundRoofs(roofs, croof, broof, str(elem.roof), tuple(elem.missing))


def _collective_roofs(r: pd.Series, dc: DeviceCeilings, ranks: float) -> FoundRoofs:
    """A collective's: the interconnect roof of its collective and world size, and that
    collective's latency floor. Its adds are not held against a compute roof."""
    size = int(ranks) if ranks == ranks else None
    roof = interconnect_roof(dc, str(r["op"]), size)
    roofs = Roofs(None, roof.value if roof else None, latency_floor_ms(dc, str(r["op"]), size), collective=True)
    return FoundRoofs(roofs, None, roof)


def _float_or_nan(value: Any) -> float:  # any cell of a results frame
    try:
        return math.nan if value is None else float(value)
    except (TypeError, ValueError):
        return math.nan


def _wall_roof(b: RooflineBound, found: FoundRoofs) -> str | None:
    """The roof of the wall: the elementary roof when the op's elementary functions take longer than
    its FLOPs, else the compute roof; the bandwidth (or interconnect) roof; None for overhead or no wall."""
    if b.wall == Wall.COMPUTE:
        if b.elementary_limits:
            return found.elementary_roof
        return found.croof.label if found.croof else None
    if b.wall in (Wall.BANDWIDTH, Wall.COMMS):
        return found.broof.label if found.broof else None
    return None


def most_left_on_table(diag: pd.DataFrame, limit: int = 15) -> pd.DataFrame:
    """Cases furthest from their roof (lowest efficiency), overhead-bound cases excluded."""
    rows = diag[(diag["wall"] != Wall.OVERHEAD) & diag["efficiency"].notna()].copy()
    rows["left_ms"] = rows["median_ms"] - rows["roofline_ms"]
    return rows.sort_values(["efficiency", "left_ms"], ascending=[True, False]).head(limit)


# --- fusion gains ---

FUSION_COLUMNS = [
    "comparison", "op", "dtype", "cache", "timing_mode", "shape", "unfused_case", "fused_case",
    "unfused_ms", "fused_ms", "speedup", "unfused_bytes", "fused_bytes", "bytes_saved", "bytes_ratio",
]


def _shape_text(params: dict, drop: tuple[str, ...] = ()) -> str:
    return ",".join(f"{k}={params[k]}" for k in sorted(params) if k not in drop)


def fusion_gains(df: pd.DataFrame) -> pd.DataFrame:
    """Eager vs compiled for the fusion-chain ops; eager naive attention vs the SDPA kernels and vs
    compiled naive attention; always at equal shape, dtype, cache and timing mode."""
    rows = latest_per_case(df)
    out = []
    if rows.empty:
        return pd.DataFrame(columns=FUSION_COLUMNS)
    rows = rows.assign(_params=[params_of(p) for p in rows["params"]])
    chains = rows[rows["op"].isin(fusion_chain_ops(rows["op"].unique()))]
    for _, fused in chains[chains["backend"] == "compiled"].iterrows():
        match = chains[(chains["backend"] == "eager") & (chains["op"] == fused["op"])
                       & (chains["dtype"] == fused["dtype"]) & (chains["cache"] == fused["cache"])
                       & (chains["timing_mode"] == fused["timing_mode"])]
        for _, eager in match.iterrows():
            if eager["_params"] == fused["_params"]:
                out.append(_gain("eager vs compiled", eager, fused, _shape_text(fused["_params"])))
    attn = rows[rows["op"] == "attention"]
    kernel = attn["_params"].map(lambda p: p.get("kernel"))
    for _, naive in attn[(kernel == "naive") & (attn["backend"] == "eager")].iterrows():
        base = {k: v for k, v in naive["_params"].items() if k != "kernel"}
        candidates = attn[((kernel != "naive") | (attn["backend"] == "compiled")) & (attn["dtype"] == naive["dtype"])
                          & (attn["cache"] == naive["cache"]) & (attn["timing_mode"] == naive["timing_mode"])]
        for _, fused in candidates.iterrows():
            if {k: v for k, v in fused["_params"].items() if k != "kernel"} == base:
                label = fused["_params"].get("kernel")
                label = f"compiled {label}" if fused["backend"] == "compiled" else label
                out.append(_gain(f"naive vs {label}", naive, fused, _shape_text(base)))
    return pd.DataFrame(out, columns=FUSION_COLUMNS)


def _gain(comparison: str, unfused: pd.Series, fused: pd.Series, shape: str) -> dict:
    ub = unfused_bytes(str(unfused["op"]), unfused["_params"], str(unfused["dtype"]))
    fb = float(fused["bytes"] or 0)
    return {
        "comparison": comparison, "op": fused["op"], "dtype": fused["dtype"], "cache": fused["cache"],
        "timing_mode": fused["timing_mode"], "shape": shape,
        "unfused_case": unfused["case_key"], "fused_case": fused["case_key"],
        "unfused_ms": float(unfused["median_ms"]), "fused_ms": float(fused["median_ms"]),
        "speedup": float(unfused["median_ms"]) / float(fused["median_ms"]),
        "unfused_bytes": ub, "fused_bytes": fb,
        "bytes_saved": (ub - fb) if ub is not None else None,
        "bytes_ratio": (ub / fb) if (ub is not None and fb) else None,
    }
