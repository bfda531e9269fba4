"""What every peer timer implements, and the figure it hands back.

Two kinds of peers. A kernel peer (`Peer`) times a callable that rooflab prepared; it never
prepares anything itself. A collective peer (`CollectivePeer`) times a collective case in a group
of processes of its own (or a tool of its own) of the same world size, backend and devices as
rooflab's group: it prepares its own buffers, as nccl-tests or a user's script does. It says before
timing whether it can run here (`unavailable_reason`), how it will time a case (`mode_for`: its
cache state and flush, pace, hold, clock and what a sample is, as its own code does it; some peers
can only run hot, one always flushes), so that rooflab's engine can time the case the same way,
and what its number is (`PeerTiming.clock`: whose clock, per call or averaged over a block).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from importlib.metadata import version
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

from rooflab.runners.crosscheck.mode import TimerMode
from rooflab.runners.orchestration.processes import worker_context
from rooflab.suite.case import Case
from rooflab.suite.child import ChildCall
from rooflab.suite.device import DeviceInfo
from rooflab.vocab import CacheMode


class PeerName(StrEnum):
    TORCH = "torch"
    DO_BENCH = "do_bench"
    NVBENCH = "nvbench"
    CUPYX = "cupyx"
    DIST_LOOP = "dist_loop"  # collectives: a plain torch.distributed loop written the nccl-tests way
    NCCL_TESTS = "nccl_tests"  # collectives: nccl-tests' own binaries, when on PATH


class PeerClock(StrEnum):
    """What a peer's number is; the likely reasons of a disagreement depend on it."""

    HOST_BLOCK_MEAN = "host_block_mean"  # host wall time of a block of calls (synchronised) / calls
    DEVICE_EVENTS_PER_CALL = "device_events_per_call"  # an event pair around each call, no blocking kernel
    DEVICE_BLOCKED = "device_blocked"  # events while the stream is held behind a blocking kernel (nvbench cold)
    DEVICE_BATCH_MEAN = "device_batch_mean"  # events around a batch of launches / launches (nvbench hot)
    HOST_LOOP_RANK_MEAN = "host_loop_rank_mean"  # a collective: host clock around N calls / N, averaged over ranks


@dataclass(frozen=True)
class PeerTiming:
    """One peer's figure for one case in one round."""

    median_ms: float  # the peer's own central figure per call (ms)
    samples_ms: tuple[float, ...]  # what the peer handed back per call or per block (ms); may be empty
    cache: CacheMode  # the cache mode this figure is
    clock: PeerClock
    calls_per_sample: int | None = None  # the calls the peer averaged per sample, where it says (a block mean)


Call = Callable[[], Any]
T = TypeVar("T")


@runtime_checkable
class Peer(Protocol):
    name: ClassVar[PeerName]

    def version(self) -> str | None:
        """The peer package's version, or None when it is not importable."""

    def unavailable_reason(self, device: DeviceInfo) -> str | None:
        """Why this peer cannot time on `device` (not importable, not meaningful there), or None."""

    def mode_for(self, case: Case, device: DeviceInfo, *, op_syncs: bool = False) -> TimerMode:
        """How this peer times `case` on `device` (as close to the case's cache mode as it allows);
        `op_syncs`: the op synchronises the device itself (runners.crosscheck.mode.TimerMode)."""

    def time(self, fn: Call, *, case: Case, device: DeviceInfo, sync: Call | None) -> PeerTiming:
        """Time `fn` (already warmed up once and checked by rooflab); `sync` is the op's extra sync."""


@runtime_checkable
class CollectivePeer(Protocol):
    """A peer of collective cases (family collective). Adding one (nccl-tests' binaries, say) is a
    module with a class like runners/crosscheck/dist_loop_peer.py's, its name in PeerName and its
    line in runners/crosscheck/peers.py; runners/crosscheck/collective_check.py times it in rounds
    beside rooflab's group and judges it as every other peer."""

    name: ClassVar[PeerName]

    def version(self) -> str | None:
        """The peer's version (its package's, or its tool's), or None when it cannot be found."""

    def unavailable_reason(self, device: DeviceInfo) -> str | None:
        """Why this peer cannot time collectives on `device` (not installed, not on PATH), or None."""

    def mode_for(self, case: Case, device: DeviceInfo, *, op_syncs: bool = False) -> TimerMode:
        """How this peer times the collective `case`."""

    def time_collective(self, case: Case, devices: tuple[str, ...], backend: str) -> PeerTiming:
        """One round: the collective `case` (its `ranks` resolved to len(devices)) timed on `devices`
        (rank r on devices[r]) over `backend`."""

    def close(self) -> None:
        """End whatever the peer keeps between rounds and cases (its processes)."""


@runtime_checkable
class OwnProcessPeer(Peer, Protocol):
    """A peer that cannot time twice in one process: it measures every round of a case at once, in a
    process of its own that prepares the case from the same request (and seed) as rooflab's."""

    def time_rounds(self, request: Any, *, device: DeviceInfo, rounds: int) -> list[PeerTiming]:
        """One figure per round for the case of `request` (a runners.orchestration.messages.CaseRequest)."""


def run_in_own_process(fn: Callable[..., T], args: tuple[Any, ...], *, timeout_s: float) -> T:
    """`fn(*args)` in a fresh process started as workers are (runners.orchestration.processes.worker_context), with
    this process's environment of now; an error in it, its death or no result in `timeout_s` raises
    (suite.child.ChildCallError) and the process is ended."""
    result: T = ChildCall(fn, args, worker_context()).result(timeout_s)
    return result


def package_version(distribution: str) -> str | None:
    try:
        return version(distribution)
    except Exception:  # noqa: BLE001 - not installed
        return None
