"""Which runs make a night: a suite's runs within `hours` of the newest of them, then the night
before it, and so on back (the one rule; db/run_order.py holds the order of runs).

The night is what a fleet is judged on (`rooflab fleet`): every node's run of the health suite,
started by one Slurm array (or by hand) within a day. The runs are grouped from the newest back, so
a late rerun of one node belongs to the night it repairs.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

NIGHT_HOURS = 24.0


@dataclass(frozen=True)
class Night:
    """One night: its index (0 = the night judged, 1 = the one before, ...), its first and last run's
    start, and the positions of its runs in the list given to `group_nights`."""

    index: int
    first_started_at: datetime
    last_started_at: datetime
    runs: tuple[int, ...]


def group_nights(started_at: Sequence[datetime], *, at: datetime | None = None,
                 hours: float = NIGHT_HOURS) -> list[Night]:
    """The nights of runs started at `started_at` (any order), newest first: night 0 holds the newest
    run started at or before `at` (every run when `at` is None) and every run started within `hours`
    before it; night 1 the newest run before those and the runs within `hours` before it; and so on.
    Runs started after `at` belong to no night. An empty list when no run qualifies."""
    span = timedelta(hours=hours)
    order = sorted((t, i) for i, t in enumerate(started_at) if at is None or t <= at)
    nights: list[Night] = []
    end = len(order)
    while end > 0:
        newest = order[end - 1][0]
        start = end - 1
        while start > 0 and order[start - 1][0] > newest - span:
            start -= 1
        members = order[start:end]
        nights.append(Night(len(nights), members[0][0], newest, tuple(sorted(i for _, i in members))))
        end = start
    return nights
