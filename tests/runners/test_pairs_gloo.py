"""The link matrix in a group of four gloo ranks on the CPU: every pair measured and checked in its
round, each named with both ends; a rank that sends wrong values makes exactly its pairs incorrect;
a rank slowed by a busy loop pinned to its core makes exactly its pairs slow. One group serves the
cases of a test, as it serves a run's."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from itertools import combinations
from pathlib import Path

import pytest

from rooflab.runners.orchestration.messages import CaseRequest
from rooflab.runners.orchestration.ranks import GroupResult, RankGroup
from rooflab.suite.case import Case
from rooflab.suite.ops.pairs import schedule
from rooflab.vocab import ResultStatus
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


def test_a_rank_slowed_by_a_busy_loop_on_its_core_slows_exactly_its_pairs(
        busy_core: tuple[int, subprocess.Popen[bytes]]) -> None:
    """Rank 3 pinned to the core of a busy loop, at nice 15 (the loop, at the default priority, takes
    about 96 % of the core when both want it: the rank is slowed, the machine's other processes are not
    held back more than by any one busy process): each of its three pairs reads more than twice as slow
    as each of the three pairs without it. 256 KiB a transfer, where a call is mostly the ranks'
    copying (CPU), not waiting to be woken: at 8 B the pairs without the rank spread from 0.4 to 4 ms
    on this loaded machine (load 8 on 2 cores), at 256 KiB from 1.3 to 3.8 ms, the rank's 19-51 ms
    (three runs at nice 15; at nice 10 the rank's pairs overlapped the others', at nice 19 a run took
    40 s)."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs: one for the slowed rank and its busy loop, one for the others")
    core, _ = busy_core
    with RankGroup("gloo", ["cpu"] * RANKS) as group:
        slowed = group.pids[3]
        for tid in _tasks(slowed):
            os.sched_setaffinity(tid, {core})
            os.setpriority(os.PRIO_PROCESS, tid, 15)
        time.sleep(0.1)
        result = _run(group, case("sendrecv_pairs", ranks=RANKS, n=65536, direction="both", timing=BRIEF))
    assert all(p.outcome.status == ResultStatus.OK for p in result.pairs), [p.outcome.error for p in result.pairs]
    median = {p.pair: p.outcome.stats.median_ms for p in result.pairs if p.outcome.stats is not None}
    touching = {pair: ms for pair, ms in median.items() if 3 in pair}
    others = {pair: ms for pair, ms in median.items() if 3 not in pair}
    assert len(touching) == len(others) == 3
    assert min(touching.values()) > 2 * max(others.values()), median
