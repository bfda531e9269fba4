"""`rooflab collectives`: one process per rank, the rendezvous from the environment (torchrun's or
Slurm's variables), run here as several local processes the way srun starts them on many nodes.

The ranks of a step are `python -m rooflab collectives ...` command lines run at once by forks of
one warm Python that imported torch (tests/runners/warm_python.py): each rank a process of its own
with its own environment, streams and exit code, without a fresh interpreter's import of torch
(about 4 s of CPU) per rank. Ranks started fresh by a real launcher: test_slurm_real.py's step."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import tests.runners.planted_collectives  # noqa: F401 - registers the planted ops (a pair's key names one)
from rooflab.db.collectives import collective_frame
from rooflab.db.query import results
from rooflab.runners.errors import UserInputError
from rooflab.runners.orchestration.env_ranks import cases_for_world, rendezvous_from_env
from rooflab.suite.ops.pairs import pair_of_key
from rooflab.suite.spec import expand, parse_spec
from rooflab.vocab import ExitCode
from tests.runners.warm_python import WarmPython, run

REPO = Path(__file__).resolve().parents[2]
SPEC = """\
name: comms
defaults:
  cache: [hot]
  backends: [gloo]
  timing: {warmup_ms: 0, warmup_calls: 2, min_samples: 3, max_samples: 3, min_time_ms: 0, max_time_ms: 2000}
benchmarks:
  - name: every_rank
    op: [all_reduce, broadcast]
    params: {n: [1024, 4096], ranks: all}
  - name: three
    op: all_gather
    params: {n: 1024, ranks: [2, 3]}
  - name: faulty
    op: planted_coll_raise
    params: {n: 1024, ranks: all, after: 2}
  - name: matrix        # three ranks: round 1 the pair 1-2, round 2 the pair 0-2, where rank 2 dies
    op: planted_pairs_fault
    params: {n: 2, ranks: all, bad_rank: 2, bad_round: 2, fault: die}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# what a rank imports before its first case (the CLI, torch.distributed, the spec, the timing of a
# group; rank 0 the database and its migrations), imported once by the warm Python
RANK_PRELOAD = ("torch", "torch.distributed", "rooflab.runners.cli", "rooflab.runners.orchestration.env_ranks",
                "rooflab.runners.orchestration.ranks", "rooflab.runners.orchestration.session",
                "rooflab.runners.machine.environment", "rooflab.runners.machine.observe", "rooflab.suite.spec",
                "rooflab.runners.engine.group_timing", "rooflab.suite.ops.registry", "rooflab.db.store",
                "rooflab.db.schema", "alembic.autogenerate")


@pytest.fixture
def warm() -> Iterator[str]:
    """The warm Python that starts the ranks; its address."""
    with WarmPython(RANK_PRELOAD) as server:
        server.wait_ready()
        yield server.address


def _launch(warm: str, tmp_path: Path, url: str, run_id: str, size: int, variables,
            *extra: str) -> list[subprocess.CompletedProcess]:
    """One step: `size` ranks of `rooflab collectives` at once, each with its launcher's variables."""
    spec = tmp_path / "comms.yaml"
    spec.write_text(SPEC)
    port = _free_port()
    argv = [sys.executable, "-m", "rooflab", "collectives", str(spec), "--run-id", run_id, "--db", url,
            "--case-timeout-s", "60", *extra]
    codes: dict[int, int] = {}

    def rank_process(rank: int) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO), "ROOFLAB_PLUGINS": "tests.runners.planted_collectives",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), **variables(rank, size)}
        env.pop("ROOFLAB_DB", None)
        with open(os.devnull, "rb") as stdin, open(tmp_path / f"{run_id}-{port}-{rank}.out", "wb") as out, \
                open(tmp_path / f"{run_id}-{port}-{rank}.err", "wb") as err:
            codes[rank] = run(warm, argv, env, str(REPO), fds=(stdin.fileno(), out.fileno(), err.fileno()))

    threads = [threading.Thread(target=rank_process, args=(rank,)) for rank in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert sorted(codes) == list(range(size)), f"ranks {sorted(set(range(size)) - set(codes))} still run"
    return [subprocess.CompletedProcess(argv, codes[rank], (tmp_path / f"{run_id}-{port}-{rank}.out").read_text(),
                                        (tmp_path / f"{run_id}-{port}-{rank}.err").read_text())
            for rank in range(size)]


def _torchrun(rank: int, size: int) -> dict[str, str]:
    return {"RANK": str(rank), "WORLD_SIZE": str(size), "LOCAL_RANK": str(rank)}


def _slurm(rank: int, size: int) -> dict[str, str]:
    return {"SLURM_PROCID": str(rank), "SLURM_NTASKS": str(size), "SLURM_LOCALID": str(rank)}


def test_local_processes_rendezvous_from_the_environment_rank_0_stores_and_a_fault_ends_the_step(
        warm: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    done = _launch(warm, tmp_path, url, "night", 3, _torchrun, "--filter", "benchmark=every_rank",
                   "--filter", "benchmark=three")
    assert [p.returncode for p in done] == [0, 0, 0], [p.stderr[-2000:] for p in done]
    rows = results(url, run_id="night")
    # ranks=all is stored under the step's size; the all_gather for 2 ranks belongs to other runs
    assert set(rows["case_key"]) == {
        "all_reduce.v1:gloo:float32:hot:launch:n=1024,ranks=3,reduce_op=sum",
        "all_reduce.v1:gloo:float32:hot:launch:n=4096,ranks=3,reduce_op=sum",
        "broadcast.v1:gloo:float32:hot:launch:n=1024,ranks=3", "broadcast.v1:gloo:float32:hot:launch:n=4096,ranks=3",
        "all_gather.v1:gloo:float32:hot:launch:inplace=false,n=1024,ranks=3"}
    assert (rows["status"] == "ok").all() and (rows["ranks"] == 3).all()
    assert all(len(m) == 3 for m in collective_frame(url, run_ids=["night"])["rank_medians_ms"])
    # started again (a requeued step) with Slurm's variables: nothing is measured twice; then a fault
    # on rank 1: rank 0 stores the case failed with rank 1's own error, and every process exits 1
    again = _launch(warm, tmp_path, url, "night", 3, _slurm, "--filter", "benchmark=every_rank",
                    "--filter", "benchmark=faulty")
    assert [p.returncode for p in again] == [1, 1, 1], [p.stderr[-2000:] for p in again]
    rows = results(url, run_id="night")
    assert len(rows) == 6 and (rows["status"] == "ok").sum() == 5
    fault = rows[rows["status"] == "failed"].iloc[0]
    assert fault["error"].startswith("rank 1: RuntimeError: planted fault on this rank"), fault["error"]
    # a matrix whose rank 2 dies in its second round: rank 0 stored the first round's pair as it ended,
    # and stores the matrix crashed, naming the round
    broken = _launch(warm, tmp_path, url, "pairs", 3, _torchrun, "--filter", "benchmark=matrix")
    assert [p.returncode for p in broken] == [1, 1, 3], [p.stderr[-2000:] for p in broken]
    rows = results(url, run_id="pairs").sort_values("case_key")  # the pair's key (a_device=...) first
    assert rows["status"].tolist() == ["ok", "crashed"], rows[["case_key", "status", "error"]]
    pair, matrix = rows.to_dict("records")
    assert pair_of_key(pair["case_key"]) is not None and pair_of_key(matrix["case_key"]) is None
    assert (json.loads(pair["params"])["a_rank"], json.loads(pair["params"])["b_rank"]) == (1, 2)
    assert matrix["error"].startswith("in round 2 of 3 (pairs 0-2): "), matrix["error"]
    assert matrix["error"].endswith("the pairs of the 1 round(s) before it were stored"), matrix["error"]


class _FakeStore:
    def __init__(self) -> None:
        self.keys: dict[str, str] = {}
        self.waited: list[tuple[list[str], float]] = []

    def set(self, key: str, value: str) -> None:
        self.keys[key] = value

    def wait(self, keys: list[str], timeout) -> None:
        self.waited.append((keys, timeout.total_seconds()))
        if not all(k in self.keys for k in keys):
            raise RuntimeError("Wait timeout")


def test_rank_0_waits_for_every_other_rank_to_leave_and_a_missing_one_does_not_hold_it(monkeypatch) -> None:
    import torch.distributed as dist

    from rooflab.runners.orchestration import env_ranks

    destroyed = []
    monkeypatch.setattr(dist, "destroy_process_group", lambda: destroyed.append(True))
    store = _FakeStore()
    for rank in (1, 2, 3):
        env_ranks._leave(store, env_ranks.EnvRendezvous(rank, 4, rank, "h", 1))
    assert sorted(store.keys) == ["rooflab/left/1", "rooflab/left/2", "rooflab/left/3"] and not store.waited
    env_ranks._leave(store, env_ranks.EnvRendezvous(0, 4, 0, "h", 1))
    assert store.waited == [(["rooflab/left/1", "rooflab/left/2", "rooflab/left/3"], env_ranks.LEAVE_WAIT_S)]
    assert len(destroyed) == 4
    del store.keys["rooflab/left/2"]  # rank 2 never says it left: rank 0 still returns
    env_ranks._leave(store, env_ranks.EnvRendezvous(0, 4, 0, "h", 1))


def test_the_rendezvous_names_what_is_missing() -> None:
    assert rendezvous_from_env({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "n1",
                                "MASTER_PORT": "29500"}).rank == 1
    slurm = rendezvous_from_env({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1",
                                 "MASTER_ADDR": "n1", "MASTER_PORT": "29500"})
    assert (slurm.rank, slurm.size, slurm.local_rank, slurm.address, slurm.port) == (5, 8, 1, "n1", 29500)
    with pytest.raises(UserInputError, match="missing: MASTER_ADDR, MASTER_PORT"):
        rendezvous_from_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0"})
    with pytest.raises(UserInputError, match="not a place in a group"):
        rendezvous_from_env({"RANK": "4", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "MASTER_ADDR": "n",
                             "MASTER_PORT": "1"})


def test_ranks_all_becomes_the_steps_world_size_and_other_sizes_are_left_out() -> None:
    spec = parse_spec(SPEC.replace("planted_coll_raise", "all_reduce").replace(", after: 2", ""))
    cases = cases_for_world(expand(spec, "cpu"), 4)
    assert {c.params["ranks"] for c in cases} == {4}
    assert not any(c.op == "all_gather" for c in cases)  # asked for 2 and 3 ranks
    assert all(":ranks=4" in c.case_key or ",ranks=4" in c.case_key for c in cases)


class _PostedStore:
    """The store as _Faults reads it: the errors other ranks posted."""

    def __init__(self, posted: dict[str, str]) -> None:
        self.posted = posted

    def check(self, keys: list[str]) -> bool:
        return all(k in self.posted for k in keys)

    def get(self, key: str) -> bytes:
        return self.posted[key].encode()


def _a_case():
    spec = parse_spec(SPEC.replace("planted_coll_raise", "all_reduce").replace(", after: 2", ""))
    return cases_for_world(expand(spec, "cpu"), 2)[0]


PEER_DROPPED = "rank 0: RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:4242"


@pytest.mark.parametrize("own,posted,status,fragment", [
    # rank 1 was killed: it posts nothing, rank 0 only saw its connection drop -> crashed
    (PEER_DROPPED, None, "crashed", "rank 1 posted no error within"),
    # rank 1 hung: rank 0's wait timed out -> crashed
    ("rank 0: RuntimeError: Timed out waiting 600000ms for recv operation", None, "crashed", "died or hung"),
    # rank 1 raised and said so -> failed, its own error first
    (PEER_DROPPED, "rank 1: RuntimeError: planted fault on this rank", "failed", "rank 1: RuntimeError: planted"),
    # rank 0 raised an error of its own, rank 1 silent -> failed
    ("rank 0: ValueError: bad input", None, "failed", "rank 0: ValueError: bad input"),
])
def test_a_rank_that_posts_no_error_after_its_peers_lost_it_makes_the_case_crashed(
        monkeypatch: pytest.MonkeyPatch, own: str, posted: str | None, status: str, fragment: str) -> None:
    from rooflab.runners.orchestration import env_ranks

    monkeypatch.setattr(env_ranks, "FAULT_GRACE_S", 0.2)
    case = _a_case()
    store = _PostedStore({} if posted is None else {f"rooflab/fault/{case.case_key}/1": posted})
    got_status, error = env_ranks._Faults(store, 2).collect(case, own)
    assert got_status == status and fragment in error, error
    if status == "failed":
        assert error.startswith(fragment), error  # the rank's own fault first


def test_sigterm_is_noted_and_obeyed_before_the_next_case() -> None:
    import signal

    from rooflab.runners.orchestration import env_ranks

    class Decide:
        rank, size = 0, 2

        def __init__(self) -> None:
            self.decided: list[int] = []

        def decide(self, value: int) -> int:
            self.decided.append(value)
            return value

    previous = signal.getsignal(signal.SIGTERM)
    try:
        stop = env_ranks._Stop.install()
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)  # noted, the process goes on
        assert stop.requested
    finally:
        signal.signal(signal.SIGTERM, previous)
    control = Decide()
    code = env_ranks._cases([_a_case()], None, control, (), None, 0, {}, env_ranks._Faults(None, 2), stop)
    assert code == ExitCode.STOPPED == 143 and control.decided == [2]  # the group told to stop, no case run
