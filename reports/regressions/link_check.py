"""The two-run check of a collective: is the newest run of a test slower than the run before it?

The regression gate (reports.regressions.gate) needs a baseline of MIN_BASELINE good runs before it judges a
series; a cluster's nccl-tests results often come as two files, yesterday's and today's, or the same
test before and after a change. A collective test measures many message sizes of one link at once, so
two runs already hold a sample of the link's change: one ratio per size. For the series the gate
leaves `insufficient_data`, grouped by test (the same collective, backend, dtype, modes, world size
and other params, every message size `n`, in one series' place: one device and one tool, or by
model one device fingerprint, which names its tool too):

- the two newest runs that both hold a good result of at least MIN_SIZES sizes are compared;
- only the sizes that move data count: those whose time in the older run is more than twice the
  test's smallest time (the diagnosis's rule: within 2x of the latency floor a collective is
  overhead-bound, and a slower link does not show there);
- the log of each size's time ratio (newer / older) is one observation; their mean, with a Student-t
  95 % interval over the sizes, is the link's change;
- the whole interval above 1 and the mean above `min_change` is a `regression` of every size counted
  that got slower (the newest run is its first bad run); the whole interval below 1 and the mean below
  -`min_change` an `improvement` of every size counted that got faster; a size that moved the other way,
  and every size when neither holds, stays `insufficient_data`, the note saying what was found.

Pure: verdicts in, verdicts out (reports.regressions.database_check and .series call `link_checked`).
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from rooflab.reports.regressions.gate import Baseline, Flag, Point, SeriesVerdict
from rooflab.reports.regressions.options import MIN_CHANGE
from rooflab.reports.regressions.verdicts import Verdict
from rooflab.suite.ops.collective import COLLECTIVE_OPS

MIN_SIZES = 3  # sizes that move data, in both runs
FLOOR_FACTOR = 2.0  # a size counts when its time is above this many times the test's smallest
# Student-t 97.5 % quantiles by degrees of freedom (1..30); beyond, the normal's
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    return T975[df - 1] if 1 <= df <= len(T975) else 1.96


def log_mean_interval(logs: Sequence[float]) -> tuple[float, float, float]:
    """(mean, Student-t 95 % half-width, t statistic) of two or more log ratios, one per size."""
    k = len(logs)
    mean = sum(logs) / k
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (k - 1))
    half = t975(k - 1) * sd / math.sqrt(k)
    t = mean / (sd / math.sqrt(k)) if sd > 0 else math.copysign(math.inf, mean) if mean else 0.0
    return mean, half, t


def _collective_ops() -> frozenset[str]:
    return frozenset(op.name for op in COLLECTIVE_OPS)


def table_of(case_key: str) -> tuple[str, int] | None:
    """(the case key without its `n`, its `n`) of a collective case key; None for any other case."""
    op, _, rest = case_key.partition(".v")
    if op not in _collective_ops():
        return None
    head, _, params = rest.rpartition(":")
    kept, n = [], None
    for part in params.split(","):
        name, _, value = part.partition("=")
        if name == "n" and value.isdigit():
            n = int(value)
        else:
            kept.append(part)
    return (f"{op}.v{head}:{','.join(kept)}", n) if n is not None else None


@dataclass(frozen=True)
class LinkChange:
    """The change of one test between two runs, over the sizes that move data."""

    older: str
    newer: str
    sizes: int
    ratio: float  # geometric mean of newer / older times
    low: float
    high: float
    t: float

    def describe(self) -> str:
        return (f"two-run check: run {self.newer} against {self.older} over the {self.sizes} sizes of this test "
                f"above {FLOOR_FACTOR:g}x its smallest time: time x{self.ratio:.3f} "
                f"[{self.low:.3f}, {self.high:.3f}] (95 %, t over sizes)")


def _pairs(members: Sequence[SeriesVerdict]) -> tuple[str, str, dict[str, tuple[Point, Point]]] | None:
    """The two newest runs held, good, by at least MIN_SIZES members, and each member's points in them."""
    good = {v.case_key: {p.run_id: p for p in v.points if p.good} for v in members}
    orders = {p.run_id: p.run_order for v in members for p in v.points if p.good}
    runs = sorted(orders, key=lambda r: (orders[r], r), reverse=True)
    for i, newer in enumerate(runs):
        for older in runs[i + 1:]:
            both = {k: (pts[older], pts[newer]) for k, pts in good.items() if older in pts and newer in pts}
            if len(both) >= MIN_SIZES:
                return older, newer, both
    return None


def link_change(members: Sequence[SeriesVerdict]) -> tuple[LinkChange, list[str]] | None:
    """The change of one test's two newest common runs, and the case keys it counted (None: too few)."""
    found = _pairs(members)
    if found is None:
        return None
    older, newer, both = found
    floor = min(a.median_ms for a, _ in both.values())
    counted = {k: (a, b) for k, (a, b) in both.items() if a.median_ms > FLOOR_FACTOR * floor}
    if len(counted) < MIN_SIZES:
        return None
    logs = [math.log(b.median_ms / a.median_ms) for a, b in counted.values()]
    mean, half, t = log_mean_interval(logs)
    change = LinkChange(older, newer, len(logs), math.exp(mean), math.exp(mean - half), math.exp(mean + half), t)
    return change, sorted(counted)


def _judged(v: SeriesVerdict, change: LinkChange, status: Verdict) -> SeriesVerdict:
    by_run = {p.run_id: p for p in v.points}
    old, new = by_run[change.older], by_run[change.newer]
    rel = new.median_ms / old.median_ms - 1.0
    flagged = status != Verdict.INSUFFICIENT_DATA
    latest = Flag(run_id=new.run_id, median_ms=new.median_ms, z=change.t, rel_change=rel, flagged=flagged)
    return replace(v, status=status, latest=latest, previous=None,
                   baseline=Baseline(center_ms=old.median_ms, spread_ms=0.0, n=1),
                   first_bad=new if status == Verdict.REGRESSION else None,
                   note="; ".join(x for x in (v.note, change.describe()) if x))


def _own(v: SeriesVerdict, change: LinkChange, status: Verdict) -> Verdict:
    """The test's verdict for one of its sizes, unless that size moved the other way (a size that got
    faster in a regressed test is no regression; it stays insufficient_data, its note saying the test's
    change)."""
    by_run = {p.run_id: p.median_ms for p in v.points}
    ratio = by_run[change.newer] / by_run[change.older]
    if (status == Verdict.REGRESSION and ratio <= 1.0) or (status == Verdict.IMPROVEMENT and ratio >= 1.0):
        return Verdict.INSUFFICIENT_DATA
    return status


def _status(change: LinkChange, min_change: float) -> Verdict:
    if change.low > 1.0 and change.ratio - 1.0 > min_change:
        return Verdict.REGRESSION
    if change.high < 1.0 and 1.0 - change.ratio > min_change:
        return Verdict.IMPROVEMENT
    return Verdict.INSUFFICIENT_DATA


def link_checked(verdicts: list[SeriesVerdict], min_change: float = MIN_CHANGE) -> list[SeriesVerdict]:
    """`verdicts`, the collective series the gate could not judge replaced by the two-run check's
    verdict (see the module doc); every other verdict, and the order, unchanged."""
    groups: dict[tuple[str, str], list[SeriesVerdict]] = defaultdict(list)
    for v in verdicts:
        test = table_of(v.case_key) if v.status == Verdict.INSUFFICIENT_DATA else None
        if test is not None:
            groups[(v.key[1], test[0])].append(v)
    replaced: dict[tuple[str, str], SeriesVerdict] = {}
    for members in groups.values():
        if len(members) < MIN_SIZES:
            continue
        found = link_change(members)
        if found is None:
            continue
        change, counted = found
        status = _status(change, min_change)
        for v in members:
            if v.case_key in counted:
                replaced[v.key] = _judged(v, change, _own(v, change, status))
    return [replaced.get(v.key, v) for v in verdicts]


@dataclass(frozen=True)
class TableSpeedup:
    """One collective test compared between two sides over its sizes that move data (`compare`):
    the geometric mean speedup (baseline / candidate time) with its Student-t 95 % interval."""

    table: str  # the case key without its `n`
    sizes: int
    speedup: float
    low: float
    high: float

    @property
    def standing(self) -> str:
        return "faster" if self.low > 1.0 else "slower" if self.high < 1.0 else "not_significant"

    def as_dict(self) -> dict[str, object]:
        return {"test": self.table, "sizes": self.sizes, "speedup": self.speedup, "low": self.low,
                "high": self.high, "standing": self.standing}


def table_speedups(case_keys: Sequence[str], baseline_ms: Sequence[float],
                   candidate_ms: Sequence[float]) -> list[TableSpeedup]:
    """Each collective test among the compared cases (their keys and both sides' medians), over the
    sizes above FLOOR_FACTOR x its smallest baseline time, at least MIN_SIZES of them."""
    groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for key, b, c in zip(case_keys, baseline_ms, candidate_ms, strict=True):
        found = table_of(str(key))
        if found is not None and b > 0 and c > 0:
            groups[found[0]].append((float(b), float(c)))
    out = []
    for table, pairs in sorted(groups.items()):
        floor = min(b for b, _ in pairs)
        logs = [math.log(b / c) for b, c in pairs if b > FLOOR_FACTOR * floor]
        if len(logs) < MIN_SIZES:
            continue
        mean, half, _ = log_mean_interval(logs)
        out.append(TableSpeedup(table, len(logs), math.exp(mean), math.exp(mean - half), math.exp(mean + half)))
    return out
