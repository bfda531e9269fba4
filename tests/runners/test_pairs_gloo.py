"""The link matrix in a group of four gloo ranks on the CPU: every pair measured and checked in its
round, each named with both ends; a rank that sends wrong values makes exactly its pairs incorrect;
a rank slowed by a busy loop pinned to its core makes its pairs slow, and, stored and judged, is
named the slow end with no other pair flagged. One group serves the cases of a test, as it serves a
run's."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from itertools import combinations
from pathlib import Path

import pytest

from rooflab.db.store import ResultStore, environment_device_uuid
from rooflab.record import EnvironmentRecord
from rooflab.reports.fleet.night import judge_links_night
from rooflab.reports.fleet.options import FleetOptions
from rooflab.reports.fleet.status import FLAGGED
from rooflab.reports.pages.fleet_page import load_links_night
from rooflab.reports.pages.fleet_plots import link_heatmaps
from rooflab.runners.orchestration.collectives import pair_ends, work_model_at
from rooflab.runners.orchestration.messages import CaseRequest
from rooflab.runners.orchestration.ranks import GroupResult, RankGroup
from rooflab.runners.orchestration.records import build_record
from rooflab.suite.case import Case
from rooflab.suite.ops.pairs import pair_case, schedule
from rooflab.vocab import ResultStatus
from tests.runners.cluster_support import run_record
from tests.runners.collective_cases import FAST, case, plugin_env

RANKS = 4
BRIEF = replace(FAST, min_samples=3, max_samples=3)  # three streams a pair: the structure, not the figure


def _run(group: RankGroup, c: Case) -> GroupResult:
    return group.run(CaseRequest(c, seed=11), 120.0)


def test_every_pair_is_measured_in_its_round_checked_and_named_with_both_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin_env(monkeypatch)
    every = list(combinations(range(RANKS), 2))
    with RankGroup("gloo", ["cpu"] * RANKS) as group:
        both = _run(group, case("sendrecv_pairs", ranks=RANKS, n=3000, direction="both", timing=BRIEF))
        one = _run(group, case("sendrecv_pairs", ranks="all", n=5, direction="b_to_a", pairs_at_once=1,
                               dtype="bfloat16", timing=BRIEF))
        wrong = _run(group, case("planted_pairs_wrong", ranks=RANKS, n=64, direction="a_to_b", bad_rank=1,
                                 timing=BRIEF))
        pids = group.pids
    for result in (both, one, wrong):
        assert result.outcome.status == ResultStatus.OK and not result.broken, result.outcome.error
        assert sorted(p.pair for p in result.pairs) == every
    # all at once: the round-robin's 3 rounds of 2 pairs, in that order; one at a time: 6 rounds of 1
    assert [p.pair for p in both.pairs] == [pair for r in schedule(RANKS) for pair in r]
    assert [p.pair for p in one.pairs] == [r[0] for r in schedule(RANKS, 1)]
    for p in (*both.pairs, *one.pairs):
        out, (a, b) = p.outcome, p.pair
        assert out.status == ResultStatus.OK, out.error
        assert out.stats is not None and out.stats.n_samples == 3 and len(out.samples_ms) == 3
        assert out.method is not None and out.method.pace == "back_to_back" and out.method.launches_per_sample >= 20
        # both ends: their places (host, device, the process that ran them) and their own medians
        assert [e.pid for e in p.ends] == [pids[a], pids[b]] and {e.torch_device for e in p.ends} == {"cpu"}
        assert p.ends[0].host == p.ends[1].host != "?" and p.ends[0].device_fingerprint
        assert p.collective.ranks == RANKS and len(p.collective.rank_medians_ms) == 2
        assert p.collective.rank_devices == (p.ends[0].text, p.ends[1].text)
    # rank 1 sends one element off: every pair in which it sends (a_to_b: it is a) is incorrect, named
    # by the rank that received it; (0, 1) has rank 1 receiving, which is right
    by_pair = {p.pair: p.outcome for p in wrong.pairs}
    assert {pair for pair, out in by_pair.items() if out.status == ResultStatus.INCORRECT} == {(1, 2), (1, 3)}
    assert "rank 2 of 4: planted_pairs_wrong from rank 1" in str(by_pair[(1, 2)].error)
    assert by_pair[(1, 2)].stats is None and by_pair[(0, 1)].status == ResultStatus.OK


def _tasks(pid: int) -> list[int]:
    return [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]


@pytest.fixture
def busy_core() -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """The last CPU this process may run on, and a busy loop pinned to it (killed at the end)."""
    core = max(os.sched_getaffinity(0))
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(loop.pid, {core})
        yield core, loop
    finally:
        loop.kill()
        loop.wait()


def test_a_rank_slowed_by_a_busy_loop_on_its_core_is_named_the_slow_end_and_no_other_pair_is_flagged(
        busy_core: tuple[int, subprocess.Popen[bytes]], tmp_path: Path) -> None:
    """Rank 3 pinned to the core of a busy loop, at nice 15 (the loop, at the default priority, takes
    about 96 % of the core when both want it: the rank is slowed, the machine's other processes are not
    held back more than by any one busy process). Its three pairs read slower than the other three;
    stored as a run stores them, then judged (`rooflab fleet --links`), rank 3 is the slow end, its
    pairs are flagged for it, and no pair without it is flagged; the report's matrix marks its cells.
    1 MiB a transfer, where a call is mostly the ranks' copying (CPU), not waiting to be woken (at 8 B
    the pairs without the rank spread from 0.4 to 4 ms on this loaded machine), one pair at a time
    (all at once, the pairs of a round share the two cores and hid the rank from the judgement in 2
    runs of 4): its pairs 11-15 ms, the others 2.1-2.8 ms; judged the one slow end in 7 runs of 7."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs: one for the slowed rank and its busy loop, one for the others")
    core, _ = busy_core
    matrix = case("sendrecv_pairs", ranks=RANKS, n=262144, direction="both", pairs_at_once=1, timing=BRIEF)
    with RankGroup("gloo", ["cpu"] * RANKS) as group:
        slowed = group.pids[3]
        for tid in _tasks(slowed):
            os.sched_setaffinity(tid, {core})
            os.setpriority(os.PRIO_PROCESS, tid, 15)
        time.sleep(0.1)
        result = _run(group, matrix)
        environment = group.ready[0].environment
    assert all(p.outcome.status == ResultStatus.OK for p in result.pairs), [p.outcome.error for p in result.pairs]
    median = {p.pair: p.outcome.stats.median_ms for p in result.pairs if p.outcome.stats is not None}
    touching = {pair: ms for pair, ms in median.items() if 3 in pair}
    others = {pair: ms for pair, ms in median.items() if 3 not in pair}
    assert len(touching) == len(others) == 3 and min(touching.values()) > max(others.values()), median
    url = f"sqlite:///{tmp_path / 'links.db'}"
    _store(url, matrix, result, environment)
    night = judge_links_night(url, FleetOptions(suite="links"))
    slow_end = f"{environment.info['host']}:rank3"
    assert [e.end for e in night.flagged_ends] == [slow_end] and not night.slow_links, night.as_dict()["ends"]
    flagged = {(k.a, k.b) for k in night.links if k.status in FLAGGED}
    assert flagged == {(k.a, k.b) for k in night.links if slow_end in (k.a, k.b)} and len(flagged) == 3
    read = load_links_night(url)  # as the report's links page reads it
    assert read is not None and [e.end for e in read.flagged_ends] == [slow_end]
    svg = link_heatmaps(night)["same_node"]
    assert svg.count("<svg") == 1 and svg.count("stroke: #8b0000") + svg.count("stroke: #d4572a") + svg.count(
        "stroke: #e6a100") == 6  # the slow end's three pairs outlined, both ways


def _store(url: str, matrix: Case, result: GroupResult, environment: EnvironmentRecord) -> None:
    """The matrix's pairs stored as the collective phase stores them (runners/orchestration/collectives.py)."""
    with ResultStore(url) as store:
        store.start_run(run_record("links-night", datetime.now(UTC), suite="links"))
        store.add_environment("links-night", environment)
        for pair in result.pairs:
            record = build_record(pair_case(matrix, pair_ends(pair)), pair.outcome, run_id="links-night",
                                  device_fingerprint=environment.device_fingerprint,
                                  device_uuid=environment_device_uuid(environment), shard=None,
                                  work_model=work_model_at(RANKS))
            store.add_measurement(replace(record, collective=pair.collective))
        store.finish_run("links-night", "complete")
