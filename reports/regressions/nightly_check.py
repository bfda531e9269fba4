"""The regression check of one run against the history: what `rooflab nightly` judges a night by.

`check_history` finds the series (each case on each device, or by model on each device
fingerprint) the run measured, judges each on
the history up to that run (reports.regressions.database_check) and keeps the verdicts whose newest point is the
run itself. It reads the database and judges; running the suite and writing the report are the
caller's (runners.cluster.nightly).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rooflab.db.query import results, run_ids
from rooflab.reports.data.devices import series_ids
from rooflab.reports.regressions.database_check import detect_in_database
from rooflab.reports.regressions.options import RegressionOptions
from rooflab.reports.regressions.series import DETECT_COLUMNS, detect
from rooflab.reports.regressions.verdicts import DRIFT, FLAG_KINDS, Verdict
from rooflab.vocab import ResultStatus, SeriesBy

# what the check reads of the run itself: its results' statuses and the series they belong to
RUN_COLUMNS = ("case_key", "device_fingerprint", "device_uuid", "host", "device_name", "tool", "status")


@dataclass(frozen=True)
class HistoryCheck:
    """The verdicts of the series a run measured, and the run's results by status."""

    verdicts: Mapping[str, tuple[Mapping[str, Any], ...]]  # FLAG_KINDS -> SeriesVerdict.as_dict() rows
    series_checked: int
    insufficient_data: int  # series without enough history to judge
    counts: Mapping[str, int]  # results of the run by status (all its shards)


def series_of_run(history: Any, run_id: str, by: SeriesBy = SeriesBy.DEVICE) -> Any:
    """The rows of every series (case_key x device, or by model x device fingerprint) the run
    measured, up to that run."""
    this_run = history[history["run_id"] == run_id]
    if this_run.empty:
        return history.iloc[0:0]
    order = int(this_run["run_order"].iloc[0])
    keys = set(zip(this_run["case_key"], series_ids(this_run, by), strict=True))
    upto = history[history["run_order"] <= order]
    mask = [(k, f) in keys for k, f in zip(upto["case_key"], series_ids(upto, by), strict=True)]
    return upto[mask]


def check_history(db: Any, run_id: str, options: RegressionOptions = RegressionOptions()) -> HistoryCheck:
    """Judge the series `run_id` measured in the database `db` (a URL or a db.handle.Database)."""
    this_run = results(db, run_id=run_id, columns=RUN_COLUMNS)
    counts = {str(status): int((this_run["status"] == status).sum()) for status in ResultStatus}
    kw = options.as_kwargs()
    if not this_run.empty and run_ids(db)[-1] == run_id:
        # the newest run: its series up to it are their whole histories, judged from the newest runs
        keys = set(zip(this_run["case_key"].astype(str), series_ids(this_run, options.by), strict=True))
        verdicts = [v for v in detect_in_database(db, **kw) if v.key in keys]
    else:
        verdicts = detect(series_of_run(results(db, columns=DETECT_COLUMNS), run_id, options.by), **kw)
    # only series whose newest point is this run are judged on tonight's figures
    judged = [v for v in verdicts if v.latest is not None and v.latest.run_id == run_id]
    by_kind: dict[str, list[dict[str, Any]]] = {str(kind): [] for kind in FLAG_KINDS}
    for verdict in judged:
        if verdict.status in by_kind:
            by_kind[verdict.status].append(verdict.as_dict())
        if verdict.drift is not None:
            by_kind[DRIFT].append(verdict.as_dict())
    for rows in by_kind.values():
        rows.sort(key=lambda r: (-abs(r["rel_change"] or 0.0), r["case_key"], r["device_key"] or "",
                                 r["device_fingerprint"]))
    insufficient = sum(1 for v in verdicts if v.status == Verdict.INSUFFICIENT_DATA)
    return HistoryCheck({k: tuple(v) for k, v in by_kind.items()}, len(verdicts), insufficient, counts)
