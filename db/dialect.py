"""The one dialect-specific statement the store needs: INSERT ... ON CONFLICT (key) DO NOTHING."""
from __future__ import annotations

from sqlalchemy import Connection, Insert, Table
from sqlalchemy.dialects import sqlite

# The natural key of each table: a row whose key exists is skipped, any other violation still fails.
NATURAL_KEYS: dict[str, tuple[str, ...]] = {
    "runs": ("run_id",),
    "environments": ("device_fingerprint",),
    "cases": ("case_key",),
    "run_shards": ("run_id", "shard"),
    "run_environments": ("run_id", "environment_id", "device_key"),
    "measurements": ("run_id", "case_id", "cache", "timing_mode", "device_key"),
    "crosschecks": ("run_id", "case_id", "cache", "timing_mode", "device_key", "peer"),
    "counter_readings": ("run_id", "case_id", "cache", "timing_mode", "device_key"),
}


def insert_ignore(conn: Connection, table: Table) -> Insert:
    """An INSERT into `table` that skips rows whose natural key already exists (SQLite and PostgreSQL).
    Each dialect's module is imported when its engine needs it (PostgreSQL's costs about 0.2 s of CPU,
    which a process writing SQLite need not pay)."""
    keys = list(NATURAL_KEYS[table.name])
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects import postgresql  # here: about 0.2 s of CPU a SQLite writer need not pay

        return postgresql.insert(table).on_conflict_do_nothing(index_elements=keys)
    return sqlite.insert(table).on_conflict_do_nothing(index_elements=keys)
