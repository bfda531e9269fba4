"""One matrix of the link matrix on one rank of a group: its rounds of pairs, each checked and timed.

Every rank of the group runs `time_pairs` at once, after run_rank_case (rank_case.py) has agreed
that the case runs and prepared it (suite.ops.pairs.PreparedPairs: the rounds and this rank's call
in each). Round after round, on every rank:

1. clear this rank's receive buffer, make its first call of the round (timed apart; a rank that
   rests this round makes none) and check what it received against its partner's seeded input;
   the group agrees on every rank's verdict;
2. warm up and sample the round's pairs together (runners.engine.pair_timing.time_round), rank 0
   watching the machine (contention: every rank of the group on this host is the case's own).

Rank 0 turns each pair of each round into an outcome of its own (`PairOutcome`): `incorrect`,
naming the rank and what differed, when an end received wrong values (its figures are dropped;
the other pairs of the round are measured); else `ok` with the pair's samples, its statistics, the
round's method and the machine's observation. It hands each round's outcomes on as soon as the
round ends (`on_round`, a `RoundDone`: the local group's rank sends them to its parent, the Slurm
step's rank 0 stores them), so that a fault in a later round loses that round only. A fault (an
exception) leaves this module: the caller makes the case `failed` and ends the group, as for any
collective, and names the round it broke in (`matrix_fault`).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from rooflab.record import CollectiveRecord, TimingMethod
from rooflab.runners.orchestration.collective_method import collective_method
from rooflab.runners.orchestration.messages import CaseOutcome, CaseRequest
from rooflab.runners.orchestration.prepare import synchronize
from rooflab.runners.orchestration.rank_places import RankPlace, own_pids
from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops.collective import ALL
from rooflab.suite.ops.pairs import PairCall, PreparedPairs, Round, no_call, schedule
from rooflab.suite.timing import TimingSettings
from rooflab.vocab import ResultStatus

if TYPE_CHECKING:  # the group timing loads in the rank processes only
    from rooflab.runners.engine.group_timing import GroupControl
    from rooflab.runners.engine.pair_timing import RoundTiming
    from rooflab.runners.machine.observe import Watch


@dataclass(frozen=True)
class PairOutcome:
    """One pair of a matrix as rank 0 knows it: the ranks of its ends a and b, where each ran, its
    outcome and its group record (the ends' own medians, where they ran)."""

    pair: tuple[int, int]
    ends: tuple[RankPlace, RankPlace]
    outcome: CaseOutcome
    collective: CollectiveRecord


@dataclass(frozen=True)
class RoundDone:
    """Rank 0: one round of a matrix measured, its place among the rounds (1 = the first) and its
    pairs' outcomes."""

    index: int
    rounds: int
    pairs: tuple[PairOutcome, ...]


OnRound = Callable[[RoundDone], None]


def matrix_fault(case: Case, size: int, rounds_done: int, error: str) -> str:
    """The error of a matrix of `size` ranks that broke after `rounds_done` rounds: the round it
    broke in, that round's pairs, and the rounds before it kept."""
    rounds = schedule(size, case.params.get("pairs_at_once", ALL))
    if rounds_done >= len(rounds):  # every round was measured: the fault came after them
        return error
    pairs = ", ".join(f"{a}-{b}" for a, b in rounds[rounds_done])
    kept = f"; the pairs of the {rounds_done} round(s) before it were stored" if rounds_done else ""
    return f"in round {rounds_done + 1} of {len(rounds)} (pairs {pairs}): {error}{kept}"


def _first_call(call: PairCall | None, device: DeviceInfo) -> tuple[str | None, float]:
    """This rank's first call of a round, timed apart, and its check: (what was wrong, ms)."""
    if call is None:
        return None, 0.0
    call.clear()
    synchronize(device, None)
    t0 = time.perf_counter_ns()
    call.fn()
    synchronize(device, None)
    first_ms = (time.perf_counter_ns() - t0) / 1e6
    return (call.check() if call.check is not None else None), first_ms


def time_pairs(request: CaseRequest, device: DeviceInfo, control: GroupControl, prepared: PreparedPairs,
               settings: TimingSettings, threads: int | None, places: Sequence[RankPlace],
               group: CollectiveRecord, on_round: OnRound) -> None:
    """This rank's part of every round; rank 0 hands each round's pairs' outcomes to `on_round` as
    the round ends. `group` is the matrix's group record (versions, settings), which each pair's
    extends."""
    # numpy and the machine's monitors: loaded where a case is timed, not by the supervisor that
    # imports this module to read a rank's reply
    from rooflab.runners.engine.pair_timing import time_round
    from rooflab.runners.machine.observe import watching

    case, rank = request.case, control.rank
    mode = case.collective_mode
    assert mode is not None  # a collective case always has one (suite.case)
    own = own_pids(places, rank)
    for index, (pairs, call) in enumerate(zip(prepared.rounds, prepared.calls, strict=True), start=1):
        verdicts = control.agree(_first_call(call, device))
        fn = call.fn if call is not None else no_call
        if rank != 0:
            time_round(fn, pairs=pairs, control=control, torch_device=device.torch_device, settings=settings, mode=mode)
            continue
        with watching(device, own) as watch:
            timing = time_round(fn, pairs=pairs, control=control, torch_device=device.torch_device, settings=settings,
                                mode=mode)
        assert timing is not None  # rank 0
        outcomes = _round_outcomes(case, pairs, verdicts, timing, watch, threads, places, group)
        on_round(RoundDone(index, len(prepared.rounds), tuple(outcomes)))


def _round_outcomes(case: Case, pairs: Round, verdicts: Sequence[tuple[str | None, float]], timing: RoundTiming,
                    watch: Watch, threads: int | None, places: Sequence[RankPlace],
                    group: CollectiveRecord) -> list[PairOutcome]:
    """Rank 0: each pair of a round as an outcome (see the module docstring)."""
    out = []
    for (a, b), series in zip(pairs, timing.pairs, strict=True):
        wrong = "; ".join(problem for problem, _ in (verdicts[a], verdicts[b]) if problem)
        first_ms = max(verdicts[a][1], verdicts[b][1])
        if wrong:
            method = TimingMethod(cache=case.cache, timing_mode=case.timing_mode, first_call_ms=first_ms)
            outcome = CaseOutcome(case.case_key, ResultStatus.INCORRECT, wrong, method=method)
            out.append(_pair(a, b, outcome, (), places, group))  # its figures are of wrong values: dropped
            continue
        method = collective_method(case, timing, stop_reason=series.stop_reason, first_call_ms=first_ms)
        outcome = CaseOutcome(
            case.case_key, ResultStatus.OK, None, (timing.warmup_ms + timing.sampling_ms) / 1e3, method=method,
            stats=series.stats, machine=watch.observation(series.stats, series.stop_reason, threads),
            samples_ms=series.samples_ms, phases_ms={"warmup": timing.warmup_ms, "sampling": timing.sampling_ms},
        )
        out.append(_pair(a, b, outcome, series.end_medians_ms, places, group))
    return out


def _pair(a: int, b: int, outcome: CaseOutcome, end_medians_ms: tuple[float, ...], places: Sequence[RankPlace],
          group: CollectiveRecord) -> PairOutcome:
    """The pair (a, b) of a round with its outcome and its ends' medians, in the group's record."""
    record = replace(group, rank_medians_ms=end_medians_ms, rank_devices=(places[a].text, places[b].text))
    return PairOutcome((a, b), (places[a], places[b]), outcome, record)
