"""Power of `rooflab fleet` on a simulated fleet (a script, not a test): how often it names a slow
device, how often it names a healthy one, and whether it calls a fleet-wide step a fleet shift.

    .venv/bin/python -m tests.perf.bench_fleet_power                 # 200 trials per row
    .venv/bin/python -m tests.perf.bench_fleet_power --trials 50 --noise-scale 2

Every trial simulates a fleet (tests/reports/fleet_sim.py: 8 nodes x 8 GPUs, the GPU cases of the
health spec, each device with a stable offset of its own and night-to-night noise, seed = the
trial's number) with `--history` nights before the planted night, and judges it with the defaults,
exactly as `rooflab fleet` does (reports.fleet.judge.judge_fleet):

- one device made 5 % slower on one wall (the walls in turn) on the planted night: share named slow
  or drain on that night;
- the same on the fleet's first night (no history at all: the device slow from its first night);
- 3 % slower: share named slow or drain on the planted night or one of the two after it;
- every device 5 % slower on one wall at once: share of nights with a fleet shift on that wall;
- healthy devices (all but the planted one, every night judged above), per row and in all: slow
  and drain per 1,000 device-nights, and suspect; fleet shifts reported on nights without a step.

Rates come with their 95 % interval (Wilson). The issue's targets: >= 95 %, >= 95 % (first night,
same rule), >= 90 %, >= 95 %; false slow <= 1 per 1,000 device-nights, false drain 0.
"""
from __future__ import annotations

import argparse
import math
import platform
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from rooflab.reports.fleet.judge import judge_fleet
from rooflab.reports.fleet.options import FleetOptions
from rooflab.reports.fleet.records import FleetNight
from rooflab.reports.fleet.status import FleetStatus
from tests.reports.fleet_sim import FleetStep, SimFleet, Slowdown, device_key, night_start, simulate, up_to

WALLS = ("hbm_rw", "matrix", "elementary", "launch", "interconnect")
CAUGHT = (FleetStatus.SLOW, FleetStatus.DRAIN)


@dataclass
class Tally:
    """Counts over the trials of one row, and the healthy devices' statuses over every night judged."""

    hits: int = 0
    trials: int = 0
    by_wall: Counter = field(default_factory=Counter)
    wall_trials: Counter = field(default_factory=Counter)


@dataclass
class Healthy:
    statuses: Counter = field(default_factory=Counter)
    device_nights: int = 0
    shifts: int = 0  # fleet shifts reported on nights without a step
    nights: int = 0


def wilson(hits: int, n: int) -> tuple[float, float]:
    """The 95 % Wilson interval of a proportion."""
    if n == 0:
        return math.nan, math.nan
    z, p = 1.959964, hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def _judge(frame, night: int, options: FleetOptions) -> FleetNight:
    part = up_to(frame, night, options.nights_needed)
    return judge_fleet(part, options)


def _count_healthy(result: FleetNight, planted: str | None, healthy: Healthy, stepped: bool) -> None:
    for d in result.devices:
        if d.device_key != planted:
            healthy.statuses[d.status] += 1
            healthy.device_nights += 1
    if not stepped:
        healthy.nights += 1
        healthy.shifts += len(result.fleet_shifts)


def slow_trial(seed: int, pct: float, nights_after: int, history: int, noise: float, options: FleetOptions,
               healthy: Healthy) -> tuple[str, bool]:
    """One device `pct` slower on a wall from night `history` on: caught within `nights_after` nights?"""
    rng = np.random.default_rng(10_000 + seed)
    wall = WALLS[seed % len(WALLS)]
    sim = SimFleet(nights=history + nights_after, seed=seed, noise_scale=noise)
    candidates = range(0, sim.devices, sim.gpus_per_node) if wall == "interconnect" else range(sim.devices)
    device = int(rng.choice(list(candidates)))
    sim = SimFleet(nights=sim.nights, seed=seed, noise_scale=noise,
                   slowdowns=(Slowdown(device, wall, pct, history),))
    frame = simulate(sim)
    key = device_key(sim, device)
    caught = False
    for night in range(history, history + nights_after):
        result = _judge(frame, night, options)
        _count_healthy(result, key, healthy, stepped=False)
        status = next(d.status for d in result.devices if d.device_key == key)
        caught = caught or status in CAUGHT
    return wall, caught


def step_trial(seed: int, pct: float, history: int, noise: float, options: FleetOptions,
               healthy: Healthy) -> tuple[str, bool]:
    """Every device `pct` slower on one wall from night `history`: a fleet shift on that wall that night?"""
    wall = WALLS[seed % len(WALLS)]
    sim = SimFleet(nights=history + 1, seed=seed, noise_scale=noise, steps=(FleetStep(history, pct, (wall,)),))
    result = _judge(simulate(sim), history, options)
    _count_healthy(result, None, healthy, stepped=True)
    found = any(s.wall == wall and s.case_key is None and s.shift_pct < 0 for s in result.fleet_shifts)
    return wall, found


def _row(name: str, tally: Tally, target: str) -> str:
    low, high = wilson(tally.hits, tally.trials)
    walls = ", ".join(f"{w} {tally.by_wall[w]}/{tally.wall_trials[w]}" for w in WALLS if tally.wall_trials[w])
    return (f"| {name} | {100 * tally.hits / tally.trials:.1f} % ({100 * low:.1f}-{100 * high:.1f}) "
            f"| {tally.hits}/{tally.trials} | {target} | {walls} |")


def run(trials: int, noise: float, history: int) -> list[str]:
    options = FleetOptions()
    rows = {
        "5 % slow, named on its first slow night": (">= 95 %", lambda s, h: slow_trial(s, 5.0, 1, history, noise,
                                                                                      options, h)),
        "5 % slow from the fleet's first night (no history)": (">= 95 %", lambda s, h: slow_trial(s, 5.0, 1, 0, noise,
                                                                                                   options, h)),
        "3 % slow, named within three nights": (">= 90 %", lambda s, h: slow_trial(s, 3.0, 3, history, noise,
                                                                                  options, h)),
        "5 % fleet-wide step, a fleet shift that night": (">= 95 %", lambda s, h: step_trial(s, 5.0, history, noise,
                                                                                            options, h)),
    }
    tallies, healthy = {}, {}
    for name, (_, trial) in rows.items():
        tally, healthy[name] = Tally(), Healthy()
        for seed in range(trials):
            wall, hit = trial(seed, healthy[name])
            tally.trials += 1
            tally.hits += hit
            tally.wall_trials[wall] += 1
            tally.by_wall[wall] += hit
        tallies[name] = tally
    lines = ["| trial | rate (95 % interval) | hits | target | per wall |", "| --- | ---: | ---: | --- | --- |"]
    lines += [_row(name, tallies[name], target) for name, (target, _) in rows.items()]
    lines += ["", "| healthy devices, in the trials of | device-nights | slow per 1,000 | drain | suspect per 1,000 "
              "| fleet shifts on nights without a step |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    total = Healthy()
    for name, h in healthy.items():
        lines.append(_healthy_row(name, h))
        total.statuses.update(h.statuses)
        total.device_nights += h.device_nights
        total.shifts += h.shifts
        total.nights += h.nights
    lines.append(_healthy_row("all (targets: slow <= 1, drain 0)", total))
    return lines


def _healthy_row(name: str, h: Healthy) -> str:
    n = max(h.device_nights, 1)
    shifts = f"{h.shifts} of {h.nights}" if h.nights else "-"
    return (f"| {name} | {h.device_nights} | {1000 * h.statuses['slow'] / n:.2f} ({h.statuses['slow']}) "
            f"| {h.statuses['drain']} | {1000 * h.statuses['suspect'] / n:.2f} | {shifts} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200, help="trials per row (seeds 0..N-1)")
    parser.add_argument("--noise-scale", type=float, default=1.0, help="multiplies every spread of the simulation")
    parser.add_argument("--history", type=int, default=14, help="nights before the planted night")
    args = parser.parse_args()
    started = time.perf_counter()
    lines = run(args.trials, args.noise_scale, args.history)
    print(f"fleet power: 64 devices (8 nodes x 8), the health spec's GPU cases, {args.history} history nights, "
          f"noise x{args.noise_scale:g}, {args.trials} trials per row; defaults of rooflab fleet "
          f"(first night judged {night_start(0):%Y-%m-%d})")
    print("\n".join(lines))
    print(f"\n{time.perf_counter() - started:.0f} s on {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
