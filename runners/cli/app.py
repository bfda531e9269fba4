"""The Typer application: each command group lives in its own module and registers itself here.

A command's module is imported only when that command runs: COMMANDS names each command's module
and summary, LazyCommands (the application's group) builds a command on first use, and `rooflab
--help` lists them from the table without loading any. So each command module imports what its
command needs at its top, and `rooflab run` never pays for the report's, or the import's, libraries."""
from __future__ import annotations

import importlib
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any, NamedTuple

import typer
from rich.markup import escape
from typer import core as typer_core
from typer.main import get_group

from rooflab.errors import UserError
from rooflab.runners.cli.epilogue import print_error
from rooflab.vocab import ExitCode


class Command(NamedTuple):
    """Where a command lives and what `rooflab --help` says of it without loading it."""

    module: str  # in rooflab.runners.cli; its `register(app, db_app)` adds the command
    summary: str  # the first sentence of the command's own help (tests/runners/test_cli_help.py holds it so)


# every command, in --help's order
COMMANDS = {
    "run": Command(
        "run_cmd",
        'Measure the cases of SPEC (a YAML file, or a shipped spec name such as quick) into the database.'),
    "list": Command(
        "list_cmd",
        'Print the cases a spec expands to (case_key, op, family, backend, dtype, cache, timing mode, params,'
        ' FLOPs, bytes, and of them those read and those written) without running anything.'),
    "devices": Command(
        "devices_cmd",
        'List the devices present (CUDA GPUs, then the CPU) and which one `make bench` uses.'),
    "export": Command(
        "db_cmd",
        'Export results, the standard export columns first (one row per measurement; docs/design.md).'),
    "roofline": Command(
        "roofline_cmd",
        'Measured ceilings of one device, each with its case, run and ratio to the datasheet.'),
    "predict": Command(
        "roofline_cmd",
        'Intensity, ridge point, wall, roofline time and attainable FLOP/s of an op on a device.'),
    "compare": Command(
        "compare_cmd",
        'Per-case speedup of the candidate over the baseline with its 95 % interval, beside the speedup the '
        'roofs predict; the runs paired are named, with the rule that paired them.'),
    "regressions": Command(
        "report_cmd",
        'Newest two results of every series (each case on each physical device, or --by model) against a '
        'robust baseline, and change points and drift over its history; exit 1 when --fail-on matches.'),
    "report": Command("report_cmd", 'Write the static HTML report (rooflines, diagnosis, comparison, regressions).'),
    "history": Command(
        "history_cmd",
        "The history of a case (every run, with the regression check's verdict), or a sparkline per series of"
        ' the cases matching --filter.'),
    "slurm": Command(
        "cluster_cmd",
        'Write Slurm scripts for a night: a job array over shards, then the collective step over all nodes, '
        'then regressions and the report; or (--fleet) a health night: a job array that measures the whole '
        'spec on every node, then `rooflab fleet`; or a links night (--links), or a bisection (--bisect).'),
    "bisect": Command(
        "cluster_cmd",
        'Inside a Slurm allocation: which node makes the whole slow? (the job of `rooflab slurm SPEC '
        '--bisect`)'),
    "nightly": Command(
        "cluster_cmd",
        'Run SPEC, check the history for regressions, write the HTML report: one command for CI.'),
    "crosscheck": Command(
        "crosscheck_cmd",
        "Time each case of SPEC with rooflab's engine and with peer timers, round after round, in one "
        'process.'),
    "breakdown": Command(
        "breakdown_cmd",
        "Each profiled transformer block of a device: its parts' time, FLOP/s, GB/s, wall and efficiency, the"
        ' time no part accounts for, MFU, and the fusion estimate against the measured eager/compiled '
        'speedup.'),
    "counters": Command(
        "counters_cmd",
        "Run one call of each case of SPEC under Nsight Compute (ncu) and hold the op's byte and FLOP model "
        'against what the hardware counted.'),
    "collectives": Command(
        "collectives_cmd",
        'Measure the collective cases of SPEC as one rank of a group started by srun or torchrun.'),
    "import": Command(
        "import_cmd",
        "Import results: a rooflab export, or the peers' own output files (importing twice adds nothing)."),
    "fleet": Command(
        "fleet_cmd",
        'Which devices (and nodes) got slower than their siblings of the same model tonight.'),
    "db": Command("db_cmd", 'Maintain the results database (upgrade, merge, prune).'),
}
DB_HELP = "Maintain the results database (upgrade, merge, prune)."
_SETTINGS: dict[str, Any] = dict(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                                 rich_markup_mode=None)  # plain help: flags without a `<bool>` type column


class LazyCommands(typer_core.TyperGroup):
    """The application's group: a command is built from its module the first time it is asked for."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The commands and their summaries, no module loaded (click's listing builds every command)."""
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        with formatter.section("Commands"):
            formatter.write_dl([(name, _clipped(c.summary, limit)) for name, c in COMMANDS.items()])

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        return self.command(cmd_name)

    def command(self, name: str) -> typer_core.TyperCommand | typer_core.TyperGroup | None:
        """The command `name`, its module loaded the first time; None for a name that is no command."""
        if name not in self.commands and name in COMMANDS:
            self._load(COMMANDS[name].module)
        found = self.commands.get(name)
        assert found is None or isinstance(found, typer_core.TyperCommand | typer_core.TyperGroup)
        return found

    def _load(self, module_name: str) -> None:
        """Registers the commands of one module on Typer apps of their own and adds their click commands
        (and `db`'s group, for the module that fills it) to this group."""
        module = importlib.import_module(f"rooflab.runners.cli.{module_name}")
        commands, db_commands = typer.Typer(**_SETTINGS), typer.Typer(help=DB_HELP, **_SETTINGS)
        module.register(commands, db_commands)
        for info in commands.registered_commands:
            assert info.name is not None
            self.commands[info.name] = typer.main.get_command_from_info(
                info, pretty_exceptions_short=False, rich_markup_mode=None)
        if db_commands.registered_commands:
            self.commands["db"] = get_group(db_commands)


def _clipped(text: str, width: int) -> str:
    """`text` cut at a word to fit `width` with "..." after it, as click shortens a command's help."""
    if len(text) <= width:
        return text
    cut = text.rfind(" ", 0, width - 2)
    return text[:cut if cut > 0 else width - 3] + "..."


def command_names() -> list[str]:
    """Every command, `db`'s subcommands as `db NAME`, each built (its module loaded)."""
    group = get_group(app)
    assert isinstance(group, LazyCommands)
    names = []
    for name in COMMANDS:
        command = group.command(name)
        if isinstance(command, typer_core.TyperGroup):
            names += [f"{name} {sub}" for sub in command.commands]
        else:
            names.append(name)
    return names


app = typer.Typer(
    cls=LazyCommands,
    name="rooflab",
    help="GPU microbenchmarks with a results database: rooflines, comparisons, regressions.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: flags without a `<bool>` type column, values with theirs
)


def rooflab_version() -> str:
    """This rooflab's version as installed (pip/uv metadata), or a note that it is not installed."""
    try:
        return version("rooflab")
    except PackageNotFoundError:
        return "unknown (not installed as a package)"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"rooflab {rooflab_version()}")
        raise typer.Exit(0)


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print rooflab's version and exit."
    ),
) -> None:
    """GPU microbenchmarks with a results database: rooflines, comparisons, regressions."""


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `rooflab` console script."""
    try:
        app(args=argv, standalone_mode=True)
    except UserError as exc:  # raised outside a command's own handling
        print_error(escape(str(exc)))
        sys.exit(ExitCode.BAD_INPUT)
