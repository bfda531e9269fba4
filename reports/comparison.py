"""One comparison, as `rooflab compare` and the report's comparison page both make it: the runs
paired (reports.pairing), each side's results, roofs, raw samples and launch floors, the per-case
table (reports.compare) and its summary. Both callers go through `compare_devices`, so they pair
the same runs and give the same figures."""
from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from rooflab.reports import compare as c
from rooflab.reports.ceilings import compute_ceilings
from rooflab.reports.floors import per_run_floors
from rooflab.reports.pairing import Pairing, SideRuns, pair_runs
from rooflab.reports.runsel import DeviceRuns, rows_for


@dataclass(frozen=True)
class Evidence:
    """What a comparison reads beside the paired results: the raw samples of those results and
    every launch-probe result of the devices (the spread of their launch floors)."""

    samples: Mapping[c.SampleKey, Any] = field(default_factory=dict)
    launch_rows: pd.DataFrame = field(default_factory=pd.DataFrame)


def samples_by_key(frame: pd.DataFrame) -> dict[c.SampleKey, Any]:
    """db.series_query.raw_samples' frame as {(run_id, case_key, device_uuid or ""): samples}."""
    if frame is None or frame.empty:
        return {}
    uuids = frame["device_uuid"].astype(object).where(frame["device_uuid"].notna(), "")
    return {(str(r), str(k), str(u)): s for r, k, u, s in zip(frame["run_id"], frame["case_key"], uuids,
                                                              frame["samples_ms"], strict=True)}


@dataclass(frozen=True)
class Comparison:
    pairing: Pairing
    cases: pd.DataFrame  # reports.compare.compare
    summary: pd.DataFrame
    deviating: pd.DataFrame

    @property
    def baseline(self) -> str:
        return self.pairing.baseline.label

    @property
    def candidate(self) -> str:
        return self.pairing.candidate.label


def _side(df: pd.DataFrame, side: SideRuns, samples: Mapping[c.SampleKey, Any]) -> c.Side:
    rows = df[df["device_name"] == side.device_name] if not df.empty else df
    plan = DeviceRuns(side.device_name, side.runs, side.roof_runs, "pairing", 0)
    shown, roof_rows = rows_for(rows, plan)
    wanted = set(side.runs)
    own = {k: v for k, v in samples.items() if k[0] in wanted}
    return c.Side(side.label, side.device_name, shown, compute_ceilings(roof_rows, side.device_name), side.runs, own)


def launch_rows_of(df: pd.DataFrame) -> pd.DataFrame:
    """The launch-probe rows of a results frame (the evidence's launch rows when nothing else is read)."""
    return df[df["op"] == "launch"] if not df.empty and "op" in df.columns else pd.DataFrame()


def compare_devices(df: pd.DataFrame, counts: pd.DataFrame, baseline: str, candidate: str, *,
                    evidence: Evidence | None = None, allowed: Collection[str] | None = None,
                    deviating: int = 15) -> Comparison:
    """The comparison of `candidate` against `baseline` (run ids or devices): `df` holds the results
    of (at least) the paired runs and their roof runs, `counts` the runs to pair from
    (db.query.result_counts or reports.runsel.counts_of). ReportInputError for a side that names nothing."""
    pairing = pair_runs(counts, baseline, candidate, allowed=allowed)
    evidence = evidence if evidence is not None else Evidence(launch_rows=launch_rows_of(df))
    base = _side(df, pairing.baseline, evidence.samples)
    cand = _side(df, pairing.candidate, evidence.samples)
    cases = c.compare(base, cand, per_run_floors(evidence.launch_rows))
    return Comparison(pairing, cases, c.summary(cases), c.most_deviating(cases, limit=deviating))
