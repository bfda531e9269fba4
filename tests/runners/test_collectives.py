"""Collectives in groups of rank processes on the CPU (gloo over loopback, 2-4 ranks): every
collective correct, the slowest rank's time and the straggler, planted faults on one rank (a wrong
result, an exception, a death, a hang) ending as incorrect / failed / crashed with that rank named
and nothing left running, and rendezvous that never collide."""
from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest

from rooflab.db.collectives import straggler
from rooflab.runners.crosscheck.session import check_case
from rooflab.runners.engine.group_timing import STREAM_MIN_CALLS
from rooflab.runners.orchestration.messages import CaseOutcome, CaseRequest
from rooflab.runners.orchestration.ranks import RankGroup, innermost_frame
from rooflab.vocab import ResultStatus
from tests.runners.collective_cases import FAST, alive, case, plugin_env

ALL_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")
# three samples of a stream (about 10 ms each): where a test asserts the result and the structure of
# a case, not its figure, the samples are its whole cost beside the group's start
BRIEF = replace(FAST, min_samples=3, max_samples=3)


def _run(group: RankGroup, c, timeout_s: float = 60.0):
    return group.run(CaseRequest(c, seed=7), timeout_s)


def test_every_collective_is_correct_on_three_ranks_in_every_dtype_and_form() -> None:
    cases = [case(op, ranks=3, dtype=dtype, timing=BRIEF) for op in ALL_OPS for dtype in ("float32", "bfloat16")]
    cases += [case("all_gather", ranks=3, inplace=True, timing=BRIEF),
              case("reduce_scatter", ranks=3, inplace=True, timing=BRIEF),
              case("all_reduce", ranks=3, dtype="float16", n=5000, timing=BRIEF)]
    with RankGroup("gloo", ["cpu"] * 3) as group:
        for c in cases:
            result = _run(group, c)
            assert result.outcome.status == ResultStatus.OK, (c.case_key, result.outcome.error)
            assert result.outcome.stats.n_samples == 3 and result.outcome.method.stop_reason == "max_samples"
            assert result.collective.ranks == 3 and len(result.collective.rank_medians_ms) == 3
            assert len(result.collective.rank_devices) == 3 and not group.broken
            # the default mode: streams of calls back to back (test_group_timing.py holds the arithmetic)
            method = result.outcome.method
            assert method.pace == "back_to_back"
            assert method.launches_per_sample >= STREAM_MIN_CALLS


def test_a_planted_slow_rank_shows_as_the_straggler_in_both_modes(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin_env(monkeypatch)
    with RankGroup("gloo", ["cpu"] * 2) as group:
        isolated = _run(group, case("planted_coll_slow", slow_ms=20.0, bad_rank=1, mode="isolated"))
        stream = _run(group, case("planted_coll_slow", slow_ms=10.0, bad_rank=1))
    for result in (isolated, stream):
        assert result.outcome.status == ResultStatus.OK, result.outcome.error
    # the slow rank is the straggler in both modes: in isolated mode by its whole sleep; in a stream of
    # N calls the others wait for its sleep inside their next call, so it stands out by one sleep per
    # stream: 10 ms / N a call above the others, whatever a call itself costs (asked as a share of the
    # others' figure, half a sleep over N - 1, it failed on a loaded machine where a gloo call took
    # 5 ms beside the sleep: 0.35 ms of 15.7 ms a call, 2.2 %, under the 2.6 % asked)
    calls = stream.outcome.method.launches_per_sample
    assert calls >= STREAM_MIN_CALLS
    rank, isolated_excess = straggler(isolated.collective.rank_medians_ms)
    assert rank == 1 and isolated_excess is not None and isolated_excess > 0.3, isolated.collective.rank_medians_ms
    assert straggler(stream.collective.rank_medians_ms)[0] == 1, stream.collective.rank_medians_ms
    fast, slow = stream.collective.rank_medians_ms
    assert slow - fast > 0.5 * 10.0 / calls, (fast, slow, calls)  # at least half a sleep per stream
    # isolated: a sample is the slowest rank's time of its call (rank 1 sleeps 20 ms inside it)
    assert isolated.collective.rank_medians_ms[1] >= 20.0 > isolated.collective.rank_medians_ms[0]
    assert isolated.outcome.stats.median_ms >= 20.0
    assert isolated.outcome.method.pace == "barrier"
    # stream: rank 0 waits for rank 1's sleep inside its next call, so both ranks read about 10 ms a
    # call, rank 0 one sleep less per stream; the sample is their mean, between the two
    low, high = sorted(stream.collective.rank_medians_ms)
    assert low <= stream.outcome.stats.median_ms <= high
    assert stream.outcome.method.pace == "back_to_back"


def test_a_wrong_result_on_one_rank_makes_the_case_incorrect_and_names_the_rank(monkeypatch) -> None:
    plugin_env(monkeypatch)
    with RankGroup("gloo", ["cpu"] * 3) as group:
        result = _run(group, case("planted_coll_wrong", ranks=3, bad_rank=2))
        assert result.outcome.status == ResultStatus.INCORRECT
        assert "rank 2 of 3" in result.outcome.error and "index 3" in result.outcome.error
        assert not group.broken  # every rank agreed on the verdict: the group goes on
        assert _run(group, case("all_reduce", ranks=3)).outcome.status == ResultStatus.OK


@pytest.mark.parametrize("op, status, expected", [
    ("planted_coll_raise", ResultStatus.FAILED, "rank 1: RuntimeError: planted fault on this rank"),
    ("planted_coll_die", ResultStatus.CRASHED, "rank 1 died: exit code 3"),
])
def test_a_rank_that_raises_or_dies_ends_its_case_and_its_group(monkeypatch, op, status, expected) -> None:
    plugin_env(monkeypatch)
    group = RankGroup("gloo", ["cpu"] * 2)
    pids, folder = group.pids, Path(group.folder)
    result = _run(group, case(op, after=5))
    group.close()
    assert result.outcome.status == status and result.broken
    assert result.outcome.error.startswith(expected), result.outcome.error  # the cause first
    assert alive(pids) == [] and not folder.exists()


def test_a_hanging_rank_is_killed_at_the_time_limit_and_named_with_where_it_was(monkeypatch) -> None:
    plugin_env(monkeypatch)
    group = RankGroup("gloo", ["cpu"] * 2)
    pids, folder = group.pids, Path(group.folder)
    result = _run(group, case("planted_coll_hang", after=5), timeout_s=3.0)
    group.close()
    error = result.outcome.error
    assert result.outcome.status == ResultStatus.CRASHED and result.broken
    assert error.startswith("timed out after 3") and "rank 1 in fault (planted_collectives.py" in error, error
    assert "rank 0 in " in error  # the other rank waits inside the collective
    assert alive(pids) == [] and not folder.exists()
    with RankGroup("gloo", ["cpu"] * 2) as fresh:  # the next case, in a fresh group
        assert _run(fresh, case("all_reduce")).outcome.status == ResultStatus.OK


def test_two_groups_at_once_never_meet() -> None:
    results: dict[int, tuple[str, list[CaseOutcome]]] = {}

    def run(size: int) -> None:
        with RankGroup("gloo", ["cpu"] * size) as group:
            results[size] = (group.folder, [_run(group, case("all_reduce", ranks=size, timing=BRIEF)).outcome
                                            for _ in range(2)])

    threads = [threading.Thread(target=run, args=(size,)) for size in (2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    (folder2, outcomes2), (folder3, outcomes3) = results[2], results[3]
    assert folder2 != folder3
    assert all(o.status == ResultStatus.OK for o in outcomes2 + outcomes3), [o.error for o in outcomes2 + outcomes3]


def test_innermost_frame_reads_the_main_threads_stack_from_a_dump() -> None:
    dump = ("main thread 0x00007f00000000aa\n"
            "Thread 0x00007f00000000bb (most recent call first):\n"
            '  File "/x/threading.py", line 320 in wait\n\n'
            "Current thread 0x00007f00000000aa (most recent call first):\n"
            '  File "/x/y/planted.py", line 41 in fault\n'
            '  File "/x/y/group_timing.py", line 99 in _take_cpu\n')
    assert innermost_frame(dump) == "fault (planted.py:41)"
    assert innermost_frame("garbage") is None


def test_the_crosscheck_skips_collectives_with_the_reason() -> None:
    from rooflab.runners.crosscheck.torch_peer import TorchTimerPeer
    from rooflab.suite.device import DeviceInfo

    cpu = DeviceInfo("cpu", "test cpu", "cpu", 8 << 30, 1 << 20)
    rows = check_case(case("all_reduce"), cpu, [TorchTimerPeer()], rounds=1)
    assert [(r.status, r.peer) for r in rows] == [(ResultStatus.SKIPPED, "torch")]
    assert rows[0].error is not None and "group of rank processes" in rows[0].error
