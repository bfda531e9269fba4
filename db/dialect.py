"""The one dialect-specific statement the store needs: INSERT ... ON CONFLICT DO NOTHING."""
from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Table
from sqlalchemy.dialects import postgresql, sqlite


def insert_ignore(conn: Connection, table: Table) -> Any:
    """An INSERT into `table` that skips rows violating a unique constraint (SQLite and PostgreSQL)."""
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing()
    return sqlite.insert(table).on_conflict_do_nothing()
