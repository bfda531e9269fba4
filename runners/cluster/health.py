"""Slurm batch scripts for a fleet's health night (docs/fleet.md): every node measures the whole suite
on all its devices, then `rooflab fleet` judges each device against its siblings.

Three files are written next to each other:

- `<name>.sbatch`: a job array with one task per node; task I runs the whole suite on every device of
  its node (`rooflab run SPEC --devices all`: one worker per GPU, or on CPU nodes one per physical
  core) into a run of its own, `RUN_ID-nI`, so that a requeued task resumes its own node's run.
  Nothing is sharded: a device is judged on every case of the suite.
- `<name>.finalize.sbatch`: one small CPU job that runs once the array has ended, whether its tasks
  succeeded or not (`--dependency=afterany`): `rooflab fleet` on the suite's newest night, its JSON
  written to OUT/fleet.json and its text to the job's log; it exits 1 when a device is at the
  `--fleet-fail-on` status or worse, so that `sacct` shows the night failed.
- `<name>.submit.sh`: the driver a user (or cron) runs each night: it fixes the night's run id and
  submits the array, then the finalising job depending on it.

The database, the run id and the command that starts rooflab are given to the jobs as for a sharded
night (sbatch.py).
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import NamedTuple

from rooflab.runners.cluster.sbatch import (
    ChainedJob,
    directives,
    environment,
    log_pattern,
    node_array_directives,
    sbatch_quote,
    submit_script,
    write_files,
)
from rooflab.runners.cluster.slurm_job import SlurmJob, check_path, validate

FLEET_JSON = "fleet.json"


class HealthScripts(NamedTuple):
    """Where the health night's scripts were written."""

    array: Path
    finalize: Path
    submit: Path


def render_array(job: SlurmJob) -> str:
    header = node_array_directives(job)
    where = ("every physical core of its CPU (one device per core, each pinned with one thread)" if job.cpu_nodes
             else f"every one of its {job.gpus_per_node} GPUs (CUDA_VISIBLE_DEVICES)")
    return f"""#!/bin/bash
# rooflab health night: suite {job.suite!r} on {job.nodes} nodes, one array task per node.
#
# Array task I measures every case of the suite on {where} into a run of its own,
# RUN_ID-nI (a requeued task resumes it: cases already stored for a device are not measured twice).
# Nothing is sharded: each device is judged against its siblings on every case. Each task gets a
# whole node (--exclusive: no other job disturbs the timings).
{header}
set -euo pipefail

: "${{SLURM_ARRAY_TASK_ID:?this is a Slurm job array script: submit it with sbatch}}"
{environment(job, with_out=False)}

echo "rooflab: health run $RUN_ID-n$SLURM_ARRAY_TASK_ID on ${{SLURMD_NODENAME:-$(hostname)}}" \\
  "(restart ${{SLURM_RESTART_COUNT:-0}})"
exec "${{ROOFLAB[@]}}" run "$SPEC" --devices all --run-id "$RUN_ID-n$SLURM_ARRAY_TASK_ID"
"""


def render_finalize(job: SlurmJob, fleet_fail_on: str) -> str:
    header = directives(job, lines=[
        ("--job-name", sbatch_quote(f"rooflab-{job.suite}-fleet")), ("--nodes", "1"), ("--ntasks", "1"),
        ("--time", job.finalize_time_limit), ("--output", sbatch_quote(log_pattern(job.out_dir, "%x-%j.out"))),
        ("--error", sbatch_quote(log_pattern(job.out_dir, "%x-%j.err"))),
    ])
    suite = shlex.quote(job.suite)
    return f"""#!/bin/bash
# rooflab health night, last step: runs once the array has ended (the submit script makes it depend
# on every task with afterany, so it also runs when a node failed; a node that did not report is
# named as missing). Needs no GPU.
#
# `rooflab fleet` judges the suite's newest night: each device against its siblings of the same
# model, wall by wall, and against its own past; its JSON goes to $OUT/{FLEET_JSON}, its text to this
# job's log. The job exits 1 when a device is at --fail-on {fleet_fail_on} or worse.
{header}
set -euo pipefail

{environment(job, with_out=True)}

"${{ROOFLAB[@]}}" fleet --suite {suite} --fail-on never --json > "$OUT/{FLEET_JSON}.tmp"
mv -f -- "$OUT/{FLEET_JSON}.tmp" "$OUT/{FLEET_JSON}"
exec "${{ROOFLAB[@]}}" fleet --suite {suite} --fail-on {fleet_fail_on}
"""


def render_submit(job: SlurmJob, array_path: Path, finalize_path: Path) -> str:
    nodes = f"{job.nodes} CPU nodes" if job.cpu_nodes else f"{job.nodes} nodes x {job.gpus_per_node} GPUs"
    about = f"""# Submit one rooflab health night of {job.suite!r}: the array, one task per node, then the fleet's
# judgement when every task has ended (--dependency=afterany:<job id>). Run it with bash (e.g. from
# scrontab/cron)."""
    chain = (ChainedJob("ARRAY", array_path, f"health array job {{id}} ({nodes})"),
             ChainedJob("FINALIZE", finalize_path, "fleet job {id}"))
    return submit_script(job, chain, about=about,
                         done=f'echo "logs: $OUT/logs   fleet: $OUT/{FLEET_JSON}"')


def write_health_scripts(job: SlurmJob, array_path: Path, fleet_fail_on: str) -> HealthScripts:
    """Write the three scripts (all rendered before any is written); their paths. `fleet_fail_on` is
    a FleetFailOn value, checked by the caller (the command line)."""
    validate(job)
    array_path = check_path(array_path, "--output").resolve()
    stem = array_path.name.removesuffix(".sbatch")
    finalize_path = array_path.with_name(f"{stem}.fleet.sbatch")
    submit_path = array_path.with_name(f"{stem}.submit.sh")
    return HealthScripts(*write_files([
        (array_path, render_array(job), 0o644),
        (finalize_path, render_finalize(job, fleet_fail_on), 0o644),
        (submit_path, render_submit(job, array_path, finalize_path), 0o755),
    ]))
