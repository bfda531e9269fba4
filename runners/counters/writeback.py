"""The write-back pass: the DRAM bytes one call reads and writes, its write-back included.

A GPU's L2 is a write-back cache: a line the call writes reaches DRAM only when it is evicted, and
whatever is still dirty when the call's last kernel ends is written back later, outside anything ncu
measured. So `dram__bytes_write.sum` over the call's kernels can fall short of what the call wrote by
up to one L2 (and reads 0 for an output that fits in it). The profiling pass (ncu's default kernel
replay, `--cache-control all`) also writes each kernel's leftovers back outside the measurement, in
the flush it makes before the next kernel.

This pass is a second run of ncu over the same case (runners.counters.child, `sweep_bytes` set):

- ncu is told not to touch the caches (`--cache-control none`) and to count only the two DRAM
  metrics, which it counts in one replay pass: nothing is replayed, so what each kernel counts is
  what the hardware did in that order (a kernel that needed more passes fails the reading, as its
  later passes would not see the call's cache);
- before the NVTX range the child sweeps a buffer of SWEEP_FACTOR x the L2 (a read: a sum of it),
  which writes back every dirty line and leaves the L2 full of clean lines: the call starts cold
  (a hot case then makes one more call, which warms the L2 with its own data);
- inside the range: the call, then the sweep twice. The first sweep evicts the call's dirty lines,
  which are written back during it; the second, with nothing of the call left, writes what a sweep
  writes on its own. That second sweep is timed apart and subtracted from the first.

The rows of the pass are the call's kernels (as many as the profiling pass counted), then the two
sweeps (the same number of kernels each). The call's reads are its kernels' reads; its writes are its
kernels' writes plus the first sweep's writes less the second's (`caught_write_back_bytes`).
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rooflab.runners.counters.metrics import DRAM_READ, DRAM_WRITE

SWEEP_FACTOR = 4  # the sweep reads this many L2s: each of its lines is evicted several times over
METRICS: tuple[str, ...] = (DRAM_READ, DRAM_WRITE)
_PASSES = re.compile(r"^==PROF== Profiling .* - (\d+) pass(?:es)?\s*$")


class WriteBackError(ValueError):
    """The pass cannot be read as the call then two sweeps (the message says why)."""


@dataclass(frozen=True)
class WriteBack:
    dram_read_bytes: int  # the call's kernels
    dram_write_bytes: int  # the call's kernels, and its write-back caught by the first sweep
    caught_write_back_bytes: int  # first sweep's writes less the second's (0 when the second wrote more)
    sweep_own_write_bytes: int  # the second sweep's writes: what a sweep writes on its own


def sweep_bytes(l2_bytes: int) -> int:
    """The sweep's buffer: SWEEP_FACTOR x the L2; WriteBackError when the device gives no L2 size."""
    if l2_bytes <= 0:
        raise WriteBackError("the device reports no L2 size, so the sweep that catches the write-back cannot be "
                             "sized")
    return SWEEP_FACTOR * l2_bytes


def replay_passes(printed: str) -> int:
    """The most replay passes ncu says it made for one kernel (`==PROF== Profiling "k" - 0: ... - 2
    passes`), 1 when it says nothing."""
    counts = [int(m.group(1)) for line in printed.splitlines() if (m := _PASSES.match(line.strip()))]
    return max(counts, default=1)


def _total(rows: Sequence[Mapping[str, float | None]], metric: str, what: str) -> int:
    values = [row.get(metric) for row in rows]
    if any(v is None for v in values):
        raise WriteBackError(f"{metric} not reported for {what}")
    return int(round(sum(v for v in values if v is not None)))


def split_pass(per_kernel: Sequence[Mapping[str, float | None]], call_kernels: int, passes: int = 1) -> WriteBack:
    """The call's DRAM bytes from the pass's kernel rows (module docstring): the first `call_kernels`
    rows are the call's, the rest two sweeps of equally many kernels."""
    if passes > 1:
        raise WriteBackError(f"ncu replayed a kernel {passes} times: the later passes do not see the call's cache")
    sweeps = len(per_kernel) - call_kernels
    if call_kernels < 1 or sweeps < 2 or sweeps % 2:
        raise WriteBackError(f"{len(per_kernel)} kernels profiled: expected the call's {call_kernels} then two sweeps "
                             "of as many kernels each")
    call, first, second = (per_kernel[:call_kernels], per_kernel[call_kernels:call_kernels + sweeps // 2],
                           per_kernel[call_kernels + sweeps // 2:])
    caught = _total(first, DRAM_WRITE, "the first sweep") - _total(second, DRAM_WRITE, "the second sweep")
    caught = max(0, caught)
    return WriteBack(
        dram_read_bytes=_total(call, DRAM_READ, "the call"),
        dram_write_bytes=_total(call, DRAM_WRITE, "the call") + caught,
        caught_write_back_bytes=caught, sweep_own_write_bytes=_total(second, DRAM_WRITE, "the second sweep"),
    )
