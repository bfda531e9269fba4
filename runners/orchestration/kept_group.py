"""One group of rank processes kept open while consecutive cases share its backend and devices.

Starting a group costs seconds (a process per rank, a rendezvous), so a run's collectives
(orchestration/collectives.py), the cross-check's rooflab side (crosscheck/collective_check.py)
and the plain-loop peer (crosscheck/dist_loop_peer.py) each keep theirs from case to case. The
group is started again when a case needs another backend or other devices, or when a fault has
ended it (`broken`).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar


class RankProcesses(Protocol):
    backend: str
    devices: tuple[str, ...]

    @property
    def broken(self) -> bool: ...

    def close(self, *, kill: bool = False) -> None: ...


G = TypeVar("G", bound=RankProcesses)


class KeptGroup(Generic[G]):
    """The group `start(backend, devices)` made last, while it fits the case at hand."""

    def __init__(self, start: Callable[[str, tuple[str, ...]], G]) -> None:
        self._start = start
        self.group: G | None = None

    def get(self, backend: str, devices: Sequence[str]) -> G:
        """The kept group if it runs `backend` on `devices` and no fault ended it, else a new one
        (the old one closed first). An error starting it propagates; nothing is kept then."""
        wanted = tuple(devices)
        kept = self.group
        if kept is not None and (kept.broken or kept.backend != backend or kept.devices != wanted):
            self.close()
        if self.group is None:
            self.group = self._start(backend, wanted)
        return self.group

    def close(self, *, kill: bool = False) -> None:
        if self.group is not None:
            group, self.group = self.group, None
            group.close(kill=kill)
