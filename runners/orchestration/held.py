"""Whether a run already holds every case it would measure on a device, the device known without torch.

A resumed run (a requeued shard, a night submitted again) whose cases are all stored has nothing left
to measure. Where its device can be known without importing torch (a CPU:
runners/machine/environment.py `known_without_torch`), its lanes and its collective phase end
without a worker, and the run starts no fork server: torch's import, 3-4 s of CPU in every such
shard. A GPU is known only through torch, so its lanes start a worker as before, which says which
cases the run holds on it.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from rooflab.db.measurement_columns import device_key
from rooflab.runners.machine.environment import KnownDevice, known_without_torch
from rooflab.suite.case import Case
from rooflab.suite.ops.pairs import held_keys


class HeldResults(Protocol):
    """What a run's store says of the results it holds (db.store.ResultStore; the tests' fakes)."""

    def measured_case_keys(self, run_id: str, device_key: str | None = None) -> set[str]: ...


def held_on(store: HeldResults, run_id: str, torch_device: str, cases: Sequence[Case]) -> KnownDevice | None:
    """`torch_device` as known without torch, when the run `run_id` holds a result of every one of
    `cases` on it; else None (the device needs torch to be known, or a case is left)."""
    known = known_without_torch(torch_device)
    if known is None:
        return None
    stored = held_keys(store.measured_case_keys(run_id, device_key(known.uuid, known.fingerprint)))
    return known if all(case.case_key in stored for case in cases) else None


def nothing_left(store: HeldResults, run_id: str, torch_devices: Sequence[str], lane_cases: Sequence[Case],
                 group_cases: Sequence[Case]) -> bool:
    """Whether the run holds every lane case on every device and every collective case on the first
    (rank 0's), each device known without torch."""
    lanes_held = all(held_on(store, run_id, device, lane_cases) is not None for device in torch_devices)
    return lanes_held and (not group_cases or held_on(store, run_id, torch_devices[0], group_cases) is not None)
