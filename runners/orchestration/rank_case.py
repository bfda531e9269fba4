"""One collective case on one rank of a group: every rank of the group runs `run_rank_case` at once.

The steps, each agreed by the whole group before the next (`Control.agree`), so that no rank times
a collective the others have given up on:

1. skip: the worker's rules on this rank's device (memory free now, the op's own reasons), the
   case's memory taken at the group's world size (`ranks: all` resolved);
2. prepare this rank's seeded input, make the first call (timed apart) and check this rank's output
   against the exact expected values: any rank off makes the case `incorrect`, with that rank named;
3. warm up and sample together in the case's mode, stream or isolated (runners.engine.group_timing):
   rank 0 decides when to stop.

A rank that raises gives up at once (`RankReply.broken`): the collective it left may hold the
other ranks forever, so the group cannot be used again; its driver (runners/orchestration/ranks.py,
or the Slurm driver) ends the group. Rank 0's reply carries the case's outcome and its group record.
"""
from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rooflab.record import CollectiveRecord, TimingMethod
from rooflab.runners.engine.group_timing import time_group
from rooflab.runners.machine.cpuinfo import default_cpu_threads
from rooflab.runners.machine.observe import watching
from rooflab.runners.orchestration.collective_method import collective_method
from rooflab.runners.orchestration.messages import CaseOutcome, CaseRequest
from rooflab.runners.orchestration.prepare import case_seed, generic_skip_reason, synchronize
from rooflab.runners.orchestration.rank_pairs import OnRound, time_pairs
from rooflab.runners.orchestration.rank_places import RankPlace, own_pids
from rooflab.runners.orchestration.worker import describe_exception
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops.base import Prepared
from rooflab.suite.ops.collective import at_world_size
from rooflab.suite.ops.pairs import PreparedPairs
from rooflab.suite.ops.registry import get_op
from rooflab.suite.timing import TimingSettings
from rooflab.vocab import ResultStatus

if TYPE_CHECKING:  # the group timing loads in the rank processes only
    from rooflab.runners.engine.group_timing import GroupControl

COMM_ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "GLOO_")  # settings that change how the library moves data


@dataclass(frozen=True)
class RankReply:
    """What one rank says about one case."""

    rank: int
    status: str  # a ResultStatus
    error: str | None = None
    broken: bool = False  # the rank raised: the group must be ended
    # rank 0: the case's outcome; None for a matrix of the link matrix measured round by round, whose
    # pairs' outcomes went to `on_round` as each round ended (rank_pairs.py)
    outcome: CaseOutcome | None = None
    collective: CollectiveRecord | None = None  # rank 0: the group's record


def comm_settings(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The NCCL_*, TORCH_NCCL_* and GLOO_* variables of this process."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in sorted(env.items()) if k.startswith(COMM_ENV_PREFIXES)}


def comm_version(backend: str) -> str | None:
    """NCCL's version (`2.21.5`) on backend nccl; None on gloo (it ships inside torch)."""
    if backend != "nccl":
        return None
    import torch

    version = torch.cuda.nccl.version()
    return ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)


def _first_problem(verdicts: list[str | None]) -> str | None:
    problems = [v for v in verdicts if v]
    return "; ".join(str(p) for p in problems) if problems else None


def _cpu_threads(device: DeviceInfo, size: int) -> int | None:
    """A CPU rank's intra-op threads: the physical cores shared among the group's ranks."""
    if device.is_cuda:
        return None
    import torch

    threads = max(1, default_cpu_threads() // size)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


def run_rank_case(request: CaseRequest, device: DeviceInfo, control: GroupControl, *,
                  places: Sequence[RankPlace] = (), backend: str = "gloo",
                  on_round: OnRound | None = None) -> RankReply:
    """This rank's part of one collective case; never raises (a fault is a broken reply). `places`:
    every rank's (`group_places`), empty when unknown; `on_round`: where rank 0 hands a matrix's
    pairs, round by round (a matrix without it is refused: its pairs would go nowhere)."""
    case, rank, size = request.case, control.rank, control.size
    rank_devices = tuple(p.text for p in places)
    started = time.perf_counter()
    try:
        op = get_op(case.op)
        # memory at the group's own size: `ranks: all` is `size` ranks here, not the models' CPU group
        reason = control.agree(generic_skip_reason(op, at_world_size(case, size), device))
        skipped = _first_problem([f"rank {r}: {why}" if size > 1 and why else why for r, why in enumerate(reason)])
        if skipped:
            return _reply(rank, CaseOutcome(case.case_key, ResultStatus.SKIPPED, skipped,
                                            time.perf_counter() - started), size, rank_devices, backend)
        settings = case.timing.override(dict(request.timing_overrides))
        threads = _cpu_threads(device, size)
        prepared = op.prepare(case, device, case_seed(request.seed, case.case_key))
        if isinstance(prepared, PreparedPairs):
            return _matrix(request, device, control, prepared, settings, threads, places, backend, on_round)
        synchronize(device, None)
        t0 = time.perf_counter_ns()
        output = prepared.fn()
        synchronize(device, None)
        first_call_ms = (time.perf_counter_ns() - t0) / 1e6
        problem = prepared.check(output)
        output = None
        verdicts = control.agree((problem, first_call_ms))
        wrong = _first_problem([p for p, _ in verdicts])
        first_call_ms = max(ms for _, ms in verdicts)
        if wrong:
            method = TimingMethod(cache=case.cache, timing_mode=case.timing_mode, first_call_ms=first_call_ms)
            return _reply(rank, CaseOutcome(case.case_key, ResultStatus.INCORRECT, wrong, time.perf_counter() - started,
                                            method=method), size, rank_devices, backend)
        return _timed(request, device, control, prepared, settings, first_call_ms, threads, started, places,
                      backend)
    except Exception as exc:  # noqa: BLE001 - a fault on a rank is data: the case fails, the group ends
        return RankReply(rank, ResultStatus.FAILED, f"rank {rank}: {describe_exception(exc)}", broken=True)


def _matrix(request: CaseRequest, device: DeviceInfo, control: GroupControl, prepared: PreparedPairs,
            settings: TimingSettings, threads: int | None, places: Sequence[RankPlace], backend: str,
            on_round: OnRound | None) -> RankReply:
    """A matrix of the link matrix (rank_pairs.py): its pairs, each checked and timed round by round,
    rank 0 handing each round's outcomes to `on_round`; its reply carries no outcome of its own."""
    if len(places) != control.size:
        raise RuntimeError("a matrix of pairs needs every rank's place (group_places) to name each pair's ends")
    if on_round is None:
        raise RuntimeError("a matrix of pairs needs an on_round to hand its rounds' pairs to")
    group = CollectiveRecord(ranks=control.size, rank_devices=tuple(p.text for p in places),
                             comm_version=comm_version(backend), comm_settings=comm_settings())
    time_pairs(request, device, control, prepared, settings, threads, places, group, on_round)
    return RankReply(control.rank, ResultStatus.OK, collective=group if control.rank == 0 else None)


def _reply(rank: int, outcome: CaseOutcome, size: int, rank_devices: tuple[str, ...], backend: str) -> RankReply:
    """Every rank's reply for a case that ends before timing (all ranks agree on it)."""
    if rank != 0:
        return RankReply(rank, outcome.status, outcome.error)
    record = CollectiveRecord(ranks=size, rank_devices=rank_devices, comm_version=comm_version(backend),
                              comm_settings=comm_settings())
    return RankReply(rank, outcome.status, outcome.error, outcome=outcome, collective=record)


def _timed(request: CaseRequest, device: DeviceInfo, control: GroupControl, prepared: Prepared,
           settings: TimingSettings, first_call_ms: float, threads: int | None, started: float,
           places: Sequence[RankPlace], backend: str) -> RankReply:
    """Warmup and sampling on every rank (runners.engine.group_timing); rank 0 builds the outcome."""
    rank, case = control.rank, request.case
    mode = case.collective_mode
    assert mode is not None  # a collective case always has one (suite.case)
    if rank != 0:
        time_group(prepared.fn, reset=getattr(prepared, "reset", None), control=control,
                   torch_device=device.torch_device, settings=settings, mode=mode)
        return RankReply(rank, ResultStatus.OK)
    with watching(device, own_pids(places, rank)) as watch:
        timing = time_group(prepared.fn, reset=getattr(prepared, "reset", None), control=control,
                            torch_device=device.torch_device, settings=settings, mode=mode)
    assert timing is not None  # rank 0
    method = collective_method(case, timing, stop_reason=timing.stop_reason, first_call_ms=first_call_ms)
    outcome = CaseOutcome(
        case.case_key, ResultStatus.OK, None, time.perf_counter() - started, method=method, stats=timing.stats,
        machine=watch.observation(timing.stats, timing.stop_reason, threads), samples_ms=timing.samples_ms,
        phases_ms={"warmup": timing.warmup_ms, "sampling": timing.sampling_ms},
    )
    record = CollectiveRecord(ranks=control.size, rank_medians_ms=timing.rank_medians_ms,
                              rank_devices=tuple(p.text for p in places),
                              comm_version=comm_version(backend), comm_settings=comm_settings())
    return RankReply(rank, ResultStatus.OK, outcome=outcome, collective=record)
