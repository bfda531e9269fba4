"""One comparison, as `rooflab compare` and the report's comparison page both make it: the runs
paired (reports.comparisons.pairing), each side's results, roofs, raw samples and launch floors, the per-case
table (reports.comparisons.speedup_table) and its summary. Both callers go through `compare_devices`, so they pair
the same runs and give the same figures."""
from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from rooflab.reports.comparisons import speedup_table as c
from rooflab.reports.comparisons.device_sides import median_devices
from rooflab.reports.comparisons.pairing import Pairing, SideRuns, pair_runs
from rooflab.reports.comparisons.run_spread import estimate_spreads, trusted_rows
from rooflab.reports.data.run_counts import case_runs_of
from rooflab.reports.roofs.ceilings import ROOF_FAMILIES, ROOF_OPS, compute_ceilings
from rooflab.reports.roofs.launch_floors import LAUNCH_OP, per_run_floors


@dataclass(frozen=True)
class Evidence:
    """What a comparison reads beside the paired results: the raw samples of those results, every
    launch-probe result of the devices (the spread of their launch floors), the newest ok run
    of each case per device and suite (reports.data.run_counts' case runs; None: from the results frame),
    and the trustworthy results of the devices' recent runs (reports.comparisons.run_spread: how far a result
    moves from one run to the next; None: from the results frame)."""

    samples: Mapping[c.SampleKey, Any] = field(default_factory=dict)
    launch_rows: pd.DataFrame = field(default_factory=pd.DataFrame)
    case_runs: pd.DataFrame | None = None
    recent_rows: pd.DataFrame | None = None


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
    cases: pd.DataFrame  # reports.comparisons.speedup_table.compare
    summary: pd.DataFrame
    deviating: pd.DataFrame
    devices: Mapping[str, int] = field(default_factory=dict)  # side -> most devices a case's median was taken of

    @property
    def baseline(self) -> str:
        return self.pairing.baseline.label

    @property
    def candidate(self) -> str:
        return self.pairing.candidate.label


def _side(df: pd.DataFrame, side: SideRuns, samples: Mapping[c.SampleKey, Any]) -> c.Side:
    """The side's compared results (each case's paired run), the roofs of the runs they come from
    (as a device page shows them: every result of those runs, plus the fallback roof run's
    roof-setting results) and their raw samples."""
    rows = df[df["device_name"] == side.device_name] if not df.empty else df
    pairs = set(zip(side.cases["run_id"].astype(str), side.cases["case_key"].astype(str), strict=True))
    keep = [(r, k) in pairs for r, k in zip(rows["run_id"].astype(str), rows["case_key"].astype(str), strict=True)]
    compared = median_devices(rows[keep]) if len(rows) else rows  # a model's side: its median device per case
    roof_rows = rows[rows["run_id"].isin(list(side.runs))] if len(rows) else rows
    if side.roof_runs:
        extra = rows[rows["run_id"].isin(list(side.roof_runs))]
        roof_rows = pd.concat([roof_rows, extra[extra["op"].isin(ROOF_OPS) | extra["family"].isin(ROOF_FAMILIES)]])
    own = {k: v for k, v in samples.items() if (k[0], k[1]) in pairs}
    return c.Side(side.label, side.device_name, compared, compute_ceilings(roof_rows, side.device_name), side.runs,
                  own)


def launch_rows_of(df: pd.DataFrame) -> pd.DataFrame:
    """The launch-probe rows of a results frame (the evidence's launch rows when nothing else is read)."""
    return df[df["op"] == LAUNCH_OP] if not df.empty and "op" in df.columns else pd.DataFrame()


def compare_devices(df: pd.DataFrame, counts: pd.DataFrame, baseline: str, candidate: str, *,
                    evidence: Evidence | None = None, allowed: Collection[str] | None = None,
                    deviating: int = 15, physical: Collection[str] = ()) -> Comparison:
    """The comparison of `candidate` against `baseline` (run ids, models, or the names physical
    devices stand under: `physical`, reports.comparisons.device_sides): `df` holds the results
    of (at least) the paired runs and their roof runs, `counts` the runs to pair from
    (db.query.result_counts or reports.data.run_counts.counts_of), `evidence` the raw samples, launch floors
    and case runs (by default those of `df`). ReportInputError for a side that names nothing."""
    evidence = evidence if evidence is not None else Evidence(launch_rows=launch_rows_of(df))
    case_runs = evidence.case_runs if evidence.case_runs is not None else case_runs_of(df)
    pairing = pair_runs(counts, case_runs, baseline, candidate, allowed=allowed, physical=physical)
    base = _side(df, pairing.baseline, evidence.samples)
    cand = _side(df, pairing.candidate, evidence.samples)
    recent = evidence.recent_rows if evidence.recent_rows is not None else trusted_rows(df)
    cases = c.compare(base, cand, per_run_floors(evidence.launch_rows), estimate_spreads(recent))
    devices = {name: int(side.rows["n_devices"].max()) if "n_devices" in side.rows.columns and len(side.rows) else 1
               for name, side in (("baseline", base), ("candidate", cand))}
    return Comparison(pairing, cases, c.summary(cases), c.most_deviating(cases, limit=deviating), devices)
