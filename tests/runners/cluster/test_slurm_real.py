"""Nights on a real Slurm: the scripts `rooflab slurm --gpus-per-node 0` writes, run by slurmctld and
two slurmd (tests/runners/cluster/slurm_cluster.py: a two-node cluster on this machine, started once for the
module), into the test PostgreSQL server.

The night (`night`, once for the module): a small spec of planted ops (tests/runners/planted_ops.py:
a sleep of known length in every call) and one gloo all_reduce, split into 2 shards, one array task
per node; the collective step over both nodes (`srun -N 2`, one gloo rank per node); the finalising
job. One case has a planted history under tonight's sleep, measured on another node (node-a): a
regression of its model's series, which the finalising job judges by. While the array runs, the
task of one shard is killed with SIGKILL in the middle of a slow case (`scancel --signal=KILL
--batch`) and requeued (`scontrol requeue`). The tests then read what Slurm and the database hold.

Each job's times come from `scontrol show job` (no accounting here: the controller keeps a finished
job for MinJobAge). A requeued job may start again once the credentials of its killed start have
expired (slurm.conf's `AuthInfo=...,cred_expire`: 120 s by default, 5 s on the test cluster);
starting it sooner (`scontrol update StartTime=now`) fails it: "Job credential revoked".
"""
from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.runners.cluster.slurm_cluster import (
    WIDE_NODES,
    WIDE_PARTITION,
    SlurmCluster,
    owned_processes,
    skip_reason,
    start_cluster,
    stop_cluster,
)
from tests.runners.cluster_support import fresh_postgres_url, run_record

REPO = Path(__file__).resolve().parents[3]
PLUGINS = "tests.runners.planted_ops,tests.runners.quiet_machine,tests.runners.planted_collectives"
SKIP = skip_reason()
pytestmark = [
    pytest.mark.slurm,
    pytest.mark.postgres,
    pytest.mark.skipif(SKIP is not None, reason=SKIP or ""),
]

NIGHT_SPEC = """name: slurmnight
defaults:
  cache: [hot]
  timing: {warmup_ms: 0, warmup_calls: 1, min_samples: 5, min_time_ms: 0, max_time_ms: 40}
benchmarks:
  - name: quick
    op: planted_scale
    params: {n: 4096, sleep_ms: [0.5, 1.0]}
  - name: regressed     # 20 samples of >= 20 ms: a steady median on a busy machine
    op: planted_scale
    params: {n: 4096, sleep_ms: 20.0}
    timing: {min_samples: 20, min_time_ms: 0, max_time_ms: 1000}
  - name: ring
    op: all_reduce
    devices: [cpu]
    backends: [gloo]
    params: {n: 1024, ranks: all}
  - name: slow          # 300 ms calls for at least 1.5 s: one in each shard, the kill lands in one
    op: planted_scale
    params: {n: [2048, 3072], sleep_ms: 300.0}
    timing: {min_samples: 3, min_time_ms: 1500, max_time_ms: 1800}
"""
REGRESSED_SLEEP_MS = 20.0  # its history: 16.7 ms for eight nights, then 20 ms; tonight >= 20 ms again


def submit_env(cluster: SlurmCluster, **extra: str) -> dict[str, str]:
    """What the submit script runs in: the cluster's SLURM_CONF, this checkout on PYTHONPATH and the
    planted ops (sbatch --export=ALL hands all of it to the jobs)."""
    env = dict(cluster.env, PYTHONPATH=str(REPO), ROOFLAB_PLUGINS=PLUGINS, **extra)
    for name in ("ROOFLAB_DB", "ROOFLAB_RUN_ID", "ROOFLAB_PLANTED_MARK"):
        if name not in extra:
            env.pop(name, None)
    return env


@contextmanager
def planted_ops_loaded() -> Iterator[None]:
    """The planted ops for an in-process `rooflab slurm` (it expands the spec); the op registry as it
    was afterwards (as tests/conftest.py restores it after each test)."""
    from rooflab.suite.ops import registry

    registry.all_ops()
    saved, loaded = dict(registry._ops), set(registry._plugins_loaded)
    try:
        yield
    finally:
        for name, op in list(registry._ops.items()):
            if name not in saved:
                sys.modules.pop(type(op).__module__, None)
        registry._ops.clear()
        registry._ops.update(saved)
        registry._plugins_loaded.clear()
        registry._plugins_loaded.update(loaded)


def rooflab_slurm(spec: Path, url: str, out: Path, *extra: str, nodes: int = 2) -> dict[str, Path]:
    """`rooflab slurm SPEC --nodes NODES --gpus-per-node 0 --python <this python> ...`: the scripts' paths
    by the names it prints (array, collectives, finalise, submit)."""
    from typer.testing import CliRunner

    from rooflab.runners.cli.app import app

    args = ["slurm", str(spec), "--nodes", str(nodes), "--gpus-per-node", "0", "--db", url, "--out", str(out),
            "--python", sys.executable, "--time", "00:10:00", "--collectives-time", "00:10:00",
            "--finalize-time", "00:10:00", *extra]
    with planted_ops_loaded():
        result = CliRunner().invoke(app, args, env={"ROOFLAB_PLUGINS": PLUGINS})
    assert result.exit_code == 0, result.output
    found = dict(re.findall(r"^(\w+) script:\s+(.+)$", result.output, re.MULTILINE))
    return {name: Path(path) for name, path in found.items()}


def plant_history(url: str, spec: Path) -> str:
    """Nine earlier nights of the regressed case on this CPU's model, as another node measured them
    (host node-a; tonight the shards run wherever Slurm places them): a sharded night's finalising job
    judges by model (`rooflab slurm`'s default), so they and tonight are one series. Its case key."""
    from rooflab.db.store import ResultStore
    from rooflab.record import record_from_columns
    from rooflab.runners.machine.environment import capture
    from rooflab.runners.orchestration.records import case_record
    from rooflab.suite.spec import expand, load_spec

    with planted_ops_loaded(), _plugins_env():
        case = next(c for c in expand(load_spec(str(spec)), "cpu")
                    if c.op == "planted_scale" and c.params.get("sleep_ms") == REGRESSED_SLEEP_MS)
        record = case_record(case)
    env, _ = capture("cpu")
    rng = np.random.default_rng(31)
    now = datetime.now(UTC)
    with ResultStore(url) as store:
        for night, median_ms in enumerate([REGRESSED_SLEEP_MS / 1.2] * 8 + [REGRESSED_SLEEP_MS]):
            started = now - timedelta(days=9 - night)
            run_id = f"past-{night:02d}"
            store.start_run(run_record(run_id, started, suite="slurmnight", host="node-a"))
            store.add_environment(run_id, env)
            samples = np.sort(median_ms * (1 + 0.002 * rng.standard_normal(15)))
            store.add_measurement(record_from_columns(
                run_id=run_id, case=record, device_fingerprint=env.device_fingerprint, cache="hot",
                timing_mode="launch", status="ok", measured_at=started, clock="perf_counter",
                median_ms=float(np.median(samples)), mean_ms=float(samples.mean()), min_ms=float(samples[0]),
                max_ms=float(samples[-1]), p10_ms=float(samples[1]), p90_ms=float(samples[-2]),
                iqr_ms=float(np.subtract(*np.quantile(samples, [0.75, 0.25]))), std_ms=float(samples.std()),
                n_samples=len(samples), rel_ci_halfwidth=0.002, stop_reason="converged", flops=4096,
                bytes=8 * 4096, samples_ms=tuple(float(x) for x in samples)))
            store.finish_run(run_id, "complete")
    return case.case_key


@contextmanager
def _plugins_env() -> Iterator[None]:
    saved = os.environ.get("ROOFLAB_PLUGINS")
    os.environ["ROOFLAB_PLUGINS"] = PLUGINS
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("ROOFLAB_PLUGINS", None)
        else:
            os.environ["ROOFLAB_PLUGINS"] = saved


def submit(cluster: SlurmCluster, script: Path, env: dict[str, str]) -> dict[str, str]:
    """Run the submit script as a user does; the run id and the three job ids it printed."""
    done = cluster.run("bash", str(script), env=env)
    match = re.search(r"rooflab run (\S+): shard array job (\d+) .*collective step (\d+), finalising job (\d+)",
                      done.stdout)
    assert match is not None, done.stdout + done.stderr
    return dict(zip(("run", "array", "collectives", "finalize"), match.groups(), strict=True))


def run_results(url: str, run_id: str) -> Any:
    from rooflab.db.query import results

    return results(url, run_id=run_id, columns=["case_key", "status", "shard", "measured_at", "error"])


def scontrol_time(value: str) -> datetime:
    return datetime.fromisoformat(value)  # the controller's local time, as all of them


@dataclass(frozen=True)
class Night:
    cluster: SlurmCluster
    url: str
    spec: Path
    out: Path
    scripts: dict[str, Path]
    jobs: dict[str, str]  # run, array, collectives, finalize
    fields: dict[str, dict[str, str]]  # job id -> scontrol fields, once the finalising job has ended
    regressed: str  # case key of the planted regression
    killed_task: int  # the array task that was killed and requeued
    killed_at: datetime  # (UTC) just before the kill
    requeued_at: datetime  # (UTC) just after the requeue
    dependencies: dict[str, str]  # the collective step's and finalising job's, as submitted
    stored_before_kill: frozenset[str]  # case keys of the killed shard stored before the kill
    shards: tuple[tuple[str, ...], ...]  # the case keys of each shard, as the tasks split them


def _shards(spec: Path) -> tuple[tuple[str, ...], ...]:
    """The split every array task computes (no earlier night covers every case: the op model)."""
    from rooflab.runners.orchestration.shards import estimate_cost_s, partition
    from rooflab.suite.spec import expand, load_spec

    with planted_ops_loaded(), _plugins_env():
        cases = expand(load_spec(str(spec)), "cpu")
        return tuple(tuple(c.case_key for c in shard) for shard in partition(cases, 2, estimate_cost_s))


def _kill_mid_run(cluster: SlurmCluster, url: str, jobs: dict[str, str],
                  shards: tuple[tuple[str, ...], ...]) -> tuple[int, datetime, datetime, frozenset[str]]:
    """Wait until the chosen shard has stored its quick cases and is in its slow one; SIGKILL its
    array task and requeue it (it starts again when the killed start's credentials have expired)."""
    def quick(keys: tuple[str, ...]) -> set[str]:
        return {k for k in keys if k.startswith("planted_scale") and "sleep_ms=300" not in k}

    task = max(range(len(shards)), key=lambda i: len(quick(shards[i])))
    waited = quick(shards[task])
    assert waited and any("sleep_ms=300" in k for k in shards[task]), f"premise: quick cases, then a slow one: {shards}"
    from rooflab.db.store import ResultStore

    deadline = time.monotonic() + 90
    with ResultStore(url) as store:  # one engine for every look (a fresh one costs ~15 ms of CPU each)
        while True:
            stored = _stored(store, jobs["run"])
            if waited <= stored:
                break
            assert time.monotonic() < deadline, f"shard {task} stored {stored} of {waited}\n{cluster.logs()}"
            time.sleep(0.1)
    job = f"{jobs['array']}_{task}"
    killed_at = datetime.now(UTC)
    cluster.run("scancel", "--signal=KILL", "--batch", job)
    fields = cluster.wait(job)
    assert fields["JobState"] == "FAILED" and fields["ExitCode"] == "0:9", fields  # killed by SIGKILL
    cluster.run("scontrol", "requeue", job)
    requeued_at = datetime.now(UTC)
    other = cluster.state(f"{jobs['array']}_{1 - task}")
    # premise: the other task ran all along, so the array never counted as ended (afterany) between the
    # kill and the requeue; from the requeue on, the pending task holds the collective step back
    assert other == "RUNNING", f"premise: the other shard still runs at the requeue, got {other}"
    return task, killed_at, requeued_at, frozenset(stored & set(shards[task]))


def _stored(store: Any, run_id: str) -> set[str]:
    """The case keys the run holds so far (none before the first shard has created it)."""
    from sqlalchemy.exc import SQLAlchemyError

    try:
        return store.measured_case_keys(run_id)
    except SQLAlchemyError:  # the first shard is creating the run
        return set()


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    """The cluster (two nodes in its default partition, four in `wide`); afterwards nothing of it may
    be left (no process, no file)."""
    running = start_cluster()
    yield running
    root = running.root
    problems = stop_cluster(running)
    assert problems == [], problems
    assert owned_processes(root) == [] and not root.exists()


@pytest.fixture(scope="module")
def night_url() -> Iterator[str]:
    yield from fresh_postgres_url()


@pytest.fixture(scope="module")
def night(night_url: str, cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Night:
    base = tmp_path_factory.mktemp("night")
    spec = base / "slurmnight.yaml"
    spec.write_text(NIGHT_SPEC)
    regressed = plant_history(night_url, spec)
    out = base / "out"
    scripts = rooflab_slurm(spec, night_url, out, "--fail-on", "regression")
    shards = _shards(spec)
    jobs = submit(cluster, scripts["submit"], submit_env(cluster))
    dependencies = {name: cluster.job(jobs[name])["Dependency"] for name in ("collectives", "finalize")}
    task, killed_at, requeued_at, before = _kill_mid_run(cluster, night_url, jobs, shards)
    ids = [f"{jobs['array']}_0", f"{jobs['array']}_1", jobs["collectives"], jobs["finalize"]]
    for job in ids[::-1]:
        cluster.wait(job, timeout_s=150)
    return Night(cluster, night_url, spec, out, scripts, jobs, {i: cluster.job(i) for i in ids}, regressed, task,
                 killed_at, requeued_at, dependencies, before, shards)


def _expected_keys(spec: Path) -> set[str]:
    """The spec's cases on a CPU (the array's, `ranks: all` as two local ranks) and the collective
    step's all_reduce over the two nodes (stored under ranks=2)."""
    from rooflab.suite.ops.collective import at_world_size
    from rooflab.suite.spec import expand, load_spec

    with planted_ops_loaded(), _plugins_env():
        cases = expand(load_spec(str(spec)), "cpu")
    return {c.case_key for c in cases} | {at_world_size(c, 2).case_key for c in cases if c.op == "all_reduce"}


def test_a_night_stores_every_case_once_under_one_run(night: Night) -> None:
    from rooflab.db.query import runs

    rows = run_results(night.url, night.jobs["run"])
    counts = Counter(rows["case_key"])
    assert set(counts) == _expected_keys(night.spec) and set(counts.values()) == {1}, counts
    assert (rows["status"] == "ok").all(), rows[["case_key", "status", "error"]]
    by_key = dict(zip(rows["case_key"], rows["shard"], strict=True))
    for index, keys in enumerate(night.shards):
        assert all(by_key[k] == f"{index}/2" for k in keys)  # each case in the shard that owns it
    step = [k for k in counts if "ranks=2" in k]
    # the collective step's own result over both nodes: in no shard (None, NaN in the frame)
    assert len(step) == 1 and not isinstance(by_key[step[0]], str)
    all_runs = runs(night.url)
    tonight = all_runs[~all_runs["run_id"].str.startswith("past-")]
    assert list(tonight["run_id"]) == [night.jobs["run"]] and tonight["status"].iloc[0] == "complete"
    today = {datetime.now(UTC).strftime("%Y%m%d"), (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y%m%d")}
    assert night.jobs["run"] in {f"slurmnight-{d}" for d in today}  # derived by the submit script


def test_the_jobs_follow_their_dependencies_and_log_where_the_scripts_say(night: Night) -> None:
    f, jobs = night.fields, night.jobs
    # as submitted: the step after every task of the array, the finalising job after the step
    assert night.dependencies["collectives"].startswith(f"afterany:{jobs['array']}_*"), night.dependencies
    assert night.dependencies["finalize"].startswith(f"afterany:{jobs['collectives']}"), night.dependencies
    tasks = [f[f"{jobs['array']}_{i}"] for i in (0, 1)]
    step, final = f[jobs["collectives"]], f[jobs["finalize"]]
    assert [t["JobState"] for t in tasks] == ["COMPLETED", "COMPLETED"] and step["JobState"] == "COMPLETED"
    assert step["NodeList"] == "n[1-2]"
    # afterany: the step starts once every array task has ended, the finalising job once the step has
    assert scontrol_time(step["StartTime"]) >= max(scontrol_time(t["EndTime"]) for t in tasks)
    assert scontrol_time(final["StartTime"]) >= scontrol_time(step["EndTime"])
    rows = run_results(night.url, jobs["run"])
    step_at = rows.loc[rows["shard"].isna(), "measured_at"].iloc[0]
    assert step_at > rows.loc[rows["shard"].notna(), "measured_at"].max()
    logs = night.out / "logs"
    first_nodes = []
    for i in (0, 1):
        text = (logs / f"rooflab-slurmnight-{jobs['array']}_{i}.out").read_text()
        first_nodes += re.findall(rf"shard {i}/2 on (\S+) CPU \(restart 0\)", text)
    assert sorted(first_nodes) == ["n1", "n2"]  # one array task per node (a requeued one goes where it can)
    step_log = (logs / f"rooflab-slurmnight-collectives-{jobs['collectives']}.out").read_text()
    assert "collectives on 2 ranks, rendezvous 127.0.0.1:" in step_log
    final_log = (logs / f"rooflab-slurmnight-finalize-{jobs['finalize']}.out").read_text()
    assert f"run {jobs['run']}" in final_log and "report:" in final_log
    assert (night.out / "report" / "index.html").is_file()


def test_a_killed_and_requeued_array_task_resumes_without_measuring_twice(night: Night) -> None:
    rows = run_results(night.url, night.jobs["run"])
    mine = rows[rows["case_key"].isin(night.shards[night.killed_task])]
    assert Counter(mine["case_key"]) == Counter(night.shards[night.killed_task])  # each once
    assert night.stored_before_kill  # the kill came after some of the shard was stored ...
    done_before = mine[mine["case_key"].isin(night.stored_before_kill)]
    assert (done_before["measured_at"] < night.killed_at).all()  # ... which the second start left alone
    rest = mine[~mine["case_key"].isin(night.stored_before_kill)]
    assert len(rest) >= 1 and (rest["measured_at"] > night.requeued_at).all()  # the case in flight, again
    task = night.fields[f"{night.jobs['array']}_{night.killed_task}"]
    assert task["Restarts"] == "1" and task["JobState"] == "COMPLETED"
    log = (night.out / "logs" / f"rooflab-slurmnight-{night.jobs['array']}_{night.killed_task}.out").read_text()
    assert "(restart 0)" in log and "(restart 1)" in log  # both starts in one log (--open-mode=append)


def test_the_finalising_jobs_exit_code_follows_fail_on(night: Night) -> None:
    final = night.fields[night.jobs["finalize"]]
    assert final["JobState"] == "FAILED" and final["ExitCode"] == "1:0", final  # --fail-on regression
    summary = json.loads((night.out / "report" / "summary.json").read_text())
    assert [r["case_key"] for r in summary["regressions"]] == [night.regressed]
    assert summary["by"] == "model" and summary["regressions"][0]["device_key"] is None  # the model's series
    assert summary["exit_code"] == 1 and summary["cases_missing"] == [] and summary["shards"]["complete"]
    # --fail-on never: test_a_second_submission_the_same_night_resumes_the_same_run


def test_a_second_submission_the_same_night_resumes_the_same_run(night: Night,
                                                                  tmp_path: Path) -> None:
    """The night submitted again, by the scripts `rooflab slurm --fail-on never` writes for the same
    spec and database (their own --out): the submit script derives the same run id, every job
    completes and nothing is measured again; its finalising job finds the regression still there and
    exits 0, as --fail-on never asks."""
    before = run_results(night.url, night.jobs["run"])
    out = tmp_path / "never"
    scripts = rooflab_slurm(night.spec, night.url, out, "--fail-on", "never")
    env = submit_env(night.cluster)
    if not night.jobs["run"].endswith(datetime.now(UTC).strftime("%Y%m%d")):
        env["ROOFLAB_RUN_ID"] = night.jobs["run"]  # the UTC date turned during the test: still the same night
    again = submit(night.cluster, scripts["submit"], env)
    assert again["run"] == night.jobs["run"]
    final = night.cluster.wait(again["finalize"], timeout_s=120)
    after = run_results(night.url, night.jobs["run"])
    key = ["case_key", "measured_at"]
    assert sorted(map(tuple, after[key].values.tolist())) == sorted(map(tuple, before[key].values.tolist()))
    for job in (f"{again['array']}_0", f"{again['array']}_1", again["collectives"]):
        assert night.cluster.job(job)["JobState"] == "COMPLETED"
    assert final["JobState"] == "COMPLETED" and final["ExitCode"] == "0:0", final  # --fail-on never
    assert scontrol_time(final["StartTime"]) >= scontrol_time(night.cluster.job(again["collectives"])["EndTime"])
    log = (out / "logs" / f"rooflab-slurmnight-finalize-{again['finalize']}.out").read_text()
    assert "1 regressions" in log and "exit code 0 (--fail-on never)" in log  # the regression is still there


FAULT_SPEC = """name: slurmfault
defaults:
  cache: [hot]
  devices: [cpu]
  backends: [gloo]
  timing: {warmup_ms: 0, warmup_calls: 1, min_samples: 5, min_time_ms: 0, max_time_ms: 50}
benchmarks:
  - name: before
    op: all_reduce
    params: {n: 1024, ranks: all}
  - name: killed        # rank 1 sleeps in its first call: the test kills it there
    op: planted_coll_hang
    params: {n: 2048, ranks: all, bad_rank: 1}
  - name: after
    op: all_reduce
    params: {n: 4096, ranks: all}
"""


@pytest.fixture()
def fault_url() -> Iterator[str]:
    yield from fresh_postgres_url()


def test_a_collective_task_killed_mid_case_leaves_that_case_crashed_and_the_rest_measured(
        cluster: SlurmCluster, fault_url: str, tmp_path: Path) -> None:
    url = fault_url
    spec = tmp_path / "slurmfault.yaml"
    spec.write_text(FAULT_SPEC)
    marks = tmp_path / "marks"
    marks.mkdir()
    scripts = rooflab_slurm(spec, url, tmp_path / "out")
    (tmp_path / "out" / "logs").mkdir(parents=True)  # the submit script makes it; here the step goes alone
    env = submit_env(cluster, ROOFLAB_RUN_ID="fault-night", ROOFLAB_PLANTED_MARK=str(marks))
    job = cluster.run("sbatch", "--parsable", str(scripts["collectives"]), env=env).stdout.strip().split(";")[0]
    pid_file = marks / "planted_coll_hang-rank1.pid"
    asked = time.monotonic()  # when to ask the controller next
    deadline = asked + 60
    while not pid_file.exists():
        assert time.monotonic() < deadline, _job_logs(tmp_path)
        if time.monotonic() >= asked:  # the controller once a second (an scontrol costs ~8 ms of CPU in all)
            assert cluster.state(job) in ("PENDING", "RUNNING"), _job_logs(tmp_path)
            asked = time.monotonic() + 1.0
        time.sleep(0.1)
    pid = int(pid_file.read_text())
    assert _environ(pid).get("SLURM_PROCID") == "1" and _environ(pid).get("SLURMD_NODENAME") == "n2"
    killed_at = datetime.now(UTC)
    os.kill(pid, signal.SIGKILL)  # the task on n2, in the middle of its case
    fields = cluster.wait(job, timeout_s=90)
    # the job ends with the first start's code: srun's for a task killed by SIGKILL, 128 + 9
    assert fields["ExitCode"] == "137:0" and fields["JobState"] == "FAILED", fields
    rows = run_results(url, "fault-night").set_index("case_key")
    assert len(rows) == 3 and rows.index.is_unique
    killed = rows.loc[[k for k in rows.index if k.startswith("planted_coll_hang")][0]]
    assert killed["status"] == "crashed", killed["error"]
    assert "rank 1 posted no error" in killed["error"] and "by peer" in killed["error"], killed["error"]
    assert sorted(rows.loc[[k for k in rows.index if k.startswith("all_reduce")], "status"]) == ["ok", "ok"]
    # the case before the kill is the first start's, the case after it the second start's
    at = {n: rows.loc[k, "measured_at"] for n in (1024, 4096) for k in rows.index
          if k.startswith(f"all_reduce.v1:{GLOO}:n={n},")}
    before, after = at[1024], at[4096]
    assert before < killed_at < after, (before, killed_at, after)
    log = (tmp_path / "out" / "logs" / f"rooflab-slurmfault-collectives-{job}.err").read_text()
    assert "start 1 of 3 ended with exit code 137" in log and "start 2 of 3" not in log, log
    left = [p for p, _ in owned_processes(cluster.root) if _environ(p).get("SLURM_JOB_ID") == job]
    assert left == []  # nothing of the step is left on either node


GLOO = "gloo:float32:hot:launch"  # an all_reduce case key's middle, in FAULT_SPEC


def _job_logs(tmp_path: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted((tmp_path / "out" / "logs").glob("*")))


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


# ---------------------------------------------------------------- a fleet's health night


@pytest.fixture(scope="module")
def health_url() -> Iterator[str]:
    yield from fresh_postgres_url()


def test_a_health_night_ends_with_the_fleets_judgement(cluster: SlurmCluster, health_url: str,
                                                       tmp_path: Path) -> None:
    """`rooflab slurm health --nodes 2 --gpus-per-node 0`: each node measures the shipped health spec
    on every core of its CPU (a device per core, keyed by the node's name and the core), into a run
    of its own; then the fleet job judges the four cores against one another: OUT/fleet.json."""
    out = tmp_path / "out"
    scripts = rooflab_slurm(Path("health"), health_url, out, "--fleet-fail-on", "never")
    assert set(scripts) == {"array", "finalise", "submit"}
    done = cluster.run("bash", str(scripts["submit"]), env=submit_env(cluster))
    match = re.search(r"rooflab run (\S+): health array job (\d+) .*fleet job (\d+)", done.stdout)
    assert match is not None, done.stdout + done.stderr
    run_id, array, final = match.groups()
    fields = cluster.wait(final, timeout_s=300)
    assert fields["JobState"] == "COMPLETED" and fields["ExitCode"] == "0:0", (fields, cluster.logs())
    for task in (0, 1):
        assert cluster.job(f"{array}_{task}")["JobState"] == "COMPLETED"
    fleet = json.loads((out / "fleet.json").read_text())
    assert sorted(fleet["night"]["runs"]) == [f"{run_id}-n0", f"{run_id}-n1"]
    cores = sorted(os.sched_getaffinity(0))[:2]
    keys = {d["device_key"] for d in fleet["devices"]}
    assert keys == {f"{node}/cpu{core}" for node in ("n1", "n2") for core in cores}, keys
    assert {n["host"] for n in fleet["nodes"]} == {"n1", "n2"}
    assert all(d["status"] != "not_judged" and d["siblings"] == 4 for d in fleet["devices"]), fleet["devices"]
    assert {"hbm_rw", "matrix", "launch"} <= set(fleet["devices"][0]["walls"])
    log = next((out / "logs").glob("rooflab-health-fleet-*.out")).read_text()
    assert "fleet: health, night of" in log and "4 devices:" in log


# ---------------------------------------------------------------- the pairs of nodes, and a bisection


LINKS_SPEC = """name: slurmlinks
defaults:
  cache: [hot]
  devices: [cpu]
  backends: [gloo]
  timing: {warmup_ms: 0, warmup_calls: 2, min_samples: 5, max_samples: 5, min_time_ms: 0, max_time_ms: 2000}
benchmarks:
  - name: pairs
    op: sendrecv_pairs
    params: {n: 2, ranks: all, direction: both}
  - name: whole         # on node n3 each rank sleeps 10 ms after each call: the node a bisection must name
    op: planted_node_slow
    params: {n: 1024, ranks: all, slow_node: n3, slow_ms: 10.0}
"""


@pytest.fixture()
def links_url() -> Iterator[str]:
    yield from fresh_postgres_url()


def test_the_pairs_of_nodes_and_a_bisection_run_on_slurm(cluster: SlurmCluster, links_url: str,
                                                         tmp_path: Path) -> None:
    """The links night's pairs step (one gloo rank per node: the pair n1-n2, stored with both ends)
    and a bisection over the four nodes of the partition `wide` (one rank a node, each half two
    nodes; n3's ranks are planted slow: named in two steps, the second with n1, cleared at the
    first, beside each suspect), each submitted as its script is; the array of each node's pairs is
    tested with stand-ins (tests/runners/cluster/test_links_slurm.py)."""
    from rooflab.db.query import results
    from rooflab.vocab import ResultStatus

    spec = tmp_path / "slurmlinks.yaml"
    spec.write_text(LINKS_SPEC)
    out = tmp_path / "out"
    night = rooflab_slurm(spec, links_url, out, "--links")
    halving = rooflab_slurm(spec, links_url, out, "--bisect", "--output", str(out / "bisect.sbatch"), "--partition",
                            WIDE_PARTITION, nodes=len(WIDE_NODES))
    (out / "logs").mkdir(parents=True)  # the submit scripts make it; here the jobs go alone
    jobs = {}
    for name, script, run in (("pairs", night["pairs"], "links-night"), ("bisect", halving["bisect"], "halves")):
        env = submit_env(cluster, ROOFLAB_RUN_ID=run)
        jobs[name] = cluster.run("sbatch", "--parsable", str(script), env=env).stdout.strip().split(";")[0]
    pairs = cluster.wait(jobs["pairs"], timeout_s=120)
    assert pairs["JobState"] == "COMPLETED" and pairs["NodeList"] == "n[1-2]", _job_logs(tmp_path)
    (pair,) = results(links_url, run_id="links-night").to_dict("records")
    ends = json.loads(pair["params"])
    assert pair["status"] == "ok" and pair["op"] == "sendrecv_pairs" and pair["ranks"] == 2, pair
    assert (ends["a_rank"], ends["a_host"], ends["b_rank"], ends["b_host"]) == (0, "n1", 1, "n2")
    done = cluster.wait(jobs["bisect"], timeout_s=240)
    assert done["JobState"] == "COMPLETED" and done["NodeList"] == "n[1-4]", _job_logs(tmp_path)
    found = json.loads((out / "bisect.json").read_text())
    assert found["slow_node"] == "n3" and len(found["steps"]) == 2, found
    first, second = found["steps"]
    assert [h["nodes"] for h in first["halves"]] == [["n1", "n2"], ["n3", "n4"]] and first["slower"] == 1, found
    assert [h["nodes"] for h in second["halves"]] == [["n3", "n1"], ["n4", "n1"]] and second["slower"] == 0, found
    assert {h["run_id"] for s in (first, second) for h in s["halves"]} == {
        "halves-b1-a", "halves-b1-b", "halves-b2-a", "halves-b2-b"}
    for s in (first, second):  # every half stored its all_reduce over its two nodes (a rank each)
        for h in s["halves"]:
            (row,) = results(links_url, run_id=h["run_id"], status=ResultStatus.OK).to_dict("records")
            assert row["ranks"] == 2 and row["op"] == "planted_node_slow", row
    log = (out / "logs" / f"rooflab-slurmlinks-bisect-{jobs['bisect']}.out").read_text()
    assert "slow node: n3 (2 steps over 4 nodes)" in log and "half b (n4 + cleared n1)" in log
