"""tests/conftest.py shares the cores out among pytest-xdist workers through OMP_NUM_THREADS (here
on an environment of the test's own: the process's is left as it is)."""
from __future__ import annotations

import pytest

from rooflab.runners.machine import cpuinfo
from tests.conftest import _share_the_cores


@pytest.mark.parametrize(("workers", "threads"), [(2, "4"), (3, "2"), (16, "1")])
def test_each_worker_gets_its_share_of_the_cores(monkeypatch: pytest.MonkeyPatch, workers: int,
                                                 threads: str) -> None:
    """Eight cores a case would take alone (cpuinfo's count, faked), shared among the workers."""
    monkeypatch.setattr(cpuinfo, "default_cpu_threads", lambda: 8)
    environ = {"PYTEST_XDIST_WORKER_COUNT": str(workers)}
    _share_the_cores(environ)
    assert environ["OMP_NUM_THREADS"] == threads


def test_one_process_and_a_caller_choice_are_left_alone() -> None:
    environ = {"PYTEST_XDIST_WORKER_COUNT": "1"}
    _share_the_cores(environ)
    assert "OMP_NUM_THREADS" not in environ
    environ = {"PYTEST_XDIST_WORKER_COUNT": "2", "OMP_NUM_THREADS": "7"}
    _share_the_cores(environ)
    assert environ["OMP_NUM_THREADS"] == "7"
