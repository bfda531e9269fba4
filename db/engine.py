"""Engines: SQLite in WAL mode with a busy timeout on every connection, PostgreSQL through psycopg 3.

SQLite writers take the write lock when their transaction begins (`BEGIN IMMEDIATE`), so that
several processes writing one file queue on the busy timeout instead of failing on a lock upgrade;
`retry_locked` retries the rare "database is locked" that still escapes.
"""
from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL
from sqlalchemy.exc import OperationalError

from rooflab.db.urls import normalize_url

BUSY_TIMEOUT_MS = 30_000
LOCK_RETRIES = 8

T = TypeVar("T")


def make_engine(url: str | URL, *, write: bool = True) -> Engine:
    """An engine for `url`; `write=False` makes SQLite connections read-only (`query_only`)."""
    parsed = url if isinstance(url, URL) else normalize_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed, write=write)
    return create_engine(parsed, pool_pre_ping=True, pool_size=2, max_overflow=4)


# Execution option of a connection that only reads through a write engine (db.handle.Database):
# its transactions begin with a plain BEGIN, so that readers do not queue on the write lock.
READ_ONLY = {"rooflab_read_only": True}


def _sqlite_engine(url: URL, *, write: bool) -> Engine:
    # Pooled connections: closing the last connection to a WAL file checkpoints it, which must not
    # happen after every transaction.
    engine = create_engine(url, pool_size=2, max_overflow=8, connect_args={"timeout": BUSY_TIMEOUT_MS / 1000})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        dbapi_connection.isolation_level = None  # transactions are begun explicitly below
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys = ON")
        if not write:
            cursor.execute("PRAGMA query_only = 1")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        if not write or connection.get_execution_options().get("rooflab_read_only"):
            connection.exec_driver_sql("BEGIN")
            return
        # the journal mode is set before the first write of a connection, not when it connects: a
        # write engine may first read a database's schema version and refuse it, unchanged
        info = connection.connection.info
        if not info.get("rooflab_wal"):
            cursor = connection.connection.dbapi_connection.cursor()
            mode = cursor.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            # NORMAL in WAL mode: a commit survives the process being killed; only a power loss may
            # roll back the last commits (never corrupts the file). FULL would fsync every commit.
            cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.close()
            info["rooflab_wal"] = True
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def is_locked_error(exc: BaseException) -> bool:
    text = str(getattr(exc, "orig", exc)).lower()
    return "database is locked" in text or "database is busy" in text or "database table is locked" in text


def retry_locked(fn: Callable[[], T], *, retries: int = LOCK_RETRIES) -> T:
    """Call `fn` (one whole transaction), retrying with backoff while SQLite reports a lock (wrapped by
    SQLAlchemy, or raw from the driver where a connection's first write sets the journal mode)."""
    for attempt in range(retries + 1):
        try:
            return fn()
        except (OperationalError, sqlite3.OperationalError) as exc:
            if attempt == retries or not is_locked_error(exc):
                raise
            time.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))
    raise AssertionError("unreachable")
