"""The two small frames a report chooses its runs from before it reads any result.

- The run counts: results per run, device, op and status (db.query.result_counts' frame), from the
  history's columns (`counts_from_history`) or from a results frame (`counts_of`).
- The case runs: the runs holding an ok result of each case per device and suite
  (CASE_RUN_COLUMNS), from the history (`newest_ok_runs`: the newest of them, and every one of a run
  named) or from a results frame (`case_runs_of`: every one of them).

The device pages choose their runs from the counts (reports.roofs.shown_runs), a comparison pairs
its results from both (reports.comparisons.pairing).
"""
from __future__ import annotations

from collections.abc import Collection

import numpy as np
import pandas as pd

from rooflab.db.series_query import HistoryColumns
from rooflab.db.usable import figure_mask
from rooflab.reports.data.frames import with_figure
from rooflab.vocab import ResultStatus

COUNT_KEYS = ["run_id", "run_order", "started_at", "host", "suite", "git_commit", "device_name",
              "device_fingerprint", "op", "family", "status"]
CASE_RUN_COLUMNS = ["device_name", "case_key", "suite", "run_id", "run_order"]


def ok_rows(h: HistoryColumns) -> np.ndarray:
    """Whether each result of the history has a performance figure (db/usable.py's rule)."""
    ok_code = h.values["status"].index(ResultStatus.OK) if ResultStatus.OK in h.values["status"] else -2
    return figure_mask(h.codes["status"] == ok_code, h.median_ms)


def counts_of(df: pd.DataFrame) -> pd.DataFrame:
    """rooflab.db.query.result_counts' frame computed from a results frame (what tests and notebooks have)."""
    if df.empty:
        return pd.DataFrame(columns=COUNT_KEYS + ["n"])
    frame = df.copy()
    if "run_order" not in frame.columns:
        frame["run_order"] = (pd.to_datetime(frame["started_at"], utc=True).rank(method="dense")
                              if "started_at" in frame.columns else 1)
    for col in COUNT_KEYS:
        if col not in frame.columns:
            frame[col] = None
    keys = frame[COUNT_KEYS].astype(object).where(frame[COUNT_KEYS].notna(), "")
    return keys.groupby(COUNT_KEYS, sort=False).size().rename("n").reset_index()


def counts_from_history(h: HistoryColumns) -> pd.DataFrame:
    """db.query.result_counts' frame (results per run, device, op and status) from the history
    columns, so a report that reads the history reads nothing else to choose its runs."""
    if len(h) == 0:
        return pd.DataFrame(columns=COUNT_KEYS + ["n"])
    cases = h.cases.assign(_of=list(zip(h.cases["op"], h.cases["family"], strict=True)))
    op_family, names = pd.factorize(cases["_of"])
    by_case = np.full(int(cases["case_id"].max()) + 1 if len(cases) else 1, -1, dtype=np.int64)
    by_case[cases["case_id"].to_numpy()] = op_family
    envs = h.environments.reset_index(drop=True)
    by_env = np.full(int(envs["environment_id"].max()) + 1 if len(envs) else 1, -1, dtype=np.int64)
    by_env[envs["environment_id"].to_numpy()] = np.arange(len(envs))
    n_status, n_of, n_env = len(h.values["status"]) + 1, max(len(names), 1), max(len(envs), 1)
    key = ((h.run_index.astype(np.int64) * n_env + by_env[h.environment_id]) * n_of
           + by_case[h.case_id]) * n_status + (h.codes["status"].astype(np.int64) + 1)
    unique, n = np.unique(key, return_counts=True)
    status, rest = unique % n_status - 1, unique // n_status
    of, rest = rest % n_of, rest // n_of
    env, run = rest % n_env, rest // n_env
    runs = h.runs.reset_index(drop=True)
    statuses = np.array(list(h.values["status"]) + [None], dtype=object)
    pairs = np.array(list(names) or [("", "")], dtype=object)
    out = pd.DataFrame({
        "run_id": runs["run_id"].to_numpy()[run], "run_order": (run + 1).astype("int64"),
        "started_at": runs["started_at"].to_numpy()[run], "host": runs["host"].to_numpy()[run],
        "suite": runs["suite"].to_numpy()[run], "git_commit": runs["git_commit"].to_numpy()[run],
        "device_name": envs["device_name"].to_numpy()[env],
        "device_fingerprint": envs["device_fingerprint"].to_numpy()[env],
        "op": [p[0] for p in pairs[of]], "family": [p[1] for p in pairs[of]], "status": statuses[status],
        "n": n.astype("int64"),
    })
    out["started_at"] = pd.to_datetime(out["started_at"], utc=True)
    return out.sort_values(["run_order", "device_name", "op", "status"], kind="stable").reset_index(drop=True)


def case_runs_of(df: pd.DataFrame) -> pd.DataFrame:
    """Every run holding an ok result of each case, per device and suite, of a results frame (the
    pairing takes the newest where a side is a device, and a run's own where it is named)."""
    if df.empty:
        return pd.DataFrame(columns=CASE_RUN_COLUMNS)
    ok = with_figure(df)
    order = pd.to_numeric(ok["run_order"], errors="coerce") if "run_order" in ok.columns else \
        pd.to_datetime(ok["started_at"], utc=True).rank(method="dense")
    frame = ok.assign(run_order=order, suite=ok["suite"] if "suite" in ok.columns else "")[CASE_RUN_COLUMNS]
    return frame.drop_duplicates(["device_name", "case_key", "suite", "run_id"]).reset_index(drop=True)


def newest_ok_runs(h: HistoryColumns, allowed: set[str] | None = None,
                   named: Collection[str] = ()) -> pd.DataFrame:
    """The case runs (see the module doc) from the history: per device name, case and suite, the newest run
    (within `allowed`, when given) holding an ok result of the case, and every ok case of the runs
    `named` (a comparison side named by its run)."""
    if len(h) == 0:
        return pd.DataFrame(columns=CASE_RUN_COLUMNS)
    keep = ok_rows(h)
    if allowed is not None:
        keep &= h.runs["run_id"].isin(list(allowed)).to_numpy()[h.run_index]
    envs = h.environments.reset_index(drop=True)
    device_code, device_names = pd.factorize(envs["device_name"].astype(str))
    by_env = np.full(int(envs["environment_id"].max()) + 1, -1, dtype=np.int64)
    by_env[envs["environment_id"].to_numpy()] = device_code
    suite_code, suites = pd.factorize(h.runs["suite"].astype(str))
    device, case, run = by_env[h.environment_id[keep]], h.case_id[keep].astype(np.int64), h.run_index[keep]
    suite = suite_code[run]
    order = np.lexsort((run, suite, case, device))
    device, case, suite, run = device[order], case[order], suite[order], run[order]
    last = np.ones(len(order), dtype=bool)
    last[:-1] = (device[1:] != device[:-1]) | (case[1:] != case[:-1]) | (suite[1:] != suite[:-1])
    if named:  # and every ok result of a named run
        last |= h.runs["run_id"].isin(list(named)).to_numpy()[run]
    keys = h.cases.set_index("case_id")["case_key"]
    return pd.DataFrame({
        "device_name": np.asarray(device_names, dtype=object)[device[last]],
        "case_key": keys.reindex(case[last]).to_numpy(), "suite": np.asarray(suites, dtype=object)[suite[last]],
        "run_id": h.runs["run_id"].to_numpy()[run[last]], "run_order": run[last].astype(np.int64) + 1,
    }).drop_duplicates().reset_index(drop=True)  # several GPUs of one fingerprint: one row a run
