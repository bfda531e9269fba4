"""What `rooflab fleet` reads from a database: only the nights it judges, with each device's host."""
from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from rooflab.db.importer import import_file
from rooflab.reports.data.fleet_reads import NoSuiteRuns, load_fleet_results
from rooflab.reports.fleet.deviations import FLEET_COLUMNS
from rooflab.reports.fleet.judge import judge_fleet
from rooflab.reports.fleet.options import FleetOptions
from tests.db.pg import BACKENDS, backend_url
from tests.reports.fleet_sim import SimFleet, Slowdown, night_start, simulate, write_export


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with backend_url(request.param, tmp_path) as made:
        yield made


def test_the_nights_judged_are_read_and_judged_as_the_frame(url: str, tmp_path: Path) -> None:
    sim = SimFleet(nodes=2, gpus_per_node=4, nights=6, seed=11, slowdowns=(Slowdown(5, "matrix", 8.0, 4),))
    frame = simulate(sim)
    import_file(url, write_export(frame, sim, tmp_path / "fleet.jsonl"))
    other = SimFleet(nodes=1, gpus_per_node=4, nights=1, suite="quick")
    import_file(url, write_export(simulate(other), other, tmp_path / "quick.jsonl"))

    read = load_fleet_results(url, "health", nights=3)
    assert set(FLEET_COLUMNS) <= set(read.columns)
    assert sorted(read["run_id"].unique()) == sorted(f"health-{t:03d}-node{j:02d}" for t in (3, 4, 5) for j in (0, 1))
    assert set(read["host"]) == {"node00", "node01"} and len(read) == 3 * len(frame) // 6
    options = FleetOptions(min_devices=4)
    from_db, from_frame = judge_fleet(read, options), judge_fleet(frame[frame["started_at"] >= night_start(3)], options)
    assert [(d.device_key, d.status) for d in from_db.devices] == [(d.device_key, d.status) for d in from_frame.devices]
    assert {d.device_key for d in from_db.flagged} == {"GPU-0101-sim"}

    earlier = load_fleet_results(url, "health", nights=2, at=night_start(2) + timedelta(hours=1))
    assert sorted(earlier["started_at"].dt.day.unique()) == [2, 3]  # nights 1 and 2 (March 2 and 3)


def test_a_suite_without_runs_is_named_with_the_suites_there(tmp_path: Path) -> None:
    sim = SimFleet(nodes=1, gpus_per_node=4, nights=1)
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    import_file(url, write_export(simulate(sim), sim, tmp_path / "f.jsonl"))
    with pytest.raises(NoSuiteRuns, match=r"no run of suite 'nightly' in the database \(its suites: health\)"):
        load_fleet_results(url, "nightly", nights=3)
    with pytest.raises(NoSuiteRuns, match="no run of suite 'health' at or before 2026-02-01"):
        load_fleet_results(url, "health", nights=3, at=night_start(0) - timedelta(days=28))
