"""tests/conftest.py shares the cores out among pytest-xdist workers through OMP_NUM_THREADS."""
from __future__ import annotations

import os

import pytest

from rooflab.runners.machine.cpuinfo import default_cpu_threads
from tests.conftest import _share_the_cores


@pytest.mark.parametrize("workers", [2, 3, 64])
def test_each_worker_gets_its_share_of_the_cores(monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    alone = default_cpu_threads()
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(workers))
    _share_the_cores()
    assert int(os.environ["OMP_NUM_THREADS"]) == max(1, alone // workers)


def test_one_process_and_a_caller_choice_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "1")
    _share_the_cores()
    assert "OMP_NUM_THREADS" not in os.environ
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    _share_the_cores()
    assert os.environ["OMP_NUM_THREADS"] == "7"
