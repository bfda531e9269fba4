"""Nightly regression detection: a robust lookback test with a persistence rule.

Method (research/results-db.md §8):
- A series is one case_key on one device_fingerprint. Its points are per-run medians (the median
  of the result medians a run has for it, e.g. several GPUs of one node), ordered by run_order.
- A change of driver_version, cuda_version or torch_version starts a new segment; only the
  newest segment is judged, so an environment change never raises an alert by itself.
- Baseline: the last `window` good points of the segment before the two newest points. Good
  means status ok, not throttled and not noisy (rel_ci_halfwidth above NOISY_REL_CI, or sampling
  stopped at max_time with IQR/median above NOISY_MAX_TIME_IQR). Center = median; spread =
  1.4826 * MAD, floored at SPREAD_FLOOR_REL * center so a zero-MAD series does not explode.
- A point is flagged when |robust z| > z_threshold and |relative change| > min_change.
- regression: the two newest points are both flagged slower; suspect: only the newest is;
  improvement: the newest is flagged faster (confirmed when the one before is too).
- Fewer than MIN_BASELINE good points in the segment: insufficient_data.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

MAD_SCALE = 1.4826
SPREAD_FLOOR_REL = 0.005  # 0.5 % of the baseline median
MIN_BASELINE = 5
NOISY_REL_CI = 0.05
NOISY_MAX_TIME_IQR = 0.10
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
    points: tuple[Point, ...]  # the whole series, all segments (for trend plots)
    segment_start_run: str | None  # first run of the newest segment
    note: str = ""

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
            "n_points": len(self.points),
            "note": self.note,
        }


def robust_baseline(values: list[float]) -> Baseline:
    """Median and floored, scaled MAD of the values."""
    s = pd.Series(values, dtype=float)
    center = float(s.median())
    mad = float((s - center).abs().median())
    return Baseline(center, max(MAD_SCALE * mad, SPREAD_FLOOR_REL * abs(center)), len(values))


def check_point(point: Point, base: Baseline, z_threshold: float, min_change: float) -> Flag:
    diff = point.median_ms - base.center_ms
    z = diff / base.spread_ms if base.spread_ms > 0 else (math.inf if diff else 0.0)
    rel = diff / base.center_ms if base.center_ms else math.inf
    return Flag(point.run_id, point.median_ms, z, rel, abs(z) > z_threshold and abs(rel) > min_change)


def _exclusion(rows: pd.DataFrame) -> str | None:
    """Why a run's rows may not enter a baseline (None when they may)."""
    if not (rows["status"] == "ok").all():
        return "not ok"
    if "throttled" in rows and rows["throttled"].fillna(False).astype(bool).any():
        return "throttled"
    if "rel_ci_halfwidth" in rows:
        ci = pd.to_numeric(rows["rel_ci_halfwidth"], errors="coerce")
        if (ci > NOISY_REL_CI).any():
            return "noisy"
    if "stop_reason" in rows and "iqr_ms" in rows:
        spread = pd.to_numeric(rows["iqr_ms"], errors="coerce") / pd.to_numeric(rows["median_ms"], errors="coerce")
        if ((rows["stop_reason"] == "max_time") & (spread > NOISY_MAX_TIME_IQR)).any():
            return "noisy"
    return None


def series_points(rows: pd.DataFrame) -> list[Point]:
    """Per-run points of one series in run order, each with its environment segment."""
    order_col = "run_order" if "run_order" in rows.columns else "measured_at"
    points: list[Point] = []
    segment, last_env = 0, None
    grouped = rows.groupby("run_id", sort=False)
    runs = sorted(grouped, key=lambda kv: (kv[1][order_col].min(), str(kv[0])))
    for run_id, run_rows in runs:
        env = tuple(str(run_rows[c].iloc[0]) if c in run_rows else "" for c in ENV_COLUMNS)
        if last_env is not None and env != last_env:
            segment += 1
        last_env = env
        ok = run_rows[(run_rows["status"] == "ok") & (pd.to_numeric(run_rows["median_ms"], errors="coerce") > 0)]
        if ok.empty:
            continue
        why = _exclusion(run_rows)
        order = run_rows[order_col].min()
        points.append(Point(
            run_id=str(run_id),
            run_order=int(order) if order_col == "run_order" else len(points),
            median_ms=float(pd.to_numeric(ok["median_ms"]).median()),
            good=why is None,
            excluded_because=why,
            segment=segment,
        ))
    return points


def judge(points: list[Point], *, window: int = 20, z_threshold: float = 4.0, min_change: float = 0.05,
          min_baseline: int = MIN_BASELINE) -> tuple[str, Flag | None, Flag | None, Baseline | None, str]:
    """(status, latest flag, previous flag, baseline, note) for one series' points."""
    if not points:
        return "insufficient_data", None, None, None, "no ok result"
    seg = [p for p in points if p.segment == points[-1].segment]
    latest = seg[-1]
    previous = seg[-2] if len(seg) >= 2 else None
    history = seg[:-2] if previous is not None else []
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
            return "regression", last_flag, prev_flag, base, note
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
    for (case_key, fingerprint), rows in df.groupby(["case_key", "device_fingerprint"], sort=True):
        points = series_points(rows)
        status, last, prev, base, note = judge(points, window=window, z_threshold=z_threshold,
                                               min_change=min_change, min_baseline=min_baseline)
        seg_start = next((p.run_id for p in points if points and p.segment == points[-1].segment), None)
        name = rows["device_name"].dropna()
        verdicts.append(SeriesVerdict(
            case_key=str(case_key), device_fingerprint=str(fingerprint),
            device_name=str(name.iloc[0]) if len(name) else "", status=status, latest=last, previous=prev,
            baseline=base, points=tuple(points), segment_start_run=seg_start, note=note,
        ))
    return verdicts


def should_fail(verdicts: list[SeriesVerdict], fail_on: str) -> bool:
    """True when a verdict matches --fail-on (regression | suspect | never)."""
    if fail_on == "never":
        return False
    wanted = ("regression",) if fail_on == "regression" else ("regression", "suspect")
    return any(v.status in wanted for v in verdicts)
