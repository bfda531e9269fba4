"""How often a sharded night's split moves a case to another shard (a script, not a test).

    .venv/bin/python -m tests.perf.bench_shard_moves                      # the nightly spec, 8 shards
    .venv/bin/python -m tests.perf.bench_shard_moves --shards 4 --noise 0.001 0.01

Each shard of a night splits the suite the same way (runners.orchestration.shards.partition), balanced
by the previous night's medians. Those medians differ a little from night to night, so the split
does too. Here every case's previous median is its op model's time per call
(`model_call_s`) times 1 + `noise` x a standard normal draw, drawn afresh each night (`--nights`
nights), and the split is made as the shards make it (`estimate_cost_s` over those medians). Printed
per noise level: the share of cases on another shard than the night before, and, with each shard
pinned to one node, the share of cases whose series on tonight's node holds enough points for the
gate (MIN_BASELINE good points before the newest two) after `--nights` nights, which by model every
case has.
"""
from __future__ import annotations

import argparse
import functools
import platform
import time

import numpy as np

from rooflab.reports.regressions.options import MIN_BASELINE
from rooflab.runners.orchestration.shards import estimate_cost_s, model_call_s, partition
from rooflab.suite.case import Case
from rooflab.suite.spec import expand, load_spec


def cost_s(case: Case, medians: dict[str, float]) -> float:
    return estimate_cost_s(case, medians)


def moves(spec: str, shards: int, noise: float, nights: int, seed: int) -> tuple[list[float], list[int]]:
    """(share of cases moved, night by night; per case, the nights its last night's shard measured it)."""
    cases = expand(load_spec(spec), "cuda")
    model_ms = {c.case_key: model_call_s(c)[0] * 1e3 for c in cases}
    rng = np.random.default_rng(seed)
    where: list[dict[str, int]] = []
    for _ in range(nights):
        medians = {k: v * (1 + noise * rng.standard_normal()) for k, v in model_ms.items()}
        split = partition(cases, shards, functools.partial(cost_s, medians=medians))
        where.append({c.case_key: i for i, shard in enumerate(split) for c in shard})
    moved = [float(np.mean([now[k] != before[k] for k in now])) for before, now in zip(where, where[1:], strict=False)]
    last = where[-1]
    return moved, [sum(night[k] == last[k] for night in where) for k in last]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="nightly")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--nights", type=int, default=31)
    parser.add_argument("--noise", type=float, nargs="+", default=[0.0001, 0.001, 0.01, 0.05])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"spec {args.spec}, {args.shards} shards, {args.nights} nights, seed {args.seed}; "
          f"Python {platform.python_version()}, {platform.machine()}")
    print("| night-to-night noise of a median | cases moved a night: median (min-max) "
          "| points of tonight's device's series: median | judgeable by device |")
    print("|---|---|---|---|")
    for noise in args.noise:
        start = time.perf_counter()
        moved, points = moves(args.spec, args.shards, noise, args.nights, args.seed)
        judged = np.mean([p >= MIN_BASELINE + 2 for p in points])  # a baseline before the newest two
        print(f"| {noise:.2%} | {np.median(moved):.0%} ({min(moved):.0%}-{max(moved):.0%}) | "
              f"{np.median(points):.0f} of {args.nights} | {judged:.0%} |  ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
