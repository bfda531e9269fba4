"""A simulated night on the CPU: shard processes writing one run, one of them killed with SIGKILL in
the middle of a case and started again, on SQLite (through the generated Slurm scripts, run here as
Slurm would start them) and on PostgreSQL (`rooflab run --shard`, then `--resume`).

Every rooflab here is a real process (`python -m rooflab ...`), as on a cluster node. The case the
kill lands in is a planted_gate case (tests/runners/planted_ops.py): its calls wait until the test
opens the gate (tests/runners/gate.py), so the kill lands in that case, with every case before it in
its shard stored, whatever the machine's load; the other cases are real copies of a few ms.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.present import present
from tests.runners.cluster_support import fresh_postgres_url, run_record, sqlite_url
from tests.runners.gate import GATE_ENV, wait_for_file
from tests.runners.run_process import PLUGIN, child_env

REPO = Path(__file__).resolve().parents[3]
GATED_N = 256  # the planted_gate case: `waiting-256` in the gate folder while it is in flight

NIGHT_SPEC = f"""name: night
defaults:
  cache: [hot]
  timing: {{warmup_ms: 0, warmup_calls: 1, min_samples: 3, min_time_ms: 0, max_time_ms: 5}}
benchmarks:
  - name: copies
    op: copy
    params:
      n: [1024, 4096, 16384, 65536]
  - name: gated         # last in its shard: the kill lands in it, after the shard's copies are stored
    op: planted_gate
    params: {{n: {GATED_N}}}
"""


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield sqlite_url(tmp_path)
    else:
        yield from fresh_postgres_url()


@pytest.fixture()
def postgres_url() -> Iterator[str]:
    yield from fresh_postgres_url()


def write_spec(tmp_path: Path, text: str, name: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def node_env(gate: Path) -> dict[str, str]:
    """A node's environment: this checkout, the planted ops, the gate; no ROOFLAB_DB of the caller's."""
    return child_env() | {"PYTHONPATH": str(REPO), GATE_ENV: str(gate)}


def rooflab(gate: Path, *args: str, **popen: Any) -> subprocess.Popen[str]:
    """A rooflab process standing for one node: its device locks are its own, as a node's are."""
    env = node_env(gate)
    env["ROOFLAB_LOCK_DIR"] = tempfile.mkdtemp(prefix="node-locks-", dir=gate.parent)
    return subprocess.Popen([sys.executable, "-m", "rooflab", *args], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


def finish(proc: subprocess.Popen[str], timeout: float = 240) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def run_row(url: str, run_id: str) -> Any:
    from rooflab.db.query import runs

    frame = runs(url)
    return frame[frame["run_id"] == run_id].iloc[0]


def night_shards(spec: Path, count: int, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[set[str]], int]:
    """(the expanded spec's case keys, each shard's as every shard process splits them (no earlier
    run: the op model), the index of the shard that holds the gated case)."""
    from rooflab.runners.orchestration.shards import estimate_cost_s, select_shard
    from rooflab.suite.spec import expand, load_spec

    monkeypatch.setenv("ROOFLAB_PLUGINS", PLUGIN)  # the planted ops, for the expansion here
    cases = expand(load_spec(spec), "cpu")
    shards = [select_shard(cases, i, count, estimate_cost_s) for i in range(count)]
    victim = next(i for i, shard in enumerate(shards) if any(c.op == "planted_gate" for c in shard))
    # premise: the gated case is the victim's last, after at least one copy it stores before the kill
    assert shards[victim][-1].op == "planted_gate" and len(shards[victim]) >= 2, shards
    return sorted(c.case_key for c in cases), [{c.case_key for c in s} for s in shards], victim


def kill_in_the_gated_case(gate: Path, proc: subprocess.Popen[str]) -> None:
    """SIGKILL the shard's whole process group (shard and workers, as when a node is lost) once its
    gated case is in flight."""
    try:
        wait_for_file(gate / f"waiting-{GATED_N}", proc)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)  # reaps it and closes its pipes
    assert proc.returncode == -signal.SIGKILL


def check_killed_state(url: str, run_id: str, shards: list[set[str]], victim: int) -> Any:
    """What the night holds after the kill: every case of the victim's shard but the one in flight
    (and every case of the other shard), the run still running with one shard finished. The results."""
    from rooflab.db.query import results

    before = results(url, run_id=run_id)
    name = f"{victim}/{len(shards)}"
    victim_keys = set(before.loc[before["shard"] == name, "case_key"])
    assert victim_keys == {k for k in shards[victim] if "planted_gate" not in k}, victim_keys
    assert len(before) == sum(map(len, shards)) - 1  # the case in flight is lost, no more
    row = run_row(url, run_id)
    assert row["status"] == "running" and row["n_shards"] == len(shards)
    assert row["n_shards_finished"] == len(shards) - 1
    return before


def check_night_complete(url: str, run_id: str, expected: list[str], shards: list[set[str]], before: Any) -> None:
    """Once the killed shard has run again: every case once, each from the shard the partition gives
    it, the results stored before the kill as they were, the run complete."""
    from rooflab.db.query import results

    after = results(url, run_id=run_id)
    keys = list(after["case_key"])
    assert Counter(keys).most_common(1)[0][1] == 1  # no duplicates
    assert sorted(keys) == expected  # the union is the expanded spec
    assert set(after["status"]) == {"ok"}
    for i, mine in enumerate(shards):
        assert set(after.loc[after["shard"] == f"{i}/{len(shards)}", "case_key"]) == mine
    old = before.set_index("case_key")[["median_ms", "measured_at"]]
    new = after.set_index("case_key")[["median_ms", "measured_at"]]
    assert new.loc[old.index].equals(old)  # results stored before the kill are kept as they were
    row = run_row(url, run_id)
    assert row["status"] == "complete" and row["n_shards_finished"] == len(shards)


@pytest.mark.postgres
def test_a_night_of_shards_with_one_killed_and_resumed(postgres_url: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Two shard processes write one run into PostgreSQL; the shard holding the gated case is killed in
    it and resumed with `--resume`, which measures only that case."""
    url, gate = postgres_url, tmp_path / "gate"
    gate.mkdir()
    spec = write_spec(tmp_path, NIGHT_SPEC, "night")
    count, run_id = 2, "night-20261121"
    expected, shards, victim = night_shards(spec, count, monkeypatch)
    common = ["--run-id", run_id, "--db", url, "--device", "cpu", "--quiet"]
    other = rooflab(gate, "run", str(spec), "--shard", f"{1 - victim}/{count}", *common)
    killed = rooflab(gate, "run", str(spec), "--shard", f"{victim}/{count}", *common, start_new_session=True)
    kill_in_the_gated_case(gate, killed)
    code, out, err = finish(other)
    assert code == 0, err + out
    before = check_killed_state(url, run_id, shards, victim)

    # resume the killed shard: only what it had not stored (the gated case, its gate open now) is measured
    (gate / "open").touch()
    again = rooflab(gate, "run", "--resume", run_id, "--shard", f"{victim}/{count}", "--db", url, "--device", "cpu",
                    "--quiet", "--json")
    code, out, err = finish(again)
    assert code == 0, err + out
    summary = json.loads(out)
    assert summary["selected_cases"] == len(shards[victim])
    assert summary["already_measured"] == len(shards[victim]) - 1
    assert summary["counts"]["ok"] == sum(summary["counts"].values()) == 1
    check_night_complete(url, run_id, expected, shards, before)


def test_node_clock_skew_does_not_reorder_history(url):
    """A node whose clock is days behind writes tonight's results 'before' last night's: history,
    the cost basis and the regression check still follow the runs' order."""
    from rooflab.db.query import case_history
    from rooflab.db.store import ResultStore
    from rooflab.reports.regressions.series import detect
    from rooflab.runners.orchestration.shards import previous_medians
    from tests.runners.cluster_support import H100, T0, case_record, measurement

    case = case_record("copy", 1 << 22)
    rng = np.random.default_rng(21)
    with ResultStore(url) as store:
        for night in range(8):
            run_id = f"n{night}"
            started = T0 + timedelta(days=night)
            store.start_run(run_record(run_id, started), shard="0/2")
            store.start_run(run_record(run_id, started), shard="1/2")
            store.add_environment(run_id, H100.record())
            median = 2.0 if night < 6 else 2.5  # a 25 % step on the last two nights
            # on odd nights shard 1/2 runs on a node whose clock is 10 days behind
            measured = started - timedelta(days=10) if night % 2 else started + timedelta(hours=1)
            store.add_measurement(measurement(run_id, case, median, rng, measured_at=measured, shard="1/2"))
            store.finish_run(run_id, "complete", shard="0/2")
            store.finish_run(run_id, "complete", shard="1/2")
    history = case_history(url, case.case_key)
    assert list(history["run_id"]) == [f"n{i}" for i in range(8)]
    by_clock = history.sort_values("measured_at", kind="stable")["run_id"].tolist()
    assert by_clock != [f"n{i}" for i in range(8)]  # the measurement clocks alone would scramble them
    assert by_clock.index("n7") < by_clock.index("n0")  # tonight's shard "measured" before the first night
    verdict = detect(history)[0]
    assert verdict.status == "regression" and present(verdict.latest).run_id == "n7"
    assert previous_medians(url, current_run_id="n7").medians_ms[case.case_key] == pytest.approx(2.5, rel=0.02)
    assert previous_medians(url, current_run_id="n6").medians_ms[case.case_key] == pytest.approx(2.0, rel=0.02)


def test_slurm_scripts_run_a_night_here_with_a_task_killed_and_started_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The generated array script (tasks 0 and 1 at once, as Slurm starts them, into one SQLite file),
    the task holding the gated case killed in it and started again (as `scontrol requeue` does), then
    the finalising script, with the real rooflab: every flag they pass is one `rooflab run` and
    `nightly` accept, and a restarted task measures only what its shard lacks."""
    from rooflab.runners.cluster import slurm, slurm_job

    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed")
    gate = tmp_path / "gate"
    gate.mkdir()
    spec = write_spec(tmp_path, NIGHT_SPEC, "night")
    url, run_id = sqlite_url(tmp_path), "night-20261122"
    expected, shards, victim = night_shards(spec, 2, monkeypatch)
    # CPU nodes (--gpus-per-node 0): the array runs `--device cpu`; rooflab is this checkout's
    job = slurm_job.SlurmJob(spec_path=spec, suite="night", nodes=2, gpus_per_node=0, out_dir=tmp_path / "out",
                             rooflab=(sys.executable, "-m", "rooflab"), db_url=slurm_job.check_db_url(url),
                             run_id=run_id)
    array, finalize, *_ = slurm.write_scripts(job, tmp_path / "night.sbatch")
    env = node_env(gate)

    def task(index: int, restart: int) -> subprocess.Popen[str]:
        """Array task `index`; a node's own device locks, as each node has."""
        return subprocess.Popen([bash, str(array)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True,
                                env=dict(env, SLURM_ARRAY_TASK_ID=str(index), SLURM_RESTART_COUNT=str(restart),
                                         ROOFLAB_LOCK_DIR=str(tmp_path / f"node{index}-locks")))

    other, killed = task(1 - victim, 0), task(victim, 0)
    kill_in_the_gated_case(gate, killed)
    code, out, err = finish(other)
    assert code == 0, err + out
    before = check_killed_state(url, run_id, shards, victim)

    (gate / "open").touch()
    code, out, err = finish(task(victim, 1))  # the requeued task: the same script, the same run
    assert code == 0, err + out
    assert f"shard {victim}/2 on" in out and "(restart 1)" in out
    # it measures only what its shard lacks (a duplicate would be refused silently by the store)
    assert f"{len(shards[victim]) - 1} case(s) already measured in this run; 1 to go" in out + err, out + err
    check_night_complete(url, run_id, expected, shards, before)

    done = subprocess.run([bash, str(finalize)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((job.out_dir / "report" / "summary.json").read_text())
    assert summary["run_id"] == run_id and summary["run_status"] == "complete" and summary["by"] == "model"
    assert summary["shards"] == {"expected": 2, "finished": ["0/2", "1/2"], "unfinished": [], "missing": [],
                                 "complete": True}
    assert summary["cases_missing"] == [] and summary["counts"]["ok"] == len(expected)
    assert (job.out_dir / "report" / "index.html").is_file()
