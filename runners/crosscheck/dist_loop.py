"""A plain torch.distributed loop written the nccl-tests way, in a group of processes of its own.

This is the collectives' peer timer (runners/crosscheck/dist_loop_peer.py) and the reference of
tests/perf/bench_collectives.py. It shares nothing with rooflab's collective ops or timing engine:
its own buffers (random normal values, as a user's script would have them), its own calls to
torch.distributed, its own clock. Each rank, for one loop:

    WARMUP_CALLS calls -> barrier -> clock -> N calls back to back -> [synchronise the GPU] -> clock

and answers (clock reading) / N, its time per call. A loop's figure is the mean of the ranks'
times (what nccl-tests prints by default, its `-a 1`); the slowest rank's is kept beside it. N is
chosen by the caller (`loop_calls`: a loop of about a target time, from a probe loop's time per
call, and at least nccl-tests' 20 calls). The in-place all_reduce (and broadcast) run on what the
previous call left, as in any plain loop: values grow and may reach infinity, which changes no
timing on a CPU or a GPU.

`LoopGroup(backend, devices)` starts one process per rank from the workers' fork server, joined
through a FileStore in a private temporary folder (no fixed port), rank r on devices[r]; `time`
sends every rank the same loop and gathers their answers; `close` stops them and removes the
folder. A rank that fails answers its error; one that dies or does not answer within the time
limit ends the group (every rank killed) and `time` raises LoopError.
"""
from __future__ import annotations

import math
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rooflab.runners.orchestration.processes import worker_context
from rooflab.vocab import DeviceKind, device_kind_of

WARMUP_CALLS = 5  # before each loop's barrier
LOOP_MIN_CALLS = 20  # nccl-tests' default calls per timed loop (its `-n 20`), however long a call is
LOOP_MAX_CALLS = 1_000_000
START_TIMEOUT_S = 120.0
STOP_WAIT_S = 5.0


class LoopError(RuntimeError):
    """The loop group failed: a rank's error, a death or no answer in time."""


@dataclass(frozen=True)
class LoopCase:
    """What one loop runs: the collective (`all_reduce`, ...), elements per rank (nccl-tests'
    count), dtype, and in place (all_gather, reduce_scatter)."""

    op: str
    n: int
    dtype: str
    inplace: bool = False


@dataclass(frozen=True)
class LoopFigure:
    """One loop: every rank's time per call (ms), their mean (the figure) and the slowest."""

    rank_ms: tuple[float, ...]
    calls: int

    @property
    def mean_ms(self) -> float:
        return statistics.fmean(self.rank_ms)

    @property
    def slowest_ms(self) -> float:
        return max(self.rank_ms)


def loop_calls(per_call_ms: float, target_ms: float) -> int:
    """N for a loop of about `target_ms` at `per_call_ms` per call (LOOP_MIN_CALLS .. LOOP_MAX_CALLS)."""
    wanted = math.ceil(target_ms / per_call_ms) if per_call_ms > 0 else LOOP_MAX_CALLS
    return int(min(max(wanted, LOOP_MIN_CALLS), LOOP_MAX_CALLS))


def _collective(case: LoopCase, rank: int, size: int, device: str) -> Callable[[], Any]:
    """The one call of `case` on this rank, with its buffers, written as a user would write it."""
    import torch
    import torch.distributed as dist

    dtype = getattr(torch, case.dtype)
    n = case.n

    def randn(count: int) -> Any:
        return torch.randn(count, device=device).to(dtype)

    if case.op == "all_reduce":
        x = randn(n)
        return lambda: dist.all_reduce(x)
    if case.op == "broadcast":
        x = randn(n)
        return lambda: dist.broadcast(x, src=0)
    if case.op == "all_gather":
        out = randn(n * size)
        mine = out[rank * n:(rank + 1) * n] if case.inplace else randn(n)
        return lambda: dist.all_gather_into_tensor(out, mine)
    if case.op == "reduce_scatter":
        whole = randn(n * size)
        part = whole[rank * n:(rank + 1) * n] if case.inplace else randn(n)
        return lambda: dist.reduce_scatter_tensor(part, whole)
    if case.op == "all_to_all":
        send, recv = randn(n * size), randn(n * size)
        return lambda: dist.all_to_all_single(recv, send)
    if case.op == "send_recv":
        send, recv = randn(n), randn(n)
        after, before = (rank + 1) % size, (rank - 1) % size

        def swap() -> None:
            ops = [dist.P2POp(dist.isend, send, after), dist.P2POp(dist.irecv, recv, before)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()

        return swap
    raise ValueError(f"the plain loop has no collective {case.op!r}")


def _one_loop(call: Callable[[], Any], calls: int, sync: Callable[[], None]) -> float:
    """Warmup, barrier, clock around `calls` calls; seconds per call."""
    import torch.distributed as dist

    for _ in range(WARMUP_CALLS):
        call()
    sync()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        call()
    sync()
    return (time.perf_counter() - t0) / calls


def _rank_main(conn: Any, rank: int, size: int, backend: str, device: str, folder: str) -> None:
    """A rank of the loop group: answers each ("loop", LoopCase, calls, loops) with its seconds per
    call of each loop, until ("stop", ...)."""
    import torch
    import torch.distributed as dist

    cuda = device_kind_of(device) is DeviceKind.CUDA
    try:
        if cuda:
            torch.cuda.set_device(torch.device(device))
        else:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // size))
        dist.init_process_group(backend, store=dist.FileStore(os.path.join(folder, "store"), size), rank=rank,
                                world_size=size)
    except Exception as exc:  # noqa: BLE001 - told to the parent, which gives the group up
        conn.send(("error", f"rank {rank}: {type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    while True:
        kind, case, calls, loops = conn.recv()
        if kind == "stop":
            break
        try:
            call = _collective(case, rank, size, device)
            conn.send(("ok", [_one_loop(call, calls, sync) for _ in range(loops)]))
        except Exception as exc:  # noqa: BLE001 - told to the parent; the group is ended
            conn.send(("error", f"rank {rank}: {type(exc).__name__}: {exc}"))
            return
    dist.destroy_process_group()


class LoopGroup:
    """`len(devices)` processes of `backend`, rank r on devices[r], running plain loops."""

    def __init__(self, backend: str, devices: Sequence[str], *, timeout_s: float = START_TIMEOUT_S) -> None:
        self.backend, self.devices, self.size = backend, tuple(devices), len(devices)
        self.folder = tempfile.mkdtemp(prefix="rooflab-loop-")  # 0700, a fresh name
        ctx = worker_context()
        self._pipes, self._procs = [], []
        try:
            for rank, device in enumerate(self.devices):
                parent, child = ctx.Pipe()
                process = ctx.Process(target=_rank_main, args=(child, rank, self.size, backend, device, self.folder),
                                      name=f"rooflab-loop[{rank}/{self.size} {device}]")
                process.start()
                child.close()
                self._pipes.append(parent)
                self._procs.append(process)
            self._answers(timeout_s)
        except BaseException:
            self.close(kill=True)
            raise

    @property
    def broken(self) -> bool:
        """A fault killed the group (a rank's error, death or silence) or it was closed: no rank is left."""
        return not self._procs

    def _answers(self, timeout_s: float) -> list[Any]:
        """Every rank's next answer, in rank order; LoopError (the group killed) on a rank's error,
        death or silence past `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        out = []
        for rank, (conn, process) in enumerate(zip(self._pipes, self._procs, strict=True)):
            while not conn.poll(0.1):
                if not process.is_alive():
                    self.close(kill=True)
                    raise LoopError(f"rank {rank} of the plain loop died (exit code {process.exitcode})")
                if time.monotonic() > deadline:
                    self.close(kill=True)
                    raise LoopError(f"rank {rank} of the plain loop did not answer within {timeout_s:g} s")
            kind, payload = conn.recv()
            if kind == "error":
                self.close(kill=True)
                raise LoopError(str(payload))
            out.append(payload)
        return out

    def time(self, case: LoopCase, calls: int, loops: int = 1, *, timeout_s: float = 600.0) -> list[LoopFigure]:
        """`loops` loops of `calls` calls each on every rank: one LoopFigure per loop."""
        for conn in self._pipes:
            conn.send(("loop", case, calls, loops))
        per_rank = self._answers(timeout_s)
        return [LoopFigure(tuple(seconds * 1e3 for seconds in column), calls)
                for column in zip(*per_rank, strict=True)]

    def per_call_ms(self, case: LoopCase, probe_calls: int = 10) -> float:
        """A probe loop's time per call (the ranks' mean), to size the loops that follow."""
        return self.time(case, probe_calls)[0].mean_ms

    def close(self, *, kill: bool = False) -> None:
        for conn in self._pipes:
            if not kill:
                try:
                    conn.send(("stop", None, 0, 0))
                except (BrokenPipeError, OSError):
                    pass
        for process in self._procs:
            if not kill:
                process.join(STOP_WAIT_S)
            if process.is_alive():
                process.kill()
            process.join(STOP_WAIT_S)
        for conn in self._pipes:
            conn.close()
        self._pipes, self._procs = [], []
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> LoopGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(kill=exc[0] is not None)
