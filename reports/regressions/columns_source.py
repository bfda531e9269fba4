"""The regression check's verdicts from the history's columns (db.series_query.history_columns),
when the report has read them already: reports.regressions.database_check.detect_with over a ColumnsSource gives
the verdicts `rooflab regressions` gives (detect_in_database), without reading the database again.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pandas as pd

from rooflab.db.series_query import HistoryColumns
from rooflab.db.usable import figure_mask
from rooflab.reports.regressions import database_check
from rooflab.reports.regressions.column_frames import ColumnFrames
from rooflab.reports.regressions.database_check import HistorySource, detect_with, history_runs, recent_runs
from rooflab.reports.regressions.gate import SeriesVerdict
from rooflab.reports.regressions.options import RegressionOptions
from rooflab.vocab import ResultStatus, SeriesBy


class ColumnsSource(ColumnFrames):
    """A HistorySource (reports.regressions.database_check) over history columns: results frames built from the
    arrays (reports.regressions.column_frames), with the values and types db.query.results gives them; its
    series by `by`."""

    def run_ids(self) -> list[str]:
        return list(self._run_ids)

    def recent(self, runs_each: int) -> list[str]:
        """recent_runs from the arrays: each run's devices (their UUIDs, or fingerprints without one,
        as the run recorded them)."""
        h = self.h
        device = np.where(h.codes["device_uuid"] >= 0, h.codes["device_uuid"],
                          -1 - self._env_row[h.environment_id]).astype(np.int64)
        width = len(h.values["device_uuid"]) + len(self._envs) + 1
        pairs = np.unique(h.run_index.astype(np.int64) * width + device + len(self._envs))
        runs, devices = np.divmod(pairs, width)
        frame = pd.DataFrame({"run_id": np.array(self._run_ids, dtype=object)[runs], "device_key": devices})
        return recent_runs(self._run_ids, frame, runs_each)

    def tail(self, runs: list[str], part_rows: int | None = None) -> Iterator[pd.DataFrame]:
        """The results of `runs`, about TAIL_PART_ROWS results of whole cases a part (ColumnFrames.tail)."""
        return super().tail(runs, database_check.TAIL_PART_ROWS if part_rows is None else part_rows)

    def _ok(self) -> np.ndarray:
        h = self.h
        return figure_mask(h.codes["status"] == h.code_of("status", ResultStatus.OK), h.median_ms)

    def _spans(self, rows: np.ndarray, ways: dict[str, tuple[np.ndarray, Sequence[str]]]) -> pd.DataFrame:
        """Per series and way (`ways`: column -> each of `rows`' code into its values, -1 for none),
        the start times of the earliest and newest of `rows`' runs and that earliest run (None when
        another run started at the same instant), as db.query's span reads give them. Grouped on
        integer keys (a year's history is 2.19 M rows: strings per row would cost hundreds of MB)."""
        columns = ["case_key", "series", *ways, "first_ok_start", "last_ok_start", "first_ok_run"]
        if not len(rows):
            return pd.DataFrame(columns=columns)
        h = self.h
        key = h.case_id[rows].astype(np.int64) * (len(self._series.ids) + 1) + self._series.codes[rows]
        for codes, values in ways.values():
            key = key * (len(values) + 1) + codes.astype(np.int64) + 1
        runs = pd.Series(h.run_index[rows]).groupby(key, sort=True).agg(["min", "max"])
        rest = runs.index.to_numpy(dtype=np.int64)
        decoded: dict[str, np.ndarray] = {}
        for name, (_, values) in reversed(list(ways.items())):
            rest, code = np.divmod(rest, len(values) + 1)
            decoded[name] = np.array([None, *values], dtype=object)[code]
        case, series = np.divmod(rest, len(self._series.ids) + 1)
        starts = pd.DatetimeIndex(h.runs["started_at"])
        first, last = runs["min"].to_numpy(), runs["max"].to_numpy()
        alone = ~starts.duplicated(keep=False)  # a run no other run started with
        return pd.DataFrame({"case_key": self._key_of[case], "series": self._series_ids[series],
                             **{name: decoded[name] for name in ways},
                             "first_ok_start": starts.take(first), "last_ok_start": starts.take(last),
                             "first_ok_run": [self._run_ids[i] if alone[i] else None for i in first]})[columns]

    def method_spans(self) -> pd.DataFrame:
        """db.query.series_method_spans's frame, from the arrays: per series and way of measuring it
        (flush method and pace, both recorded) with an ok result of positive median, the start
        times of the earliest and newest run holding one, and that earliest run (None when another
        run started at the same instant)."""
        h = self.h
        rows = np.flatnonzero(self._ok() & (h.codes["flush_method"] >= 0) & (h.codes["pace"] >= 0))
        return self._spans(rows, {"flush_method": (h.codes["flush_method"][rows], h.values["flush_method"]),
                                  "pace": (h.codes["pace"][rows], h.values["pace"])})

    def fingerprint_spans(self) -> pd.DataFrame:
        """db.query.series_fingerprint_spans' frame by device (empty by model), from the arrays."""
        rows = np.flatnonzero(self._ok()) if self.by == SeriesBy.DEVICE else np.empty(0, dtype=np.int64)
        fps = tuple(str(f) for f in self._envs["device_fingerprint"])
        return self._spans(rows, {"device_fingerprint": (self._env_row[self.h.environment_id[rows]], fps)})

    def device_hosts(self, runs: list[str]) -> dict[str, str]:
        """{}: the columns hold each run's host, not the node a run's environment rows name (a
        device's series keeps the host of its newest run)."""
        return {}

    def summary(self) -> pd.DataFrame:
        """db.query.series_summary's frame: per series with any result, the runs holding an ok
        result with a positive median, and the first of them in run order."""
        h = self.h
        n_series, n_run = len(self._series.ids) + 1, len(self._run_ids) + 1
        pair = h.case_id.astype(np.int64) * n_series + self._series.codes
        every = np.unique(pair)
        ok = self._ok()
        ok_runs = np.unique(pair[ok] * n_run + h.run_index[ok])  # sorted: by series, then run
        del pair
        ok_pair, ok_run = ok_runs // n_run, ok_runs % n_run
        with_ok, first_at, n_ok = np.unique(ok_pair, return_index=True, return_counts=True)
        at = np.searchsorted(with_ok, every)
        found = (at < len(with_ok)) & (with_ok[np.minimum(at, len(with_ok) - 1)] == every) if len(with_ok) else \
            np.zeros(len(every), dtype=bool)
        first_run = np.where(found, ok_run[first_at[np.minimum(at, len(first_at) - 1)]] if len(first_at) else -1, -1)
        out = pd.DataFrame({
            "case_key": self._key_of[every // n_series],
            "series": self._series_ids[every % n_series],
            "n_ok_runs": np.where(found, n_ok[np.minimum(at, len(n_ok) - 1)] if len(n_ok) else 0, 0).astype(int),
            "first_ok_run": [self._run_ids[i] if i >= 0 else None for i in first_run],
        })
        return out.sort_values(["case_key", "series"]).reset_index(drop=True)

    def series(self, keys: set[tuple[str, str]]) -> pd.DataFrame:
        h = self.h
        case_of = {k: i for i, k in self._keys.items()}
        code_of = {s: i for i, s in enumerate(self._series.ids)}
        n_series = len(self._series.ids) + 1
        codes = np.array([case_of[k] * n_series + code_of[f] for k, f in keys if k in case_of and f in code_of],
                         dtype=np.int64)
        return self.frame(np.isin(h.case_id.astype(np.int64) * n_series + self._series.codes, codes))


class ReadSource:
    """A HistorySource holding what the check reads first (the run ids, the newest runs' results,
    the per-series summary and spans), taken from history columns that can then be let go; the
    whole series it asks for again, and the devices' hosts, come from `again` (the database: a few
    series, read a few cases at a time: reports.regressions.database_check.SERIES_PART_CASES)."""

    def __init__(self, h: HistoryColumns, window: int, again: HistorySource) -> None:
        columns = ColumnsSource(h, again.by)
        self.by = again.by
        self._run_ids = columns.run_ids()
        self._recent = again.recent(history_runs(window))  # which devices each run holds: a small read
        recent = h.runs["run_id"].isin(self._recent).to_numpy()[h.run_index]
        # the newest runs' results kept as columns (a few bytes a result), made frames a part at a time
        self._tail: ColumnsSource | None = ColumnsSource(h.subset(np.flatnonzero(recent)), again.by)
        self._summary = columns.summary()
        self._spans = columns.method_spans()
        self._fingerprints = columns.fingerprint_spans()
        self._again = again

    def run_ids(self) -> list[str]:
        return list(self._run_ids)

    def recent(self, runs_each: int) -> list[str]:
        return list(self._recent)

    def tail(self, runs: list[str]) -> Iterator[pd.DataFrame]:
        if self._tail is None or runs != self._recent:
            raise ValueError("ReadSource holds the newest runs' results once, for detect_with")
        tail, self._tail = self._tail, None  # judged once: let it go as the parts are judged
        yield from tail.tail(runs)

    def summary(self) -> pd.DataFrame:
        return self._summary

    def method_spans(self) -> pd.DataFrame:
        return self._spans

    def fingerprint_spans(self) -> pd.DataFrame:
        return self._fingerprints

    def device_hosts(self, runs: list[str]) -> dict[str, str]:
        return self._again.device_hosts(runs)

    def series(self, keys: set[tuple[str, str]]) -> pd.DataFrame:
        return self._again.series(keys)


def verdicts_of_history(h: HistoryColumns, options: RegressionOptions = RegressionOptions()) -> list[SeriesVerdict]:
    """detect_in_database's verdicts, judged from the history's columns."""
    if len(h) == 0:
        return []
    return detect_with(ColumnsSource(h, options.by), **options.gate_kwargs())
