"""Slurm batch scripts for a links night (docs/collectives.md, "The link matrix"): every pair of GPUs
of each node, then every pair of nodes; or (`bisect`) the halving search for a slow node.

A links night writes three files next to each other:

- `<name>.sbatch`: a job array with one task per node; task I runs the spec on every GPU of its node
  (`rooflab run SPEC --devices all`; `--device cpu` on CPU nodes) into a run of its own, `RUN_ID-nI`,
  so that a requeued task resumes its own node's run: each node's matrix of pairs over NVLink or
  PCIe (and the spec's other cases, the node's all_reduce).
- `<name>.pairs.sbatch`: one job step over every node, one task per node (`srun
  --ntasks-per-node=1`): `rooflab collectives SPEC -f op=sendrecv_pairs` measures the matrix of
  nodes, one rank per node over the network (`ranks: all` stored under the step's size, ranks=N),
  into RUN_ID; started again after a fault, up to COLLECTIVE_STARTS times, as the nightly's step.
- `<name>.submit.sh`: fixes the night's run id and submits the array, then the step after it.

`bisect` writes one job over every node instead (`<name>.bisect.sbatch`, and its submit script):
`rooflab bisect SPEC` (runners/cluster/bisect.py) runs the spec's collective (not its pairs) on each
half of the nodes, then on each half of the slower half, and names the slow node in about log2(N)
steps, each half a run of its own (`RUN_ID-bK-a`, `-bK-b`).

`pairs_at_once` (all, or a number) is handed to the commands that measure the matrices.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import NamedTuple

from rooflab.runners.cluster.halving import MIN_NODES, too_few_nodes
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
from rooflab.runners.cluster.slurm import COLLECTIVE_STARTS
from rooflab.runners.cluster.slurm_job import SlurmArgumentError, SlurmJob, check_path, validate
from rooflab.suite.ops.pairs import PAIRS_OP

BISECT_JSON = "bisect.json"
# ranks of each node in a bisection's all_reduce on CPU nodes: one, as in the pairs of nodes (every
# half is two nodes or more, so its group crosses the network; runners/cluster/halving.py)
BISECT_CPU_RANKS = 1


class LinksScripts(NamedTuple):
    """Where a links night's scripts were written."""

    array: Path
    pairs: Path
    submit: Path


class BisectScripts(NamedTuple):
    """Where a bisection's scripts were written."""

    bisect: Path
    submit: Path


def _pairs_option(pairs_at_once: str | None) -> str:
    return f" --pairs-at-once {shlex.quote(pairs_at_once)}" if pairs_at_once is not None else ""


def render_array(job: SlurmJob, pairs_at_once: str | None) -> str:
    header = node_array_directives(job)
    devices = "--device cpu" if job.cpu_nodes else "--devices all"
    where = "the ranks on its CPU" if job.cpu_nodes else f"its {job.gpus_per_node} GPUs"
    return f"""#!/bin/bash
# rooflab links night: suite {job.suite!r} on each of {job.nodes} nodes, one array task per node.
#
# Task I measures every pair of {where}, in each direction the spec names, into a run of its
# own, RUN_ID-nI: a requeued task resumes its own node's run. The pairs of nodes are the next
# job's (one rank per node over the network).
{header}
set -euo pipefail

: "${{SLURM_ARRAY_TASK_ID:?this is a Slurm job array script: submit it with sbatch}}"

{environment(job, with_out=False)}

echo "rooflab: links run $RUN_ID-n$SLURM_ARRAY_TASK_ID on ${{SLURMD_NODENAME:-$(hostname)}}" \\
  "(restart ${{SLURM_RESTART_COUNT:-0}})"
exec "${{ROOFLAB[@]}}" run "$SPEC" {devices} --run-id "$RUN_ID-n$SLURM_ARRAY_TASK_ID"{_pairs_option(pairs_at_once)}
"""


def render_pairs(job: SlurmJob, pairs_at_once: str | None) -> str:
    header = directives(job, lines=[
        ("--job-name", sbatch_quote(f"rooflab-{job.suite}-pairs")), ("--nodes", str(job.nodes)),
        ("--ntasks-per-node", "1"), *gpu_lines(job), ("--exclusive", None), ("--time", job.collectives_time_limit),
        ("--output", sbatch_quote(log_pattern(job.out_dir, "%x-%j.out"))),
        ("--error", sbatch_quote(log_pattern(job.out_dir, "%x-%j.err"))),
    ])
    device = " --device cpu" if job.cpu_nodes else ""
    transport = "gloo" if job.cpu_nodes else "NCCL, each node's first GPU"
    step = (f"srun --kill-on-bad-exit=1 --nodes={job.nodes} --ntasks-per-node=1 \\\n"
            f'      "${{ROOFLAB[@]}}" collectives "$SPEC"{device} --run-id "$RUN_ID" -f op={PAIRS_OP}'
            f"{_pairs_option(pairs_at_once)}")
    return f"""#!/bin/bash
# rooflab links night, the matrix of nodes: {job.nodes} nodes, one rank per node ({transport}).
#
# One job step, one task per node: each task runs `rooflab collectives` on the spec's matrices of
# pairs, takes its rank from SLURM_PROCID and joins the group through torch.distributed's env://
# rendezvous on the first node. Rank 0 stores each pair of nodes as a result of its own into RUN_ID,
# with both ends (ranks, nodes, devices) in its params; `ranks: all` is stored as ranks={job.nodes}. A
# fault ends the step (--kill-on-bad-exit); it is started again, up to {COLLECTIVE_STARTS} times, each start
# measuring only the matrices the run does not hold yet.
{header}
set -euo pipefail

{environment(job, with_out=False)}

{RENDEZVOUS}
echo "rooflab: run $RUN_ID pairs of {job.nodes} nodes, rendezvous $MASTER_ADDR:$MASTER_PORT"
{restarted(step, starts=COLLECTIVE_STARTS, what="pairs step")}"""


def render_bisect(job: SlurmJob) -> str:
    ranks = BISECT_CPU_RANKS if job.cpu_nodes else job.gpus_per_node
    header = directives(job, lines=[
        ("--job-name", sbatch_quote(f"rooflab-{job.suite}-bisect")), ("--nodes", str(job.nodes)),
        ("--ntasks-per-node", str(ranks)), *gpu_lines(job), ("--exclusive", None),
        ("--time", job.collectives_time_limit),
        ("--output", sbatch_quote(log_pattern(job.out_dir, "%x-%j.out"))),
        ("--error", sbatch_quote(log_pattern(job.out_dir, "%x-%j.err"))),
    ])
    device = " --device cpu" if job.cpu_nodes else ""
    return f"""#!/bin/bash
# rooflab bisection over {job.nodes} nodes: when only the whole is slow, which node is it?
#
# `rooflab bisect` (on the first node) runs the spec's collective, not its matrices of pairs, on each
# half of the nodes ({ranks} ranks a node), keeps the slower half (the lower bus bandwidth) and halves
# it again, until one node is left: about log2({job.nodes}) steps of two job steps each. Each half is a
# run of its own (RUN_ID-bK-a, RUN_ID-bK-b); every step, the slow node and the figures it was named
# by go to this job's log and to OUT/{BISECT_JSON}. Exit code 1 when a step measured nothing.
{header}
set -euo pipefail

{environment(job, with_out=True)}
mkdir -p -- "$OUT"
echo "rooflab: bisection $RUN_ID over ${{SLURM_JOB_NUM_NODES:-{job.nodes}}} nodes"
exec "${{ROOFLAB[@]}}" bisect "$SPEC" --run-id "$RUN_ID" --ranks-per-node {ranks}{device} \\
  --out "$OUT/{BISECT_JSON}"
"""


def _stem(path: Path) -> str:
    return path.name[: -len(".sbatch")] if path.name.endswith(".sbatch") else path.name


def write_links_scripts(job: SlurmJob, array_path: Path, pairs_at_once: str | None) -> LinksScripts:
    """Write a links night's three scripts (all rendered before any is written); their paths."""
    check_path(array_path, "--output")
    validate(job)
    array_path = array_path.resolve()
    pairs_path = array_path.with_name(f"{_stem(array_path)}.pairs.sbatch")
    submit_path = array_path.with_name(f"{_stem(array_path)}.submit.sh")
    nodes = f"{job.nodes} CPU nodes" if job.cpu_nodes else f"{job.nodes} nodes x {job.gpus_per_node} GPUs"
    about = (f"# Submit one rooflab links night of {job.suite!r}: each node's pairs (a job array), then the\n"
             "# pairs of nodes when the array has ended (--dependency=afterany:<job id>). Run it with bash.")
    chain = (ChainedJob("ARRAY", array_path, f"node array job {{id}} ({nodes})"),
             ChainedJob("PAIRS", pairs_path, "pairs of nodes {id}"))
    submit = submit_script(job, chain, about=about, done='echo "logs: $OUT/logs"')
    return LinksScripts(*write_files([(array_path, render_array(job, pairs_at_once), 0o644),
                                      (pairs_path, render_pairs(job, pairs_at_once), 0o644),
                                      (submit_path, submit, 0o755)]))


def write_bisect_scripts(job: SlurmJob, bisect_path: Path) -> BisectScripts:
    """Write a bisection's job and its submit script; their paths."""
    check_path(bisect_path, "--output")
    validate(job)
    if job.nodes < MIN_NODES:
        raise SlurmArgumentError(f"--nodes {job.nodes}: {too_few_nodes(job.nodes)}")
    bisect_path = bisect_path.resolve()
    submit_path = bisect_path.with_name(f"{_stem(bisect_path)}.submit.sh")
    about = (f"# Submit one rooflab bisection of {job.suite!r} over {job.nodes} nodes (its result in\n"
             f"# OUT/{BISECT_JSON}). Run it with bash.")
    chain = (ChainedJob("BISECT", bisect_path, "bisection job {id}"),)
    submit = submit_script(job, chain, about=about, done=f'echo "logs: $OUT/logs   result: $OUT/{BISECT_JSON}"')
    return BisectScripts(*write_files([(bisect_path, render_bisect(job), 0o644), (submit_path, submit, 0o755)]))
