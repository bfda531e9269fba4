"""`rooflab crosscheck SPEC`: every case timed by rooflab and by the peers' timers, in one process."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from rooflab.runners.cli.common import DbOption, JsonOption, db_url
from rooflab.runners.cli.epilogue import console, err_console, fail, json_text, respond
from rooflab.runners.crosscheck.render import render
from rooflab.runners.crosscheck.session import run_crosscheck
from rooflab.vocab import ResultStatus

if TYPE_CHECKING:
    from rooflab.runners.crosscheck.session import PeerCheck
    from rooflab.suite.case import Case

CROSSCHECK_HELP = """Time each case of SPEC with rooflab's engine and with peer timers, round after round, in one
process.

Each case is prepared exactly as `rooflab run` prepares it; the same callable then goes to
rooflab's engine as configured, to rooflab's engine in each peer's own mode (its flush kind and
size, pace, hold, clock and sample) and to each available peer (torch, do_bench, nvbench, cupyx),
round after round over --rounds rounds. A collective case is timed by rooflab's rank group and by
the collective peers (dist_loop: a plain torch.distributed loop written the nccl-tests way, in a
group of its own; nccl_tests: nccl-tests' own binaries, on GPUs, when on PATH), alternating in rounds.
Reported per case and peer: the medians and spreads, ratio
= rooflab as configured / peer (the method difference, with the modes that differ), in-mode ratio
= rooflab in the peer's mode / peer (the engines' agreement), and a mark where the latter two
disagree by more than either spread.
Results are stored in the database (table crosschecks) and shown in `rooflab report`.
"""


def crosscheck_command(
    spec: str = typer.Argument(..., help="Spec file or shipped spec name (e.g. quick)."),
    filter_: list[str] = typer.Option([], "--filter", "-f",
                                      help="Keep cases with KEY=VALUE (op, dtype, n, ...); repeatable."),
    device: str = typer.Option("auto", "--device", help="auto (first CUDA GPU, else the CPU), cpu or cuda:N."),
    peers: str = typer.Option("all", "--peers",
                              help="all, or a comma-separated list of: torch, do_bench, nvbench, cupyx, "
                                   "dist_loop, nccl_tests (collectives)."),
    rounds: int = typer.Option(3, "--rounds", help="Rounds of rooflab then every peer, per case (1 to 50)."),
    seed: int = typer.Option(0, "--seed", help="Base seed of the random inputs (as in rooflab run)."),
    out: Path | None = typer.Option(None, "--out", help="Also write the JSON report to this file."),
    db: str | None = DbOption,
    json_output: bool = JsonOption,
) -> None:
    if out is not None and not out.parent.exists():
        fail(f"--out {escape(str(out))}: directory {escape(str(out.parent))} does not exist")
    if seed < 0:
        fail(f"--seed {seed}: must be >= 0")

    def progress(case: Case, results: list[PeerCheck]) -> None:
        if json_output:
            return
        parts = []
        for r in results:
            if r.status == ResultStatus.OK:
                mark = " DISAGREE" if r.disagrees else ""
                in_mode = f", in its mode {r.in_mode_ratio:.3f}" if r.in_mode_ratio is not None else ""
                parts.append(f"{r.peer} {r.ratio:.3f}{in_mode}{mark}")
            elif (r.status != ResultStatus.SKIPPED
                  or r.error and "importable" not in r.error and "needs a CUDA" not in r.error):
                parts.append(f"{r.peer} {r.status}")
        err_console.print(f"{escape(case.case_key)}: {escape(', '.join(parts))}", highlight=False, soft_wrap=True)

    def check() -> dict[str, Any]:
        data = run_crosscheck(spec, db_url=db_url(db), filters=filter_, device=device, peers=peers, rounds=rounds,
                              seed=seed, on_check=progress).to_dict()
        if out is not None:
            out.write_text(json_text(data), encoding="utf-8")
        return data

    respond(check, as_json=json_output, show=lambda data: render(data, console),
            interrupted="interrupted; the cases finished so far are stored")


def register(app: typer.Typer, db_app: typer.Typer) -> None:
    app.command("crosscheck", help=CROSSCHECK_HELP)(crosscheck_command)
