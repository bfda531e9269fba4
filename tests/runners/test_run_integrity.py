"""A run holds the cases of one spec: resume with another spec is refused, `complete` means every
case of the spec has a result, and `nightly` fails a night with missing coverage."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rooflab.db.query import results, runs
from rooflab.runners.cli.app import app
from rooflab.runners.orchestration.run_options import RunOptions
from rooflab.runners.orchestration.session import run_suite
from tests.runners.test_run_cli import PLANTED_SPEC, PLUGIN, run_status, write

OTHER_SPEC = """\
name: other
defaults:
  cache: [hot]
  timing: {warmup_ms: 1, warmup_calls: 2, min_samples: 5, min_time_ms: 2, max_time_ms: 50}
benchmarks:
  - name: other
    op: planted_scale
    params:
      n: [128, 4096]
"""

runner = CliRunner()


@pytest.fixture(autouse=True)
def _plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROOFLAB_PLUGINS", PLUGIN)
    monkeypatch.delenv("ROOFLAB_DB", raising=False)


def test_resume_with_another_spec_is_refused_and_measures_nothing(tmp_path: Path) -> None:
    planted = write(tmp_path, "planted.yaml", PLANTED_SPEC)
    other = write(tmp_path, "other.yaml", OTHER_SPEC)
    url = f"sqlite:///{tmp_path / 'r.db'}"
    first = run_suite(planted, db=url, options=RunOptions(run_id="night", device="cpu", quiet=True, filters=["n=256"]),
                      handle_signals=False)
    assert first.status == "partial" and run_status(url, "night") == "partial"
    before = len(results(url, run_id="night"))

    result = runner.invoke(app, ["run", str(other), "--resume", "night", "--db", url, "--device", "cpu", "-q"])
    assert result.exit_code == 2, result.output
    assert "'planted'" in result.output and "'other'" in result.output and "other.yaml" in result.output
    assert "Traceback" not in result.output
    assert len(results(url, run_id="night")) == before  # nothing of the other spec measured into the run
    assert run_status(url, "night") == "partial"

    # another version of the same spec (same name, other text) is refused too
    edited = write(tmp_path, "planted2.yaml", PLANTED_SPEC.replace("2048]", "2048, 4096]"))
    result = runner.invoke(app, ["run", str(edited), "--resume", "night", "--db", url, "--device", "cpu", "-q"])
    assert result.exit_code == 2 and "another version of that spec" in result.output, result.output


def test_complete_only_when_every_case_of_the_spec_has_a_result(tmp_path: Path) -> None:
    planted = write(tmp_path, "planted.yaml", PLANTED_SPEC)
    url = f"sqlite:///{tmp_path / 'r.db'}"
    def kw(**options):
        return dict(db=url, options=RunOptions(device="cpu", quiet=True, **options), handle_signals=False)

    part = run_suite(planted, **kw(run_id="night", filters=["n=256", "n=512"]))
    assert part.status == "partial" and part.exit_code == 0 and sum(part.counts.values()) == 2
    assert run_status(url, "night") == "partial"
    # the same spec again with another filter: still a part of it
    more = run_suite(planted, **kw(resume="night", filters=["n=1024"]))
    assert more.status == "partial" and more.already_measured == 0 and sum(more.counts.values()) == 1
    # resumed without a filter: the last case is measured, and only now is the run complete
    rest = run_suite(None, **kw(resume="night"))
    assert rest.status == "complete" and rest.already_measured == 3 and sum(rest.counts.values()) == 1
    assert run_status(url, "night") == "complete"
    assert len(results(url, run_id="night")) == 4
    # a filter that happens to select every case leaves a complete run
    whole = run_suite(planted, **kw(run_id="all", filters=["op=planted_scale"]))
    assert whole.status == "complete"


def test_nightly_fails_on_missing_coverage(tmp_path: Path) -> None:
    planted = write(tmp_path, "planted.yaml", PLANTED_SPEC)
    url = f"sqlite:///{tmp_path / 'r.db'}"
    run_suite(planted, db=url, options=RunOptions(run_id="night", device="cpu", quiet=True, filters=["n=256"]),
              handle_signals=False)
    out = tmp_path / "report"
    result = runner.invoke(app, ["nightly", str(planted), "--skip-run", "--run-id", "night", "--db", url,
                                 "--out", str(out)])
    assert result.exit_code == 1, result.output
    assert "coverage: 1/4 cases of the spec have a result" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["coverage_failed"] is True and summary["exit_code"] == 1 and summary["alert"] is False
    assert summary["run_status"] == "partial" and len(summary["cases_missing"]) == 3
    assert set(runs(url)["status"]) == {"partial"}
