"""Database fixtures: a fresh SQLite file, a fresh PostgreSQL database (skipped without a server)."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.db.pg import BACKENDS, POSTGRES_SKIP_REASON, backend_url, fresh_postgres_url, postgres_server_url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'results.db'}"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    if postgres_server_url() is None:
        pytest.skip(POSTGRES_SKIP_REASON)
    with fresh_postgres_url() as url:
        yield url


@pytest.fixture(params=BACKENDS)
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Each test using it runs once on SQLite and once on PostgreSQL."""
    with backend_url(request.param, tmp_path) as url:
        yield url
