"""Fixtures of the runner tests."""
from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _no_run_left_running() -> Iterator[None]:
    """A `rooflab run` process that a test started and left running (it failed first) is killed."""
    yield
    from tests.runners.run_process import Rooflab

    Rooflab.end_all()
