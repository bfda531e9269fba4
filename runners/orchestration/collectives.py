"""The collective phase of a run: its collective cases (family collective), each in a group of ranks.

A collective needs every device of its group at once, so these cases do not go to the per-device
worker lanes: `rooflab run` measures them after the lanes have finished, as a phase of the same run
(runners/orchestration/session.py), one case at a time, each in a RankGroup (runners/orchestration/ranks.py):

- the group: on a CPU `ranks` processes on the CPU (`all`: the op's `cpu_all_ranks`, CPU_ALL_RANKS
  for the collectives, 4 for the link matrix);
  on CUDA one rank per GPU of the run (`--devices all` or a list), rank r on the run's r-th GPU
  (`all`: every GPU of the run). A case asking for more GPUs than the run has, or for one GPU, is
  `skipped` with the reason;
- one group serves consecutive cases of the same backend and devices; a fault ends it (every rank
  killed) and the next case gets a fresh one, with a fresh rendezvous;
- results are stored like every other (ResultStore.add_measurements, at once) on the device of rank
  0, with the group's record (rooflab.record.CollectiveRecord) and, whatever their status, the
  case's collective mode (`collective_mode`: stream or isolated); `--resume`, a restarted shard or a
  second process skip the cases the run already holds on that device, as the lanes do;
- Ctrl-C as in the supervisor: the first lets the case in flight finish, the second kills the group.
"""
from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rooflab.db.measurement_columns import device_key
from rooflab.db.store import environment_device_uuid
from rooflab.record import CollectiveRecord, EnvironmentRecord, MeasurementRecord, WorkModel
from rooflab.runners.machine.environment import capture
from rooflab.runners.orchestration.held import held_on
from rooflab.runners.orchestration.kept_group import KeptGroup
from rooflab.runners.orchestration.messages import CaseOutcome, CaseRequest
from rooflab.runners.orchestration.processes import worker_context
from rooflab.runners.orchestration.rank_pairs import PairOutcome, matrix_fault
from rooflab.runners.orchestration.ranks import GroupResult, GroupStartError, RankGroup
from rooflab.runners.orchestration.records import build_record, op_work_model
from rooflab.runners.orchestration.supervisor import CaseResult, LaneReport, Progress, Store, default_case_timeout_s
from rooflab.suite.case import Case
from rooflab.suite.child import ChildCall, ChildCallError
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops.base import case_skip_reason, format_bytes
from rooflab.suite.ops.collective import ALL, CPU_ALL_RANKS, FAMILY, CollectiveOp, at_world_size, world_size
from rooflab.suite.ops.pairs import PairEnds, held_keys, is_pairs, pair_case
from rooflab.suite.ops.registry import get_op
from rooflab.suite.timing import TimingValue
from rooflab.vocab import DeviceKind, Pace, ResultStatus, device_index_of, device_kind_of

LANE = "collectives"  # how progress lines name the phase
MAX_CPU_RANKS = 16  # rank processes on one CPU: more says nothing about loopback and starves the machine
ENVIRONMENT_TIMEOUT_S = 300.0


def is_collective(case: Case) -> bool:
    return case.family == FAMILY


def group_devices(case: Case, torch_devices: Sequence[str]) -> tuple[list[str] | None, int, str | None]:
    """(the devices of the case's ranks, the world size, None) or (None, the world size asked, why not)."""
    ranks = case.params.get("ranks", ALL)
    if device_kind_of(torch_devices[0]) is not DeviceKind.CUDA:
        size = world_size(ranks, all_ranks=_cpu_all_ranks(case))
        if size > MAX_CPU_RANKS:
            return None, size, f"ranks={ranks}: a CPU runs at most {MAX_CPU_RANKS} ranks (loopback)"
        return ["cpu"] * size, size, None
    gpus = [d for d in torch_devices if device_kind_of(d) is DeviceKind.CUDA]
    size = world_size(ranks, all_ranks=len(gpus))
    if size < 2:
        return None, size, (f"a collective needs at least 2 GPUs; this run has {len(gpus)} ({', '.join(gpus)}): "
                            "measure collectives with --devices all")
    if size > len(gpus):
        return None, size, f"ranks={ranks} needs {size} GPUs; this run has {len(gpus)} ({', '.join(gpus)})"
    return gpus[:size], size, None


def _cpu_all_ranks(case: Case) -> int:
    """The rank processes `ranks: all` starts on a CPU for `case`'s op (suite.ops.collective)."""
    op = get_op(case.op)
    return op.cpu_all_ranks if isinstance(op, CollectiveOp) else CPU_ALL_RANKS


def group_label(case: Case, record: MeasurementRecord) -> str:
    """Where a collective case's group ran, from its result (the group's record: each rank's
    `host device [uuid]`): `cpu x2 (gloo)`, `cuda:0-7 (nccl)`, `cuda:0,2 (nccl)`, with `on N hosts`
    for a group over several; `8 ranks (nccl)` when the record names no device (not started)."""
    collective = record.collective
    places = [text.split() for text in (collective.rank_devices if collective is not None else ())]
    if not places:
        ranks = collective.ranks if collective is not None else case.params.get("ranks", ALL)
        return f"{ranks} ranks ({case.backend})"
    devices = [p[1] if len(p) > 1 else p[0] for p in places]
    hosts = {p[0] for p in places if len(p) > 1}
    if len(set(devices)) == 1:
        where = f"{devices[0]} x{len(devices)}"
    elif all(_cuda_index(d) is not None for d in devices):
        where = "cuda:" + _index_ranges(sorted({_cuda_index(d) or 0 for d in devices}))
    else:
        where = ",".join(dict.fromkeys(devices))
    on = f" on {len(hosts)} hosts" if len(hosts) > 1 else ""
    return f"{where}{on} ({case.backend})"


def _cuda_index(text: str) -> int | None:
    """The index of a CUDA device named with one (`cuda:2` -> 2), else None (`cpu`, `cuda`, a host name)."""
    try:
        return device_index_of(text) if device_kind_of(text) is DeviceKind.CUDA else None
    except ValueError:  # not a device string
        return None


def _index_ranges(indices: list[int]) -> str:
    """`0-7`, `0,2,4`, `0-3,6` from sorted distinct indices."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ",".join(map(str, r)) for r in runs)


def pair_ends(pair: PairOutcome) -> PairEnds:
    """Both ends of a measured pair as its result's params name them: ranks, hosts, device keys."""
    (a, b), (at_a, at_b) = pair.pair, pair.ends
    return PairEnds(a_rank=a, a_host=at_a.host, a_device=device_key(at_a.device_uuid, at_a.device_fingerprint),
                    b_rank=b, b_host=at_b.host, b_device=device_key(at_b.device_uuid, at_b.device_fingerprint))


def work_model_at(size: int) -> Callable[[Case], WorkModel]:
    """The FLOPs and bytes of a collective case at world size `size` (`ranks: all` resolved)."""
    def model(case: Case) -> WorkModel:
        return op_work_model(at_world_size(case, size))

    return model


def group_skip_reason(case: Case, device: DeviceInfo, size: int) -> str | None:
    """Before a group starts: the op's rules and one rank's memory at the world size `size` the case
    runs at (suite.ops.collective.at_world_size: `ranks: all` is the run's GPUs, not the CPU's two) on
    rank 0's device (each rank checks its own device's free memory again, rank_case.py); on a CPU,
    where the ranks share the host's memory, also all the ranks together."""
    op = get_op(case.op)
    sized = at_world_size(case, size)
    reason = case_skip_reason(op, sized, device)
    if reason or device.is_cuda or device.memory_bytes <= 0:
        return reason
    need = size * int(op.memory_bytes(op.resolved_params(sized.params), case.dtype))
    allowed = (case.max_memory_fraction or 1.0) * device.memory_bytes
    if need > allowed:
        return f"would not fit: {size} ranks need {format_bytes(need)} of {format_bytes(device.memory_bytes)}"
    return None


def describe_group_device(torch_device: str, sized: Sequence[tuple[Case, int]]
                          ) -> tuple[EnvironmentRecord, DeviceInfo, dict[str, str | None]]:
    """(rank 0's environment record, its DeviceInfo, each case's `group_skip_reason` at its world size
    there, by case key). Run in a fresh worker process: the collective ops' own rules ask torch
    (whether this build has torch.distributed, gloo, NCCL), and the supervisor of a CPU run does not
    import torch (a few seconds of CPU) for them."""
    env, device = capture(torch_device)
    return env, device, {case.case_key: group_skip_reason(case, device, size) for case, size in sized}


@dataclass(frozen=True)
class PhaseResult:
    results: tuple[CaseResult, ...]
    unmeasured: int  # cases left without a result (interrupted)
    already_measured: int
    interrupted: bool
    device_key: str | None  # the store's key of rank 0's device (None: nothing was run)
    error: str | None = None  # why the phase could not run at all
    lane: LaneReport | None = None  # the phase as a line of the run's summary (rank 0's device)


class CollectivePhase:
    """Measures `cases` (all collective) on the run's `torch_devices`; see the module docstring."""

    def __init__(self, *, store: Store, run_id: str, cases: Sequence[Case], torch_devices: Sequence[str],
                 progress: Progress, seed: int = 0, timing_overrides: Mapping[str, TimingValue] | None = None,
                 case_timeout_s: float | None = None, shard: str | None = None, handle_signals: bool = True) -> None:
        self.store, self.run_id, self.cases = store, run_id, list(cases)
        self.torch_devices, self.progress, self.seed = list(torch_devices), progress, seed
        self.timing_overrides = {k: v for k, v in (timing_overrides or {}).items() if v is not None}
        self.case_timeout_s, self.shard, self.handle_signals = case_timeout_s, shard, handle_signals
        self.stop_requested = False
        self._interrupts = 0
        self._groups: KeptGroup[RankGroup] = KeptGroup(RankGroup)
        self.results: list[CaseResult] = []

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self._interrupts += 1
        if self._interrupts == 1:
            self.stop_requested = True
            self.progress.note("interrupt: finishing the collective in flight, then stopping (Ctrl-C again stops "
                               "at once)")
            return
        raise KeyboardInterrupt

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.stop_requested = True
        raise KeyboardInterrupt

    def run(self) -> PhaseResult:
        previous: dict[int, Any] = {}
        if self.handle_signals and threading.current_thread() is threading.main_thread():
            previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._on_sigint)
            previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._on_sigterm)
        already = 0
        key = error = None
        env: Any = None
        try:
            held = self._all_held()
            if held is not None:
                return held
            try:
                env, device, reasons = self._environment()
            except ChildCallError as exc:
                error = f"{LANE}: could not describe {self.torch_devices[0]}: {exc}"
                self.progress.note(error)
                return PhaseResult((), len(self.cases), 0, False, None, error,
                                   LaneReport(LANE, None, None, None, len(self.cases), 0, error))
            key = device_key(environment_device_uuid(env), env.device_fingerprint)
            stored = held_keys(self.store.measured_case_keys(self.run_id, key))
            pending = [c for c in self.cases if c.case_key not in stored]
            already = len(self.cases) - len(pending)
            self.progress.lane_ready(LANE, f"{device.name}, rank groups", len(pending), already)
            if pending and self.timing_overrides.get("pace") == Pace.IDLE:
                self.progress.note(f"{LANE}: --pace idle does not apply to collectives: their samples follow "
                                   "their mode (stream: calls back to back; isolated: a barrier before each call), "
                                   "and each result records the pace it had")
            for case in pending:
                if self.stop_requested:
                    break
                self._measure(case, env, reasons.get(case.case_key))
        except KeyboardInterrupt:
            self.stop_requested = True
        finally:
            self._groups.close(kill=self.stop_requested)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        left = len(self.cases) - already - len(self.results)
        lane = LaneReport(LANE, env.device_name if env else None, environment_device_uuid(env) if env else None,
                          env.device_fingerprint if env else None, len(self.cases), already, error)
        return PhaseResult(tuple(self.results), max(0, left), already, self.stop_requested, key, error, lane)

    def _all_held(self) -> PhaseResult | None:
        """The phase's result when the run already holds every case on rank 0's device, known without
        torch (runners/orchestration/held.py): nothing is started. None: the phase measures."""
        known = held_on(self.store, self.run_id, self.torch_devices[0], self.cases)
        if known is None:
            return None
        held = len(self.cases)
        self.progress.lane_ready(LANE, f"{known.name}, rank groups", 0, held)
        return PhaseResult((), 0, held, False, device_key(None, known.fingerprint), None,
                           LaneReport(LANE, known.name, None, known.fingerprint, held, held, None))

    def _environment(self) -> tuple[Any, Any, dict[str, str | None]]:
        """Rank 0's device as a worker sees it, captured in a fresh process, and stored with the run;
        with each case's reason to be skipped, judged there too (`describe_group_device`)."""
        sized = []
        for case in self.cases:
            devices, size, _ = group_devices(case, self.torch_devices)
            if devices is not None:
                sized.append((case, size))
        env, device, reasons = ChildCall(describe_group_device, (self.torch_devices[0], sized),
                                          worker_context()).result(ENVIRONMENT_TIMEOUT_S)
        self.store.add_environment(self.run_id, env)
        return env, device, reasons

    def _measure(self, case: Case, env: Any, skip_reason: str | None) -> None:
        """One case in its group (or skipped: `skip_reason`, the op's rules on rank 0's device), stored."""
        self.progress.case_started(LANE, case)
        started = time.monotonic()
        devices, size, reason = group_devices(case, self.torch_devices)
        reason = reason or skip_reason
        collective = CollectiveRecord(ranks=size)
        if reason or devices is None:
            outcome = CaseOutcome(case.case_key, ResultStatus.SKIPPED, reason)
        else:
            backend = case.backend
            limit = self.case_timeout_s or default_case_timeout_s(case.timing.override(self.timing_overrides),
                                                                  backend)
            result = self._in_group(case, backend, devices, limit)
            whole = is_pairs(case) and not result.broken and result.outcome.status == ResultStatus.OK
            if result.pairs:  # the matrix's own result stored too, unless it was measured whole
                self._store_pairs(case, result.pairs, env, size, measured_whole=whole)
            if whole:
                return  # a matrix measured whole: its pairs are its results
            outcome, collective = result.outcome, result.collective or collective
            if is_pairs(case) and result.broken and result.rounds_done:  # before any round: not in one
                outcome = replace(outcome, error=matrix_fault(case, size, result.rounds_done, str(outcome.error)))
        self._store(case, outcome, collective, env, size, time.monotonic() - started)

    def _in_group(self, case: Case, backend: str, devices: list[str], limit_s: float) -> GroupResult:
        try:
            group = self._groups.get(backend, devices)
        except GroupStartError as exc:
            return GroupResult(CaseOutcome(case.case_key, ResultStatus.CRASHED, f"the rank group did not start: {exc}"),
                               None, broken=True)
        result = group.run(CaseRequest(case, self.seed, self.timing_overrides), limit_s)
        if result.broken:
            self.progress.note(f"{LANE}: {case.describe()}: {result.outcome.error}; the group was ended")
            self._groups.close(kill=True)
        return result

    def _store_pairs(self, case: Case, pairs: Sequence[PairOutcome], env: Any, size: int, *,
                     measured_whole: bool) -> None:
        """A matrix's pairs, each stored as a result of its own under its pair's case (both ends in its
        params) and shown as a line of its own (in place of the matrix's, when it was `measured_whole`;
        beside it when it broke)."""
        self.progress.cases_added(LANE, len(pairs) - 1 if measured_whole else len(pairs))
        for pair in pairs:
            self._store(pair_case(case, pair_ends(pair)), pair.outcome, pair.collective, env, size,
                        pair.outcome.elapsed_s)

    def _store(self, case: Case, outcome: CaseOutcome, collective: CollectiveRecord, env: Any, size: int,
               elapsed_s: float) -> None:
        record = build_record(case, outcome, run_id=self.run_id, device_fingerprint=env.device_fingerprint,
                              device_uuid=environment_device_uuid(env), shard=self.shard,
                              work_model=work_model_at(size))
        record = replace(record, collective=collective)
        stored = self.store.add_measurements([record])[0]
        self.results.append(CaseResult(LANE, case, record, elapsed_s, stored))
        self.progress.case_done(LANE, case, record, elapsed_s)
