"""`rooflab regressions --json`: per series the gate's status, change points (run, commit, size,
p-value), the drift flag and the first bad run; `--fail-on drift`."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rooflab.runners.cli.app import app
from tests.reports import gen_series as g
from tests.reports.synth import history, write_db

runner = CliRunner()
NIGHTS = 60


def _series(values, n: int) -> list[dict]:
    rows = history(list(values), case_op="stream_triad")
    for r in rows:
        r["params"] = json.dumps({"n": n})
        r["case_key"] = r["case_key"].replace(f"n={1 << 26}", f"n={n}")
        r["git_commit"] = f"c{int(r['run_id'][4:]):04d}"
    return rows


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('regcli') / 'results.db'}"
    rows = (_series(g.noise_only(noise=0.01, seed=1).values_ms, 1)
            + _series(g.step(size=0.08, at=30, noise=0.01, seed=2).values_ms, 2)  # mid-history step
            + _series(g.drift(size=0.10, over=30, noise=0.01, seed=3).values_ms, 3)  # drift, no gate alert
            + _series(g.step(size=0.15, at=-2, noise=0.01, seed=4).values_ms, 4))  # regression
    write_db(url, rows)
    return url


def _run(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_json_gives_status_change_points_drift_and_first_bad_run(db):
    res = _run("regressions", "--db", db, "--json", "--all", "--fail-on", "never")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    by_n = {s["case_key"].split("n=")[-1]: s for s in data["series"]}
    assert set(by_n) == {"1", "2", "3", "4"}
    assert data["counts"]["regression"] == 1 and data["counts"]["drift"] == 1
    quiet = by_n["1"]
    assert quiet["status"] == "ok" and quiet["change_points"] == [] and quiet["drift"] is False
    (step,) = by_n["2"]["change_points"]
    assert step["run_id"] == "run-0031" and step["git_commit"] == "c0031" and step["direction"] == "slower"
    assert step["rel_change"] == pytest.approx(0.08, abs=0.01) and step["p_value"] < 1e-6
    assert step["started_at"].startswith("2026-02-01")
    assert by_n["2"]["status"] == "ok" and by_n["2"]["drift"] is False  # the baseline is the new level
    drifting = by_n["3"]
    assert drifting["drift"] is True and drifting["drift_detail"]["rel_change"] > 0.05
    assert drifting["first_bad_run"] is not None
    reg = by_n["4"]
    assert reg["status"] == "regression" and reg["pooled_z"] > 4
    assert reg["first_bad_run"] == f"run-{NIGHTS - 1:04d}" and reg["first_bad_commit"] == f"c{NIGHTS - 1:04d}"


def test_fail_on_drift_and_suspect_include_drift(tmp_path):
    url = f"sqlite:///{tmp_path / 'drift.db'}"
    write_db(url, _series(g.drift(size=0.10, over=30, noise=0.01, seed=3).values_ms, 3))
    assert _run("regressions", "--db", url).exit_code == 0  # no gate alert
    assert _run("regressions", "--db", url, "--fail-on", "drift").exit_code == 1
    assert _run("regressions", "--db", url, "--fail-on", "suspect").exit_code == 1
    shown = json.loads(_run("regressions", "--db", url, "--json", "--fail-on", "never").stdout)
    assert len(shown["series"]) == 1 and shown["series"][0]["drift"] is True  # a drift is listed without --all
