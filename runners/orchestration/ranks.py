"""A group of rank processes on this node, for collective cases: started, used, torn down.

`RankGroup(backend, devices)` starts one process per rank from the workers' fork server
(runners.orchestration.processes.worker_context), rank r pinned to `devices[r]` ("cpu" for every
rank of a gloo group, "cuda:r" for NCCL). Their rendezvous is a torch.distributed FileStore in a
private temporary folder that this group alone creates (mode 0700, a fresh random name), so two
groups of one run, or of two runs at once on the machine, never meet; no fixed port is taken
(gloo and NCCL listen on ports the kernel picks). Each rank also opens a gloo group of its own for
the group's decisions (runners.engine.group_timing.Control).

Messages over one pipe per rank, as between the supervisor and a worker:

    rank -> parent    ("ready", RankReady) | ("setup_error", str)
    parent -> rank    ("case", CaseRequest) | ("stop", None)
    rank 0 -> parent  ("round", RoundDone), after each round of a matrix of pairs
    rank -> parent    ("result", RankReply)

`run(request, timeout_s)` sends the case to every rank and waits for every reply, a rank's death
(its process sentinel) or the time limit, whichever comes first. For a matrix of pairs the limit is
each round's: a round's pairs arriving start it again, so a matrix of many rounds is not cut at one
case's limit, and a round that hangs is caught within one. The pairs of the rounds that arrived are
in the result whatever its ending:

- every rank replied: rank 0's outcome (ok, skipped or incorrect, agreed by all);
- a rank replied that it raised: `failed`, naming it; the others get FAULT_GRACE_S to answer;
- a rank died: `crashed` with which rank and its exit code or signal;
- the limit passed: `crashed`, naming the ranks that had not answered and, read from a stack dump
  each of them writes on SIGUSR1 (faulthandler), where each one was.

After a fault the group is `broken`: the caller closes it (every rank killed, the folder removed)
and starts a fresh group for the next case. A rank exits on its own when its parent disappears.
"""
from __future__ import annotations

import faulthandler
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rooflab.record import CollectiveRecord, EnvironmentRecord
from rooflab.runners.engine.group_timing import Control
from rooflab.runners.machine.environment import capture
from rooflab.runners.orchestration.messages import CaseOutcome, CaseRequest
from rooflab.runners.orchestration.processes import WORKER_START_TIMEOUT_S, describe_exit, worker_context
from rooflab.runners.orchestration.rank_case import RankReply, run_rank_case
from rooflab.runners.orchestration.rank_pairs import PairOutcome, RoundDone
from rooflab.runners.orchestration.rank_places import RankPlace, group_places
from rooflab.runners.orchestration.worker import _pin, _watch_supervisor, describe_exception
from rooflab.suite.device import DeviceInfo
from rooflab.suite.ops.registry import all_ops
from rooflab.vocab import ResultStatus

if TYPE_CHECKING:  # torch loads in the rank processes only
    from torch.distributed import Store

    from rooflab.runners.engine.group_timing import Control

FAULT_GRACE_S = 3.0  # after one rank's fault, how long the others may take to answer
DUMP_WAIT_S = 0.5  # how long a rank may take to write its stack dump
POLL_S = 0.25
STOP_WAIT_S = 5.0
# the process group's own limit on one collective: far beyond any case, which the parent ends first
PG_TIMEOUT_S = 24 * 3600.0


class GroupStartError(RuntimeError):
    """The group did not come up (a rank failed to start, died, or the start timed out)."""


@dataclass(frozen=True)
class RankReady:
    rank: int
    pid: int
    device: DeviceInfo
    environment: EnvironmentRecord
    places: tuple[RankPlace, ...]  # where every rank of the group runs


@dataclass(frozen=True)
class GroupResult:
    """One case's result from a group: rank 0's outcome (or the fault), and whether the group broke."""

    outcome: CaseOutcome
    collective: CollectiveRecord | None
    broken: bool
    pairs: tuple[PairOutcome, ...] = ()  # a matrix of the link matrix: the pairs' outcomes (rank_pairs.py) ...
    rounds_done: int = 0  # ... of its rounds measured before the end (all of them unless it broke)


def init_group(backend: str, rank: int, size: int, *, store: Store | None = None,
               timeout_s: float = PG_TIMEOUT_S) -> Control:
    """Join the process group (`store`: a torch.distributed store, None for env://) and choose the
    gloo group of decisions: the process group itself on gloo (a barrier on a second gloo group
    leaves the measured group's connections idle between samples, which measured up to 2.6x slower
    4 KiB all_reduce samples here), a gloo group of its own beside NCCL (CPU tensors); returns
    runners.engine.group_timing.Control."""
    import torch.distributed as dist

    timeout = timedelta(seconds=timeout_s)
    if store is None:
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=size, timeout=timeout)
    else:
        dist.init_process_group(backend, store=store, rank=rank, world_size=size, timeout=timeout)
    decisions = None if backend == "gloo" else dist.new_group(backend="gloo", timeout=timeout)
    return Control(decisions, rank, size)


def rank_main(conn: Connection, rank: int, size: int, backend: str, torch_device: str, folder: str, parent_pid: int,
              environ: Mapping[str, str]) -> None:
    """Entry point of a rank process (multiprocessing target)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.clear()
    os.environ.update(environ)
    threading.Thread(target=_watch_supervisor, args=(parent_pid,), daemon=True, name="parent-watch").start()
    dump = open(Path(folder) / f"stack-{rank}.txt", "w")  # noqa: SIM115 - open for the life of the process
    dump.write(f"main thread 0x{threading.main_thread().ident:016x}\n")
    dump.flush()
    faulthandler.register(signal.SIGUSR1, file=dump, all_threads=True)
    try:
        import torch.distributed as dist

        _pin(torch_device)
        environment, device = capture(torch_device)
        all_ops()
        control = init_group(backend, rank, size, store=dist.FileStore(str(Path(folder) / "store"), size))
        places = group_places(control, device, environment)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which gives the group up
        conn.send(("setup_error", f"rank {rank}: {describe_exception(exc)}"))
        conn.close()
        return
    conn.send(("ready", RankReady(rank, os.getpid(), device, environment, places)))
    while True:
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):
            return
        if kind == "stop":
            dist.destroy_process_group()
            conn.close()
            return
        reply = run_rank_case(payload, device, control, places=places, backend=backend,
                              on_round=lambda done: conn.send(("round", done)))
        conn.send(("result", reply))
        if reply.broken:
            conn.close()
            os._exit(0)  # a collective may still hold threads of this process: leave at once


class _Rank:
    def __init__(self, ctx: Any, rank: int, size: int, backend: str, torch_device: str, folder: str) -> None:
        self.rank = rank
        self.conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=rank_main, name=f"rooflab-rank[{rank}/{size} {torch_device}]",
                                   args=(child, rank, size, backend, torch_device, folder, os.getpid(),
                                         dict(os.environ)), daemon=False)
        self.process.start()
        child.close()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(STOP_WAIT_S)
        self.conn.close()


class RankGroup:
    """`len(devices)` rank processes of `backend` ("gloo" or "nccl"), rank r on devices[r]."""

    def __init__(self, backend: str, devices: Sequence[str], *, start_timeout_s: float = WORKER_START_TIMEOUT_S):
        self.backend, self.devices, self.size = backend, tuple(devices), len(devices)
        self.folder = tempfile.mkdtemp(prefix="rooflab-ranks-")  # 0700, a fresh name: nobody else's
        self.broken = False
        self.ready: list[RankReady] = []
        self._rounds: list[RoundDone] = []  # the rounds of the matrix in flight that arrived
        ctx = worker_context()
        self.ranks = [_Rank(ctx, r, self.size, backend, d, self.folder) for r, d in enumerate(self.devices)]
        try:
            self._await_ready(start_timeout_s)
        except BaseException:
            self.close(kill=True)
            raise

    def __enter__(self) -> RankGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(kill=exc[0] is not None)

    def _await_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        ready: dict[int, RankReady] = {}
        while len(ready) < self.size:
            waiting = [r for r in self.ranks if r.rank not in ready]
            left = deadline - time.monotonic()
            if left <= 0:
                raise GroupStartError(f"ranks {_ranks(r.rank for r in waiting)} did not start within {timeout_s:.0f} s")
            for item in wait([x for r in waiting for x in (r.conn, r.process.sentinel)], min(POLL_S, left)):
                rank = next((r for r in waiting if item in (r.conn, r.process.sentinel)), None)
                if rank is None or rank.rank in ready:
                    continue
                message = _receive(rank)
                if message is None:
                    if item is rank.process.sentinel or not rank.process.is_alive():
                        raise GroupStartError(f"rank {rank.rank} died while starting "
                                              f"({describe_exit(_exitcode(rank))})")
                    continue
                kind, payload = message
                if kind == "setup_error":
                    raise GroupStartError(str(payload))
                ready[rank.rank] = payload
        self.ready = [ready[r] for r in range(self.size)]

    @property
    def pids(self) -> list[int]:
        return [r.process.pid for r in self.ranks if r.process.pid is not None]

    def run(self, request: CaseRequest, timeout_s: float) -> GroupResult:
        """One case on every rank; see the module docstring for what each ending gives."""
        key = request.case.case_key
        started = time.monotonic()
        deadline = started + timeout_s
        self._rounds = []
        for r in self.ranks:
            try:
                r.conn.send(("case", request))
            except (BrokenPipeError, OSError):
                return self._fault(CaseOutcome(key, ResultStatus.CRASHED, f"rank {r.rank} is gone: "
                                               f"{describe_exit(_exitcode(r))}"))
        replies: dict[int, RankReply] = {}
        while len(replies) < self.size:
            waiting = [r for r in self.ranks if r.rank not in replies]
            now = time.monotonic()
            if now >= deadline:
                return self._late(key, replies, waiting, now - started, timeout_s)
            for item in wait([x for r in waiting for x in (r.conn, r.process.sentinel)], min(POLL_S, deadline - now)):
                rank = next((r for r in waiting if item in (r.conn, r.process.sentinel)), None)
                if rank is None or rank.rank in replies:
                    continue
                message = _receive(rank)
                if message is not None and message[0] == "round":
                    self._rounds.append(message[1])
                    if not any(reply.broken for reply in replies.values()):
                        deadline = time.monotonic() + timeout_s  # the next round's limit
                elif message is not None:
                    replies[rank.rank] = message[1]
                    if replies[rank.rank].broken:
                        deadline = min(deadline, time.monotonic() + FAULT_GRACE_S)
                elif item is rank.process.sentinel or not rank.process.is_alive():
                    return self._fault(CaseOutcome(key, ResultStatus.CRASHED, _died(rank, replies),
                                                   time.monotonic() - started), lead_done=0 in replies)
        return self._combined(key, replies, time.monotonic() - started)

    def _combined(self, key: str, replies: dict[int, RankReply], elapsed_s: float) -> GroupResult:
        faults = _faults(replies)
        if faults:
            return self._fault(CaseOutcome(key, ResultStatus.FAILED, "; ".join(faults), elapsed_s))
        lead = replies[0]
        outcome = lead.outcome or CaseOutcome(key, ResultStatus.OK, None, elapsed_s)  # a matrix: its rounds' pairs
        return GroupResult(outcome, lead.collective, broken=False, pairs=self._pairs(), rounds_done=len(self._rounds))

    def _late(self, key: str, replies: dict[int, RankReply], waiting: list[_Rank], elapsed_s: float,
              limit_s: float) -> GroupResult:
        where = self._stacks(waiting)
        faults = "; ".join(_faults(replies))
        silent = f"no answer from rank(s) {_ranks(r.rank for r in waiting)}"
        if faults:
            text = f"{faults}; {silent} within {FAULT_GRACE_S:g} s after it{where}"
            return self._fault(CaseOutcome(key, ResultStatus.FAILED, text, elapsed_s), lead_done=True)
        limit = f"its limit {limit_s:g} s" + (" a round" if self._rounds else "")
        text = f"timed out after {elapsed_s:.1f} s ({limit}) with {silent}{where}; the group was killed"
        return self._fault(CaseOutcome(key, ResultStatus.CRASHED, text, elapsed_s), lead_done=True)

    def _fault(self, outcome: CaseOutcome, *, lead_done: bool = True) -> GroupResult:
        """The group broken with `outcome`, and the rounds rank 0 sent before it. Unless rank 0 is
        done (`lead_done`: it replied, or the fault is its own or a time limit), it may still be
        closing a round when another rank dies: its pipe is read until it replies or dies, within
        FAULT_GRACE_S, so that round is not lost."""
        self.broken = True
        if not self.ranks:
            return GroupResult(outcome, None, broken=True)
        lead, until = self.ranks[0], time.monotonic() + (0.0 if lead_done else FAULT_GRACE_S)
        while True:
            message = _receive(lead)
            if message is not None:
                if message[0] != "round":
                    break  # its reply: nothing more comes
                self._rounds.append(message[1])
                continue
            left = until - time.monotonic()
            if left <= 0 or not lead.process.is_alive():
                break
            wait([lead.conn, lead.process.sentinel], min(POLL_S, left))
        return GroupResult(outcome, None, broken=True, pairs=self._pairs(), rounds_done=len(self._rounds))

    def _pairs(self) -> tuple[PairOutcome, ...]:
        """The pairs of the case's rounds that arrived, in their order."""
        return tuple(pair for done in self._rounds for pair in done.pairs)

    def _stacks(self, ranks: list[_Rank]) -> str:
        """`; where: rank 0 in all_reduce (distributed_c10d.py:2890), ...` from the ranks' stack dumps."""
        asked = []
        for r in ranks:
            if r.process.is_alive() and r.process.pid is not None:
                try:
                    os.kill(r.process.pid, signal.SIGUSR1)
                    asked.append(r.rank)
                except ProcessLookupError:
                    pass
        time.sleep(DUMP_WAIT_S if asked else 0.0)
        places = [f"rank {rank} in {frame}" for rank in asked if (frame := innermost_frame(self._dump(rank)))]
        return f"; where: {', '.join(places)}" if places else ""

    def _dump(self, rank: int) -> str:
        try:
            return (Path(self.folder) / f"stack-{rank}.txt").read_text(errors="replace")
        except OSError:
            return ""

    def close(self, *, kill: bool = False) -> None:
        """Stop every rank (kill when `kill`, or when the group is broken) and remove the folder."""
        if not kill and not self.broken:
            for r in self.ranks:
                try:
                    r.conn.send(("stop", None))
                except (BrokenPipeError, OSError):
                    pass
            for r in self.ranks:
                r.process.join(STOP_WAIT_S)
        for r in self.ranks:
            r.kill()
        shutil.rmtree(self.folder, ignore_errors=True)


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')


def innermost_frame(dump: str) -> str | None:
    """`func (file.py:LINE)` of the main thread's innermost frame in a faulthandler dump whose first
    line names the main thread (`main thread 0x...`)."""
    lines = dump.splitlines()
    if not lines or not lines[0].startswith("main thread "):
        return None
    main = int(lines[0].split()[-1], 16)
    for i, line in enumerate(lines):
        head = re.match(r"(?:Current thread|Thread) (0x[0-9a-f]+)", line.strip())
        if head and int(head.group(1), 16) == main:
            for frame in lines[i + 1:]:
                m = _FRAME.search(frame)
                if m:
                    return f"{m['func']} ({Path(m['file']).name}:{m['line']})"
                if not frame.strip():
                    break
    return None


def _receive(rank: _Rank) -> tuple[str, Any] | None:
    """The rank's next message, or None when it has none (or its end of the pipe is closed)."""
    try:
        if not rank.conn.poll():
            return None
        message: tuple[str, Any] = rank.conn.recv()
    except (EOFError, OSError):
        return None
    return message


def _exitcode(rank: _Rank) -> int | None:
    rank.process.join(STOP_WAIT_S)
    return rank.process.exitcode


# what gloo and NCCL say on a rank whose peer failed: a consequence, named after the cause
_PEER_FAULT = re.compile(r"by peer|remote worker|remote process|NCCL communicator was aborted", re.IGNORECASE)


def peer_fault(error: str) -> bool:
    """The error is what a rank saw of a peer's fault (its connection dropped), not its own."""
    return bool(_PEER_FAULT.search(error))


def cause_first(errors: Sequence[str]) -> list[str]:
    """`errors` (one per rank, in rank order) with the ranks' own faults first, then those of ranks
    that only saw a peer fail."""
    return sorted(errors, key=peer_fault)


def _faults(replies: dict[int, RankReply]) -> list[str]:
    """The faults the ranks reported, the cause first."""
    return cause_first([str(replies[r].error) for r in sorted(replies) if replies[r].broken])


def _died(rank: _Rank, replies: dict[int, RankReply]) -> str:
    return "; ".join([f"rank {rank.rank} died: {describe_exit(_exitcode(rank))}", *_faults(replies)])


def _ranks(ranks: Any) -> str:
    return ", ".join(str(r) for r in sorted(ranks))
