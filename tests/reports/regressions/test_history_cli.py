"""`rooflab history`: the runs of one case, a sparkline per series, and its exits."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rooflab.runners.cli.app import app
from rooflab.runners.cli.history_cmd import sparkline
from tests.reports.gen_history import DEVICES, nightly_history, planted_keys
from tests.reports.synth import write_db

runner = CliRunner()


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    frame = nightly_history(nights=30, cases=10, devices=2)
    url = f"sqlite:///{tmp_path_factory.mktemp('history') / 'results.db'}"
    write_db(url, frame.to_dict("records"))
    return url, planted_keys(frame)


def _run(*args: str):
    return runner.invoke(app, ["history", *args], catch_exceptions=False)


def test_the_runs_of_one_case(db):
    url, keys = db
    res = _run(keys["step"], "--db", url)
    assert res.exit_code == 0, res.output
    assert f"on {DEVICES[0]}" in res.stdout and f"on {DEVICES[1]}" in res.stdout
    assert "regression" in res.stdout and "flagged" in res.stdout and "first bad run" in res.stdout
    data = json.loads(_run(keys["step"], "--db", url, "--json", "--last", "5", "--device", "H100").stdout)
    (series,) = data["series"]
    assert series["status"] == "regression" and series["device_name"] == DEVICES[0]
    assert [r["run_id"] for r in series["runs"]] == [f"nightly-{n:03d}" for n in range(25, 30)]
    assert series["first_bad_run"] == "nightly-024" and series["n_points"] == 30


def test_a_segment_start_is_named(db):
    url, keys = db
    data = json.loads(_run(keys["flush"], "--db", url, "--json", "--device", DEVICES[0]).stdout)
    starts = [(r["run_id"], r["segment_start"]) for r in data["series"][0]["runs"] if r["segment_start"]]
    assert starts == []  # the flush method changes at night 60: not in these 30 nights
    data = json.loads(_run(keys["throttled"], "--db", url, "--json").stdout)
    assert all(r["excluded"] == "" for s in data["series"] for r in s["runs"])


def test_a_sparkline_per_series_and_the_verdict_filter(db):
    url, keys = db
    res = _run("-f", "op=copy", "--db", url)
    assert res.exit_code == 0, res.output
    assert "4 series" in res.stdout and any(ch in res.stdout for ch in "▁▂▃▄▅▆▇█")
    data = json.loads(_run("-f", "verdict=regression", "--db", url, "--json").stdout)
    assert [(s["case_key"], s["status"]) for s in data["series"]] == [(keys["step"], "regression")]
    assert sparkline([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]) == "▁▂▃▄▅▆▇█"
    assert sparkline([2.0, 2.0]) == "▁▁" and sparkline([]) == ""


def test_nothing_matching_exits_2_with_the_nearest_case_keys(db):
    url, keys = db
    typo = keys["step"].replace("copy", "cpoy")
    res = _run(typo, "--db", url)
    assert res.exit_code == 2 and "nearest case keys: " + keys["step"] in " ".join(res.output.split())
    res = _run("-f", "op=copy", "-f", "n=999", "--db", url)
    assert res.exit_code == 2 and "no case in the database matches op=copy n=999" in res.output
    assert "copy.v1" in res.output  # the nearest: the cases matching the most filters
    res = _run("-f", "verdict=drift", "--db", url)
    assert res.exit_code == 2 and "none has the verdict asked for" in res.output
    assert _run("-f", "verdict=bad", "--db", url).exit_code == 2
    assert _run("-f", "nokey", "--db", url).exit_code == 2


def test_bad_invocations_exit_2(db, tmp_path):
    url, keys = db
    for args in ([], [keys["step"], "-f", "op=copy"], [keys["step"], "--last", "0"]):
        res = _run(*args, "--db", url)
        assert res.exit_code == 2, (args, res.output)
    assert _run(keys["step"], "--device", "B200", "--db", url).exit_code == 2
    missing = _run(keys["step"], "--db", f"sqlite:///{tmp_path / 'none.db'}")
    assert missing.exit_code == 2 and "does not exist" in missing.output
