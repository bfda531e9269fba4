"""Collectives over many nodes: every process is one rank, its rendezvous read from the environment.

`rooflab collectives SPEC --run-id RUN` is started once per GPU by a launcher (Slurm's `srun`, or
torchrun): the process takes its rank, the world size, its GPU and the rendezvous from torchrun's
variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) or, without them, from Slurm's
(SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, with MASTER_ADDR and MASTER_PORT set by the batch
script), joins the group through torch.distributed's env:// rendezvous (a TCP store that rank 0
opens on MASTER_PORT), and runs the same per-rank case code as a group on one node
(runners/orchestration/rank_case.py). Rank 0 leads: it opens the database, decides for every case
whether it is still to be measured (`--resume` semantics: the run's cases already stored on its
device are not measured again) and stores every result.

Which cases: the spec's collective cases whose world size is this step's. `ranks: all` means every
rank of the step here, so such a case is stored under its size (`ranks=32` in the case key): a
group over all nodes is another measurement than the group over one node's GPUs that `rooflab run
--devices all` measures under `ranks=all`, and must not join its history. Cases asking for another
world size belong to other runs and are left out.

Faults: a rank that raises ends the case `failed` (rank 0 stores it when it can) and every process
exits with code 1, so that `srun --kill-on-bad-exit=1` ends the step; a rank that dies or hangs is
seen by the others as a collective that errors or times out after `--case-timeout-s`, and rank 0
stores the case `crashed` (the rank posted no error of its own). SIGTERM, which Slurm sends every
task when it ends the step, is obeyed between cases only, so rank 0 stores the case in flight first
(SIGKILL follows after Slurm's KillWait). Cases left without a result are measured by the next
start of the step (the run is resumed; the script `rooflab slurm` writes starts it up to 3 times).
"""
from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from rooflab.db.measurement_columns import device_key
from rooflab.db.store import ResultStore, environment_device_uuid
from rooflab.record import CollectiveRecord
from rooflab.runners.errors import UserInputError
from rooflab.runners.machine.environment import capture, git_state
from rooflab.runners.orchestration.collectives import pair_ends, work_model_at
from rooflab.runners.orchestration.messages import CaseOutcome, CaseRequest
from rooflab.runners.orchestration.rank_case import run_rank_case
from rooflab.runners.orchestration.rank_pairs import PairOutcome, RoundDone, matrix_fault
from rooflab.runners.orchestration.rank_places import RankPlace, group_places
from rooflab.runners.orchestration.ranks import cause_first, init_group, peer_fault
from rooflab.runners.orchestration.records import build_record
from rooflab.runners.orchestration.run_options import pairs_at_once_cases, validate_timing_overrides
from rooflab.runners.orchestration.session import _new_run_record, check_resume_spec
from rooflab.runners.orchestration.worker import _pin
from rooflab.suite.case import Case
from rooflab.suite.ops.collective import ALL, FAMILY, at_world_size
from rooflab.suite.ops.pairs import held_keys, is_pairs, pair_case
from rooflab.suite.ops.registry import all_ops
from rooflab.suite.spec import apply_filters, expand, load_spec
from rooflab.vocab import DeviceKind, ExitCode, ResultStatus, RunStatus, device_kind_of

DEVICES = ("auto", "cpu", "cuda")
ENV_TIMEOUT_S = 600.0  # a collective (and the rendezvous) that takes longer has failed
FAULT_GRACE_S = 3.0  # how long rank 0 waits for the other ranks' errors after a fault
LEAVE_WAIT_S = 30.0  # how long rank 0 (the store's host) waits for the other ranks to leave


@dataclass(frozen=True)
class EnvRendezvous:
    rank: int
    size: int
    local_rank: int
    address: str
    port: int


def rendezvous_from_env(environ: Mapping[str, str] | None = None) -> EnvRendezvous:
    """This process's place in the group, from torchrun's variables or else Slurm's; UserInputError
    naming what is missing."""
    env = os.environ if environ is None else environ
    names = (("RANK", "WORLD_SIZE", "LOCAL_RANK") if "RANK" in env
             else ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"))
    missing = [n for n in (*names, "MASTER_ADDR", "MASTER_PORT") if not env.get(n)]
    if missing:
        raise UserInputError(
            f"rooflab collectives runs as one rank of a group started by srun or torchrun; missing: "
            f"{', '.join(missing)} (torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; "
            "under Slurm the batch script written by `rooflab slurm` sets MASTER_ADDR and MASTER_PORT)")
    try:
        rank, size, local, port = (int(env[n]) for n in (*names, "MASTER_PORT"))
    except ValueError:
        raise UserInputError(f"{', '.join((*names, 'MASTER_PORT'))} must be whole numbers") from None
    if not (0 <= rank < size and 0 <= local and 0 < port < 65536):
        raise UserInputError(f"rank {rank} of {size} (local {local}, port {port}) is not a place in a group")
    return EnvRendezvous(rank, size, local, env["MASTER_ADDR"], port)


def cases_for_world(cases: Sequence[Case], size: int) -> list[Case]:
    """The collective cases a step of `size` ranks measures: `ranks: all` stored as `ranks=size`,
    and those asking for exactly `size`."""
    out = []
    for case in cases:
        if case.family != FAMILY:
            continue
        ranks = case.params.get("ranks", ALL)
        if ranks == ALL:
            out.append(at_world_size(case, size))
        elif int(ranks) == size:
            out.append(case)
    return list({c.case_key: c for c in out}.values())


def use_cuda(device: str) -> bool:
    """`--device`: auto (a GPU when torch sees one), cpu (gloo over the CPUs), cuda (a GPU, or
    UserInputError)."""
    import torch

    if device not in DEVICES:
        raise UserInputError(f"--device {device!r}: one of {', '.join(DEVICES)}")
    if device == "auto":
        return torch.cuda.is_available()
    wants_cuda = device_kind_of(device) is DeviceKind.CUDA
    if wants_cuda and not torch.cuda.is_available():
        raise UserInputError("--device cuda: torch sees no CUDA GPU on this node")
    return wants_cuda


def run_env_rank(spec_path: str | Path, *, db: str, run_id: str, filters: Sequence[str] = (), seed: int = 0,
                 timing_overrides: Mapping[str, object] | None = None, case_timeout_s: float = ENV_TIMEOUT_S,
                 environ: Mapping[str, str] | None = None, device: str = "auto",
                 pairs_at_once: str | None = None) -> int:
    """This process's part of the step; the exit code (0, 1 after a fault, 143 when stopped by SIGTERM).
    `pairs_at_once`: the link matrix's pairs measured at once (`rooflab run --pairs-at-once`)."""
    import torch

    where = rendezvous_from_env(environ)
    overrides = validate_timing_overrides(timing_overrides)
    cuda = use_cuda(device)
    spec = load_spec(spec_path)
    expanded = pairs_at_once_cases(expand(spec, "cuda" if cuda else "cpu"), pairs_at_once)
    cases = cases_for_world(apply_filters(expanded, list(filters)), where.size)
    torch_device = f"cuda:{where.local_rank}" if cuda else "cpu"
    _pin(torch_device)
    environment, info = capture(torch_device)
    all_ops()
    store = torch.distributed.TCPStore(where.address, where.port, where.size, where.rank == 0,
                                       timedelta(seconds=case_timeout_s))
    control = init_group("nccl" if cuda else "gloo", where.rank, where.size, store=store, timeout_s=case_timeout_s)
    places = group_places(control, info, environment)
    lead = _Lead(db, run_id, spec, environment) if where.rank == 0 else None
    stop = _Stop.install()
    try:
        code = _cases(cases, info, control, places, lead, seed, overrides, _Faults(store, where.size), stop)
    finally:
        if lead is not None:
            lead.close()
    if code in (ExitCode.OK, ExitCode.STOPPED):
        _leave(store, where)
    return code


def _leave(store: Any, where: EnvRendezvous) -> None:
    """Leave the group in order. Rank 0 hosts the rendezvous store: a rank whose store went away
    before its process ended aborts at exit ("terminate called without an active exception", seen
    in CI as exit -6), so every rank destroys its process group and says so through the store, and
    rank 0 waits for all of them before it ends. The caller then leaves with os._exit (no C++
    destructor of the group's threads runs)."""
    import torch.distributed as dist

    dist.destroy_process_group()
    if where.rank != 0:
        store.set(f"rooflab/left/{where.rank}", "1")
        return
    try:
        store.wait([f"rooflab/left/{r}" for r in range(1, where.size)], timedelta(seconds=LEAVE_WAIT_S))
    except Exception:  # noqa: BLE001 - a rank that never says it left cannot hold rank 0 forever
        pass


class _Faults:
    """Faults told through the rendezvous store, which outlives a broken process group: a rank that
    raised posts its error; rank 0 collects the others' before it stores the case."""

    def __init__(self, store: Any, size: int) -> None:
        self.store, self.size = store, size

    def post(self, case: Case, rank: int, error: str) -> None:
        try:
            self.store.set(f"rooflab/fault/{case.case_key}/{rank}", error)
        except Exception:  # noqa: BLE001 - rank 0 (the store's host) may be gone already
            pass

    def collect(self, case: Case, own: str) -> tuple[str, str]:
        """(the case's status, `own` with every other rank's posted error, the ranks' own faults
        first). A rank that posts nothing within the grace died or hangs: when no rank raised an error
        of its own (every error is a peer's connection dropping or a wait timing out), the case is
        `crashed`, as a one-node group's is when a rank dies; else `failed`."""
        keys = {r: f"rooflab/fault/{case.case_key}/{r}" for r in range(1, self.size)}
        errors, deadline = [own], time.monotonic() + FAULT_GRACE_S
        while keys and time.monotonic() < deadline:
            for rank, key in list(keys.items()):
                if self.store.check([key]):
                    errors.append(self.store.get(key).decode(errors="replace"))
                    del keys[rank]
            time.sleep(0.05)
        if keys and all(peer_fault(e) or _NO_ANSWER.search(e) for e in errors):
            silent = ", ".join(str(r) for r in sorted(keys))
            errors.append(f"rank {silent} posted no error within {FAULT_GRACE_S:.0f} s: died or hung")
            return ResultStatus.CRASHED, "; ".join(cause_first(errors))
        return ResultStatus.FAILED, "; ".join(cause_first(errors))


class _Stop:
    """SIGTERM (Slurm ending the step: a rank's fault under --kill-on-bad-exit, scancel, the time
    limit) is noted, not obeyed at once: rank 0 may be storing the case a dead rank broke, and a
    Python exit there would lose it. The ranks stop before the next case; Slurm's KillWait (SIGKILL)
    bounds a case that never ends."""

    def __init__(self) -> None:
        self.requested = False

    @classmethod
    def install(cls) -> _Stop:
        stop = cls()
        signal.signal(signal.SIGTERM, stop._on_sigterm)
        return stop

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.requested = True


def _cases(cases: list[Case], device: Any, control: Any, places: tuple[RankPlace, ...], lead: _Lead | None,
           seed: int, overrides: Mapping[str, Any], faults: _Faults, stop: _Stop) -> int:
    done = lead.done() if lead is not None else set()
    for case in cases:
        # rank 0 decides for the group: 0 skip (stored already), 1 measure, 2 stop (SIGTERM)
        decision = control.decide(_STOP if stop.requested else int(case.case_key not in done))
        if decision == _STOP:
            print(f"rooflab collectives: stopped by SIGTERM before {case.case_key}", file=sys.stderr)
            return ExitCode.STOPPED
        if not decision:
            continue
        rounds: list[RoundDone] = []

        def kept(done: RoundDone, case: Case = case, rounds: list[RoundDone] = rounds) -> None:
            """Rank 0: a matrix's round, stored as it ends (a later round's fault loses that round only)."""
            rounds.append(done)
            if lead is not None:
                lead.keep_pairs(case, done.pairs, control.size)

        reply = run_rank_case(CaseRequest(case, seed, overrides), device, control, places=places,
                              backend=case.backend, on_round=kept)
        if lead is not None and reply.outcome is not None:
            lead.keep(case, reply.outcome, reply.collective, control.size)
        if reply.broken:
            if lead is None:
                faults.post(case, control.rank, str(reply.error))
            else:
                status, error = faults.collect(case, str(reply.error))
                if is_pairs(case) and rounds:  # before any round: not in one
                    error = matrix_fault(case, control.size, len(rounds), error)
                lead.keep_fault(case, status, error, control.size)
            print(f"rooflab collectives: {case.case_key}: {reply.error}", file=sys.stderr)
            return ExitCode.FAILED
    if lead is not None:
        lead.finish()
    return ExitCode.OK


_STOP = 2
_NO_ANSWER = re.compile(r"timed out|timeout", re.IGNORECASE)  # a wait for a rank that never answered


class _Lead:
    """Rank 0's side: the run, its device and every result in the database. The step joins the
    run the shards of the night write (it never changes that run's status); when it is the first to
    write, it creates the run and marks it complete at its end."""

    def __init__(self, db: str, run_id: str, spec: Any, environment: Any) -> None:
        self.results = ResultStore(db)
        self.run_id, self.environment = run_id, environment
        self.uuid = environment_device_uuid(environment)
        self.key = device_key(self.uuid, environment.device_fingerprint)
        existing = self.results.get_run(run_id)
        self.created = existing is None
        if existing is None:
            commit, dirty = git_state()
            self.results.start_run(_new_run_record(run_id, spec, commit, dirty, None))
        else:
            check_resume_spec(existing, spec)
        self.results.add_environment(run_id, environment)

    def done(self) -> set[str]:
        return held_keys(self.results.measured_case_keys(self.run_id, self.key))

    def keep(self, case: Case, outcome: Any, collective: Any, size: int, pair: PairOutcome | None = None) -> None:
        """One result: the case's, or (`pair`) one pair's of a matrix, under its pair's case."""
        if pair is not None:
            case = pair_case(case, pair_ends(pair))
        record = build_record(case, outcome, run_id=self.run_id, device_fingerprint=self.environment.device_fingerprint,
                              device_uuid=self.uuid, shard=None, work_model=work_model_at(size))
        self.results.add_measurement(replace(record, collective=collective or CollectiveRecord(ranks=size)))

    def keep_pairs(self, case: Case, pairs: Sequence[PairOutcome], size: int) -> None:
        """A matrix of the link matrix: each pair stored as its own result (both ends in its params)."""
        for pair in pairs:
            self.keep(case, pair.outcome, pair.collective, size, pair)

    def keep_fault(self, case: Case, status: str, error: str, size: int) -> None:
        self.keep(case, CaseOutcome(case.case_key, status, error), None, size)

    def finish(self) -> None:
        if self.created:
            self.results.finish_run(self.run_id, RunStatus.COMPLETE)

    def close(self) -> None:
        self.results.close()
