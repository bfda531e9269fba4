"""The regression check as it was before its data path was made faster (robust_baseline on
np.percentile, one record dict per run, the change-point pass on every series): a frozen
reference that tests/reports/regressions/test_detect_fast.py holds the current code equal to."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from rooflab.reports.data.frames import quality_of
from rooflab.reports.regressions import changepoints as cp
from rooflab.reports.regressions.gate import (
    APART_Z,
    CHANGE_HISTORY,
    CONFIRM_Z,
    CONFIRM_Z_APART,
    IQR_SCALE,
    MAD_SCALE,
    RANGE_MARGIN,
    REPEATED,
    SPREAD_FLOOR_REL,
    TRIM,
    Baseline,
    Change,
    DriftFlag,
    Flag,
    Gate,
    Point,
    SeriesVerdict,
)
from rooflab.reports.regressions.options import MIN_BASELINE, WINDOW
from rooflab.reports.regressions.series import ENV_COLUMNS
from rooflab.reports.regressions.verdicts import Verdict


def robust_baseline(values: list[float]) -> Baseline:
    """Median; the standard deviation of the values within TRIM robust spreads of it (the robust
    spread: the larger of the scaled MAD and the scaled IQR), floored; and the top of the range
    the values show repeatedly."""
    v = np.sort(np.asarray(values, dtype=float))
    q1, center, q3 = (float(q) for q in np.percentile(v, [25, 50, 75]))
    mad = float(np.median(np.abs(v - center)))
    robust = max(MAD_SCALE * mad, float(q3 - q1) / IQR_SCALE)
    kept = v[np.abs(v - center) <= TRIM * robust] if robust > 0 else v[v == center]
    sd = float(np.std(kept, ddof=1)) if len(kept) >= 2 else 0.0
    spread = max(sd, SPREAD_FLOOR_REL * abs(center))
    high = float(v[-REPEATED]) if len(v) >= REPEATED else math.inf
    return Baseline(center, spread, len(values), high)


def check_point(point: Point, base: Baseline, z_threshold: float, min_change: float) -> Flag:
    diff = point.median_ms - base.center_ms
    z = diff / base.spread_ms if base.spread_ms > 0 else (math.inf if diff else 0.0)
    rel = diff / base.center_ms if base.center_ms else math.inf
    return Flag(point.run_id, point.median_ms, z, rel, abs(z) > z_threshold and abs(rel) > min_change)


def check_pair(latest: Point, previous: Point, base: Baseline, z_threshold: float, min_change: float) -> Flag:
    """The mean of the two newest points against the baseline: its spread is spread / sqrt(2),
    widened by the uncertainty of the baseline median (about 1.25 spread / sqrt(n))."""
    mean = (latest.median_ms + previous.median_ms) / 2.0
    diff = mean - base.center_ms
    scale = base.spread_ms * math.sqrt(0.5 + (math.pi / 2) / base.n)
    z = diff / scale if scale > 0 else (math.inf if diff else 0.0)
    rel = diff / base.center_ms if base.center_ms else math.inf
    return Flag(latest.run_id, mean, z, rel, abs(z) > z_threshold and abs(rel) > min_change)


def run_points(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (case_key, device_fingerprint, run_id): run order, median of the ok medians,
    why the run may not enter a baseline, and its environment; sorted by series and run order."""
    if "run_order" in df.columns:
        order = pd.to_numeric(df["run_order"], errors="coerce")
    elif "started_at" in df.columns or "measured_at" in df.columns:
        when = pd.to_datetime(df["started_at"] if "started_at" in df.columns else df["measured_at"], utc=True)
        order = when.rank(method="dense")
    else:  # no ordering column: the frame's own row order
        order = pd.Series(range(len(df)), index=df.index, dtype=float)
    median = pd.to_numeric(df["median_ms"], errors="coerce")
    ok = median > 0
    if "status" in df.columns:
        ok &= df["status"] == "ok"
    throttled = (df["throttled"].fillna(False).astype(bool) if "throttled" in df.columns
                 else pd.Series(False, index=df.index))
    noisy = quality_of(df) != "good"  # the one noise rule (suite.quality), stored or judged
    env = pd.Series("", index=df.index)
    for col in ENV_COLUMNS:
        if col in df.columns:  # a missing version (None or NaN, e.g. no driver on a CPU) reads as ""
            env = env + "|" + df[col].astype(object).where(df[col].notna(), "").astype(str)
    device = (df["device_fingerprint"] if "device_fingerprint" in df.columns
              else df.get("device_name", pd.Series("", index=df.index)))
    d = pd.DataFrame({
        "case_key": df["case_key"].astype(str), "device_fingerprint": device.astype(str),
        "run_id": df["run_id"].astype(str) if "run_id" in df.columns else order.astype(str), "order": order,
        "ok_median": median.where(ok),
        "not_ok": ~ok, "throttled": throttled, "noisy": noisy, "env": env,
        "device_name": df["device_name"].astype(str) if "device_name" in df.columns else "",
        "started_at": (pd.to_datetime(df["started_at"], utc=True) if "started_at" in df.columns
                       else pd.Series(pd.NaT, index=df.index, dtype="datetime64[ns, UTC]")),
        "git_commit": df["git_commit"].astype(object) if "git_commit" in df.columns else None,
    })
    agg = d.groupby(["case_key", "device_fingerprint", "run_id"], sort=False).agg(
        order=("order", "min"), median_ms=("ok_median", "median"), not_ok=("not_ok", "any"),
        throttled=("throttled", "any"), noisy=("noisy", "any"), env=("env", "first"),
        device_name=("device_name", "first"), started_at=("started_at", "min"), git_commit=("git_commit", "first"),
    ).reset_index()
    agg["started_at"] = agg["started_at"].dt.strftime("%Y-%m-%dT%H:%M:%S%z").astype(object)
    return agg.sort_values(["case_key", "device_fingerprint", "order", "run_id"], kind="stable").reset_index(drop=True)


def series_points(runs: pd.DataFrame | list[dict]) -> list[Point]:
    """Points of one series (its rows of `run_points`), each with its environment segment."""
    records = runs.to_dict("records") if isinstance(runs, pd.DataFrame) else runs
    points: list[Point] = []
    segment, last_env = 0, None
    for r in records:
        if last_env is not None and r["env"] != last_env:
            segment += 1
        last_env = r["env"]
        median = r["median_ms"]
        if not median == median:  # NaN: no ok result in this run
            continue
        why = "not ok" if r["not_ok"] else "throttled" if r["throttled"] else "noisy" if r["noisy"] else None
        started, commit = r.get("started_at"), r.get("git_commit")
        points.append(Point(run_id=r["run_id"], run_order=int(r["order"]), median_ms=float(median),
                            good=why is None, excluded_because=why, segment=segment,
                            started_at=started if isinstance(started, str) else None,
                            git_commit=None if commit is None or commit != commit else str(commit)))
    return points


def _shifted_tail(history: list[Point], window: int, z_threshold: float, min_change: float, min_baseline: int) -> int:
    """How many of the last points of `history` already sit beyond half the thresholds, in one
    direction, against the points before them (at most window // 2): a step that began a few runs
    before the newest two must not pull the baseline towards the new level."""
    tail, direction = 0, None
    while tail < max(1, window // 2) and tail < len(history):
        rest = history[: len(history) - tail]
        before = [q.median_ms for q in rest[:-1] if q.good][-window:]
        if len(before) < min_baseline:
            break
        flag = check_point(rest[-1], robust_baseline(before), z_threshold / 2, min_change / 2)
        if flag.direction is None or (direction is not None and flag.direction != direction):
            break
        direction = flag.direction
        tail += 1
    return tail


def _first_bad(seg: list[Point], base: Baseline, z_threshold: float, min_change: float) -> Point | None:
    """The first point of the run of newest points that are all slower than the baseline by more
    than half the thresholds (the run that the alert is about)."""
    first = None
    for p in reversed(seg):
        if check_point(p, base, z_threshold / 2, min_change / 2).direction != "slower":
            break
        first = p
    return first


def judge(points: list[Point], *, window: int = WINDOW, z_threshold: float = 4.0, min_change: float = 0.05,
          min_baseline: int = MIN_BASELINE) -> Gate:
    """The gate's judgement of one series' points (see the module docstring)."""
    if not points:
        return Gate(Verdict.INSUFFICIENT_DATA, None, None, None, None, "no ok result")
    seg = [p for p in points if p.segment == points[-1].segment]
    latest = seg[-1]
    previous = seg[-2] if len(seg) >= 2 else None
    history = seg[:-2] if previous is not None else []
    history = history[: len(history) - _shifted_tail(history, window, z_threshold, min_change, min_baseline)]
    good = [p.median_ms for p in history if p.good][-window:]
    if len(good) < min_baseline:
        note = "new environment segment" if points[-1].segment > 0 and len(seg) < len(points) else ""
        return Gate(Verdict.INSUFFICIENT_DATA, None, None, None, None,
                    note or f"{len(good)} good points before the newest two")
    base = robust_baseline(good)
    last_flag = check_point(latest, base, z_threshold, min_change)
    prev_flag = check_point(previous, base, z_threshold, min_change) if previous is not None else None
    pooled = check_pair(latest, previous, base, z_threshold, min_change) if previous is not None else None
    note = f"newest result {latest.excluded_because}" if latest.excluded_because else ""

    def alert(status: Verdict, why: str) -> Gate:
        return Gate(status, last_flag, prev_flag, pooled, base, why, _first_bad(seg, base, z_threshold, min_change))

    if pooled is not None and pooled.direction == "slower" and previous is not None:
        assert prev_flag is not None  # there is a previous point
        both = [(latest, last_flag), (previous, prev_flag)]
        apart = abs(latest.median_ms - previous.median_ms) > APART_Z * math.sqrt(2) * base.spread_ms
        least_z = CONFIRM_Z_APART if apart else CONFIRM_Z
        confirmed = all(f.z > least_z and f.rel_change > min_change / 2 for _, f in both)
        above_range = all(p.median_ms > base.high_ms + RANGE_MARGIN * base.spread_ms for p, _ in both)
        if confirmed and above_range:
            if latest.good and previous.good:
                return alert(Verdict.REGRESSION, note)
            why = latest.excluded_because or previous.excluded_because
            return alert(Verdict.SUSPECT, f"both newest results slower, but one is {why}")
        if confirmed:
            note = ((note + "; " if note else "")
                    + "both newest results lie within the range the baseline has shown repeatedly")
    if last_flag.direction == "slower":
        return alert(Verdict.SUSPECT, note)
    if last_flag.direction == "faster":
        confirmed = prev_flag is not None and prev_flag.direction == "faster"
        return Gate(Verdict.IMPROVEMENT, last_flag, prev_flag, pooled, base, (note + "; " if note else "") + (
            "confirmed by the previous run" if confirmed else "newest run only"))
    if prev_flag is not None and prev_flag.flagged:
        note = (note + "; " if note else "") + f"previous run was flagged {prev_flag.direction}, newest is back"
    return Gate(Verdict.OK, last_flag, prev_flag, pooled, base, note)


def history_pass(points: list[Point] | tuple[Point, ...], *, min_change: float = 0.05,
                 history: int = CHANGE_HISTORY) -> tuple[tuple[Change, ...], DriftFlag | None]:
    """Change points and drift over the newest `history` good points of the newest segment."""
    if not points:
        return (), None
    good = [p for p in points if p.segment == points[-1].segment and p.good][-history:]
    values = np.array([p.median_ms for p in good])
    changes = tuple(
        Change(good[c.index].run_id, good[c.index].run_order, good[c.index].started_at, good[c.index].git_commit,
               c.mean_before, c.mean_after, c.rel_change, c.p_value, str(c.direction))
        for c in cp.change_points(values, min_rel_change=min_change / 2))
    found = cp.drift(values, min_change=min_change)
    flag = None if found is None else DriftFlag(good[found.start_index].run_id, found.n_points, found.rel_change,
                                                found.p_value)
    return changes, flag


def _drift_start(changes: tuple[Change, ...], drift: DriftFlag, points: list[Point]) -> Point | None:
    """The first bad point of a drift: its newest slower change point, else the start of its window."""
    slower = [c.run_id for c in changes if c.direction == "slower"]
    wanted = slower[-1] if slower else drift.first_run
    return next((p for p in points if p.run_id == wanted), None)


def detect(df: pd.DataFrame, window: int = WINDOW, z_threshold: float = 4.0, min_change: float = 0.05,
           *, min_baseline: int = MIN_BASELINE) -> list[SeriesVerdict]:
    """A verdict for every series (case_key x device_fingerprint) in the results frame (the series
    named by its fingerprint, as reports.regressions.series names it by model)."""
    if df.empty:
        return []
    verdicts = []
    agg = run_points(df)
    records = agg.to_dict("records")
    keys = list(zip(agg["case_key"], agg["device_fingerprint"], strict=True))
    start = 0
    while start < len(records):
        end = start
        while end < len(records) and keys[end] == keys[start]:
            end += 1
        series = records[start:end]
        points = series_points(series)
        gate = judge(points, window=window, z_threshold=z_threshold, min_change=min_change, min_baseline=min_baseline)
        changes, drift = history_pass(points, min_change=min_change)
        first_bad = gate.first_bad
        if first_bad is None and drift is not None:
            first_bad = _drift_start(changes, drift, points)
        seg_start = next((p.run_id for p in points if p.segment == points[-1].segment), None) if points else None
        verdicts.append(SeriesVerdict(
            case_key=keys[start][0], device_fingerprint=keys[start][1], device_name=str(series[0]["device_name"]),
            status=gate.status, latest=gate.latest, previous=gate.previous, baseline=gate.baseline,
            points=tuple(points), segment_start_run=seg_start, note=gate.note, pooled=gate.pooled,
            change_points=changes, drift=drift, first_bad=first_bad, series=keys[start][1],
        ))
        start = end
    return verdicts
