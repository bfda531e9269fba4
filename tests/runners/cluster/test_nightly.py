"""`rooflab nightly --skip-run` over planted histories: exit codes, summaries, shards."""
from __future__ import annotations

import json
import random
import shutil
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rooflab.runners.cli.app import app
from rooflab.runners.cluster.nightly import NightlyOptions, nightly
from rooflab.runners.orchestration.run_options import RunOptions
from tests.runners.cluster_support import (
    H100,
    T0,
    Device,
    case_record,
    measurement,
    run_record,
    sqlite_url,
    write_history,
)

CASES = [case_record("copy", n) for n in (1 << 20, 1 << 22, 1 << 24)]
SPEC = """name: nightly
benchmarks:
  - name: copies
    op: copy
    params:
      n: [1048576, 4194304, 16777216]
"""


@pytest.fixture()
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "nightly.yaml"
    path.write_text(SPEC)
    return path


def planted(seed: int, n_runs: int, steps: dict[int, dict[int, float]]) -> list[dict[str, float]]:
    """Per run, case_key -> median: a random level per case with 0.5 % run-to-run noise, times
    steps[run][case index] where given."""
    rng = np.random.default_rng(seed)
    levels = {c.case_key: float(rng.uniform(0.05, 5.0)) for c in CASES}
    runs = []
    for i in range(n_runs):
        medians = {k: v * (1 + 0.005 * rng.standard_normal()) for k, v in levels.items()}
        for case_index, factor in steps.get(i, {}).items():
            medians[CASES[case_index].case_key] *= factor
        runs.append(medians)
    return runs


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> tuple[Path, list[str]]:
    """12 nights: case 0 is 20 % slower on nights 10 and 11, case 1 30 % faster, case 2 flat."""
    base = tmp_path_factory.mktemp("history")
    url = sqlite_url(base)
    steps = {10: {0: 1.2, 1: 0.7}, 11: {0: 1.2, 1: 0.7}}
    run_ids = write_history(url, cases=CASES, medians_by_run=planted(1, 12, steps), start=T0, seed=2)
    return base / "results.db", run_ids


@pytest.fixture()
def url(history, tmp_path) -> str:
    """A private copy of the planted history."""
    copy = tmp_path / "results.db"
    shutil.copyfile(history[0], copy)
    return f"sqlite:///{copy}"


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_planted_step_of_20_percent_fails_the_night(url, history, tmp_path, spec):
    run_ids = history[1]
    out = tmp_path / "report"
    result = invoke("nightly", str(spec), "--db", url, "--out", str(out), "--skip-run", "--run-id", run_ids[-1])
    assert result.exit_code == 1, result.output
    assert "1 regressions" in result.output and "REGRESSION" in result.output and "improved" in result.output
    assert CASES[0].case_key in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exit_code"] == 1 and summary["alert"] is True
    assert [r["case_key"] for r in summary["regressions"]] == [CASES[0].case_key]
    assert summary["regressions"][0]["rel_change"] == pytest.approx(0.2, abs=0.03)
    device = summary["regressions"][0]["device_key"]  # each series one physical device, named in the summary
    assert summary["regressions"][0]["by"] == "device" and device and f"{device}): " in result.output
    assert [r["case_key"] for r in summary["improvements"]] == [CASES[1].case_key]
    assert summary["suspects"] == []
    assert summary["counts"]["ok"] == 3 and summary["series_checked"] == 3
    assert summary["cases_expected"] == 3 and summary["cases_missing"] == []
    assert "coverage: 3/3 cases" in result.output
    assert summary["report"] == str(out / "index.html") and (out / "index.html").is_file()
    # the same night with --fail-on never reports it but does not fail; no --run-id: the latest run
    result = invoke("nightly", str(spec), "--db", url, "--out", str(out), "--skip-run", "--fail-on", "never")
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run_id"] == run_ids[-1] and summary["regressions"]


def test_the_first_slow_night_is_a_suspect(url: str, history: tuple[Path, list[str]], tmp_path: Path,
                                           spec: Path) -> None:
    """Judging night 10 ignores night 11: one slow night is a suspect, which fails only --fail-on suspect
    (the flag reaches the night from the command line: test_clean_history_passes)."""
    night = history[1][10]
    summary = nightly(str(spec), db=url, options=NightlyOptions(tmp_path / "r", skip_run=True, fail_on="suspect",
                                                                run=RunOptions(run_id=night)))
    assert [r["case_key"] for r in summary.verdicts["suspect"]] == [CASES[0].case_key]
    assert summary.verdicts["regression"] == ()
    assert summary.exit_code == 1 and "suspect" in summary.text()
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["exit_code"] == 1
    assert replace(summary, fail_on="regression").exit_code == 0  # the default fails on regressions only


def test_clean_history_passes(url, history, tmp_path, spec):
    out = tmp_path / "report"
    result = invoke("nightly", str(spec), "--db", url, "--out", str(out), "--skip-run", "--run-id", history[1][9],
                    "--fail-on", "suspect")
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["regressions"] == [] and summary["suspects"] == [] and summary["improvements"] == []
    assert summary["fail_on"] == "suspect"  # the command line's flag, as the night applied it
    assert "0 regressions, 0 suspects, 0 improvements" in result.output and "report:" in result.output


def test_by_model_finds_a_regression_on_another_node_that_by_device_cannot_see(tmp_path: Path, spec: Path) -> None:
    """A sharded night's case moved to another node: ten nights on node-a's GPU, then the last two on
    node-b's GPU of the same model, case 0 20 % slower there. Each GPU is a series of its own, so by
    device node-b's series has two points and no baseline (nothing found, the night passes); by model
    the twelve nights are one series and case 0 is a regression."""
    seed = random.randrange(1 << 30)
    medians = planted(seed, 12, {10: {0: 1.2}, 11: {0: 1.2}})
    url = sqlite_url(tmp_path)
    write_history(url, cases=CASES, medians_by_run=medians[:10], start=T0, seed=seed)
    node_b = Device(H100.fingerprint, H100.name, "GPU-0b00", host="node-b")
    tonight = write_history(url, cases=CASES, medians_by_run=medians[10:], start=T0 + timedelta(days=10), seed=seed,
                            prefix="moved", device=node_b)[-1]
    found = {}
    for by in ("device", "model"):
        out = tmp_path / by
        result = invoke("nightly", str(spec), "--db", url, "--out", str(out), "--skip-run", "--by", by)
        found[by] = (result, json.loads((out / "summary.json").read_text()))
        assert found[by][1]["run_id"] == tonight and found[by][1]["by"] == by, seed
        assert f"history (by {by}): 3 series checked" in result.output, (seed, result.output)
    (by_device, device_summary), (by_model, model_summary) = found["device"], found["model"]
    assert by_device.exit_code == 0 and device_summary["regressions"] == [], (seed, by_device.output)
    assert device_summary["insufficient_data"] == 3  # node-b's GPU: two nights, no baseline
    assert by_model.exit_code == 1, (seed, by_model.output)
    assert [r["case_key"] for r in model_summary["regressions"]] == [CASES[0].case_key], seed
    row = model_summary["regressions"][0]
    assert row["by"] == "model" and row["device_key"] is None and row["device_fingerprint"] == H100.fingerprint
    assert row["rel_change"] == pytest.approx(0.2, abs=0.03), seed
    assert model_summary["insufficient_data"] == 0 and model_summary["counts"]["ok"] == 3


def test_missing_and_unfinished_shards_are_listed(tmp_path, spec):
    from rooflab.db.store import ResultStore

    url = sqlite_url(tmp_path)
    rng = np.random.default_rng(11)
    with ResultStore(url) as store:
        store.start_run(run_record("sharded", T0), shard="0/4")
        store.start_run(run_record("sharded", T0), shard="2/4")
        store.add_environment("sharded", H100.record())
        store.add_measurement(measurement("sharded", CASES[0], 1.0, rng, measured_at=T0, shard="0/4"))
        store.finish_run("sharded", "complete", shard="0/4")
    summary = nightly(str(spec), db=url,
                      options=NightlyOptions(tmp_path / "r", skip_run=True, run=RunOptions(run_id="sharded")))
    assert summary.shards.expected == 4
    assert summary.shards.finished == ("0/4",) and summary.shards.unfinished == ("2/4",)
    assert summary.shards.missing == ("1/4", "3/4")
    text = summary.text()
    assert "shards: 1/4 finished; unfinished 2/4; missing 1/4, 3/4" in text
    assert summary.cases_expected == 3
    assert summary.cases_missing == tuple(sorted(c.case_key for c in CASES[1:]))
    assert "coverage: 1/3 cases of the spec have a result; missing " in text
    assert "another version of the spec" in text  # the planted run's spec text is not this file
    assert summary.run_status == "running" and summary.exit_code == 1  # 2 of 3 cases have no result
    assert "(FAILS the night)" in text and summary.to_dict()["coverage_failed"] is True


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--fail-on", "always"], "--fail-on"),
        (["--shard", "4/4"], "--shard"),
        (["--window", "1"], "--window"),
        (["--min-change", "1.5"], "--min-change"),
        (["--run-id", "nope"], "no such run"),
        (["--by", "node"], "--by"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(url, tmp_path, spec, args, fragment):
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["nightly", str(spec), "--db", url, "--out", str(out), "--skip-run", *args])
    assert result.exit_code == 2, result.output
    assert fragment in result.output
    assert "Traceback" not in result.output
    assert not out.exists()


def test_bad_spec_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nbenchmarks: []\n")
    result = CliRunner().invoke(app, ["nightly", str(bad), "--db", sqlite_url(tmp_path), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "bad.yaml" in result.output
    assert not (tmp_path / "results.db").exists()


def test_skip_run_without_any_run_of_the_suite_exits_2(url, tmp_path, spec):
    other = tmp_path / "other.yaml"
    other.write_text(SPEC.replace("name: nightly", "name: other"))
    result = CliRunner().invoke(app, ["nightly", str(other), "--db", url, "--out", str(tmp_path / "o"), "--skip-run"])
    assert result.exit_code == 2 and "no run of other" in result.output


def test_text_summary_lists_at_most_ten_per_kind(tmp_path, spec):
    from rooflab.runners.cluster.nightly import NightlySummary, ShardState

    rows = tuple(
        {"case_key": f"copy.v1:eager:float32:cold:launch:n={i}", "device_name": "H100", "device_fingerprint": "f",
         "baseline_ms": 1.0, "latest_ms": 1.3, "rel_change": 0.3, "z": 20.0}
        for i in range(13)
    )
    s = NightlySummary(run_id="r", suite="s", run_status="complete", db_url="sqlite:///x", counts={"ok": 13},
                       shards=ShardState(0, (), (), ()), verdicts={"regression": rows}, series_checked=13,
                       insufficient_data=0, fail_on="regression", report=None)
    text = s.text()
    assert text.count("REGRESSION") == 10 and "and 3 more regressions" in text
    assert "1.000 ms -> 1.300 ms (+30.0 %" in text
    regressions = s.to_dict()["regressions"]
    assert s.exit_code == 1 and isinstance(regressions, list) and regressions[12]["case_key"].endswith("n=12")


def test_skip_run_on_a_database_that_is_not_there_exits_2_and_creates_nothing(tmp_path, spec):
    target = tmp_path / "nowhere.db"
    result = CliRunner().invoke(app, ["nightly", str(spec), "--db", f"sqlite:///{target}", "--out",
                                      str(tmp_path / "o"), "--skip-run", "--run-id", "r1"])
    assert result.exit_code == 2 and "no rooflab database" in result.output
    assert not target.exists() and not (tmp_path / "o").exists()


def test_workers_of_a_nightly_share_an_inductor_cache_under_out(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                  spec: Path) -> None:
    """The compile cache lives under --out (kept between nights) while the run is made."""
    from rooflab.runners.cluster import nightly as nightly_module
    from rooflab.runners.orchestration import session

    seen: list[str | None] = []

    class Stop(Exception):
        pass

    def fake_run_suite(*args, **kwargs):
        import os

        seen.append(os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
        raise Stop

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setattr(session, "run_suite", fake_run_suite)
    out = tmp_path / "out"
    with pytest.raises(Stop):
        nightly(str(spec), db=sqlite_url(tmp_path / "rooflab.db.sqlite"), options=NightlyOptions(out))
    assert seen == [str((out / nightly_module.INDUCTOR_CACHE_DIR).resolve())]
    assert (out / "inductor-cache").is_dir()
    import os

    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ  # restored after the run
