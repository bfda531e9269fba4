"""The interconnect wall: what collectives (family collective) are held against.

A collective's `gbps` is nccl-tests' bus bandwidth (suite/ops/collective.py), comparable with what
one GPU's link carries whatever the world size. Its roof is the `interconnect` ceiling of the same
collective and world size (the best trustworthy busbw measured, reports.roofs.ceilings), else the
datasheet's link figure per direction (NVLink where the part has it, else PCIe; reports/roofs/gpu_specs.py).
Its floor is the `comm_latency` ceiling: the fastest median of that collective and world size, what
its smallest messages take. A collective is timed in one of two modes (`collective_mode`: `stream`,
nccl-tests' method, or `isolated`, one call after a barrier), which are two measurements: the roof
and the floor of a collective and world size come from its stream results where there are any,
else from its isolated ones, never from the two mixed; the chart draws each mode's line apart.
The roofline rule (reports/walls/roofline_rule.py) calls a collective `overhead`-bound within its
OVERHEAD_FACTOR of that floor, `comms`-bound otherwise; a comparison predicts a
collective's speedup from the two systems' interconnect roofs (or floors, when overhead-bound).
"""
from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd

from rooflab.db import rates
from rooflab.reports.data.frames import params_of, quality_of, usable
from rooflab.reports.roofs.gpu_specs import GpuSpec
from rooflab.reports.roofs.models import COLLECTIVE_FAMILY, Ceiling, DeviceCeilings, Roof, best_of, ceiling_of
from rooflab.suite.dtypes import element_size
from rooflab.suite.ops.collective import CollectiveOp, world_size
from rooflab.suite.ops.registry import get_op
from rooflab.vocab import CeilingKind, CollectiveMode, Tool, Wall

SECTION_CURVE_COLUMNS = ("op", "ranks", "dtype", "backend", "mode", "bytes_per_rank", "median_ms", "gbps",
                         "algbw_gbps", "case_key", "run_id", "quality", "line", "tool")


def interconnect_roof(dc: DeviceCeilings, collective: str, ranks: int | None) -> Roof | None:
    """The busbw roof of `collective` on `ranks` ranks: measured first, else the datasheet's link."""
    c = dc.get(CeilingKind.INTERCONNECT, collective=collective, ranks=ranks) if ranks else None
    if c is not None:
        return Roof(c.value, "measured", c.case_key)
    link = dc.spec.interconnect_gbps if dc.spec is not None else None
    if link is None or dc.spec is None:
        return None
    return Roof(link.value, "datasheet", f"{dc.spec.key}: {link.source}")


def latency_floor_ms(dc: DeviceCeilings, collective: str, ranks: int | None) -> float | None:
    c = dc.get(CeilingKind.COMM_LATENCY, collective=collective, ranks=ranks) if ranks else None
    return c.value if c is not None else None


def predicted_speedup(case: pd.Series, base: DeviceCeilings, cand: DeviceCeilings) -> float:
    """Candidate roof / baseline roof for a collective: interconnect roofs when comms-bound on the
    baseline, latency floors (baseline / candidate) when overhead-bound; each side at its own world
    size (`ranks`, `ranks_cand`: `ranks: all` may resolve differently on the two systems)."""
    op = str(case["op"])
    ranks = _int(case.get("ranks"))
    cand_ranks = _int(case.get("ranks_cand")) or ranks
    if case["wall"] == Wall.OVERHEAD:
        a, b = latency_floor_ms(base, op, ranks), latency_floor_ms(cand, op, cand_ranks)
        return a / b if a and b else math.nan
    a_roof, b_roof = interconnect_roof(base, op, ranks), interconnect_roof(cand, op, cand_ranks)
    return b_roof.value / a_roof.value if (a_roof is not None and b_roof is not None and a_roof.value) else math.nan


def _int(value: object) -> int | None:
    try:
        number = float(value)  # type: ignore[arg-type]  # a frame cell: int, float, None or NaN
    except (TypeError, ValueError):
        return None
    return int(number) if number == number else None


def _line(r: pd.Series, params: dict) -> str:
    """What a curve adds to `op xN dtype`: who measured it (an imported tool) and the in-place half
    where the case names it (nccl-tests measures both halves)."""
    tool = r.get("tool")
    parts = [] if tool in (None, Tool.ROOFLAB) or tool != tool else [str(tool)]
    if "inplace" in params:
        parts.append("in place" if params["inplace"] else "out of place")
    return f" ({', '.join(parts)})" if parts else ""


def curves(rows: pd.DataFrame) -> pd.DataFrame:
    """The usable collective results of a device, one row each, with the bytes each rank sends in
    (n·s: the message size nccl-tests' count stands for) and nccl-tests' algbw beside the busbw."""
    ok = usable(rows)
    ok = ok[ok["family"] == COLLECTIVE_FAMILY] if not ok.empty else ok
    if ok.empty:
        return pd.DataFrame(columns=list(SECTION_CURVE_COLUMNS))
    out = []
    for (_, r), ranks, quality, mode in zip(ok.iterrows(), world_sizes(ok), quality_of(ok), modes_of(ok), strict=True):
        params = params_of(r["params"])
        size = int(ranks) if ranks == ranks else world_size(params.get("ranks", 2))
        gbps = float(rates.gbps(float(r["bytes"]), float(r["median_ms"])))
        try:
            op = get_op(str(r["op"]))
            algbw = op.algbw_gbps(gbps, size) if isinstance(op, CollectiveOp) else math.nan
        except (KeyError, ZeroDivisionError):
            algbw = math.nan
        out.append({"op": r["op"], "ranks": size, "dtype": r["dtype"], "backend": r["backend"], "mode": mode,
                    "bytes_per_rank": int(params.get("n", 0)) * element_size(str(r["dtype"])),
                    "median_ms": float(r["median_ms"]), "gbps": gbps, "algbw_gbps": algbw, "case_key": r["case_key"],
                    "run_id": r["run_id"], "quality": quality, "line": _line(r, params),
                    "tool": str(r["tool"]) if isinstance(r.get("tool"), str) else str(Tool.ROOFLAB)})
    return pd.DataFrame(out, columns=list(SECTION_CURVE_COLUMNS)).sort_values(
        ["op", "ranks", "dtype", "mode", "bytes_per_rank"], kind="stable").reset_index(drop=True)


def modes_of(rows: pd.DataFrame) -> pd.Series:
    """Each collective row's mode: its `collective_mode`, else its params' `mode`, else `stream` (the
    parameter's default, left out of the case key)."""
    params = rows["params"] if "params" in rows.columns else pd.Series(None, index=rows.index, dtype=object)
    asked = pd.Series([str(params_of(p).get("mode", CollectiveMode.STREAM)) for p in params], index=rows.index,
                      dtype=object)
    if "collective_mode" not in rows.columns:
        return asked
    recorded = rows["collective_mode"].astype(object)
    return recorded.where(recorded.notna() & (recorded != ""), asked)


def world_sizes(rows: pd.DataFrame) -> pd.Series:
    """Each row's world size: the `ranks` column (what `ranks: all` resolved to), else the integer
    `ranks` of its params; NaN for a row that is not a collective."""
    params = rows["params"] if "params" in rows.columns else pd.Series(None, index=rows.index, dtype=object)
    asked = pd.to_numeric(pd.Series([params_of(p).get("ranks") for p in params], index=rows.index, dtype=object),
                          errors="coerce")
    if "ranks" not in rows.columns:
        return asked
    return pd.to_numeric(rows["ranks"], errors="coerce").fillna(asked)


def collective_ceilings(rows: pd.DataFrame, spec: GpuSpec | None) -> list[Ceiling]:
    """The interconnect ceiling (best busbw) and the latency floor (fastest median) of each collective
    and world size among trustworthy `rows`, from one mode (stream where there is any, see the
    module doc), each with how its result was measured."""
    coll = rows[rows["family"] == COLLECTIVE_FAMILY]
    if coll.empty:
        return []
    coll = coll.assign(_ranks=world_sizes(coll), _mode=modes_of(coll))
    out = []
    for (op, ranks), both in coll[coll["_ranks"].notna()].groupby(["op", "_ranks"], sort=True):
        stream = both[both["_mode"] == CollectiveMode.STREAM]
        g = stream if not stream.empty else both[both["_mode"] == both["_mode"].iloc[0]]
        best = best_of(g, "gbps")
        if best is not None and best["gbps"] > 0:
            c = ceiling_of(best, CeilingKind.INTERCONNECT, best["gbps"], spec)
            out.append(replace(c, collective=str(op), ranks=int(ranks)))
        medians = pd.to_numeric(g["median_ms"], errors="coerce")
        fastest = g.loc[medians.idxmin()]
        floor = ceiling_of(fastest, CeilingKind.COMM_LATENCY, float(medians.min()), spec)  # no datasheet figure
        out.append(replace(floor, collective=str(op), ranks=int(ranks)))
    return out
