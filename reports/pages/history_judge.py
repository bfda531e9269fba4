"""The report's history judged and drawn: every series' verdict and the history pages, from one read of
the whole history (`judge_history`), or for a fleet's history (reports.data.reads.fleet_sized) from
the newest runs and the per-series state, the flagged series drawn and every series listed
(`judge_fleet_history`); in a process of its own beside the rest of the report (`PendingVerdicts`:
`rooflab report` draws the device and comparison pages meanwhile).
"""
from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rooflab.db.errors import DatabaseInputError
from rooflab.db.handle import Db
from rooflab.db.query import result_devices
from rooflab.db.series_query import history_columns
from rooflab.db.timeparse import Since
from rooflab.reports.allocator import keep_mmap_threshold
from rooflab.reports.data.reads import fleet_sized, nothing_stored
from rooflab.reports.data.run_counts import counts_from_history
from rooflab.reports.errors import ReportInputError
from rooflab.reports.pages.history_page import HistoryPage, history_pages, write_history_site
from rooflab.reports.pages.series_index import write_series_index
from rooflab.reports.pages.slugs import slug
from rooflab.reports.regressions.columns_source import ReadSource
from rooflab.reports.regressions.database_check import DatabaseSource, detect_in_database, detect_with
from rooflab.reports.regressions.gate import SeriesVerdict
from rooflab.reports.regressions.history_points import HistoryData, history_of_frame, series_points
from rooflab.reports.regressions.options import RegressionOptions
from rooflab.reports.roofs.shown_runs import choose_runs
from rooflab.suite.child import ChildCall


def for_report(verdicts: list[SeriesVerdict]) -> list[SeriesVerdict]:
    """The verdicts as the report draws them: the flagged ones whole, the others without their
    points (`n_points` keeps their number): the report draws trends of flagged series only (the
    history pages draw every series from the history itself), and the list crosses a process boundary."""
    return [v if v.flagged else replace(v, points=(), n_points=v.n_points if v.n_points is not None
                                        else len(v.points)) for v in verdicts]


def judge_history(url: Db, options: RegressionOptions = RegressionOptions(), *, out_dir: Path | None = None,
                  runs: Sequence[str] | None = None,
                  since: Since = None) -> tuple[list[SeriesVerdict], list[HistoryPage]]:
    """(every series' verdict as the report draws it, the history pages): one read of the whole
    history (db.series_query.history_columns), the regression check judged on it
    (reports.regressions.columns_source: the verdicts reports.regressions.database_check.load_verdicts
    gives) and the history pages drawn from it with those verdicts, written into `out_dir` one at a
    time when given (then they come back without their data; `runs` and `since` are the report's,
    which decide whether its pages link a comparison)."""
    if nothing_stored(url):
        return [], []
    if fleet_sized(url):
        return judge_fleet_history(url, options, out_dir=out_dir)
    columns = history_columns(url)
    if len(columns) == 0:
        return [], []
    has_compare = len(choose_runs(counts_from_history(columns), runs=runs, since=since)) >= 2
    points = series_points(columns, options.by)
    source = ReadSource(columns, options.window, again=DatabaseSource(url, options.by))
    tables = columns.tables_only()
    del columns  # every result's columns: from here on the points, the newest runs and the summary
    verdicts = for_report(detect_with(source, **options.gate_kwargs()))  # what the report draws of them
    del source
    if out_dir is None:
        return verdicts, history_pages(tables, points, verdicts, slug=slug)
    return verdicts, write_history_site(out_dir, HistoryData(tables, points), verdicts, slug,
                                        has_compare=has_compare)


def judge_fleet_history(url: Db, options: RegressionOptions = RegressionOptions(), *,
                        out_dir: Path | None = None) -> tuple[list[SeriesVerdict], list[HistoryPage]]:
    """judge_history for a fleet's history (reports.data.reads.fleet_sized), which no page can draw
    whole and no process should read whole: the verdicts from the newest runs and the per-series
    state (database_check.detect_in_database), the history pages of the flagged series only (their
    whole history read again through their GPUs' index), and with `out_dir` the index of every
    series (series.html, reports.pages.series_index)."""
    verdicts = detect_in_database(url, **options.as_kwargs())
    flagged = [v for v in verdicts if v.flagged]
    frame = DatabaseSource(url, options.by).series({v.key for v in flagged}, columns=None) if flagged else None
    history = history_of_frame(frame, options.by) if frame is not None and len(frame) else None
    if out_dir is None:
        pages = history_pages(history.tables, history.points, flagged, slug=slug) if history is not None else []
        return for_report(verdicts), pages
    has_compare = result_devices(url)["device_name"].nunique() >= 2
    pages = write_history_site(out_dir, history, flagged, slug, has_compare=has_compare, listed=len(verdicts))
    write_series_index(out_dir, verdicts, has_compare=has_compare)
    return for_report(verdicts), pages


def _history_for_report(url: str, options: RegressionOptions, out_dir: Path | None, runs: Sequence[str] | None,
                        since: Since) -> tuple[str, Any]:
    """("ok", (judge_history's verdicts as the report draws them, its pages, written into
    `out_dir`)), or ("input", message) for invalid input, which the caller reports as such."""
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
        self._call = ChildCall(_history_for_report, (url, options, out_dir, runs, since),
                               multiprocessing.get_context("spawn"))
        self._payload: tuple[list[SeriesVerdict], list[HistoryPage]] | None = None

    def _wait(self) -> tuple[list[SeriesVerdict], list[HistoryPage]]:
        if self._payload is None:
            kind, payload = self._call.result()
            if kind == "input":
                raise ReportInputError(payload)
            self._payload = payload
        return self._payload

    def result(self) -> list[SeriesVerdict]:
        """The verdicts; ReportInputError for invalid input, suite.child.ChildCallError when judging
        them failed otherwise."""
        return self._wait()[0]

    def pages(self) -> list[HistoryPage]:
        """The history pages (reports.pages.history_page.HistoryPage; written into `out_dir` when one was
        given, and then without their data)."""
        return self._wait()[1]

    def cancel(self) -> None:
        """Stop judging (the report failed before it needed the verdicts)."""
        self._call.cancel()
