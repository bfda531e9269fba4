"""`rooflab slurm` (batch scripts for a cluster night: runners/cluster/) and `rooflab nightly` (one
command for CI)."""
from __future__ import annotations

from enum import StrEnum
from pathlib import Path

import typer
from rich.markup import escape

from rooflab.reports.fleet.options import DEFAULT_SUITE
from rooflab.reports.fleet.status import FleetFailOn, parse_fleet_fail_on
from rooflab.reports.regressions.options import RegressionOptions
from rooflab.reports.regressions.verdicts import FailOn
from rooflab.runners.cli.common import ByOption, DbOption, FilterOption, JsonOption, db_url
from rooflab.runners.cli.epilogue import console, err_console, fail, respond
from rooflab.runners.cluster import health, links, slurm, slurm_job
from rooflab.runners.cluster.halving import Bisection
from rooflab.suite.spec import expand, load_spec
from rooflab.vocab import SeriesBy


class NightKind(StrEnum):
    """The scripts `rooflab slurm` writes: which kind of night (or the bisection)."""

    SHARDED = "sharded"  # the suite split over the nodes, then the regression check
    HEALTH = "health"  # every node measures the whole suite, then rooflab fleet
    LINKS = "links"  # each node's pairs, then the pairs of nodes
    BISECT = "bisect"  # the halving search for a slow node


REGRESSION_DEFAULTS = RegressionOptions()  # the flags' defaults
FleetFailOnOption = typer.Option(str(FleetFailOn.DRAIN), "--fleet-fail-on",
                                 help="Fail (exit 1) when a device of the night is at this status or worse against "
                                      "its siblings (rooflab fleet): never|suspect|slow|drain.")
FleetOption = typer.Option(
    None, "--fleet/--sharded",
    help="--fleet: a health night, every node measuring the whole spec on all its devices, then `rooflab fleet`; "
         f"--sharded: the spec split over the nodes, then the regression check [default: --fleet for the "
         f"{DEFAULT_SUITE} spec, else --sharded].")
SlurmByOption = typer.Option(
    None, "--by",
    help="The series a sharded night's finalising job judges (`rooflab nightly --by`): model, each case on a model's "
         "devices, since which node measures a case changes from night to night; device, each case on each "
         "physical device, where each case is measured on the same devices every night (e.g. a partition of one "
         "node) [default: model; a health night judges every device (rooflab fleet) and takes no --by model].")
LINKS_SUITE = "links"  # the shipped spec whose Slurm night is a links night by default
LinksOption = typer.Option(
    None, "--links/--no-links",
    help="--links: a links night, each node's pairs of GPUs (a job array), then the pairs of nodes (one rank per "
         f"node) [default: --links for the {LINKS_SUITE} spec].")
BisectOption = typer.Option(False, "--bisect", help="The halving search for a slow node instead: the spec's "
                            "collective on halves of the nodes, then halves of the slower half (rooflab bisect).")
PairsAtOnceOption = typer.Option(
    None, "--pairs-at-once", help="A links night: pairs measured at once, all or a number (1: one at a time).")


def slurm_command(
    spec: str = typer.Argument(..., help="Spec file (or shipped spec name); its absolute path goes into the script."),
    nodes: int = typer.Option(..., "--nodes", help="Nodes = shards = array tasks."),
    gpus_per_node: int = typer.Option(..., "--gpus-per-node",
                                      help="GPUs each node gives the job (one worker per GPU); "
                                           "0: CPU nodes (measured on the CPU, collectives over gloo)."),
    db: str | None = typer.Option(
        None, "--db", help="Results database URL, written into the scripts: must not carry a password (use ~/.pgpass)."
    ),
    db_file: Path | None = typer.Option(
        None, "--db-file", help="File holding the database URL (with password), read by each job. "
        "Without --db and --db-file the jobs take ROOFLAB_DB from the submitting environment."
    ),
    time_limit: str = typer.Option("04:00:00", "--time", help="Wall time of each shard task, [D-]HH:MM:SS."),
    finalize_time: str = typer.Option("01:00:00", "--finalize-time", help="Wall time of the finalising job."),
    collectives_time: str = typer.Option("01:00:00", "--collectives-time",
                                         help="Wall time of the collective step over all nodes."),
    partition: str | None = typer.Option(None, "--partition", help="Slurm partition."),
    account: str | None = typer.Option(None, "--account", help="Slurm account."),
    out: Path = typer.Option(Path("rooflab-nightly"), "--out", help="Shared directory for logs/ and report/."),
    run_id: str | None = typer.Option(
        None, "--run-id", help="Fixed run id; default: <suite>-<UTC date>, chosen when the submit script runs."
    ),
    venv: Path | None = typer.Option(None, "--venv", help="Virtual environment with rooflab on the nodes."),
    python: Path | None = typer.Option(
        None, "--python", help="Python that runs rooflab on the nodes as `PYTHON -m rooflab` (e.g. a checkout: "
        "export PYTHONPATH before running the submit script; the jobs get its environment)."
    ),
    output: Path | None = typer.Option(
        None, "--output", help="Array script to write (default OUT/rooflab-<suite>.sbatch); "
        "the .collectives.sbatch, .finalize.sbatch and .submit.sh scripts go beside it."
    ),
    fail_on: str = typer.Option(str(FailOn.REGRESSION), "--fail-on",
                                help="When the finalising job fails: regression|drift|suspect|never."),
    fleet: bool | None = FleetOption,
    fleet_fail_on: str = FleetFailOnOption,
    by: SeriesBy | None = SlurmByOption,
    links_night: bool | None = LinksOption,
    bisect: bool = BisectOption,
    pairs_at_once: str | None = PairsAtOnceOption,
    as_json: bool = typer.Option(False, "--json", help="Print the scripts' paths and the notes as JSON."),
) -> None:
    """Write Slurm scripts for a night: a job array over shards, then the collective step over all
    nodes, then regressions and the report; or (--fleet) a health night: a job array that measures
    the whole spec on every node, then `rooflab fleet`; or a links night (--links), or a bisection
    (--bisect)."""
    try:
        parse_fleet_fail_on(fleet_fail_on, "--fleet-fail-on")
    except ValueError as exc:
        fail(escape(str(exc)))

    def write() -> tuple[Written, tuple[str, ...]]:
        loaded = load_spec(spec)
        n_cases = len(expand(loaded))  # a spec that does not expand is refused before anything is written
        job = slurm_job.validate(slurm_job.SlurmJob(
            spec_path=loaded.path.resolve(),
            suite=loaded.name,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            out_dir=slurm_job.check_path(out, "--out").expanduser().resolve(),
            rooflab=slurm_job.rooflab_command(venv, python),
            db_url=slurm_job.check_db_url(db) if db is not None else None,
            db_file=slurm_job.check_db_file(db_file) if db_file is not None else None,
            time_limit=time_limit,
            finalize_time_limit=finalize_time,
            collectives_time_limit=collectives_time,
            partition=partition,
            account=account,
            run_id=run_id,
            fail_on=fail_on,
            series_by=by or SeriesBy.MODEL,
        ))
        target = (output if output is not None else job.out_dir / f"rooflab-{job.suite}.sbatch").expanduser()
        kind = NightKind.BISECT if bisect else NightKind.LINKS if _chosen(links_night, job, LINKS_SUITE) else (
            NightKind.HEALTH if _chosen(fleet, job, DEFAULT_SUITE) else NightKind.SHARDED)
        return _write(kind, job, target, n_cases, fleet_fail_on, pairs_at_once, by)

    respond(write, as_json=as_json, show=_show_scripts,
            to_json=lambda done: {**{k: str(v) for k, v in done[0]._asdict().items()}, "notes": list(done[1])})


def _chosen(flag: bool | None, job: slurm_job.SlurmJob, default_suite: str) -> bool:
    """A kind of night: as its flag says, else the default for its shipped spec."""
    return flag if flag is not None else job.suite == default_suite


def _write(kind: NightKind, job: slurm_job.SlurmJob, target: Path, n_cases: int, fleet_fail_on: str,
           pairs_at_once: str | None, by: SeriesBy | None) -> tuple[Written, tuple[str, ...]]:
    """The scripts of one kind of night (or the bisection), written; their paths and the notes."""
    if kind == NightKind.HEALTH and by == SeriesBy.MODEL:
        raise slurm_job.SlurmArgumentError(
            "--by model: a health night judges every device against its siblings (rooflab fleet), "
            "never a model's aggregate; --by is the sharded night's (--sharded)")
    if kind == NightKind.BISECT:
        return links.write_bisect_scripts(job, target), ()
    if kind == NightKind.LINKS:
        return links.write_links_scripts(job, target, checked_pairs_at_once(pairs_at_once)), ()
    if kind == NightKind.HEALTH:
        return health.write_health_scripts(job, target, fleet_fail_on), ()
    return slurm.write_scripts(job, target), slurm.notes(job, n_cases)


SCRIPT_LABELS = {"array": "array script:      ", "collectives": "collectives script:",
                 "pairs": "pairs script:      ", "bisect": "bisect script:     ",
                 "finalize": "finalise script:   ", "submit": "submit script:     "}
Written = slurm.WrittenScripts | health.HealthScripts | links.LinksScripts | links.BisectScripts


def checked_pairs_at_once(value: str | None) -> str | None:
    """--pairs-at-once as the jobs will pass it on (all, or a whole number >= 1), or SlurmArgumentError."""
    if value is not None and value != "all" and not (value.isdigit() and int(value) >= 1):
        raise slurm_job.SlurmArgumentError(f"--pairs-at-once {value!r}: all, or a whole number >= 1 (1: one pair "
                                           "at a time)")
    return value


def _show_scripts(done: tuple[Written, tuple[str, ...]]) -> None:
    written, notes = done
    for note in notes:
        err_console.print(f"note: {escape(note)}", highlight=False, soft_wrap=True)
    paths = written._asdict()
    for name, label in SCRIPT_LABELS.items():
        if name in paths:
            console.print(f"{label} {escape(str(paths[name]))}", highlight=False, soft_wrap=True)
    console.print(f"submit tonight's run with: bash {escape(str(written.submit))}", highlight=False, soft_wrap=True)


NIGHTLY_HELP = """Run SPEC, check the history for regressions, write the HTML report: one command for CI.

Prints a short plain-text summary (counts by status, shards, regressions, suspects, improvements,
the fleet's verdicts on the run's night, where the report is) and writes OUT/summary.json for
bots. Exit code: 1 when a regression is found (per --fail-on), a device is at the
--fleet-fail-on status against its siblings, the run failed, cases of the spec have no result in the run (missing
coverage) or the report could not be written; 0 on a clean, complete night;
2 on invalid input; 130 when interrupted. `--skip-run` only judges and reports an existing run
(the last step of a sharded night, e.g. the Slurm finalising job).
"""


def nightly_command(
    spec: str = typer.Argument(..., help="Spec file or shipped spec name."),
    db: str | None = DbOption,
    out: Path = typer.Option(Path("report"), "--out", help="Directory for the HTML report and summary.json."),
    fail_on: str = typer.Option(str(FailOn.REGRESSION), "--fail-on",
                                help="Exit 1 on: "
                                     "regression | drift (or regression) | suspect (or regression or drift) | never."),
    fleet_fail_on: str = FleetFailOnOption,
    run_id: str | None = typer.Option(
        None, "--run-id",
        help="Run id (shards of one night share it); default: derived from the spec name and the date."
    ),
    shard: str | None = typer.Option(None, "--shard", help="I/N: run only shard I (0-based) of N."),
    filter_: list[str] = FilterOption,
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda:N."),
    devices: str | None = typer.Option(None, "--devices", help="all, or a list such as 0,1: one worker per GPU."),
    skip_run: bool = typer.Option(False, "--skip-run", help="Measure nothing: judge and report the run (--run-id, "
                                  "default the suite's latest run)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show a progress line per case."),
    window: int = typer.Option(REGRESSION_DEFAULTS.window, "--window",
                               help="Baseline: at most this many earlier good runs."),
    z_threshold: float = typer.Option(REGRESSION_DEFAULTS.z_threshold, "--threshold", "--z-threshold",
                                      help="Flag when the robust z-score is above this."),
    min_change: float = typer.Option(REGRESSION_DEFAULTS.min_change, "--min-change",
                                     help="... and the relative change above this."),
    by: SeriesBy = ByOption,
    json_output: bool = JsonOption,
    no_lock: bool = typer.Option(False, "--no-lock", help="Measure even if another run holds the device's lock."),
    lock_wait_s: float = typer.Option(
        0.0, "--lock-wait-s",
        help="Wait up to this long (s) for a device another run holds; then refuse (exit code 75)."
    ),
) -> None:
    # the night's module loads SQLAlchemy: only when the command runs (`rooflab --help` stays quick)
    from rooflab.runners.cluster.nightly import NightlyOptions, NightlySummary, nightly
    from rooflab.runners.orchestration.run_options import RunOptions

    options = NightlyOptions(
        out_dir=out, fail_on=fail_on, fleet_fail_on=fleet_fail_on, skip_run=skip_run,
        regression=RegressionOptions(window=window, z_threshold=z_threshold, min_change=min_change, by=by),
        run=RunOptions(run_id=run_id, shard=shard, filters=tuple(filter_), device=device, devices=devices,
                       quiet=not verbose, lock=not no_lock, lock_wait_s=lock_wait_s),
    )
    respond(lambda: nightly(spec, db=db_url(db), options=options), as_json=json_output,
            to_json=NightlySummary.to_dict, show=lambda summary: typer.echo(summary.text()),
            exit_code=lambda summary: summary.exit_code, interrupted="interrupted")


BISECT_HELP = """Inside a Slurm allocation: which node makes the whole slow? (the job of `rooflab slurm SPEC --bisect`)

Runs the spec's collective (not its matrices of pairs) on each half of the allocation's nodes with
srun, one half after the other, each into a run of its own (RUN_ID-bK-a, RUN_ID-bK-b); keeps the half
with the lower bus bandwidth and halves it again, until one node is left (about log2(N) steps).
A step where neither half is --min-gap below the other ends the search without naming a node.
Exit code 1 when a half stored no figure; 2 outside an allocation or on bad input.
"""


def bisect_command(
    spec: str = typer.Argument(..., help="Spec file or shipped spec name (its collective, e.g. links' all_reduce)."),
    run_id: str = typer.Option(..., "--run-id", help="The halves' runs are RUN_ID-bK-a and RUN_ID-bK-b."),
    db: str | None = DbOption,
    ranks_per_node: int = typer.Option(1, "--ranks-per-node", help="Ranks on each node of a half (its GPUs)."),
    device: str = typer.Option("auto", "--device", help="auto (the nodes' GPUs, else their CPUs) or cpu."),
    min_gap: float = typer.Option(0.1, "--min-gap", help="How far below the other half the slower must be (0.1: "
                                  "10 %) to be followed; else no node stands out."),
    out: Path | None = typer.Option(None, "--out", help="Write the bisection (steps, figures, the node) as JSON."),
    as_json: bool = JsonOption,
) -> None:
    # stays here: bisect.py loads pandas and db.query to read each half's figure back (0.63 s), which
    # `rooflab slurm` and `rooflab nightly`, in this module too, never need
    from rooflab.runners.cluster.bisect import run_bisection

    respond(lambda: run_bisection(spec, db=db_url(db), run_id=run_id, ranks_per_node=ranks_per_node, device=device,
                                  min_gap=min_gap, out=out),
            as_json=as_json, to_json=Bisection.to_dict, show=lambda found: typer.echo(found.text()),
            exit_code=lambda found: 1 if found.failed else 0)


def register(app: typer.Typer, db_app: typer.Typer) -> None:
    app.command("slurm")(slurm_command)
    app.command("bisect", help=BISECT_HELP)(bisect_command)
    app.command("nightly", help=NIGHTLY_HELP)(nightly_command)
