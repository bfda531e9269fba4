"""One `rooflab crosscheck`: validate, prepare each case as `rooflab run` does, time it round by
round with rooflab's engine and every available peer, judge, store, report.

Everything runs in this one process, on one device, so that whatever the machine does (a clock
change, another job) hits every timer alike: within a round the timers follow one another on the
same prepared callable (rooflab, then each peer in `--peers` order), and the rounds repeat that.
Invalid input (spec, filters, device, peers, rounds) is refused before the database is opened.
"""
from __future__ import annotations

import contextlib
import functools
import secrets
import shlex
import socket
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from rooflab.db.crosscheck import GroupSummary, summarize_groups
from rooflab.runners.crosscheck.peer import OwnProcessPeer, Peer, PeerTiming
from rooflab.runners.crosscheck.peers import parse_peers, peers_for
from rooflab.runners.crosscheck.verdict import REASON_TEXT, Reason, agreement, summarize_timer
from rooflab.runners.errors import UserInputError
from rooflab.suite.case import Case
from rooflab.vocab import DeviceKind, ResultStatus, RunStatus, device_kind_of

MAX_ROUNDS = 50


@dataclass(frozen=True)
class PeerCheck:
    """One case against one peer: both figures, the peer's spread, the ratio and the verdict."""

    case_key: str
    op: str
    family: str
    cache: str
    peer: str
    peer_version: str | None
    status: str  # ok | skipped | failed | incorrect
    error: str | None = None
    peer_cache: str | None = None
    peer_clock: str | None = None
    rooflab_median_ms: float | None = None
    rooflab_spread: float | None = None
    peer_median_ms: float | None = None
    peer_spread: float | None = None
    ratio: float | None = None  # rooflab / peer
    disagrees: bool = False
    likely_reason: str | None = None
    rooflab_rounds_ms: tuple[float, ...] = ()
    peer_rounds_ms: tuple[float, ...] = ()
    contended: bool = False  # the machine was seen contended while rooflab or the peer timed the case
    contention_reasons: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["reason_text"] = REASON_TEXT[Reason(self.likely_reason)] if self.likely_reason else None
        return out


@dataclass(frozen=True)
class CrossCheckReport:
    """What one invocation measured; `to_dict()` is the `--json` output and the `--out` file."""

    run_id: str
    suite: str
    device: str  # torch device, e.g. cpu
    device_name: str
    rounds: int
    peers: dict[str, dict[str, Any]]  # name -> {"version", "available", "reason"}
    checks: tuple[PeerCheck, ...]
    summaries: tuple[GroupSummary, ...]
    elapsed_s: float
    versions: dict[str, Any] = field(default_factory=dict)  # python, torch, rooflab commit

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "suite": self.suite, "device": self.device, "device_name": self.device_name,
            "rounds": self.rounds, "peers": self.peers, "versions": self.versions,
            "checks": [c.to_dict() for c in self.checks],
            "summaries": [asdict(s) for s in self.summaries],
            "elapsed_s": round(self.elapsed_s, 3),
        }


# ---------------------------------------------------------------- validation


def validate_rounds(rounds: int) -> int:
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= MAX_ROUNDS:
        raise UserInputError(f"--rounds {rounds!r}: must be a whole number from 1 to {MAX_ROUNDS}")
    return rounds


def resolve_device(device: str | None) -> str:
    from rooflab.runners.orchestration.run_options import resolve_devices

    return resolve_devices(device, None)[0]


def select_cases(spec_path: str, filters: Sequence[str], device_kind: str) -> tuple[Any, list[Case]]:
    from rooflab.suite.spec import apply_filters, expand, load_spec

    spec = load_spec(spec_path)
    expanded = expand(spec, device_kind)
    if not expanded:
        raise UserInputError(f"{spec.path}: no benchmark of {spec.name} runs on a {device_kind} device")
    cases = apply_filters(expanded, list(filters))
    if not cases:
        raise UserInputError(f"no case of {spec.name} on {device_kind} matches the filters {' '.join(filters)}")
    return spec, cases


def derive_run_id(suite: str, now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    return f"crosscheck-{suite}-{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(2)}"


# ---------------------------------------------------------------- one case


@dataclass
class _PeerRounds:
    peer: Peer
    timings: list[PeerTiming] = field(default_factory=list)
    error: str | None = None
    contention: tuple[str, ...] = ()  # what competed for the machine while rooflab or this peer timed


@dataclass
class _RooflabRounds:
    medians_ms: list[float] = field(default_factory=list)
    means_ms: list[float] = field(default_factory=list)
    samples_ms: list[tuple[float, ...]] = field(default_factory=list)


@contextlib.contextmanager
def _on_device(torch_device: str) -> Iterator[None]:
    if device_kind_of(torch_device) is not DeviceKind.CUDA:
        yield
        return
    import torch

    with torch.cuda.device(torch.device(torch_device)):
        yield


def check_case(
    case: Case,
    device: Any,
    peers: Sequence[Peer],
    *,
    rounds: int,
    seed: int = 0,
    timing_overrides: dict[str, Any] | None = None,
) -> list[PeerCheck]:
    """Prepare `case` as a worker does, time it `rounds` times with rooflab then each peer, judge."""
    from rooflab.runners.orchestration.worker import (
        CaseOutcome,
        CaseRequest,
        _release_quietly,
        describe_exception,
        ready_case,
        time_ready,
    )

    versions = {p.name: p.version() for p in peers}

    def rows(status: str, error: str | None) -> list[PeerCheck]:
        return [
            PeerCheck(case.case_key, case.op, case.family, case.cache, p.name.value, versions[p.name], status, error)
            for p in peers
        ]

    if case.family == "collective":
        return rows(ResultStatus.SKIPPED, "a collective is timed in a group of rank processes (rooflab run); "
                                          "no peer timer times one")
    request = CaseRequest(case=case, seed=seed, timing_overrides=timing_overrides or {})
    ready = None
    theirs = [_PeerRounds(p) for p in peers]
    in_process = [e for e in theirs if not isinstance(e.peer, OwnProcessPeer)]
    watch = _machine_watch(device)
    try:
        with _on_device(device.torch_device):
            ready = ready_case(request, device, time.perf_counter())
            if isinstance(ready, CaseOutcome):
                return rows(ready.status, ready.error)
            ours = _RooflabRounds()
            for _ in range(rounds):
                result = time_ready(ready, case, device)
                ours.medians_ms.append(result.stats.median_ms)
                ours.means_ms.append(result.stats.mean_ms)
                ours.samples_ms.append(tuple(result.samples_ms))
                for entry in in_process:
                    if entry.error is not None:
                        continue
                    try:
                        entry.timings.append(
                            entry.peer.time(ready.prepared.fn, case=case, device=device, sync=ready.prepared.sync)
                        )
                    except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, the others go on
                        entry.error = describe_exception(exc)
    except Exception as exc:  # noqa: BLE001 - a case that fails to prepare or time is data: status failed
        return rows(ResultStatus.FAILED, describe_exception(exc))
    finally:
        ready = None
        seen_here = watch.stop().reasons
        _release_quietly(device)
    for entry in theirs:  # after the release: the peer's own process prepares the case again
        if isinstance(entry.peer, OwnProcessPeer):
            # that process computes on the GPU: here it is the peer, not another job
            child_watch = _machine_watch(device, gpu=False)
            try:
                entry.timings = entry.peer.time_rounds(request, device=device, rounds=rounds)
            except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, the others go on
                entry.error = describe_exception(exc)
            finally:
                entry.contention = tuple(dict.fromkeys(seen_here + child_watch.stop().reasons))
        else:
            entry.contention = seen_here
    return [_judge(case, entry, ours, versions[entry.peer.name], device.is_cuda) for entry in theirs]


def _machine_watch(device: Any, *, gpu: bool = True) -> Any:
    """A started ContentionMonitor (the one the worker runs around a case); `gpu=False` leaves out
    the count of other processes on the GPU."""
    from rooflab.runners.machine import contention

    if gpu:
        return contention.ContentionMonitor.for_device(device).start()
    return contention.ContentionMonitor(loadavg_path=contention.LOADAVG, stat_path=contention.PROC_STAT).start()


def _judge(case: Case, entry: _PeerRounds, ours: _RooflabRounds, version: str | None, on_gpu: bool) -> PeerCheck:
    contended = bool(entry.contention)
    base = functools.partial(PeerCheck, case_key=case.case_key, op=case.op, family=case.family, cache=case.cache,
                             peer=entry.peer.name.value, peer_version=version, contended=contended,
                             contention_reasons=entry.contention)
    if entry.error is not None:
        return base(status=ResultStatus.FAILED, error=entry.error)
    rooflab = summarize_timer(ours.medians_ms, ours.samples_ms)
    peer = summarize_timer([t.median_ms for t in entry.timings], [t.samples_ms for t in entry.timings])
    first = entry.timings[0]
    verdict = agreement(
        rooflab, peer, rooflab_mean_ms=float(statistics.median(ours.means_ms)), case_cache=case.cache,
        peer_cache=first.cache, peer_clock=first.clock, on_gpu=on_gpu, contended=contended,
    )
    return base(
        status=ResultStatus.OK, peer_cache=first.cache.value, peer_clock=first.clock.value,
        rooflab_median_ms=rooflab.median_ms, rooflab_spread=rooflab.spread, peer_median_ms=peer.median_ms,
        peer_spread=peer.spread, ratio=verdict.ratio, disagrees=verdict.disagrees,
        likely_reason=verdict.reason.value if verdict.reason else None,
        rooflab_rounds_ms=rooflab.rounds_ms, peer_rounds_ms=peer.rounds_ms,
    )


# ---------------------------------------------------------------- summaries


def summarize_checks(checks: Sequence[PeerCheck]) -> tuple[GroupSummary, ...]:
    """Per peer: every family together (`all`), then each family (the rule: db.crosscheck.summarize_groups)."""
    return tuple(summarize_groups(checks, with_all=True))


# ---------------------------------------------------------------- the command


def run_crosscheck(
    spec_path: str,
    *,
    db_url: str,
    filters: Sequence[str] = (),
    device: str | None = "auto",
    peers: str | None = None,
    rounds: int = 3,
    seed: int = 0,
    on_check: Callable[[Case, list[PeerCheck]], None] | None = None,
    command_line: str | None = None,
    peer_objects: Sequence[Peer] | None = None,
) -> CrossCheckReport:
    """Validate, then measure every case and store each row as soon as its case is done.

    `peer_objects` replaces the peers named by `peers` (tests use it to plant a peer)."""
    from rooflab.db.crosscheck import CrossCheckRecord, add_crosscheck
    from rooflab.db.store import ResultStore, environment_device_uuid
    from rooflab.record import RunRecord
    from rooflab.runners.machine.environment import capture, git_state
    from rooflab.runners.orchestration.session import _rooflab_version
    from rooflab.suite.ops.registry import all_ops

    started = time.monotonic()
    rounds = validate_rounds(rounds)
    names = parse_peers(peers)
    torch_device = resolve_device(device)
    spec, cases = select_cases(spec_path, filters, device_kind_of(torch_device).value)
    chosen = list(peer_objects) if peer_objects is not None else peers_for(names)

    all_ops()  # plugins (ROOFLAB_PLUGINS) are loaded before the first case, as in a worker
    environment, device_info = capture(torch_device)
    status: dict[str, dict[str, Any]] = {
        p.name.value: {"version": p.version(), "reason": p.unavailable_reason(device_info)} for p in chosen
    }
    for entry in status.values():
        entry["available"] = entry["reason"] is None
    available = [p for p in chosen if status[p.name.value]["available"]]

    run_id = derive_run_id(spec.name)
    commit, dirty = git_state()
    run = RunRecord(
        run_id=run_id, suite=spec.name, spec_text=spec.text, spec_hash=spec.sha256,
        started_at=datetime.now(UTC), host=socket.gethostname(),
        command_line=command_line if command_line is not None else shlex.join(["rooflab", *sys.argv[1:]]),
        git_commit=commit, git_dirty=dirty, rooflab_version=_rooflab_version(),
    )
    uuid = environment_device_uuid(environment)
    checks: list[PeerCheck] = []
    store = ResultStore(db_url)
    final = RunStatus.FAILED
    try:
        store.start_run(run)
        store.add_environment(run_id, environment)
        for case in cases:
            results = check_case(case, device_info, available, rounds=rounds, seed=seed) if available else []
            results += [
                PeerCheck(case.case_key, case.op, case.family, case.cache, p.name.value,
                          status[p.name.value]["version"], ResultStatus.SKIPPED, status[p.name.value]["reason"])
                for p in chosen if not status[p.name.value]["available"]
            ]
            for c in results:
                add_crosscheck(store, CrossCheckRecord(
                    run_id=run_id, case=case, device_fingerprint=environment.device_fingerprint, device_uuid=uuid,
                    cache=case.cache, timing_mode=case.timing_mode, peer=c.peer, peer_version=c.peer_version,
                    status=c.status, error=c.error, peer_cache=c.peer_cache, peer_clock=c.peer_clock, rounds=rounds,
                    rooflab_median_ms=c.rooflab_median_ms, rooflab_spread=c.rooflab_spread,
                    peer_median_ms=c.peer_median_ms, peer_spread=c.peer_spread, ratio=c.ratio, disagrees=c.disagrees,
                    likely_reason=c.likely_reason, rooflab_rounds_ms=c.rooflab_rounds_ms,
                    peer_rounds_ms=c.peer_rounds_ms, measured_at=datetime.now(UTC), contended=c.contended,
                    contention_reasons=c.contention_reasons,
                ))
            checks.extend(results)
            if on_check is not None:
                on_check(case, results)
        final = RunStatus.COMPLETE
    except KeyboardInterrupt:
        final = RunStatus.INTERRUPTED
        raise
    finally:
        try:
            store.finish_run(run_id, final)
        finally:
            store.close()
    return CrossCheckReport(
        run_id=run_id, suite=spec.name, device=torch_device, device_name=device_info.name, rounds=rounds,
        peers=status, checks=tuple(checks), summaries=summarize_checks(checks),
        elapsed_s=time.monotonic() - started, versions=_versions(environment, commit, dirty),
    )


def _versions(environment: Any, commit: str | None, dirty: bool) -> dict[str, Any]:
    import platform

    return {
        "python": platform.python_version(), "torch": environment.torch_version,
        "cuda": environment.cuda_version, "driver": environment.driver_version,
        "rooflab_commit": commit, "rooflab_dirty": dirty, "host": socket.gethostname(),
    }
