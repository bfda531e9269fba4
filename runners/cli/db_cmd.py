"""CLI commands: filled in by the part of rooflab that owns them."""
from __future__ import annotations

import typer


def register(app: typer.Typer, db_app: typer.Typer) -> None:
    return None
