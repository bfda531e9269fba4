"""rooflab's all_reduce against a plain torch.distributed loop written the nccl-tests way (a script,
not a test).

    .venv/bin/python -m tests.perf.bench_collectives                  # 2 ranks, gloo, 5 rounds
    .venv/bin/python -m tests.perf.bench_collectives --rounds 9 --ranks 3

Three message sizes per rank (4 KiB, 1 MiB, 16 MiB of float32), the same ranks and backend for both:

- rooflab: one `all_reduce` case in a RankGroup (runners/orchestration/ranks.py), exactly as
  `rooflab run` times it: a barrier before every collective, the slowest rank's time per sample,
  the adaptive stopping rule; its figure is the case's median;
- the plain loop, in a group of its own processes: 5 warmup collectives, then barrier, one clock
  (perf_counter) around N back-to-back all_reduce calls, divided by N, N chosen so that the loop
  lasts about 100 ms; like nccl-tests, the ranks' times are averaged (its default `-a 1`), and the
  slowest rank's is printed beside it.

Rounds alternate the two (rooflab, loop, rooflab, loop, ...) so that a change in the machine's load
hits both alike. Printed per size: the median over rounds of each figure with its spread (the
range of the round figures, relative to their median), busbw (all_reduce on N ranks: S x 2(N-1)/N)
and the ratio rooflab / loop of the medians, then the load average before and after.

Figures measured on this project's 2-core machine are in docs/collectives.md, with the load.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

SIZES = (1024, 262_144, 4_194_304)  # float32 elements per rank: 4 KiB, 1 MiB, 16 MiB
LOOP_TARGET_S = 0.1


def _loop_rank(conn: Any, rank: int, size: int, folder: str) -> None:
    """A rank of the plain loop: waits for (elements, iterations), answers its own seconds per call."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(os.path.join(folder, "loop"), size), rank=rank,
                            world_size=size)
    while True:
        message = conn.recv()
        if message is None:
            break
        n, iterations = message
        x = torch.randn(n)
        for _ in range(5):
            dist.all_reduce(x)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iterations):
            dist.all_reduce(x)
        conn.send((time.perf_counter() - t0) / iterations)
    dist.destroy_process_group()


class PlainLoop:
    def __init__(self, ranks: int) -> None:
        import tempfile

        from rooflab.runners.orchestration.processes import worker_context

        ctx = worker_context()
        self.folder = tempfile.mkdtemp(prefix="bench-loop-")
        self.pipes, self.procs = [], []
        for r in range(ranks):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_loop_rank, args=(child, r, ranks, self.folder))
            p.start()
            self.pipes.append(parent)
            self.procs.append(p)

    def time_ms(self, n: int, iterations: int) -> tuple[float, float]:
        """(mean over ranks, slowest rank) ms per call."""
        for conn in self.pipes:
            conn.send((n, iterations))
        per_rank = [conn.recv() * 1e3 for conn in self.pipes]
        return statistics.fmean(per_rank), max(per_rank)

    def close(self) -> None:
        import shutil

        for conn in self.pipes:
            conn.send(None)
        for p in self.procs:
            p.join(10)
        shutil.rmtree(self.folder, ignore_errors=True)


def _spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ranks", type=int, default=2)
    args = parser.parse_args()
    from rooflab.runners.orchestration.messages import CaseRequest
    from rooflab.runners.orchestration.ranks import RankGroup
    from rooflab.suite.case import Case
    from rooflab.suite.ops.registry import get_op
    from rooflab.suite.timing import TimingSettings

    op = get_op("all_reduce")
    settings = TimingSettings(max_time_ms=1000.0, target_precision=0.01)
    load_before = open("/proc/loadavg").read().split()[:3]
    group = RankGroup("gloo", ["cpu"] * args.ranks)
    loop = PlainLoop(args.ranks)
    ours: dict[int, list[float]] = {n: [] for n in SIZES}
    theirs: dict[int, list[float]] = {n: [] for n in SIZES}
    slowest: dict[int, list[float]] = {n: [] for n in SIZES}
    try:
        for n in SIZES:  # size the loop once per size from a probe
            per_call_ms, _ = loop.time_ms(n, 10)
            iterations = max(10, int(LOOP_TARGET_S * 1e3 / max(per_call_ms, 1e-3)))
            for _ in range(args.rounds):
                case = Case("all_reduce", op.version, op.family, "gloo", "float32", "hot", "launch",
                            op.resolved_params({"n": n, "ranks": args.ranks}), timing=settings)
                result = group.run(CaseRequest(case, seed=0), 120.0)
                assert result.outcome.stats is not None, result.outcome.error
                ours[n].append(result.outcome.stats.median_ms)
                mean_ms, max_ms = loop.time_ms(n, iterations)
                theirs[n].append(mean_ms)
                slowest[n].append(max_ms)
    finally:
        group.close()
        loop.close()
    load_after = open("/proc/loadavg").read().split()[:3]
    print(f"all_reduce, gloo, {args.ranks} ranks on {os.cpu_count()} CPUs, {args.rounds} rounds alternating; "
          f"load average before {' '.join(load_before)}, after {' '.join(load_after)}")
    print(f"{'bytes/rank':>10}  {'rooflab ms':>11} {'spread':>7}  {'loop ms':>9} {'spread':>7}  "
          f"{'loop max-rank ms':>16}  {'busbw rooflab':>13} {'busbw loop':>10}  {'ratio':>6}")
    for n in SIZES:
        a, b, c = statistics.median(ours[n]), statistics.median(theirs[n]), statistics.median(slowest[n])
        bus = op.bytes({"n": n, "ranks": args.ranks}, "float32")
        print(f"{n * 4:>10}  {a:>11.4g} {_spread(ours[n]):>7.1%}  {b:>9.4g} {_spread(theirs[n]):>7.1%}  "
              f"{c:>16.4g}  {bus / a / 1e6:>13.3g} {bus / b / 1e6:>10.3g}  {a / b:>6.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
