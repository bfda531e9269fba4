"""The one place reports read the database: results frames via db.query."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from rooflab.reports.regressions.options import RegressionOptions

if TYPE_CHECKING:
    from rooflab.db.handle import Db
    from rooflab.db.timeparse import Since
    from rooflab.reports.comparisons.compare_devices import Evidence
    from rooflab.reports.regressions.history_points import HistoryData


# The columns of the results frame that the roofline, the diagnosis, the comparison, the report
# (and `detect`) read: everything else stays in the database.
REPORT_COLUMNS: tuple[str, ...] = (
    "run_id", "started_at", "host", "device_name", "device_kind", "device_fingerprint", "suite", "case_key", "op",
    "family", "backend", "dtype", "params", "cache", "status", "median_ms", "flops", "bytes", "intensity", "tflops",
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


@dataclass(frozen=True)
class ReportInputs:
    """What `rooflab report` reads before it draws: the results of the runs its pages show (device
    pages and comparison), the run counts, the history (empty when the database is) and the
    comparison's raw samples and launch floors."""

    results: pd.DataFrame
    counts: pd.DataFrame
    history: HistoryData | None
    evidence: Evidence


def load_evidence(url: Db, runs: Sequence[str], devices: Sequence[str], case_runs: pd.DataFrame | None,
                  counts: pd.DataFrame) -> Evidence:
    """The raw samples of the results of `runs`, every launch-probe result of `devices`, the case
    runs, and the trustworthy results of the devices' recent runs (counts: the run counts)."""
    from rooflab.db.query import results
    from rooflab.db.series_query import case_keys, raw_samples
    from rooflab.reports.comparisons.compare_devices import Evidence, samples_by_key
    from rooflab.reports.comparisons.run_spread import READ_COLUMNS, recent_runs, trusted_rows
    from rooflab.reports.roofs.launch_floors import FLOOR_COLUMNS, LAUNCH_OP

    samples = samples_by_key(raw_samples(url, run_id=list(runs))) if runs else {}
    keys = case_keys(url, op=LAUNCH_OP)
    launch = results(url, case_key=keys, columns=FLOOR_COLUMNS) if keys else pd.DataFrame(columns=FLOOR_COLUMNS)
    recent = recent_runs(counts, list(devices))
    recent_rows = trusted_rows(results(url, run_id=recent, columns=READ_COLUMNS)) if recent else None
    return Evidence(samples, launch[launch["device_name"].isin(list(devices))], case_runs, recent_rows)


def load_report_inputs(url: Db, *, runs: Sequence[str] | None = None, since: Since = None,
                       columns: Sequence[str] = REPORT_COLUMNS, with_history: bool = True) -> ReportInputs:
    """The report's inputs: the history is read first (in one pass, db.series_query.history_columns)
    and the run counts come from it; then the runs are chosen (reports.roofs.shown_runs for the device pages,
    reports.comparisons.pairing for the comparison) and only their results are read. `with_history`: also
    every series' points (the history pages; `rooflab report` has them drawn in a process of its own)."""
    from rooflab.db.query import results
    from rooflab.db.series_query import history_columns
    from rooflab.reports.comparisons.compare_devices import Evidence
    from rooflab.reports.comparisons.pairing import comparison_runs
    from rooflab.reports.data.run_counts import counts_from_history, newest_ok_runs
    from rooflab.reports.regressions.history_points import HistoryData, series_points
    from rooflab.reports.roofs.shown_runs import choose_runs, chosen_runs, needed_runs

    if _empty(url):
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


def load_comparison_inputs(url: Db, baseline: str, candidate: str) -> tuple[pd.DataFrame, pd.DataFrame, Evidence]:
    """(results of the paired runs and their roof runs, run counts, evidence) of `rooflab compare`:
    the results are paired from the history's run counts and case runs (reports.comparisons.pairing) before
    any of them is read."""
    from rooflab.db.query import results
    from rooflab.db.series_query import history_columns
    from rooflab.reports.comparisons.compare_devices import Evidence
    from rooflab.reports.comparisons.pairing import pair_runs
    from rooflab.reports.data.run_counts import counts_from_history, newest_ok_runs

    if _empty(url):
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


def load_series_views(url: Db, *, case_key: str | None = None, filters: Sequence[str] = (),
                      device: str | None = None, last: int | None = None) -> list:
    """The series `rooflab history` shows (reports.regressions.history_view): one case's series, or those of the
    cases matching `filters`, on `device` only when given, with the newest `last` runs each.
    ReportInputError naming the nearest case keys when nothing matches."""
    from rooflab.db.query import result_devices, results
    from rooflab.db.series_query import case_keys, cases
    from rooflab.reports.data.frames import select_device
    from rooflab.reports.errors import ReportInputError
    from rooflab.reports.regressions.history_view import VIEW_COLUMNS, case_keys_for, nearest_keys, select_views, views

    if _empty(url):
        raise ReportInputError("the database holds no results yet")
    verdicts: dict[str, set[str]] = {}
    if case_key is not None:
        frame = results(url, case_key=case_key, columns=VIEW_COLUMNS)
        if frame.empty:
            near = nearest_keys(case_key, case_keys(url))
            raise ReportInputError(f"no results for case {case_key!r}; nearest case keys: {', '.join(near) or 'none'}")
    else:
        keys, verdicts = case_keys_for(cases(url), filters)
        frame = pd.concat([results(url, case_key=keys[i:i + 500], columns=VIEW_COLUMNS)
                           for i in range(0, len(keys), 500)], ignore_index=True)
    if device is not None:
        name, chosen = select_device(result_devices(url), device)
        frame = frame[frame["device_fingerprint"].isin(set(chosen["device_fingerprint"]))]
        if frame.empty:
            raise ReportInputError(f"--device {device!r}: no result of {name} for the case(s) asked for")
    found = select_views(views(frame, _with_sizes(url, frame)), verdicts, last)
    if not found:
        raise ReportInputError(f"no series matches {' '.join(filters)}: none has the verdict asked for")
    return found


def _with_sizes(url: Db, frame: pd.DataFrame) -> pd.DataFrame | None:
    """`frame` with the other message sizes of its collective tests (reports.regressions.link_check judges a test
    as a whole), or None when it holds no collective case."""
    from rooflab.db.query import results
    from rooflab.db.series_query import case_keys
    from rooflab.reports.regressions.history_view import VIEW_COLUMNS
    from rooflab.reports.regressions.link_check import table_of

    tables = {t[0] for t in map(table_of, frame["case_key"].astype(str).unique()) if t is not None}
    if not tables:
        return None
    shown = set(frame["case_key"].astype(str))
    more = [k for k in case_keys(url) if k not in shown and (t := table_of(k)) is not None and t[0] in tables]
    extra = [results(url, case_key=more[i:i + 500], columns=VIEW_COLUMNS) for i in range(0, len(more), 500)]
    extra = [e[e["device_fingerprint"].isin(set(frame["device_fingerprint"]))] for e in extra]
    return pd.concat([frame, *extra], ignore_index=True) if extra else frame


def load_verdicts(url: Db, options: RegressionOptions = RegressionOptions()) -> list:
    """The regression verdict of every series in the database at `url`, as `detect` gives them on
    every result, read from the newest runs (reports.regressions.database_check.detect_in_database); [] when
    nothing has been stored there yet."""
    from rooflab.reports.regressions.database_check import detect_in_database

    if _empty(url):
        return []
    return detect_in_database(url, **options.as_kwargs())


def for_report(verdicts: list) -> list:
    """The verdicts as the report draws them: the flagged ones whole, the others without their
    points (`n_points` keeps their number): the report draws trends of flagged series only (the
    history pages draw every series from the history itself), and the list crosses a process boundary."""
    from dataclasses import replace

    return [v if v.flagged else replace(v, points=(), n_points=v.n_points if v.n_points is not None
                                        else len(v.points)) for v in verdicts]


def judge_history(url: Db, options: RegressionOptions = RegressionOptions(), *, out_dir: Path | None = None,
                  runs: Sequence[str] | None = None, since: Since = None) -> tuple[list, list]:
    """(every series' verdict as the report draws it, the history pages): one read of the whole history
    (db.series_query.history_columns), the regression check judged on it (reports.regressions.columns_source:
    the verdicts load_verdicts gives) and the history pages drawn from it with those verdicts,
    written into `out_dir` one at a time when given (then they come back without their data;
    `runs` and `since` are the report's, which decide whether its pages link a comparison)."""
    from rooflab.db.series_query import history_columns
    from rooflab.reports.data.run_counts import counts_from_history
    from rooflab.reports.pages.history_page import history_pages, write_history_site
    from rooflab.reports.pages.slugs import slug
    from rooflab.reports.regressions.columns_source import ReadSource
    from rooflab.reports.regressions.database_check import DatabaseSource, detect_with
    from rooflab.reports.regressions.history_points import HistoryData, series_points
    from rooflab.reports.roofs.shown_runs import choose_runs

    if _empty(url):
        return [], []
    columns = history_columns(url)
    if len(columns) == 0:
        return [], []
    has_compare = len(choose_runs(counts_from_history(columns), runs=runs, since=since)) >= 2
    points = series_points(columns)
    source = ReadSource(columns, options.window, again=DatabaseSource(url))
    tables = columns.tables_only()
    del columns  # every result's columns: from here on the points, the newest runs and the summary
    verdicts = for_report(detect_with(source, **options.as_kwargs()))  # what the report draws of them
    del source
    if out_dir is None:
        return verdicts, history_pages(tables, points, verdicts, slug=slug)
    return verdicts, write_history_site(out_dir, HistoryData(tables, points), verdicts, slug,
                                        has_compare=has_compare)


def _history_for_report(url: str, options: RegressionOptions, out_dir: Path | None, runs: Sequence[str] | None,
                        since: Since) -> tuple[str, Any]:
    """("ok", (judge_history's verdicts as the report draws them, its pages, written into
    `out_dir`)), or ("input", message) for invalid input, which the caller reports as such."""
    from rooflab.db.errors import DatabaseInputError
    from rooflab.reports.allocator import keep_mmap_threshold
    from rooflab.reports.errors import ReportInputError

    keep_mmap_threshold()
    try:
        verdicts, pages = judge_history(url, options, out_dir=out_dir, runs=runs, since=since)
    except (ReportInputError, DatabaseInputError) as exc:
        return "input", str(exc)
    return "ok", (verdicts, pages)


class PendingVerdicts:
    """`judge_history` running in a process of its own, started now; `result()` (the verdicts) and
    `pages()` (the history pages) wait for it.

    On a long history the verdicts and the history pages (reading every result, judging every
    series, drawing every series) and the rest of the report (reading the shown runs, drawing and
    writing the pages) take about the same time and need nothing from each other until the
    regressions page: in two processes they run side by side on two cores. The process is spawned
    (it shares no database connection with this one); an error in it comes back from `result()`;
    `cancel()` ends it early. The verdicts that come back are what the report draws (`for_report`)."""

    def __init__(self, url: str, options: RegressionOptions = RegressionOptions(), *, out_dir: Path | None = None,
                 runs: Sequence[str] | None = None, since: Since = None) -> None:
        import multiprocessing

        from rooflab.suite.child import ChildCall

        self._call = ChildCall(_history_for_report, (url, options, out_dir, runs, since),
                               multiprocessing.get_context("spawn"))
        self._payload: tuple[list, list] | None = None

    def _wait(self) -> tuple[list, list]:
        from rooflab.reports.errors import ReportInputError

        if self._payload is None:
            kind, payload = self._call.result()
            if kind == "input":
                raise ReportInputError(payload)
            self._payload = payload
        return self._payload

    def result(self) -> list:
        """The verdicts; ReportInputError for invalid input, suite.child.ChildCallError when judging
        them failed otherwise."""
        return self._wait()[0]

    def pages(self) -> list:
        """The history pages (reports.pages.history_page.HistoryPage; written into `out_dir` when one was
        given, and then without their data)."""
        return self._wait()[1]

    def cancel(self) -> None:
        """Stop judging (the report failed before it needed the verdicts)."""
        self._call.cancel()


def load_crosschecks(url: Db) -> pd.DataFrame:
    """Every cross-check row (db.crosscheck.crosscheck_frame); an empty frame when there is no database yet."""
    from rooflab.db.crosscheck import crosscheck_frame

    if _empty(url):
        return pd.DataFrame()
    return crosscheck_frame(url)


def load_counters(url: Db) -> pd.DataFrame:
    """Every counter reading (db.counters.counters_frame); an empty frame when there is no database yet."""
    from rooflab.db.counters import counters_frame

    if _empty(url):
        return pd.DataFrame()
    return counters_frame(url)


def load_device_results(
    url: Db, device: str, columns: Sequence[str] | None = REPORT_COLUMNS
) -> tuple[str, pd.DataFrame]:
    """(device name, its results) as reports.data.frames.select_device picks them from every result,
    reading only that device's rows: the device is resolved against the devices that have results."""
    from rooflab.db.query import result_devices, results
    from rooflab.reports.data.frames import select_device

    if _empty(url):
        return select_device(pd.DataFrame(), device)
    name, chosen = select_device(result_devices(url), device)
    rows = results(url, device=name, columns=columns)
    keep = (rows["device_name"] == name) & rows["device_fingerprint"].isin(set(chosen["device_fingerprint"]))
    return name, rows[keep]
