"""What a comparison reads before it compares: the paired runs' results (`load_comparison_inputs`,
`rooflab compare`; a side may name a physical device, reports.comparisons.device_sides) and the
evidence beside them (`load_evidence`: the raw samples, the launch-probe results, the case runs
and the recent runs' trustworthy results; the report's comparison page reads
it too, reports.pages.report_inputs). The runs are paired from the history's run counts and case
runs (reports.data.run_counts, reports.comparisons.pairing) before any result is read.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from rooflab.db.handle import Db
from rooflab.db.query import device_hosts, results
from rooflab.db.series_query import case_keys, history_columns, raw_samples
from rooflab.reports.comparisons.compare_devices import Evidence, samples_by_key
from rooflab.reports.comparisons.device_sides import DeviceSide, physical_sides, relabelled, with_device_sides
from rooflab.reports.comparisons.pairing import pair_runs
from rooflab.reports.comparisons.run_spread import READ_COLUMNS, recent_runs, trusted_rows
from rooflab.reports.data.reads import REPORT_COLUMNS, nothing_stored
from rooflab.reports.data.run_counts import counts_from_history, newest_ok_runs
from rooflab.reports.roofs.launch_floors import FLOOR_COLUMNS, LAUNCH_OP


def load_evidence(url: Db, runs: Sequence[str], devices: Sequence[str], case_runs: pd.DataFrame | None,
                  counts: pd.DataFrame, sides: Sequence[DeviceSide] = ()) -> Evidence:
    """The raw samples of the results of `runs`, every launch-probe result of `devices`, the case
    runs, and the trustworthy results of the devices' recent runs (counts: the run counts); the
    physical devices `sides` stand under their own names in each (device_sides.relabelled)."""
    samples = samples_by_key(raw_samples(url, run_id=list(runs))) if runs else {}
    keys = case_keys(url, op=LAUNCH_OP)
    launch = (relabelled(results(url, case_key=keys, columns=FLOOR_COLUMNS), sides) if keys
              else pd.DataFrame(columns=FLOOR_COLUMNS))
    recent = recent_runs(counts, list(devices))
    recent_rows = (trusted_rows(relabelled(results(url, run_id=recent, columns=READ_COLUMNS), sides)) if recent
                   else None)
    return Evidence(samples, launch[launch["device_name"].isin(list(devices))], case_runs, recent_rows)


HOST_RUNS = 100  # a physical side's host: the one its newest run among these names, else its newest run's host


@dataclass(frozen=True)
class ComparisonInputs:
    """What `rooflab compare` reads: the results of the paired runs and their roof runs, the run
    counts, the evidence, and the name each side is paired by (a physical device's label,
    reports.comparisons.device_sides; else the side as given)."""

    results: pd.DataFrame
    counts: pd.DataFrame
    evidence: Evidence
    names: dict[str, str]
    physical: tuple[DeviceSide, ...] = ()


def load_comparison_inputs(url: Db, baseline: str, candidate: str) -> ComparisonInputs:
    """`rooflab compare`'s inputs (ComparisonInputs): the results are paired from the history's run
    counts and case runs (reports.comparisons.pairing) before any of them is read; a side that names
    a physical device (its key) stands beside its model under a name of its own."""
    names = {baseline: baseline, candidate: candidate}
    if nothing_stored(url):
        return ComparisonInputs(pd.DataFrame(), pd.DataFrame(), Evidence(), names)
    everything = history_columns(url, keys_only=True, devices=True)
    counts = counts_from_history(everything)
    texts = [t for t in (baseline, candidate) if t not in set(counts["run_id"].astype(str))]
    newest = everything.runs["run_id"].astype(str).tolist()[-HOST_RUNS:]
    sides = physical_sides(everything, texts, device_hosts(url, newest))
    if sides:
        everything = with_device_sides(everything, list(sides.values()))
        counts = counts_from_history(everything)
        names.update({text: side.label for text, side in sides.items()})
    named = set(counts["run_id"].astype(str)) & {baseline, candidate}  # a side named by its run
    case_runs = newest_ok_runs(everything, named=named)
    del everything
    physical = tuple(sides.values())
    labels = [s.label for s in physical]
    pairing = pair_runs(counts, case_runs, names[baseline], names[candidate], physical=labels)
    df = relabelled(results(url, run_id=pairing.runs(), columns=REPORT_COLUMNS), physical)
    both = pairing.baseline.runs + pairing.candidate.runs
    evidence = load_evidence(url, both, [pairing.baseline.device_name, pairing.candidate.device_name], case_runs,
                             counts, physical)
    return ComparisonInputs(df, counts, evidence, names, physical)
