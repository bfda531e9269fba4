"""Project a whole spec's wall time on one device from a measured sample of it.

The sample is one cost-balanced shard of the spec (`rooflab run SPEC --shard I/N`), which spreads
each benchmark's cases over the shards. Each sampled case's wall time is the gap between its
result's `measured_at` and the one before it (the first gap, which also holds the worker's start,
counts as start-up, paid once by a whole run too). The projection is stratified by benchmark:

    start-up + sum over benchmarks of (cases in the spec) x (mean wall time of its sampled cases)

with the mean over every sampled case standing in for a benchmark that has no sampled case (named
in the output). The plain `start-up + N x (sample wall - start-up)` is given beside it.

    python scripts/gpu_nightly_projection.py --db sqlite:///out/nightly-sample.db --spec nightly \
        --device-kind cuda --shards 24 --goal-s 1200 --json out/nightly-projection.json
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from rooflab.db.query import results, runs
from rooflab.suite.spec import expand, load_spec


@dataclass(frozen=True)
class Stratum:
    benchmark: str
    cases: int  # in the whole spec
    sampled: int
    mean_wall_s: float | None  # None when no case of it was sampled
    projected_s: float


@dataclass(frozen=True)
class Projection:
    spec_cases: int
    sampled_cases: int
    startup_s: float
    sample_wall_s: float
    stratified_s: float
    shard_scaled_s: float | None
    unsampled: tuple[str, ...]
    strata: tuple[Stratum, ...]

    def as_dict(self) -> dict:
        return {**asdict(self), "strata": [asdict(s) for s in self.strata], "unsampled": list(self.unsampled)}


def case_walls(run_started_s: float, measured_s: Sequence[float]) -> tuple[float, list[float]]:
    """(start-up, wall time of each case after the first) from the run's start and the results'
    `measured_at` times (seconds on one clock), in the order they were stored."""
    times = sorted(measured_s)
    if not times:
        return 0.0, []
    startup = max(times[0] - run_started_s, 0.0)
    return startup, [b - a for a, b in zip(times, times[1:], strict=False)]


def project(spec_counts: Mapping[str, int], sample: Sequence[tuple[str, float]], startup_s: float,
            sample_wall_s: float, shards: int | None) -> Projection:
    """Stratified projection; `sample` holds (benchmark, wall seconds) of each timed case."""
    walls: dict[str, list[float]] = defaultdict(list)
    for bench, wall in sample:
        walls[bench].append(wall)
    every = [w for ws in walls.values() for w in ws]
    overall = sum(every) / len(every) if every else 0.0
    strata, unsampled = [], []
    for bench, count in sorted(spec_counts.items()):
        got = walls.get(bench, [])
        mean = sum(got) / len(got) if got else None
        if mean is None:
            unsampled.append(bench)
        strata.append(Stratum(bench, count, len(got), mean, count * (mean if mean is not None else overall)))
    total = startup_s + sum(s.projected_s for s in strata)
    scaled = startup_s + shards * (sample_wall_s - startup_s) if shards else None
    return Projection(sum(spec_counts.values()), len(sample) + (1 if sample_wall_s > 0 else 0), startup_s,
                      sample_wall_s, total, scaled, tuple(unsampled), tuple(strata))


def spec_benchmarks(spec: str, device_kind: str) -> dict[str, str]:
    """case_key -> benchmark name, the first benchmark that yields the key."""
    out: dict[str, str] = {}
    for case in expand(load_spec(spec), device_kind):
        out.setdefault(case.case_key, case.benchmark)
    return out


def from_database(db_url: str, spec: str, device_kind: str, shards: int | None) -> Projection:
    owner = spec_benchmarks(spec, device_kind)
    counts: dict[str, int] = defaultdict(int)
    for bench in owner.values():
        counts[bench] += 1
    run_rows = runs(db_url)
    if run_rows.empty:
        raise SystemExit(f"nightly-projection: no run in {db_url}")
    run = run_rows.iloc[-1]
    rows = results(db_url, run_id=str(run["run_id"]), columns=["case_key", "measured_at"])
    rows = rows.sort_values("measured_at")
    started = run["started_at"].timestamp()
    stamps = [t.timestamp() for t in rows["measured_at"]]
    startup, walls = case_walls(started, stamps)
    keys = list(rows["case_key"])[1:]
    sample = [(owner.get(k, "(not in spec)"), w) for k, w in zip(keys, walls, strict=True)]
    wall = (stamps[-1] - started) if stamps else 0.0
    return project(dict(counts), sample, startup, wall, shards)


def markdown(p: Projection, goal_s: float, header: Mapping[str, str]) -> str:
    lines = ["# Nightly wall time: sample and projection", ""] + [f"- {k}: {v}" for k, v in header.items()]
    lines += [
        f"- cases in the spec: {p.spec_cases}; measured in the sample: {p.sampled_cases}",
        f"- sample wall time: {p.sample_wall_s:.1f} s, of which start-up {p.startup_s:.1f} s",
        f"- projected whole-spec wall time (stratified by benchmark): {p.stratified_s:.0f} s "
        f"= {p.stratified_s / 60:.1f} min against a goal of {goal_s / 60:.0f} min "
        f"({'within' if p.stratified_s <= goal_s else 'OVER'})",
    ]
    if p.shard_scaled_s is not None:
        lines.append(f"- shard count x sample wall time: {p.shard_scaled_s:.0f} s = {p.shard_scaled_s / 60:.1f} min")
    if p.unsampled:
        lines.append(f"- benchmarks with no sampled case (projected at the overall mean): {', '.join(p.unsampled)}")
    lines += ["", "| benchmark | cases | sampled | mean wall s | projected s |", "| --- | ---: | ---: | ---: | ---: |"]
    for s in sorted(p.strata, key=lambda s: -s.projected_s):
        mean = f"{s.mean_wall_s:.2f}" if s.mean_wall_s is not None else "-"
        lines.append(f"| {s.benchmark} | {s.cases} | {s.sampled} | {mean} | {s.projected_s:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", required=True, help="database holding the sample run (its newest run is the sample)")
    ap.add_argument("--spec", default="nightly")
    ap.add_argument("--device-kind", default="cuda", choices=("cpu", "cuda"))
    ap.add_argument("--shards", type=int, help="N of the --shard I/N that drew the sample")
    ap.add_argument("--goal-s", type=float, default=1200.0)
    ap.add_argument("--json", dest="json_out")
    ap.add_argument("--markdown")
    args = ap.parse_args(argv)
    p = from_database(args.db, args.spec, args.device_kind, args.shards)
    header = {"spec": args.spec, "device kind": args.device_kind, "database": args.db,
              "sample": f"shard 0/{args.shards}" if args.shards else "given run"}
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as fh:
            json.dump({**header, "goal_s": args.goal_s, **p.as_dict()}, fh, indent=2)
    text = markdown(p, args.goal_s, header)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as fh:
            fh.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
