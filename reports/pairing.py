"""Which runs a comparison pairs: the one rule `rooflab compare` and the report's comparison page share.

A side is a run id (exact) or a device (reports.frames.select_device: name, fingerprint prefix,
kind, part of the name).

- A side named by a run: that run.
- A device against a device: the suites (specs) both have run; on each side, the newest run of
  each of those suites. Runs of one spec hold the same cases at the same sizes with the same timing
  settings, so like is compared with like, and each side's roofs come from the same session as its
  cases. A case measured in several paired runs of a side is compared in the newest of them.
  Without a suite in common: each device's newest run.
- A device against a run: the device's newest run of that run's suite, else its newest run.

`allowed` (the report's --run or --since) restricts the runs a device side may use. Each side's
roofs come from its paired runs when they hold roof-setting results, else from the newest earlier
run of that device that does (reports.runsel, the device pages' rule). Everything here works on a
counts frame (db.query.result_counts, or reports.runsel.counts_of a results frame), so the runs are
chosen before any result is read.
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import pandas as pd

from rooflab.reports.errors import ReportInputError
from rooflab.reports.frames import select_device
from rooflab.reports.runsel import choose_runs


@dataclass(frozen=True)
class SideRuns:
    """The runs one side of a comparison draws its results and roofs from."""

    label: str  # the device name, or "run RUN_ID"
    device_name: str
    runs: tuple[str, ...]  # newest first
    suites: tuple[str, ...]  # the suite of each of `runs`
    roof_runs: tuple[str, ...]

    def describe(self) -> str:
        runs = ", ".join(f"{r} ({s})" for r, s in zip(self.runs, self.suites, strict=True))
        roofs = "" if set(self.roof_runs) <= set(self.runs) else f"; roofs from {', '.join(self.roof_runs)}"
        return f"{self.label}: {runs}{roofs}"

    def as_dict(self) -> dict:
        return {"label": self.label, "device_name": self.device_name, "runs": list(self.runs),
                "suites": list(self.suites), "roof_runs": list(self.roof_runs)}


@dataclass(frozen=True)
class Pairing:
    """The runs of both sides, and why these."""

    baseline: SideRuns
    candidate: SideRuns
    reason: str

    def runs(self) -> list[str]:
        """Every run the comparison reads (cases and roofs of both sides)."""
        sides = (self.baseline, self.candidate)
        return sorted({r for s in sides for r in s.runs + s.roof_runs})

    def describe(self) -> str:
        return f"baseline {self.baseline.describe()}; candidate {self.candidate.describe()}. Why: {self.reason}"

    def as_dict(self) -> dict:
        return {"baseline": self.baseline.as_dict(), "candidate": self.candidate.as_dict(), "reason": self.reason}


@dataclass(frozen=True)
class _Named:
    """A side as the user named it: a run, or a device (and its runs, newest first)."""

    text: str
    device_name: str
    run: str | None
    runs: pd.DataFrame  # run_id, run_order, suite of the device's runs, newest first


def _device_runs(counts: pd.DataFrame, name: str, allowed: Collection[str] | None) -> pd.DataFrame:
    rows = counts[counts["device_name"] == name]
    if allowed is not None:
        rows = rows[rows["run_id"].isin(list(allowed))]
    runs = rows.drop_duplicates("run_id")[["run_id", "run_order", "suite"]]
    return runs.assign(run_order=pd.to_numeric(runs["run_order"], errors="coerce")).sort_values(
        ["run_order", "run_id"], ascending=False, kind="stable").reset_index(drop=True)


def _resolve(counts: pd.DataFrame, text: str, option: str, allowed: Collection[str] | None) -> _Named:
    run_ids = set(counts["run_id"].astype(str)) if not counts.empty else set()
    if text in run_ids:
        names = sorted(counts.loc[counts["run_id"].astype(str) == text, "device_name"].dropna().astype(str).unique())
        if len(names) != 1:
            raise ReportInputError(f"{option}: run {text!r} measured several devices ({', '.join(names)}); "
                                   "name one device")
        runs = _device_runs(counts, names[0], None)
        return _Named(text, names[0], text, runs[runs["run_id"] == text])
    try:
        name, _ = select_device(counts, text)
    except ReportInputError as exc:
        newest = (counts.sort_values("run_order")["run_id"].astype(str).drop_duplicates().tail(10).tolist()
                  if not counts.empty else [])
        raise ReportInputError(f"{option}: {exc}; or a run id: {', '.join(newest) or 'none'}") from None
    runs = _device_runs(counts, name, allowed)
    if runs.empty:
        raise ReportInputError(f"{option}: {name} has no results in the chosen runs")
    return _Named(text, name, None, runs)


def _newest_of_suites(runs: pd.DataFrame, suites: Collection[str]) -> pd.DataFrame:
    """The newest run of each of `suites` (runs come newest first), newest first."""
    return runs[runs["suite"].isin(list(suites))].drop_duplicates("suite")


def pair_runs(counts: pd.DataFrame, baseline: str, candidate: str, *,
              allowed: Collection[str] | None = None) -> Pairing:
    """The runs `rooflab compare --baseline B --candidate C` and the comparison page pair (see the
    module doc). ReportInputError for a side that names nothing, or one device against itself."""
    base = _resolve(counts, baseline, "--baseline", allowed)
    cand = _resolve(counts, candidate, "--candidate", allowed)
    if base.run is None and cand.run is None:
        if base.device_name == cand.device_name:
            raise ReportInputError(f"--baseline and --candidate both name {base.device_name}: to compare a device "
                                   "with itself, name two of its runs")
        common = sorted(set(base.runs["suite"]) & set(cand.runs["suite"]))
        if common:
            b, c = _newest_of_suites(base.runs, common), _newest_of_suites(cand.runs, common)
            reason = (f"the newest run of each suite both devices ran ({', '.join(common)}): the same spec on both "
                      "sides, so the same cases and timing settings")
        else:
            b, c = base.runs.head(1), cand.runs.head(1)
            reason = "the two devices ran no suite in common: each device's newest run"
    elif base.run is not None and cand.run is not None:
        b, c, reason = base.runs, cand.runs, "the runs named"
    else:
        named, device = (base, cand) if base.run is not None else (cand, base)
        suite = str(named.runs["suite"].iloc[0])
        chosen = _newest_of_suites(device.runs, [suite])
        if chosen.empty:
            chosen = device.runs.head(1)
            why = f"the run named; {device.device_name} never ran its suite ({suite}): its newest run"
        else:
            why = f"the run named, and the newest {device.device_name} run of its suite ({suite})"
        b, c, reason = (named.runs, chosen, why) if named is base else (chosen, named.runs, why)
    return Pairing(_side(counts, base, b), _side(counts, cand, c), reason)


def _side(counts: pd.DataFrame, named: _Named, runs: pd.DataFrame) -> SideRuns:
    run_ids = tuple(runs["run_id"].astype(str))
    plan = choose_runs(counts[counts["device_name"] == named.device_name], runs=list(run_ids))[named.device_name]
    label = f"run {named.run}" if named.run is not None else named.device_name
    return SideRuns(label, named.device_name, run_ids, tuple(runs["suite"].astype(str)), plan.roof_runs)


def comparison_runs(counts: pd.DataFrame, allowed: Collection[str] | None = None) -> tuple[list[str], list[str]]:
    """(every run a comparison between two devices of `counts` reads: cases and roofs; the runs
    whose cases it compares), over every ordered pair of devices: what a report reads before it
    knows which device is its baseline."""
    if counts.empty:
        return [], []
    names = sorted(counts["device_name"].dropna().astype(str).unique())
    runs: set[str] = set()
    sides: set[str] = set()
    for a in names:
        for b in names:
            if a == b:
                continue
            try:
                pairing = pair_runs(counts, a, b, allowed=allowed)
            except ReportInputError:  # a device without a run in the chosen ones
                continue
            runs |= set(pairing.runs())
            sides |= set(pairing.baseline.runs + pairing.candidate.runs)
    return sorted(runs), sorted(sides)
