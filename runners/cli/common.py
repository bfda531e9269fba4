"""What every CLI command shares: the database option, JSON output, and the bad-input exit path."""
from __future__ import annotations

import json
import os
import sys
from typing import Any, NoReturn

import typer
from rich.console import Console

DEFAULT_DB_URL = "sqlite:///results.db"
EXIT_BAD_INPUT = 2

console = Console()
err_console = Console(stderr=True)

DbOption = typer.Option(
    None, "--db", envvar="ROOFLAB_DB", help="SQLAlchemy URL of the results database [default: sqlite:///results.db]"
)
JsonOption = typer.Option(False, "--json", help="Print machine-readable JSON instead of tables.")


class UserInputError(Exception):
    """Invalid input from the user: printed as one message, exit code 2, no traceback."""


def db_url(value: str | None) -> str:
    return value or os.environ.get("ROOFLAB_DB") or DEFAULT_DB_URL


def fail(message: str) -> NoReturn:
    """Print one clear message and exit with code 2."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, markup=True, soft_wrap=True)
    raise typer.Exit(EXIT_BAD_INPUT)


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def user_error_types() -> tuple[type[BaseException], ...]:
    """Each package's exception for invalid input; `main` turns them into exit code 2."""
    from db.errors import DatabaseInputError
    from reports.errors import ReportInputError
    from suite.errors import SpecError

    return (UserInputError, SpecError, DatabaseInputError, ReportInputError)
