"""What a comparison reads before it compares: the paired runs' results (`load_comparison_inputs`,
`rooflab compare`) and the evidence beside them (`load_evidence`: the raw samples, the launch-probe
results, the case runs and the recent runs' trustworthy results; the report's comparison page reads
it too, reports.pages.report_inputs). The runs are paired from the history's run counts and case
runs (reports.data.run_counts, reports.comparisons.pairing) before any result is read.
"""
from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from rooflab.db.handle import Db
from rooflab.db.query import results
from rooflab.db.series_query import case_keys, history_columns, raw_samples
from rooflab.reports.comparisons.compare_devices import Evidence, samples_by_key
from rooflab.reports.comparisons.pairing import pair_runs
from rooflab.reports.comparisons.run_spread import READ_COLUMNS, recent_runs, trusted_rows
from rooflab.reports.data.reads import REPORT_COLUMNS, nothing_stored
from rooflab.reports.data.run_counts import counts_from_history, newest_ok_runs
from rooflab.reports.roofs.launch_floors import FLOOR_COLUMNS, LAUNCH_OP


def load_evidence(url: Db, runs: Sequence[str], devices: Sequence[str], case_runs: pd.DataFrame | None,
                  counts: pd.DataFrame) -> Evidence:
    """The raw samples of the results of `runs`, every launch-probe result of `devices`, the case
    runs, and the trustworthy results of the devices' recent runs (counts: the run counts)."""
    samples = samples_by_key(raw_samples(url, run_id=list(runs))) if runs else {}
    keys = case_keys(url, op=LAUNCH_OP)
    launch = results(url, case_key=keys, columns=FLOOR_COLUMNS) if keys else pd.DataFrame(columns=FLOOR_COLUMNS)
    recent = recent_runs(counts, list(devices))
    recent_rows = trusted_rows(results(url, run_id=recent, columns=READ_COLUMNS)) if recent else None
    return Evidence(samples, launch[launch["device_name"].isin(list(devices))], case_runs, recent_rows)


def load_comparison_inputs(url: Db, baseline: str, candidate: str) -> tuple[pd.DataFrame, pd.DataFrame, Evidence]:
    """(results of the paired runs and their roof runs, run counts, evidence) of `rooflab compare`:
    the results are paired from the history's run counts and case runs (reports.comparisons.pairing) before
    any of them is read."""
    if nothing_stored(url):
        return pd.DataFrame(), pd.DataFrame(), Evidence()
    everything = history_columns(url, keys_only=True)
    counts = counts_from_history(everything)
    named = set(counts["run_id"].astype(str)) & {baseline, candidate}  # a side named by its run
    case_runs = newest_ok_runs(everything, named=named)
    del everything
    pairing = pair_runs(counts, case_runs, baseline, candidate)
    df = results(url, run_id=pairing.runs(), columns=REPORT_COLUMNS)
    sides = pairing.baseline.runs + pairing.candidate.runs
    evidence = load_evidence(url, sides, [pairing.baseline.device_name, pairing.candidate.device_name], case_runs,
                             counts)
    return df, counts, evidence
