"""The Typer application: each command group lives in its own module and registers itself here.

A command's module is imported only when that command runs (or when `rooflab --help` lists them
all): COMMAND_MODULES names the module of each command, and LazyCommands, the application's group,
loads it on first use. So each command module imports what its command needs at its top, and
`rooflab run` never pays for the report's, or the import's, libraries."""
from __future__ import annotations

import importlib
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import typer
from rich.markup import escape
from typer import core as typer_core
from typer.main import get_group

from rooflab.errors import UserError
from rooflab.runners.cli.epilogue import print_error
from rooflab.vocab import ExitCode

# command -> its module in rooflab.runners.cli (its `register(app, db_app)` adds it), in --help's order
COMMAND_MODULES = {
    "run": "run_cmd", "list": "list_cmd", "devices": "devices_cmd", "export": "db_cmd",
    "roofline": "roofline_cmd", "predict": "roofline_cmd", "compare": "compare_cmd", "regressions": "report_cmd",
    "report": "report_cmd", "history": "history_cmd", "slurm": "cluster_cmd", "bisect": "cluster_cmd",
    "nightly": "cluster_cmd", "crosscheck": "crosscheck_cmd", "breakdown": "breakdown_cmd",
    "counters": "counters_cmd", "collectives": "collectives_cmd", "import": "import_cmd", "fleet": "fleet_cmd",
    "db": "db_cmd",
}
DB_HELP = "Maintain the results database (upgrade, merge, prune)."
_SETTINGS: dict[str, Any] = dict(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                                 rich_markup_mode=None)  # plain help: flags without a `<bool>` type column


class LazyCommands(typer_core.TyperGroup):
    """The application's group: a command is built from its module the first time it is asked for."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMAND_MODULES)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        return self.command(cmd_name)

    def command(self, name: str) -> typer_core.TyperCommand | typer_core.TyperGroup | None:
        """The command `name`, its module loaded the first time; None for a name that is no command."""
        if name not in self.commands and name in COMMAND_MODULES:
            self._load(COMMAND_MODULES[name])
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


def command_names() -> list[str]:
    """Every command, `db`'s subcommands as `db NAME`, each built (its module loaded)."""
    group = get_group(app)
    assert isinstance(group, LazyCommands)
    names = []
    for name in COMMAND_MODULES:
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
