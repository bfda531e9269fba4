"""`rooflab run SPEC`: measure a spec's cases into the results database."""
from __future__ import annotations

import typer
from rich.markup import escape

from rooflab.runners.cli.common import (
    DbOption,
    FilterOption,
    JsonOption,
    console,
    db_url,
    err_console,
    print_json,
    user_error_types,
)
from rooflab.suite.timing import TimingSettings

_ENGINE = TimingSettings()


def _default(name: str) -> str:
    """What a timing override falls back to: the benchmark's own setting, else the engine's."""
    value = getattr(_ENGINE, name)
    return f"the spec's, else {value if isinstance(value, str) else format(value, 'g')}"

RUN_HELP = """Measure the cases of SPEC (a YAML file, or a shipped spec name such as quick) into the database.

Each case runs in a worker process: an exception marks it failed, a worker that dies marks it
crashed, and the sweep goes on. Ctrl-C finishes the case in flight and marks the run interrupted
(exit code 130); `--resume RUN_ID` measures what is left (with the run's own spec only).

A run holds a lock on each device it measures: a second run on a busy device refuses (exit code
75) unless it is told to wait (--lock-wait-s) or to ignore the lock (--no-lock).
"""


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
    warmup_ms: float | None = typer.Option(None, "--warmup-ms", show_default=_default("warmup_ms"),
                                              help="Warmup lasts at least this long (ms)."),
    warmup_calls: int | None = typer.Option(None, "--warmup-calls", show_default=_default("warmup_calls"),
                                               help="... and at least this many calls."),
    min_samples: int | None = typer.Option(None, "--min-samples", show_default=_default("min_samples"),
                                              help="Samples at least this many."),
    max_samples: int | None = typer.Option(None, "--max-samples", show_default=_default("max_samples"),
                                              help="Samples at most this many."),
    min_time_ms: float | None = typer.Option(None, "--min-time-ms", show_default=_default("min_time_ms"),
                                                help="Samples at least this long (ms)."),
    max_time_ms: float | None = typer.Option(None, "--max-time-ms", show_default=_default("max_time_ms"),
                                                help="Gives up converging after this long (ms)."),
    target_precision: float | None = typer.Option(
        None, "--target-precision", show_default=_default("target_precision"),
        help="Stop when the median's 95 % CI half-width / median is below this (0, 1).",
    ),
    flush_method: str | None = typer.Option(
        None, "--flush-method", show_default=_default("flush_method"),
        help="How a cold case's cache is flushed before each sample: write_sweep (a cache of dirty lines, "
             "as after a kernel that wrote) or read_sweep (clean lines). Recorded per result.",
    ),
    pace: str | None = typer.Option(
        None, "--pace", show_default=_default("pace"),
        help="back_to_back, or idle: synchronise after each sample and leave the device idle about as long "
             "as the sample took (at most 100 ms). Recorded per result.",
    ),
    case_timeout_s: float | None = typer.Option(
        None, "--case-timeout-s", help="Wall-clock limit of one case; a worker past it is killed (crashed)."
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
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing but problems and the summary."),
    json_output: bool = JsonOption,
) -> None:
    from rooflab.runners.machine.devlock import EXIT_DEVICE_BUSY, DeviceBusyError
    from rooflab.runners.orchestration.session import RunOptions, run_suite

    overrides = {
        "warmup_ms": warmup_ms,
        "warmup_calls": warmup_calls,
        "min_samples": min_samples,
        "max_samples": max_samples,
        "min_time_ms": min_time_ms,
        "max_time_ms": max_time_ms,
        "target_precision": target_precision,
        "flush_method": flush_method,
        "pace": pace,
    }
    try:
        summary = run_suite(spec, db=db_url(db), options=RunOptions(
            filters=tuple(filter_),
            device=device,
            devices=devices,
            shard=shard,
            run_id=run_id,
            resume=resume,
            timing_overrides=overrides,
            quiet=quiet,
            seed=seed,
            case_timeout_s=case_timeout_s,
            json_output=json_output,
            cpu_threads=threads,
            lock=not no_lock,
            lock_wait_s=lock_wait_s,
        ))
    except DeviceBusyError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True, highlight=False)
        raise typer.Exit(EXIT_DEVICE_BUSY) from None
    except user_error_types() as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True, highlight=False)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        err_console.print("interrupted before the run started; nothing was measured", highlight=False)
        raise typer.Exit(130) from None
    if json_output:
        print_json(summary.to_dict())
    else:
        from rooflab.runners.orchestration.progress import render_summary

        render_summary(summary.to_dict(), console)
    raise typer.Exit(summary.exit_code)


def register(app: typer.Typer, db_app: typer.Typer) -> None:
    app.command("run", help=RUN_HELP)(run_command)
