"""The fleet's words and exit policy (reports/fleet/status.py)."""
from __future__ import annotations

import pytest

from rooflab.reports.fleet.status import FleetFailOn, FleetStatus, parse_fleet_fail_on, worst


def test_a_node_takes_its_worst_device() -> None:
    s = FleetStatus
    assert worst([s.OK, s.SLOW, s.SUSPECT]) == s.SLOW
    assert worst([s.NOT_JUDGED, s.OK]) == s.OK  # not judged says nothing about speed
    assert worst([s.NOT_JUDGED]) == s.NOT_JUDGED and worst([]) == s.NOT_JUDGED
    assert worst([s.DRAIN, s.SLOW]) == s.DRAIN


@pytest.mark.parametrize(("fail_on", "failing"), [
    ("never", set()), ("suspect", {"suspect", "slow", "drain"}), ("slow", {"slow", "drain"}), ("drain", {"drain"}),
])
def test_fail_on(fail_on: str, failing: set[str]) -> None:
    rule = parse_fleet_fail_on(fail_on)
    assert {str(s) for s in FleetStatus if rule.fails(s)} == failing


def test_a_bad_fail_on_names_what_is_allowed() -> None:
    with pytest.raises(ValueError, match="--fail-on 'regression' is not allowed; allowed: never, suspect, slow, drain"):
        parse_fleet_fail_on("regression")
    assert FleetFailOn("drain") is FleetFailOn.DRAIN
