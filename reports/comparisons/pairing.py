"""Which results a comparison pairs: the one rule `rooflab compare` and the report's comparison page share.

A side is a run id (exact), a physical device (its device key: reports.comparisons.device_sides,
which stands it beside its model under a name of its own) or a model (reports.data.frames.select_device:
name, fingerprint prefix, kind, part of the name; the median device of each case: device_sides).

- A side named by a run: that run's results.
- A device against a device: the suites (specs) both have run. On each side, each case is taken
  from its newest ok result in a run of those suites: the same spec on both sides, so the same
  sizes and timing settings, and a run that repeated a few cases of a suite (`-f op=matmul`) does
  not hide the rest of it. Without a suite in common: each case's newest ok result on the device.
- A device against a run: the device's results in runs of that run's suite (else all its runs),
  each case's newest.

`allowed` (the report's --run or --since) restricts the runs a device side may draw from. Each
side's roofs come from the runs its compared results come from, as a device page showing those
runs has them; when they hold no roof-setting result (a nightly spec without probes), from the
newest run of that device, started no later than the newest run compared, that does
(reports.roofs.shown_runs, the device pages' rule).

Everything works on two small frames (reports.data.run_counts): the run counts and the runs holding
an ok result of each case per device and suite (`case_runs`: at least the newest of them, and every
one of a run named), so the results are chosen before any of them is read.
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import pandas as pd

from rooflab.reports.data.frames import select_device
from rooflab.reports.errors import ReportInputError
from rooflab.reports.roofs.shown_runs import choose_runs


@dataclass(frozen=True)
class SideRuns:
    """The results one side of a comparison compares: a run per case."""

    label: str  # the device name, or "run RUN_ID"
    device_name: str
    cases: pd.DataFrame  # case_key, run_id: the result of each case the side compares
    runs: tuple[str, ...]  # the runs those results come from, newest first
    suites: tuple[str, ...]  # the suite of each of `runs`
    roof_runs: tuple[str, ...]  # where the roofs come from when `cases` holds no roof-setting result

    def describe(self) -> str:
        n = self.cases.groupby("run_id").size() if not self.cases.empty else pd.Series(dtype=int)
        runs = ", ".join(f"{r} ({s}, {int(n.get(r, 0))} cases)" for r, s in zip(self.runs, self.suites, strict=True))
        return f"{self.label}: {runs or 'no run'}"

    def as_dict(self) -> dict:
        n = self.cases.groupby("run_id").size() if not self.cases.empty else pd.Series(dtype=int)
        return {"label": self.label, "device_name": self.device_name, "runs": list(self.runs),
                "suites": list(self.suites), "cases_per_run": {r: int(n.get(r, 0)) for r in self.runs},
                "roof_runs": list(self.roof_runs)}


@dataclass(frozen=True)
class Pairing:
    """The results of both sides, and why these."""

    baseline: SideRuns
    candidate: SideRuns
    reason: str

    def runs(self) -> list[str]:
        """Every run the comparison reads (the compared results and the fallback roofs of both sides)."""
        sides = (self.baseline, self.candidate)
        return sorted({r for s in sides for r in s.runs + s.roof_runs})

    def describe(self) -> str:
        return f"baseline {self.baseline.describe()}; candidate {self.candidate.describe()}. Why: {self.reason}"

    def as_dict(self) -> dict:
        return {"baseline": self.baseline.as_dict(), "candidate": self.candidate.as_dict(), "reason": self.reason}


@dataclass(frozen=True)
class _Named:
    text: str
    device_name: str
    run: str | None  # the run named, or None for a device


def _resolve(counts: pd.DataFrame, text: str, option: str, physical: Collection[str] = ()) -> _Named:
    run_ids = set(counts["run_id"].astype(str)) if not counts.empty else set()
    if text in run_ids:
        names = sorted(set(counts.loc[counts["run_id"].astype(str) == text, "device_name"].dropna().astype(str))
                       - set(physical))  # a physical device side stands beside its model: not one more device
        if len(names) != 1:
            raise ReportInputError(f"{option}: run {text!r} measured several devices ({', '.join(names)}); "
                                   "name one device")
        return _Named(text, names[0], text)
    others = counts[~counts["device_name"].isin(list(physical)) | (counts["device_name"] == text)]
    try:
        name, _ = select_device(others, text)  # a model is named by its own names, not by a device beside it
    except ReportInputError as exc:
        newest = (counts.sort_values("run_order")["run_id"].astype(str).drop_duplicates().tail(10).tolist()
                  if not counts.empty else [])
        raise ReportInputError(f"{option}: {exc}; or a run id: {', '.join(newest) or 'none'}") from None
    return _Named(text, name, None)


def _suites(counts: pd.DataFrame, named: _Named, allowed: Collection[str] | None) -> set[str]:
    rows = counts[counts["device_name"] == named.device_name]
    if named.run is not None:
        rows = rows[rows["run_id"] == named.run]
    elif allowed is not None:
        rows = rows[rows["run_id"].isin(list(allowed))]
    return set(rows["suite"].dropna().astype(str))


def _newest_cases(case_runs: pd.DataFrame, named: _Named, suites: set[str] | None,
                  allowed: Collection[str] | None) -> pd.DataFrame:
    """case_key, run_id, run_order, suite of each case's newest ok result on this side."""
    rows = case_runs[case_runs["device_name"] == named.device_name]
    if named.run is not None:
        rows = rows[rows["run_id"] == named.run]
    else:
        if allowed is not None:
            rows = rows[rows["run_id"].isin(list(allowed))]
        if suites is not None:
            rows = rows[rows["suite"].isin(list(suites))]
    rows = rows.sort_values(["run_order", "run_id"]).drop_duplicates("case_key", keep="last")
    return rows[["case_key", "run_id", "run_order", "suite"]].reset_index(drop=True)


def pair_runs(counts: pd.DataFrame, case_runs: pd.DataFrame, baseline: str, candidate: str, *,
              allowed: Collection[str] | None = None, physical: Collection[str] = ()) -> Pairing:
    """The results `rooflab compare --baseline B --candidate C` and the comparison page pair (see
    the module doc); `physical`: the names under which physical devices stand beside their models
    (reports.comparisons.device_sides). ReportInputError for a side that names nothing, or a device
    against itself."""
    base = _resolve(counts, baseline, "--baseline", physical)
    cand = _resolve(counts, candidate, "--candidate", physical)
    if base.run is None and cand.run is None and base.device_name == cand.device_name:
        raise ReportInputError(f"--baseline and --candidate both name {base.device_name}: to compare a device "
                               "with itself, name two of its runs")
    b_suites, c_suites = _suites(counts, base, allowed), _suites(counts, cand, allowed)
    common = sorted(b_suites & c_suites)
    if base.run is not None and cand.run is not None:
        reason, suites = "the runs named", None
    elif common:
        named = [s.run for s in (base, cand) if s.run is not None]
        reason = (f"each case's newest ok result in the runs of the suite{'s' if len(common) > 1 else ''} both sides "
                  f"ran ({', '.join(common)}): the same spec on both sides, so the same sizes and timing settings"
                  + (f"; the run named is {named[0]}" if named else ""))
        suites = set(common)
    else:
        reason, suites = "the two sides ran no suite in common: each case's newest ok result", None
    sides = [_side(counts, named, _newest_cases(case_runs, named, suites, allowed)) for named in (base, cand)]
    return Pairing(sides[0], sides[1], reason)


def _side(counts: pd.DataFrame, named: _Named, cases: pd.DataFrame) -> SideRuns:
    runs = cases.drop_duplicates("run_id").sort_values(["run_order", "run_id"], ascending=False)
    run_ids = tuple(runs["run_id"].astype(str))
    roof_runs: tuple[str, ...] = ()
    if run_ids:
        plan = choose_runs(counts[counts["device_name"] == named.device_name], runs=list(run_ids))[named.device_name]
        roof_runs = tuple(r for r in plan.roof_runs if r not in run_ids)
    label = f"run {named.run}" if named.run is not None else named.device_name
    return SideRuns(label, named.device_name, cases[["case_key", "run_id"]], run_ids,
                    tuple(runs["suite"].astype(str)), roof_runs)


def comparison_runs(counts: pd.DataFrame, case_runs: pd.DataFrame,
                    allowed: Collection[str] | None = None) -> tuple[list[str], list[str]]:
    """(every run a comparison between two devices of `counts` reads: compared results and roofs;
    the runs of the compared results), over every ordered pair of devices: what a report reads
    before it knows which device is its baseline."""
    if counts.empty:
        return [], []
    names = sorted(counts["device_name"].dropna().astype(str).unique())
    runs: set[str] = set()
    sides: set[str] = set()
    for a in names:
        for b in names:
            if a == b:
                continue
            pairing = pair_runs(counts, case_runs, a, b, allowed=allowed)
            runs |= set(pairing.runs())
            sides |= set(pairing.baseline.runs + pairing.candidate.runs)
    return sorted(runs), sorted(sides)
