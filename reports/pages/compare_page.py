"""The comparison page of the report: every device against the one with the lowest measured
(else datasheet) HBM bandwidth, each pair through reports.comparisons.compare_devices.compare_devices, the
function `rooflab compare` calls, so the page and the terminal pair the same runs and give the same
figures. Reads nothing itself."""
from __future__ import annotations

import math
from collections.abc import Callable, Collection
from typing import Any

import jinja2
import pandas as pd

from rooflab.reports.comparisons.compare_devices import Comparison, Evidence, compare_devices
from rooflab.reports.pages.compare_plots import geomeans_svg, speedup_svg
from rooflab.reports.roofs.models import DeviceCeilings

CASE_FIELDS = ["case_key", "wall", "baseline_run", "candidate_run", "baseline_ms", "candidate_ms", "speedup",
               "speedup_low", "speedup_high", "interval", "standing", "predicted_speedup", "predicted_low",
               "predicted_high", "predicted_from", "deviation", "note"]
SUMMARY_FIELDS = ["family", "dtype", "cases", "compared", "faster", "slower", "not_significant", "no_interval",
                  "left_out", "speedup_geomean", "speedup_low", "speedup_high", "predicted_geomean"]


def baseline_order(ceilings: dict[str, DeviceCeilings]) -> list[str]:
    """Devices by their HBM bandwidth, lowest first: the measured read-write ceiling, else the datasheet's."""
    def hbm(name: str) -> tuple[float, str]:
        dc = ceilings[name]
        c = dc.get("hbm_rw")
        return (c.value if c else (dc.spec.memory_gbps.value if dc.spec else math.inf), name)

    return sorted(ceilings, key=hbm)


def records(frame: pd.DataFrame, columns: list[str]) -> list[dict]:
    """Rows as dicts with NaN and None alike None (the templates print nothing for them)."""
    if frame is None or frame.empty:
        return []
    cols = [c for c in columns if c in frame.columns]
    out = []
    for row in frame[cols].itertuples(index=False):
        out.append({c: (None if v is None or (isinstance(v, float) and math.isnan(v)) else v)
                    for c, v in zip(cols, row, strict=True)})
    return out


def section(cmp: Comparison, write_svg: Callable[[str, str], str], slug: Callable[[str], str]) -> dict[str, Any]:
    name = slug(cmp.candidate + " vs " + cmp.baseline)
    cases = cmp.cases.sort_values(["family", "dtype", "case_key"]) if not cmp.cases.empty else cmp.cases
    return {
        "candidate": cmp.candidate, "baseline": cmp.baseline, "pairing": cmp.pairing,
        "summary": records(cmp.summary, SUMMARY_FIELDS),
        "deviating": records(cmp.deviating, CASE_FIELDS),
        "cases": records(cases, CASE_FIELDS),
        "svg": write_svg(f"speedup-{name}.svg", speedup_svg(cmp.cases, cmp.baseline, cmp.candidate)),
        "geomeans_svg": write_svg(f"geomeans-{name}.svg", geomeans_svg(cmp.summary, cmp.baseline, cmp.candidate)),
        "n": len(cmp.cases),
    }


def compare_page(env: jinja2.Environment, write_svg: Callable[[str, str], str], slug: Callable[[str], str],
                 ceilings: dict[str, DeviceCeilings], df: pd.DataFrame, counts: pd.DataFrame,
                 evidence: Evidence | None, allowed: Collection[str] | None) -> str:
    """The page's HTML; `ceilings`: each device's ceilings as its device page has them (they
    choose the baseline); `df` holds the paired runs' results, `counts` every run."""
    order = baseline_order(ceilings)
    base = order[0]
    sections = [section(compare_devices(df, counts, base, name, evidence=evidence, allowed=allowed), write_svg, slug)
                for name in order[1:]]
    return env.get_template("compare.html").render(title="rooflab: generation comparison", baseline=base,
                                                   sections=sections)
