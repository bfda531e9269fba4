"""`rooflab counters SPEC`: every case's byte and FLOP model held against Nsight Compute's counters."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from rooflab.runners.cli.common import DbOption, JsonOption, check_output_dir, db_url
from rooflab.runners.cli.epilogue import console, err_console, fail, respond
from rooflab.runners.counters.render import render
from rooflab.runners.counters.session import run_counters
from rooflab.vocab import ResultStatus

if TYPE_CHECKING:
    from rooflab.db.counters import CounterRecord

COUNTERS_HELP = """Run one call of each case of SPEC under Nsight Compute (ncu) and hold the op's byte and FLOP
model against what the hardware counted.

Each case is prepared exactly as `rooflab run` prepares it, in a child process launched under ncu;
only the kernels of one timed call (an NVTX range around it) are profiled, the cache flushed before
each (--cache-control all; none for a hot case) and the clocks left alone (--clock-control none).
Reported per case: DRAM bytes read and written, L2 traffic, FLOPs by precision, tensor-pipe
instructions, kernels and their time, each against the model; a case whose DRAM bytes differ from
its model by more than 10 % is marked with the likeliest reason. Readings are stored (table
counter_readings) beside the measurement they check and shown in `rooflab report`.
Needs a CUDA GPU and permission to read its counters; docs/counters.md.
"""


def counters_command(
    spec: str = typer.Argument(..., help="Spec file or shipped spec name (e.g. quick)."),
    filter_: list[str] = typer.Option([], "--filter", "-f",
                                      help="Keep cases with KEY=VALUE (op, dtype, n, ...); repeatable."),
    device: str = typer.Option("auto", "--device", help="auto (first CUDA GPU), or cuda:N."),
    ncu: str | None = typer.Option(None, "--ncu", help="Path of the ncu executable [default: ncu on PATH]."),
    seed: int = typer.Option(0, "--seed", help="Base seed of the random inputs (as in rooflab run)."),
    keep_reports: Path | None = typer.Option(None, "--keep-reports",
                                             help="Keep each case's ncu report (CSV) and output in this folder."),
    db: str | None = DbOption,
    json_output: bool = JsonOption,
) -> None:
    if seed < 0:
        fail(f"--seed {seed}: must be >= 0")
    # checked, not made: run_counters makes it with the first reading it stores, so that a refused
    # command leaves no folder behind
    keep = check_output_dir(keep_reports, "--keep-reports") if keep_reports is not None else None

    def progress(record: CounterRecord) -> None:
        if json_output:
            return
        text = record.status if record.status != ResultStatus.OK else f"ok, {record.kernels} kernel(s)"
        if record.error and record.status != ResultStatus.SKIPPED:
            text += f": {record.error}"
        err_console.print(f"{escape(record.case.case_key)}: {escape(text)}", highlight=False, soft_wrap=True)

    respond(lambda: run_counters(spec, db_url=db_url(db), filters=filter_, device=device, ncu=ncu, seed=seed,
                                 on_reading=progress, keep=keep).to_dict(),
            as_json=json_output, show=lambda data: render(data, console),
            interrupted="interrupted; the cases finished so far are stored")


def register(app: typer.Typer, db_app: typer.Typer) -> None:
    app.command("counters", help=COUNTERS_HELP)(counters_command)
