"""A simulated night on the CPU: shard processes into one SQLite file and one PostgreSQL database,
a shard killed with SIGKILL and started again, and `rooflab nightly` on a planted regression.

Every rooflab here is a real process (`python -m rooflab ...`), as on a cluster node.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from tests.present import present
from tests.runners.cluster_support import fresh_postgres_url, run_record, sqlite_url

REPO = Path(__file__).resolve().parents[2]

# about 0.3 s of sampling per case, so a shard is still running when it is killed
NIGHT_SPEC = """name: night
defaults:
  cache: [hot]
  timing: {warmup_ms: 0, warmup_calls: 1, min_samples: 3, min_time_ms: 300, max_time_ms: 320}
benchmarks:
  - name: copies
    op: copy
    params:
      n: [1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 32768]
  - name: triads
    op: triad
    params:
      n: [1024, 8192, 65536]
"""


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request, tmp_path):
    if request.param == "sqlite":
        yield sqlite_url(tmp_path)
    else:
        yield from fresh_postgres_url()


def write_spec(tmp_path: Path, text: str, name: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def rooflab(*args: str, **popen) -> subprocess.Popen:
    """A rooflab process standing for one node: its device locks are its own, as a node's are."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("ROOFLAB_DB", None)
    env["ROOFLAB_LOCK_DIR"] = tempfile.mkdtemp(prefix="node-locks-", dir=env.get("ROOFLAB_LOCK_DIR"))
    return subprocess.Popen([sys.executable, "-m", "rooflab", *args], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


def finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def run_row(url: str, run_id: str):
    from rooflab.db.query import runs

    frame = runs(url)
    return frame[frame["run_id"] == run_id].iloc[0]


def count_results(engine, run_id: str, shard: str) -> int:
    from sqlalchemy import func, select

    from rooflab.db import models

    query = (
        select(func.count())
        .select_from(models.Measurement)
        .join(models.Run, models.Run.id == models.Measurement.run_id)
        .where(models.Run.run_id == run_id, models.Measurement.__table__.c.shard == shard)
    )
    try:
        with engine.connect() as conn:
            return int(conn.scalar(query) or 0)
    except Exception:  # noqa: BLE001 - the schema is not there yet
        return 0


def kill_after_first_result(url: str, run_id: str, shard: str, proc: subprocess.Popen, timeout_s: float = 180) -> int:
    """SIGKILL the shard's whole process group (shard and workers, as when a node is lost) as soon
    as it has stored a result; returns how many it had stored."""
    from rooflab.db.engine import make_engine

    assert proc.stderr is not None  # the shard is started with its stderr piped
    engine = None
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the shard ended before it could be killed: " + proc.stderr.read()
            if engine is None and (not url.startswith("sqlite") or Path(url[len("sqlite:///"):]).exists()):
                engine = make_engine(url, write=False)
            if engine is not None and count_results(engine, run_id, shard) >= 1:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
                return count_results(engine, run_id, shard)
            time.sleep(0.05)
        raise AssertionError(f"shard {shard} stored nothing within {timeout_s} s")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)  # reaps it and closes its pipes
        if engine is not None:
            engine.dispose()


def test_a_night_of_shards_with_one_killed_and_resumed(url, tmp_path):
    """Three shard processes write one run; shard 2/3 is killed midway and resumed with --resume."""
    from rooflab.db.query import results
    from rooflab.runners.orchestration.shards import estimate_cost_s, select_shard
    from rooflab.suite.spec import expand, load_spec

    spec = write_spec(tmp_path, NIGHT_SPEC, "night")
    cases = expand(load_spec(spec), "cpu")
    expected = sorted(c.case_key for c in cases)
    count, run_id = 3, "night-20261121"
    common = ["--run-id", run_id, "--db", url, "--device", "cpu", "--quiet"]
    others = [rooflab("run", str(spec), "--shard", f"{i}/{count}", *common) for i in range(count - 1)]
    victim = rooflab("run", str(spec), "--shard", f"{count - 1}/{count}", *common, start_new_session=True)
    stored = kill_after_first_result(url, run_id, f"{count - 1}/{count}", victim)
    for proc in others:
        code, out, err = finish(proc)
        assert code == 0, err + out

    before = results(url, run_id=run_id)
    victim_keys = set(before.loc[before["shard"] == f"{count - 1}/{count}", "case_key"])
    assert len(victim_keys) == stored >= 1
    assert len(before) < len(expected)
    row = run_row(url, run_id)
    assert row["status"] == "running" and row["n_shards"] == count and row["n_shards_finished"] == count - 1

    # resume the killed shard: only what it had not stored is measured
    again = rooflab("run", "--resume", run_id, "--shard", f"{count - 1}/{count}", "--db", url, "--device", "cpu",
                    "--quiet", "--json")
    code, out, err = finish(again)
    assert code == 0, err + out
    summary = json.loads(out)
    assert summary["already_measured"] == stored
    assert sum(summary["counts"].values()) == summary["selected_cases"] - stored

    after = results(url, run_id=run_id)
    keys = list(after["case_key"])
    assert Counter(keys).most_common(1)[0][1] == 1  # no duplicates
    assert sorted(keys) == expected  # the union is the expanded spec
    assert set(after["status"]) == {"ok"}
    # every result came from the shard the partition gives it (no earlier run: the op model)
    for i in range(count):
        mine = {c.case_key for c in select_shard(cases, i, count, estimate_cost_s)}
        assert set(after.loc[after["shard"] == f"{i}/{count}", "case_key"]) == mine
    # results stored before the kill are kept as they were
    old = before.set_index("case_key")["median_ms"]
    new = after.set_index("case_key")["median_ms"]
    assert all(new[k] == old[k] for k in victim_keys)
    row = run_row(url, run_id)
    assert row["status"] == "complete" and row["n_shards_finished"] == count


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


TINY_SPEC = """name: tiny
defaults:
  cache: [hot]
  timing: {warmup_ms: 0, warmup_calls: 1, min_samples: 3, min_time_ms: 0, max_time_ms: 5}
benchmarks:
  - name: copies
    op: copy
    params:
      n: [1024, 4096, 16384]
"""


def test_slurm_scripts_run_a_night_here(tmp_path):
    """The generated array script (tasks 0 and 1, as Slurm would start them) and then the finalising
    script, with the real rooflab: every flag they pass is one `rooflab run` and `nightly` accept."""
    from rooflab.db.query import results
    from rooflab.runners.orchestration import slurm, slurm_job

    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed")
    spec = write_spec(tmp_path, TINY_SPEC, "tiny")
    url = sqlite_url(tmp_path)
    # CPU nodes (--gpus-per-node 0): the array runs `--device cpu`; rooflab is this checkout's
    job = slurm_job.SlurmJob(spec_path=spec, suite="tiny", nodes=2, gpus_per_node=0, out_dir=tmp_path / "out",
                             rooflab=(sys.executable, "-m", "rooflab"), db_url=slurm_job.check_db_url(url),
                             run_id="tiny-night")
    array, finalize, *_ = slurm.write_scripts(job, tmp_path / "tiny.sbatch")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("ROOFLAB_DB", None)
    # two array tasks stand for two nodes: each has its own device locks
    tasks = [subprocess.Popen([bash, str(array)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(env, SLURM_ARRAY_TASK_ID=str(i),
                                       ROOFLAB_LOCK_DIR=str(tmp_path / f"node{i}-locks")))
             for i in range(2)]
    for task in tasks:
        code, out, err = finish(task)
        assert code == 0, err + out
    assert sorted(results(url, run_id="tiny-night")["case_key"]) == sorted(
        f"copy.v1:eager:float32:hot:launch:n={n}" for n in (1024, 4096, 16384))
    done = subprocess.run([bash, str(finalize)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((job.out_dir / "report" / "summary.json").read_text())
    assert summary["run_id"] == "tiny-night" and summary["run_status"] == "complete"
    assert summary["shards"] == {"expected": 2, "finished": ["0/2", "1/2"], "unfinished": [], "missing": [],
                                 "complete": True}
    assert summary["cases_missing"] == [] and summary["counts"]["ok"] == 3
    assert (job.out_dir / "report" / "index.html").is_file()

