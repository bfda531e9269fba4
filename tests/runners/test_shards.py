"""Shard partition: exact cover, determinism, balance, cost model, shard strings."""
from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import types
from pathlib import Path

import pytest

from rooflab.runners.orchestration import shards
from rooflab.runners.orchestration.shards import (
    CostBasis,
    ShardError,
    estimate_cost_s,
    parse_shard,
    partition,
    sampling_time_s,
    select_shard,
    shard_loads_s,
)
from rooflab.suite.case import Case
from rooflab.suite.errors import SpecError
from rooflab.suite.timing import TimingSettings

REPO = Path(__file__).resolve().parents[2]


def make_cases(n: int, seed: int) -> list[Case]:
    rng = random.Random(seed)
    ops = ("copy", "triad", "matmul", "softmax", "attention")
    cases: dict[str, Case] = {}
    while len(cases) < n:
        op = rng.choice(ops)
        params = {"n": rng.randrange(1, 1 << 28)} if op in ("copy", "triad") else {
            "m": rng.randrange(16, 8192),
            "k": rng.randrange(16, 8192),
        }
        case = Case(
            op=op,
            op_version=1,
            family="pointwise",
            backend=rng.choice(("eager", "compiled")),
            dtype=rng.choice(("float32", "bfloat16")),
            cache=rng.choice(("cold", "hot")),
            timing_mode=rng.choice(("launch", "graph")),
            params=params,
        )
        cases[case.case_key] = case
    return list(cases.values())


def hashed_cost(case: Case) -> float:
    """A deterministic pseudo-random cost in [0.01, 100) s (lognormal-like spread)."""
    digest = hashlib.sha256(case.case_key.encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    return 0.01 * 10 ** (4 * u)


@pytest.mark.parametrize("count", [1, 2, 3, 7, 16])
def test_shards_cover_every_case_exactly_once(count: int) -> None:
    cases = make_cases(300, seed=count)
    seen: list[str] = []
    for index in range(count):
        seen += [c.case_key for c in select_shard(cases, index, count, hashed_cost)]
    assert len(seen) == len(cases)
    assert sorted(seen) == sorted(c.case_key for c in cases)


def test_more_shards_than_cases_leaves_some_empty_and_still_covers():
    cases = make_cases(3, seed=1)
    parts = [select_shard(cases, i, 5, hashed_cost) for i in range(5)]
    assert sorted(len(p) for p in parts) == [0, 0, 1, 1, 1]
    assert sorted(c.case_key for p in parts for c in p) == sorted(c.case_key for c in cases)


def test_partition_does_not_depend_on_input_order():
    cases = make_cases(200, seed=5)
    reference = [sorted(c.case_key for c in select_shard(cases, i, 6, hashed_cost)) for i in range(6)]
    rng = random.Random(99)
    for _ in range(5):
        shuffled = cases[:]
        rng.shuffle(shuffled)
        got = [sorted(c.case_key for c in select_shard(shuffled, i, 6, hashed_cost)) for i in range(6)]
        assert got == reference


def test_equal_costs_are_split_by_case_key_and_keep_input_order():
    cases = make_cases(40, seed=3)
    parts = partition(cases, 4, lambda c: 1.0)
    assert [len(p) for p in parts] == [10, 10, 10, 10]
    by_key = sorted(c.case_key for c in cases)
    # round robin over the key order when every cost is equal
    assert [c.case_key for c in parts[0]] == by_key[0::4]
    mine = select_shard(cases, 2, 4, lambda c: 1.0)
    positions = [cases.index(c) for c in mine]
    assert positions == sorted(positions)


_CHILD = """
import json, sys
sys.path.insert(0, {repo!r})
from tests.runners.test_shards import make_cases, hashed_cost
from rooflab.runners.orchestration.shards import select_shard
cases = make_cases(250, seed=11)
cases.reverse()
print(json.dumps([[c.case_key for c in select_shard(cases, i, 5, hashed_cost)] for i in range(5)]))
"""


def test_partition_is_the_same_in_other_processes():
    cases = make_cases(250, seed=11)
    here = [sorted(c.case_key for c in select_shard(cases, i, 5, hashed_cost)) for i in range(5)]
    for hash_seed in ("1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        out = subprocess.run(
            [sys.executable, "-c", _CHILD.format(repo=str(REPO))],
            capture_output=True, text=True, env=env, cwd=REPO, check=True, timeout=60,
        )
        there = [sorted(keys) for keys in json.loads(out.stdout)]
        assert there == here


@pytest.mark.parametrize("seed", range(6))
def test_partition_is_balanced_for_random_costs(seed):
    rng = random.Random(seed)
    cases = make_cases(rng.randrange(50, 400), seed=100 + seed)
    costs = {c.case_key: rng.lognormvariate(0.0, 1.5) for c in cases}
    count = rng.randrange(2, 12)
    loads = shard_loads_s(cases, count, lambda c: costs[c.case_key])
    mean = sum(costs.values()) / count
    biggest = max(costs.values())
    assert sum(loads) == pytest.approx(sum(costs.values()))
    # Graham's bound for longest-processing-time-first: at most 4/3 of a lower bound of the optimum
    assert max(loads) <= (4 / 3) * max(mean, biggest) + 1e-9
    # and never more than one case above the mean
    assert max(loads) <= mean + biggest + 1e-9


def test_many_small_cases_balance_tightly():
    rng = random.Random(7)
    cases = make_cases(2000, seed=7)
    costs = {c.case_key: rng.uniform(0.1, 2.0) for c in cases}
    loads = shard_loads_s(cases, 8, lambda c: costs[c.case_key])
    assert max(loads) / (sum(loads) / 8) < 1.01


def test_negative_or_nan_cost_is_rejected():
    cases = make_cases(5, seed=2)
    with pytest.raises(ValueError):
        select_shard(cases, 0, 2, lambda c: float("nan"))
    with pytest.raises(ValueError):
        select_shard(cases, 0, 2, lambda c: -1.0)
    with pytest.raises(ValueError):
        select_shard(cases, 2, 2, hashed_cost)


@pytest.mark.parametrize("text,expected", [("0/1", (0, 1)), ("3/4", (3, 4)), (" 2 / 8 ", (2, 8)), ("15/16", (15, 16))])
def test_parse_shard_accepts_index_over_count(text, expected):
    assert parse_shard(text) == expected


@pytest.mark.parametrize("text", ["", "1", "4/4", "5/4", "-1/4", "1/0", "0/0", "a/b", "1/2/3", "1.0/2", "1/-2", "1 2"])
def test_parse_shard_rejects_bad_strings(text):
    with pytest.raises(ShardError) as info:
        parse_shard(text)
    assert isinstance(info.value, SpecError)  # the CLI maps SpecError to exit code 2
    assert "--shard" in str(info.value)


SETTINGS = TimingSettings(warmup_ms=10.0, warmup_calls=3, min_samples=10, min_time_ms=50.0, max_time_ms=1000.0)


def test_sampling_time_known_answers():
    # 1 ms per call, hot: warmup max(10 ms, 3 ms) + first call 1 ms; sampling min_time 50 ms
    assert sampling_time_s(1e-3, SETTINGS, "hot") == pytest.approx(0.011 + 0.050)
    # 200 ms per call: warmup 3 calls + first; sampling needs min_samples = 2 s beyond max_time
    assert sampling_time_s(0.2, SETTINGS, "hot") == pytest.approx(0.8 + 2.0)
    # 20 ms per call: 10 samples = 200 ms, above min_time, below max_time
    assert sampling_time_s(0.02, SETTINGS, "hot") == pytest.approx(0.08 + 0.2)
    # cold adds the flush to each sample
    cold = sampling_time_s(0.02, SETTINGS, "cold")
    assert cold == pytest.approx(0.08 + 10 * (0.02 + shards.COLD_FLUSH_S))
    # pace idle rests about as long as each sample after it
    idle = sampling_time_s(0.02, SETTINGS.override({"pace": "idle"}), "hot")
    assert idle == pytest.approx(0.08 + 10 * (0.02 + 0.02))


class _FakeOp:
    """An op whose work model is known: bytes = 4 n, flops = 2 n^1.5."""

    params: dict = {}

    def resolved_params(self, params):
        return dict(params)

    def flops(self, params, dtype):
        return int(2 * params["n"] ** 1.5)

    def bytes(self, params, dtype):
        return 4 * params["n"]

    def memory_bytes(self, params, dtype):
        return 8 * params["n"]


@pytest.fixture()
def fake_registry(monkeypatch):
    module = types.ModuleType("rooflab.suite.ops.registry")

    def get_op(name):
        if name != "fake":
            raise KeyError(name)
        return _FakeOp()

    module.__dict__["get_op"] = get_op
    monkeypatch.setattr(shards, "get_op", get_op)  # the registry shards.py looks its ops up in
    return module


def _case(op: str, n: int, cache: str = "hot", timing: TimingSettings = SETTINGS) -> Case:
    return Case(op=op, op_version=1, family="pointwise", backend="eager", dtype="float32", cache=cache,
                timing_mode="launch", params={"n": n}, timing=timing)


def test_model_cost_follows_bytes_and_flops(fake_registry):
    n = 1 << 30
    case = _case("fake", n)
    per_call = shards.CALL_OVERHEAD_S + max(4 * n / (shards.NOMINAL_GBPS * 1e9),
                                            2 * n**1.5 / (shards.NOMINAL_TFLOPS * 1e12))
    expected = shards.CASE_OVERHEAD_S + 8 * n / (shards.PREPARE_GBPS * 1e9) + sampling_time_s(per_call, SETTINGS, "hot")
    assert estimate_cost_s(case) == pytest.approx(expected)
    small, big = _case("fake", 1 << 10), _case("fake", 1 << 32)
    assert estimate_cost_s(big) > estimate_cost_s(case) > estimate_cost_s(small)
    # an op the registry does not know costs the overheads only
    assert estimate_cost_s(_case("nonexistent", n)) == pytest.approx(
        shards.CASE_OVERHEAD_S + sampling_time_s(shards.CALL_OVERHEAD_S, SETTINGS, "hot")
    )


def test_previous_median_replaces_the_model(fake_registry):
    case = _case("fake", 1 << 20)
    slow = {case.case_key: 200.0}  # ms per call
    expected = (shards.CASE_OVERHEAD_S + 8 * (1 << 20) / (shards.PREPARE_GBPS * 1e9)
                + sampling_time_s(0.2, SETTINGS, "hot"))
    assert estimate_cost_s(case, slow) == pytest.approx(expected)
    assert CostBasis(run_id="r1", medians_ms=slow).cost_s(case) == pytest.approx(expected)
    # a median for another key, or a non-positive one, leaves the model in charge
    assert estimate_cost_s(case, {"other": 5.0}) == pytest.approx(estimate_cost_s(case))
    assert estimate_cost_s(case, {case.case_key: 0.0}) == pytest.approx(estimate_cost_s(case))


def test_timing_settings_of_the_case_scale_the_cost(fake_registry):
    short = TimingSettings(min_time_ms=10.0, max_time_ms=100.0, warmup_ms=1.0)
    long = TimingSettings(min_time_ms=2000.0, max_time_ms=5000.0, warmup_ms=1.0)
    assert (estimate_cost_s(_case("fake", 1 << 12, timing=long))
            > estimate_cost_s(_case("fake", 1 << 12, timing=short)) + 1.9)
