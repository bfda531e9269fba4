"""Held-out check of series per physical device: a fleet's health nights, imported as a user's export
files are (`rooflab import`), judged by `rooflab regressions`.

64 GPUs of one model on 8 nodes, 30 nights of a short health set, one GPU made 10 % slower on HBM for
its last three nights (tests/reports/fleet_history.py). By device the slow GPU's HBM series are
regressions and every other series is ok; by model (the aggregate over a model's devices, the only
view before series were kept per device) a node's median hides it, as the issue that asked for
series per device found ("ok: 7").
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rooflab.db.query import results
from rooflab.reports.regressions.database_check import detect_in_database
from rooflab.reports.regressions.series import detect
from rooflab.runners.cli.app import app
from tests.reports.fleet_history import HEALTH, fleet_rows, write_export

runner = CliRunner()
CASES = HEALTH[:3]  # HBM copy, HBM triad and the bf16 GEMM: the test stays small
NIGHTS, SLOW_FROM = 30, 27


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, object, int]:
    """The fleet imported into a fresh SQLite database through `rooflab import` (fresh noise each run)."""
    seed = int(np.random.default_rng().integers(1 << 30))
    folder = tmp_path_factory.mktemp("fleet")
    fleet = fleet_rows(nights=NIGHTS, cases=CASES, slow_from=SLOW_FROM, seed=seed)
    url = f"sqlite:///{folder / 'fleet.db'}"
    done = runner.invoke(app, ["import", str(write_export(fleet.rows, folder / "fleet.csv")), "--db", url],
                         catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return url, fleet, seed


def _regressions(url: str, *extra: str) -> dict:
    done = runner.invoke(app, ["regressions", "--db", url, "--json", "--all", *extra], catch_exceptions=False)
    assert done.exit_code in (0, 1), done.output
    return json.loads(done.stdout)


def test_the_slow_gpu_is_named_among_its_63_siblings(fleet) -> None:
    url, planted, seed = fleet
    out = _regressions(url)
    series = out["series"]
    assert out["by"] == "device" and len(series) == 64 * len(CASES), seed
    slow = [s for s in series if s["device_key"] == planted.slow_uuid]
    hbm = {c.case_key for c in CASES if c.hbm}
    assert {s["case_key"] for s in slow if s["status"] == "regression"} == hbm, (seed, slow)
    for s in slow:
        assert s["host"] == planted.slow_host and s["device_name"] == "NVIDIA H100 80GB HBM3"
        if s["case_key"] in hbm:
            assert s["first_bad_run"] == f"night-{SLOW_FROM:02d}-{planted.slow_host}", (seed, s)
            assert 0.07 < s["pooled_rel_change"] < 0.13, (seed, s)
    healthy = [s for s in series if s not in slow or s["case_key"] not in hbm]
    assert {s["status"] for s in healthy} == {"ok"} and not any(s["drift"] for s in healthy), (
        seed, [s for s in healthy if s["status"] != "ok" or s["drift"]])
    hosts = {s["device_key"]: s["host"] for s in series}
    assert hosts == dict(planted.devices)  # each GPU on its own node
    assert out["counts"]["regression"] == len(hbm) and out["failed"]


def test_by_model_the_fleet_is_one_median_a_node_and_the_slow_gpu_disappears(fleet) -> None:
    url, planted, seed = fleet
    out = _regressions(url, "--by", "model", "--fail-on", "never")
    assert out["by"] == "model" and len(out["series"]) == len(CASES)  # all 64 GPUs folded into each case
    assert {s["status"] for s in out["series"]} == {"ok"}, (seed, out["series"])
    assert {s["device_key"] for s in out["series"]} == {None} and {s["host"] for s in out["series"]} == {None}
    assert not out["failed"]


def test_the_history_of_the_slow_gpu_is_its_own(fleet) -> None:
    url, planted, seed = fleet
    case = next(c for c in CASES if c.hbm).case_key
    done = runner.invoke(app, ["history", case, "--db", url, "--json", "--device", planted.slow_uuid[:12]],
                         catch_exceptions=False)
    assert done.exit_code == 0, done.output
    (view,) = json.loads(done.stdout)["series"]
    assert view["device_key"] == planted.slow_uuid and view["status"] == "regression"
    assert len(view["runs"]) == NIGHTS and view["runs"][-1]["run_id"] == f"night-{NIGHTS - 1:02d}-{planted.slow_host}"
    on_node = runner.invoke(app, ["history", case, "--db", url, "--json", "--device", planted.slow_host],
                            catch_exceptions=False)
    assert {v["device_key"] for v in json.loads(on_node.stdout)["series"]} == {
        uuid for uuid, host in planted.devices if host == planted.slow_host}


def test_a_bad_by_value_is_refused_with_the_allowed_ones(fleet, tmp_path: Path) -> None:
    url, _, _ = fleet
    done = runner.invoke(app, ["regressions", "--db", url, "--by", "gpu"])
    assert done.exit_code == 2 and "device" in done.output and "model" in done.output


def _compare(url: str, baseline: str, candidate: str) -> dict:
    done = runner.invoke(app, ["compare", "--db", url, "--json", "--baseline", baseline, "--candidate", candidate],
                         catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def test_compare_a_device_with_a_sibling_and_with_its_models_median_device(fleet) -> None:
    """A comparison of two devices is device against device; against the model it is against the
    model's median device of each case (the explicit aggregate)."""
    url, planted, seed = fleet
    sibling = next(uuid for uuid, host in planted.devices if host == planted.slow_host and uuid != planted.slow_uuid)
    hbm = {c.case_key for c in CASES if c.hbm}
    for other in (sibling[:10], "H100"):
        out = _compare(url, other, planted.slow_uuid)
        assert out["sides"]["candidate"] == {"by": "device", "device_key": planted.slow_uuid, "devices": 1,
                                             "host": planted.slow_host, "device_name": "NVIDIA H100 80GB HBM3"}
        cases = {c["case_key"]: c for c in out["cases"]}
        assert set(cases) == {c.case_key for c in CASES}
        newest = {(r["device_uuid"], r["case_key"]): r["median_ms"] for r in planted.rows
                  if r["run_id"].startswith(f"night-{NIGHTS - 1:02d}-")}
        for key in hbm:  # 10 % slower on HBM than its own offset (each device sits ~2 % off the model)
            case = cases[key]
            assert case["candidate_ms"] == pytest.approx(newest[planted.slow_uuid, key]), (seed, case)
            if other == "H100":  # the model's median device of the case in its newest run (a node's 8 GPUs)
                ranked = sorted(r["median_ms"] for r in planted.rows
                                if r["run_id"] == case["baseline_run"] and r["case_key"] == key)
                assert len(ranked) == 8 and case["baseline_ms"] == pytest.approx(ranked[3]), (seed, case)
            else:
                assert case["baseline_ms"] == pytest.approx(newest[sibling, key]), (seed, case)
            assert case["speedup"] == pytest.approx(case["baseline_ms"] / case["candidate_ms"]), (seed, case)
            # the standing follows the speedup's interval: slower where it lies below 1 (the baseline's
            # own offset may bring the two within it: then not significant), never faster
            high = case["speedup_high"]
            assert case["standing"] == ("slower" if high < 1 else "not_significant"), (seed, case)
            assert case["speedup_low"] <= case["speedup"] <= high and case["speedup_low"] < 1, (seed, case)
        if other == "H100":
            assert out["sides"]["baseline"]["by"] == "model" and out["sides"]["baseline"]["devices"] == 8
            assert {cases[k]["baseline_run"] for k in cases} == {f"night-{NIGHTS - 1:02d}-node7"}  # the newest run
        else:
            assert out["sides"]["baseline"]["device_key"] == sibling


def test_a_run_per_node_is_judged_from_each_devices_newest_runs(tmp_path: Path) -> None:
    """90 nights of 4 nodes, a run per node a night: the check reads each device's newest runs (not
    the newest runs of the whole database, which would hold a few nights), judges as on every result,
    and reads no healthy series again in full."""
    planted = fleet_rows(hosts=4, per_host=2, nights=90, cases=CASES[:1], slow=(1, 1), slow_from=88,
                         seed=int(np.random.default_rng().integers(1 << 30)))
    url = f"sqlite:///{tmp_path / 'nodes.db'}"
    done = runner.invoke(app, ["import", str(write_export(planted.rows, tmp_path / "nodes.csv")), "--db", url],
                         catch_exceptions=False)
    assert done.exit_code == 0, done.output
    windowed, whole = detect_in_database(url), detect(results(url))
    assert [v.as_dict() for v in windowed] == [v.as_dict() for v in whole]
    assert {v.device_key for v in windowed if v.status == "regression"} == {planted.slow_uuid}
    healthy = [v for v in windowed if v.device_key != planted.slow_uuid]
    assert healthy and all(v.n_points == 90 and len(v.points) < 90 for v in healthy)
