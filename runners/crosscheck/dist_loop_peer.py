"""The `dist_loop` peer of collectives: a plain torch.distributed loop written the nccl-tests way.

It runs in a group of processes of its own (runners/crosscheck/dist_loop.py), of the same world
size, backend and devices as rooflab's group: per loop, 5 warmup calls, a barrier, a host clock
around N calls back to back (the GPU synchronised before the second reading), / N, the ranks'
times averaged, as nccl-tests reports by default. N is sized once per case from a probe loop so
that a loop lasts about LOOP_MS; a round is LOOPS_PER_ROUND loops, its figure their median. It is
held against rooflab's `stream` mode, which times the same way; a case asked `isolated` is timed
by rooflab in that mode too, and the difference of the two is the method difference.
"""
from __future__ import annotations

import statistics
from typing import ClassVar

from rooflab.runners.crosscheck.dist_loop import LoopCase, LoopGroup, loop_calls
from rooflab.runners.crosscheck.mode import TimerMode, collective_mode
from rooflab.runners.crosscheck.peer import PeerClock, PeerName, PeerTiming, package_version
from rooflab.runners.orchestration.kept_group import KeptGroup
from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.vocab import CacheMode, CollectiveMode

LOOP_MS = 50.0  # one loop lasts about this long
LOOPS_PER_ROUND = 6  # loops per round: the round's figure is their median


class DistLoopPeer:
    name: ClassVar[PeerName] = PeerName.DIST_LOOP

    def __init__(self, loop_ms: float = LOOP_MS, loops: int = LOOPS_PER_ROUND) -> None:
        self.loop_ms, self.loops = loop_ms, loops
        self._groups: KeptGroup[LoopGroup] = KeptGroup(LoopGroup)
        self._calls: dict[str, int] = {}  # case key -> N, sized once per case

    def version(self) -> str | None:
        return package_version("torch")

    def unavailable_reason(self, device: DeviceInfo) -> str | None:
        try:
            import torch.distributed as dist
        except Exception as exc:  # noqa: BLE001 - any import failure means the peer is unavailable
            return f"torch.distributed is not importable: {exc}"
        if not dist.is_available():
            return "this torch build has no torch.distributed"
        return None

    def mode_for(self, case: Case, device: DeviceInfo, *, op_syncs: bool = False) -> TimerMode:
        """nccl-tests' method: hot, N calls back to back under a host clock, / N, the ranks averaged."""
        return collective_mode(CollectiveMode.STREAM, device)

    def time_collective(self, case: Case, devices: tuple[str, ...], backend: str) -> PeerTiming:
        group = self._groups.get(backend, devices)
        loop = LoopCase(case.op, int(case.params["n"]), case.dtype, bool(case.params.get("inplace", False)))
        calls = self._calls.get(case.case_key)
        if calls is None:
            calls = self._calls[case.case_key] = loop_calls(group.per_call_ms(loop), self.loop_ms)
        figures = group.time(loop, calls, self.loops)
        samples = tuple(f.mean_ms for f in figures)
        return PeerTiming(float(statistics.median(samples)), samples, CacheMode.HOT, PeerClock.HOST_LOOP_RANK_MEAN,
                          calls_per_sample=calls)

    def close(self) -> None:
        self._groups.close()
