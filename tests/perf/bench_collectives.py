"""rooflab's collectives against a plain torch.distributed loop written the nccl-tests way, and the
run-to-run agreement of `rooflab run quick` (a script, not a test; its output is Markdown, to paste
into docs/collectives.md).

    .venv/bin/python -m tests.perf.bench_collectives                      # 2 gloo ranks, 5 rounds, 3 quick runs
    .venv/bin/python -m tests.perf.bench_collectives --rounds 9 --quick-runs 0

Part 1, like for like. float32 all_reduce at 4 KiB, 1 MiB and 16 MiB per rank, the same ranks and
backend for all three timers, in rounds that alternate them (stream, isolated, loop, stream, ...)
so that a change in the machine's load hits all alike:

- rooflab `stream` (the default mode): the case as `rooflab run quick` times it (its CPU
  collectives' timing settings), in a RankGroup (runners/orchestration/ranks.py); its median;
- rooflab `isolated`: the same case with `mode: isolated` (a barrier before each call, the slowest
  rank's time);
- the plain loop (runners/crosscheck/dist_loop.py, the cross-check's `dist_loop` peer), in a group
  of its own processes: 5 warmup calls, barrier, one clock around N back-to-back calls, / N, N
  sized so that a loop lasts about `--loop-ms` (at least nccl-tests' 20 calls); the ranks' times
  averaged (nccl-tests' `-a 1`), the slowest rank's printed beside.

Per size: the median over rounds of each figure, its spread (the range of the round figures over
their median), busbw (all_reduce: S x 2(N-1)/N) and the ratios to the loop.

Part 2, repeatability. `--quick-runs` runs of `rooflab run quick --device cpu --filter
family=collective` in a row (the CLI, in a fresh process each, into a temporary database), then the
busbw each stored for all_reduce and all_gather at every size in the default mode, the largest
over the smallest of the runs, and whether any run marked the result noisy or contended.

The load average is printed before and after each part: figures taken on a loaded machine say
little. The figures measured on this project's machine, with the load, are in docs/collectives.md.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rooflab.vocab import CollectiveMode

SIZES = (1024, 262_144, 4_194_304)  # float32 elements per rank: 4 KiB, 1 MiB, 16 MiB
ROOT = Path(__file__).resolve().parents[2]


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def spread(values: Sequence[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def quick_timing(n: int) -> Any:
    """The timing settings of quick's CPU all_reduce of `n` elements per rank (what `rooflab run quick`
    times it with: 200 ms below 1 MiB, 3 to 12 s from 1 MiB)."""
    from rooflab.suite.spec import apply_filters, expand, load_spec

    cases = apply_filters(expand(load_spec(str(ROOT / "suite/specs/quick.yaml")), "cpu"),
                          ["op=all_reduce", f"n={n}", "mode=stream"])
    return cases[0].timing


def like_for_like(rounds: int, ranks: int, loop_ms: float) -> dict[int, dict[str, list[float]]]:
    """Per size, per timer, the round figures (ms per call)."""
    from rooflab.runners.crosscheck.dist_loop import LoopCase, LoopGroup, loop_calls
    from rooflab.runners.orchestration.messages import CaseRequest
    from rooflab.runners.orchestration.ranks import RankGroup
    from rooflab.suite.case import Case
    from rooflab.suite.ops.registry import get_op

    op = get_op("all_reduce")
    figures: dict[int, dict[str, list[float]]] = {n: {"stream": [], "isolated": [], "loop": [], "loop_slowest": []}
                                                  for n in SIZES}
    with RankGroup("gloo", ["cpu"] * ranks) as group, LoopGroup("gloo", ["cpu"] * ranks) as loop:
        for n in SIZES:
            stream = Case("all_reduce", op.version, op.family, "gloo", "float32", "hot", "launch",
                          op.resolved_params({"n": n, "ranks": ranks}), timing=quick_timing(n))
            isolated = replace(stream, collective_mode=CollectiveMode.ISOLATED)
            plain = LoopCase("all_reduce", n, "float32")
            calls = loop_calls(loop.per_call_ms(plain), loop_ms)
            for _ in range(rounds):
                for name, case in (("stream", stream), ("isolated", isolated)):
                    outcome = group.run(CaseRequest(case, seed=0), 120.0).outcome
                    assert outcome.stats is not None, outcome.error
                    figures[n][name].append(outcome.stats.median_ms)
                figure = loop.time(plain, calls)[0]
                figures[n]["loop"].append(figure.mean_ms)
                figures[n]["loop_slowest"].append(figure.slowest_ms)
    return figures


def print_like_for_like(figures: dict[int, dict[str, list[float]]], ranks: int) -> None:
    from rooflab.suite.ops.registry import get_op

    op = get_op("all_reduce")
    print("| bytes per rank | stream ms | spread | isolated ms | spread | loop ms | spread | loop slowest rank ms "
          "| busbw stream GB/s | busbw loop GB/s | stream / loop | isolated / loop |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, f in figures.items():
        s, i, lp = (statistics.median(f[k]) for k in ("stream", "isolated", "loop"))
        bus = op.bytes({"n": n, "ranks": ranks}, "float32")
        print(f"| {_size(n * 4)} | {s:.4g} | {spread(f['stream']):.1%} | {i:.4g} | {spread(f['isolated']):.1%} "
              f"| {lp:.4g} | {spread(f['loop']):.1%} | {statistics.median(f['loop_slowest']):.4g} "
              f"| {bus / s / 1e6:.3g} | {bus / lp / 1e6:.3g} | {s / lp:.3f} | {i / lp:.3f} |")


def _size(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def quick_runs(runs: int) -> list[dict[str, tuple[float, str]]]:
    """Per run, per default-mode all_reduce/all_gather case: (busbw GB/s, quality)."""
    from rooflab.db.query import results

    out = []
    with tempfile.TemporaryDirectory(prefix="bench-collectives-") as folder:
        url = f"sqlite:///{folder}/runs.db"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
        for i in range(runs):
            run_id = f"quick-{i + 1}"
            subprocess.run([sys.executable, "-m", "rooflab", "run", str(ROOT / "suite/specs/quick.yaml"), "--device",
                            "cpu", "--filter", "family=collective", "--filter", "op=all_reduce,all_gather", "--db",
                            url, "--run-id", run_id, "--quiet"], check=True, env=env, cwd=folder,
                           stdout=subprocess.DEVNULL)
            rows = results(url, run_id=run_id)
            rows = rows[(rows["collective_mode"] == "stream") & (rows["status"] == "ok")]
            out.append({f"{r.op} {_size(int(r.bytes_per_rank))}": (float(r.gbps), str(r.quality))
                        for r in rows.assign(bytes_per_rank=_per_rank_bytes(rows)).itertuples()})
    return out


def _per_rank_bytes(rows: Any) -> list[int]:
    import json

    return [int(json.loads(p)["n"] if isinstance(p, str) else p["n"]) * 4 for p in rows["params"]]


def print_quick_runs(runs: list[dict[str, tuple[float, str]]]) -> None:
    keys = sorted(runs[0], key=lambda k: (k.split()[0], int(k.split()[1]) << (20 if k.endswith("MiB") else 10)))
    print("| case (stream) | " + " | ".join(f"run {i + 1} GB/s" for i in range(len(runs)))
          + " | largest / smallest | marked |")
    print("|---|" + "---:|" * len(runs) + "---:|---|")
    for key in keys:
        values = [run[key][0] for run in runs if key in run]
        marks = sorted({run[key][1] for run in runs if key in run} - {"good"})
        print(f"| {key} | " + " | ".join(f"{v:.3g}" for v in values)
              + f" | {max(values) / min(values):.3f} | {', '.join(marks) or 'good'} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--loop-ms", type=float, default=100.0, help="the plain loop's length (ms)")
    parser.add_argument("--quick-runs", type=int, default=3, help="runs of rooflab run quick (0: none)")
    args = parser.parse_args()
    import torch

    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs; Python {platform.python_version()}, torch {torch.__version__}, gloo, "
          f"{args.ranks} ranks, float32 all_reduce")
    before = load()
    figures = like_for_like(args.rounds, args.ranks, args.loop_ms)
    print(f"\nlike for like, {args.rounds} rounds alternating; load average before {before}, after {load()}\n")
    print_like_for_like(figures, args.ranks)
    if args.quick_runs > 0:
        before = load()
        runs = quick_runs(args.quick_runs)
        print(f"\n{args.quick_runs} runs of rooflab run quick --device cpu --filter family=collective in a row; "
              f"load average before {before}, after {load()}\n")
        print_quick_runs(runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
