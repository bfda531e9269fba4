"""`rooflab slurm health`: the scripts of a fleet's health night (runners/cluster/health.py): valid
bash, an array that runs the whole suite on every device of each node into a run per node, a fleet
job after it that writes fleet.json and exits by --fleet-fail-on, and the submit script's chain."""
from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rooflab.runners.cli.app import app
from rooflab.runners.cluster import health
from tests.runners.cluster.test_slurm import (
    BASH,
    _calls,
    _fake_sbatch,
    bash_n,
    directives,
    fake_rooflab,
    make_job,
)

pytestmark = pytest.mark.skipif(not BASH, reason="bash is not installed")


@pytest.fixture()
def awkward_dir(tmp_path: Path) -> Path:
    """A directory whose name has spaces, quotes, a dollar, a percent and a hash (as test_slurm.py's)."""
    path = tmp_path / "night run's \"dir\" $HOME %x #1"
    path.mkdir()
    return path


def test_the_cli_writes_a_health_night_for_the_health_spec(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["slurm", "health", "--nodes", "3", "--gpus-per-node", "8", "--out", str(out),
                                      "--db", "postgresql://rooflab@db/rooflab", "--fleet-fail-on", "slow"])
    assert result.exit_code == 0, result.output
    array, fleet, submit = (out / f"rooflab-health{s}" for s in (".sbatch", ".fleet.sbatch", ".submit.sh"))
    for path in (array, fleet, submit):
        assert str(path) in result.output
        bash_n(path)
    assert not (out / "rooflab-health.collectives.sbatch").exists()  # nothing of a sharded night
    d = directives(array.read_text())
    assert d["--array"] == "0-2" and d["--gpus-per-node"] == "8" and "--exclusive" in d
    assert "fleet --suite health --fail-on slow" in fleet.read_text()
    # --sharded: the same spec as a sharded night; --fleet: any spec as a health night
    sharded = CliRunner().invoke(app, ["slurm", "health", "--nodes", "2", "--gpus-per-node", "8", "--out",
                                       str(tmp_path / "s"), "--db", "postgresql://rooflab@db/rooflab", "--sharded"])
    assert sharded.exit_code == 0 and (tmp_path / "s" / "rooflab-health.collectives.sbatch").exists()
    quick = CliRunner().invoke(app, ["slurm", "quick", "--nodes", "2", "--gpus-per-node", "0", "--out",
                                     str(tmp_path / "q"), "--db", "postgresql://rooflab@db/rooflab", "--fleet"])
    assert quick.exit_code == 0 and (tmp_path / "q" / "rooflab-quick.fleet.sbatch").exists()
    bad = CliRunner().invoke(app, ["slurm", "health", "--nodes", "2", "--gpus-per-node", "8", "--out",
                                   str(tmp_path / "b"), "--fleet-fail-on", "regression"])
    assert bad.exit_code == 2 and "--fleet-fail-on 'regression' is not allowed" in bad.output
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("task", [0, 2])
def test_each_node_measures_the_whole_suite_on_all_its_devices_in_a_run_of_its_own(awkward_dir: Path,
                                                                                     task: int) -> None:
    log = awkward_dir / "args.txt"
    job = make_job(awkward_dir, suite="health", nodes=3,
                   rooflab=(str(fake_rooflab(awkward_dir / "venv bin" / "rooflab", log)),))
    array, _, _ = health.write_health_scripts(job, awkward_dir / "h.sbatch", "drain")
    env = dict(os.environ, SLURM_ARRAY_TASK_ID=str(task), ROOFLAB_RUN_ID="health-20261121")
    env.pop("ROOFLAB_DB", None)
    done = subprocess.run([BASH, str(array)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == ["run", str(job.spec_path), "--devices", "all", "--run-id",
                                            f"health-20261121-n{task}", f"DB={job.db_url}"]


def test_the_fleet_job_writes_fleet_json_then_exits_by_its_fail_on(awkward_dir: Path) -> None:
    calls = awkward_dir / "calls.txt"
    rooflab = awkward_dir / "rooflab"
    rooflab.write_text(f"""#!/bin/bash
echo "$*" >> {shlex.quote(str(calls))}
if [[ " $* " == *" --json "* ]]; then echo '{{"devices": []}}'; exit 0; fi
exit 1
""")
    rooflab.chmod(0o755)
    job = make_job(awkward_dir, suite="health", rooflab=(str(rooflab),))
    _, fleet, _ = health.write_health_scripts(job, awkward_dir / "h.sbatch", "suspect")
    job.out_dir.mkdir(parents=True)  # the submit script makes it
    env = dict(os.environ, ROOFLAB_RUN_ID="health-20261121")
    done = subprocess.run([BASH, str(fleet)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1  # the text call's exit code: a device at --fail-on suspect or worse
    assert calls.read_text().splitlines() == ["fleet --suite health --fail-on never --json",
                                              "fleet --suite health --fail-on suspect"]
    assert (job.out_dir / "fleet.json").read_text() == '{"devices": []}\n'


def test_the_submit_script_chains_the_fleet_job_after_the_array(awkward_dir: Path) -> None:
    job = make_job(awkward_dir, suite="health", run_id=None)
    array, fleet, submit = health.write_health_scripts(job, awkward_dir / "h.sbatch", "drain")
    bin_dir = awkward_dir / "bin"
    bin_dir.mkdir()
    log = awkward_dir / "sbatch.log"
    _fake_sbatch(bin_dir, log)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", ROOFLAB_RUN_ID="health-x")
    done = subprocess.run([BASH, str(submit)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    first, second = _calls(log)
    assert first[:3] == ["--parsable", "--export=ALL,ROOFLAB_RUN_ID=health-x", str(array)]
    assert second[:4] == ["--parsable", "--export=ALL,ROOFLAB_RUN_ID=health-x", "--dependency=afterany:1001",
                          str(fleet)]
    assert "rooflab run health-x: health array job 1001 (4 nodes x 8 GPUs), fleet job 1002" in done.stdout
