"""A links night's and a bisection's Slurm scripts (runners/cluster/links.py): valid bash, their
directives, and what they run, executed with stand-ins for sbatch, srun, scontrol and rooflab (the
helpers of test_slurm.py); `rooflab slurm links` writes them."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rooflab.runners.cli.app import app
from rooflab.runners.cluster import links
from rooflab.suite.ops.pairs import PAIRS_OP
from tests.runners.cluster.test_slurm import (
    BASH,
    _calls,
    _fake_sbatch,
    _fake_step_commands,
    bash_n,
    directives,
    fake_rooflab,
    make_job,
)

pytestmark = pytest.mark.skipif(not BASH, reason="bash is not installed")


def _env(bin_dir: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **extra)
    env.pop("ROOFLAB_DB", None)
    return env


def test_a_links_night_measures_each_nodes_pairs_then_the_pairs_of_nodes(awkward_dir: Path) -> None:
    log = awkward_dir / "args.txt"
    job = make_job(awkward_dir, suite="links", nodes=3, gpus_per_node=4,
                   rooflab=(str(fake_rooflab(awkward_dir / "rl", log)),), run_id=None)
    array, pairs, submit = links.write_links_scripts(job, awkward_dir / "links.sbatch", "1")
    for path in (array, pairs, submit):
        bash_n(path)
    a, p = directives(array.read_text()), directives(pairs.read_text())
    assert a["--array"] == "0-2" and a["--nodes"] == "1" and a["--gpus-per-node"] == "4" and "--requeue" in a
    assert p["--nodes"] == "3" and p["--ntasks-per-node"] == "1" and "--exclusive" in p  # one rank per node
    # array task 2: every GPU of its node into a run of its own, one pair at a time as asked
    done = subprocess.run([BASH, str(array)], env=_env(awkward_dir, SLURM_ARRAY_TASK_ID="2",
                                                       ROOFLAB_RUN_ID="links-20261128"),
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == [
        "run", str(job.spec_path), "--devices", "all", "--run-id", "links-20261128-n2", "--pairs-at-once", "1",
        f"DB={job.db_url}"]
    # the pairs of nodes: srun over every node, one rank each, the matrices only, the rendezvous on node 1
    bin_dir, step_log = awkward_dir / "bin", awkward_dir / "srun.txt"
    _fake_step_commands(bin_dir, step_log, node_addr="10.1.0.7")
    done = subprocess.run([BASH, str(pairs)], env=_env(bin_dir, ROOFLAB_RUN_ID="links-20261128", SLURM_JOB_ID="7",
                                                       SLURM_JOB_NODELIST="gpu-node[07-09]"),
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert _calls(step_log) == [["--kill-on-bad-exit=1", "--nodes=3", "--ntasks-per-node=1", *job.rooflab,
                               "collectives", str(job.spec_path), "--run-id", "links-20261128", "-f",
                               f"op={PAIRS_OP}", "--pairs-at-once", "1", "MASTER=10.1.0.7:20007",
                               f"DB={job.db_url}"]]
    # the submit script: the array, then the pairs of nodes after it
    sbatch_log = awkward_dir / "sbatch.log"
    _fake_sbatch(bin_dir, sbatch_log)
    done = subprocess.run([BASH, str(submit)], env=_env(bin_dir), capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    first, second = _calls(sbatch_log)
    assert first[-2] == str(array) and second[-3:-1] == ["--dependency=afterany:1001", str(pairs)]
    assert "node array job 1001" in done.stdout and "pairs of nodes 1002" in done.stdout


def test_a_bisection_is_one_job_over_every_node_that_runs_rooflab_bisect(awkward_dir: Path) -> None:
    log = awkward_dir / "args.txt"
    job = make_job(awkward_dir, suite="links", nodes=8, gpus_per_node=0,
                   rooflab=(str(fake_rooflab(awkward_dir / "rl", log)),), run_id="b1")
    bisect, submit = links.write_bisect_scripts(job, awkward_dir / "bisect.sbatch")
    bash_n(bisect)
    bash_n(submit)
    d = directives(bisect.read_text())
    assert d["--nodes"] == "8" and d["--ntasks-per-node"] == str(links.BISECT_CPU_RANKS) and "--exclusive" in d
    done = subprocess.run([BASH, str(bisect)], env=_env(awkward_dir), capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == [
        "bisect", str(job.spec_path), "--run-id", "b1", "--ranks-per-node", "1", "--device", "cpu",
        "--out", str(job.out_dir / links.BISECT_JSON), f"DB={job.db_url}"]


def test_rooflab_slurm_links_writes_a_links_night_a_bisection_or_refuses(tmp_path: Path) -> None:
    runner = CliRunner()
    base = ["slurm", "links", "--nodes", "2", "--gpus-per-node", "8", "--out", str(tmp_path / "out"),
            "--db", f"sqlite:///{tmp_path / 'r.db'}", "--json"]
    night = json.loads(runner.invoke(app, base).output)
    assert set(night) == {"array", "pairs", "submit", "notes"} and Path(night["pairs"]).is_file()
    four = [*base[:2], "--nodes", "4", *base[4:]]
    found = json.loads(runner.invoke(app, [*four, "--bisect", "--output", str(tmp_path / "b.sbatch")]).output)
    assert set(found) == {"bisect", "submit", "notes"} and Path(found["bisect"]).name == "b.sbatch"
    two = runner.invoke(app, [*base, "--bisect", "--output", str(tmp_path / "two.sbatch")])
    assert two.exit_code == 2 and "--nodes 2: 2 node(s): a bisection needs 4 or more" in two.output, two.output
    assert "Traceback" not in two.output and not (tmp_path / "two.sbatch").exists()
    sharded = json.loads(runner.invoke(app, [*base, "--no-links", "--output", str(tmp_path / "n.sbatch")]).output)
    assert set(sharded) == {"array", "collectives", "finalize", "submit", "notes"}
    bad = runner.invoke(app, [*base, "--pairs-at-once", "0", "--output", str(tmp_path / "x.sbatch")])
    assert bad.exit_code == 2 and "--pairs-at-once '0': all, or a whole number >= 1" in bad.output
    assert not (tmp_path / "x.sbatch").exists()
