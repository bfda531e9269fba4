"""A planted peer that, like nvbench's `cuda.bench`, refuses to time twice in one process.

It implements OwnProcessPeer: each case's rounds run in a fresh process (run_in_own_process) that
prepares the case from the request and times its callable with a host clock. A second use of the
module-level `_EXECUTED` flag in one process raises, as cuda.bench does, so the cross-check only
passes when every case really gets a process of its own. It records the child's PID per round, so
the test can see that two cases ran in two processes, neither of them the parent.
"""
from __future__ import annotations

import os
import time
from typing import Any, ClassVar

from rooflab.runners.crosscheck.mode import Clock, Sample, TimerMode, hot_mode
from rooflab.runners.crosscheck.peer import PeerClock, PeerName, PeerTiming, run_in_own_process
from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.vocab import CacheMode

_EXECUTED: list[bool] = []
CALLS_PER_ROUND = 20


def _child(request: Any, device: DeviceInfo, rounds: int) -> tuple[int, list[float]]:
    from rooflab.runners.orchestration.messages import CaseOutcome
    from rooflab.runners.orchestration.prepare import ready_case
    from rooflab.suite.ops.registry import all_ops

    if _EXECUTED:
        raise RuntimeError("benchmarks were already executed")
    _EXECUTED.append(True)
    all_ops()
    ready = ready_case(request, device, time.perf_counter())
    if isinstance(ready, CaseOutcome):
        raise RuntimeError(f"did not prepare: {ready.status}")
    means_ms = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(CALLS_PER_ROUND):
            ready.prepared.fn()
        means_ms.append((time.perf_counter() - start) * 1e3 / CALLS_PER_ROUND)
    return os.getpid(), means_ms


class OncePerProcessPeer:
    name: ClassVar[PeerName] = PeerName.NVBENCH  # stands in for nvbench
    pids: list[int]

    def __init__(self) -> None:
        self.pids = []

    def version(self) -> str | None:
        return "planted"

    def unavailable_reason(self, device: DeviceInfo) -> str | None:
        return None

    def mode_for(self, case: Case, device: DeviceInfo, *, op_syncs: bool = False) -> TimerMode:
        return hot_mode(device, hold=None, clock=Clock.HOST, sample=Sample.BLOCK_MEAN)

    def time(self, fn: Any, *, case: Case, device: DeviceInfo, sync: Any) -> PeerTiming:
        raise AssertionError("an own-process peer is never asked to time in the parent")

    def time_rounds(self, request: Any, *, device: DeviceInfo, rounds: int) -> list[PeerTiming]:
        pid, means_ms = run_in_own_process(_child, (request, device, rounds), timeout_s=120)
        self.pids.append(pid)
        return [PeerTiming(m, (m,), CacheMode.HOT, PeerClock.HOST_BLOCK_MEAN) for m in means_ms]
