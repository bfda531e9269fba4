"""The fixed words of the fleet's judgement: a device's status and the `--fail-on` choice.

A light module (no pandas), like reports/regressions/verdicts.py, so that the nightly runner, the
Slurm job writer and the CLI name the same sets as the judgement without loading it.
"""
from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class FleetStatus(StrEnum):
    """What the fleet says of one device (or node) tonight, against its siblings of the same model."""

    OK = "ok"
    SUSPECT = "suspect"  # beyond the warn line on one night: rerun before calling it slow
    SLOW = "slow"  # confirmed: beyond the warn line tonight and on another of the last three nights,
    #                or tonight's whole interval beyond it
    DRAIN = "drain"  # beyond the drain line, the whole interval beyond the warn line
    NOT_JUDGED = "not_judged"  # too few siblings (or no result) to judge against


# how bad a status is; not_judged ranks below ok (it says nothing about speed)
SEVERITY = {FleetStatus.NOT_JUDGED: -1, FleetStatus.OK: 0, FleetStatus.SUSPECT: 1, FleetStatus.SLOW: 2,
            FleetStatus.DRAIN: 3}
FLAGGED = (FleetStatus.SUSPECT, FleetStatus.SLOW, FleetStatus.DRAIN)


def worst(statuses: Iterable[FleetStatus]) -> FleetStatus:
    """The worst of `statuses` (a node takes its worst device's); not_judged when there is none."""
    return max(statuses, key=SEVERITY.__getitem__, default=FleetStatus.NOT_JUDGED)


class FleetFailOn(StrEnum):
    """When `rooflab fleet` fails (exit 1): a device at this status or worse."""

    NEVER = "never"
    SUSPECT = "suspect"
    SLOW = "slow"
    DRAIN = "drain"

    def fails(self, status: FleetStatus) -> bool:
        """Does one device with `status` fail the night under this choice?"""
        if self is FleetFailOn.NEVER:
            return False
        return SEVERITY[status] >= SEVERITY[FleetStatus(self.value)]


def parse_fleet_fail_on(text: str, option: str = "--fail-on") -> FleetFailOn:
    """The FleetFailOn named by `text`; ValueError with one message naming what is allowed otherwise."""
    try:
        return FleetFailOn(text)
    except ValueError:
        raise ValueError(f"{option} {text!r} is not allowed; allowed: {', '.join(FleetFailOn)} "
                         "(a device at that status or worse fails the night; never: none does)") from None
