"""Cost basis from the database: the previous run's medians, chosen by run order, per device."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from rooflab.runners.orchestration.shards import CostBasis, estimate_cost_s, previous_medians, select_shard
from rooflab.suite.case import Case
from tests.runners.cluster_support import (
    H100,
    T0,
    Device,
    case_record,
    fresh_postgres_url,
    measurement,
    run_record,
    sqlite_url,
    write_history,
)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request, tmp_path):
    if request.param == "sqlite":
        yield sqlite_url(tmp_path)
    else:
        yield from fresh_postgres_url()


CASES = [case_record("copy", 1 << k) for k in (20, 22, 24)]


def test_empty_database_gives_an_empty_basis(url):
    from rooflab.db.store import ResultStore

    ResultStore(url).close()
    assert previous_medians(url) == CostBasis()


def test_latest_earlier_run_per_case_by_run_order(url):
    a, b, c = (case.case_key for case in CASES)
    write_history(url, cases=CASES,
                  medians_by_run=[{a: 1.0, b: 2.0, c: 3.0}, {a: 1.5, b: 2.5}, {a: 9.0, b: 9.0, c: 9.0}],
                  start=T0, seed=1)
    # the current run is night-002: its own results and anything after it do not count
    basis = previous_medians(url, current_run_id="night-002")
    assert basis.run_id == "night-001"
    assert basis.medians_ms[a] == pytest.approx(1.5, rel=0.02)
    assert basis.medians_ms[b] == pytest.approx(2.5, rel=0.02)
    assert basis.medians_ms[c] == pytest.approx(3.0, rel=0.02)  # night-001 did not measure c
    # a run id that is not in the database yet (the first shard of tonight) sees every run
    tonight = previous_medians(url, current_run_id="night-999")
    assert tonight.medians_ms[a] == pytest.approx(9.0, rel=0.02) and tonight.run_id == "night-002"
    # earlier than everything: nothing
    assert previous_medians(url, current_run_id="night-000") == CostBasis()


def test_suite_and_device_filters(url):
    a = CASES[0].case_key
    other = Device("fp-a100", "NVIDIA A100-SXM4-80GB", "GPU-A100")
    write_history(url, cases=CASES[:1], medians_by_run=[{a: 4.0}], start=T0, seed=2)
    write_history(url, cases=CASES[:1], medians_by_run=[{a: 40.0}], start=T0 + timedelta(days=3), seed=3,
                  prefix="quick", suite="quick", device=other)
    assert previous_medians(url, suite="nightly").medians_ms[a] == pytest.approx(4.0, rel=0.02)
    assert previous_medians(url, suite="quick").medians_ms[a] == pytest.approx(40.0, rel=0.02)
    assert previous_medians(url, device_fingerprint=H100.fingerprint).medians_ms[a] == pytest.approx(4.0, rel=0.02)
    assert previous_medians(url).medians_ms[a] == pytest.approx(40.0, rel=0.02)  # the newest run overall


def test_several_gpus_of_one_run_give_the_median_of_their_medians(url):
    from rooflab.db.store import ResultStore

    rng = np.random.default_rng(5)
    case = CASES[1]
    gpus = [Device(H100.fingerprint, H100.name, f"GPU-{i}") for i in range(3)]
    with ResultStore(url) as store:
        store.start_run(run_record("r1", T0))
        for gpu, median in zip(gpus, (1.0, 1.2, 5.0), strict=True):
            store.add_environment("r1", gpu.record())
            store.add_measurement(measurement("r1", case, median, rng, device=gpu, measured_at=T0))
        store.finish_run("r1", "complete")
    assert previous_medians(url).medians_ms[case.case_key] == pytest.approx(1.2, rel=0.02)


def test_a_shard_reads_its_cost_basis_without_pandas(tmp_path: Path) -> None:
    """Every shard of a night reads the basis when it starts, before it measures: in a fresh Python
    the basis of a history is the one read here, and pandas (about 1 s of CPU to import, and a frame
    of the whole history to build) is never loaded."""
    a, b, c = (case.case_key for case in CASES)
    url = sqlite_url(tmp_path)
    write_history(url, cases=CASES, medians_by_run=[{a: 1.0, b: 2.0, c: 3.0}, {a: 1.5, b: 2.5}, {a: 9.0}],
                  start=T0, seed=4)
    code = ("import json, sys; from rooflab.runners.orchestration.shards import previous_medians; "
            f"basis = previous_medians({url!r}, suite='nightly', current_run_id='night-002'); "
            "print(json.dumps([basis.run_id, dict(basis.medians_ms), 'pandas' in sys.modules]))")
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    run_id, medians_ms, pandas_loaded = json.loads(done.stdout)
    assert run_id == "night-001" and set(medians_ms) == {a, b, c}
    assert medians_ms[c] == pytest.approx(3.0, rel=0.02)  # from night-000: night-001 did not measure it
    assert not pandas_loaded


def test_history_steers_the_partition():
    """The same cases split differently once measured times say which ones are slow."""
    cases = [Case(op="unknown_op", op_version=1, family="pointwise", backend="eager", dtype="float32",
                  cache="hot", timing_mode="launch", params={"n": i}) for i in range(8)]
    slow = {cases[0].case_key: 500.0, cases[1].case_key: 500.0}
    basis = CostBasis(run_id="r", medians_ms=slow)
    assert basis.cost_s(cases[0]) > 10 * estimate_cost_s(cases[2])
    shard0 = select_shard(cases, 0, 2, basis.cost_s)
    shard1 = select_shard(cases, 1, 2, basis.cost_s)
    # the two slow cases are on different shards, the cheap ones fill up evenly
    assert (cases[0] in shard0) != (cases[1] in shard0)
    assert len(shard0) == len(shard1) == 4


def test_a_basis_that_misses_a_case_is_dropped_so_divergent_databases_still_agree():
    cases = [Case(op="unknown_op", op_version=1, family="pointwise", backend="eager", dtype="float32",
                  cache="hot", timing_mode="launch", params={"n": i}) for i in range(6)]
    medians = {c.case_key: float(i + 1) for i, c in enumerate(cases)}
    full = CostBasis(run_id="r", medians_ms=medians)
    assert full.covering(cases) is full
    # two nodes, each with only its own shard's history from last night
    node0 = CostBasis(run_id="r", medians_ms={k: v for k, v in list(medians.items())[:3]})
    node1 = CostBasis(run_id="r", medians_ms={k: v for k, v in list(medians.items())[3:]})
    parts = [select_shard(cases, i, 2, b.covering(cases).cost_s) for i, b in enumerate((node0, node1))]
    assert sorted(c.case_key for p in parts for c in p) == sorted(medians)
    # without the rule, the two nodes balance by different costs and the shards overlap
    raw = [select_shard(cases, i, 2, b.cost_s) for i, b in enumerate((node0, node1))]
    assert sorted(c.case_key for p in raw for c in p) != sorted(medians)
