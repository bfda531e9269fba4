"""The `nccl_tests` peer of collectives: nccl-tests' own binaries (`all_reduce_perf`, ...) when they
are on PATH, on the GPUs of rooflab's group.

One round is one run of the binary in one process driving every GPU of the group (`-g` ranks, the
GPUs named by CUDA_VISIBLE_DEVICES in the group's order), at the case's one size (`-b S -e S`, S as
nccl-tests counts it: suite's `size_bytes`), dtype and reduction, with nccl-tests' defaults for the
loop (5 warmup calls, 20 timed calls, the ranks' times averaged) and its data check off (`-c 0`:
rooflab's own run checks the values). The printed table is read by rooflab import's parser
(runners/peer_import/nccl_tests.py): the round's figure is the row of that size, the in-place half
for an in-place case, else the out-of-place one. Held against rooflab's `stream` mode, as the
`dist_loop` peer is.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import ClassVar

from rooflab.runners.crosscheck.mode import TimerMode, collective_mode
from rooflab.runners.crosscheck.peer import PeerClock, PeerName, PeerTiming
from rooflab.runners.peer_import.collective_results import DTYPES, op_name
from rooflab.runners.peer_import.nccl_records import NcclHalf, NcclTest
from rooflab.runners.peer_import.nccl_tests import parse_nccl_tests_text
from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops.collective import CollectiveOp
from rooflab.suite.ops.registry import get_op
from rooflab.vocab import CacheMode, CollectiveMode, DeviceKind, device_index_of, device_kind_of

WARMUP_CALLS = 5  # nccl-tests' -w default
TIMED_CALLS = 20  # nccl-tests' -n default
RUN_TIMEOUT_S = 300.0
BACKEND = "nccl"

# rooflab's collective -> nccl-tests' binary; rooflab's dtype -> the name nccl-tests' -d takes
BINARIES = {"all_reduce": "all_reduce_perf", "all_gather": "all_gather_perf", "reduce_scatter": "reduce_scatter_perf",
            "all_to_all": "alltoall_perf", "broadcast": "broadcast_perf", "send_recv": "sendrecv_perf"}
DTYPE_NAMES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16", "float64": "double", "int8": "int8",
               "int32": "int32"}
# the import reads both back as ours
assert all(op_name(binary) == ours for ours, binary in BINARIES.items())
assert all(DTYPES[name] == ours for ours, name in DTYPE_NAMES.items())


class NcclTestsError(RuntimeError):
    """The binary failed, or printed no row of the asked size."""


def command(case: Case, ranks: int) -> list[str]:
    """The binary's command line for one round of `case` on `ranks` GPUs (pure)."""
    op = get_op(case.op)
    assert isinstance(op, CollectiveOp)
    if case.dtype not in DTYPE_NAMES:
        raise NcclTestsError(f"nccl-tests has no -d for {case.dtype} (it has: {', '.join(DTYPE_NAMES)})")
    size = op.size_bytes({**case.params, "ranks": ranks}, case.dtype)
    args = [BINARIES[case.op], "-b", str(size), "-e", str(size), "-g", str(ranks), "-d", DTYPE_NAMES[case.dtype],
            "-w", str(WARMUP_CALLS), "-n", str(TIMED_CALLS), "-c", "0"]
    if op.reduces:
        args += ["-o", "sum"]
    return args


def half_of(tests: list[NcclTest], size_bytes: int, inplace: bool) -> NcclHalf:
    """The printed figures of the row of `size_bytes`: its in-place half or its out-of-place one."""
    rows = [row for test in tests for row in test.rows if row.size_bytes == size_bytes]
    if not rows:
        printed = sorted({row.size_bytes for test in tests for row in test.rows})
        raise NcclTestsError(f"nccl-tests printed no row of {size_bytes} B (rows: {printed or 'none'})")
    half = rows[0].in_place if inplace else rows[0].out_of_place
    if half is None:
        raise NcclTestsError(f"nccl-tests printed no {'in-place' if inplace else 'out-of-place'} time at "
                             f"{size_bytes} B")
    return half


class NcclTestsPeer:
    name: ClassVar[PeerName] = PeerName.NCCL_TESTS

    def __init__(self) -> None:
        self._version: str | None = None

    def version(self) -> str | None:
        """nccl-tests' version as its last run printed it (None before the first run)."""
        return self._version

    def unavailable_reason(self, device: DeviceInfo) -> str | None:
        if device_kind_of(device.torch_device) is not DeviceKind.CUDA:
            return "nccl-tests times NCCL collectives on CUDA GPUs; this cross-check runs on the CPU"
        if not any(shutil.which(binary) for binary in BINARIES.values()):
            return "no nccl-tests binary (all_reduce_perf, ...) on PATH"
        return None

    def mode_for(self, case: Case, device: DeviceInfo, *, op_syncs: bool = False) -> TimerMode:
        """nccl-tests' method: hot, N calls back to back under a host clock, / N, the ranks averaged."""
        return collective_mode(CollectiveMode.STREAM, device)

    def time_collective(self, case: Case, devices: tuple[str, ...], backend: str) -> PeerTiming:
        if backend != BACKEND:
            raise NcclTestsError(f"nccl-tests times NCCL; this case runs over {backend}")
        args = command(case, len(devices))
        if shutil.which(args[0]) is None:
            raise NcclTestsError(f"{args[0]} is not on PATH")
        visible = ",".join(str(device_index_of(d) or 0) for d in devices)
        proc = subprocess.run(args, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                              env={**os.environ, "CUDA_VISIBLE_DEVICES": visible})
        if proc.returncode != 0:
            tail = " ".join((proc.stderr or proc.stdout).split()[-40:])
            raise NcclTestsError(f"{' '.join(args)} exited {proc.returncode}: {tail}")
        tests = parse_nccl_tests_text(proc.stdout)
        self._version = next((t.tool_version for t in tests if t.tool_version), self._version)
        half = half_of(tests, int(args[2]), bool(case.params.get("inplace", False)))
        time_ms = half.time_us.value / 1000.0
        return PeerTiming(time_ms, (time_ms,), CacheMode.HOT, PeerClock.HOST_LOOP_RANK_MEAN,
                          calls_per_sample=TIMED_CALLS)

    def close(self) -> None:
        """Nothing is kept between rounds: each round is a run of its own."""
