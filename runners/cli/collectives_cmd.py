"""`rooflab collectives SPEC --run-id RUN`: one rank of a group over many nodes (srun, torchrun)."""
from __future__ import annotations

import os
import sys

import typer

from rooflab.runners.cli.common import DbOption, FilterOption, db_url
from rooflab.runners.cli.epilogue import fail, guarded
from rooflab.runners.orchestration.env_ranks import run_env_rank

COLLECTIVES_HELP = """Measure the collective cases of SPEC as one rank of a group started by srun or torchrun.

Start it once per GPU: each process takes its rank, the world size, its GPU (LOCAL_RANK) and the
rendezvous (MASTER_ADDR, MASTER_PORT) from torchrun's variables or from Slurm's (SLURM_PROCID,
SLURM_NTASKS, SLURM_LOCALID; the script `rooflab slurm` writes sets MASTER_ADDR and MASTER_PORT).
Rank 0 stores the results into RUN: collective cases with `ranks: all` are stored under the
step's world size (e.g. ranks=32), and cases already stored are not measured again. On one
node, `rooflab run --devices all` measures the collectives without a launcher.
Exit code 1 after a fault on any rank (srun --kill-on-bad-exit=1 then ends the others); 143 when
stopped by SIGTERM (noted, then obeyed before the next case, so rank 0 stores the case in flight).
"""


def collectives_command(
    spec: str = typer.Argument(..., help="Spec file or shipped spec name (its collective cases are measured)."),
    run_id: str = typer.Option(..., "--run-id", help="Run to store into (the night's run id)."),
    db: str | None = DbOption,
    filter_: list[str] = FilterOption,
    seed: int = typer.Option(0, "--seed", help="Base seed of the random inputs."),
    case_timeout_s: float = typer.Option(600.0, "--case-timeout-s",
                                         help="A collective (or the rendezvous) that takes longer fails."),
    device: str = typer.Option("auto", "--device",
                               help="auto (a GPU when there is one, else the CPU), cpu (gloo) or cuda (nccl)."),
    pairs_at_once: str | None = typer.Option(
        None, "--pairs-at-once", help="The link matrix: pairs measured at once, all or a number (1: one at a time)."),
) -> None:
    if not case_timeout_s > 0:
        fail(f"--case-timeout-s {case_timeout_s}: must be > 0 (seconds)")
    code = guarded(lambda: run_env_rank(spec, db=db_url(db), run_id=run_id, filters=tuple(filter_), seed=seed,
                                        case_timeout_s=case_timeout_s, device=device, pairs_at_once=pairs_at_once))
    # the results are stored and the group is left (or broken, after a fault): leave at once with the
    # code, since the process group's C++ destructors can abort the interpreter at exit (a collective
    # may still hold its threads, or the store's host may be gone)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def register(app: typer.Typer, db_app: typer.Typer) -> None:
    app.command("collectives", help=COLLECTIVES_HELP)(collectives_command)
