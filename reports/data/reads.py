"""What the reports read of the results: each function turns a query of db.query into the frame
reports work on, and a database that holds nothing yet into an empty frame (`nothing_stored`): the
column sets the report and `rooflab roofline` read (REPORT_COLUMNS, ROOFLINE_COLUMNS), every result,
one device's results. The tables beside the results are read by reports.data.side_reads.

What a command or a page assembles from several reads lives on the floor that uses it: the
comparison's inputs (reports.comparisons.inputs), the history's series and verdicts
(reports.regressions.history_view, reports.regressions.database_check), the report's inputs and its
judged history (reports.pages.report_inputs, reports.pages.history_judge).
"""
from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from rooflab.db.handle import Db, schema_state
from rooflab.db.query import result_devices, result_estimate, results
from rooflab.reports.data.frames import select_device

# The columns of the results frame that the roofline, the diagnosis, the comparison, the report
# (and `detect`) read: everything else stays in the database.
REPORT_COLUMNS: tuple[str, ...] = (
    "run_id", "started_at", "host", "device_name", "device_kind", "device_fingerprint", "suite", "case_key", "op",
    "family", "backend", "dtype", "params", "cache", "status", "median_ms", "flops", "bytes", "bytes_read",
    "bytes_written", "intensity", "tflops",
    "gbps", "torch_version", "cuda_version", "driver_version", "git_commit", "timing_mode", "device_uuid",
    "measured_at", "iqr_ms", "rel_ci_halfwidth", "stop_reason", "throttled", "l2_bytes", "memory_bytes", "sm_count",
    "compute_capability", "run_order", "quality", "quality_reasons", "cpu_threads", "p10_ms", "p90_ms", "n_samples",
    "op_version", "ranks", "flush_method", "pace", "collective_mode",
    "tool",  # which tool measured it: an import is marked on the device page (runners/peer_import)
)

# What `rooflab roofline` reads: the ceilings (reports.roofs.ceilings) and the two charts (reports.pages.plots).
ROOFLINE_COLUMNS: tuple[str, ...] = (
    "run_id", "device_name", "device_fingerprint", "case_key", "op", "family", "dtype", "cache", "status",
    "median_ms", "flops", "bytes", "tflops", "gbps", "timing_mode", "throttled", "l2_bytes", "quality",
    "rel_ci_halfwidth", "stop_reason", "device_kind", "run_order", "started_at",
    "op_version",  # the launch floor counts only the op version that times host time per launch
    "ranks", "params",  # the interconnect ceilings: per collective and world size
    "flush_method", "pace", "collective_mode",  # how the result that sets a ceiling was measured
    "tool",  # an imported point is marked by its tool
    "bytes_read", "bytes_written",  # a case's roof follows its mix of reads and writes (reports.roofs.ceilings)
)


def nothing_stored(url: Db) -> bool:
    """Whether nothing has been stored at `url` yet (no database, or one without rooflab's tables)."""
    return schema_state(url).kind == "empty"


# above this many results a history is a fleet's: the report reads it in the database's aggregates and
# draws the history pages of the flagged series only (reports.pages.history_judge, report_inputs); a
# fleet of 64 GPUs passes it in about 80 nights, a device's year (2.2 M) never does
FLEET_RESULTS = 10_000_000


def fleet_sized(url: Db) -> bool:
    """Whether the database at `url` holds a fleet's history (more than FLEET_RESULTS results, by
    the database's own estimate: db.query.result_estimate)."""
    return result_estimate(url) > FLEET_RESULTS


def load_results(url: Db, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Every result in the database at `url` (only `columns` of db.query.RESULT_COLUMNS when
    given); an empty frame when nothing has been stored there yet."""
    if nothing_stored(url):
        return pd.DataFrame()
    return results(url, columns=columns)


def load_device_results(
    url: Db, device: str, columns: Sequence[str] | None = REPORT_COLUMNS
) -> tuple[str, pd.DataFrame]:
    """(device name, its results) as reports.data.frames.select_device picks them from every result,
    reading only that device's rows: the device is resolved against the devices that have results."""
    if nothing_stored(url):
        return select_device(pd.DataFrame(), device)
    name, chosen = select_device(result_devices(url), device)
    rows = results(url, device=name, columns=columns)
    keep = (rows["device_name"] == name) & rows["device_fingerprint"].isin(set(chosen["device_fingerprint"]))
    return name, rows[keep]
