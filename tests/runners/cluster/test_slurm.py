"""Slurm scripts: valid bash, the directives the arguments ask for, safe quoting, and what they run.

The scripts are executed with stand-ins for `sbatch` and `rooflab` (small scripts on PATH that
record their arguments), so the test sees the exact argument vectors a cluster would.
"""
from __future__ import annotations

import os
import random
import shlex
import shutil
import stat
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from rooflab.runners.cluster import slurm, slurm_job
from rooflab.runners.cluster.slurm_job import SlurmArgumentError, SlurmJob
from rooflab.suite.errors import SpecError

BASH = shutil.which("bash") or ""  # "" without bash: then every test here is skipped
pytestmark = pytest.mark.skipif(not BASH, reason="bash is not installed")


def sbatch_arguments(line: str) -> list[str]:
    """Split an #SBATCH line the way sbatch does (src/sbatch/opt.c `_get_argument`): whitespace
    separates, single or double quotes group, a backslash escapes the next character, an unquoted
    `#` starts a comment."""
    args, current, quote, escape, have = [], [], "", False, False
    for ch in line:
        if escape:
            current.append(ch)
            escape, have = False, True
        elif ch == "\\":
            escape = True
        elif quote:
            if ch == quote:
                quote = ""
            else:
                current.append(ch)
        elif ch in "\"'":
            quote, have = ch, True
        elif ch == "#":
            break
        elif ch.isspace():
            if have or current:
                args.append("".join(current))
            current, have = [], False
        else:
            current.append(ch)
            have = True
    assert not quote, f"unterminated quote in {line!r}"
    if have or current:
        args.append("".join(current))
    return args


def directives(script: str) -> dict[str, str | None]:
    """`#SBATCH --name=value` lines before the first command -> {name: value}."""
    out: dict[str, str | None] = {}
    for line in script.splitlines()[1:]:
        if not line.startswith("#"):
            break
        if line.startswith("#SBATCH "):
            for arg in sbatch_arguments(line[len("#SBATCH "):]):
                name, _, value = arg.partition("=")
                out[name] = value if _ else None
    return out


def slurm_filename(pattern: str | None, **values: str) -> str:
    """Expand a Slurm filename pattern (%A %a %j %x, %% is a literal %); `pattern` is a directive's
    value, which must be there."""
    assert pattern is not None, "the directive has no value"
    out, i = [], 0
    while i < len(pattern):
        if pattern[i] == "%" and i + 1 < len(pattern):
            code = pattern[i + 1]
            out.append("%" if code == "%" else values[code])
            i += 2
        else:
            out.append(pattern[i])
            i += 1
    return "".join(out)


def make_job(base: Path, **overrides: Any) -> SlurmJob:
    fields: dict[str, Any] = dict(
        spec_path=base / "my specs" / "nightly spec.yaml",
        suite="nightly",
        nodes=4,
        gpus_per_node=8,
        out_dir=base / "out dir",
        rooflab=(str(base / "venv bin" / "rooflab"),),
        db_url="postgresql+psycopg://rooflab@db.example:5432/rooflab",
        time_limit="03:30:00",
        partition="gpu-h100",
        account="perf_team",
    )
    fields.update(overrides)
    return SlurmJob(**fields)


def bash() -> str:
    assert BASH is not None  # the module is skipped without bash
    return BASH


def bash_n(path: Path) -> None:
    assert BASH is not None  # the module is skipped without bash
    done = subprocess.run([BASH, "-n", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def recorder(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def fake_rooflab(path: Path, log: Path) -> Path:
    """Records each argument on its own line (NUL-free), then ROOFLAB_DB."""
    return recorder(path, f'for a in "$@"; do printf "%s\\n" "$a"; done > {shlex.quote(str(log))}\n'
                          f'printf "DB=%s\\n" "$ROOFLAB_DB" >> {shlex.quote(str(log))}\n')


def test_scripts_are_valid_bash_and_carry_the_requested_directives(awkward_dir):
    job = make_job(awkward_dir, nodes=6, gpus_per_node=4)
    array, finalize, submit, collectives = slurm.write_scripts(job, awkward_dir / "nightly.sbatch")
    assert finalize.name == "nightly.finalize.sbatch" and submit.name == "nightly.submit.sh"
    assert collectives.name == "nightly.collectives.sbatch"
    for path in (array, finalize, submit, collectives):
        bash_n(path)
    assert os.access(submit, os.X_OK)

    d = directives(array.read_text())
    assert d["--array"] == "0-5"
    assert d["--gpus-per-node"] == "4"
    assert d["--nodes"] == "1" and d["--ntasks"] == "1"
    assert "--exclusive" in d and d["--exclusive"] is None
    assert d["--time"] == "03:30:00"
    assert d["--partition"] == "gpu-h100" and d["--account"] == "perf_team"
    assert d["--job-name"] == "rooflab-nightly"
    values = dict(x="rooflab-nightly", A="77", a="3", j="78")
    expected_logs = job.out_dir / "logs"
    assert Path(slurm_filename(d["--output"], **values)) == expected_logs / "rooflab-nightly-77_3.out"
    assert Path(slurm_filename(d["--error"], **values)) == expected_logs / "rooflab-nightly-77_3.err"

    c = directives(collectives.read_text())  # one step over every node and GPU: one task per GPU
    assert c["--nodes"] == "6" and c["--ntasks-per-node"] == "4" and c["--gpus-per-node"] == "4"
    assert "--array" not in c and "--exclusive" in c and c["--time"] == "01:00:00"
    assert c["--partition"] == "gpu-h100" and c["--account"] == "perf_team"

    f = directives(finalize.read_text())
    assert "--array" not in f and "--gpus-per-node" not in f and "--exclusive" not in f
    assert f["--partition"] == "gpu-h100" and f["--account"] == "perf_team"
    assert Path(slurm_filename(f["--output"], x="fin", j="78")) == expected_logs / "fin-78.out"


def test_paths_with_percent_and_quotes_survive_sbatch_parsing(awkward_dir):
    job = make_job(awkward_dir, out_dir=awkward_dir / "logs 100% \"x\"")
    d = directives(slurm.render_array(job))
    got = slurm_filename(d["--output"], x="n", A="1", a="0")
    assert got == str(job.out_dir / "logs" / "n-1_0.out")


@pytest.mark.parametrize("task", [0, 3])
def test_array_task_runs_its_shard_on_all_gpus_under_the_run_id(awkward_dir, task):
    log = awkward_dir / "args.txt"
    job = make_job(awkward_dir, rooflab=(str(fake_rooflab(awkward_dir / "venv bin" / "rooflab", log)),))
    array, *_ = slurm.write_scripts(job, awkward_dir / "n.sbatch")
    env = dict(os.environ, SLURM_ARRAY_TASK_ID=str(task), ROOFLAB_RUN_ID="nightly-20261121",
               CUDA_VISIBLE_DEVICES="0,1,2,3,4,5,6,7")
    env.pop("ROOFLAB_DB", None)
    done = subprocess.run([BASH, str(array)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr and "GPUs 0,1,2,3,4,5,6,7" in done.stdout
    lines = log.read_text().splitlines()
    assert lines[:-1] == [
        "run", str(job.spec_path), "--shard", f"{task}/4", "--devices", "all", "--run-id", "nightly-20261121",
    ]
    assert lines[-1] == f"DB={job.db_url}"
    # the database URL is not on the command line
    assert not any("postgresql" in a for a in lines[:-1])
    # fewer GPUs than requested: a warning in the log, the shard still runs
    env["CUDA_VISIBLE_DEVICES"] = "0,1"
    done = subprocess.run([BASH, str(array)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "8 GPUs requested, CUDA_VISIBLE_DEVICES lists 2" in done.stderr
    env.pop("CUDA_VISIBLE_DEVICES")
    done = subprocess.run([BASH, str(array)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "lists 0 (unset)" in done.stderr


def test_array_task_outside_the_range_or_outside_slurm_stops(awkward_dir):
    log = awkward_dir / "args.txt"
    job = make_job(awkward_dir, rooflab=(str(fake_rooflab(awkward_dir / "rl", log)),))
    text = slurm.render_array(job)
    script = awkward_dir / "a.sbatch"
    script.write_text(text)
    env = dict(os.environ, SLURM_ARRAY_TASK_ID="4", ROOFLAB_RUN_ID="r1")
    done = subprocess.run([BASH, str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "outside 0..3" in done.stderr
    env.pop("SLURM_ARRAY_TASK_ID")
    done = subprocess.run([BASH, str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "sbatch" in done.stderr
    assert not log.exists()


def _fake_sbatch(bin_dir: Path, log: Path) -> None:
    """Records each call's arguments (one per line, calls separated by ---) and prints a job id."""
    counter = bin_dir / "jobid"
    counter.write_text("1000")
    q = shlex.quote
    recorder(bin_dir / "sbatch", f"""
n=$(<{q(str(counter))}); n=$((n + 1)); echo "$n" > {q(str(counter))}
{{ for a in "$@"; do printf "%s\\n" "$a"; done; echo "ROOFLAB_RUN_ID_ENV=${{ROOFLAB_RUN_ID:-}}"; \
echo ---; }} >> {q(str(log))}
echo "$n;cluster1"
""")


def _calls(log: Path) -> list[list[str]]:
    calls: list[list[str]] = []
    current: list[str] = []
    for line in log.read_text().splitlines():
        if line == "---":
            calls.append(current)
            current = []
        else:
            current.append(line)
    return calls


def test_submit_script_submits_the_array_the_collective_step_then_a_dependent_finalising_job(awkward_dir):
    job = make_job(awkward_dir, run_id=None)
    array, finalize, submit, collectives = slurm.write_scripts(job, awkward_dir / "night.sbatch")
    bin_dir = awkward_dir / "bin"
    bin_dir.mkdir()
    log = awkward_dir / "sbatch.log"
    _fake_sbatch(bin_dir, log)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    env.pop("ROOFLAB_RUN_ID", None)
    today = datetime.now(UTC).strftime("%Y%m%d")
    done = subprocess.run([BASH, str(submit)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    first, second, third = _calls(log)
    run_id = f"nightly-{today}"
    assert first == ["--parsable", f"--export=ALL,ROOFLAB_RUN_ID={run_id}", str(array), "ROOFLAB_RUN_ID_ENV="]
    assert second == [
        "--parsable", f"--export=ALL,ROOFLAB_RUN_ID={run_id}", "--dependency=afterany:1001", str(collectives),
        "ROOFLAB_RUN_ID_ENV=",
    ]
    assert third == [
        "--parsable", f"--export=ALL,ROOFLAB_RUN_ID={run_id}", "--dependency=afterany:1002", str(finalize),
        "ROOFLAB_RUN_ID_ENV=",
    ]
    assert (job.out_dir / "logs").is_dir()  # Slurm would not create it
    assert "array job 1001" in done.stdout and "collective step 1002" in done.stdout
    assert "finalising job 1003" in done.stdout


def _fake_step_commands(bin_dir: Path, log: Path, *, node_addr: str, failures: int = 0) -> None:
    """srun records its arguments and the rendezvous it passes on (calls separated by ---) and
    fails its first `failures` calls with exit code 1; scontrol lists the nodes and shows a node
    with `node_addr` as its NodeAddr (none when empty)."""
    q = shlex.quote
    counter = bin_dir / "srun-calls"
    recorder(bin_dir / "srun", f"""n=$(( $(cat {q(str(counter))} 2>/dev/null || echo 0) + 1 ))
echo $n > {q(str(counter))}
{{ for a in "$@"; do printf "%s\\n" "$a"; done
printf "MASTER=%s:%s\\n" "$MASTER_ADDR" "$MASTER_PORT"; printf "DB=%s\\n" "$ROOFLAB_DB"; echo ---; }} >> {q(str(log))}
(( n > {failures} ))
""")
    addr = f"   NodeAddr={node_addr} NodeHostName=gpu-node07 Version=22.05.8" if node_addr else ""
    recorder(bin_dir / "scontrol", f"""if [[ "$1 $2" == "show hostnames" ]]
then printf "gpu-node07\\ngpu-node08\\ngpu-node09\\n"
elif [[ "$1 $2 $3" == "show node gpu-node07" ]]; then printf "NodeName=gpu-node07 Arch=x86_64\\n{addr}\\n"
else exit 1; fi
""")


def _run_step(awkward_dir: Path, job: SlurmJob, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    *_, collectives = slurm.write_scripts(job, awkward_dir / "n.sbatch")
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", ROOFLAB_RUN_ID="nightly-20261121",
               SLURM_JOB_ID="123456", SLURM_JOB_NODELIST="gpu-node[07-09]")
    env.pop("ROOFLAB_DB", None)
    return subprocess.run([bash(), str(collectives)], env=env, capture_output=True, text=True, timeout=30)


def test_collective_step_runs_one_rank_per_gpu_over_every_node_with_a_rendezvous(awkward_dir: Path) -> None:
    log = awkward_dir / "args.txt"
    job = make_job(awkward_dir, nodes=3, gpus_per_node=4, rooflab=(str(awkward_dir / "venv bin" / "rooflab"),))
    bin_dir = awkward_dir / "bin"
    _fake_step_commands(bin_dir, log, node_addr="10.1.0.7")
    done = _run_step(awkward_dir, job, bin_dir)
    assert done.returncode == 0, done.stderr
    # the rendezvous is the first node's NodeAddr (where Slurm itself reaches it), not its name
    assert "collectives on 12 ranks, rendezvous 10.1.0.7:23456" in done.stdout
    assert _calls(log) == [[
        "--kill-on-bad-exit=1", "--nodes=3", "--ntasks-per-node=4", *job.rooflab, "collectives", str(job.spec_path),
        "--run-id", "nightly-20261121", "MASTER=10.1.0.7:23456", f"DB={job.db_url}",
    ]]
    # a node without a NodeAddr line: its name
    (bin_dir / "srun-calls").unlink()
    log.unlink()
    _fake_step_commands(bin_dir, log, node_addr="")
    done = _run_step(awkward_dir, job, bin_dir)
    assert done.returncode == 0 and "rendezvous gpu-node07:23456" in done.stdout, done.stderr


@pytest.mark.parametrize("failures,starts,code", [(1, 2, 1), (2, 3, 1), (3, 3, 1)])
def test_collective_step_starts_again_after_a_fault(awkward_dir: Path, failures: int, starts: int, code: int) -> None:
    """A start that ends in a fault is followed by another (each measures what the run still lacks),
    at most COLLECTIVE_STARTS in all; the job's exit code is the first fault's."""
    log = awkward_dir / "args.txt"
    job = make_job(awkward_dir, nodes=2, gpus_per_node=0)
    bin_dir = awkward_dir / "bin"
    _fake_step_commands(bin_dir, log, node_addr="10.1.0.7", failures=failures)
    done = _run_step(awkward_dir, job, bin_dir)
    assert slurm.COLLECTIVE_STARTS == 3
    assert done.returncode == code
    calls = _calls(log)
    assert len(calls) == starts and all(call == calls[0] for call in calls)
    for start in range(1, min(failures, 3) + 1):
        assert f"collective step start {start} of 3 ended with exit code 1" in done.stderr


def test_cpu_node_scripts_measure_on_the_cpu_and_run_collectives_over_gloo(awkward_dir: Path) -> None:
    log = awkward_dir / "args.txt"
    job = make_job(awkward_dir, nodes=3, gpus_per_node=0, rooflab=(str(fake_rooflab(awkward_dir / "rl", log)),))
    array, _, submit, collectives = slurm.write_scripts(job, awkward_dir / "cpu.sbatch")
    for path in (array, collectives, submit):
        bash_n(path)
    d = directives(array.read_text())
    assert "--gpus-per-node" not in d and "--gres" not in d
    assert d["--array"] == "0-2" and "--exclusive" in d and "--requeue" in d and d["--open-mode"] == "append"
    c = directives(collectives.read_text())
    assert "--gpus-per-node" not in c and "--exclusive" in c
    assert c["--nodes"] == "3" and c["--ntasks-per-node"] == "1"
    assert "(3 CPU nodes)" in submit.read_text() and "GPUs)" not in submit.read_text()
    # an array task with no GPU at all: no warning, the shard on the CPU
    env = dict(os.environ, SLURM_ARRAY_TASK_ID="2", ROOFLAB_RUN_ID="nightly-20261121")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    done = subprocess.run([bash(), str(array)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr and "CPU" in done.stdout
    assert log.read_text().splitlines()[:-1] == [
        "run", str(job.spec_path), "--shard", "2/3", "--device", "cpu", "--run-id", "nightly-20261121",
    ]
    # the collective step: one gloo rank per node, told to stay on the CPU
    step_log = awkward_dir / "srun.txt"
    bin_dir = awkward_dir / "bin"
    _fake_step_commands(bin_dir, step_log, node_addr="10.1.0.7")
    done = _run_step(awkward_dir, job, bin_dir)
    assert done.returncode == 0, done.stderr
    assert "collectives on 3 ranks" in done.stdout
    assert _calls(step_log) == [[
        "--kill-on-bad-exit=1", "--nodes=3", "--ntasks-per-node=1", *job.rooflab, "collectives", str(job.spec_path),
        "--device", "cpu", "--run-id", "nightly-20261121", "MASTER=10.1.0.7:23456", f"DB={job.db_url}",
    ]]


def test_gpu_scripts_keep_their_gpus_exclusivity_and_gpu_check(awkward_dir: Path) -> None:
    job = make_job(awkward_dir, nodes=2, gpus_per_node=8)
    array, _, _, collectives = slurm.write_scripts(job, awkward_dir / "gpu.sbatch")
    a, c = directives(array.read_text()), directives(collectives.read_text())
    assert a["--gpus-per-node"] == "8" and "--exclusive" in a
    assert c["--gpus-per-node"] == "8" and c["--ntasks-per-node"] == "8" and "--exclusive" in c
    assert "CUDA_VISIBLE_DEVICES" in array.read_text() and "--devices all" in array.read_text()
    assert "--device cpu" not in array.read_text() + collectives.read_text()


def test_python_module_command_runs_this_checkout(awkward_dir: Path) -> None:
    """`--python PY`: the scripts start `PY -m rooflab`, with the submitting environment's PYTHONPATH."""
    log = awkward_dir / "args.txt"
    python = recorder(awkward_dir / "py bin" / "python",
                      f'{{ printf "PYTHONPATH=%s\\n" "$PYTHONPATH"; for a in "$@"; do printf "%s\\n" "$a"; done; }}'
                      f' > {shlex.quote(str(log))}\n')
    job = make_job(awkward_dir, gpus_per_node=0, rooflab=(str(python), "-m", "rooflab"))
    _, finalize, _, _ = slurm.write_scripts(job, awkward_dir / "n.sbatch")
    env = dict(os.environ, ROOFLAB_RUN_ID="nightly-20261121", PYTHONPATH=str(awkward_dir / "checkout"))
    done = subprocess.run([bash(), str(finalize)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    lines = log.read_text().splitlines()
    assert lines[:4] == [f"PYTHONPATH={awkward_dir / 'checkout'}", "-m", "rooflab", "nightly"]


def test_fixed_run_id_and_a_bad_run_id_from_the_environment(awkward_dir):
    job = make_job(awkward_dir, run_id="night-7")
    _, finalize, submit, _ = slurm.write_scripts(job, awkward_dir / "n.sbatch")
    bin_dir = awkward_dir / "bin"
    bin_dir.mkdir()
    log = awkward_dir / "sbatch.log"
    _fake_sbatch(bin_dir, log)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", ROOFLAB_RUN_ID="ignored")
    done = subprocess.run([BASH, str(submit)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert all("--export=ALL,ROOFLAB_RUN_ID=night-7" in call for call in _calls(log))
    # a derived-id script refuses an unsafe ROOFLAB_RUN_ID before submitting anything
    job2 = make_job(awkward_dir, run_id=None)
    _, _, submit2, _ = slurm.write_scripts(job2, awkward_dir / "m.sbatch")
    log.unlink()
    env["ROOFLAB_RUN_ID"] = "a,b c"
    done = subprocess.run([BASH, str(submit2)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "run id" in done.stderr
    assert not log.exists()


def test_finalising_job_runs_regressions_report_and_summary(awkward_dir):
    log = awkward_dir / "args.txt"
    job = make_job(awkward_dir, rooflab=(str(fake_rooflab(awkward_dir / "rl", log)),), fail_on="suspect")
    _, finalize, *_ = slurm.write_scripts(job, awkward_dir / "n.sbatch")
    env = dict(os.environ, ROOFLAB_RUN_ID="nightly-20261121")
    done = subprocess.run([BASH, str(finalize)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines()[:-1] == [
        "nightly", str(job.spec_path), "--skip-run", "--run-id", "nightly-20261121",
        "--out", str(job.out_dir / "report"), "--fail-on", "suspect", "--by", "model",
    ]


def test_db_file_is_read_by_the_job_and_never_written_into_the_script(awkward_dir):
    secret = "postgresql+psycopg://rooflab:s3cr3t-pw@db.example/rooflab"
    db_file = awkward_dir / "db url.txt"
    db_file.write_text(secret)
    log = awkward_dir / "args.txt"
    job = make_job(awkward_dir, db_url=None, db_file=db_file, rooflab=(str(fake_rooflab(awkward_dir / "rl", log)),))
    paths = slurm.write_scripts(job, awkward_dir / "n.sbatch")
    assert all("s3cr3t" not in p.read_text() for p in paths)
    env = dict(os.environ, SLURM_ARRAY_TASK_ID="1", ROOFLAB_RUN_ID="r")
    done = subprocess.run([BASH, str(paths[0])], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    lines = log.read_text().splitlines()
    assert lines[-1] == f"DB={secret}"
    assert "s3cr3t" not in done.stdout + done.stderr


def test_environment_pass_through_needs_rooflab_db_at_submission(awkward_dir):
    job = make_job(awkward_dir, db_url=None)
    _, _, submit, _ = slurm.write_scripts(job, awkward_dir / "n.sbatch")
    bin_dir = awkward_dir / "bin"
    bin_dir.mkdir()
    log = awkward_dir / "sbatch.log"
    _fake_sbatch(bin_dir, log)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    env.pop("ROOFLAB_DB", None)
    done = subprocess.run([BASH, str(submit)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "ROOFLAB_DB" in done.stderr
    assert not log.exists()
    env["ROOFLAB_DB"] = "postgresql://u:pw@h/db"
    done = subprocess.run([BASH, str(submit)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert len(_calls(log)) == 3


def test_password_in_url_is_refused():
    with pytest.raises(SlurmArgumentError, match="password"):
        slurm_job.check_db_url("postgresql://rooflab:hunter2@db/rooflab")
    assert slurm_job.check_db_url("postgresql://rooflab@db/rooflab") == "postgresql+psycopg://rooflab@db/rooflab"


def test_relative_sqlite_path_becomes_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert slurm_job.check_db_url("sqlite:///results.db") == f"sqlite:///{tmp_path / 'results.db'}"
    with pytest.raises(SlurmArgumentError):
        slurm_job.check_db_url("sqlite://")


@pytest.mark.parametrize(
    "overrides,fragment",
    [
        ({"nodes": 0}, "--nodes"),
        ({"gpus_per_node": -1}, "--gpus-per-node"),
        ({"rooflab": ()}, "command that starts rooflab"),
        ({"time_limit": "4h"}, "--time"),
        ({"time_limit": "00:00:00"}, "above zero"),
        ({"time_limit": "01:60:00"}, "--time"),
        ({"finalize_time_limit": "1:00"}, "--finalize-time"),
        ({"partition": "gpu main"}, "--partition"),
        ({"account": "a;rm -rf"}, "--account"),
        ({"run_id": "night 1"}, "--run-id"),
        ({"run_id": "a,b"}, "--run-id"),
        ({"fail_on": "always"}, "--fail-on"),
        ({"db_file": Path("/x")}, "at most one"),
        ({"out_dir": Path("/tmp/a\nb")}, "control characters"),
        ({"db_url": "postgresql://u:p@h/d"}, "password"),
    ],
)
def test_invalid_arguments_are_refused(tmp_path, overrides, fragment):
    with pytest.raises(SlurmArgumentError, match=fragment) as info:
        slurm_job.validate(make_job(tmp_path, **overrides))
    assert isinstance(info.value, SpecError)  # exit code 2 through the CLI


@pytest.mark.parametrize("value", ["04:00:00", "1-00:00:00", "100:00:00", "0:05:00"])
def test_valid_time_limits(value):
    assert slurm_job.check_time(value) == value


CLI_SPEC = """name: nightly
benchmarks:
  - name: copies
    op: copy
    params:
      n: [1024, 2048, 4096]
"""


def _cli(*args: str):
    from typer.testing import CliRunner

    from rooflab.runners.cli.app import app

    return CliRunner().invoke(app, ["slurm", *args])


def test_cli_writes_four_scripts_for_the_spec(awkward_dir):
    spec = awkward_dir / "nightly spec.yaml"
    spec.write_text(CLI_SPEC)
    venv = awkward_dir / "venv"
    fake_rooflab(venv / "bin" / "rooflab", awkward_dir / "unused.txt")
    out = awkward_dir / "night out"
    result = _cli(str(spec), "--nodes", "2", "--gpus-per-node", "8", "--db", "postgresql://rooflab@db/rooflab",
                  "--out", str(out), "--venv", str(venv), "--run-id", "n-1", "--time", "02:00:00")
    assert result.exit_code == 0, result.output
    array = out / "rooflab-nightly.sbatch"
    for path in (array, out / "rooflab-nightly.finalize.sbatch", out / "rooflab-nightly.submit.sh",
                 out / "rooflab-nightly.collectives.sbatch"):
        assert path.is_file() and str(path) in result.output
        bash_n(path)
    text = array.read_text()
    d = directives(text)
    assert d["--array"] == "0-1" and d["--gpus-per-node"] == "8" and d["--time"] == "02:00:00"
    assert f"SPEC={shlex.quote(str(spec.resolve()))}" in text
    assert f"ROOFLAB=({shlex.quote(str((venv / 'bin' / 'rooflab').resolve()))})" in text
    assert "RUN_ID=n-1" in text
    assert "note: the spec has 3 cases" not in result.output


@pytest.mark.parametrize("by", [None, "device", "model"])
def test_cli_finalising_job_judges_by_model_unless_asked_by_device(tmp_path: Path, by: str | None) -> None:
    """A sharded night's finalising job runs `rooflab nightly --by model` (which node measures a case
    changes from night to night), `--by device` when asked: the argument vector the written script runs."""
    spec = tmp_path / "s.yaml"
    spec.write_text(CLI_SPEC)
    log = tmp_path / "args.txt"
    fake_rooflab(tmp_path / "venv" / "bin" / "rooflab", log)
    out = tmp_path / "out"
    result = _cli(str(spec), "--nodes", str(random.randint(2, 8)), "--gpus-per-node", "8", "--db",
                  "postgresql://rooflab@db/rooflab", "--out", str(out), "--venv", str(tmp_path / "venv"),
                  *(["--by", by] if by else []))
    assert result.exit_code == 0, result.output
    finalize = out / "rooflab-nightly.finalize.sbatch"
    bash_n(finalize)
    done = subprocess.run([bash(), str(finalize)], env=dict(os.environ, ROOFLAB_RUN_ID="nightly-20261129"),
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    args = log.read_text().splitlines()[:-1]
    assert args[0] == "nightly" and args.count("--by") == 1
    assert args[args.index("--by") + 1] == (by or "model")
    assert f"--by {by or 'model'}: a series is a case on" in finalize.read_text()  # the comment says why


def test_cli_health_night_takes_no_by_model(tmp_path: Path) -> None:
    """A health night judges every device against its siblings: `--by model` is refused, nothing written."""
    spec = tmp_path / "s.yaml"
    spec.write_text(CLI_SPEC)
    out = tmp_path / "out"
    result = _cli(str(spec), "--nodes", "2", "--gpus-per-node", "0", "--db", "postgresql://rooflab@db/rooflab",
                  "--out", str(out), "--fleet", "--by", "model")
    assert result.exit_code == 2 and "--by model: a health night" in result.output, result.output
    assert "Traceback" not in result.output and not out.exists()
    result = _cli(str(spec), "--nodes", "2", "--gpus-per-node", "0", "--db", "postgresql://rooflab@db/rooflab",
                  "--out", str(out), "--fleet", "--by", "device")
    assert result.exit_code == 0, result.output
    assert "rooflab nightly" not in (out / "rooflab-nightly.fleet.sbatch").read_text()


def test_cli_cpu_nodes_with_this_python(tmp_path: Path) -> None:
    import sys

    spec = tmp_path / "s.yaml"
    spec.write_text(CLI_SPEC)
    out = tmp_path / "out"
    result = _cli(str(spec), "--nodes", "2", "--gpus-per-node", "0", "--db", "postgresql://rooflab@db/rooflab",
                  "--out", str(out), "--python", sys.executable)
    assert result.exit_code == 0, result.output
    array = (out / "rooflab-nightly.sbatch").read_text()
    assert "--gpus-per-node" not in directives(array) and "--device cpu" in array
    assert f"ROOFLAB=({shlex.quote(sys.executable)} -m rooflab)" in array
    collectives = directives((out / "rooflab-nightly.collectives.sbatch").read_text())
    assert collectives["--ntasks-per-node"] == "1" and "--gpus-per-node" not in collectives


def test_cli_notes_more_nodes_than_cases_and_sqlite_on_many_nodes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "s.yaml"
    spec.write_text(CLI_SPEC)
    result = _cli(str(spec), "--nodes", "5", "--gpus-per-node", "1", "--db", "sqlite:///r.db",
                  "--output", str(tmp_path / "job.sbatch"))
    assert result.exit_code == 0, result.output
    assert "5 shards" in result.output and "SQLite" in result.output
    assert f"export ROOFLAB_DB=sqlite:///{tmp_path / 'r.db'}" in (tmp_path / "job.sbatch").read_text()
    assert (tmp_path / "job.finalize.sbatch").is_file() and (tmp_path / "job.submit.sh").is_file()


def test_cli_json_names_the_four_scripts_and_the_notes(tmp_path: Path) -> None:
    import json

    spec = tmp_path / "s.yaml"
    spec.write_text(CLI_SPEC)
    nodes = random.randint(4, 9)  # more nodes than the spec's 3 cases: a note
    result = _cli(str(spec), "--nodes", str(nodes), "--gpus-per-node", "0", "--db", "postgresql://rooflab@db/rooflab",
                  "--out", str(tmp_path / "out"), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    stem = tmp_path / "out" / "rooflab-nightly"
    assert data == {"array": f"{stem}.sbatch", "collectives": f"{stem}.collectives.sbatch",
                    "finalize": f"{stem}.finalize.sbatch", "submit": f"{stem}.submit.sh",
                    "notes": [f"the spec has 3 cases for {nodes} shards; {nodes - 3} array tasks will have nothing "
                              "to do"]}
    assert all(Path(p).is_file() for k, p in data.items() if k != "notes")


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--nodes", "0", "--gpus-per-node", "8", "--db", "postgresql://u@h/d"], "--nodes"),
        (["--nodes", "2", "--gpus-per-node", "8", "--db", "postgresql://u:secret@h/d"], "password"),
        (["--nodes", "2", "--gpus-per-node", "8", "--db", "postgresql://u@h/d", "--time", "tomorrow"], "--time"),
        (["--nodes", "2", "--gpus-per-node", "8", "--db", "postgresql://u@h/d", "--venv", "/nonexistent/venv"],
         "--venv"),
        (["--nodes", "2", "--gpus-per-node", "8", "--db-file", "/nonexistent/url.txt"], "--db-file"),
        (["--nodes", "2", "--gpus-per-node", "8", "--db", "mysql://u@h/d"], "unsupported database"),
        (["--nodes", "2", "--gpus-per-node", "-1", "--db", "postgresql://u@h/d"], "0 for CPU nodes"),
        (["--nodes", "2", "--gpus-per-node", "0", "--db", "postgresql://u@h/d", "--python", "/nonexistent/python"],
         "--python"),
        (["--nodes", "2", "--gpus-per-node", "0", "--db", "postgresql://u@h/d", "--python", "/bin/sh",
          "--venv", "/tmp"], "at most one of --venv and --python"),
    ],
)
def test_cli_bad_arguments_exit_2_and_write_nothing(tmp_path, args, fragment):
    spec = tmp_path / "s.yaml"
    spec.write_text(CLI_SPEC)
    out = tmp_path / "out"
    result = _cli(str(spec), "--out", str(out), *args)
    assert result.exit_code == 2, result.output
    assert fragment in result.output and "Traceback" not in result.output
    assert "secret" not in result.output
    assert not out.exists()


def test_cli_bad_spec_exits_2(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("name: nightly\nbenchmarks:\n  - name: x\n    op: no_such_op\n")
    result = _cli(str(spec), "--nodes", "2", "--gpus-per-node", "8", "--db", "postgresql://u@h/d",
                  "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and "no_such_op" in result.output
    assert not (tmp_path / "out").exists()
