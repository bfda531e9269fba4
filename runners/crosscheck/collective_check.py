"""One collective case of a cross-check: rooflab's rank group and each collective peer, in rounds.

A collective runs in a group of processes (runners/orchestration/ranks.py), never in the
cross-check's own process, so it is timed here rather than by case_check.py. Within a round:
rooflab as configured (the case's `collective_mode`), then for each collective peer (runners.crosscheck.peer.
CollectivePeer) the peer and, when the case's mode is not the peer's (an `isolated` case against a
stream-timed peer), rooflab in the peer's mode (the same case in `stream` mode); the rounds repeat
that, so whatever the machine does hits every timer alike. Each rooflab figure is a whole case as
`rooflab run` times it (warmup, the stopping rule, its median). The rows are judged as every
cross-check row (runners.crosscheck.verdict): ratio = rooflab as configured / peer, in-mode ratio
= rooflab in the peer's mode / peer, the disagreement judged on the second.

The group's devices are a run's (runners.orchestration.collectives.group_devices): on a CPU
`ranks` processes on the CPU, on CUDA one rank per GPU that torch sees. rooflab's group is kept
between cases of the same backend and devices (`RoofGroups`), as in a run; a fault ends it.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rooflab.runners.crosscheck.case_check import PeerCheck, PeerRounds, Rounds, judge, machine_watch
from rooflab.runners.crosscheck.mode import TimerMode, collective_mode
from rooflab.runners.crosscheck.peer import CollectivePeer
from rooflab.runners.orchestration.collectives import group_devices, group_skip_reason
from rooflab.runners.orchestration.kept_group import KeptGroup
from rooflab.runners.orchestration.messages import CaseRequest
from rooflab.runners.orchestration.ranks import RankGroup
from rooflab.runners.orchestration.supervisor import default_case_timeout_s
from rooflab.runners.orchestration.worker import describe_exception
from rooflab.suite.case import Case
from rooflab.vocab import CollectiveMode, DeviceKind, ResultStatus, device_kind_of

if TYPE_CHECKING:
    from rooflab.runners.orchestration.ranks import RankGroup


def _rank_group(backend: str, devices: tuple[str, ...]) -> RankGroup:
    return RankGroup(backend, devices)


class RoofGroups(KeptGroup["RankGroup"]):
    """rooflab's rank group of a cross-check, kept while consecutive cases share backend and devices."""

    def __init__(self) -> None:
        super().__init__(_rank_group)


class _GroupFault(RuntimeError):
    """rooflab's group did not time the case (its outcome's status and error)."""


def collective_devices(torch_device: str) -> list[str]:
    """The devices a cross-check's groups may use: the CPU, or every CUDA GPU torch sees."""
    if device_kind_of(torch_device) is not DeviceKind.CUDA:
        return [torch_device]
    import torch

    return [f"cuda:{i}" for i in range(torch.cuda.device_count())]


def in_mode_case(case: Case, mode: CollectiveMode) -> Case:
    """`case` asked in `mode` (its key then as that mode's case has it)."""
    return replace(case, collective_mode=mode)


def check_collective(case: Case, device: Any, peers: Sequence[CollectivePeer], *, rounds: int, groups: RoofGroups,
                     torch_devices: Sequence[str], seed: int = 0,
                     timing_overrides: dict[str, Any] | None = None) -> list[PeerCheck]:
    """Time the collective `case` `rounds` times with rooflab's group and each peer (module doc)."""
    versions = {p.name: p.version() for p in peers}

    def rows(status: str, error: str | None) -> list[PeerCheck]:
        return [PeerCheck(case.case_key, case.op, case.family, case.cache, p.name.value, versions[p.name], status,
                          error) for p in peers]

    devices, size, reason = group_devices(case, list(torch_devices))
    reason = reason or group_skip_reason(case, device, size)
    if reason or devices is None:
        return rows(ResultStatus.SKIPPED, reason)
    assert case.collective_mode is not None  # a collective case always has one (suite.case)
    configured = collective_mode(case.collective_mode, device)
    theirs = [PeerRounds(p, p.mode_for(case, device)) for p in peers]
    timer = functools.partial(_rooflab_round, groups=groups, backend=case.backend, devices=devices, seed=seed,
                              overrides=timing_overrides or {})
    watch = machine_watch(device)
    try:
        ours, in_mode = _time_rounds(case, tuple(devices), theirs, rounds, timer, configured, describe_exception)
    except _GroupFault as exc:
        return rows(exc.args[1], exc.args[0])
    except Exception as exc:  # noqa: BLE001 - a case that fails to time is data: status failed
        return rows(ResultStatus.FAILED, describe_exception(exc))
    finally:
        seen = watch.stop().reasons
    for entry in theirs:
        entry.contention = seen
    return [judge(case, entry, ours, in_mode, configured, versions[entry.peer.name]) for entry in theirs]


def _time_rounds(case: Case, devices: tuple[str, ...], theirs: list[PeerRounds], rounds: int, timer: Any,
                 configured: TimerMode, describe: Any) -> tuple[Rounds, dict[TimerMode, Rounds]]:
    """Every round: rooflab as configured, then each peer and rooflab in its mode where that differs."""
    ours = Rounds()
    in_mode = {configured: ours}
    for _ in range(rounds):
        ours.add(timer(case))
        timed: set[TimerMode] = {configured}
        for entry in theirs:
            peer = entry.peer
            assert isinstance(peer, CollectivePeer) and entry.mode is not None
            if entry.error is None:
                try:
                    entry.timings.append(peer.time_collective(case, devices, case.backend))
                except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, the others go on
                    entry.error = describe(exc)
            if entry.mode not in timed:  # the peer's mode is stream (every collective peer times a stream)
                in_mode.setdefault(entry.mode, Rounds()).add(timer(in_mode_case(case, CollectiveMode.STREAM)))
                timed.add(entry.mode)
    return ours, in_mode


def _rooflab_round(case: Case, *, groups: RoofGroups, backend: str, devices: list[str], seed: int,
                   overrides: dict[str, Any]) -> Any:
    """One rooflab figure of `case`: its outcome as `rooflab run` would store it; _GroupFault when
    the case does not end ok (the group is ended after a fault)."""
    group = groups.get(backend, devices)
    limit_s = default_case_timeout_s(case.timing.override(overrides), backend)
    result = group.run(CaseRequest(case, seed, overrides), limit_s)
    if result.broken:
        groups.close()
    outcome = result.outcome
    if outcome.status != ResultStatus.OK or outcome.stats is None:
        raise _GroupFault(outcome.error or f"rooflab's group ended the case {outcome.status}", outcome.status)
    return outcome
