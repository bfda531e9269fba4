"""Which runs a device page (and `rooflab roofline`) shows, and which runs its roofs come from.

By default a device shows its newest run (by run order: start time, then run id) and nothing
else, so that every point and every roof on the page belongs to one measurement session; results
imported from a peer tool (nccl-tests, nvbench, BabelStream: runners/peer_import) add the newest
run of each such tool, marked as theirs on the page. `runs`
(run ids) or `since` (runs started at or after a date) choose otherwise; the history of a case
across runs has its own page (regressions).

Roofs come from the shown runs when they hold roof-setting results (the probes and GEMMs, see
reports.roofs.ceilings.ROOF_OPS); otherwise from the newest run on that device, started no later than
the newest shown run, that holds them (a nightly spec without probes is held against the last
roofline run). The page names both.

Everything here works on a counts frame (reports.data.run_counts), so a report can choose runs
before it reads any result.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from rooflab.db.timeparse import Since, parse_since
from rooflab.reports.errors import ReportInputError
from rooflab.reports.roofs.ceilings import ROOF_FAMILIES, ROOF_OPS
from rooflab.vocab import ResultStatus, Tool


@dataclass(frozen=True)
class DeviceRuns:
    device_name: str
    shown: tuple[str, ...]  # runs whose results the page shows, newest first
    roof_runs: tuple[str, ...]  # runs the ceilings are computed from
    chosen_by: str  # "newest", "run" or "since"
    other_runs: int  # runs of this device that are not shown

    @property
    def roofs_elsewhere(self) -> bool:
        return not set(self.roof_runs) <= set(self.shown)


def newest_of_each_tool(dev: pd.DataFrame, runs_newest_first: list[str]) -> list[str]:
    """The newest run of rooflab's own and the newest imported run of each peer tool (an import's
    run has the tool's name as its suite, runners/peer_import/results.py), newest first: a device
    page shows a cluster's nccl-tests or BabelStream figures beside rooflab's latest run."""
    peers = {str(t) for t in Tool} - {str(Tool.ROOFLAB)}
    kind_of = {str(r): (str(s) if str(s) in peers else str(Tool.ROOFLAB))
               for r, s in zip(dev["run_id"], dev["suite"], strict=True)}
    shown: dict[str, str] = {}
    for run in runs_newest_first:
        shown.setdefault(kind_of[run], run)
    return [r for r in runs_newest_first if r in set(shown.values())]


def _roof_mask(counts: pd.DataFrame) -> pd.Series:
    return (counts["status"] == ResultStatus.OK) & (counts["op"].isin(ROOF_OPS) | counts["family"].isin(ROOF_FAMILIES))


def choose_runs(counts: pd.DataFrame, *, runs: Sequence[str] | None = None,
                since: Since = None) -> dict[str, DeviceRuns]:
    """device name -> the runs its page shows and the runs its roofs come from (see the module doc).

    Raises ReportInputError for a run id without results, or a `since` that leaves no run."""
    if counts.empty:
        return {}
    order = pd.to_numeric(counts["run_order"], errors="coerce")
    counts = counts.assign(_order=order)
    chosen_by = "newest"
    if runs:
        known = set(counts["run_id"].astype(str))
        unknown = [r for r in runs if r not in known]
        if unknown:
            newest = counts.sort_values("_order")["run_id"].drop_duplicates().tail(5).tolist()[::-1]
            raise ReportInputError(f"--run: no results in run(s) {', '.join(unknown)}; newest runs: "
                                   f"{', '.join(map(str, newest))}")
        pick = counts["run_id"].isin(list(runs))
        chosen_by = "run"
    elif since is not None:
        start = parse_since(since)
        pick = pd.to_datetime(counts["started_at"], utc=True) >= start
        if not pick.any():
            raise ReportInputError(f"--since {since}: no run started at or after {start:%Y-%m-%d %H:%M} UTC")
        chosen_by = "since"
    else:
        pick = None
    roof = _roof_mask(counts)
    out: dict[str, DeviceRuns] = {}
    for name, dev in counts.groupby("device_name", sort=True):
        all_runs = dev.sort_values("_order", ascending=False)["run_id"].drop_duplicates().tolist()
        if pick is None:
            shown = newest_of_each_tool(dev, all_runs)
        else:
            chosen = set(dev.loc[pick[dev.index], "run_id"])
            shown = [r for r in all_runs if r in chosen]
        if not shown:
            continue
        with_roofs = dev[roof[dev.index]]
        roof_runs = [r for r in shown if r in set(with_roofs["run_id"])]
        if not roof_runs:
            newest_shown = dev.loc[dev["run_id"] == shown[0], "_order"].max()
            earlier = with_roofs[with_roofs["_order"] <= newest_shown].sort_values("_order", ascending=False)
            roof_runs = earlier["run_id"].head(1).tolist()
        out[str(name)] = DeviceRuns(str(name), tuple(shown), tuple(roof_runs), chosen_by, len(all_runs) - len(shown))
    return out


def rows_for(rows: pd.DataFrame, plan: DeviceRuns) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(shown rows, rows the ceilings are computed from) of one device's results: the shown runs,
    plus the roof-setting results of a roof run that is not shown."""
    shown = rows[rows["run_id"].isin(plan.shown)]
    extra_runs = [r for r in plan.roof_runs if r not in plan.shown]
    if not extra_runs:
        return shown, shown
    extra = rows[rows["run_id"].isin(extra_runs)]
    extra = extra[extra["op"].isin(ROOF_OPS) | extra["family"].isin(ROOF_FAMILIES)]
    return shown, pd.concat([shown, extra])


def needed_runs(plans: dict[str, DeviceRuns]) -> list[str]:
    """Every run a report with these plans reads."""
    return sorted({r for p in plans.values() for r in p.shown + p.roof_runs})


def chosen_runs(plans: dict[str, DeviceRuns], runs: Sequence[str] | None, since: Since) -> set[str] | None:
    """The runs a report was told to show (--run, --since), None when it shows each device's newest."""
    if not runs and since is None:
        return None
    return {r for p in plans.values() for r in p.shown}
