"""Results frames of the regression check built from history columns (db.series_query.history_columns):
the DETECT_COLUMNS of any results the arrays hold, with the values and types db.query.results gives
them, and the newest runs' results a part of whole cases at a time (the check's `tail`). Both the
history's columns (reports.regressions.columns_source) and a database's newest runs read as columns
(reports.regressions.database_check.DatabaseSource.tail) are framed here.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from rooflab.db.series_query import HistoryColumns
from rooflab.reports.data.devices import history_series
from rooflab.reports.regressions.series import DETECT_COLUMNS, METHOD_COLUMNS
from rooflab.vocab import SeriesBy


class ColumnFrames:
    """Frames of the results that history columns hold; their series by `by`."""

    def __init__(self, h: HistoryColumns, by: SeriesBy = SeriesBy.DEVICE) -> None:
        self.h = h
        self.by = by
        self._keys = h.cases.set_index("case_id")["case_key"]
        self._key_of = np.full(int(h.cases["case_id"].max()) + 1 if len(h.cases) else 1, None, dtype=object)
        self._key_of[h.cases["case_id"].to_numpy()] = h.cases["case_key"].to_numpy(dtype=object)
        self._envs = h.environments.reset_index(drop=True)
        self._env_row = np.full(int(self._envs["environment_id"].max()) + 1 if len(self._envs) else 1, -1,
                                dtype=np.int64)
        self._env_row[self._envs["environment_id"].to_numpy()] = np.arange(len(self._envs))
        self._run_ids = h.runs["run_id"].astype(str).tolist()
        self._series = history_series(h, by)  # each result's series within its case
        self._series_ids = np.array(self._series.ids, dtype=object)

    def frame(self, mask: np.ndarray) -> pd.DataFrame:
        """The DETECT_COLUMNS of the results `mask` selects, built column by column from the arrays
        (each string an object shared by every row that has it)."""
        h, rows = self.h, np.flatnonzero(mask)
        run, env = h.run_index[rows], self._env_row[h.environment_id[rows]]
        runs, envs = h.runs, self._envs

        def of_env(name: str) -> np.ndarray:
            return envs[name].to_numpy(dtype=object)[env]

        columns = {
            "case_key": self._key_of[h.case_id[rows]], "device_fingerprint": of_env("device_fingerprint"),
            "device_name": of_env("device_name"), "device_uuid": h.decoded("device_uuid", rows),
            "host": runs["host"].to_numpy(dtype=object)[run], "tool": h.decoded("tool", rows),
            "run_id": runs["run_id"].to_numpy(dtype=object)[run],
            "run_order": (run + 1).astype("int64"), "median_ms": h.median_ms[rows],
            "status": h.decoded("status", rows), "throttled": h.throttled[rows],
            "rel_ci_halfwidth": h.rel_ci_halfwidth[rows], "stop_reason": h.decoded("stop_reason", rows),
            "iqr_ms": np.full(len(rows), np.nan), "quality": h.decoded("quality", rows),
            "started_at": pd.DatetimeIndex(runs["started_at"]).take(run),
            "git_commit": runs["git_commit"].to_numpy(dtype=object)[run],
            **{c: of_env(c) for c in ("driver_version", "cuda_version", "torch_version")},
            **{c: h.decoded(c, rows) for c in METHOD_COLUMNS},
        }
        # string columns stay object columns of shared strings: pandas would copy each string into a
        # column of its own string type (420,000 rows of a year's newest runs: over 100 MB)
        return pd.DataFrame({c: pd.Series(columns[c], dtype=object) if columns[c].dtype == object else columns[c]
                             for c in DETECT_COLUMNS}, copy=False)

    def tail(self, runs: list[str], part_rows: int) -> Iterator[pd.DataFrame]:
        """The results of `runs`, a part of about `part_rows` results of whole cases at a time, the
        parts in case-key order (as the database's are)."""
        h = self.h
        wanted = np.flatnonzero(h.runs["run_id"].isin(runs).to_numpy()[h.run_index])
        by_key = h.cases.sort_values("case_key", kind="stable")["case_id"].to_numpy()
        rank = np.zeros(len(self._key_of), dtype=np.int64)  # each case id's place in case-key order
        rank[by_key] = np.arange(len(by_key))
        ranks = rank[h.case_id[wanted]]
        order = np.argsort(ranks, kind="stable")
        rows, ranks = wanted[order], ranks[order]  # the results of `runs`, by case key
        start = 0
        while start < len(rows):
            end = min(start + part_rows, len(rows))
            while end < len(rows) and ranks[end] == ranks[end - 1]:
                end += 1  # a case's results stay in one part
            mask = np.zeros(len(h), dtype=bool)
            mask[rows[start:end]] = True
            yield self.frame(mask)
            start = end
