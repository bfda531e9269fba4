"""The link matrix's pairs against a plain gloo send/recv loop of our own (a script, not a test; its
output is Markdown, to paste into docs/collectives.md).

    .venv/bin/python -m tests.perf.bench_pairs                 # 4 ranks, 1 MiB, both ways and a_to_b, 3 rounds
    .venv/bin/python -m tests.perf.bench_pairs --rounds 5 --n 2

rooflab: the matrix of 4 gloo ranks on this CPU with one pair at a time (`pairs_at_once: 1`, the
mode to hold against a two-process loop: nothing else runs beside the pair), in a RankGroup
(runners/orchestration/ranks.py), timed as `rooflab run links` times it (stream mode: a barrier, N
calls back to back under each end's clock, / N, the two ends averaged), each pair's median of
SAMPLES streams (a fixed count, as the loop's).

The loop: two processes of its own (torch.multiprocessing, a FileStore in a temporary folder),
nothing of rooflab's ops, timing or processes: random float32 buffers, 5 warmup calls, a barrier,
then `--calls` calls back to back under perf_counter on each rank, / calls, the two ranks' times
averaged (nccl-tests' `-a 1`), the median of `--loops` such loops (25 loops of 20 calls: rooflab's
count of streams and its stream's floor). A call is what a pair's call
is: both directions at once (an isend and an irecv, each rank to the other) or one way (rank 0
sends, rank 1 receives).

The two alternate round by round (rooflab, loop, rooflab, ...), so that the machine's load hits
both alike. Per direction: each pair's busbw (n x 4 B / median) over the loop's, per round and the
median of the rounds; the issue's bound is 0.8 to 1.25. The load average is printed around each
part: a loaded machine's figures say little.

Last run here: docs/collectives.md, "The link matrix", holds the figures, with the machine and the
load.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rooflab.runners.orchestration.messages import CaseRequest
from rooflab.runners.orchestration.ranks import RankGroup
from rooflab.suite.timing import TimingSettings
from tests.runners.collective_cases import case

RANKS = 4
WARMUP_CALLS = 5
# like for like: a fixed number of streams of at least 20 calls (rooflab's stream floor), as the loop
# takes a fixed number of loops of --calls calls each; an adaptive stop would end rooflab's sampling
# where the machine happened to be steady, the loop's at a count
SAMPLES = 25
TIMING = TimingSettings(warmup_ms=20, warmup_calls=5, min_samples=SAMPLES, max_samples=SAMPLES, min_time_ms=0,
                        max_time_ms=60_000)


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _loop_rank(rank: int, folder: str, n: int, direction: str, loops: int, calls: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(os.path.join(folder, "store"), 2), rank=rank, world_size=2)
    x, y, peer = torch.randn(n), torch.randn(n), 1 - rank
    ops: list[tuple[Callable[..., object], torch.Tensor]] = []
    if direction == "both" or rank == 0:
        ops.append((dist.isend, x))
    if direction == "both" or rank == 1:
        ops.append((dist.irecv, y))

    def call() -> None:
        for work in dist.batch_isend_irecv([dist.P2POp(op, buffer, peer) for op, buffer in ops]):
            work.wait()

    figures = []
    for _ in range(loops):
        for _ in range(WARMUP_CALLS):
            call()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        figures.append((time.perf_counter() - t0) / calls * 1e3)
    Path(out, f"rank{rank}.txt").write_text("\n".join(map(repr, figures)))
    dist.destroy_process_group()


def plain_loop_ms(n: int, direction: str, loops: int, calls: int) -> float:
    """The loop's figure: the median over loops of the two ranks' mean ms per call."""
    with tempfile.TemporaryDirectory() as folder:
        mp.start_processes(_loop_rank, args=(folder, n, direction, loops, calls, folder), nprocs=2, join=True,
                           start_method="spawn")
        ranks = [[float(v) for v in Path(folder, f"rank{r}.txt").read_text().split()] for r in (0, 1)]
    return statistics.median(statistics.fmean(pair) for pair in zip(*ranks, strict=True))


def rooflab_pairs_ms(group: RankGroup, n: int, direction: str) -> dict[tuple[int, int], float]:
    result = group.run(CaseRequest(case("sendrecv_pairs", ranks=RANKS, n=n, direction=direction, pairs_at_once=1,
                                        timing=TIMING), seed=3), 600.0)
    if result.outcome.status != "ok":
        raise RuntimeError(result.outcome.error)
    return {p.pair: p.outcome.stats.median_ms for p in result.pairs if p.outcome.stats is not None}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=262_144, help="float32 elements a transfer (262144: 1 MiB)")
    parser.add_argument("--loops", type=int, default=SAMPLES)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--directions", default="both,a_to_b")
    args = parser.parse_args(argv)
    nbytes = args.n * 4
    print(f"# {platform.node()}, {os.cpu_count()} CPUs, torch {torch.__version__}, n={args.n} ({nbytes} B), "
          f"load before {load()}")
    with RankGroup("gloo", ["cpu"] * RANKS) as group:
        for direction in args.directions.split(","):
            ratios: dict[tuple[int, int], list[float]] = {}
            loop_gbps = []
            for r in range(args.rounds):
                ours = rooflab_pairs_ms(group, args.n, direction)
                loop_ms = plain_loop_ms(args.n, direction, args.loops, args.calls)
                loop_gbps.append(nbytes / loop_ms / 1e6)
                for pair, ms in ours.items():
                    ratios.setdefault(pair, []).append((nbytes / ms / 1e6) / loop_gbps[-1])
                print(f"round {r + 1} {direction}: loop {loop_ms:.4g} ms, load {load()}", flush=True)
            print(f"\n{direction}: loop busbw per round {', '.join(f'{g:.3g}' for g in loop_gbps)} GB/s\n")
            print("| pair | rooflab / loop, median of rounds | per round |")
            print("|---|---:|---|")
            for pair, values in sorted(ratios.items()):
                print(f"| {pair[0]}-{pair[1]} | {statistics.median(values):.3f} | "
                      f"{', '.join(f'{v:.2f}' for v in values)} |")
            print()
    print(f"load after {load()}")


if __name__ == "__main__":
    main()
