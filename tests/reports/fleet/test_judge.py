"""The judgement of a night on simulated fleets with planted devices (known answers)."""
from __future__ import annotations

import json
import math
from datetime import timedelta

import pandas as pd
import pytest

from rooflab.reports.fleet.judge import NoNight, judge_fleet
from rooflab.reports.fleet.options import FleetOptions
from rooflab.reports.fleet.status import FleetFailOn, FleetStatus
from rooflab.reports.regressions.verdicts import Verdict
from tests.reports.fleet_sim import FleetStep, SimFleet, Slowdown, device_key, night_start, simulate

NIGHTS = 20
TONIGHT = NIGHTS - 1


@pytest.fixture(scope="module")
def planted() -> tuple[SimFleet, pd.DataFrame]:
    """32 GPUs on 4 nodes, 20 nights: GPU 3 10 % slower on HBM for its last 5 nights, GPU 12 5 % slower on
    the matrix from its first night, GPU 22 first 2.5 % faster on the matrix then 3.5 % slower than that
    for its last 2 nights (its own history drops; among its siblings it is only 1 % slow), and every
    device 5 % slower on the elementary wall tonight."""
    sim = SimFleet(nodes=4, gpus_per_node=8, nights=NIGHTS, seed=7, slowdowns=(
        Slowdown(3, "hbm_rw", 10.0, NIGHTS - 5), Slowdown(12, "matrix", 5.0, 0),
        Slowdown(22, "matrix", -2.5, 0), Slowdown(22, "matrix", 3.5, NIGHTS - 2),
    ), steps=(FleetStep(TONIGHT, 5.0, ("elementary",)),))
    return sim, simulate(sim)


def _device(result, sim: SimFleet, index: int):
    return next(d for d in result.devices if d.device_key == device_key(sim, index))


def test_the_planted_devices_are_named_and_no_other(planted) -> None:
    sim, frame = planted
    result = judge_fleet(frame)
    gpu3, gpu12 = _device(result, sim, 3), _device(result, sim, 12)
    assert gpu3.status == FleetStatus.DRAIN and gpu3.walls["hbm_rw"].status == FleetStatus.DRAIN
    assert gpu3.walls["hbm_rw"].deviation_pct == pytest.approx(-10.0, abs=1.5)
    assert gpu3.since == night_start(NIGHTS - 5)  # the first night of its streak
    assert gpu3.walls["hbm_rw"].since == night_start(NIGHTS - 5) and not gpu3.since_open
    # slow from its first night: since the oldest night read (15 of the 20), or before it ...
    assert gpu12.status == FleetStatus.SLOW and gpu12.since == night_start(NIGHTS - 15) and gpu12.since_open
    assert gpu12.walls["matrix"].history.verdict == Verdict.OK  # ... which its own history cannot show
    named = {d.device_key for d in result.devices if d.status in (FleetStatus.SLOW, FleetStatus.DRAIN)}
    assert named == {device_key(sim, 3), device_key(sim, 12), device_key(sim, 22)}  # 22: by its own history
    assert result.count(FleetStatus.NOT_JUDGED) == 0 and len(result.devices) == 32
    # the flagged devices carry their evidence: every case, against the fleet's median of it
    hbm = [e for e in gpu3.evidence if e.wall == "hbm_rw"]
    assert len(hbm) == 2 and all(e.median_ms > e.fleet_median_ms for e in hbm)
    assert len(gpu3.walls["hbm_rw"].trend) == 15 and gpu3.walls["hbm_rw"].trend[-1][0] == night_start(TONIGHT)


def test_a_node_takes_its_worst_device(planted) -> None:
    sim, frame = planted
    nodes = {n.host: n for n in judge_fleet(frame).nodes}
    assert nodes["node00"].status == FleetStatus.DRAIN and nodes["node00"].worst_device == device_key(sim, 3)
    assert nodes["node01"].status == FleetStatus.SLOW and nodes["node01"].worst_device == device_key(sim, 12)
    assert list(nodes)[:2] == ["node00", "node01"]  # the worst nodes first


def test_a_fleet_wide_step_is_one_fleet_shift_not_slow_devices(planted) -> None:
    _, frame = planted
    result = judge_fleet(frame)
    shifts = [s for s in result.fleet_shifts if s.wall == "elementary"]
    assert len(shifts) == 1 and shifts[0].case_key is None and shifts[0].direction == "slower"
    assert shifts[0].shift_pct == pytest.approx(-5.0, abs=0.7) and shifts[0].low_pct < shifts[0].shift_pct
    assert shifts[0].devices_moved == 32 and shifts[0].since == night_start(TONIGHT)
    assert all(d.walls["elementary"].status == FleetStatus.OK for d in result.devices)
    assert all(d.walls["elementary"].history.verdict in (Verdict.OK, Verdict.IMPROVEMENT, Verdict.SUSPECT)
               for d in result.devices)  # against its own place in the fleet, no device regressed
    assert {s.wall for s in result.fleet_shifts} == {"elementary"}


def test_a_device_that_left_its_place_is_slow_by_its_own_history(planted) -> None:
    """GPU 22 was 2.5 % faster than its siblings and fell 3.5 %: against them alone it is about 1 %
    slow, inside the warn line; against its own past it regressed (two nights), and it is now below
    them by more than half the warn line."""
    sim, frame = planted
    gpu22 = _device(judge_fleet(frame), sim, 22)
    wall = gpu22.walls["matrix"]
    assert wall.history.verdict == Verdict.REGRESSION and wall.history.change_pct == pytest.approx(-3.5, abs=1.2)
    assert -wall.warn_line_pct < wall.deviation_pct <= -wall.warn_line_pct / 2
    assert wall.status == FleetStatus.SLOW and gpu22.history_verdict == Verdict.REGRESSION
    # the nights before its fall: in its own history, and among its siblings, nothing to say
    before = judge_fleet(frame, FleetOptions(at=night_start(NIGHTS - 3) + timedelta(hours=2)))
    assert _device(before, sim, 22).walls["matrix"].status == FleetStatus.OK


def test_the_json_has_the_keys_the_issue_asks_for(planted) -> None:
    _, frame = planted
    result = judge_fleet(frame)
    data = json.loads(json.dumps(result.as_dict()))
    assert {"night", "devices", "nodes", "fleet_shifts"} <= set(data)
    device = data["devices"][0]
    assert {"device_key", "device_uuid", "host", "device_name", "status", "walls", "since"} <= set(device)
    assert {"deviation", "low", "high", "z"} <= set(device["walls"]["hbm_rw"])
    assert {"host", "status", "worst_device"} <= set(data["nodes"][0])
    assert {"wall", "case_key", "shift", "low", "high"} <= set(data["fleet_shifts"][0])
    assert data["night"]["runs"] == [f"health-{TONIGHT:03d}-node{j:02d}" for j in range(4)]
    assert result.fails(FleetFailOn.DRAIN) and not result.fails(FleetFailOn.NEVER)


def test_another_night_with_at(planted) -> None:
    sim, frame = planted
    before = judge_fleet(frame, FleetOptions(at=night_start(NIGHTS - 6) + timedelta(hours=2)))
    assert before.night.first_run_at == night_start(NIGHTS - 6)
    assert _device(before, sim, 3).status == FleetStatus.OK  # not yet slow
    assert not any(s.wall == "elementary" for s in before.fleet_shifts)
    with pytest.raises(NoNight, match="no run of suite 'health' at or before"):
        judge_fleet(frame, FleetOptions(at=night_start(0) - timedelta(days=1)))


def test_too_few_siblings_are_not_judged_with_the_count() -> None:
    frame = simulate(SimFleet(nodes=1, gpus_per_node=3, nights=3, seed=1))
    result = judge_fleet(frame)
    assert {d.status for d in result.devices} == {FleetStatus.NOT_JUDGED}
    assert "3 device(s) of this model tonight, fewer than --min-devices 4" in str(result.devices[0].reason)
    assert result.nodes[0].status == FleetStatus.NOT_JUDGED and result.nodes[0].worst_device is None
    assert judge_fleet(frame, FleetOptions(min_devices=3)).count(FleetStatus.NOT_JUDGED) == 0


def test_a_rerun_in_the_night_replaces_and_a_missing_device_is_named() -> None:
    sim = SimFleet(nodes=2, gpus_per_node=4, nights=4, seed=3, slowdowns=(Slowdown(1, "hbm_rw", 12.0, 3),))
    frame = simulate(sim)
    assert _device(judge_fleet(frame), sim, 1).status != FleetStatus.OK
    # node 0 run again two hours later tonight, GPU 1 repaired: the newest result of each case counts
    tonight = frame[frame["run_id"] == "health-003-node00"].copy()
    healthy = frame[frame["run_id"] == "health-002-node00"].set_index(["device_key", "case_key"])["median_ms"]
    tonight["median_ms"] = [healthy[(k, c)] for k, c in zip(tonight["device_key"], tonight["case_key"], strict=True)]
    tonight["run_id"] = "health-003-node00-rerun"
    tonight["started_at"] = tonight["started_at"] + timedelta(hours=2)
    result = judge_fleet(pd.concat([frame, tonight]))
    assert _device(result, sim, 1).status == FleetStatus.OK
    assert "health-003-node00-rerun" in result.night.run_ids
    # a device that reported last night and not tonight
    gone = frame[~((frame["device_key"] == device_key(sim, 6)) & (frame["run_id"] == "health-003-node01"))]
    assert judge_fleet(gone).missing_devices == (device_key(sim, 6),)


def test_faults_are_counted_and_a_device_without_figures_is_not_judged() -> None:
    sim = SimFleet(nodes=1, gpus_per_node=6, nights=2, seed=5)
    frame = simulate(sim)
    broken = (frame["device_key"] == device_key(sim, 2)) & (frame["run_id"] == "health-001-node00")
    frame.loc[broken, "status"] = "crashed"
    frame.loc[broken, "median_ms"] = math.nan
    device = _device(judge_fleet(frame), sim, 2)
    assert device.status == FleetStatus.NOT_JUDGED and device.faults == int(broken.sum())
    assert "no wall of it was measured tonight" in device.reason


def test_the_options_are_checked() -> None:
    with pytest.raises(ValueError, match="--drain 3 must be above --warn 3.5"):
        FleetOptions(drain_pct=3.0)
    with pytest.raises(ValueError, match="--min-devices 1: must be a whole number >= 2"):
        FleetOptions(min_devices=1)
    with pytest.raises(ValueError, match="--warn 0: must be a percentage above 0 and below 100"):
        FleetOptions(warn_pct=0)
