"""Nightly regression detection: a robust lookback test with a persistence rule.

Method (research/results-db.md §8):
- A series is one case_key on one device_fingerprint. Its points are per-run medians (the median
  of the result medians a run has for it, e.g. several GPUs of one node), ordered by run_order.
- A change of driver_version, cuda_version or torch_version starts a new segment; only the
  newest segment is judged, so an environment change never raises an alert by itself.
- Baseline: the last `window` good points of the segment before the two newest points (and before
  up to window // 2 points just before those that are already beyond half the thresholds in one
  direction, so a step that began a few runs ago does not pull the baseline along). Good
  means status ok, not throttled and not noisy (rel_ci_halfwidth above NOISY_REL_CI, or sampling
  stopped at max_time or noise_settled with IQR/median above NOISY_MAX_TIME_IQR). Center = median; spread =
  1.4826 * MAD, floored at SPREAD_FLOOR_REL * center so a zero-MAD series does not explode.
- A point is flagged when |robust z| > z_threshold and |relative change| > min_change.
- regression: the two newest points are both flagged slower (and both are good); suspect: only
  the newest is, or one of the two is throttled or noisy;
  improvement: the newest is flagged faster (confirmed when the one before is too).
- Fewer than MIN_BASELINE good points in the segment: insufficient_data.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

MAD_SCALE = 1.4826
SPREAD_FLOOR_REL = 0.005  # 0.5 % of the baseline median
MIN_BASELINE = 5
NOISY_REL_CI = 0.05
NOISY_MAX_TIME_IQR = 0.10
# stop reasons of a case that never reached its target precision: it ran out of time, or its noise
# estimate settled above the target (an inherently noisy case)
UNCONVERGED_STOPS = ("max_time", "noise_settled")
ENV_COLUMNS = ("driver_version", "cuda_version", "torch_version")
STATUSES = ("regression", "suspect", "improvement", "ok", "insufficient_data")


@dataclass(frozen=True)
class Point:
    """One run's figure in a series."""

    run_id: str
    run_order: int
    median_ms: float
    good: bool  # may enter a baseline
    excluded_because: str | None  # throttled / noisy / not ok
    segment: int


@dataclass(frozen=True)
class Baseline:
    center_ms: float
    spread_ms: float  # 1.4826 * MAD, floored
    n: int


@dataclass(frozen=True)
class Flag:
    """The test of one point against the baseline."""

    run_id: str
    median_ms: float
    z: float
    rel_change: float  # (value - center) / center; > 0 is slower
    flagged: bool

    @property
    def direction(self) -> str | None:
        if not self.flagged:
            return None
        return "slower" if self.rel_change > 0 else "faster"


@dataclass(frozen=True)
class SeriesVerdict:
    case_key: str
    device_fingerprint: str
    device_name: str
    status: str  # one of STATUSES
    latest: Flag | None
    previous: Flag | None
    baseline: Baseline | None
    points: tuple[Point, ...]  # the whole series, all segments (for trend plots); see n_points
    segment_start_run: str | None  # first run of the newest segment
    note: str = ""
    # points in the whole series when `points` holds only its newest ones (detect_in_database, for a
    # series it did not flag); None: `points` is the whole series
    n_points: int | None = None

    @property
    def alert(self) -> bool:
        return self.status in ("regression", "suspect")

    def as_dict(self) -> dict:
        return {
            "case_key": self.case_key,
            "device_fingerprint": self.device_fingerprint,
            "device_name": self.device_name,
            "status": self.status,
            "latest_run": self.latest.run_id if self.latest else None,
            "latest_ms": self.latest.median_ms if self.latest else None,
            "z": self.latest.z if self.latest else None,
            "rel_change": self.latest.rel_change if self.latest else None,
            "previous_flagged": self.previous.direction if self.previous else None,
            "baseline_ms": self.baseline.center_ms if self.baseline else None,
            "baseline_spread_ms": self.baseline.spread_ms if self.baseline else None,
            "baseline_n": self.baseline.n if self.baseline else 0,
            "segment_start_run": self.segment_start_run,
            "n_points": len(self.points) if self.n_points is None else self.n_points,
            "note": self.note,
        }


def robust_baseline(values: list[float]) -> Baseline:
    """Median and floored, scaled MAD of the values."""
    v = np.asarray(values, dtype=float)
    center = float(np.median(v))
    mad = float(np.median(np.abs(v - center)))
    return Baseline(center, max(MAD_SCALE * mad, SPREAD_FLOOR_REL * abs(center)), len(values))


def check_point(point: Point, base: Baseline, z_threshold: float, min_change: float) -> Flag:
    diff = point.median_ms - base.center_ms
    z = diff / base.spread_ms if base.spread_ms > 0 else (math.inf if diff else 0.0)
    rel = diff / base.center_ms if base.center_ms else math.inf
    return Flag(point.run_id, point.median_ms, z, rel, abs(z) > z_threshold and abs(rel) > min_change)


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
    throttled = df["throttled"].fillna(False).astype(bool) if "throttled" in df.columns else pd.Series(False, index=df.index)
    noisy = pd.Series(False, index=df.index)
    if "rel_ci_halfwidth" in df.columns:
        noisy |= pd.to_numeric(df["rel_ci_halfwidth"], errors="coerce") > NOISY_REL_CI
    if "stop_reason" in df.columns and "iqr_ms" in df.columns:
        noisy |= df["stop_reason"].isin(UNCONVERGED_STOPS) & (pd.to_numeric(df["iqr_ms"], errors="coerce") / median > NOISY_MAX_TIME_IQR)
    env = pd.Series("", index=df.index)
    for col in ENV_COLUMNS:
        if col in df.columns:  # a missing version (None or NaN, e.g. no driver on a CPU) reads as ""
            env = env + "|" + df[col].astype(object).where(df[col].notna(), "").astype(str)
    device = df["device_fingerprint"] if "device_fingerprint" in df.columns else df.get("device_name", pd.Series("", index=df.index))
    d = pd.DataFrame({
        "case_key": df["case_key"].astype(str), "device_fingerprint": device.astype(str),
        "run_id": df["run_id"].astype(str) if "run_id" in df.columns else order.astype(str), "order": order, "ok_median": median.where(ok),
        "not_ok": ~ok, "throttled": throttled, "noisy": noisy, "env": env,
        "device_name": df["device_name"].astype(str) if "device_name" in df.columns else "",
    })
    agg = d.groupby(["case_key", "device_fingerprint", "run_id"], sort=False).agg(
        order=("order", "min"), median_ms=("ok_median", "median"), not_ok=("not_ok", "any"),
        throttled=("throttled", "any"), noisy=("noisy", "any"), env=("env", "first"),
        device_name=("device_name", "first"),
    ).reset_index()
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
        points.append(Point(run_id=r["run_id"], run_order=int(r["order"]), median_ms=float(median),
                            good=why is None, excluded_because=why, segment=segment))
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


def judge(points: list[Point], *, window: int = 20, z_threshold: float = 4.0, min_change: float = 0.05,
          min_baseline: int = MIN_BASELINE) -> tuple[str, Flag | None, Flag | None, Baseline | None, str]:
    """(status, latest flag, previous flag, baseline, note) for one series' points."""
    if not points:
        return "insufficient_data", None, None, None, "no ok result"
    seg = [p for p in points if p.segment == points[-1].segment]
    latest = seg[-1]
    previous = seg[-2] if len(seg) >= 2 else None
    history = seg[:-2] if previous is not None else []
    history = history[: len(history) - _shifted_tail(history, window, z_threshold, min_change, min_baseline)]
    good = [p.median_ms for p in history if p.good][-window:]
    if len(good) < min_baseline:
        note = "new environment segment" if points[-1].segment > 0 and len(seg) < len(points) else ""
        return "insufficient_data", None, None, None, note or f"{len(good)} good points before the newest two"
    base = robust_baseline(good)
    last_flag = check_point(latest, base, z_threshold, min_change)
    prev_flag = check_point(previous, base, z_threshold, min_change) if previous is not None else None
    note = f"newest result {latest.excluded_because}" if latest.excluded_because else ""
    if last_flag.direction == "slower":
        if prev_flag is not None and prev_flag.direction == "slower":
            if latest.good and previous.good:
                return "regression", last_flag, prev_flag, base, note
            why = latest.excluded_because or previous.excluded_because
            return "suspect", last_flag, prev_flag, base, f"both newest results slower, but one is {why}"
        return "suspect", last_flag, prev_flag, base, note
    if last_flag.direction == "faster":
        confirmed = prev_flag is not None and prev_flag.direction == "faster"
        return "improvement", last_flag, prev_flag, base, (note + "; " if note else "") + (
            "confirmed by the previous run" if confirmed else "newest run only")
    if prev_flag is not None and prev_flag.flagged:
        note = (note + "; " if note else "") + f"previous run was flagged {prev_flag.direction}, newest is back"
    return "ok", last_flag, prev_flag, base, note


def detect(df: pd.DataFrame, window: int = 20, z_threshold: float = 4.0, min_change: float = 0.05,
           *, min_baseline: int = MIN_BASELINE) -> list[SeriesVerdict]:
    """A verdict for every series (case_key x device_fingerprint) in the results frame."""
    if df.empty:
        return []
    verdicts = []
    agg = run_points(df)
    records = agg.to_dict("records")
    keys = list(zip(agg["case_key"], agg["device_fingerprint"]))
    start = 0
    while start < len(records):
        end = start
        while end < len(records) and keys[end] == keys[start]:
            end += 1
        series = records[start:end]
        points = series_points(series)
        status, last, prev, base, note = judge(points, window=window, z_threshold=z_threshold,
                                               min_change=min_change, min_baseline=min_baseline)
        seg_start = next((p.run_id for p in points if p.segment == points[-1].segment), None) if points else None
        verdicts.append(SeriesVerdict(
            case_key=keys[start][0], device_fingerprint=keys[start][1], device_name=str(series[0]["device_name"]),
            status=status, latest=last, previous=prev, baseline=base, points=tuple(points),
            segment_start_run=seg_start, note=note,
        ))
        start = end
    return verdicts


# The columns of the results frame that `detect` reads.
DETECT_COLUMNS = ("case_key", "device_fingerprint", "device_name", "run_id", "run_order", "median_ms", "status",
                  "throttled", "rel_ci_halfwidth", "stop_reason", "iqr_ms") + ENV_COLUMNS
HISTORY_SLACK_RUNS = 10
REFETCH_ALL_ABOVE = 500  # series to read in full, above which the whole history is read instead


def history_runs(window: int) -> int:
    """How many of the newest runs `detect_in_database` reads first: the newest two points, the
    shifted tail `judge` may set aside (up to window // 2), the window itself and some slack."""
    return window + max(1, window // 2) + 2 + HISTORY_SLACK_RUNS


def window_suffices(points: list[Point] | tuple[Point, ...], window: int) -> bool:
    """True when `judge` on these newest points of a longer series reaches the same verdict as on
    the whole series: the newest segment starts inside them, or they hold `window` good points of
    that segment before the newest two and the largest shifted tail (everything `judge` looks at)."""
    if not points:
        return False
    seg = [p for p in points if p.segment == points[-1].segment]
    if len(seg) < len(points):
        return True
    cut = len(seg) - 2 - max(1, window // 2)
    return cut > 0 and sum(p.good for p in seg[:cut]) >= window


def detect_in_database(url: str, window: int = 20, z_threshold: float = 4.0, min_change: float = 0.05,
                       *, min_baseline: int = MIN_BASELINE) -> list[SeriesVerdict]:
    """`detect(db.query.results(url))`, computed from the newest runs instead of the whole history.

    Reads the newest `history_runs(window)` runs (a few columns), judges every series on them, and
    reads the whole history again only of the series that it flags (so their trend plots show it
    all), of those for which those runs do not hold everything `judge` looks at
    (`window_suffices`) and of those without an ok result in them. A series is one case on one
    device fingerprint, and the environment versions come from the fingerprint's environments
    row, so in a database a series never changes segment: its newest segment starts at its first
    ok run. Verdicts, their `as_dict()` and their order equal those of `detect` on the whole
    history; only an unflagged series' `points` hold its newest points (`n_points` counts all).
    """
    from db import query

    run_ids = query.run_ids(url)
    if not run_ids:
        return []
    recent = run_ids[-history_runs(window):]
    tail = query.results(url, run_id=recent, columns=DETECT_COLUMNS)
    kw = {"window": window, "z_threshold": z_threshold, "min_change": min_change, "min_baseline": min_baseline}
    if len(recent) == len(run_ids):
        return detect(tail, **kw)
    summary = query.series_summary(url)
    totals = {(k, f): (n, first) for k, f, n, first in summary.itertuples(index=False)}
    by_key = {(v.case_key, v.device_fingerprint): v for v in detect(tail, **kw)}
    again: set[tuple[str, str]] = set()
    for key, (n_total, first_run) in totals.items():
        v = by_key.get(key)
        if v is None:
            again.add(key)  # no result at all in the newest runs
        elif len(v.points) == n_total and v.status not in ("regression", "suspect", "improvement"):
            continue  # the whole series was read
        elif v.status in ("regression", "suspect", "improvement") or not window_suffices(v.points, window):
            again.add(key)
        else:
            one_segment = all(p.segment == v.points[-1].segment for p in v.points)
            by_key[key] = replace(v, n_points=n_total,
                                  segment_start_run=first_run if one_segment else v.segment_start_run)
    if again:
        keys = sorted({k for k, _ in again})
        if len(again) > REFETCH_ALL_ABOVE:
            history = query.results(url, columns=DETECT_COLUMNS)
        else:
            history = pd.concat([query.results(url, case_key=keys[i:i + 200], columns=DETECT_COLUMNS)
                                 for i in range(0, len(keys), 200)], ignore_index=True)
        mask = [(k, f) in again for k, f in zip(history["case_key"].astype(str), history["device_fingerprint"].astype(str))]
        for v in detect(history[mask], **kw):
            by_key[(v.case_key, v.device_fingerprint)] = v
    return [by_key[key] for key in sorted(by_key)]


def should_fail(verdicts: list[SeriesVerdict], fail_on: str) -> bool:
    """True when a verdict matches --fail-on (regression | suspect | never)."""
    if fail_on == "never":
        return False
    wanted = ("regression",) if fail_on == "regression" else ("regression", "suspect")
    return any(v.status in wanted for v in verdicts)
