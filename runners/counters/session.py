"""One `rooflab counters`: refuse what cannot be counted, then profile each case under ncu, compare
it with its model, and store the reading.

Refused before anything is written, with one message each (CountersRefusal, exit code 2): a CPU
device, a MIG slice, no ncu, and ncu without permission to read the counters (ERR_NVGPUCTRPERM,
known only once ncu has tried to profile a kernel: nothing is stored, and no --keep-reports folder
made, until a pass has been profiled, that is until a reading is ok; a case skipped, incorrect or
failed before that never reached ncu's counters, so it proves nothing and is held back with the rest).
Bad input (spec, filters, database) is refused as everywhere else. A case whose pass fails is
stored as failed with what ncu or the case said, and the others go on.
"""
from __future__ import annotations

import json
import re
import secrets
import shlex
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rooflab.db.counters import CounterRecord, add_counters, check_reading, checked_run
from rooflab.db.handle import schema_state
from rooflab.db.measurement_columns import device_key
from rooflab.db.schema import check_sqlite_writable, read_state, refuse
from rooflab.db.store import ResultStore, environment_device_uuid
from rooflab.db.urls import normalize_url, sqlite_path
from rooflab.record import RunRecord
from rooflab.runners.counters import metrics as metric_names
from rooflab.runners.counters import writeback
from rooflab.runners.counters.child import ChildRequest, write_request
from rooflab.runners.counters.ncu import (
    RANGE,
    CountersRefusal,
    PassOutput,
    command,
    error_lines,
    find_ncu,
    ncu_version,
    permission_denied,
    run_pass,
    unknown_metrics,
)
from rooflab.runners.counters.ncu_csv import NcuFormatError, has_header, parse_raw
from rooflab.runners.crosscheck.session import resolve_device, select_cases
from rooflab.runners.errors import UserInputError
from rooflab.runners.machine.environment import capture, git_state
from rooflab.runners.orchestration.messages import CaseRequest
from rooflab.runners.orchestration.records import case_record
from rooflab.runners.orchestration.session import _rooflab_version
from rooflab.suite.case import Case
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops.base import Op, byte_split, case_skip_reason
from rooflab.suite.ops.registry import all_ops
from rooflab.vocab import ResultStatus, RunStatus

PASS_TIMEOUT_S = 900.0  # one case: start, compile, first call and check, then ncu's replays of one call
PERMISSION_MESSAGE = (
    "ncu may not read the GPU's performance counters here (ERR_NVGPUCTRPERM): run as root, or let every user "
    "read them (the nvidia kernel module's option NVreg_RestrictProfilingToAdminUsers=0, then reload it)"
)

Describe = Callable[[str | None], tuple[Any, DeviceInfo]]  # device text -> (EnvironmentRecord, DeviceInfo)


def describe_device(device: str | None) -> tuple[Any, DeviceInfo]:
    """The environment and DeviceInfo of the device `device` names (auto, cpu, cuda:N), as a run captures them."""
    return capture(resolve_device(device))


def refuse_device(info: DeviceInfo, environment: Any, asked: str | None) -> None:
    """CountersRefusal for a device whose counters cannot be read: a CPU, a MIG slice."""
    if not info.is_cuda:
        what = "--device auto found no CUDA GPU here" if asked in (None, "", "auto") else f"--device {asked} is a CPU"
        raise CountersRefusal(
            f"{what}: counters are read on a CUDA GPU with Nsight Compute, and a CPU ({info.name}) has none that "
            "rooflab can read; give --device cuda:N on a GPU machine"
        )
    extra = getattr(environment, "info", None) or {}
    uuid = str(extra.get("uuid") or "")
    if extra.get("mig_enabled") or uuid.upper().startswith("MIG-"):
        raise CountersRefusal(
            f"{info.torch_device} ({info.name}) is a MIG slice: rooflab reads counters on a whole GPU only (the "
            "DRAM and L2 counters of a partitioned GPU need not be this case's alone, and ncu profiles a slice with "
            "restrictions); run on a GPU with MIG mode off"
        )


def check_database(url: str) -> None:
    """Refuse a database that cannot be written as it is (older, newer, foreign, an unwritable file)
    before anything is profiled; nothing is created here."""
    parsed = normalize_url(url)
    refuse(read_state(parsed), parsed)
    path = sqlite_path(parsed)
    if path is not None:
        check_sqlite_writable(path, parsed)


@dataclass(frozen=True)
class CountersReport:
    """What one invocation counted; `to_dict()` is the `--json` output."""

    run_id: str
    suite: str
    device: str
    device_name: str
    ncu: str
    ncu_version: str
    metrics: tuple[str, ...]
    readings: tuple[CounterRecord, ...]
    elapsed_s: float
    versions: dict[str, Any] = field(default_factory=dict)
    l2_bytes: int | None = None  # the device's L2 (the comparison's write-back allowance)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "suite": self.suite, "device": self.device, "device_name": self.device_name,
            "ncu": self.ncu, "ncu_version": self.ncu_version, "metrics": list(self.metrics),
            "readings": [reading_dict(r, l2_bytes=self.l2_bytes) for r in self.readings],
            "elapsed_s": round(self.elapsed_s, 3), "versions": self.versions, "l2_bytes": self.l2_bytes,
        }


def reading_dict(r: CounterRecord, *, l2_bytes: int | None = None) -> dict[str, Any]:
    """One reading as plain data, with its comparison against the model (db.counters.check_model) on a
    device whose L2 holds `l2_bytes`."""
    out = {k: v for k, v in asdict(r).items() if k not in ("case", "measured_at")}
    out.update(case_key=r.case.case_key, op=r.case.op, family=r.case.family, backend=r.case.backend,
               dtype=r.case.dtype, measured_at=r.measured_at.isoformat(), metrics=list(r.metrics),
               missing_metrics=list(r.missing_metrics), metric_values=dict(r.metric_values))
    check = check_reading(r, l2_bytes=l2_bytes)
    out.update({k: v for k, v in asdict(check).items() if k != "reason"},
               reason=check.reason.value if check.reason else None, reason_text=check.reason_text,
               note_text=check.note_text)
    return out


# ---------------------------------------------------------------- one case


def _pass_failure(out: PassOutput, result_file: Path, timeout_s: float) -> tuple[str, str | None] | None:
    """(status, error) of a pass that gave no CSV to read: ended, no result, the case not ok, ncu failed."""
    failed = ResultStatus.FAILED
    if out.returncode is None:
        return failed, f"the profiled pass ran past {timeout_s:.0f} s and was ended"
    if not result_file.exists():
        return failed, f"the profiled process gave no result (ncu exit code {out.returncode}): {error_lines(out.text)}"
    child = json.loads(result_file.read_text(encoding="utf-8"))
    if child["status"] != ResultStatus.OK:
        return child["status"], child.get("error")
    if out.returncode != 0:
        return failed, f"ncu exited with {out.returncode}: {error_lines(out.text)}"
    return None


def _interpret(base: CounterRecord, out: PassOutput, result_file: Path, asked: Sequence[str],
               dropped: Sequence[str], timeout_s: float) -> CounterRecord:
    """The reading of one pass: the child's verdict on the case, then ncu's CSV."""
    failed = ResultStatus.FAILED
    failure = _pass_failure(out, result_file, timeout_s)
    if failure is not None:
        return replace(base, status=failure[0], error=failure[1])
    try:
        # the report is in --log-file; should an ncu print it with its other output, read it there
        reading = parse_raw(out.report if has_header(out.report) else out.printed, asked)
    except NcuFormatError as exc:
        return replace(base, status=failed, error=f"ncu's CSV: {exc}")
    if reading.kernels == 0:
        return replace(base, status=failed, error=f"no kernel ran inside the NVTX range {RANGE} "
                                                  f"(ncu: {error_lines(out.text)})")
    return replace(base, status=ResultStatus.OK, kernels=reading.kernels,
                   missing_metrics=tuple(dict.fromkeys([*dropped, *reading.missing])),
                   metric_values=dict(reading.values), **metric_names.quantities(reading.values))


def model_split(op: Op, case: Case) -> tuple[int | None, int | None]:
    """The op's bytes read and written of one call of `case`: a reading's model_bytes_read and
    model_bytes_written (None both: the op does not split its bytes)."""
    split = byte_split(op, case.params, case.dtype)
    return split if split is not None else (None, None)


def keep_name(case_key: str) -> str:
    """A file name for a case's kept report: its key with every character outside [A-Za-z0-9.=-] as _."""
    return re.sub(r"[^A-Za-z0-9.=-]+", "_", case_key)[:200]


def profile_case(case: Case, base: CounterRecord, *, device: DeviceInfo, exe: str, seed: int,
                 timeout_s: float = PASS_TIMEOUT_S) -> tuple[CounterRecord, dict[str, str]]:
    """Profile one call of `case` under ncu (see runners.counters.child); a metric ncu does not know
    is dropped (and reported missing) and the pass made once more. CountersRefusal (PERMISSION_MESSAGE)
    when ncu may not read the counters. Returns the reading and the files a --keep-reports folder
    gets (file name -> text: ncu's report, CSV, and what the pass printed)."""
    asked, dropped = list(base.metrics), []
    with tempfile.TemporaryDirectory(prefix="rooflab-counters-") as tmp:
        folder = Path(tmp)
        result_file, log_file = folder / "result.json", folder / "ncu.csv"
        request = write_request(ChildRequest(CaseRequest(case=case, seed=seed), device.torch_device,
                                             str(result_file)), folder / "request.pkl")
        for attempt in (1, 2):
            for stale in (result_file, log_file):
                stale.unlink(missing_ok=True)
            argv = command(exe, metrics=asked, cache=case.cache, log_file=log_file, request=request)
            out = run_pass(argv, log_file=log_file, printed_file=folder / "printed.txt", timeout_s=timeout_s)
            if permission_denied(out.text):
                raise CountersRefusal(PERMISSION_MESSAGE)
            unknown = unknown_metrics(out.text, asked)
            if not unknown or attempt == 2 or len(unknown) == len(asked):
                break
            dropped += unknown
            asked = [m for m in asked if m not in unknown]
        kept = {f"{keep_name(case.case_key)}.csv": out.report, f"{keep_name(case.case_key)}.log": out.printed}
        record = _interpret(base, out, result_file, asked, dropped, timeout_s)
        if record.status != ResultStatus.OK:
            return record, kept
        record, more = _writeback_pass(case, record, device=device, exe=exe, seed=seed, timeout_s=timeout_s,
                                       folder=folder)
        return record, {**kept, **more}


def _writeback_pass(case: Case, record: CounterRecord, *, device: DeviceInfo, exe: str, seed: int, timeout_s: float,
                    folder: Path) -> tuple[CounterRecord, dict[str, str]]:
    """The reading of `record` (the profiling pass's, ok) with its DRAM bytes from the write-back pass
    (runners.counters.writeback): the call's reads, and its writes with their write-back caught inside
    the range. A pass that cannot be read so fails the reading, with why."""
    failed = ResultStatus.FAILED
    try:
        size = writeback.sweep_bytes(device.l2_bytes)
    except writeback.WriteBackError as exc:
        return replace(record, status=failed, error=f"write-back pass: {exc}"), {}
    result_file, log_file = folder / "writeback-result.json", folder / "writeback.csv"
    request = write_request(ChildRequest(CaseRequest(case=case, seed=seed), device.torch_device, str(result_file),
                                         sweep_bytes=size), folder / "writeback.pkl")
    argv = command(exe, metrics=writeback.METRICS, cache=case.cache, log_file=log_file, request=request,
                   writeback=True)
    out = run_pass(argv, log_file=log_file, printed_file=folder / "writeback-printed.txt", timeout_s=timeout_s)
    if permission_denied(out.text):
        raise CountersRefusal(PERMISSION_MESSAGE)
    kept = {f"{keep_name(case.case_key)}.writeback.csv": out.report,
            f"{keep_name(case.case_key)}.writeback.log": out.printed}
    failure = _pass_failure(out, result_file, timeout_s)
    if failure is not None:
        return replace(record, status=failure[0], error=f"write-back pass: {failure[1]}"), kept
    try:
        reading = parse_raw(out.report if has_header(out.report) else out.printed, writeback.METRICS)
        caught = writeback.split_pass(reading.per_kernel, int(record.kernels or 0), writeback.replay_passes(out.text))
    except (NcuFormatError, writeback.WriteBackError) as exc:
        return replace(record, status=failed, error=f"write-back pass: {exc}"), kept
    return replace(record, **asdict(caught)), kept


# ---------------------------------------------------------------- the command


class _Writer:
    """Stores readings (and writes the kept reports) as they come, but only from the first reading
    that is ok: a pass that ncu profiled, so ncu may read the counters. A reading made before that
    (skipped, incorrect, failed: no kernel of it reached ncu's counters) is held back, and so a
    permission refusal at a later case leaves nothing written, not the run, not a folder.
    Everything held back is written at the end, or on an interrupt."""

    def __init__(self, db_url: str, run: Any, environment: Any, keep: Path | None) -> None:
        self.db_url, self.run, self.environment, self.keep = db_url, run, environment, keep
        self.pending: list[tuple[CounterRecord, dict[str, str]]] = []
        self.store: Any = None
        self.stored = 0

    @property
    def started(self) -> bool:
        return self.store is not None

    def add(self, record: CounterRecord, kept: dict[str, str]) -> None:
        self.pending.append((record, kept))
        if record.status == ResultStatus.OK or self.started:
            self.flush()

    def flush(self) -> None:
        if self.store is None:
            if self.keep is not None:
                try:
                    self.keep.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise UserInputError(f"--keep-reports: cannot create the directory {self.keep}: "
                                         f"{exc.strerror or exc}") from None
            self.store = ResultStore(self.db_url)
            self.store.start_run(self.run)
            self.store.add_environment(self.run.run_id, self.environment)
        for record, kept in self.pending:
            add_counters(self.store, record)
            self.stored += 1
            if self.keep is not None:
                for name, text in kept.items():
                    (self.keep / name).write_text(text, encoding="utf-8")
        self.pending.clear()

    def finish(self, status: RunStatus) -> None:
        """End the run with `status`; what is held back is written first on an interrupt (it was read
        without a refusal), and dropped on a failure (a refusal: nothing of it may be written)."""
        if status == RunStatus.INTERRUPTED and self.pending:
            self.flush()
        if self.store is None:
            return
        try:
            self.store.finish_run(self.run.run_id, status)
        finally:
            self.store.close()


def run_counters(
    spec_path: str, *, db_url: str, filters: Sequence[str] = (), device: str | None = "auto", ncu: str | None = None,
    seed: int = 0, on_reading: Callable[[CounterRecord], None] | None = None, command_line: str | None = None,
    describe: Describe | None = None, timeout_s: float = PASS_TIMEOUT_S, keep: Path | None = None,
) -> CountersReport:
    """Refuse, then profile every case and store each reading as soon as it may be (module doc, _Writer).
    `describe` gives the device's environment and DeviceInfo (default `describe_device`; tests plant one);
    `keep`: a folder for each pass's ncu report and output (profile_case), made (with its parents)
    when the first reading is stored, so that a refused command leaves none."""
    started = time.monotonic()
    environment, info = (describe or describe_device)(device)
    refuse_device(info, environment, device)
    spec, cases = select_cases(spec_path, filters, info.kind)
    exe = find_ncu(ncu)
    version = ncu_version(exe)
    check_database(db_url)
    ops = all_ops()
    now = datetime.now(UTC)
    run_id = f"counters-{spec.name}-{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(2)}"
    commit, dirty = git_state()
    run = RunRecord(run_id=run_id, suite=spec.name, spec_text=spec.text, spec_hash=spec.sha256, started_at=now,
                    host=socket.gethostname(), git_commit=commit, git_dirty=dirty, rooflab_version=_rooflab_version(),
                    command_line=command_line if command_line is not None else shlex.join(["rooflab", *sys.argv[1:]]))
    uuid = environment_device_uuid(environment)
    key = device_key(uuid, environment.device_fingerprint)
    has_results = schema_state(db_url).kind != "empty"
    writer, readings, final = _Writer(db_url, run, environment, keep), [], RunStatus.FAILED
    try:
        for case in cases:
            op = ops[case.op]
            model_read, model_written = model_split(op, case)
            base = CounterRecord(
                run_id=run_id, case=case_record(case), device_fingerprint=environment.device_fingerprint,
                device_uuid=uuid,
                cache=case.cache, timing_mode=case.timing_mode, status=ResultStatus.FAILED,
                measured_at=datetime.now(UTC), model_flops=int(op.flops(case.params, case.dtype)),
                model_bytes=int(op.bytes(case.params, case.dtype)), ncu_version=version,
                model_bytes_read=model_read, model_bytes_written=model_written,
                metrics=metric_names.METRICS,
                checked_run_id=checked_run(db_url, case.case_key, case.cache, case.timing_mode, key)
                if has_results else None,
            )
            reason = case_skip_reason(op, case, info)
            kept: dict[str, str] = {}
            if reason:
                record = replace(base, status=ResultStatus.SKIPPED, error=reason)
            else:
                try:
                    record, kept = profile_case(case, base, device=info, exe=exe, seed=seed, timeout_s=timeout_s)
                except CountersRefusal as exc:
                    raise CountersRefusal(f"{exc}; {_refused_after(writer, run_id)}") from None
            writer.add(record, kept)
            readings.append(record)
            if on_reading is not None:
                on_reading(record)
        writer.flush()
        final = RunStatus.COMPLETE
    except KeyboardInterrupt:
        final = RunStatus.INTERRUPTED
        raise
    finally:
        writer.finish(final)
    return CountersReport(
        run_id=run_id, suite=spec.name, device=info.torch_device, device_name=info.name, ncu=exe,
        ncu_version=version, metrics=metric_names.METRICS, readings=tuple(readings),
        elapsed_s=time.monotonic() - started, l2_bytes=environment.l2_bytes or None,
        versions={"torch": environment.torch_version, "cuda": environment.cuda_version,
                  "driver": environment.driver_version, "rooflab_commit": commit, "rooflab_dirty": dirty},
    )


def _refused_after(writer: _Writer, run_id: str) -> str:
    """What a refusal at this point leaves written: nothing before a pass was profiled (the readings
    held back are dropped). Should ncu refuse after it has profiled a pass, what was stored stays,
    and the message says where."""
    if not writer.started:
        return "nothing was written"
    return (f"the {writer.stored} reading(s) made before it are stored in run {run_id}, which is marked failed"
            + (f", and their reports kept in {writer.keep}" if writer.keep is not None else ""))
