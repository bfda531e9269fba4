"""What every CLI command shares: the database option, JSON output, and the bad-input exit path."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
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
FilterOption = typer.Option(
    [], "--filter", "-f",
    help="Keep cases with KEY=VALUE (op, dtype, cache, n, ...); repeatable: a repeated key means OR "
    "(-f op=copy -f op=triad keeps both ops), different keys mean AND.",
)


def db_url(value: str | None) -> str:
    return value or os.environ.get("ROOFLAB_DB") or DEFAULT_DB_URL


def print_error(message: str) -> None:
    """The one way an error reaches the user: `error: MESSAGE` on stderr (MESSAGE is Rich markup:
    escape what came from outside, `rich.markup.escape`)."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, markup=True, soft_wrap=True)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print one clear message (print_error) and exit with `code` (2: bad input)."""
    print_error(message)
    raise typer.Exit(code)


def fail_with(exc: BaseException, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """fail() with an exception's own message."""
    from rich.markup import escape

    fail(escape(str(exc)), code)


def require_database(url: str) -> None:
    """For commands that only read: a SQLite file that is not there is an error, and is not created
    (an empty database would only report "no results")."""
    from rich.markup import escape

    from rooflab.db.errors import DatabaseInputError
    from rooflab.db.urls import normalize_url, redact, sqlite_path

    try:
        path = sqlite_path(normalize_url(url))
    except DatabaseInputError as exc:
        fail(escape(str(exc)))
    if path is not None and not path.is_file():
        fail(
            f"no database at {escape(redact(url))}: {escape(str(path))} does not exist "
            "(give --db or ROOFLAB_DB; `rooflab run` creates one)"
        )


def output_dir(out: Path, option: str = "--out") -> Path:
    """Create the folder `out` (and its parents) for written files; one clear message and exit
    code 2 when it cannot be (a parent that is a file, a read-only or missing place)."""
    from rich.markup import escape

    if out.exists() and not out.is_dir():
        fail(f"{option}: {escape(str(out))} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"{option}: cannot create the directory {escape(str(out))}: {escape(exc.strerror or str(exc))}")
    if not os.access(out, os.W_OK | os.X_OK):
        fail(f"{option}: the directory {escape(str(out))} is not writable")
    return out


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")



