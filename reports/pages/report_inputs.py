"""What `rooflab report` reads before it draws (`load_report_inputs`): the history first, in one pass
(db.series_query.history_columns), and the run counts and case runs from it (reports.data.run_counts);
then the runs the device pages show (reports.roofs.shown_runs) and the comparison pairs
(reports.comparisons.pairing) are chosen, and only their results are read, with the comparison's
evidence (reports.comparisons.inputs.load_evidence). A fleet's history (reports.data.reads.fleet_sized)
without its points is not read whole: the run counts are grouped in the database
(db.query.result_counts) and the case runs read from the runs shown only, or from every result's keys
where the report shows each model's newest runs and compares models.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from rooflab.db.handle import Db
from rooflab.db.query import result_counts, results
from rooflab.db.series_query import history_columns
from rooflab.db.timeparse import Since
from rooflab.reports.comparisons.compare_devices import Evidence
from rooflab.reports.comparisons.inputs import load_evidence
from rooflab.reports.comparisons.pairing import comparison_runs
from rooflab.reports.data.reads import REPORT_COLUMNS, fleet_sized, nothing_stored
from rooflab.reports.data.run_counts import counts_from_history, newest_ok_runs
from rooflab.reports.regressions.history_points import HistoryData, series_points
from rooflab.reports.roofs.shown_runs import choose_runs, chosen_runs, needed_runs


@dataclass(frozen=True)
class ReportInputs:
    """What `rooflab report` reads before it draws: the results of the runs its pages show (device
    pages and comparison), the run counts, the history (empty when the database is) and the
    comparison's raw samples and launch floors."""

    results: pd.DataFrame
    counts: pd.DataFrame
    history: HistoryData | None
    evidence: Evidence


def load_report_inputs(url: Db, *, runs: Sequence[str] | None = None, since: Since = None,
                       columns: Sequence[str] = REPORT_COLUMNS, with_history: bool = True) -> ReportInputs:
    """The report's inputs: the history is read first (in one pass, db.series_query.history_columns)
    and the run counts come from it; then the runs are chosen (reports.roofs.shown_runs for the device pages,
    reports.comparisons.pairing for the comparison) and only their results are read. `with_history`: also
    every series' points (the history pages; `rooflab report` has them drawn in a process of its own).
    Without them, a fleet's history is not read whole (the module doc)."""
    if nothing_stored(url):
        return ReportInputs(pd.DataFrame(), pd.DataFrame(), None, Evidence())
    everything = None
    if not with_history and fleet_sized(url):
        counts = result_counts(url)  # one grouped query: every result's keys are gigabytes and minutes there
    else:
        everything = history_columns(url, keys_only=not with_history)
        counts = counts_from_history(everything)
    plans = choose_runs(counts, runs=runs, since=since)
    allowed = chosen_runs(plans, runs, since)
    devices = sorted(counts["device_name"].dropna().astype(str).unique())
    case_runs = None
    if len(devices) > 1:  # the comparison pairs by each case's newest ok run: of the runs shown, when chosen
        keys = everything if everything is not None else history_columns(
            url, keys_only=True, runs=sorted(allowed) if allowed is not None else None)
        case_runs = newest_ok_runs(keys, allowed)
        del keys
    history = (HistoryData(everything.tables_only(), series_points(everything))
               if with_history and everything is not None else None)
    del everything  # every result's columns: the points and the small tables are all the pages need
    compared, sides = comparison_runs(counts, case_runs, allowed) if case_runs is not None else ([], [])
    wanted = sorted(set(needed_runs(plans)) | set(compared))
    df = results(url, run_id=wanted, columns=columns) if wanted else pd.DataFrame()
    evidence = load_evidence(url, sides, devices, case_runs, counts) if case_runs is not None else Evidence()
    return ReportInputs(df, counts, history, evidence)
