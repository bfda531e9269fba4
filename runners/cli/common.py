"""What the CLI commands share besides their ending (runners/cli/epilogue.py): the database option
and its checks, output folders, a device's label, table cells."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from rooflab.db.errors import DatabaseInputError
from rooflab.db.urls import normalize_url, redact, sqlite_path
from rooflab.runners.cli.epilogue import fail
from rooflab.vocab import SeriesBy

DEFAULT_DB_URL = "sqlite:///results.db"

DbOption = typer.Option(
    None, "--db", envvar="ROOFLAB_DB", help="SQLAlchemy URL of the results database [default: sqlite:///results.db]"
)
JsonOption = typer.Option(False, "--json", help="Print machine-readable JSON instead of tables.")
ByOption = typer.Option(
    SeriesBy.DEVICE, "--by",
    help="A series per physical device (a GPU's UUID, a CPU's host), or per model: the median of a model's "
    "devices in each run (the aggregate).",
)
FilterOption = typer.Option(
    [], "--filter", "-f",
    help="Keep cases with KEY=VALUE (op, dtype, cache, n, ...); repeatable: a repeated key means OR "
    "(-f op=copy -f op=triad keeps both ops), different keys mean AND.",
)


def db_url(value: str | None) -> str:
    return value or os.environ.get("ROOFLAB_DB") or DEFAULT_DB_URL


def require_database(url: str) -> None:
    """For commands that only read: a SQLite file that is not there is an error, and is not created
    (an empty database would only report "no results")."""
    try:
        path = sqlite_path(normalize_url(url))
    except DatabaseInputError as exc:
        fail(escape(str(exc)))
    if path is not None and not path.is_file():
        fail(
            f"no database at {escape(redact(url))}: {escape(str(path))} does not exist "
            "(give --db or ROOFLAB_DB; `rooflab run` creates one)"
        )


def check_output_dir(out: Path, option: str = "--out") -> Path:
    """That the folder `out` can take written files, or be created for them, without creating it
    (for a command that makes it only once it has something to write); one clear message and exit
    code 2 when not (a file in its place or above it, a place that is not writable)."""
    if out.exists():
        if not out.is_dir():
            fail(f"{option}: {escape(str(out))} exists and is not a directory")
        if not os.access(out, os.W_OK | os.X_OK):
            fail(f"{option}: the directory {escape(str(out))} is not writable")
        return out
    above = next(p for p in out.absolute().parents if p.exists())
    if not above.is_dir() or not os.access(above, os.W_OK | os.X_OK):
        why = "is not a directory" if not above.is_dir() else "is not writable"
        fail(f"{option}: cannot create the directory {escape(str(out))}: {escape(str(above))} {why}")
    return out


def output_dir(out: Path, option: str = "--out") -> Path:
    """Create the folder `out` (and its parents) for written files, after check_output_dir; one
    clear message and exit code 2 when it cannot be."""
    check_output_dir(out, option)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"{option}: cannot create the directory {escape(str(out))}: {escape(exc.strerror or str(exc))}")
    return out


def device_label(name: str, fingerprint: str, tools: dict[str, str]) -> str:
    """A device as a table shows it: its name, and the tool when its results were imported."""
    tool = tools.get(fingerprint)
    return f"{name} ({tool})" if tool else name


def series_device(name: str, fingerprint: str, device_key: str | None, host: str | None,
                  tools: dict[str, str]) -> str:
    """A series' device as a table shows it: its model (device_label), then the host and device key
    of one physical device, or the fingerprint of a model's aggregate."""
    where = f"{host} {device_key}" if device_key is not None and host else device_key
    return f"{device_label(name, fingerprint, tools)} {where or 'all devices, ' + fingerprint[:12]}"


def fmt(value: Any, digits: int = 4) -> str:
    """A table cell: a float to `digits` significant digits, nothing for None or NaN (markup escaped)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return escape(str(value))


def pct(value: Any) -> str:
    """A fraction as a percentage cell, nothing for None or NaN."""
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f} %"


def optional_output_dir(out: Path | None) -> Path | None:
    """output_dir(out), or None when no folder was asked for."""
    return None if out is None else output_dir(out)


def json_rows(frame: Any) -> list[dict]:
    """A frame's records for JSON: NaN as null; the Ratio objects behind the intervals left out."""
    frame = frame.drop(columns=[c for c in ("ratio",) if c in frame.columns])
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
            for row in frame.to_dict(orient="records")]
