"""`rooflab nightly` carries the fleet's verdicts on the run's night (summary.json and its text), and
--fleet-fail-on sets its exit code."""
from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from rooflab.db.importer import import_file
from rooflab.runners.cli.app import app
from tests.reports.fleet_sim import SimFleet, Slowdown, device_key, simulate, write_export

runner = CliRunner()


def test_the_nightly_summary_names_the_slow_device(tmp_path: Path) -> None:
    # six GPUs of one node, four nights; GPU 2 5 % slower on the matrix for the last two
    sim = SimFleet(nodes=1, gpus_per_node=6, nights=4, seed=4, slowdowns=(Slowdown(2, "matrix", 5.0, 2),))
    url = f"sqlite:///{tmp_path / 'r.db'}"
    import_file(url, write_export(simulate(sim), sim, tmp_path / "health.jsonl"))
    out = tmp_path / "night"
    args = ["nightly", "health", "--skip-run", "--run-id", "health-003-node00", "--db", url, "--out", str(out)]
    lenient = runner.invoke(app, args)
    assert lenient.exit_code == 0, lenient.output  # slow, not drained: the default --fleet-fail-on drain passes
    assert f"slow       node00 {device_key(sim, 2)}: matrix" in lenient.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["fleet"]["counts"]["slow"] == 1 and summary["fleet"]["devices"] == 6
    assert [d["device_key"] for d in summary["fleet"]["flagged"]] == [device_key(sim, 2)]
    assert summary["fleet_alert"] is False and summary["fleet_fail_on"] == "drain"
    strict = runner.invoke(app, [*args, "--fleet-fail-on", "slow"])
    assert strict.exit_code == 1, strict.output
    assert json.loads((out / "summary.json").read_text())["fleet_alert"] is True
    assert (out / "fleet.html").exists()  # the night's report has its fleet page
    bad = runner.invoke(app, [*args, "--fleet-fail-on", "regression"])
    assert bad.exit_code == 2 and "--fleet-fail-on 'regression' is not allowed" in bad.output
