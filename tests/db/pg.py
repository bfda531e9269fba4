"""A fresh PostgreSQL database per test, on the server named by ROOFLAB_TEST_POSTGRES_URL.

Usable from any test package:

    from tests.db.pg import fresh_postgres_url, POSTGRES_SKIP_REASON, postgres_server_url
    with fresh_postgres_url() as url:   # "postgresql+psycopg://.../rooflab_t_<random>"
        ...                              # dropped afterwards
"""
from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ENV_VAR = "ROOFLAB_TEST_POSTGRES_URL"
POSTGRES_SKIP_REASON = f"no PostgreSQL server: set {ENV_VAR} (.ci/run starts one and sets it)"


def postgres_server_url() -> str | None:
    """The test server's URL (any database on it), or None when the variable is not set."""
    return os.environ.get(ENV_VAR) or None


@contextmanager
def fresh_postgres_url() -> Iterator[str]:
    """Create an empty database with a random name, yield its URL, drop it afterwards."""
    from sqlalchemy import create_engine, text

    from rooflab.db.urls import normalize_url

    server = postgres_server_url()
    if server is None:
        raise RuntimeError(POSTGRES_SKIP_REASON)
    base = normalize_url(server)
    name = f"rooflab_t_{secrets.token_hex(6)}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield base.set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


# the backends a test runs on where it takes either (`@pytest.fixture(params=BACKENDS)`)
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@contextmanager
def backend_url(backend: str, folder: Path) -> Iterator[str]:
    """A new database: "sqlite", a file in FOLDER; "postgres", a fresh database on the test server
    (the test is skipped without one), dropped afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{folder / 'results.db'}"
        return
    if postgres_server_url() is None:
        pytest.skip(POSTGRES_SKIP_REASON)
    with fresh_postgres_url() as url:
        yield url
