"""One case of a cross-check: prepared as a worker prepares it, timed round by round by rooflab as
configured, by rooflab in each peer's mode and by each peer, and judged (runners.crosscheck.verdict).

Within a round: rooflab as configured, then for each peer the peer and rooflab in that peer's mode
(a mode shared by two peers, or equal to the configured one, is timed once and used for both; a
block mean takes as many calls per sample as the peer says it just took, else as many as the
peer's rule would choose). A peer that times in a process of its own (OwnProcessPeer: nvbench) runs all its rounds
after the case's buffers are released here; its in-mode rounds run here with the others.
"""
from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rooflab.runners.crosscheck.mode import (
    Clock,
    TimerMode,
    batch_calls,
    configured_mode,
    differences,
    measure_in_mode,
    release_buffers,
    timer_block_calls,
)
from rooflab.runners.crosscheck.peer import CollectivePeer, OwnProcessPeer, Peer, PeerTiming
from rooflab.runners.crosscheck.verdict import REASON_TEXT, Reason, agreement, summarize_timer
from rooflab.runners.machine import contention
from rooflab.runners.orchestration.messages import CaseOutcome, CaseRequest
from rooflab.runners.orchestration.prepare import ready_case as prepare
from rooflab.runners.orchestration.prepare import time_ready
from rooflab.runners.orchestration.worker import _release_quietly, describe_exception
from rooflab.suite.case import Case
from rooflab.suite.ops.collective import FAMILY
from rooflab.vocab import DeviceKind, ResultStatus, device_kind_of


@dataclass(frozen=True)
class PeerCheck:
    """One case against one peer: rooflab as configured, rooflab in the peer's mode and the peer,
    with spreads, the two ratios and the verdict (on the second)."""

    case_key: str
    op: str
    family: str
    cache: str
    peer: str
    peer_version: str | None
    status: str  # ok | skipped | failed | incorrect
    error: str | None = None
    peer_cache: str | None = None
    peer_clock: str | None = None
    rooflab_median_ms: float | None = None
    rooflab_spread: float | None = None
    peer_median_ms: float | None = None
    peer_spread: float | None = None
    ratio: float | None = None  # rooflab as configured / peer: the method difference
    disagrees: bool = False  # judged on the in-mode figures
    likely_reason: str | None = None
    rooflab_rounds_ms: tuple[float, ...] = ()
    peer_rounds_ms: tuple[float, ...] = ()
    contended: bool = False  # the machine was seen contended while rooflab or the peer timed the case
    contention_reasons: tuple[str, ...] = ()
    peer_mode: str | None = None  # how the peer times (runners.crosscheck.mode.TimerMode.label)
    rooflab_mode: str | None = None  # how rooflab, as configured, times
    method_differences: tuple[str, ...] = ()  # `aspect: rooflab / peer` where the two modes differ
    in_mode_median_ms: float | None = None  # rooflab's engine in the peer's mode
    in_mode_spread: float | None = None
    in_mode_ratio: float | None = None  # in_mode_median_ms / peer_median_ms: the engines' agreement
    in_mode_rounds_ms: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["reason_text"] = REASON_TEXT[Reason(self.likely_reason)] if self.likely_reason else None
        return out


@dataclass
class Rounds:
    """One timer's per-round medians and samples."""

    medians_ms: list[float] = field(default_factory=list)
    samples_ms: list[tuple[float, ...]] = field(default_factory=list)

    def add(self, result: Any) -> None:
        self.medians_ms.append(result.stats.median_ms)
        self.samples_ms.append(tuple(result.samples_ms))


@dataclass
class PeerRounds:
    """One peer's rounds of one case (a kernel peer's or a collective peer's)."""

    peer: Peer | CollectivePeer
    mode: TimerMode | None = None
    timings: list[PeerTiming] = field(default_factory=list)
    error: str | None = None
    contention: tuple[str, ...] = ()  # what competed for the machine while rooflab or this peer timed


@contextlib.contextmanager
def _on_device(torch_device: str) -> Iterator[None]:
    if device_kind_of(torch_device) is not DeviceKind.CUDA:
        yield
        return
    import torch

    with torch.cuda.device(torch.device(torch_device)):
        yield


def check_case(
    case: Case,
    device: Any,
    peers: Sequence[Peer],
    *,
    rounds: int,
    seed: int = 0,
    timing_overrides: dict[str, Any] | None = None,
) -> list[PeerCheck]:
    """Prepare `case` as a worker does, time it `rounds` times (see the module doc), judge."""
    versions = {p.name: p.version() for p in peers}

    def rows(status: str, error: str | None) -> list[PeerCheck]:
        return [PeerCheck(case.case_key, case.op, case.family, case.cache, p.name.value, versions[p.name], status,
                          error) for p in peers]

    if case.family == FAMILY:
        return rows(ResultStatus.SKIPPED, "a collective is timed in a group of rank processes: the collective "
                                          "peers time it (runners/crosscheck/collective_check.py), not this one")

    request = CaseRequest(case=case, seed=seed, timing_overrides=timing_overrides or {})
    theirs = [PeerRounds(p) for p in peers]
    ready = None
    watch = machine_watch(device)
    try:
        with _on_device(device.torch_device):
            ready = prepare(request, device, time.perf_counter())
            if isinstance(ready, CaseOutcome):
                return rows(ready.status, ready.error)
            ours, in_mode, configured = _time_rounds(ready, case, device, theirs, rounds, describe_exception)
    except Exception as exc:  # noqa: BLE001 - a case that fails to prepare or time is data: status failed
        return rows(ResultStatus.FAILED, describe_exception(exc))
    finally:
        ready = None  # the inputs go before the release
        seen_here = watch.stop().reasons
        release_buffers()
        _release_quietly(device)
    for entry in theirs:  # after the release: the peer's own process prepares the case again
        if isinstance(entry.peer, OwnProcessPeer) and entry.error is None:
            # that process computes on the GPU: here it is the peer, not another job
            child_watch = machine_watch(device, gpu=False)
            try:
                entry.timings = entry.peer.time_rounds(request, device=device, rounds=rounds)
            except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, the others go on
                entry.error = describe_exception(exc)
            finally:
                entry.contention = tuple(dict.fromkeys(seen_here + child_watch.stop().reasons))
        else:
            entry.contention = seen_here
    return [judge(case, entry, ours, in_mode, configured, versions[entry.peer.name]) for entry in theirs]


def _time_rounds(ready: Any, case: Case, device: Any, theirs: list[PeerRounds], rounds: int,
                 describe: Callable[[BaseException], str]) -> tuple[Rounds, dict[TimerMode, Rounds], TimerMode]:
    """Every round of rooflab as configured, of rooflab in each peer's mode and of each in-process peer."""
    configured = configured_mode(case, ready.settings, device)
    op_syncs = ready.prepared.sync is not None
    for entry in theirs:
        entry.mode = entry.peer.mode_for(case, device, op_syncs=op_syncs)
    blocks = _BlockSizes(ready, device)
    ours = Rounds()
    in_mode: dict[TimerMode, Rounds] = {}
    for _ in range(rounds):
        ours.add(time_ready(ready, case, device))
        timed: set[TimerMode] = set()
        for entry in theirs:
            assert entry.mode is not None
            peer = entry.peer
            if entry.error is None and isinstance(peer, Peer) and not isinstance(peer, OwnProcessPeer):
                try:
                    entry.timings.append(peer.time(ready.prepared.fn, case=case, device=device,
                                                         sync=ready.prepared.sync))
                except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, the others go on
                    entry.error = describe(exc)
            if entry.mode != configured and entry.mode not in timed:
                # a block mean takes as many calls per sample as the peer just did, where it says
                said = entry.timings[-1].calls_per_sample if entry.timings else None
                sizes = blocks if said is None else (lambda _mode, n=said: n)
                in_mode.setdefault(entry.mode, Rounds()).add(measure_in_mode(ready, device, entry.mode, sizes))
                timed.add(entry.mode)
    in_mode[configured] = ours
    return ours, in_mode, configured


class _BlockSizes:
    """The calls per sample of a block-mean mode, as its peer would choose them (once per case)."""

    def __init__(self, ready: Any, device: Any) -> None:
        self._ready, self._device = ready, device
        self._sizes: dict[Clock, int] = {}

    def __call__(self, mode: TimerMode) -> int:
        if mode.clock not in self._sizes:
            fn, sync = self._ready.prepared.fn, self.synchronize()
            pick = timer_block_calls if mode.clock is Clock.HOST else batch_calls
            self._sizes[mode.clock] = pick(fn, sync)
        return self._sizes[mode.clock]

    def synchronize(self) -> Callable[[], None]:
        sync = self._ready.prepared.sync
        if not self._device.is_cuda:
            return sync or (lambda: None)
        import torch

        def synchronize() -> None:
            if sync is not None:
                sync()
            torch.cuda.synchronize(self._device.torch_device)

        return synchronize


def machine_watch(device: Any, *, gpu: bool = True) -> Any:
    """A started ContentionMonitor (the one the worker runs around a case); `gpu=False` leaves out
    the count of other processes on the GPU."""
    if gpu:
        return contention.ContentionMonitor.for_device(device).start()
    return contention.ContentionMonitor(loadavg_path=contention.LOADAVG, stat_path=contention.PROC_STAT,
                                         proc=contention.PROC).start()


def judge(case: Case, entry: PeerRounds, ours: Rounds, in_mode: dict[TimerMode, Rounds], configured: TimerMode,
           version: str | None) -> PeerCheck:
    contended = bool(entry.contention)
    mode = entry.mode
    base = functools.partial(
        PeerCheck, case_key=case.case_key, op=case.op, family=case.family, cache=case.cache,
        peer=entry.peer.name.value, peer_version=version, contended=contended, contention_reasons=entry.contention,
        peer_mode=mode.label() if mode else None, rooflab_mode=configured.label(),
        method_differences=differences(configured, mode) if mode else (),
    )
    if entry.error is not None or mode is None:
        return base(status=ResultStatus.FAILED, error=entry.error or "the peer did not say how it times")
    rooflab = summarize_timer(ours.medians_ms, ours.samples_ms)
    mine = in_mode[mode]
    rooflab_in_mode = summarize_timer(mine.medians_ms, mine.samples_ms)
    peer = summarize_timer([t.median_ms for t in entry.timings], [t.samples_ms for t in entry.timings])
    first = entry.timings[0]
    verdict = agreement(rooflab_in_mode, peer, contended=contended)
    return base(
        status=ResultStatus.OK, peer_cache=first.cache.value, peer_clock=first.clock.value,
        rooflab_median_ms=rooflab.median_ms, rooflab_spread=rooflab.spread, peer_median_ms=peer.median_ms,
        peer_spread=peer.spread, ratio=rooflab.median_ms / peer.median_ms, disagrees=verdict.disagrees,
        likely_reason=verdict.reason.value if verdict.reason else None,
        rooflab_rounds_ms=rooflab.rounds_ms, peer_rounds_ms=peer.rounds_ms,
        in_mode_median_ms=rooflab_in_mode.median_ms, in_mode_spread=rooflab_in_mode.spread,
        in_mode_ratio=verdict.ratio, in_mode_rounds_ms=rooflab_in_mode.rounds_ms,
    )
