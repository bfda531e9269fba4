"""The Typer application: each command group lives in its own module and registers itself here."""
from __future__ import annotations

import sys

import typer
from rich.markup import escape

from runners.cli import breakdown_cmd, cluster_cmd, db_cmd, devices_cmd, list_cmd, report_cmd, run_cmd
from runners.cli.common import EXIT_BAD_INPUT, err_console, user_error_types

app = typer.Typer(
    name="rooflab",
    help="GPU microbenchmarks with a results database: rooflines, comparisons, regressions.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Maintain the results database (upgrade, merge, prune).", no_args_is_help=True)
app.add_typer(db_app, name="db")

for module in (run_cmd, list_cmd, devices_cmd, db_cmd, report_cmd, cluster_cmd, breakdown_cmd):
    module.register(app, db_app)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `rooflab` console script."""
    errors = user_error_types()
    try:
        app(args=argv, standalone_mode=True)
    except errors as exc:  # raised outside a command's own handling
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
        sys.exit(EXIT_BAD_INPUT)
