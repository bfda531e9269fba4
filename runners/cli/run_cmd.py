"""`rooflab run SPEC`: measure a spec's cases into the results database."""
from __future__ import annotations

from typing import Any

import typer

from rooflab.runners.cli.common import DbOption, FilterOption, JsonOption, db_url
from rooflab.runners.cli.epilogue import console, respond
from rooflab.runners.cli.timing_options import timing_overrides, with_timing_options
from rooflab.runners.orchestration.progress import render_summary
from rooflab.runners.orchestration.run_options import RunOptions
from rooflab.runners.orchestration.session import RunSummary, run_suite

RUN_HELP = """Measure the cases of SPEC (a YAML file, or a shipped spec name such as quick) into the database.

Each case runs in a worker process: an exception marks it failed, a worker that dies marks it
crashed, and the sweep goes on. Ctrl-C finishes the case in flight and marks the run interrupted
(exit code 130); `--resume RUN_ID` measures what is left (with the run's own spec only).

A run holds a lock on each device it measures: a second run on a busy device refuses (exit code
75) unless it is told to wait (--lock-wait-s) or to ignore the lock (--no-lock).
"""


@with_timing_options
def run_command(
    spec: str | None = typer.Argument(None, help="Spec file or shipped spec name; optional with --resume."),
    db: str | None = DbOption,
    filter_: list[str] = FilterOption,
    device: str = typer.Option("auto", "--device", help="auto (first CUDA GPU, else the CPU), cpu or cuda:N."),
    devices: str | None = typer.Option(
        None, "--devices", help="all, or a list such as 0,1: one worker per GPU, each measuring every case."
    ),
    shard: str | None = typer.Option(None, "--shard", help="I/N: run shard I (0-based) of N cost-balanced shards."),
    run_id: str | None = typer.Option(
        None, "--run-id",
        help="Run id to write under; by default SPEC-YYYYMMDD for a shard (all shards of a night share it), "
             "else SPEC-<UTC time>-<random>."
    ),
    resume: str | None = typer.Option(
        None, "--resume", help="Measure only the cases of RUN_ID that have no result (a SPEC given must be the run's)."
    ),
    seed: int = typer.Option(0, "--seed", help="Base seed of the random inputs."),
    case_timeout_s: float | None = typer.Option(
        None, "--case-timeout-s", help="Wall-clock limit of one case (of each round of a matrix of pairs); a worker "
        "past it is killed (crashed)."
    ),
    threads: int | None = typer.Option(
        None, "--threads",
        help="Threads of a CPU case (torch intra-op); default: one per physical core. Recorded with each result."
    ),
    no_lock: bool = typer.Option(
        False, "--no-lock",
        help="Measure even if another run holds the device's lock (their timings will disturb each other)."
    ),
    lock_wait_s: float = typer.Option(
        0.0, "--lock-wait-s",
        help="Wait up to this long (s) for a device another run holds; then refuse (exit code 75)."
    ),
    pairs_at_once: str | None = typer.Option(
        None, "--pairs-at-once",
        help="The link matrix (op sendrecv_pairs): pairs measured at once, all (a round-robin round) or a "
             "number (1: one pair at a time); default: as the spec says."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing but problems and the summary."),
    json_output: bool = JsonOption,
    **timing: Any,
) -> None:
    options = RunOptions(
        filters=tuple(filter_),
        device=device,
        devices=devices,
        shard=shard,
        run_id=run_id,
        resume=resume,
        timing_overrides=timing_overrides(timing),
        quiet=quiet,
        seed=seed,
        case_timeout_s=case_timeout_s,
        json_output=json_output,
        cpu_threads=threads,
        lock=not no_lock,
        lock_wait_s=lock_wait_s,
        pairs_at_once=pairs_at_once,
    )
    respond(lambda: run_suite(spec, db=db_url(db), options=options), as_json=json_output, to_json=RunSummary.to_dict,
            show=lambda summary: render_summary(summary.to_dict(), console), exit_code=lambda s: s.exit_code,
            interrupted="interrupted before the run started; nothing was measured")


def register(app: typer.Typer, db_app: typer.Typer) -> None:
    app.command("run", help=RUN_HELP)(run_command)
