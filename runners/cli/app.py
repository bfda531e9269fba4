"""The Typer application: each command group lives in its own module and registers itself here."""
from __future__ import annotations

import sys

import typer
from rich.markup import escape

from rooflab.errors import UserError
from rooflab.runners.cli import (
    breakdown_cmd,
    cluster_cmd,
    collectives_cmd,
    compare_cmd,
    counters_cmd,
    crosscheck_cmd,
    db_cmd,
    devices_cmd,
    fleet_cmd,
    history_cmd,
    import_cmd,
    list_cmd,
    report_cmd,
    roofline_cmd,
    run_cmd,
)
from rooflab.runners.cli.epilogue import print_error
from rooflab.vocab import ExitCode

app = typer.Typer(
    name="rooflab",
    help="GPU microbenchmarks with a results database: rooflines, comparisons, regressions.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: flags without a `<bool>` type column, values with theirs
)
db_app = typer.Typer(
    help="Maintain the results database (upgrade, merge, prune).", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(db_app, name="db")

def rooflab_version() -> str:
    """This rooflab's version as installed (pip/uv metadata), or a note that it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

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


for module in (
    run_cmd, list_cmd, devices_cmd, db_cmd, roofline_cmd, compare_cmd, report_cmd,
    history_cmd, cluster_cmd, crosscheck_cmd, breakdown_cmd, counters_cmd, collectives_cmd, import_cmd, fleet_cmd,
):
    module.register(app, db_app)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `rooflab` console script."""
    try:
        app(args=argv, standalone_mode=True)
    except UserError as exc:  # raised outside a command's own handling
        print_error(escape(str(exc)))
        sys.exit(ExitCode.BAD_INPUT)
