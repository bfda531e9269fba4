"""One `rooflab crosscheck`: validate, prepare each case as `rooflab run` does, time it round by
round with rooflab's engine and every available peer, judge, store, report.

Everything runs in this one process, on one device, so that whatever the machine does (a clock
change, another job) hits every timer alike: within a round the timers follow one another on the
same prepared callable (rooflab as configured, then for each peer in `--peers` order the peer and
rooflab in that peer's mode), and the rounds repeat that. A peer that times in a process of its
own (nvbench) runs its rounds after the others; rooflab's rounds in its mode run with the rest.
A collective case is timed by the collective peers only (dist_loop, nccl_tests), beside rooflab's rank group,
in rounds too (runners/crosscheck/collective_check.py); a kernel case by the kernel peers only.
Invalid input (spec, filters, device, peers, rounds) is refused before the database is opened.
"""
from __future__ import annotations

import platform
import secrets
import shlex
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from rooflab.db.crosscheck import CrossCheckRecord, GroupSummary, add_crosscheck, summarize_groups
from rooflab.db.store import ResultStore, environment_device_uuid
from rooflab.record import RunRecord
from rooflab.runners.crosscheck.case_check import PeerCheck, check_case
from rooflab.runners.crosscheck.collective_check import RoofGroups, check_collective, collective_devices
from rooflab.runners.crosscheck.peer import CollectivePeer, Peer
from rooflab.runners.crosscheck.peers import AnyPeer, parse_peers, peers_for
from rooflab.runners.errors import UserInputError
from rooflab.runners.machine.environment import capture, git_state
from rooflab.runners.orchestration.records import case_record
from rooflab.runners.orchestration.run_options import resolve_devices
from rooflab.runners.orchestration.session import _rooflab_version
from rooflab.suite.case import Case
from rooflab.suite.ops.collective import FAMILY
from rooflab.suite.ops.registry import all_ops
from rooflab.suite.spec import apply_filters, expand, load_spec
from rooflab.vocab import ResultStatus, RunStatus, device_kind_of

MAX_ROUNDS = 50


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
    return resolve_devices(device, None)[0]


def select_cases(spec_path: str, filters: Sequence[str], device_kind: str) -> tuple[Any, list[Case]]:
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
    peer_objects: Sequence[AnyPeer] | None = None,
) -> CrossCheckReport:
    """Validate, then measure every case and store each row as soon as its case is done.

    `peer_objects` replaces the peers named by `peers` (tests use it to plant a peer)."""
    started = time.monotonic()
    rounds = validate_rounds(rounds)
    names = parse_peers(peers)
    torch_device = resolve_device(device)
    spec, cases = select_cases(spec_path, filters, device_kind_of(torch_device).value)
    chosen = list(peer_objects) if peer_objects is not None else peers_for(names)

    all_ops()  # plugins (ROOFLAB_PLUGINS) are loaded before the first case, as in a worker
    environment, device_info = capture(torch_device)
    status = _peer_status(chosen, device_info)
    available = [p for p in chosen if status[p.name.value]["available"]]

    commit, dirty = git_state()
    run = _run_record(spec, command_line, commit, dirty)
    run_id = run.run_id
    uuid = environment_device_uuid(environment)
    checks: list[PeerCheck] = []
    store = ResultStore(db_url)
    timer = _CaseTimer(device_info, available, rounds=rounds, seed=seed, torch_device=torch_device)
    final = RunStatus.FAILED
    try:
        store.start_run(run)
        store.add_environment(run_id, environment)
        for case in cases:
            results = timer.check(case) + [
                PeerCheck(case.case_key, case.op, case.family, case.cache, p.name.value,
                          status[p.name.value]["version"], ResultStatus.SKIPPED, status[p.name.value]["reason"])
                for p in _peers_of(case, chosen) if not status[p.name.value]["available"]
            ]
            for c in results:
                add_crosscheck(store, _crosscheck_record(run_id, case, environment.device_fingerprint, uuid, rounds, c))
            checks.extend(results)
            if on_check is not None:
                on_check(case, results)
        final = RunStatus.COMPLETE
    except KeyboardInterrupt:
        final = RunStatus.INTERRUPTED
        raise
    finally:
        timer.close()
        try:
            store.finish_run(run_id, final)
        finally:
            store.close()
    return CrossCheckReport(
        run_id=run_id, suite=spec.name, device=torch_device, device_name=device_info.name, rounds=rounds,
        peers=status, checks=tuple(checks), summaries=summarize_checks(checks),
        elapsed_s=time.monotonic() - started, versions=_versions(environment, commit, dirty),
    )


def _peers_of(case: Case, peers: Sequence[AnyPeer]) -> list[AnyPeer]:
    """The peers that time `case`: the collective peers for a collective, the kernel peers otherwise."""
    collective = case.family == FAMILY
    return [p for p in peers if isinstance(p, CollectivePeer) == collective]


class _CaseTimer:
    """Each case timed by the available peers of its kind (case_check.py for a kernel,
    collective_check.py for a collective, whose rank groups it keeps between cases)."""

    def __init__(self, device: Any, available: Sequence[AnyPeer], *, rounds: int, seed: int,
                 torch_device: str) -> None:
        self.device, self.available, self.rounds, self.seed = device, list(available), rounds, seed
        self.torch_device = torch_device
        self.groups = RoofGroups()

    def check(self, case: Case) -> list[PeerCheck]:
        peers = _peers_of(case, self.available)
        if not peers:
            return []
        if case.family != FAMILY:
            return check_case(case, self.device, [p for p in peers if isinstance(p, Peer)], rounds=self.rounds,
                              seed=self.seed)
        return check_collective(case, self.device, [p for p in peers if isinstance(p, CollectivePeer)],
                                rounds=self.rounds, groups=self.groups, seed=self.seed,
                                torch_devices=collective_devices(self.torch_device))

    def close(self) -> None:
        self.groups.close()
        for peer in self.available:
            if isinstance(peer, CollectivePeer):
                peer.close()


def _peer_status(chosen: Sequence[AnyPeer], device_info: Any) -> dict[str, dict[str, Any]]:
    """Per peer: its version, why it cannot time on this device (None when it can) and whether it can."""
    status: dict[str, dict[str, Any]] = {
        p.name.value: {"version": p.version(), "reason": p.unavailable_reason(device_info)} for p in chosen
    }
    for entry in status.values():
        entry["available"] = entry["reason"] is None
    return status


def _run_record(spec: Any, command_line: str | None, commit: str | None, dirty: bool) -> Any:
    """The cross-check run's record (rooflab.record.RunRecord), started now."""
    return RunRecord(
        run_id=derive_run_id(spec.name), suite=spec.name, spec_text=spec.text, spec_hash=spec.sha256,
        started_at=datetime.now(UTC), host=socket.gethostname(),
        command_line=command_line if command_line is not None else shlex.join(["rooflab", *sys.argv[1:]]),
        git_commit=commit, git_dirty=dirty, rooflab_version=_rooflab_version(),
    )


def _crosscheck_record(run_id: str, case: Case, device_fingerprint: str, device_uuid: str | None, rounds: int,
                       c: PeerCheck) -> Any:
    """One peer's check of one case as the row db.crosscheck stores (db.crosscheck.CrossCheckRecord)."""
    return CrossCheckRecord(
        run_id=run_id, case=case_record(case), device_fingerprint=device_fingerprint, device_uuid=device_uuid,
        cache=case.cache, timing_mode=case.timing_mode, peer=c.peer, peer_version=c.peer_version,
        status=c.status, error=c.error, peer_cache=c.peer_cache, peer_clock=c.peer_clock, rounds=rounds,
        rooflab_median_ms=c.rooflab_median_ms, rooflab_spread=c.rooflab_spread,
        peer_median_ms=c.peer_median_ms, peer_spread=c.peer_spread, ratio=c.ratio, disagrees=c.disagrees,
        likely_reason=c.likely_reason, rooflab_rounds_ms=c.rooflab_rounds_ms,
        peer_rounds_ms=c.peer_rounds_ms, measured_at=datetime.now(UTC), contended=c.contended,
        contention_reasons=c.contention_reasons, peer_mode=c.peer_mode, rooflab_mode=c.rooflab_mode,
        method_differences=c.method_differences, in_mode_median_ms=c.in_mode_median_ms,
        in_mode_spread=c.in_mode_spread, in_mode_ratio=c.in_mode_ratio,
        in_mode_rounds_ms=c.in_mode_rounds_ms,
    )


def _versions(environment: Any, commit: str | None, dirty: bool) -> dict[str, Any]:
    return {
        "python": platform.python_version(), "torch": environment.torch_version,
        "cuda": environment.cuda_version, "driver": environment.driver_version,
        "rooflab_commit": commit, "rooflab_dirty": dirty, "host": socket.gethostname(),
    }
