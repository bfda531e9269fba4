"""Slurm batch scripts for a nightly run over many GPU nodes, or CPU nodes (`gpus_per_node=0`).

Four files are written next to each other:

- `<name>.sbatch`: a job array with one task per node; task I runs shard I/N of the suite on all
  GPUs of its node (`rooflab run --shard I/N --devices all`), or on its CPU (`--device cpu`), every
  shard under one run id. The collective cases of a shard run there over the GPUs of that node
  (`ranks: all` = the node's GPUs; on a CPU node, two gloo ranks on its CPU).
- `<name>.collectives.sbatch`: one job step over every node and GPU of an allocation (one task per
  GPU, or one per CPU node, started by `srun`), after the array: `rooflab collectives` measures the
  spec's collective cases across all nodes, each task a rank (gloo on CPU nodes), the rendezvous on
  the first node (MASTER_ADDR, MASTER_PORT); `ranks: all` is stored under the step's world size
  (e.g. ranks=32). A start that ends in a fault is followed by another (COLLECTIVE_STARTS in all),
  which measures the cases still missing.
- `<name>.finalize.sbatch`: one small CPU job that runs once the collective step has ended, whether
  it or the array succeeded or not (`--dependency=afterany`): the regression check, the HTML report
  and the JSON summary (`rooflab nightly --skip-run`), by model unless asked otherwise (`--by`:
  which node measures a case changes from night to night, so a device's series of a sharded night
  has gaps).
- `<name>.submit.sh`: the driver a user (or cron/scrontab) runs each night: it fixes the run id,
  creates the log directory, submits the array, the collective step depending on it, and the
  finalising job depending on the collective step.

The database URL never appears on a command line: the scripts export ROOFLAB_DB, which rooflab
reads. It comes from one of: `--db URL`, written into the scripts, which must not carry a password
(libpq's ~/.pgpass or PGPASSFILE holds it); `--db-file FILE`, a file readable only by its owner
that holds the full URL and is read by each job when it starts; or neither, and ROOFLAB_DB is
taken from the environment of the submit script (sbatch passes it on to the jobs).

rooflab itself is started on the nodes by the job's command (SlurmJob.rooflab): a venv's `rooflab`,
`PYTHON -m rooflab` (a checkout: PYTHONPATH, like every variable of the submitting environment,
reaches the jobs through `sbatch --export=ALL`), or `rooflab` on the nodes' PATH.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from rooflab.runners.cluster.sbatch import (
    RENDEZVOUS,
    ChainedJob,
    directives,
    environment,
    gpu_lines,
    log_pattern,
    node_array_directives,
    restarted,
    sbatch_quote,
    submit_script,
    write_files,
)
from rooflab.runners.cluster.slurm_job import SlurmJob, check_path, validate
from rooflab.vocab import SeriesBy


@dataclass(frozen=True)
class SlurmScripts:
    array: str
    finalize: str
    submit: str
    collectives: str


class WrittenScripts(NamedTuple):
    """Where the night's scripts were written."""

    array: Path
    finalize: Path
    submit: Path
    collectives: Path


def _array_comment(job: SlurmJob) -> str:
    n = job.nodes
    if job.cpu_nodes:
        where = ("Each task gets a whole CPU node (--exclusive: no other job disturbs the timings) and\n"
                 "# measures on its CPU (`--device cpu`); every result records the CPU it ran on.")
    else:
        where = (f"Each task gets a whole node (--exclusive: no other job disturbs the timings) with\n"
                 f"# {job.gpus_per_node} GPUs; `--devices all` starts one worker per GPU that Slurm gave the job\n"
                 "# (CUDA_VISIBLE_DEVICES), each pinned to its GPU, and every result records the GPU's UUID.")
    return f"""# rooflab nightly: suite {job.suite!r} split into {n} shards, one array task per node.
#
# Array task I runs shard I/{n}: rooflab partitions the expanded suite the same way in every task
# (balanced by the previous night's times), so the {n} tasks measure every case exactly once
# between them. {where}
# All tasks write into one run (RUN_ID). A task that is restarted (--requeue after a node failure,
# `scontrol requeue`, or the submit script run again the same night) resumes: cases already in the
# database for this run and shard are not measured twice."""


def _gpu_check(job: SlurmJob) -> str:
    """The array task's look at the GPUs Slurm gave it (none on CPU nodes)."""
    if job.cpu_nodes:
        return ""
    g = job.gpus_per_node
    return f"""
# Slurm lists the GPUs it gave the job in CUDA_VISIBLE_DEVICES; fewer than asked for is worth a
# line in the log (with none visible, `--devices all` refuses to run: exit code 2).
IFS=, read -r -a GPUS <<< "${{CUDA_VISIBLE_DEVICES:-}}"
if (( ${{#GPUS[@]}} != {g} )); then
    echo "rooflab: warning: {g} GPUs requested," \\
      "CUDA_VISIBLE_DEVICES lists ${{#GPUS[@]}} (${{CUDA_VISIBLE_DEVICES:-unset}})" >&2
fi"""


def render_array(job: SlurmJob) -> str:
    n = job.nodes
    header = node_array_directives(job)
    if job.cpu_nodes:
        where, devices = "CPU", "--device cpu"
    else:
        where, devices = "GPUs ${CUDA_VISIBLE_DEVICES:-none}", "--devices all"
    return f"""#!/bin/bash
{_array_comment(job)}
{header}
set -euo pipefail

: "${{SLURM_ARRAY_TASK_ID:?this is a Slurm job array script: submit it with sbatch}}"
SHARD_COUNT={n}
if (( SLURM_ARRAY_TASK_ID < 0 || SLURM_ARRAY_TASK_ID >= SHARD_COUNT )); then
    echo "rooflab: array task $SLURM_ARRAY_TASK_ID is outside 0..$((SHARD_COUNT - 1))" >&2
    exit 2
fi

{environment(job, with_out=False)}
{_gpu_check(job)}
echo "rooflab: run $RUN_ID shard $SLURM_ARRAY_TASK_ID/$SHARD_COUNT on ${{SLURMD_NODENAME:-$(hostname)}} {where}" \\
  "(restart ${{SLURM_RESTART_COUNT:-0}})"
exec "${{ROOFLAB[@]}}" run "$SPEC" --shard "$SLURM_ARRAY_TASK_ID/$SHARD_COUNT" {devices} --run-id "$RUN_ID"
"""


# How often the collective step starts its ranks: a start that ends in a fault has stored the case
# in flight (crashed or failed) when rank 0 could, so the next start goes on with the cases after it.
COLLECTIVE_STARTS = 3


def _collectives_comment(job: SlurmJob) -> str:
    ranks = job.nodes * job.ranks_per_node
    if job.cpu_nodes:
        what = (f"{job.nodes} CPU nodes x 1 task = {ranks} ranks (gloo).\n#\n"
                "# One job step, one task per node: each task runs `rooflab collectives --device cpu`, takes")
        local = "its rank from SLURM_PROCID and the world size from SLURM_NTASKS, and joins the"
    else:
        what = (f"{job.nodes} nodes x {job.gpus_per_node} GPUs = {ranks} ranks.\n#\n"
                "# One job step, one task per GPU: each task runs `rooflab collectives`, takes its rank from")
        local = "SLURM_PROCID, the world size from SLURM_NTASKS and its GPU from SLURM_LOCALID, and joins the"
    return f"""# rooflab nightly, collectives over the whole allocation: {what}
# {local}
# group through torch.distributed's env:// rendezvous: a TCP store that rank 0 opens on the first
# node (its NodeAddr) at MASTER_PORT (below; the nodes are exclusive to this job, so no other run
# uses the port). Rank 0 stores the results into the night's run: the spec's collective cases with
# `ranks: all` are stored under this step's world size (ranks={ranks}), beside the one-node groups the
# array measured. A rank that fails ends the step (--kill-on-bad-exit; rank 0 first stores the case
# in flight when it can); the step is then started again, up to {COLLECTIVE_STARTS} times, each start measuring
# only the cases the run does not hold yet. A second submission of the night does the same."""


def render_collectives(job: SlurmJob) -> str:
    per_node = job.ranks_per_node
    header = directives(
        job,
        lines=[
            ("--job-name", sbatch_quote(f"rooflab-{job.suite}-collectives")),
            ("--nodes", str(job.nodes)),
            ("--ntasks-per-node", str(per_node)),
            *gpu_lines(job),
            ("--exclusive", None),
            ("--time", job.collectives_time_limit),
            ("--output", sbatch_quote(log_pattern(job.out_dir, "%x-%j.out"))),
            ("--error", sbatch_quote(log_pattern(job.out_dir, "%x-%j.err"))),
        ],
    )
    device = " --device cpu" if job.cpu_nodes else ""
    step = (f"srun --kill-on-bad-exit=1 --nodes={job.nodes} --ntasks-per-node={per_node} \\\n"
            f'      "${{ROOFLAB[@]}}" collectives "$SPEC"{device} --run-id "$RUN_ID"')
    return f"""#!/bin/bash
{_collectives_comment(job)}
{header}
set -euo pipefail

{environment(job, with_out=False)}

{RENDEZVOUS}
echo "rooflab: run $RUN_ID collectives on {job.nodes * per_node} ranks, rendezvous $MASTER_ADDR:$MASTER_PORT"
{restarted(step, starts=COLLECTIVE_STARTS, what="collective step")}"""


def _series_comment(job: SlurmJob) -> str:
    """What the finalising job's series are, and why (a comment's lines, the first without its `# `)."""
    if job.series_by == SeriesBy.MODEL:
        return ("--by model: a series is a case on a model, the median of that model's devices in the run. Which node\n"
                "# takes a shard (Slurm's placement) and which shard takes a case (the split follows last night's\n"
                "# times) change from night to night, so a series per device would gather a point on the nights\n"
                "# its device happened to measure the case and rarely build a baseline.")
    return ("--by device: a series is a case on one physical device (asked for: each case is measured on the\n"
            "# same devices every night).")


def render_finalize(job: SlurmJob) -> str:
    header = directives(
        job,
        lines=[
            ("--job-name", sbatch_quote(f"rooflab-{job.suite}-finalize")),
            ("--nodes", "1"),
            ("--ntasks", "1"),
            ("--time", job.finalize_time_limit),
            ("--output", sbatch_quote(log_pattern(job.out_dir, "%x-%j.out"))),
            ("--error", sbatch_quote(log_pattern(job.out_dir, "%x-%j.err"))),
        ],
    )
    return f"""#!/bin/bash
# rooflab nightly, last step: runs once the collective step after the shard array has ended (the
# submit script makes it depend on that step with afterany, so it also runs when a shard or the step
# failed or hit its time limit; shards that did not finish are listed as missing in the summary).
# Needs no GPU.
#
# `rooflab nightly --skip-run` does the regression check over the database's history (what
# `rooflab regressions --by {job.series_by}` prints), writes the HTML report (what `rooflab report` writes) to
# $OUT/report, prints a short summary to this job's log and writes $OUT/report/summary.json.
# {_series_comment(job)}
# The job exits 1 when a regression is found (--fail-on {job.fail_on}), so `sacct` shows it failed.
{header}
set -euo pipefail

{environment(job, with_out=True)}

exec "${{ROOFLAB[@]}}" nightly "$SPEC" --skip-run --run-id "$RUN_ID" --out "$OUT/report" --fail-on {job.fail_on} \\
  --by {job.series_by}
"""


def render_submit(job: SlurmJob, array_path: Path, finalize_path: Path, collectives_path: Path) -> str:
    nodes = f"{job.nodes} CPU nodes" if job.cpu_nodes else f"{job.nodes} nodes x {job.gpus_per_node} GPUs"
    about = f"""# Submit one rooflab nightly run of {job.suite!r}: the shard array, the collective step over all
# nodes when the array has ended, then the finalising job when that step has ended
# (--dependency=afterany:<job id>). Run it with bash (e.g. from scrontab/cron)."""
    chain = (ChainedJob("ARRAY", array_path, f"shard array job {{id}} ({nodes})"),
             ChainedJob("COLLECTIVES", collectives_path, "collective step {id}"),
             ChainedJob("FINALIZE", finalize_path, "finalising job {id}"))
    done = 'echo "logs: $OUT/logs   report: $OUT/report/index.html   summary: $OUT/report/summary.json"'
    return submit_script(job, chain, about=about, done=done)


def render(job: SlurmJob, array_path: Path) -> SlurmScripts:
    """The three scripts; `array_path` names the array script (the others sit beside it)."""
    validate(job)
    finalize_path, submit_path = companion_paths(array_path)
    return SlurmScripts(
        array=render_array(job),
        finalize=render_finalize(job),
        submit=render_submit(job, array_path, finalize_path, collectives_path(array_path)),
        collectives=render_collectives(job),
    )


def _stem(array_path: Path) -> str:
    return array_path.name[: -len(".sbatch")] if array_path.name.endswith(".sbatch") else array_path.name


def companion_paths(array_path: Path) -> tuple[Path, Path]:
    """(finalize script, submit script) beside `array_path` (`x.sbatch` -> `x.finalize.sbatch`, `x.submit.sh`)."""
    stem = _stem(array_path)
    return array_path.with_name(f"{stem}.finalize.sbatch"), array_path.with_name(f"{stem}.submit.sh")


def collectives_path(array_path: Path) -> Path:
    """The collective step's script beside `array_path` (`x.sbatch` -> `x.collectives.sbatch`)."""
    return array_path.with_name(f"{_stem(array_path)}.collectives.sbatch")


def write_scripts(job: SlurmJob, array_path: Path) -> WrittenScripts:
    """Write the four scripts (all rendered before any is written) and return their paths: array,
    finalise, submit, collective step."""
    check_path(array_path, "--output")
    array_path = array_path.resolve()
    scripts = render(job, array_path)
    finalize_path, submit_path = companion_paths(array_path)
    return WrittenScripts(*write_files([
        (array_path, scripts.array, 0o644),
        (finalize_path, scripts.finalize, 0o644),
        (submit_path, scripts.submit, 0o755),
        (collectives_path(array_path), scripts.collectives, 0o644),
    ]))


def notes(job: SlurmJob, n_cases: int) -> tuple[str, ...]:
    """What is worth knowing about a night's scripts that were written all the same."""
    out = []
    if n_cases < job.nodes:
        out.append(f"the spec has {n_cases} cases for {job.nodes} shards; "
                   f"{job.nodes - n_cases} array tasks will have nothing to do")
    if job.db_url is not None and job.db_url.startswith("sqlite") and job.nodes > 1:
        out.append("several nodes writing one SQLite file on a network filesystem risk lock errors and corruption; "
                   "prefer PostgreSQL, or node-local SQLite files joined with `rooflab db merge`")
    return tuple(out)
