"""The link matrix judged (reports/fleet/links.py) on simulated nights: a slow GPU, a slow link and a
slow node planted among healthy pairs are each named for what they are, with nothing else flagged;
the fit of ends and pairs known-answer; a group of three ends is not judged; a night that holds pairs
gives each GPU a `link` wall in `rooflab fleet`'s own judgement (link_walls.py)."""
from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from rooflab.reports.fleet.judge import judge_fleet
from rooflab.reports.fleet.link_frames import polish
from rooflab.reports.fleet.link_records import LinkCause, LinkKind
from rooflab.reports.fleet.links import NoLinks, judge_links
from rooflab.reports.fleet.options import FleetOptions
from rooflab.reports.fleet.status import FLAGGED, FleetStatus
from rooflab.reports.fleet.walls import LINK_WALL
from rooflab.reports.pages.fleet_plots import walls_shown
from rooflab.suite.case import Case
from rooflab.suite.ops.pairs import PairEnds, pair_case, round_robin
from rooflab.suite.ops.registry import get_op

NOW = datetime(2026, 11, 28, 2, 0, tzinfo=UTC)


def matrix(ranks: int | str, direction: str = "both", n: int = 67108864) -> Case:
    op = get_op("sendrecv_pairs")
    params = op.resolved_params({"n": n, "ranks": ranks, "direction": direction})
    return Case("sendrecv_pairs", op.version, "collective", "nccl", "float32", "hot", "launch", params=params)


def row(run: str, night: int, case: Case, ends: PairEnds, median_ms: float, device: str, ci: float = 0.01) -> dict:
    return dict(run_id=run, started_at=NOW - timedelta(days=night), host=_host(device),
                device_key=device,
                device_uuid=device, device_name="H100", memory_bytes=80 << 30, case_key=pair_case(case, ends).case_key,
                op="sendrecv_pairs", family="collective", cache="hot", status="ok", median_ms=median_ms,
                rel_ci_halfwidth=ci, throttled=False, quality="good")


def _host(device: str) -> str:
    """The node of a simulated GPU (`GPU-NNgg`: node NN), where its run stores its results."""
    return f"node{int(device[4:6])}"


def night_rows(night: int, nodes: int, gpus: int, slow: dict[object, float], rng: random.Random,
               noise: float = 0.02, ci: float = 0.01) -> list[dict]:
    """Every node's matrix of its GPUs (a run each) and the matrix of nodes (the nodes' GPU 0), in two
    directions; `slow` multiplies the time of a pair that touches an end (`gpu` names, `node` names)
    or is a pair ((end, end))."""
    rows = []
    uuid = {(n, g): f"GPU-{n:02d}{g:02d}" for n in range(nodes) for g in range(gpus)}

    def factor(*names: object) -> float:
        return float(np.prod([slow.get(x, 1.0) for x in (*names, tuple(names))]))

    for direction in ("both", "a_to_b"):
        within, across = matrix("all", direction), matrix(nodes, direction)
        for n in range(nodes):
            for a, b in (p for r in round_robin(gpus) for p in r):
                ends = PairEnds(a, f"node{n}", uuid[(n, a)], b, f"node{n}", uuid[(n, b)])
                t = 5.0 * factor(uuid[(n, a)], uuid[(n, b)]) * rng.uniform(1 - noise, 1 + noise)
                rows.append(row(f"night{night}-n{n}", night, within, ends, t, uuid[(n, 0)], ci))
        for a, b in (p for r in round_robin(nodes) for p in r) if nodes > 1 else ():
            ends = PairEnds(a, f"node{a}", uuid[(a, 0)], b, f"node{b}", uuid[(b, 0)])
            t = 20.0 * factor(f"node{a}", f"node{b}") * rng.uniform(1 - noise, 1 + noise)
            rows.append(row(f"night{night}", night, across, ends, t, uuid[(0, 0)], ci))
    return rows


def test_a_slow_gpu_a_slow_link_and_a_slow_node_are_each_named_and_nothing_else() -> None:
    rng = random.Random()
    slow: dict[object, float] = {"GPU-0205": 1.25, ("GPU-0001", "GPU-0006"): 1.3, "node3": 1.4}
    history = [r for night in (1, 2) for r in night_rows(night, 4, 8, {}, rng)]
    found = judge_links(pd.DataFrame(night_rows(0, 4, 8, slow, rng) + history), FleetOptions(suite="links"))
    assert len(found.matrices) == 4 and len(found.night.run_ids) == 5  # 2 directions x (within, across)
    flagged_ends = {(e.kind, e.end) for e in found.ends if e.status in FLAGGED}
    assert flagged_ends == {(LinkKind.SAME_NODE, "GPU-0205"), (LinkKind.ACROSS_NODES, "node3")}, flagged_ends
    gpu = next(e for e in found.ends if e.end == "GPU-0205")
    assert gpu.judged is not None and gpu.judged.deviation_pct == pytest.approx(-20.0, abs=3.0)  # 1/1.25
    assert gpu.judged.high_pct < -gpu.judged.warn_line_pct and gpu.host == "node2" and gpu.pairs == 14
    flagged = {(k.a, k.b): k for k in found.links if k.status in FLAGGED}
    slow_links = {(k.a, k.b) for k in found.slow_links}
    assert slow_links == {("GPU-0001", "GPU-0006")}, slow_links
    link = flagged[("GPU-0001", "GPU-0006")]
    assert link.residual is not None and link.residual.deviation_pct == pytest.approx(-23.0, abs=4.0)  # 1/1.3
    assert link.deviation_pct == pytest.approx(-23.0, abs=4.0) and link.kind == LinkKind.SAME_NODE
    # every other flagged pair touches the slow GPU or the slow node, and says which end
    for (a, b), k in flagged.items():
        if (a, b) == ("GPU-0001", "GPU-0006"):
            continue
        assert "GPU-0205" in (a, b) or "node3" in (a, b), (a, b)
        assert k.cause == (LinkCause.END_A if a in ("GPU-0205", "node3") else LinkCause.END_B)
    assert len(flagged) == 1 + 7 + 3  # the link, the GPU's 7 pairs, the node's 3
    as_json = found.as_dict()
    assert {"a", "b", "status", "deviation", "low", "high", "residual", "cause", "kind"} <= set(as_json["links"][0])
    assert as_json["counts"]["ends"]["ok"] == 4 * 8 + 4 - 2


def test_tonight_alone_beyond_the_line_within_its_noise_is_suspect_and_two_nights_are_slow() -> None:
    """A GPU 2.6 % slower tonight, each pair's own 95 % interval +-5 %: just beyond the warn line (2 %
    here: the typical standard error moves it out from its floor, half the 3.5 % threshold), its
    interval not wholly beyond it: suspect. Slower last night as well: slow (two of the last three
    nights). Tight intervals (+-0.5 %): its whole interval beyond the line tonight: slow at once."""
    def status(plants: tuple[dict[object, float], dict[object, float]], ci: float) -> FleetStatus:
        rng = random.Random()
        rows = night_rows(0, 1, 8, plants[0], rng, noise=0.002, ci=ci) + night_rows(1, 1, 8, plants[1], rng,
                                                                                   noise=0.002, ci=ci)
        found = judge_links(pd.DataFrame(rows), FleetOptions(suite="links"))
        assert [e.end for e in found.flagged_ends] == ["GPU-0003"] and not found.slow_links
        return next(e.status for e in found.ends if e.end == "GPU-0003")

    slow: dict[object, float] = {"GPU-0003": 1.027}
    assert status((slow, {}), 0.05) == FleetStatus.SUSPECT
    assert status((slow, slow), 0.05) == FleetStatus.SLOW
    assert status((slow, {}), 0.005) == FleetStatus.SLOW


def test_a_group_of_three_ends_is_not_judged_and_no_pair_is_no_links() -> None:
    rows = [r for r in night_rows(0, 1, 3, {}, random.Random()) if "ranks=all" in r["case_key"]]
    found = judge_links(pd.DataFrame(rows), FleetOptions(suite="links"))
    assert {e.status for e in found.ends} == {FleetStatus.NOT_JUDGED} and "fewer than --min-devices 4" in str(
        found.ends[0].reason)
    assert {k.status for k in found.links} == {FleetStatus.NOT_JUDGED}
    other = pd.DataFrame([{**rows[0], "op": "all_reduce", "case_key": "all_reduce.v1:nccl:float32:hot:launch:n=4"}])
    with pytest.raises(NoLinks, match="no pair of a link matrix"):
        judge_links(other, FleetOptions(suite="links"))


def _fit(size: int, slow_ends: Sequence[int], slow_pair: tuple[int, int] | None) -> tuple[np.ndarray, np.ndarray,
                                                                                           list[tuple[int, int]]]:
    pairs = [p for r in round_robin(size) for p in r]
    a, b = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    slow = np.isin(a, slow_ends) | np.isin(b, slow_ends)
    y = np.log(2.0 * np.where(slow, 10.0, 1.0) * np.where([p == slow_pair for p in pairs], 5.0, 1.0))
    _, e, r = polish(a, b, y, size)
    return e, r, pairs


@pytest.mark.parametrize("size", [4, 8, 16])
def test_the_fit_puts_a_slow_end_in_its_part_and_a_slow_pair_in_its_residual(size: int) -> None:
    """One slow end, 10x, is its own part exactly from 4 ends on; with it, a slow pair elsewhere, 5x,
    is its residual exactly from 8 ends on (with 4 ends, 6 pairs cannot tell two faults apart: the
    fit then spreads them, so the docs ask for 8)."""
    end = random.randrange(size)
    e, r, _ = _fit(size, [end], None)
    assert e[end] == pytest.approx(np.log(10.0), abs=1e-9) and np.abs(np.delete(e, end)).max() < 1e-9
    assert np.abs(r).max() < 1e-9
    if size < 8:
        return
    a, b = sorted(random.sample([i for i in range(size) if i != end], 2))
    e, r, pairs = _fit(size, [end], (a, b))
    assert r[pairs.index((a, b))] == pytest.approx(np.log(5.0), abs=1e-9)
    assert np.abs(np.delete(r, pairs.index((a, b)))).max() < 1e-9 and e[end] == pytest.approx(np.log(10.0))


def test_a_night_with_pairs_gives_each_gpu_a_link_wall_and_the_slow_one_is_flagged_by_rooflab_fleet() -> None:
    rng = random.Random(7)
    pairs = night_rows(0, 2, 8, {"GPU-0103": 1.4}, rng) + [r for n in (1, 2) for r in night_rows(n, 2, 8, {}, rng)]
    triads = [dict(pairs[0], run_id=f"night{night}-n{n}", started_at=NOW - timedelta(days=night), host=f"node{n}",
                   device_key=f"GPU-{n:02d}{g:02d}", device_uuid=f"GPU-{n:02d}{g:02d}", case_key="stream_triad:hbm",
                   op="stream_triad", family="probe", cache="cold", median_ms=2.0 * rng.uniform(0.998, 1.002))
              for night in (0, 1, 2) for n in range(2) for g in range(8)]
    found = judge_fleet(pd.DataFrame(pairs + triads), FleetOptions(suite="health"))
    by_key = {d.device_key: d for d in found.devices}
    assert len(by_key) == 16 and all({"hbm_rw", LINK_WALL} <= set(d.walls) for d in by_key.values())
    slow = by_key["GPU-0103"]
    assert slow.walls[LINK_WALL].status in FLAGGED and slow.walls["hbm_rw"].status == FleetStatus.OK
    assert slow.status == slow.walls[LINK_WALL].status and slow.walls[LINK_WALL].cases == 14  # 7 pairs x 2
    assert {k for k, d in by_key.items() if d.status in FLAGGED} == {"GPU-0103"}
    assert {n.host for n in found.nodes if n.status in FLAGGED} == {"node1"}
    assert walls_shown(found)[-1] == LINK_WALL


def test_ranks_sharing_one_device_give_it_no_link_wall() -> None:
    rng = random.Random(3)
    rows = []
    for night in (0, 1):
        for a, b in (p for r in round_robin(4) for p in r):
            ends = PairEnds(a, "cpuhost", "cpu-dev", b, "cpuhost", "cpu-dev")
            slow = 5.0 if 3 in (a, b) and night == 0 else 1.0
            rows.append(row(f"n{night}", night, matrix(4), ends, 2.0 * slow * rng.uniform(0.98, 1.02), "GPU-0000"))
    rows = [dict(r, device_key="cpu-dev", device_uuid=None, host="cpuhost") for r in rows]
    links = judge_links(pd.DataFrame(rows), FleetOptions(suite="links"))
    assert {e.end for e in links.ends if e.status in FLAGGED} == {"cpuhost:rank3"}
    found = judge_fleet(pd.DataFrame(rows), FleetOptions(suite="links"))
    assert all(LINK_WALL not in d.walls for d in found.devices)
