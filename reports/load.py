"""The one place reports read the database: results frames via db.query."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from rooflab.reports.options import RegressionOptions

if TYPE_CHECKING:
    from rooflab.db.handle import Db
    from rooflab.db.timeparse import Since


# The columns of the results frame that the roofline, the diagnosis, the comparison, the report
# (and `detect`) read: everything else stays in the database.
REPORT_COLUMNS: tuple[str, ...] = (
    "run_id", "started_at", "host", "device_name", "device_kind", "device_fingerprint", "suite", "case_key", "op",
    "family", "backend", "dtype", "params", "cache", "status", "median_ms", "flops", "bytes", "intensity", "tflops",
    "gbps", "torch_version", "cuda_version", "driver_version", "git_commit", "timing_mode", "device_uuid",
    "measured_at", "iqr_ms", "rel_ci_halfwidth", "stop_reason", "throttled", "l2_bytes", "memory_bytes", "sm_count",
    "compute_capability", "run_order", "quality", "quality_reasons", "cpu_threads", "p10_ms", "p90_ms", "n_samples",
    "op_version", "flush_method", "pace",
)

# What `rooflab roofline` reads: the ceilings (reports.ceilings) and the two charts (reports.plots).
ROOFLINE_COLUMNS: tuple[str, ...] = (
    "run_id", "device_name", "device_fingerprint", "case_key", "op", "family", "dtype", "cache", "status",
    "median_ms", "flops", "bytes", "tflops", "gbps", "timing_mode", "throttled", "l2_bytes", "quality",
    "rel_ci_halfwidth", "stop_reason", "device_kind", "run_order", "started_at",
    "op_version",  # the launch floor counts only the op version that times host time per launch
    "flush_method", "pace",  # how the result that sets a ceiling was measured
)


def _empty(url: Db) -> bool:
    from rooflab.db.handle import schema_state

    return schema_state(url).kind == "empty"


def load_results(url: Db, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Every result in the database at `url` (only `columns` of db.query.RESULT_COLUMNS when
    given); an empty frame when nothing has been stored there yet."""
    from rooflab.db.query import results

    if _empty(url):
        return pd.DataFrame()
    return results(url, columns=columns)


def load_report_results(url: Db, *, runs: Sequence[str] | None = None, since: Since = None,
                        columns: Sequence[str] = REPORT_COLUMNS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(results of the runs the report's device pages need, db.query.result_counts): the runs are
    chosen from the counts (reports.runsel) before any result is read."""
    from rooflab.db.query import result_counts, results
    from rooflab.reports.runsel import choose_runs, needed_runs

    if _empty(url):
        return pd.DataFrame(), pd.DataFrame()
    counts = result_counts(url)
    wanted = needed_runs(choose_runs(counts, runs=runs, since=since))
    if not wanted:
        return pd.DataFrame(), counts
    return results(url, run_id=wanted, columns=columns), counts


def load_verdicts(url: Db, options: RegressionOptions = RegressionOptions()) -> list:
    """The regression verdict of every series in the database at `url`, as `detect` gives them on
    every result, read from the newest runs (reports.regressions.detect_in_database); [] when
    nothing has been stored there yet."""
    from rooflab.reports.regressions import detect_in_database

    if _empty(url):
        return []
    return detect_in_database(url, **options.as_kwargs())


def _verdicts_for_report(url: str, options: RegressionOptions) -> tuple[str, Any]:
    """("ok", load_verdicts) with the points of every series that is not flagged left out (the
    report draws trends of flagged series only, and counts the others: the list crosses a process
    boundary), or ("input", message) for invalid input, which the caller reports as such."""
    from dataclasses import replace

    from rooflab.db.errors import DatabaseInputError
    from rooflab.reports.errors import ReportInputError

    try:
        verdicts = load_verdicts(url, options)
    except (ReportInputError, DatabaseInputError) as exc:
        return "input", str(exc)
    return "ok", [v if v.flagged else replace(v, points=(), n_points=v.n_points if v.n_points is not None
                                                else len(v.points))
                  for v in verdicts]


class PendingVerdicts:
    """`load_verdicts` running in a process of its own, started now; `result()` waits for it.

    On a long history the verdicts (reading the newest runs, judging every series) and the rest of
    the report (reading the shown runs, drawing and writing the pages) take about the same time and
    need nothing from each other until the regressions page: in two processes they run side by side
    on two cores. The process is spawned (it shares no database connection with this one); an
    error in it comes back from `result()`; `cancel()` ends it early. What comes back is what the report draws: the
    flagged verdicts whole, the others without their points (`n_points` keeps their number)."""

    def __init__(self, url: str, options: RegressionOptions = RegressionOptions()) -> None:
        import multiprocessing

        from rooflab.suite.child import ChildCall

        self._call = ChildCall(_verdicts_for_report, (url, options), multiprocessing.get_context("spawn"))

    def result(self) -> list:
        """The verdicts; ReportInputError for invalid input, suite.child.ChildCallError when judging
        them failed otherwise."""
        from rooflab.reports.errors import ReportInputError

        kind, payload = self._call.result()
        if kind == "input":
            raise ReportInputError(payload)
        verdicts: list = payload
        return verdicts

    def cancel(self) -> None:
        """Stop judging (the report failed before it needed the verdicts)."""
        self._call.cancel()


def load_crosschecks(url: Db) -> pd.DataFrame:
    """Every cross-check row (db.crosscheck.crosscheck_frame); an empty frame when there is no database yet."""
    from rooflab.db.crosscheck import crosscheck_frame

    if _empty(url):
        return pd.DataFrame()
    return crosscheck_frame(url)


def load_device_results(
    url: Db, device: str, columns: Sequence[str] | None = REPORT_COLUMNS
) -> tuple[str, pd.DataFrame]:
    """(device name, its results) as reports.frames.select_device picks them from every result,
    reading only that device's rows: the device is resolved against the devices that have results."""
    from rooflab.db.query import result_devices, results
    from rooflab.reports.frames import select_device

    if _empty(url):
        return select_device(pd.DataFrame(), device)
    name, chosen = select_device(result_devices(url), device)
    rows = results(url, device=name, columns=columns)
    keep = (rows["device_name"] == name) & rows["device_fingerprint"].isin(set(chosen["device_fingerprint"]))
    return name, rows[keep]
