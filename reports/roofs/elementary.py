"""The elementary-function roofs: cos, exp and erf evaluations per second, measured by the
`elementary` probe, and the time an op's elementary functions take at them.

An op's model counts an elementary function as one FLOP, but the hardware spends a special-function
unit slot or dozens of instructions on it, so a pointwise op full of them can be limited by their
throughput long before its bytes or its FLOPs at the FMA roof would limit it.

- Ceiling (kind `elementary`, per function and dtype): the best rate, Geval/s = evaluations /
  median (db.rates.gevals), of the trustworthy `elementary` results of that function and dtype.
- An op's elementary time: Σ over its functions of count / roof (the functions share the units that
  evaluate them, so their times add). A 16-bit dtype without a roof of its own takes float32's
  (16-bit inputs are computed in float32), tf32 takes float32's. A function without a measured roof
  leaves the time unknown (NaN) and is named: there are no datasheet figures for these rates.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from rooflab.db import rates
from rooflab.reports.data.frames import params_of
from rooflab.reports.data.op_facts import elementary_counts
from rooflab.reports.roofs.models import HALF_DTYPES, Ceiling, DeviceCeilings
from rooflab.suite.dtypes import storage_dtype
from rooflab.vocab import CeilingKind

PROBE_OP = "elementary"
KIND = CeilingKind.ELEMENTARY


def probe_rates(rows: pd.DataFrame) -> pd.DataFrame:
    """The `elementary` probe rows of `rows` with their function and rate (columns fn, evaluations,
    gevals); empty when there are none."""
    probe = rows[rows["op"] == PROBE_OP] if not rows.empty else rows
    out = []
    for _, r in probe.iterrows():
        counts = elementary_counts(PROBE_OP, params_of(r["params"]), str(r["dtype"]))
        median_ms = float(r["median_ms"])
        for fn, n in counts.items():
            out.append({"index": r.name, "fn": fn, "evaluations": n, "gevals": rates.gevals(float(n), median_ms)})
    return pd.DataFrame(out, columns=["index", "fn", "evaluations", "gevals"])


def elementary_ceilings(rows: pd.DataFrame) -> list[Ceiling]:
    """One ceiling per (function, dtype) from the trustworthy probe rows `rows` (reports.data.frames.trustworthy)."""
    found = probe_rates(rows)
    out: list[Ceiling] = []
    if found.empty:
        return out
    found = found.assign(dtype=[str(rows.at[i, "dtype"]) for i in found["index"]])
    for (fn, dtype), group in found.groupby(["fn", "dtype"], sort=True):
        best = group.loc[group["gevals"].idxmax()]
        row = rows.loc[best["index"]]
        out.append(Ceiling(kind=KIND, value=float(best["gevals"]), case_key=str(row["case_key"]),
                           run_id=str(row["run_id"]), dtype=str(dtype), function=str(fn)))
    return out


def elementary_roof(dc: DeviceCeilings, function: str, dtype: str) -> Ceiling | None:
    """The measured roof of `function` for `dtype` (see the module doc for the fallbacks), or None."""
    order = list(dict.fromkeys([dtype, storage_dtype(dtype)]))  # tf32: float32's roof
    if dtype in HALF_DTYPES:
        order.append("float32")
    for dt in order:
        for c in dc.ceilings:
            if c.kind == KIND and c.function == function and c.dtype == dt:
                return c
    return None


@dataclass(frozen=True)
class ElementaryTime:
    """The time an op's elementary functions take at their roofs."""

    ms: float  # NaN when a function has no roof, 0.0 for an op without elementary functions
    roof: str | None  # label of the roof that takes the most of that time ("elementary cos float32")
    missing: tuple[str, ...] = ()  # functions of the op without a measured roof


def elementary_time(dc: DeviceCeilings, counts: Mapping[str, int], dtype: str) -> ElementaryTime:
    """Σ count / roof over the functions of `counts` (reports.data.op_facts.elementary_counts)."""
    if not counts:
        return ElementaryTime(0.0, None)
    total, missing = 0.0, []
    worst: tuple[float, str | None] = (0.0, None)
    for fn, n in sorted(counts.items()):
        roof = elementary_roof(dc, fn, dtype)
        if roof is None or roof.value <= 0:
            missing.append(fn)
            continue
        ms = float(rates.ms_at_gevals(float(n), roof.value))
        total += ms
        if ms > worst[0]:
            worst = (ms, roof.label)
    if missing:
        return ElementaryTime(math.nan, None, tuple(missing))
    return ElementaryTime(total, worst[1])
