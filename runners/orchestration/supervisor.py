"""The supervisor: feeds cases to worker processes, one per device, and stores every result as it arrives.

One event loop in the main thread waits on all workers' pipes and process sentinels together:
every result the loop received in one pass is written before the next pass, all of them in one
transaction (`ResultStore.add_measurements`: COPY on PostgreSQL, one batched INSERT elsewhere). A
result is never held back for a batch, and a lane gets its next case only once its result is
written: a run killed outright loses only the cases in flight (and the write in progress); lanes
whose results arrive in the same pass share a write. A worker that dies marks its case `crashed`
(exit code or signal) and a fresh worker takes the next case; a worker that outlives the per-case
wall-clock limit is killed and its case marked `crashed` ("timed out"). The first SIGINT lets the
cases in flight finish and be stored, then the run stops as `interrupted`; a second SIGINT (or a
SIGTERM) stops at once. What was stored stays.

(About 430 lines on purpose: one event loop and its handlers, a lane's whole life from start to
the last result, read best in one place; the processes, the records and the messages are modules
of their own.)
"""
from __future__ import annotations

import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from multiprocessing.connection import wait
from typing import Any, Protocol

from rooflab.db.measurement_columns import device_key
from rooflab.db.store import environment_device_uuid
from rooflab.record import EnvironmentRecord, MeasurementRecord, WorkModel
from rooflab.runners.machine.environment import KnownDevice
from rooflab.runners.orchestration.held import HeldResults, held_on
from rooflab.runners.orchestration.messages import CaseOutcome, CaseRequest, WorkerReady
from rooflab.runners.orchestration.processes import WORKER_START_TIMEOUT_S, WorkerProcess, describe_exit
from rooflab.runners.orchestration.records import build_record, op_work_model
from rooflab.suite.case import Case
from rooflab.suite.timing import TimingSettings, TimingValue
from rooflab.vocab import ResultStatus, RunStatus

# Per-case limit: a generous allowance for input preparation and the reference, a larger one for
# torch.compile, plus a multiple of the case's own warmup + sampling budget.
CASE_ALLOWANCE_S = 60.0
COMPILE_ALLOWANCE_S = 240.0
CASE_BUDGET_FACTOR = 3.0
# A worker that fails to start this many times in a row is given up on (its device is broken).
MAX_START_FAILURES = 2
POLL_S = 0.25
# How often a lane re-reads which cases the run already holds (another process may be running
# the same shard: a requeued Slurm job whose first instance is still alive).
REFRESH_MEASURED_S = 30.0


def default_case_timeout_s(settings: TimingSettings, backend: str) -> float:
    """The wall-clock limit of one case: allowance + factor x (warmup + max sampling time)."""
    budget_s = (settings.warmup_ms + settings.max_time_ms) / 1e3
    allowance = CASE_ALLOWANCE_S + (COMPILE_ALLOWANCE_S if backend == "compiled" else 0.0)
    return allowance + CASE_BUDGET_FACTOR * budget_s


class Store(HeldResults, Protocol):
    """Where a run's results go (db.store.ResultStore; the tests' fakes)."""

    def add_environment(self, run_id: str, env: EnvironmentRecord) -> None: ...
    def add_measurements(self, records: Sequence[MeasurementRecord]) -> list[bool]: ...


class Progress(Protocol):
    def lane_ready(self, lane: str, device_name: str, pending: int, already_measured: int) -> None: ...
    def cases_dropped(self, lane: str, dropped: int, pending: int) -> None: ...
    def cases_added(self, lane: str, added: int) -> None: ...
    def case_started(self, lane: str, case: Case) -> None: ...
    def case_done(self, lane: str, case: Case, record: MeasurementRecord, elapsed_s: float) -> None: ...
    def note(self, text: str) -> None: ...


class RunProgress(Progress, Protocol):
    """A whole run's display (runners.orchestration.progress): the lanes' and the collective phase's
    Progress, started with the count of cases and the devices, closed at the end."""

    def start(self, total: int, devices: Sequence[str]) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class CaseResult:
    """One stored result, for progress and the summary."""

    lane: str
    case: Case
    record: MeasurementRecord
    elapsed_s: float
    stored: bool  # False when the store already held a result for it (nothing was written)


@dataclass(frozen=True)
class LaneReport:
    torch_device: str
    device_name: str | None
    device_uuid: str | None
    device_fingerprint: str | None
    cases: int  # cases given to this lane
    already_measured: int  # skipped because the run already held a result (resume)
    error: str | None  # why the lane stopped early (worker could not start)


@dataclass(frozen=True)
class SupervisorResult:
    status: str  # complete | interrupted | failed
    results: tuple[CaseResult, ...]
    lanes: tuple[LaneReport, ...]
    unmeasured: int  # cases left without a result (interrupt, a lane that failed)


class LaneState(StrEnum):
    """Where one device's lane stands."""

    NEW = "new"  # no worker yet (or the last one died and a fresh one is due)
    STARTING = "starting"  # a worker is starting and has not reported its device
    IDLE = "idle"  # a worker is ready for the next case
    BUSY = "busy"  # a case is in flight
    DONE = "done"  # nothing more to do on this device


@dataclass
class _Lane:
    torch_device: str
    cases: list[Case]
    worker: WorkerProcess | None = None
    state: LaneState = LaneState.NEW
    deadline: float = 0.0
    pending: deque[Case] | None = None  # known once the first worker reported its device
    in_flight: Case | None = None
    sent_at: float = 0.0
    ready: WorkerReady | None = None
    device_uuid: str | None = None
    already_measured: int = 0
    device_key: str | None = None  # the store's key of this device (UUID, or fingerprint on a CPU)
    known: KnownDevice | None = None  # the device as known without torch, when the run held all its cases
    refreshed_at: float = 0.0  # when the run's stored case keys were last read
    start_failures: int = 0
    error: str | None = None
    results: list[CaseResult] = field(default_factory=list)


class Supervisor:
    """Runs `cases` on every device in `torch_devices` (each device measures every case)."""

    def __init__(
        self,
        *,
        store: Store,
        run_id: str,
        torch_devices: Sequence[str],
        cases: Sequence[Case],
        progress: Progress,
        seed: int = 0,
        timing_overrides: Mapping[str, TimingValue] | None = None,
        case_timeout_s: float | None = None,
        shard: str | None = None,
        work_model: Callable[[Case], WorkModel] | None = None,
        handle_signals: bool = True,
        cpu_threads: int | None = None,
    ) -> None:
        self.store = store
        self.cpu_threads = cpu_threads
        self.run_id = run_id
        self.shard = shard
        self.seed = seed
        self.timing_overrides = {k: v for k, v in (timing_overrides or {}).items() if v is not None}
        self.case_timeout_s = case_timeout_s
        self.progress = progress
        self.work_model = work_model or op_work_model
        self.handle_signals = handle_signals
        self.lanes = [_Lane(d, list(cases)) for d in torch_devices]
        self.stop_requested = False
        self._interrupts = 0
        self._received: list[tuple[_Lane, CaseResult]] = []  # received in this pass of the loop, not yet written

    # -- signals -------------------------------------------------------------------------------

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self._interrupts += 1
        if self._interrupts == 1:
            self.stop_requested = True
            self.progress.note("interrupt: finishing the case in flight, then stopping (Ctrl-C again stops at once)")
            return
        raise KeyboardInterrupt

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.stop_requested = True
        raise KeyboardInterrupt

    # -- main loop -----------------------------------------------------------------------------

    def run(self) -> SupervisorResult:
        previous: dict[int, Any] = {}
        if self.handle_signals and threading.current_thread() is threading.main_thread():
            previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._on_sigint)
            previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._on_sigterm)
        stopped_at_once = False
        try:
            self._loop()
        except KeyboardInterrupt:
            stopped_at_once = True
            self.stop_requested = True
        finally:
            for lane in self.lanes:
                if lane.worker is not None:
                    if stopped_at_once or lane.state in (LaneState.BUSY, LaneState.STARTING):
                        lane.worker.kill()
                    else:
                        lane.worker.stop()
                    lane.worker = None
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self._write_received()
        return self._result()

    def _result(self) -> SupervisorResult:
        results: list[CaseResult] = []
        reports: list[LaneReport] = []
        unmeasured = 0
        failed = False
        for lane in self.lanes:
            results.extend(lane.results)
            if lane.pending is None:
                unmeasured += len(lane.cases)
            else:
                unmeasured += len(lane.pending) + (1 if lane.in_flight is not None else 0)
            if lane.error:
                failed = True
            env = lane.ready.environment if lane.ready else None
            known = lane.known
            reports.append(
                LaneReport(
                    torch_device=lane.torch_device,
                    device_name=lane.ready.device.name if lane.ready else (known.name if known else None),
                    device_uuid=lane.device_uuid or (known.uuid if known else None),
                    device_fingerprint=(env.device_fingerprint if env is not None
                                        else known.fingerprint if known else None),
                    cases=len(lane.cases),
                    already_measured=lane.already_measured,
                    error=lane.error,
                )
            )
        if self.stop_requested:
            status = RunStatus.INTERRUPTED
        elif failed:
            status = RunStatus.FAILED
        else:
            status = RunStatus.COMPLETE
        return SupervisorResult(status, tuple(results), tuple(reports), unmeasured)

    def _loop(self) -> None:
        while True:
            self._write_received()  # what the last pass received, before any lane is given its next case
            for lane in self.lanes:
                self._advance(lane)
            active = [lane for lane in self.lanes if lane.state in (LaneState.STARTING, LaneState.BUSY)]
            if not active:
                if all(lane.state == LaneState.DONE for lane in self.lanes):
                    return
                continue
            now = time.monotonic()
            timeout = max(0.0, min(POLL_S, min(lane.deadline for lane in active) - now))
            waitables: list[Any] = []
            for lane in active:
                assert lane.worker is not None
                waitables += [lane.worker.conn, lane.worker.sentinel]
            ready = set(wait(waitables, timeout))
            for lane in active:
                worker = lane.worker
                assert worker is not None
                if worker.conn in ready:
                    self._receive(lane)
                elif worker.sentinel in ready:
                    self._worker_died(lane)
                elif time.monotonic() > lane.deadline:
                    self._deadline_passed(lane)

    def _advance(self, lane: _Lane) -> None:
        """Start a worker or send the next case, as the lane's state allows."""
        if lane.state == LaneState.DONE:
            return
        if self.stop_requested and lane.state in (LaneState.NEW, LaneState.IDLE, LaneState.STARTING):
            if lane.state == LaneState.STARTING and lane.worker is not None:
                lane.worker.kill()
                lane.worker = None
            self._finish_lane(lane)
            return
        if lane.state == LaneState.NEW:
            if not lane.cases or (lane.pending is not None and not lane.pending) or self._all_held(lane):
                self._finish_lane(lane)
                return
            lane.worker = WorkerProcess(lane.torch_device)
            lane.state = LaneState.STARTING
            lane.deadline = time.monotonic() + WORKER_START_TIMEOUT_S
            return
        if lane.state == LaneState.IDLE:
            assert lane.pending is not None and lane.worker is not None
            if lane.pending and time.monotonic() - lane.refreshed_at > REFRESH_MEASURED_S:
                self._drop_measured(lane)
            if not lane.pending:
                self._finish_lane(lane)
                return
            case = lane.pending.popleft()
            lane.in_flight = case
            lane.sent_at = time.monotonic()
            limit = self.case_timeout_s or default_case_timeout_s(
                case.timing.override(self.timing_overrides), case.backend
            )
            lane.deadline = lane.sent_at + limit
            lane.state = LaneState.BUSY
            self.progress.case_started(lane.torch_device, case)
            try:
                lane.worker.send(("case", CaseRequest(case, self.seed, self.timing_overrides, self.cpu_threads)))
            except (BrokenPipeError, OSError):
                self._worker_died(lane)

    def _all_held(self, lane: _Lane) -> bool:
        """Until a worker has said which cases the run holds: whether it already holds every case of
        the lane on its device, known without torch (runners/orchestration/held.py; a few ms). The
        lane then needs no worker."""
        if lane.pending is not None:
            return False
        known = held_on(self.store, self.run_id, lane.torch_device, lane.cases)
        if known is None:
            return False
        lane.known = known
        lane.device_key = device_key(known.uuid, known.fingerprint)
        lane.already_measured = len(lane.cases)
        lane.pending = deque()
        self.progress.lane_ready(lane.torch_device, known.name, 0, lane.already_measured)
        return True

    def _drop_measured(self, lane: _Lane) -> None:
        """Forget pending cases that another process (the same shard started twice) has stored since."""
        assert lane.pending is not None
        done = self.store.measured_case_keys(self.run_id, lane.device_key)
        lane.refreshed_at = time.monotonic()
        kept = [case for case in lane.pending if case.case_key not in done]
        dropped = len(lane.pending) - len(kept)
        if dropped:
            lane.pending = deque(kept)
            lane.already_measured += dropped
            self.progress.cases_dropped(lane.torch_device, dropped, len(kept))

    def _finish_lane(self, lane: _Lane) -> None:
        if lane.worker is not None:
            lane.worker.stop()
            lane.worker = None
        lane.state = LaneState.DONE

    def _receive(self, lane: _Lane) -> None:
        assert lane.worker is not None
        try:
            kind, payload = lane.worker.conn.recv()
        except (EOFError, OSError):
            self._worker_died(lane)
            return
        if kind == "ready":
            self._on_ready(lane, payload)
        elif kind == "setup_error":
            lane.worker.kill()
            lane.worker = None
            lane.error = f"worker on {lane.torch_device} could not start: {payload}"
            self.progress.note(lane.error)
            lane.state = LaneState.DONE
        elif kind == "result":
            self._on_result(lane, payload)

    def _on_ready(self, lane: _Lane, ready: WorkerReady) -> None:
        lane.start_failures = 0
        if lane.ready is None:
            lane.ready = ready
            lane.device_uuid = environment_device_uuid(ready.environment)
            self.store.add_environment(self.run_id, ready.environment)
            key = device_key(lane.device_uuid, ready.environment.device_fingerprint)
            lane.device_key = key
            done = self.store.measured_case_keys(self.run_id, key)
            lane.refreshed_at = time.monotonic()
            pending = [case for case in lane.cases if case.case_key not in done]
            lane.already_measured = len(lane.cases) - len(pending)
            lane.pending = deque(pending)
            self.progress.lane_ready(lane.torch_device, ready.device.name, len(pending), lane.already_measured)
        lane.state = LaneState.IDLE

    def _on_result(self, lane: _Lane, outcome: CaseOutcome) -> None:
        case = lane.in_flight
        assert case is not None and case.case_key == outcome.case_key
        self._store(lane, case, outcome, time.monotonic() - lane.sent_at)
        lane.in_flight = None
        if outcome.worker_unusable:
            self.progress.note(f"{lane.torch_device}: device context unusable after a failure; starting a fresh worker")
            assert lane.worker is not None
            lane.worker.kill()
            lane.worker = None
            lane.state = LaneState.NEW
        else:
            lane.state = LaneState.IDLE

    def _worker_died(self, lane: _Lane) -> None:
        assert lane.worker is not None
        exitcode = lane.worker.exitcode_after_death()
        lane.worker.kill()
        lane.worker = None
        how = describe_exit(exitcode)
        if lane.state == LaneState.STARTING:
            self._start_failed(lane, f"worker died while starting ({how})")
            return
        case = lane.in_flight
        if case is not None:
            outcome = CaseOutcome(case.case_key, ResultStatus.CRASHED, f"worker process died: {how}")
            self._store(lane, case, outcome, time.monotonic() - lane.sent_at)
            self.progress.note(
                f"{lane.torch_device}: worker died ({how}) in {case.describe()}; starting a fresh worker")
        lane.in_flight = None
        lane.state = LaneState.NEW

    def _deadline_passed(self, lane: _Lane) -> None:
        assert lane.worker is not None
        lane.worker.kill()
        lane.worker = None
        if lane.state == LaneState.STARTING:
            self._start_failed(lane, f"worker did not start within {WORKER_START_TIMEOUT_S:.0f} s")
            return
        case = lane.in_flight
        assert case is not None
        elapsed = time.monotonic() - lane.sent_at
        outcome = CaseOutcome(case.case_key, ResultStatus.CRASHED, f"timed out after {elapsed:.1f} s; worker killed")
        self._store(lane, case, outcome, elapsed)
        self.progress.note(f"{lane.torch_device}: {case.describe()} timed out after {elapsed:.1f} s; worker killed")
        lane.in_flight = None
        lane.state = LaneState.NEW

    def _start_failed(self, lane: _Lane, why: str) -> None:
        lane.start_failures += 1
        if lane.start_failures >= MAX_START_FAILURES:
            lane.error = f"{lane.torch_device}: {why}; giving up on this device"
            self.progress.note(lane.error)
            lane.state = LaneState.DONE
        else:
            self.progress.note(f"{lane.torch_device}: {why}; retrying")
            lane.state = LaneState.NEW

    # -- records -------------------------------------------------------------------------------

    def _store(self, lane: _Lane, case: Case, outcome: CaseOutcome, elapsed_s: float) -> None:
        assert lane.ready is not None
        record = build_record(
            case,
            outcome,
            run_id=self.run_id,
            device_fingerprint=lane.ready.environment.device_fingerprint,
            device_uuid=lane.device_uuid,
            shard=self.shard,
            work_model=self.work_model,
        )
        self._received.append((lane, CaseResult(lane.torch_device, case, record, elapsed_s, stored=False)))
        self.progress.case_done(lane.torch_device, case, record, elapsed_s)

    def _write_received(self) -> None:
        """Write the held results in one transaction; each lane keeps its results, marked stored or not."""
        held, self._received = self._received, []
        if not held:
            return
        stored = self.store.add_measurements([result.record for _, result in held])
        for (lane, result), written in zip(held, stored, strict=True):
            if not written:
                self.progress.note(f"{lane.torch_device}: {result.case.describe()} was stored meanwhile by "
                                   "another process; kept that one")
            lane.results.append(replace(result, stored=written))


