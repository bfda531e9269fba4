"""Detection rates of `rooflab regressions` on generated 60-night series (a script, not a test).

    .venv/bin/python -m tests.perf.bench_regressions              # 100 seeds per cell
    .venv/bin/python -m tests.perf.bench_regressions --seeds 400  # tighter rates, slower

Every cell generates `--seeds` series with tests/reports/gen_series.py (fixed seeds 0..N-1) and
judges them with the defaults, exactly as `detect` does (reports.regressions.gate.judge for the gate,
history_pass for change points and drift). It prints one markdown table:

- gate: share of series whose status is `regression` on the full series (suspect in brackets);
- change point: share with a slower change point within 3 nights of the planted night (steps,
  drifts: anywhere in the drift), or with any slower change point (series without a change);
- drift: share with the drift flag;
- within 3 nights: replayed night by night from the planted night, share flagged (gate regression,
  a slower change point, or drift; a one-night suspect does not count) by its third night; nights:
  median nights from the planted night to the first flag (1 = on that night), over the series
  flagged within 10 nights
  (drifts: from the first night of the ramp, within 30 nights);
- false alarms over 30 nights (series without a slower change): share flagged (regression, slower
  change point, or drift) on any of the newest 30 nights, replayed night by night.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable

import numpy as np

from rooflab.reports.regressions.gate import Point, history_pass, judge
from tests.reports import gen_series as g

Make = Callable[[int], g.Series]


def seeded(generator: Callable[..., g.Series], **params: float) -> Make:
    """`generator` with its parameters bound: a series for each seed."""
    return lambda seed: generator(seed=seed, **params)


def _points(values: np.ndarray) -> list[Point]:
    return [Point(f"r{i}", i, float(x), True, None, 0) for i, x in enumerate(values)]


def _flags(values: np.ndarray) -> tuple[str, bool, bool, list[int]]:
    pts = _points(values)
    status = judge(pts).status
    found = history_pass(pts)
    changes, drift = found.changes, found.drift
    return status, drift is not None, any(c.direction == "slower" for c in changes), [
        c.run_order for c in changes if c.direction == "slower"]


def _alarm(values: np.ndarray) -> bool:
    """What fails `--fail-on drift`, or shows a slower change point (a one-night `suspect` does not count)."""
    status, drift, slower, _ = _flags(values)
    return status == "regression" or drift or slower


def _first_flag(values: np.ndarray, start: int, horizon: int) -> int | None:
    """Nights from `start` (1 = that night) until the replay first raises a flag."""
    for night in range(start, min(len(values), start + horizon)):
        if _alarm(values[: night + 1]):
            return night - start + 1
    return None


def cell(make: Make, seeds: int, *, replay: bool, false_alarm_replay: bool) -> dict[str, str]:
    gate = suspect = cp = drift = within3 = false = 0
    nights: list[int] = []
    for seed in range(seeds):
        s = make(seed)
        status, has_drift, _, slower_at = _flags(s.values_ms)
        gate += status == "regression"
        suspect += status == "suspect"
        drift += has_drift
        if s.kind in (g.Kind.STEP, g.Kind.DRIFT) and s.size > 0 and s.change_at is not None:
            lo = s.change_at - 3
            hi = s.change_at + 3 if s.kind == g.Kind.STEP else len(s.values_ms)
            cp += any(lo <= at <= hi for at in slower_at)
        else:
            cp += bool(slower_at)
        if replay and s.change_at is not None:
            first = _first_flag(s.values_ms, s.change_at, 10 if s.kind == g.Kind.STEP else 30)
            if first is not None:
                nights.append(first)
                within3 += first <= 3
        if false_alarm_replay:
            false += any(_alarm(s.values_ms[: night + 1]) for night in range(len(s.values_ms) - 30, len(s.values_ms)))
    pct = lambda k: f"{100 * k / seeds:.0f} %"  # noqa: E731 - a named one-line lambda
    return {"gate": f"{pct(gate)} ({pct(suspect)})", "change point": pct(cp), "drift": pct(drift),
            "within 3 nights": pct(within3) if replay and make(0).kind == g.Kind.STEP else "",
            "nights": f"{statistics.median(nights):g}" if nights else "",
            "false alarms / 30 nights": pct(false) if false_alarm_replay else ""}


def cells() -> list[tuple[str, Make, bool, bool]]:
    out: list[tuple[str, Make, bool, bool]] = []
    for noise in (0.005, 0.01, 0.02, 0.05):
        n = f"{100 * noise:g} %"
        out.append((f"noise only, {n}", seeded(g.noise_only, noise=noise), False, True))
        for size in (0.05, 0.10, 0.20):
            out.append((f"+{100 * size:g} % step on the newest two nights, {n}",
                        seeded(g.step, size=size, at=-2, noise=noise), False, False))
        for size in (0.05, 0.10, 0.20):
            out.append((f"+{100 * size:g} % step at night 40 of 60, {n}",
                        seeded(g.step, size=size, at=40, noise=noise), True, False))
        for size in (0.05, 0.10, 0.20):
            out.append((f"+{100 * size:g} % drift over the last 30 nights, {n}",
                        seeded(g.drift, size=size, over=30, noise=noise), True, False))
        for at, where in ((-1, "newest"), (-2, "second-newest")):
            for size in (0.10, 0.30, 1.0):
                out.append((f"+{100 * size:g} % one-night spike on the {where} night, {n}",
                            seeded(g.spike, size=size, at=at, noise=noise), False, False))
        out.append((f"-10 % step (improvement) on the newest two nights, {n}",
                    seeded(g.step, size=-0.10, at=-2, noise=noise), False, False))
        out.append((f"-10 % step (improvement) at night 40 of 60, {n}",
                    seeded(g.step, size=-0.10, at=40, noise=noise), False, True))
    for share in (0.5, 0.15):
        for noise in (0.005, 0.01):
            out.append((f"two bands 10 % apart, {100 * (1 - share):g}/{100 * share:g}, {100 * noise:g} %",
                        seeded(g.two_band, gap=0.10, upper_share=share, noise=noise), False, True))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100, help="series per cell")
    parser.add_argument("--only", default="", help="run only the cells whose name contains this")
    args = parser.parse_args()
    print(f"# {args.seeds} series of {g.NIGHTS} nights per cell; numpy {np.__version__}, Python "
          f"{platform.python_version()}, {platform.machine()}")
    cols = ("gate", "change point", "drift", "within 3 nights", "nights", "false alarms / 30 nights")
    print("| series | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    t0, cpu = time.perf_counter(), time.process_time()
    for name, make, replay, false_replay in cells():
        if args.only and args.only not in name:
            continue
        row = cell(make, args.seeds, replay=replay, false_alarm_replay=false_replay)
        print(f"| {name} | " + " | ".join(row[c] for c in cols) + " |", flush=True)
    print(f"\n{time.perf_counter() - t0:.0f} s wall, {time.process_time() - cpu:.0f} s cpu")


if __name__ == "__main__":
    main()
