"""Every series' points from the whole history, in numpy columns: what the history page draws.

A series is one case_key on one device fingerprint; its points are per-run medians, by the rule
the regression gate frames its points with (reports.regressions.series): the median of the ok medians a run
has for the series (several GPUs of one fingerprint), kept out of a baseline when any of that run's
results is not ok, throttled or not of good quality (reports.data.frames.quality_of's rule: the stored
quality, else suite.quality's noise rule). `tests/reports/regressions/test_history.py` holds the two framings
equal. p10 and p90 are the medians of the ok results' own p10 and p90.

Each point also carries its flush method and pace; a point whose flush method or pace differs from
the series' point before it starts a segment (the other segment reasons, a driver, CUDA or torch change, come
with a new device fingerprint, hence a new series: the page joins a case's series on one device
into one trend and names what changed between them).
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import pandas as pd

from rooflab.db.series_query import CODED, HistoryColumns
from rooflab.db.usable import figure_mask
from rooflab.suite.quality import noisy
from rooflab.vocab import Quality, ResultStatus

# why a point is kept out of a baseline, as reports.regressions.series names it (0: it is not)
EXCLUDED = ("", "not ok", "throttled", "noisy")


@dataclass(frozen=True)
class SeriesPoints:
    """The points of every series, sorted by series then run; series `i` owns points
    start[i]:start[i + 1] (one more start than series)."""

    case_id: np.ndarray  # per series
    environment_id: np.ndarray  # per series
    start: np.ndarray  # int64, len(series) + 1
    run_index: np.ndarray  # per point: row of HistoryColumns.runs
    median_ms: np.ndarray  # float32 per point (points without an ok result are not kept)
    p10_ms: np.ndarray
    p90_ms: np.ndarray
    excluded: np.ndarray  # int8 per point: index into EXCLUDED
    flush: np.ndarray  # int16 per point: code into the flush methods (-1: not recorded)
    pace: np.ndarray  # int16 per point: code into the paces (-1: not recorded)

    @property
    def n_series(self) -> int:
        return len(self.case_id)

    def of(self, i: int) -> slice:
        return slice(int(self.start[i]), int(self.start[i + 1]))


@dataclass(frozen=True)
class HistoryData:
    """What the history pages draw: the small tables of the history (runs, cases, environments, the
    coded values; HistoryColumns.tables_only) and every series' points."""

    tables: HistoryColumns
    points: SeriesPoints


def _noisy_rows(h: HistoryColumns) -> np.ndarray:
    """quality_of(...) != good for every result: the stored quality, else the noise rule."""
    stored = h.codes["quality"] >= 0
    good = h.values["quality"].index(Quality.GOOD) if Quality.GOOD in h.values["quality"] else -2
    derived = np.zeros(len(h), dtype=bool)
    judged = np.flatnonzero(~stored)  # only results stored without a quality are judged by the rule
    derived[judged] = np.asarray(noisy(h.rel_ci_halfwidth[judged], h.decoded("stop_reason", judged)), dtype=bool)
    return np.where(stored, h.codes["quality"] != good, derived)


def _ok_rows(h: HistoryColumns) -> np.ndarray:
    ok_code = h.values["status"].index(ResultStatus.OK) if ResultStatus.OK in h.values["status"] else -2
    return figure_mask(h.codes["status"] == ok_code, h.median_ms)


def _group_medians(values: np.ndarray, ok: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Per group (rows starts[i]:starts[i] + sizes[i]), the median of `values` over its ok rows
    (NaN without one)."""
    out = np.where(ok[starts], values[starts], np.nan).astype(np.float32)
    several = np.flatnonzero(sizes > 1)
    if len(several):  # several results of a series in one run (several GPUs of one fingerprint)
        rows = np.concatenate([np.arange(starts[g], starts[g] + sizes[g]) for g in several])
        group = np.repeat(several, sizes[several])
        frame = pd.DataFrame({"g": group, "v": np.where(ok[rows], values[rows], np.nan)})
        out[several] = frame.groupby("g", sort=True)["v"].median().to_numpy(dtype=np.float32)
    return out


def series_points(h: HistoryColumns) -> SeriesPoints:
    """Every series' per-run points (see the module doc). Each sorted column is made, reduced to
    its per-run value and let go before the next: a year of results is 2.19 M rows a column."""
    order = np.lexsort((h.run_index, h.case_id, h.environment_id))
    env, case, run = h.environment_id[order], h.case_id[order], h.run_index[order]
    new_group = np.ones(len(order), dtype=bool)
    new_group[1:] = (env[1:] != env[:-1]) | (case[1:] != case[:-1]) | (run[1:] != run[:-1])
    starts = np.flatnonzero(new_group).astype(np.int32)
    del new_group
    env, case, run = env[starts], case[starts], run[starts]
    sizes = np.diff(np.append(starts, len(order))).astype(np.int32)
    ok = _ok_rows(h)[order]
    median = _group_medians(h.median_ms[order], ok, starts, sizes)
    p10 = _group_medians(h.p10_ms[order], ok, starts, sizes)
    p90 = _group_medians(h.p90_ms[order], ok, starts, sizes)

    def any_of(flags: np.ndarray) -> np.ndarray:
        return np.logical_or.reduceat(flags, starts) if len(starts) else flags

    excluded = np.where(any_of(~ok), 1, np.where(any_of(h.throttled[order]), 2,
                                                 np.where(any_of(_noisy_rows(h)[order]), 3, 0))).astype(np.int8)
    del ok
    flush = h.codes["flush_method"][order[starts]]
    pace = h.codes["pace"][order[starts]]
    del order
    keep = ~np.isnan(median)  # a run without an ok result is no point (as in reports.regressions.series)
    g_env, g_case = env[keep], case[keep]
    new_series = np.ones(int(keep.sum()), dtype=bool)
    new_series[1:] = (g_env[1:] != g_env[:-1]) | (g_case[1:] != g_case[:-1])
    first = np.flatnonzero(new_series)
    return SeriesPoints(
        case_id=g_case[first], environment_id=g_env[first], start=np.append(first, len(g_env)).astype(np.int64),
        run_index=run[keep], median_ms=median[keep], p10_ms=p10[keep], p90_ms=p90[keep],
        excluded=excluded[keep], flush=flush[keep], pace=pace[keep],
    )


def counts_from_history(h: HistoryColumns) -> pd.DataFrame:
    """db.query.result_counts' frame (results per run, device, op and status) from the history
    columns, so a report that reads the history reads nothing else to choose its runs."""
    if len(h) == 0:
        return pd.DataFrame(columns=["run_id", "run_order", "started_at", "host", "suite", "git_commit", "device_name",
                                     "device_fingerprint", "op", "family", "status", "n"])
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


def _codes(values: pd.Series) -> tuple[np.ndarray, tuple[str, ...]]:
    """A string column as codes into its sorted distinct values (-1: missing), as the database read gives it."""
    names = tuple(sorted({str(v) for v in values.dropna()}))
    at = {v: i for i, v in enumerate(names)}
    return np.array([at[str(v)] if v is not None and v == v else -1 for v in values], dtype=np.int16), names


def _column(df: pd.DataFrame, name: str, default: object = None) -> pd.Series:
    return df[name] if name in df.columns else pd.Series(default, index=df.index, dtype=object)


def history_of_frame(df: pd.DataFrame) -> HistoryData:
    """The history of a results frame (db.query.results' columns), as reports.data.reads reads it from a
    database: what `render_report` draws when it is given a frame alone."""
    order = (pd.to_numeric(df["run_order"], errors="coerce") if "run_order" in df.columns
             else pd.to_datetime(df["started_at"], utc=True).rank(method="dense"))
    first = df.assign(_order=order).sort_values(["_order", "run_id"], kind="stable").drop_duplicates("run_id")
    runs = pd.DataFrame({c: _column(first, c).to_numpy() for c in ("run_id", "started_at", "host", "suite",
                                                                   "git_commit")})
    runs["started_at"] = pd.to_datetime(runs["started_at"], utc=True)
    env_cols = ("device_fingerprint", "device_name", "device_kind", "driver_version", "cuda_version", "torch_version")
    envs = df.drop_duplicates("device_fingerprint")
    envs = pd.DataFrame({c: _column(envs, c).to_numpy() for c in env_cols})
    envs.insert(0, "environment_id", np.arange(1, len(envs) + 1))
    case_cols = ("case_key", "op", "op_version", "family", "backend", "dtype", "params")
    cases = df.drop_duplicates("case_key")
    cases = pd.DataFrame({c: _column(cases, c, 1 if c == "op_version" else None).to_numpy() for c in case_cols})
    cases.insert(0, "case_id", np.arange(1, len(cases) + 1))
    codes, values = {}, {}
    for name in CODED:
        codes[name], values[name] = _codes(_column(df, name))
    def floats(name: str, dtype: type = np.float32) -> np.ndarray:
        return pd.to_numeric(_column(df, name), errors="coerce").to_numpy(dtype=dtype)
    columns = HistoryColumns(
        case_id=df["case_key"].map(dict(zip(cases["case_key"], cases["case_id"], strict=True))).to_numpy(np.int32),
        environment_id=df["device_fingerprint"].map(dict(zip(envs["device_fingerprint"], envs["environment_id"],
                                                             strict=True))).to_numpy(np.int32),
        run_index=df["run_id"].map({r: i for i, r in enumerate(runs["run_id"])}).to_numpy(np.int32),
        median_ms=floats("median_ms", np.float64), p10_ms=floats("p10_ms"), p90_ms=floats("p90_ms"),
        rel_ci_halfwidth=floats("rel_ci_halfwidth", np.float64),
        throttled=_column(df, "throttled", False).fillna(False).astype(bool).to_numpy(),
        codes=codes, values=values, runs=runs, environments=envs, cases=cases)
    return HistoryData(columns.tables_only(), series_points(columns))


def newest_ok_runs(h: HistoryColumns, allowed: set[str] | None = None,
                   named: Collection[str] = ()) -> pd.DataFrame:
    """reports.comparisons.pairing's case runs from the history: per device name, case and suite, the newest run
    (within `allowed`, when given) holding an ok result of the case, and every ok case of the runs
    `named` (a comparison side named by its run)."""
    from rooflab.reports.comparisons.pairing import CASE_RUN_COLUMNS

    if len(h) == 0:
        return pd.DataFrame(columns=CASE_RUN_COLUMNS)
    keep = _ok_rows(h)
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
