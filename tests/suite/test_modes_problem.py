"""One check of a cache mode and a timing mode (suite.case.modes_problem), for the Python API and the
timing engine alike: the same bad pair gets the same message from both."""
from __future__ import annotations

import pytest
import torch

import rooflab
from rooflab.runners.engine.timing import measure as engine_measure
from rooflab.runners.machine.environment import capture
from rooflab.suite.case import mode_conflict, modes_problem
from rooflab.suite.timing import TimingSettings


@pytest.mark.parametrize(("cache", "timing_mode", "expected"), [
    ("warm", "launch", "cache 'warm': allowed: cold, hot"),
    ("hot", "replay", "timing_mode 'replay': allowed: launch, graph"),
    ("cold", "graph", mode_conflict("cold", "graph")),
])
def test_a_bad_pair_gets_one_message_from_the_api_and_the_engine(cache, timing_mode, expected):
    assert expected and modes_problem(cache, timing_mode) == expected
    x = torch.randn(256)
    with pytest.raises(ValueError) as from_api:
        rooflab.measure(lambda: x * 2.0, device="cpu", cache=cache, timing_mode=timing_mode)
    _, device = capture("cpu")
    with pytest.raises(ValueError) as from_engine:
        engine_measure(lambda: x * 2.0, device=device, settings=TimingSettings(), cache=cache, timing_mode=timing_mode)
    assert str(from_api.value) == str(from_engine.value) == expected


@pytest.mark.parametrize(("cache", "timing_mode"), [("cold", "launch"), ("hot", "launch"), ("hot", "graph")])
def test_the_pairs_that_can_be_timed_have_no_problem(cache, timing_mode):
    assert modes_problem(cache, timing_mode) is None
