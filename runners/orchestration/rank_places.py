"""Where the ranks of a collective's group run: each rank's host, device and process.

Every rank tells the others its place once, when the group starts (`group_places`, over the group's
agreement); the places name where each rank ran in the group record (`RankPlace.text`), give the
ends of each pair of the link matrix (suite/ops/pairs.py), and say which processes on a rank's
host are the group's own, whose load is not contention (`own_pids`).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rooflab.record import EnvironmentRecord
from rooflab.runners.machine.environment import node_name
from rooflab.suite.device import DeviceInfo

if TYPE_CHECKING:  # the group timing loads in the rank processes only
    from rooflab.runners.engine.group_timing import GroupControl


@dataclass(frozen=True)
class RankPlace:
    """Where one rank of a group runs: its host, its device and that device's identity (the store's
    device key is its UUID, else its fingerprint), and its process."""

    host: str
    torch_device: str
    device_uuid: str | None
    device_fingerprint: str
    pid: int

    @property
    def text(self) -> str:
        """`host cuda:3 GPU-1234...` or `host cpu`: the group record's `rank_devices` entry."""
        return " ".join([self.host, self.torch_device] + ([self.device_uuid] if self.device_uuid else []))


def rank_place(device: DeviceInfo, environment: EnvironmentRecord | None) -> RankPlace:
    """This process's place, from its device and environment record: its host is the node as its
    scheduler names it (runners.machine.environment.node_name: two nodes of a test cluster share a
    host name)."""
    info = dict(environment.info) if environment is not None else {}
    uuid = info.get("device_uuid") or info.get("uuid")
    return RankPlace(host=node_name(), torch_device=device.torch_device,
                     device_uuid=str(uuid) if uuid else None,
                     device_fingerprint=environment.device_fingerprint if environment is not None else "",
                     pid=os.getpid())


def group_places(control: GroupControl, device: DeviceInfo, environment: EnvironmentRecord | None
                 ) -> tuple[RankPlace, ...]:
    """Every rank's place, by rank, on every rank (once, when the group starts)."""
    return tuple(control.agree(rank_place(device, environment)))


def own_pids(places: Sequence[RankPlace], rank: int) -> tuple[int, ...]:
    """The processes of the group on `rank`'s host: the load they make is the case's own, not
    contention (runners/machine/contention.py)."""
    if not places:
        return ()
    host = places[rank].host
    return tuple(p.pid for p in places if p.host == host)
