"""The regression gate, pure: one series' points in, its verdict out (no pandas, no database).

reports.regressions.series frames a results table into series of points and calls `judge` and `history_pass`;
reports.regressions.database_check reads the database for it. The method (and where it comes from: docs/regressions.md):

- A series is one case_key on one physical device (or, by model, on one device fingerprint: the
  median of the result medians a run has for it, e.g. the GPUs of a node). Its points are per-run
  figures, ordered by run_order.
- A change of device fingerprint, driver_version, cuda_version or torch_version starts a new
  segment; only the newest segment is judged, so an environment change never raises an alert by itself.
- Baseline: the last `window` good points of the segment before the two newest points (and before
  up to window // 2 points just before those that are already beyond half the thresholds in one
  direction, so a step that began a few runs ago does not pull the baseline along). Good
  means status ok, not throttled and of good quality (reports.data.frames.quality_of: the stored quality,
  or for older results suite.quality's noise rule, the one the worker judges with). Center =
  median; spread = the larger of 1.4826 * MAD and IQR / 1.349, floored at SPREAD_FLOOR_REL *
  center: the MAD collapses onto one band of a two-band (bimodal) baseline, the IQR of a 50/50 one
  does not. The baseline also keeps its REPEATED-th highest value: the top of the range it has
  shown repeatedly.
- A point is flagged when |robust z| > z_threshold and |relative change| > min_change.
- regression: the two newest points, both good, judged together: their mean is flagged slower
  (z against spread / sqrt(2), widened for the baseline's own uncertainty), and each of them alone
  is slower by more than CONFIRM_Z spreads and min_change / 2, and lies above the top of the range
  the baseline has shown repeatedly. So one slow night followed by a normal one is never a
  regression, and neither is a return to a band the baseline keeps visiting.
- suspect: the newest point alone is flagged slower (but the pair is not a regression), or both
  newest are slower but one of them is throttled or noisy;
  improvement: the newest is flagged faster (confirmed when the one before is too).
- Fewer than MIN_BASELINE good points in the segment: insufficient_data.

Over the history (reports.regressions.changepoints), on the newest CHANGE_HISTORY good points of the newest
segment: e-divisive change points (each with its run, commit, size and p-value; those smaller than
min_change / 2 are not reported) and a drift flag (a significant slow rise of at least min_change
over the newest DRIFT_WINDOW points that a single step does not explain better).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rooflab.reports.regressions import changepoints as cp
from rooflab.reports.regressions.options import MIN_BASELINE, MIN_CHANGE, WINDOW, Z_THRESHOLD
from rooflab.reports.regressions.verdicts import ALERTS, SHOWN_VERDICTS, Verdict
from rooflab.vocab import SeriesBy

MAD_SCALE = 1.4826
IQR_SCALE = 1.349  # IQR of a standard normal
TRIM = 4.0  # the spread is the standard deviation of the values within TRIM robust spreads of the median
SPREAD_FLOOR_REL = 0.005  # 0.5 % of the baseline median
CONFIRM_Z = 2.5  # each of the two newest points of a regression, in baseline spreads
CONFIRM_Z_APART = 3.5  # the same, when the two newest points lie further apart than APART_Z * sqrt(2) spreads
APART_Z = 2.5
RANGE_MARGIN = 0.5  # a regression lies this many spreads above the top of the range shown repeatedly
REPEATED = 2  # a regression lies above the REPEATED-th highest value of the baseline
CHANGE_HISTORY = 60  # good points of the newest segment the change-point and drift pass reads


@dataclass(frozen=True, slots=True)  # slots: a year-scale check holds 420,000 of them
class Point:
    """One run's figure in a series."""

    run_id: str
    run_order: int
    median_ms: float
    good: bool  # may enter a baseline
    excluded_because: str | None  # throttled / noisy / not ok
    segment: int
    started_at: str | None = None  # ISO time of the run's start
    git_commit: str | None = None


@dataclass(frozen=True)
class Baseline:
    center_ms: float
    spread_ms: float  # max(1.4826 * MAD, IQR / 1.349), floored
    n: int
    high_ms: float = math.inf  # the REPEATED-th highest value: the top of the range shown repeatedly


@dataclass(frozen=True)
class Flag:
    """The test of one point (or of the mean of the two newest) against the baseline."""

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
class Gate:
    """The gate's judgement of the newest points of one series."""

    status: Verdict
    latest: Flag | None
    previous: Flag | None
    pooled: Flag | None  # the mean of the two newest points
    baseline: Baseline | None
    note: str
    first_bad: Point | None = None  # first run of the slow stretch that ends at the newest (alerts only)


@dataclass(frozen=True)
class Change:
    """A change point of a series, at the first run of its new level."""

    run_id: str
    run_order: int
    started_at: str | None
    git_commit: str | None
    before_ms: float  # mean of the segment before
    after_ms: float  # mean of the segment after
    rel_change: float  # > 0 is slower
    p_value: float
    direction: str  # slower | faster

    def as_dict(self) -> dict:
        return {"run_id": self.run_id, "run_order": self.run_order, "started_at": self.started_at,
                "git_commit": self.git_commit, "before_ms": self.before_ms, "after_ms": self.after_ms,
                "rel_change": self.rel_change, "p_value": self.p_value, "direction": self.direction}


@dataclass(frozen=True)
class DriftFlag:
    """A slow rise over the newest points (a trend that no single change point explains)."""

    first_run: str  # first run of the window the trend was fitted on
    n_points: int
    rel_change: float
    p_value: float

    def as_dict(self) -> dict:
        return {"first_run": self.first_run, "n_points": self.n_points, "rel_change": self.rel_change,
                "p_value": self.p_value}


@dataclass(frozen=True)
class SeriesVerdict:
    """The verdict of one series: one case on one physical device (`device_key`, `host`: the
    device's newest), or by model (`device_key` None) one case on one device fingerprint.
    `device_fingerprint` and `device_name` are those of the series' newest run."""

    case_key: str
    device_fingerprint: str
    device_name: str
    status: Verdict
    latest: Flag | None
    previous: Flag | None
    baseline: Baseline | None
    points: tuple[Point, ...]  # the whole series, all segments (for trend plots); see n_points
    segment_start_run: str | None  # first run of the newest segment
    note: str = ""
    # points in the whole series when `points` does not hold them all (detect_in_database: a series it
    # did not flag holds none, a collective's its newest ones); None: `points` is the whole series
    n_points: int | None = None
    pooled: Flag | None = None
    change_points: tuple[Change, ...] = ()
    drift: DriftFlag | None = None
    first_bad: Point | None = None
    series: str = ""  # the series within its case (reports.data.devices.series_ids); "": the fingerprint
    device_key: str | None = None  # the physical device; None: the series aggregates a model's devices
    host: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        """(case key, series): what names this series among the others."""
        return self.case_key, self.series or self.device_fingerprint

    @property
    def by(self) -> SeriesBy:
        """Whether this series follows one device or aggregates a model's devices."""
        return SeriesBy.MODEL if self.device_key is None else SeriesBy.DEVICE

    @property
    def alert(self) -> bool:
        return self.status in ALERTS

    @property
    def flagged(self) -> bool:
        """Shown in reports: an alert, an improvement or a drift."""
        return self.status in SHOWN_VERDICTS or self.drift is not None

    def as_dict(self) -> dict:
        return {
            "case_key": self.case_key,
            "by": str(self.by),
            "device_key": self.device_key,
            "host": self.host,
            "device_fingerprint": self.device_fingerprint,
            "device_name": self.device_name,
            "status": self.status,
            "latest_run": self.latest.run_id if self.latest else None,
            "latest_ms": self.latest.median_ms if self.latest else None,
            "z": self.latest.z if self.latest else None,
            "rel_change": self.latest.rel_change if self.latest else None,
            "previous_flagged": self.previous.direction if self.previous else None,
            "pooled_ms": self.pooled.median_ms if self.pooled else None,
            "pooled_z": self.pooled.z if self.pooled else None,
            "pooled_rel_change": self.pooled.rel_change if self.pooled else None,
            "baseline_ms": self.baseline.center_ms if self.baseline else None,
            "baseline_spread_ms": self.baseline.spread_ms if self.baseline else None,
            "baseline_n": self.baseline.n if self.baseline else 0,
            "segment_start_run": self.segment_start_run,
            "n_points": len(self.points) if self.n_points is None else self.n_points,
            "first_bad_run": self.first_bad.run_id if self.first_bad else None,
            "first_bad_commit": self.first_bad.git_commit if self.first_bad else None,
            "first_bad_started_at": self.first_bad.started_at if self.first_bad else None,
            "change_points": [c.as_dict() for c in self.change_points],
            "drift": self.drift is not None,
            "drift_detail": self.drift.as_dict() if self.drift else None,
            "note": self.note,
        }


def _quantile(v: list[float], q: float) -> float:
    """np.percentile's default (linear) quantile of the sorted list `v`, to the last bit."""
    index = (len(v) - 1) * q
    lo = math.floor(index)
    hi = min(lo + 1, len(v) - 1)
    a, b, t = v[lo], v[hi], index - lo
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


def robust_baseline(values: list[float]) -> Baseline:
    """Median; the standard deviation of the values within TRIM robust spreads of it (the robust
    spread: the larger of the scaled MAD and the scaled IQR), floored; and the top of the range
    the values show repeatedly. (Plain Python on short lists: the same figures as numpy's
    percentile and median, without their per-call cost.)"""
    v = sorted(float(x) for x in values)
    q1, center, q3 = _quantile(v, 0.25), _quantile(v, 0.5), _quantile(v, 0.75)
    mad = _quantile(sorted(abs(x - center) for x in v), 0.5)
    robust = max(MAD_SCALE * mad, float(q3 - q1) / IQR_SCALE)
    kept = [x for x in v if abs(x - center) <= TRIM * robust] if robust > 0 else [x for x in v if x == center]
    sd = float(np.std(np.array(kept), ddof=1)) if len(kept) >= 2 else 0.0
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


def judge(points: list[Point], *, window: int = WINDOW, z_threshold: float = Z_THRESHOLD,
          min_change: float = MIN_CHANGE,
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

    if pooled is not None and pooled.direction == "slower" and previous is not None and prev_flag is not None:
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
            note = (note + "; " if note else "") + ("both newest results lie within the range the baseline has "
                                                    "shown repeatedly")
    if last_flag.direction == "slower":
        return alert(Verdict.SUSPECT, note)
    if last_flag.direction == "faster":
        confirmed = prev_flag is not None and prev_flag.direction == "faster"
        return Gate(Verdict.IMPROVEMENT, last_flag, prev_flag, pooled, base, (note + "; " if note else "") + (
            "confirmed by the previous run" if confirmed else "newest run only"))
    if prev_flag is not None and prev_flag.flagged:
        note = (note + "; " if note else "") + f"previous run was flagged {prev_flag.direction}, newest is back"
    return Gate(Verdict.OK, last_flag, prev_flag, pooled, base, note)


@dataclass(frozen=True)
class HistoryPass:
    """What the change-point and drift pass found over a series' newest good points."""

    changes: tuple[Change, ...] = ()
    drift: DriftFlag | None = None


def history_pass(points: list[Point] | tuple[Point, ...], *, min_change: float = MIN_CHANGE,
                 history: int = CHANGE_HISTORY) -> HistoryPass:
    """Change points and drift over the newest `history` good points of the newest segment."""
    if not points:
        return HistoryPass()
    good = [p for p in points if p.segment == points[-1].segment and p.good][-history:]
    values = np.array([p.median_ms for p in good])
    changes = tuple(
        Change(good[c.index].run_id, good[c.index].run_order, good[c.index].started_at, good[c.index].git_commit,
               c.mean_before, c.mean_after, c.rel_change, c.p_value, str(c.direction))
        for c in (cp.change_points(values, min_rel_change=min_change / 2) if cp.may_change(values) else ()))
    found = cp.drift(values, min_change=min_change)
    flag = (None if found is None
            else DriftFlag(good[found.start_index].run_id, found.n_points, found.rel_change, found.p_value))
    return HistoryPass(changes, flag)


def drift_start(changes: tuple[Change, ...], drift: DriftFlag, points: list[Point]) -> Point | None:
    """The first bad point of a drift: its newest slower change point, else the start of its window."""
    slower = [c.run_id for c in changes if c.direction == "slower"]
    wanted = slower[-1] if slower else drift.first_run
    return next((p for p in points if p.run_id == wanted), None)

def window_suffices(points: list[Point] | tuple[Point, ...], window: int) -> bool:
    """True when `judge` and `history_pass` on these newest points of a longer series reach the same
    verdict as on the whole series: the newest segment starts inside them, or they hold `window`
    good points of that segment before the newest two and the largest shifted tail (everything
    `judge` looks at) and CHANGE_HISTORY good points (everything `history_pass` looks at)."""
    if not points:
        return False
    seg = [p for p in points if p.segment == points[-1].segment]
    if len(seg) < len(points):
        return True
    cut = len(seg) - 2 - max(1, window // 2)
    return cut > 0 and sum(p.good for p in seg[:cut]) >= window and sum(p.good for p in seg) >= CHANGE_HISTORY
