"""Every series' points from the whole history, in numpy columns: what the history page draws.

A series is one case_key on one physical device (reports.data.devices; by model, SeriesBy.MODEL, on
one device fingerprint); its points are per-run figures, by the rule the regression gate frames
its points with (reports.regressions.series): the median of the ok medians a run has for the series
(by model several GPUs of one fingerprint), kept out of a baseline when any of that run's results
is not ok, throttled or not of good quality (reports.data.frames.quality_of's rule: the stored
quality, else suite.quality's noise rule). `tests/reports/regressions/test_history.py` holds the
two framings equal. p10 and p90 are the medians of the ok results' own p10 and p90.

Each point also carries its environment (device fingerprint), flush method and pace; a point whose
fingerprint, flush method or pace differs from the series' point before it starts a segment (the
page names what changed: the driver, CUDA or torch version of the two environments).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from rooflab.db.series_query import CODE_TYPES, CODED, HistoryColumns
from rooflab.reports.data.devices import HistorySeries, history_series
from rooflab.reports.data.run_counts import ok_rows
from rooflab.suite.quality import noisy
from rooflab.vocab import Quality, SeriesBy

# why a point is kept out of a baseline, as reports.regressions.series names it (0: it is not)
EXCLUDED = ("", "not ok", "throttled", "noisy")


@dataclass(frozen=True)
class SeriesPoints:
    """The points of every series, sorted by series then run; series `i` owns points
    start[i]:start[i + 1] (one more start than series)."""

    case_id: np.ndarray  # per series
    device: np.ndarray  # int32 per series: index into `devices` (its series within the case)
    environment_id: np.ndarray  # per series: the environment (fingerprint) of its newest point
    start: np.ndarray  # int64, len(series) + 1
    run_index: np.ndarray  # per point: row of HistoryColumns.runs
    median_ms: np.ndarray  # float32 per point (points without an ok result are not kept)
    p10_ms: np.ndarray
    p90_ms: np.ndarray
    excluded: np.ndarray  # int8 per point: index into EXCLUDED
    flush: np.ndarray  # int16 per point: code into the flush methods (-1: not recorded)
    pace: np.ndarray  # int16 per point: code into the paces (-1: not recorded)
    point_environment: np.ndarray  # int32 per point: its environment_id
    devices: HistorySeries  # the series' devices: ids (reports.data.devices.series_ids) and device keys

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


def series_points(h: HistoryColumns, by: SeriesBy = SeriesBy.DEVICE) -> SeriesPoints:
    """Every series' per-run points (see the module doc). Each sorted column is made, reduced to
    its per-run value and let go before the next: a year of results is 2.19 M rows a column."""
    devices = history_series(h, by)
    order = np.lexsort((h.run_index, h.case_id, devices.codes))
    dev, case, run = devices.codes[order], h.case_id[order], h.run_index[order]
    new_group = np.ones(len(order), dtype=bool)
    new_group[1:] = (dev[1:] != dev[:-1]) | (case[1:] != case[:-1]) | (run[1:] != run[:-1])
    starts = np.flatnonzero(new_group).astype(np.int32)
    del new_group
    dev, case, run = dev[starts], case[starts], run[starts]
    sizes = np.diff(np.append(starts, len(order))).astype(np.int32)
    ok = ok_rows(h)[order]
    median = _group_medians(h.median_ms[order], ok, starts, sizes)
    p10 = _group_medians(h.p10_ms[order], ok, starts, sizes)
    p90 = _group_medians(h.p90_ms[order], ok, starts, sizes)

    def any_of(flags: np.ndarray) -> np.ndarray:
        return np.logical_or.reduceat(flags, starts) if len(starts) else flags

    excluded = np.where(any_of(~ok), 1, np.where(any_of(h.throttled[order]), 2,
                                                 np.where(any_of(_noisy_rows(h)[order]), 3, 0))).astype(np.int8)
    del ok
    # a point's environment, flush method and pace are its first result's (by device its one result
    # in the run; by model the environment is the series' own)
    firsts = order[starts]
    env = h.environment_id[firsts]
    flush = h.codes["flush_method"][firsts]
    pace = h.codes["pace"][firsts]
    del firsts
    del order
    keep = ~np.isnan(median)  # a run without an ok result is no point (as in reports.regressions.series)
    g_dev, g_case = dev[keep], case[keep]
    new_series = np.ones(int(keep.sum()), dtype=bool)
    new_series[1:] = (g_dev[1:] != g_dev[:-1]) | (g_case[1:] != g_case[:-1])
    first = np.flatnonzero(new_series)
    bounds = np.append(first, len(g_dev)).astype(np.int64)
    point_env = env[keep].astype(np.int32)
    return SeriesPoints(
        case_id=g_case[first], device=g_dev[first], environment_id=point_env[bounds[1:] - 1] if len(first) else
        point_env[:0], start=bounds, run_index=run[keep], median_ms=median[keep], p10_ms=p10[keep],
        p90_ms=p90[keep], excluded=excluded[keep], flush=flush[keep], pace=pace[keep], point_environment=point_env,
        devices=replace(devices, codes=devices.codes[:0]),  # the per-result codes are let go with the columns
    )


def _codes(values: pd.Series, dtype: type = np.int16) -> tuple[np.ndarray, tuple[str, ...]]:
    """A string column as codes into its sorted distinct values (-1: missing), as the database read gives it."""
    names = tuple(sorted({str(v) for v in values.dropna()}))
    at = {v: i for i, v in enumerate(names)}
    return np.array([at[str(v)] if v is not None and v == v else -1 for v in values], dtype=dtype), names


def _column(df: pd.DataFrame, name: str, default: object = None) -> pd.Series:
    return df[name] if name in df.columns else pd.Series(default, index=df.index, dtype=object)


def history_of_frame(df: pd.DataFrame, by: SeriesBy = SeriesBy.DEVICE) -> HistoryData:
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
        codes[name], values[name] = _codes(_column(df, name), CODE_TYPES.get(name, np.int16))
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
    return HistoryData(columns.tables_only(), series_points(columns, by))
