"""What `rooflab report` reads before it draws (`load_report_inputs`): the history first, in one pass
(db.series_query.history_columns), and the run counts and case runs from it (reports.data.run_counts);
then the runs the device pages show (reports.roofs.shown_runs) and the comparison pairs
(reports.comparisons.pairing) are chosen, and only their results are read, with the comparison's
evidence (reports.comparisons.inputs.load_evidence).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from rooflab.db.handle import Db
from rooflab.db.query import results
from rooflab.db.series_query import history_columns
from rooflab.db.timeparse import Since
from rooflab.reports.comparisons.compare_devices import Evidence
from rooflab.reports.comparisons.inputs import load_evidence
from rooflab.reports.comparisons.pairing import comparison_runs
from rooflab.reports.data.reads import REPORT_COLUMNS, nothing_stored
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
    every series' points (the history pages; `rooflab report` has them drawn in a process of its own)."""
    if nothing_stored(url):
        return ReportInputs(pd.DataFrame(), pd.DataFrame(), None, Evidence())
    everything = history_columns(url, keys_only=not with_history)
    counts = counts_from_history(everything)
    plans = choose_runs(counts, runs=runs, since=since)
    allowed = chosen_runs(plans, runs, since)
    devices = sorted(counts["device_name"].dropna().astype(str).unique())
    case_runs = newest_ok_runs(everything, allowed) if len(devices) > 1 else None
    history = HistoryData(everything.tables_only(), series_points(everything)) if with_history else None
    del everything  # every result's columns: the points and the small tables are all the pages need
    compared, sides = comparison_runs(counts, case_runs, allowed) if case_runs is not None else ([], [])
    wanted = sorted(set(needed_runs(plans)) | set(compared))
    df = results(url, run_id=wanted, columns=columns) if wanted else pd.DataFrame()
    evidence = load_evidence(url, sides, devices, case_runs, counts) if case_runs is not None else Evidence()
    return ReportInputs(df, counts, history, evidence)
