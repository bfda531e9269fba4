"""What every kind of Slurm job rooflab writes shares, rendered from a checked SlurmJob (slurm_job.py).

- `directives`: the `#SBATCH` lines (values quoted for sbatch's own parser, `log_pattern` for the
  log files under OUT/logs), the partition and account added to every job;
- `environment`: the lines that say which rooflab runs (ROOFLAB=(...)), on which spec, into which
  database (ROOFLAB_DB, never on a command line) and under which run id;
- `submit_script`: the driver a user runs each night: it fixes the run id, creates the log folder
  and hands Slurm a chain of jobs, each one waiting for the one before it to end
  (`--dependency=afterany`, so it also runs after a failure or a time limit);
- `write_files`: a kind's scripts, all rendered before any is written, each put in place whole.

A kind of job renders its own scripts from these pieces: the nightly (a shard array, the collective
step, the finalising job) in slurm.py. A new kind is a module beside it and a command of
`rooflab slurm` (runners/cli/cluster_cmd.py).
"""
from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rooflab.runners.cluster.slurm_job import RUN_ID_RE, SlurmJob, check_path


def sbatch_quote(value: str) -> str:
    """Quote a value for an `#SBATCH` line: sbatch's own parser, not the shell, reads those lines;
    it groups double-quoted text and takes a backslash as an escape."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def log_pattern(out_dir: Path, name: str) -> str:
    """A log file pattern under out_dir/logs; `%` in the directory is doubled (Slurm's escape)."""
    return str(out_dir / "logs").replace("%", "%%") + "/" + name


def directives(job: SlurmJob, *, lines: Sequence[tuple[str, str | None]]) -> str:
    """`#SBATCH NAME[=VALUE]` for each of `lines`, then the job's partition and account."""
    common: list[tuple[str, str | None]] = []
    if job.partition:
        common.append(("--partition", job.partition))
    if job.account:
        common.append(("--account", job.account))
    return "\n".join(f"#SBATCH {name}" if value is None else f"#SBATCH {name}={value}"
                     for name, value in [*lines, *common])


def gpu_lines(job: SlurmJob) -> list[tuple[str, str | None]]:
    """`--gpus-per-node` for a GPU job; nothing on CPU nodes."""
    return [] if job.cpu_nodes else [("--gpus-per-node", str(job.gpus_per_node))]


def node_array_directives(job: SlurmJob) -> str:
    """The `#SBATCH` lines of a job array of one task per node: each task a whole node (--exclusive),
    requeued after a node failure, its log appended to the killed start's, not over it."""
    return directives(job, lines=[
        ("--job-name", sbatch_quote(f"rooflab-{job.suite}")), ("--array", f"0-{job.nodes - 1}"), ("--nodes", "1"),
        ("--ntasks", "1"), *gpu_lines(job), ("--exclusive", None), ("--requeue", None), ("--open-mode", "append"),
        ("--time", job.time_limit), ("--output", sbatch_quote(log_pattern(job.out_dir, "%x-%A_%a.out"))),
        ("--error", sbatch_quote(log_pattern(job.out_dir, "%x-%A_%a.err"))),
    ])


def _database(job: SlurmJob) -> str:
    if job.db_url is not None:
        return (
            "# The results database, read by rooflab from ROOFLAB_DB (never put on a command line, so it is\n"
            "# not shown by ps or in the logs). Its password, if any, comes from ~/.pgpass or PGPASSFILE.\n"
            f"export ROOFLAB_DB={shlex.quote(job.db_url)}"
        )
    if job.db_file is None:
        return (
            "# The results database: ROOFLAB_DB as it was in the environment of the submit script (sbatch\n"
            "# passes that environment on to the job; the URL is in no file and on no command line).\n"
            ': "${ROOFLAB_DB:?ROOFLAB_DB is not set: export it before running the submit script}"\n'
            "export ROOFLAB_DB"
        )
    return (
        "# The results database: the URL (with its password) is read from a file only its owner can\n"
        "# read, and handed to rooflab through ROOFLAB_DB (never on a command line or in a log).\n"
        f"ROOFLAB_DB_FILE={shlex.quote(str(job.db_file))}\n"
        'if [[ ! -r "$ROOFLAB_DB_FILE" ]]; then echo "rooflab: cannot read $ROOFLAB_DB_FILE" >&2; exit 2; fi\n'
        'ROOFLAB_DB="$(<"$ROOFLAB_DB_FILE")"\n'
        "export ROOFLAB_DB"
    )


def environment(job: SlurmJob, *, with_out: bool) -> str:
    """ROOFLAB=(...), SPEC, OUT (`with_out`), RUN_ID and the database, as a job script sets them."""
    if job.run_id is not None:
        run = f"RUN_ID={shlex.quote(job.run_id)}"
    else:
        run = (
            "# The run id is fixed by the submit script (one run for all shards of the night).\n"
            'RUN_ID="${ROOFLAB_RUN_ID:?submit with the .submit.sh script, which sets ROOFLAB_RUN_ID}"'
        )
    return "\n".join(
        [
            "ROOFLAB=(" + " ".join(shlex.quote(word) for word in job.rooflab) + ")",
            f"SPEC={shlex.quote(str(job.spec_path))}",
            *([f"OUT={shlex.quote(str(job.out_dir))}"] if with_out else []),
            run,
            _database(job),
        ]
    )


# a job step's rendezvous (torch.distributed's env://): the first node of the allocation at the address
# Slurm reaches it by, a port derived from the job id (the nodes are the job's alone)
RENDEZVOUS = """# the rendezvous: the first node of the allocation at the address Slurm reaches it by (its
# NodeAddr, the node name where none is set), a port derived from the job id
mapfile -t NODES < <(scontrol show hostnames "${SLURM_JOB_NODELIST:?submit with sbatch}")
FIRST_NODE="${NODES[0]:?scontrol listed no node of $SLURM_JOB_NODELIST}"
MASTER_ADDR=$(scontrol show node "$FIRST_NODE" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p' || true)
MASTER_ADDR="${MASTER_ADDR:-$FIRST_NODE}"
MASTER_PORT=$(( 20000 + ${SLURM_JOB_ID:?submit with sbatch} % 20000 ))
export MASTER_ADDR MASTER_PORT"""


def restarted(step: str, *, starts: int, what: str) -> str:
    """The lines that run `step` (an `srun ...` command; continued lines end with a backslash) up to
    `starts` times until it ends with exit code 0, and exit with the first fault's code (0 when none)."""
    return f"""FIRST_FAULT=0
for START in $(seq 1 {starts}); do
    CODE=0
    {step} || CODE=$?
    if (( CODE == 0 )); then
        break
    fi
    echo "rooflab: {what} start $START of {starts} ended with exit code $CODE" >&2
    if (( FIRST_FAULT == 0 )); then FIRST_FAULT=$CODE; fi
done
exit "$FIRST_FAULT"
"""


@dataclass(frozen=True)
class ChainedJob:
    """One job of a submit script's chain: its script, the shell name its path and id are kept under
    (`NAME_SCRIPT`, `NAME_JOB`), and how the script's last line names it (`{id}`: its job id)."""

    name: str
    script: Path
    shown: str


def _submit_database_check(job: SlurmJob) -> str:
    if job.db_url is None and job.db_file is None:
        return (': "${ROOFLAB_DB:?export ROOFLAB_DB (the results database URL): '
                'the jobs take it from this environment}"\n')
    return ""


def _submissions(chain: Sequence[ChainedJob]) -> str:
    lines = []
    for before, step in zip([None, *chain], chain, strict=False):
        after = f' --dependency="afterany:${before.name}_JOB"' if before is not None else ""
        lines += [f'{step.name}_JOB=$(sbatch --parsable --export="ALL,ROOFLAB_RUN_ID=$RUN_ID"{after} '
                  f'"${step.name}_SCRIPT")',
                  f"{step.name}_JOB=${{{step.name}_JOB%%;*}}  # --parsable prints <job id>[;<cluster>]"]
    return "\n".join(lines)


def submit_script(job: SlurmJob, chain: Sequence[ChainedJob], *, about: str, done: str) -> str:
    """The submit script of a chain of jobs; `about` is its comment (its lines start with `# `),
    `done` what it prints last, after the line that names every job with its id."""
    if job.run_id is not None:
        run = f"RUN_ID={shlex.quote(job.run_id)}"
    else:
        run = (
            "# One run id per night, derived from the suite and the UTC date (export ROOFLAB_RUN_ID to choose\n"
            "# another). Submitting again the same night resumes that run instead of starting a new one.\n"
            f'RUN_ID="${{ROOFLAB_RUN_ID:-{job.suite}-$(date -u +%Y%m%d)}}"'
        )
    scripts = "\n".join(f"{c.name}_SCRIPT={shlex.quote(str(c.script))}" for c in chain)
    shown = ", ".join(c.shown.replace("{id}", f"${c.name}_JOB") for c in chain)
    return f"""#!/bin/bash
{about}
set -euo pipefail

OUT={shlex.quote(str(job.out_dir))}
{scripts}
{run}
if [[ ! "$RUN_ID" =~ {RUN_ID_RE.pattern} ]]; then  # the rule of --run-id, as bash reads it
    echo "rooflab: run id '$RUN_ID' must be 1-128 characters from letters, digits and _.:+-" >&2
    exit 2
fi
{_submit_database_check(job)}
# Slurm does not create the directories of its log files.
mkdir -p -- "$OUT/logs" "$OUT/report"

# --export passes RUN_ID to every job along with the submitting environment.
{_submissions(chain)}

echo "rooflab run $RUN_ID: {shown}"
{done}
"""


def write_files(files: Sequence[tuple[Path, str, int]]) -> list[Path]:
    """Write each (path, text, mode), each through a file beside it moved into place, so that a
    script is there whole or not at all; the paths, in order."""
    for path, _, _ in files:
        check_path(path, "--output")
    written = []
    for path, text, mode in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.chmod(mode)
        tmp.replace(path)
        written.append(path)
    return written
