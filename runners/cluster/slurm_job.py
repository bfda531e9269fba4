"""What `rooflab slurm` is asked to write, checked: the job (spec, nodes, GPUs or CPU nodes, time
limits, partition, account, run id, database, the command that starts rooflab) and the rule of each
argument (one SlurmArgumentError each, exit code 2). slurm.py renders the scripts from a checked job.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from rooflab.db.errors import DatabaseInputError
from rooflab.db.urls import normalize_url
from rooflab.reports.regressions.verdicts import FailOn, parse_fail_on
from rooflab.suite.errors import SpecError
from rooflab.vocab import SeriesBy, allowed

_TIME_RE = re.compile(r"^(?:(\d+)-)?(\d{1,3}):([0-5]\d):([0-5]\d)$")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.,+-]*$")  # partition, account
_SUITE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")  # job names, derived run ids
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,127}$")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


class SlurmArgumentError(SpecError):
    """An argument of `rooflab slurm` is invalid (exit code 2)."""


@dataclass(frozen=True)
class SlurmJob:
    """What the generated scripts run, and where."""

    spec_path: Path  # absolute; must be readable from the compute nodes
    suite: str  # spec name: job names and derived run ids
    nodes: int
    gpus_per_node: int  # 0: CPU nodes (the array measures on the CPU, the collective step runs gloo)
    out_dir: Path  # absolute: logs/ and report/ go here (shared filesystem)
    # the command that starts rooflab on the nodes: ("/venv/bin/rooflab",), ("/venv/bin/python", "-m",
    # "rooflab") or ("rooflab",) (found on the nodes' PATH)
    rooflab: tuple[str, ...]
    db_url: str | None = None  # a URL without password, written into the scripts
    db_file: Path | None = None  # or a file holding the URL, read by each job
    time_limit: str = "04:00:00"
    finalize_time_limit: str = "01:00:00"
    collectives_time_limit: str = "01:00:00"
    partition: str | None = None
    account: str | None = None
    run_id: str | None = None  # None: derived at submission as <suite>-<UTC date>
    fail_on: str = FailOn.REGRESSION
    # the series a sharded night's finalising job judges (`rooflab nightly --by`): by model, since which node
    # (and so which devices) measures a case changes from night to night; a health night judges every device
    series_by: SeriesBy = SeriesBy.MODEL

    @property
    def cpu_nodes(self) -> bool:
        """The nodes are measured on their CPUs (`--gpus-per-node 0`)."""
        return self.gpus_per_node == 0

    @property
    def ranks_per_node(self) -> int:
        """Tasks of the collective step on each node: one per GPU, or one per CPU node."""
        return 1 if self.cpu_nodes else self.gpus_per_node


def rooflab_command(venv: Path | None, python: Path | None) -> tuple[str, ...]:
    """The command the jobs start rooflab with: `PYTHON -m rooflab` (--python), `VENV/bin/rooflab`
    (--venv), this process's venv's rooflab, or `rooflab` on the nodes' PATH."""
    if venv is not None and python is not None:
        raise SlurmArgumentError("give at most one of --venv and --python")
    if python is not None:
        exe = python.expanduser().absolute()
        if not exe.is_file() or not os.access(exe, os.X_OK):
            raise SlurmArgumentError(
                f"--python {python}: {exe} is not an executable file; give the Python that runs rooflab on the nodes")
        return (str(exe), "-m", "rooflab")
    if venv is not None:
        exe = venv.expanduser().resolve() / "bin" / "rooflab"
        if not exe.is_file():
            raise SlurmArgumentError(
                f"--venv {venv}: {exe} does not exist; give the virtual environment rooflab is installed in")
        return (str(exe),)
    if sys.prefix != sys.base_prefix:
        exe = Path(sys.prefix) / "bin" / "rooflab"
        if exe.is_file():
            return (str(exe),)
    return ("rooflab",)


def check_time(value: str, option: str = "--time") -> str:
    """Slurm wall time as [D-]HH:MM:SS, above zero."""
    match = _TIME_RE.match(value or "")
    if match is None:
        raise SlurmArgumentError(f"{option} {value!r}: expected HH:MM:SS or D-HH:MM:SS (e.g. 04:00:00)")
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    if days * 86400 + hours * 3600 + minutes * 60 + seconds == 0:
        raise SlurmArgumentError(f"{option} {value!r}: the time limit must be above zero")
    return value


def check_run_id(value: str) -> str:
    if not RUN_ID_RE.match(value or ""):
        raise SlurmArgumentError(
            f"--run-id {value!r}: use 1-128 characters from letters, digits and _.:+- , starting with a letter or digit"
        )
    return value


def check_db_url(url: str) -> str:
    """A URL the scripts may carry in clear: valid for rooflab and without a password.

    A relative SQLite path becomes absolute (jobs start in other directories).
    """
    if _CONTROL_RE.search(url):
        raise SlurmArgumentError("--db: the URL contains control characters")
    try:
        parsed = normalize_url(url)
    except DatabaseInputError as exc:
        raise SlurmArgumentError(f"--db: {exc}") from None
    if parsed.password:
        raise SlurmArgumentError(
            "--db: the URL carries a password, which would be written in clear into the batch scripts. "
            "Drop it from the URL and keep it in ~/.pgpass (PostgreSQL reads it there), put the whole URL "
            "in a file only you can read and pass --db-file FILE, or leave out --db and export ROOFLAB_DB "
            "before running the submit script"
        )
    if parsed.get_backend_name() == "sqlite" and not Path(parsed.database or "").is_absolute():
        parsed = parsed.set(database=str(Path(parsed.database or "").resolve()))
    return parsed.render_as_string(hide_password=False)


def check_path(path: Path, option: str) -> Path:
    if _CONTROL_RE.search(str(path)):
        raise SlurmArgumentError(f"{option} {str(path)!r}: the path contains control characters (e.g. a newline)")
    return path


def check_db_file(path: Path) -> Path:
    """--db-file: the file that holds the database URL, absolute; it must be there."""
    check_path(path, "--db-file")
    path = path.expanduser().resolve()
    if not path.is_file():
        raise SlurmArgumentError(f"--db-file {path}: no such file (it must hold the database URL)")
    return path


def check_name(value: str | None, option: str) -> str | None:
    if value is not None and not _NAME_RE.match(value):
        raise SlurmArgumentError(f"{option} {value!r}: use letters, digits and _.,+- only")
    return value


def validate(job: SlurmJob) -> SlurmJob:
    """Raise SlurmArgumentError (exit code 2) for anything the scripts could not carry safely."""
    if job.nodes < 1:
        raise SlurmArgumentError(f"--nodes {job.nodes}: at least 1 node")
    if job.gpus_per_node < 0:
        raise SlurmArgumentError(
            f"--gpus-per-node {job.gpus_per_node}: the GPUs of each node, or 0 for CPU nodes")
    if job.db_url is not None and job.db_file is not None:
        raise SlurmArgumentError("give at most one of --db URL (without password) and --db-file FILE")
    if job.db_url is not None:
        check_db_url(job.db_url)
    check_time(job.time_limit)
    check_time(job.finalize_time_limit, "--finalize-time")
    check_time(job.collectives_time_limit, "--collectives-time")
    check_name(job.partition, "--partition")
    check_name(job.account, "--account")
    if job.run_id is not None:
        check_run_id(job.run_id)
    try:
        parse_fail_on(job.fail_on)
    except ValueError as exc:
        raise SlurmArgumentError(str(exc)) from None
    if job.series_by not in tuple(SeriesBy):
        raise SlurmArgumentError(f"--by {job.series_by!r}: allowed: {allowed(SeriesBy)}")
    if not job.rooflab:
        raise SlurmArgumentError("the command that starts rooflab on the nodes is empty")
    for path, option in ((job.spec_path, "SPEC"), (job.out_dir, "--out"),
                         *((Path(word), "--venv/--python") for word in job.rooflab)):
        check_path(path, option)
    if job.db_file is not None:
        check_path(job.db_file, "--db-file")
    if not _SUITE_RE.match(job.suite):
        raise SlurmArgumentError(f"spec name {job.suite!r}: job names and run ids need letters, digits and _.+- only")
    return job
