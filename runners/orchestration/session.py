"""One `rooflab run`: everything validated first, then a run in the database, then the supervisor.

Order matters: the spec, filters, devices, shard and timing overrides are checked before the
database is opened, so invalid input writes nothing (no database file appears). A run always
skips the cases it already holds a result for on a device, which is what makes `--resume`, a
re-started shard and a second process with the same `--run-id` measure nothing twice.
"""
from __future__ import annotations

import math
import shlex
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rooflab.db.handle import Database, as_database
from rooflab.db.measurement_columns import device_key, gbps_of, tflops_of
from rooflab.db.store import ResultStore
from rooflab.record import RunRecord
from rooflab.runners.errors import UserInputError
from rooflab.runners.machine.devlock import device_locks
from rooflab.runners.machine.environment import git_state
from rooflab.runners.orchestration.collectives import LANE as COLLECTIVES_LANE
from rooflab.runners.orchestration.collectives import CollectivePhase, group_label, is_collective
from rooflab.runners.orchestration.held import HeldResults, nothing_left
from rooflab.runners.orchestration.processes import prestart_worker_server
from rooflab.runners.orchestration.progress import make_progress
from rooflab.runners.orchestration.run_options import (
    RunOptions,
    check_merged_settings,
    cpu_cores,
    derive_run_id,
    pairs_at_once_cases,
    resolve_devices,
    validate_timing_overrides,
)
from rooflab.runners.orchestration.run_summary import SlowCase, SummaryDict
from rooflab.runners.orchestration.shards import (
    CostBasis,
    estimate_cost_s,
    parse_shard,
    previous_medians,
    select_shard,
)
from rooflab.runners.orchestration.supervisor import LaneReport, RunProgress, Supervisor, SupervisorResult
from rooflab.suite.case import Case
from rooflab.suite.ops.pairs import held_keys
from rooflab.suite.spec import apply_filters, expand, load_spec, parse_spec
from rooflab.suite.spec_schema import Spec
from rooflab.vocab import ExitCode, ResultStatus, RunStatus, device_kind_of

if TYPE_CHECKING:  # SQLAlchemy's engine loads when the run opens its store
    from rooflab.db.store import ResultStore

SLOWEST_SHOWN = 5


@dataclass(frozen=True)
class RunSummary:
    """What one invocation did; `to_dict()` is the `--json` output."""

    run_id: str
    suite: str
    status: str  # complete | partial (filters left cases of the spec out) | interrupted | failed
    db_url: str  # password redacted
    shard: str | None
    devices: tuple[LaneReport, ...]
    selected_cases: int  # cases of the spec after filters and shard, per device
    counts: Mapping[str, int]  # results stored by this invocation, by status
    already_measured: int  # results the run held before (resume), not measured again
    unmeasured: int  # cases left without a result (interrupted, device given up)
    elapsed_s: float
    slowest: tuple[SlowCase, ...] = field(default_factory=tuple)

    @property
    def exit_code(self) -> int:
        if self.status == RunStatus.INTERRUPTED:
            return ExitCode.INTERRUPTED
        if self.status == RunStatus.FAILED:
            return ExitCode.FAILED
        return ExitCode.OK

    def to_dict(self) -> SummaryDict:
        return {
            "run_id": self.run_id,
            "suite": self.suite,
            "status": self.status,
            "exit_code": self.exit_code,
            "db_url": self.db_url,
            "shard": self.shard,
            "devices": [asdict(d) for d in self.devices],
            "selected_cases": self.selected_cases,
            "counts": dict(self.counts),
            "already_measured": self.already_measured,
            "unmeasured": self.unmeasured,
            "elapsed_s": round(self.elapsed_s, 3),
            "slowest": [SlowCase(**s) for s in self.slowest],
        }


def _rooflab_version() -> str:
    try:
        return version("rooflab")
    except Exception:  # noqa: BLE001 - not installed as a distribution (run from a checkout)
        return ""


# ---------------------------------------------------------------- the run


def run_suite(
    spec_path: str | Path | None,
    *,
    db: str | Database,
    options: RunOptions = RunOptions(),
    progress: RunProgress | None = None,
    handle_signals: bool = True,
) -> RunSummary:
    """Validate, create (or join, or resume) the run, measure, and mark it finished.

    `db` is a URL or the command's open db.handle.Database (left open); every read and write of the
    run goes through that one handle. `progress` replaces the terminal progress display."""
    o = options
    started = time.monotonic()
    overrides, shard = _checked_options(o, spec_path)
    run_id, resume = o.run_id, o.resume
    torch_devices = resolve_devices(o.device, o.devices)
    if cpu_cores(torch_devices) and o.cpu_threads not in (None, 1):
        raise UserInputError(f"--threads {o.cpu_threads}: a CPU core (cpu:N) runs its cases with one thread")
    device_kind = device_kind_of(torch_devices[0]).value

    # the database is parsed when first needed (a bad spec is reported before a bad URL) and
    # opened once: a handle given by the caller stays open, one made here is closed here
    database: Database | None = db if isinstance(db, Database) else None
    owned = database is None
    try:
        database, spec = _run_spec(db, database, spec_path, resume)
        expanded = pairs_at_once_cases(expand(spec, device_kind), o.pairs_at_once)
        if not expanded:
            raise UserInputError(f"{spec.path}: no benchmark of {spec.name} runs on a {device_kind} device")
        cases = apply_filters(expanded, list(o.filters))
        if not cases:
            raise UserInputError(f"no case of {spec.name} on {device_kind} matches the filters {' '.join(o.filters)}")
        check_merged_settings(cases, overrides)
        filtered = cases  # before the shard's part is taken
        effective_run_id = resume or run_id or derive_run_id(spec.name, sharded=shard is not None)
        database = database or as_database(db)[0]
        if shard is not None:
            cases = _select_shard(cases, shard, database=database, suite=spec.name, run_id=effective_run_id)

        reporter = progress or make_progress(quiet=o.quiet, json_output=o.json_output)
        with ExitStack() as locks:
            if o.lock:
                command = o.command_line if o.command_line is not None else shlex.join(["rooflab", *sys.argv[1:]])
                locks.enter_context(device_locks(torch_devices, run_id=effective_run_id, command=command,
                                                 wait_s=o.lock_wait_s, note=reporter.note))
            status, result = _measure(
                database, resume, spec, effective_run_id, o.command_line, shard, torch_devices, cases, expanded,
                filtered, reporter, o.seed, overrides, o.case_timeout_s, handle_signals, o.cpu_threads,
            )
        return _summary(result, effective_run_id, spec.name, database.shown, shard, len(cases),
                        time.monotonic() - started, status=status)
    finally:
        if owned and database is not None:
            database.close()


def _checked_options(o: RunOptions, spec_path: str | Path | None) -> tuple[Any, str | None]:
    """(the timing overrides, the shard as I/N) of a run's options, after checking each option:
    UserInputError names the first one that is wrong."""
    overrides = validate_timing_overrides(o.timing_overrides)
    if o.seed < 0:
        raise UserInputError(f"--seed {o.seed}: must be >= 0")
    cpu_threads = o.cpu_threads
    if cpu_threads is not None and (isinstance(cpu_threads, bool) or int(cpu_threads) != cpu_threads
                                    or cpu_threads < 1):
        raise UserInputError(f"--threads {cpu_threads}: must be a whole number >= 1 (threads of a CPU case)")
    if o.case_timeout_s is not None and not o.case_timeout_s > 0:
        raise UserInputError(f"--case-timeout-s {o.case_timeout_s}: must be > 0 (seconds)")
    if not (math.isfinite(o.lock_wait_s) and o.lock_wait_s >= 0):
        raise UserInputError(f"--lock-wait-s {o.lock_wait_s}: must be a number of seconds >= 0")
    run_id, resume, shard = o.run_id, o.resume, o.shard
    if run_id is not None and resume is not None and run_id != resume:
        raise UserInputError("give either --run-id or --resume, not both")
    if spec_path is None and resume is None:
        raise UserInputError("give a SPEC (a path or a shipped spec name such as quick), or --resume RUN_ID")
    if shard is not None:
        index, count = parse_shard(shard)
        shard = f"{index}/{count}"
    for name, value in (("--run-id", run_id), ("--resume", resume)):
        if value is not None and (not value.strip() or any(c.isspace() for c in value)):
            raise UserInputError(f"{name} {value!r}: a run id is a non-empty word without spaces")
    return overrides, shard


def _run_spec(db: str | Database, database: Database | None, spec_path: str | Path | None,
              resume: str | None) -> tuple[Database | None, Any]:
    """(the database, opened when resuming; the spec): the one given, checked against the run it
    resumes, else the resumed run's own spec text."""
    stored_run = None
    if resume is not None:
        database = database or as_database(db)[0]
        if not database.exists():
            raise UserInputError(f"--resume {resume}: there is no database at {database.shown}")
        stored_run = _store(database).get_run(resume)
        if stored_run is None:
            raise UserInputError(f"--resume {resume}: no such run in {database.shown}")
    if spec_path is not None:
        spec = load_spec(spec_path)
        if stored_run is not None:
            check_resume_spec(stored_run, spec)
    else:
        assert stored_run is not None
        spec = parse_spec(stored_run.spec_text, f"<spec of run {resume}>")
    return database, spec


def _store(database: Database) -> ResultStore:
    """The run's store on the command's database handle (closing the store leaves the handle open)."""
    return ResultStore(database)


def _measure(database: Database, resume: str | None, spec: Any, effective_run_id: str, command_line: str | None,
             shard: str | None, torch_devices: list[str], cases: list[Case], expanded: list[Case],
             filtered: list[Case], reporter: Any, seed: int, overrides: Mapping[str, Any],
             case_timeout_s: float | None, handle_signals: bool,
             cpu_threads: int | None) -> tuple[str, SupervisorResult]:
    """Create (or join) the run in the database, measure, and mark it finished: (status, result)."""
    store = _store(database)
    existing = store.get_run(effective_run_id)
    if resume is not None and existing is None:
        raise UserInputError(f"--resume {resume}: no such run in {database.shown}")
    lane_cases = [case for case in cases if not is_collective(case)]
    group_cases = [case for case in cases if is_collective(case)]
    # only now, with the input checked and the devices held, so that a refused run imports no torch,
    # and only when something may be left to measure (runners/orchestration/held.py); the fork
    # server's imports overlap with creating the run (git's state, the run's row)
    if existing is None or not nothing_left(store, effective_run_id, torch_devices, lane_cases, group_cases):
        prestart_worker_server()

    commit, dirty = git_state()
    run = existing or _new_run_record(effective_run_id, spec, commit, dirty, command_line)
    store.start_run(run, shard=shard)
    supervisor = Supervisor(
        store=store,
        run_id=effective_run_id,
        torch_devices=torch_devices,
        cases=lane_cases,
        progress=reporter,
        seed=seed,
        timing_overrides=overrides,
        case_timeout_s=case_timeout_s,
        shard=shard,
        handle_signals=handle_signals,
        cpu_threads=cpu_threads,
    )
    reporter.start(len(lane_cases) * len(torch_devices) + len(group_cases), torch_devices)
    group_key = None
    try:
        result = supervisor.run()
        if group_cases:
            result, group_key = _collective_phase(result, CollectivePhase(
                store=store, run_id=effective_run_id, cases=group_cases,
                # the cores of a CPU fleet run their collectives as the whole CPU's rank group
                torch_devices=["cpu"] if cpu_cores(torch_devices) else torch_devices,
                progress=reporter, seed=seed, timing_overrides=overrides, case_timeout_s=case_timeout_s, shard=shard,
                handle_signals=handle_signals))
    except BaseException:
        try:
            store.finish_run(effective_run_id, RunStatus.FAILED, shard=shard)
        except Exception:  # noqa: BLE001 - the original error is the one to report
            pass
        raise
    finally:
        reporter.close()
    status = result.status
    if status == RunStatus.COMPLETE and not covers_spec(store, effective_run_id, expanded, filtered, result.lanes,
                                                       shard, group_key):
        status = RunStatus.PARTIAL
    store.finish_run(effective_run_id, status, shard=shard)
    return status, result


def _collective_phase(result: SupervisorResult, phase: CollectivePhase) -> tuple[SupervisorResult, str | None]:
    """The run's collective cases after its lanes (runners/orchestration/collectives.py), unless the
    lanes were interrupted; the supervisor's result with the phase's added, and rank 0's device key."""
    if result.status == RunStatus.INTERRUPTED:
        return replace(result, unmeasured=result.unmeasured + len(phase.cases)), None
    done = phase.run()
    status = result.status
    if done.interrupted:
        status = RunStatus.INTERRUPTED
    elif done.error:
        status = RunStatus.FAILED
    lanes = result.lanes + ((done.lane,) if done.lane is not None else ())
    return replace(result, status=status, results=result.results + done.results, lanes=lanes,
                   unmeasured=result.unmeasured + done.unmeasured), done.device_key


def check_resume_spec(stored_run: RunRecord, spec: Spec) -> None:
    """A run holds the cases of one spec: resuming it with another spec (another text) is refused."""
    if stored_run.spec_hash == spec.sha256:
        return
    same_name = stored_run.suite == spec.name
    given = f"{spec.path} (spec {spec.name!r}, sha256 {spec.sha256[:12]})"
    theirs = f"spec {stored_run.suite!r} (sha256 {stored_run.spec_hash[:12]})"
    what = "another version of that spec" if same_name else "another spec"
    raise UserInputError(
        f"--resume {stored_run.run_id}: the run was made from {theirs}, but {given} is {what}; "
        f"resume without SPEC to measure the run's own spec, or start a new run"
    )


def covers_spec(store: HeldResults, run_id: str, expanded: Sequence[Case], filtered: Sequence[Case],
                lanes: Sequence[LaneReport], shard: str | None, group_key: str | None = None) -> bool:
    """Whether every case of the spec (for this device kind) now has a result on every device of
    this invocation, and every collective case one on rank 0's device (`group_key`). A shard answers
    for its own part: it covers the spec when no filter left a case out (the run is complete once
    every shard is)."""
    if shard is not None:
        return len(filtered) == len(expanded)
    grouped = {case.case_key for case in expanded if is_collective(case)}
    if grouped and (group_key is None or not grouped <= held_keys(store.measured_case_keys(run_id, group_key))):
        return False
    wanted = {case.case_key for case in expanded if not is_collective(case)}
    for lane in lanes if wanted else ():
        if lane.torch_device == COLLECTIVES_LANE:
            continue
        if lane.device_fingerprint is None:
            return False
        held = store.measured_case_keys(run_id, device_key(lane.device_uuid, lane.device_fingerprint))
        if not wanted <= held:
            return False
    return True


def _new_run_record(run_id: str, spec: Any, commit: str | None, dirty: bool, command_line: str | None) -> Any:
    return RunRecord(
        run_id=run_id,
        suite=spec.name,
        spec_text=spec.text,
        spec_hash=spec.sha256,
        started_at=datetime.now(UTC),
        host=socket.gethostname(),
        command_line=command_line if command_line is not None else shlex.join(["rooflab", *sys.argv[1:]]),
        git_commit=commit,
        git_dirty=dirty,
        rooflab_version=_rooflab_version(),
    )


def _select_shard(cases: list[Case], shard: str, *, database: Database, suite: str, run_id: str) -> list[Case]:
    """This shard's part, balanced by the previous run's medians when the database has them."""
    index, count = parse_shard(shard)
    basis = CostBasis()
    if database.exists():
        # all-or-nothing: shards reading different databases must still compute the same split
        basis = previous_medians(database, suite=suite, current_run_id=run_id).covering(cases)
    cost: Callable[[Case], float] = basis.cost_s if basis.medians_ms else estimate_cost_s
    return select_shard(cases, index, count, cost)


def _summary(
    result: SupervisorResult,
    run_id: str,
    suite: str,
    db_url: str,
    shard: str | None,
    selected: int,
    elapsed_s: float,
    status: str | None = None,
) -> RunSummary:
    counts = {str(status): 0 for status in ResultStatus}
    for r in result.results:
        if r.stored:  # a result another process stored first is that process's to count
            counts[r.record.status] += 1
    ok = [r for r in result.results if r.record.status == ResultStatus.OK and r.record.median_ms is not None]
    ok.sort(key=lambda r: r.record.median_ms or 0.0, reverse=True)
    slowest = tuple(
        SlowCase(
            case_key=r.case.case_key,
            device=group_label(r.case, r.record) if is_collective(r.case) else r.lane,
            median_ms=r.record.median_ms,
            gbps=gbps_of(r.record) if r.record.work.bytes else None,
            tflops=tflops_of(r.record) if r.record.work.flops else None,
            elapsed_s=round(r.elapsed_s, 3),
        )
        for r in ok[:SLOWEST_SHOWN]
    )
    return RunSummary(
        run_id=run_id,
        suite=suite,
        status=status or result.status,
        db_url=db_url,
        shard=shard,
        devices=result.lanes,
        selected_cases=selected,
        counts=counts,
        already_measured=sum(lane.already_measured for lane in result.lanes),
        unmeasured=result.unmeasured,
        elapsed_s=elapsed_s,
        slowest=slowest,
    )
