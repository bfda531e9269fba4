"""The regression check's verdicts from the history's columns (db.series_query.history_columns),
when the report has read them already: reports.regressions.detect_with over a ColumnsSource gives
the verdicts `rooflab regressions` gives (detect_in_database), without reading the database again.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from rooflab.db.series_query import HistoryColumns
from rooflab.reports.gate import SeriesVerdict
from rooflab.reports.options import RegressionOptions
from rooflab.reports.regressions import detect_with
from rooflab.reports.series import DETECT_COLUMNS


class ColumnsSource:
    """A HistorySource (reports.regressions) over history columns: results frames built from the
    arrays, with the values and types db.query.results gives them."""

    def __init__(self, h: HistoryColumns) -> None:
        self.h = h
        self._keys = h.cases.set_index("case_id")["case_key"]
        envs = h.environments.set_index("environment_id")
        self._envs = envs
        self._run_ids = h.runs["run_id"].astype(str).tolist()

    def run_ids(self) -> list[str]:
        return list(self._run_ids)

    def _frame(self, mask: np.ndarray) -> pd.DataFrame:
        h, rows = self.h, np.flatnonzero(mask)
        run = h.run_index[rows]
        env = self._envs.reindex(h.environment_id[rows])
        runs = h.runs
        frame = pd.DataFrame({
            "case_key": self._keys.reindex(h.case_id[rows]).to_numpy(),
            "device_fingerprint": env["device_fingerprint"].to_numpy(), "device_name": env["device_name"].to_numpy(),
            "run_id": runs["run_id"].to_numpy()[run], "run_order": (run + 1).astype("int64"),
            "median_ms": h.median_ms[rows], "status": h.decoded("status")[rows], "throttled": h.throttled[rows],
            "rel_ci_halfwidth": h.rel_ci_halfwidth[rows], "stop_reason": h.decoded("stop_reason")[rows],
            "iqr_ms": np.full(len(rows), np.nan), "quality": h.decoded("quality")[rows],
            "started_at": pd.to_datetime(runs["started_at"].to_numpy()[run], utc=True),
            "git_commit": runs["git_commit"].to_numpy()[run],
            **{c: env[c].to_numpy() for c in ("driver_version", "cuda_version", "torch_version")},
        })
        return frame[list(DETECT_COLUMNS)]

    def tail(self, runs: list[str]) -> pd.DataFrame:
        wanted = self.h.runs["run_id"].isin(runs).to_numpy()
        return self._frame(wanted[self.h.run_index])

    def summary(self) -> pd.DataFrame:
        """Per series with any result: runs with an ok result (positive median), and the first of them."""
        h = self.h
        fps = self._envs["device_fingerprint"]
        ok = (h.decoded("status") == "ok") & (h.median_ms > 0)
        frame = pd.DataFrame({"case": h.case_id, "env": h.environment_id, "run": h.run_index})
        every = frame[["case", "env"]].drop_duplicates().set_index(["case", "env"]).index
        per = frame[ok].groupby(["case", "env"], sort=False)["run"].agg(["nunique", "min"]).reindex(every)
        n_ok = per["nunique"].fillna(0)
        first = per["min"].fillna(-1).astype(np.int64)
        keys = n_ok.index
        out = pd.DataFrame({
            "case_key": self._keys.reindex(keys.get_level_values(0)).to_numpy(),
            "device_fingerprint": fps.reindex(keys.get_level_values(1)).to_numpy(),
            "n_ok_runs": n_ok.to_numpy().astype(int),
            "first_ok_run": [self._run_ids[i] if i >= 0 else None for i in first.to_numpy()],
        })
        return out.sort_values(["case_key", "device_fingerprint"]).reset_index(drop=True)

    def series(self, keys: set[tuple[str, str]]) -> pd.DataFrame:
        h = self.h
        case_of = {k: i for i, k in self._keys.items()}
        env_of = {f: i for i, f in self._envs["device_fingerprint"].items()}
        wanted = {(case_of[k], env_of[f]) for k, f in keys if k in case_of and f in env_of}
        pair = h.case_id.astype(np.int64) * (int(h.environment_id.max()) + 1) + h.environment_id
        codes = np.array([c * (int(h.environment_id.max()) + 1) + e for c, e in wanted], dtype=np.int64)
        return self._frame(np.isin(pair, codes))


def verdicts_of_history(h: HistoryColumns, options: RegressionOptions = RegressionOptions()) -> list[SeriesVerdict]:
    """detect_in_database's verdicts, judged from the history's columns."""
    if len(h) == 0:
        return []
    return detect_with(ColumnsSource(h), **options.as_kwargs())
