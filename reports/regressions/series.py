"""From a results table to series of points, and a verdict for every series (reports.regressions.gate judges).

A series is one case_key on one physical device (reports.data.devices: its device key, a GPU's
UUID), or, by model (SeriesBy.MODEL, the explicit aggregate), one case_key on one device
fingerprint. Its points are per-run medians (by device: the device's own result in the run; by
model: the median of the result medians a run has for it, e.g. the GPUs of a node), ordered by run
order. Each point carries whether it may enter a baseline (suite.quality decides noisy; throttled
and results that are not ok stay out too) and its environment segment. A segment ends where the
device fingerprint, the driver, CUDA or torch version changes, or the method of measuring: the
cache flush (`flush_method`), the pace of the samples (`pace`) or a collective's mode
(`collective_mode`: stream or isolated); results taken two ways are not one history. Both are read
from ok results only: a run that measured nothing changes no segment.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from rooflab.db.query import shared_strings
from rooflab.db.usable import figure_mask
from rooflab.reports.data.devices import device_keys, series_ids
from rooflab.reports.data.frames import quality_of
from rooflab.reports.regressions.gate import Point, SeriesVerdict, drift_start, history_pass, judge
from rooflab.reports.regressions.link_check import link_checked
from rooflab.reports.regressions.options import MIN_BASELINE, MIN_CHANGE, WINDOW, Z_THRESHOLD
from rooflab.vocab import Quality, ResultStatus, SeriesBy

ENV_COLUMNS = ("device_fingerprint", "driver_version", "cuda_version", "torch_version")
METHOD_COLUMNS = ("flush_method", "pace", "collective_mode")  # how a result was measured: a change starts a segment
UNKNOWN = "?"  # a method value not recorded (a result stored before its column): it matches any
SEGMENT_COLUMNS = ENV_COLUMNS + METHOD_COLUMNS
# one point of a series: `series` is the series within its case (reports.data.devices.series_ids: the
# device key by device, the fingerprint by model)
RUN_KEYS = ("case_key", "series", "run_id")
RUN_POINT_COLUMNS = (*RUN_KEYS, "order", "median_ms", "not_ok", "throttled", "noisy", "env", "method", "device_name",
                     "device_fingerprint", "device_key", "host", "started_at", "git_commit")


def run_points(df: pd.DataFrame, by: SeriesBy = SeriesBy.DEVICE) -> pd.DataFrame:
    """One row per (case_key, series, run_id): run order, median of the ok medians, why the run may
    not enter a baseline, and its environment (an ok result's: NaN elsewhere); its device (key,
    fingerprint, name, host); sorted by series and run order."""
    if "run_order" in df.columns:
        order = pd.to_numeric(df["run_order"], errors="coerce")
    elif "started_at" in df.columns or "measured_at" in df.columns:
        when = pd.to_datetime(df["started_at"] if "started_at" in df.columns else df["measured_at"], utc=True)
        order = when.rank(method="dense")
    else:  # no ordering column: the frame's own row order
        order = pd.Series(range(len(df)), index=df.index, dtype=float)
    median = pd.to_numeric(df["median_ms"], errors="coerce")
    is_ok = df["status"] == ResultStatus.OK if "status" in df.columns else pd.Series(True, index=df.index)
    ok = figure_mask(is_ok, median)
    throttled = (df["throttled"].fillna(False).astype(bool) if "throttled" in df.columns
                 else pd.Series(False, index=df.index))
    noisy = quality_of(df) != Quality.GOOD  # stored, or judged by the one noise rule
    # the environment and the method are an ok result's (a failed one measured nothing): elsewhere
    # NaN, which the segments read as "as before"; within the method a value not recorded (a result
    # stored before the column existed) is UNKNOWN, which matches any value
    env = _environments(df).where(ok)
    method = (_joined(df, METHOD_COLUMNS, missing=UNKNOWN).where(ok) if any(c in df.columns for c in METHOD_COLUMNS)
              else np.nan)
    fingerprint = (df["device_fingerprint"] if "device_fingerprint" in df.columns
                   else df.get("device_name", pd.Series("", index=df.index))).astype(str)
    d = pd.DataFrame({
        "case_key": df["case_key"].astype(str), "series": series_ids(df, by),
        "run_id": df["run_id"].astype(str) if "run_id" in df.columns else order.astype(str), "order": order,
        "ok_median": median.where(ok),
        "not_ok": ~ok, "throttled": throttled, "noisy": noisy, "env": env, "method": method,
        "device_name": df["device_name"].astype(str) if "device_name" in df.columns else "",
        "device_fingerprint": fingerprint,
        "device_key": device_keys(df) if by == SeriesBy.DEVICE else None,
        "host": df["host"].astype(object) if "host" in df.columns else None,
        "started_at": (pd.to_datetime(df["started_at"], utc=True) if "started_at" in df.columns
                       else pd.Series(pd.NaT, index=df.index, dtype="datetime64[ns, UTC]")),
        "git_commit": df["git_commit"].astype(object) if "git_commit" in df.columns else None,
    })
    several = d.duplicated(list(RUN_KEYS), keep=False)  # by model: e.g. the GPUs of one fingerprint in a run
    any_several = bool(several.any())
    single = d[~several] if any_several else d  # a key with one row is its own aggregate
    agg = single.rename(columns={"ok_median": "median_ms"})[list(RUN_POINT_COLUMNS)]
    if any_several:
        grouped = _aggregated(d[several])
        agg = grouped if single.empty else pd.concat([grouped, agg], ignore_index=True)
    agg["started_at"] = _iso_times(agg["started_at"])
    return agg.sort_values(["case_key", "series", "order", "run_id"], kind="stable").reset_index(drop=True)


def _aggregated(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per run key of `rows` (keys that have several rows): the earliest order and start,
    the median of the ok medians, whether any row is not ok, throttled or noisy, and the first
    recorded environment, method, device and commit (RUN_POINT_COLUMNS). One groupby call per
    kind of aggregate: a call per column costs a few ms each, on every check."""
    g = rows.groupby(list(RUN_KEYS), sort=False)
    firsts = ["env", "method", "device_name", "device_fingerprint", "device_key", "host", "git_commit"]
    parts = [g[["order", "started_at"]].min(), g["ok_median"].median().rename("median_ms"),
             g[["not_ok", "throttled", "noisy"]].any(), g[firsts].first()]
    return pd.concat(parts, axis=1).reset_index()[list(RUN_POINT_COLUMNS)]


def _environments(df: pd.DataFrame) -> pd.Series:
    """Each row's environment (ENV_COLUMNS) as a number, equal where the environment is (a missing
    version, e.g. no driver on a CPU, is a value like the others): what a segment compares."""
    present = [c for c in ENV_COLUMNS if c in df.columns]
    if not present:
        return pd.Series(0.0, index=df.index)
    return df.groupby(present, dropna=False, sort=False).ngroup().astype(float)


def _joined(df: pd.DataFrame, columns: tuple[str, ...], missing: str = "") -> pd.Series:
    """The values of `columns` joined by "|" per row; a missing value (None or NaN, e.g. no driver on
    a CPU) reads as `missing`, and so does a column the frame lacks when `missing` is given."""
    out = pd.Series("", index=df.index)
    for col in columns:
        if col in df.columns:
            out = out + "|" + df[col].astype(object).where(df[col].notna(), missing).astype(str)
        elif missing:
            out = out + "|" + missing
    return out


def _method_changed(method: str, known: list[str | None]) -> bool:
    """Whether `method` (a joined METHOD_COLUMNS value) differs from the values known so far in a
    value both record; `known` is updated with its recorded values."""
    changed = False
    for i, value in enumerate(method.split("|")[1:]):
        if value == UNKNOWN:
            continue
        changed = changed or (known[i] is not None and known[i] != value)
        known[i] = value
    return changed


def _iso_times(when: pd.Series) -> np.ndarray:
    """`when.dt.strftime(ISO)` as objects (NaN where NaT), each distinct time formatted once: a
    series' points repeat the start time of a few hundred runs over hundreds of thousands of rows."""
    codes, uniques = pd.factorize(when)
    text = np.asarray(pd.DatetimeIndex(uniques).strftime("%Y-%m-%dT%H:%M:%S%z"), dtype=object)
    out = np.full(len(codes), np.nan, dtype=object)
    known = codes >= 0
    out[known] = text[codes[known]]
    return out


POINT_FIELDS = ("run_id", "order", "median_ms", "not_ok", "throttled", "noisy", "env", "method", "started_at",
                "git_commit")
SHARED_FIELDS = ("run_id", "started_at", "git_commit")  # one value per run: every series' points can share it


def series_points(runs: pd.DataFrame | list[dict]) -> list[Point]:
    """Points of one series (its rows of `run_points`), each with its environment segment."""
    if isinstance(runs, pd.DataFrame):
        columns = {f: (runs[f].tolist() if f in runs.columns else [None] * len(runs)) for f in POINT_FIELDS}
    else:
        columns = {f: [r.get(f) for r in runs] for f in POINT_FIELDS}
    return _points(columns, 0, len(columns["run_id"]))


def _points(c: dict[str, list], start: int, end: int) -> list[Point]:
    """series_points of rows start:end of `run_points` given as column lists (POINT_FIELDS)."""
    points: list[Point] = []
    segment, last_env = 0, None
    known: list[str | None] = [None] * len(METHOD_COLUMNS)  # the newest recorded value of each method column
    run_ids, orders, medians, envs, methods = c["run_id"], c["order"], c["median_ms"], c["env"], c["method"]
    not_ok, throttled, noisy = c["not_ok"], c["throttled"], c["noisy"]
    starts, commits = c["started_at"], c["git_commit"]
    last_method = None  # the method value read last: read again, it changes nothing (most runs)
    for i in range(start, end):
        env, method = envs[i], methods[i]
        # no ok result in this run (NaN): measured as before, as far as anyone knows
        changed_method = isinstance(method, str) and method != last_method and _method_changed(method, known)
        last_method = method if isinstance(method, str) else last_method
        if env == env:  # an ok result's environment (NaN: none)
            if last_env is not None and (env != last_env or changed_method):
                segment += 1
            last_env = env
        median = medians[i]
        if not median == median:  # NaN: no ok result in this run
            continue
        why = "not ok" if not_ok[i] else "throttled" if throttled[i] else "noisy" if noisy[i] else None
        started, commit = starts[i], commits[i]
        points.append(Point(run_id=run_ids[i], run_order=int(orders[i]), median_ms=float(median),
                            good=why is None, excluded_because=why, segment=segment,
                            started_at=started if isinstance(started, str) else None,
                            git_commit=None if commit is None or commit != commit else str(commit)))
    return points

def detect(df: pd.DataFrame, window: int = WINDOW, z_threshold: float = Z_THRESHOLD, min_change: float = MIN_CHANGE,
           *, min_baseline: int = MIN_BASELINE, by: SeriesBy = SeriesBy.DEVICE,
           two_run_check: bool = True) -> list[SeriesVerdict]:
    """A verdict for every series in the results frame: each case on each physical device, or by
    model each case on each device fingerprint (`by`; the module doc); the collective series too
    short for the gate judged by the two-run check (reports.regressions.link_check) unless
    `two_run_check` is False (a slice of the frame, whose tests may be split). A series' device
    name, fingerprint and host are those of its newest run."""
    if df.empty:
        return []
    verdicts = []
    agg = run_points(df, by)
    columns = {f: shared_strings(agg[f].tolist()) if f in SHARED_FIELDS else agg[f].tolist() for f in POINT_FIELDS}
    keys = list(zip(agg["case_key"].tolist(), agg["series"].tolist(), strict=True))
    bounds = [i for i in range(len(keys) + 1) if i == 0 or i == len(keys) or keys[i] != keys[i - 1]]
    per_device = by == SeriesBy.DEVICE
    # a series' device is that of its newest row (by model, its first: the fingerprint is the series);
    # read for those rows only (a column of strings read whole costs a second on a year's newest runs)
    named = [end - 1 if per_device else start for start, end in zip(bounds, bounds[1:], strict=False)]
    names, fingerprints, device, hosts = (agg[c].take(named).tolist() for c in ("device_name", "device_fingerprint",
                                                                                "device_key", "host"))
    for n, (start, end) in enumerate(zip(bounds, bounds[1:], strict=False)):
        points = _points(columns, start, end)
        gate = judge(points, window=window, z_threshold=z_threshold, min_change=min_change, min_baseline=min_baseline)
        found = history_pass(points, min_change=min_change)
        changes, drift = found.changes, found.drift
        first_bad = gate.first_bad
        if first_bad is None and drift is not None:
            first_bad = drift_start(changes, drift, points)
        seg_start = next((p.run_id for p in points if p.segment == points[-1].segment), None) if points else None
        host = hosts[n] if per_device else None
        verdicts.append(SeriesVerdict(
            case_key=keys[start][0], device_fingerprint=str(fingerprints[n]), device_name=str(names[n]),
            status=gate.status, latest=gate.latest, previous=gate.previous, baseline=gate.baseline,
            points=tuple(points), segment_start_run=seg_start, note=gate.note, pooled=gate.pooled,
            change_points=changes, drift=drift, first_bad=first_bad, series=keys[start][1],
            device_key=str(device[n]) if per_device else None,
            host=str(host) if isinstance(host, str) else None,
        ))
    return link_checked(verdicts, min_change) if two_run_check else verdicts


SLICE_ROWS = 60_000  # detect_in_slices: rows of the results frame judged at a time


def detect_in_slices(df: pd.DataFrame, *, slice_rows: int = SLICE_ROWS, **options: Any) -> list[SeriesVerdict]:
    """`detect(df, **options)`, judged a slice of case keys at a time (whole series, about
    `slice_rows` rows each): the same verdicts in the same order (detect orders them by case key,
    then device), with detect's working set (its per-run frame, column lists and points) held for
    one slice at a time instead of for every series at once."""
    options = {**options, "two_run_check": False}  # the caller (reports.regressions) checks the whole set once
    if len(df) <= slice_rows or "run_order" not in df.columns:  # without it, a slice would rank its own runs
        return detect(df, **options)
    keys = df["case_key"].astype(str)
    order = sorted(keys.unique())
    per_slice = max(1, len(order) * slice_rows // len(df))
    codes = pd.Categorical(keys, categories=order).codes // per_slice
    verdicts: list[SeriesVerdict] = []
    for _, part in df.groupby(codes, sort=True):
        verdicts.extend(detect(part, **options))
    return verdicts


# The columns of the results frame that `detect` reads.
DETECT_COLUMNS = tuple(dict.fromkeys((
    "case_key", "device_fingerprint", "device_name", "device_uuid", "host", "tool", "run_id", "run_order", "median_ms",
    "status", "throttled", "rel_ci_halfwidth", "stop_reason", "iqr_ms", "quality", "started_at", "git_commit",
    *SEGMENT_COLUMNS)))
