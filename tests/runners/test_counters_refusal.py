"""`rooflab counters` when ncu may not read the counters (ERR_NVGPUCTRPERM): nothing of the
invocation is written, not the run, not a reading, not the --keep-reports folder, even when a case
before the refused one was read first (an incorrect case never reaches a kernel, so ncu never
refuses it: it proves nothing about the permission and is held back).

The fake ncu (tests/runners/fake_ncu.py) refuses as real ncu does: only when the profiled process
reaches its timed call, the first kernel ncu would profile. The device check is planted as in
test_counters_cli.py (a description that says CUDA over the CPU)."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

import rooflab
from rooflab.db.counters import counters_frame
from rooflab.db.store import ResultStore
from rooflab.runners.cli.app import app
from rooflab.runners.counters import session
from tests.db.factories import make_env, make_run
from tests.runners import fake_ncu
from tests.runners.test_counters_cli import planted_cuda

runner = CliRunner()
# an incorrect case first (the child's check fails before the NVTX range), then a correct one
SPEC = """name: refused
benchmarks:
  - {name: wrong, op: planted_wrong, params: {n: 4096}}
  - {name: copy, op: copy, params: {n: 4096}}
"""


@pytest.fixture
def ncu(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(session, "describe_device", planted_cuda())
    return fake_ncu.install(tmp_path, monkeypatch)


def _database_with_a_run(url: str) -> None:
    run, env = make_run("earlier", rng=random.Random(3)), make_env(0)
    with ResultStore(url) as store:
        store.start_run(run)
        store.add_environment(run.run_id, env)
        store.finish_run(run.run_id, "complete")


def test_a_refusal_after_an_incorrect_case_writes_nothing(tmp_path, monkeypatch, ncu) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    url = f"sqlite:///{tmp_path / 'results.db'}"
    _database_with_a_run(url)
    keep = tmp_path / "kept" / "counters"
    monkeypatch.setenv("FAKE_NCU_SCRIPT", json.dumps([{"permission": True, "csv": "copy_float32.csv"}]))
    result = runner.invoke(app, ["counters", str(spec), "--db", url, "--keep-reports", str(keep)])
    assert result.exit_code == 2, result.output
    assert "ERR_NVGPUCTRPERM" in result.output and "nothing was written" in result.output
    made = fake_ncu.calls(tmp_path)
    assert len(made) == 2 and all(c["problems"] == [] for c in made)  # the incorrect case was profiled first
    assert list(rooflab.runs(url)["run_id"]) == ["earlier"]  # no counters run
    assert counters_frame(url).empty  # no reading, not even the incorrect case's
    assert not (tmp_path / "kept").exists(), "a refused command left a --keep-reports folder behind"


def test_readings_held_back_are_written_once_a_pass_is_profiled(tmp_path, monkeypatch, ncu) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    url = f"sqlite:///{tmp_path / 'results.db'}"
    keep = tmp_path / "kept" / "counters"
    monkeypatch.setenv("FAKE_NCU_SCRIPT", json.dumps([{"csv": "copy_float32.csv"}]))
    result = runner.invoke(app, ["counters", str(spec), "--db", url, "--keep-reports", str(keep), "--json"])
    assert result.exit_code == 0, result.output
    frame = counters_frame(url)
    assert list(frame["status"]) == ["incorrect", "ok"]  # the incorrect case too, in order
    assert sorted(p.suffix for p in keep.iterdir()) == [".csv", ".csv", ".log", ".log"]
    runs = rooflab.runs(url).set_index("run_id")
    assert runs.loc[json.loads(result.stdout)["run_id"], "status"] == "complete"


def test_a_keep_reports_place_that_cannot_be_a_folder_is_refused_before_anything(tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    db = tmp_path / "r.db"
    for place, message in ((blocker, "exists and is not a directory"),
                           (blocker / "below", "is not a directory")):
        result = runner.invoke(app, ["counters", "quick", "--device", "cpu", "--db", f"sqlite:///{db}",
                                     "--keep-reports", str(place)])
        assert result.exit_code == 2 and message in result.output, result.output
    assert not db.exists()
    refused_cpu = runner.invoke(app, ["counters", "quick", "--device", "cpu", "--db", f"sqlite:///{db}",
                                      "--keep-reports", str(tmp_path / "new" / "folder")])
    assert refused_cpu.exit_code == 2 and "is a CPU" in refused_cpu.output
    assert not (tmp_path / "new").exists()  # checked, not made


def test_a_refusal_after_readings_were_stored_says_so() -> None:
    # ncu refusing once it has profiled a pass should not happen (the permission is the driver's);
    # if it did, the message must not claim that nothing was written
    writer = session._Writer("sqlite://", None, None, Path("kept"))
    assert session._refused_after(writer, "counters-x") == "nothing was written"
    writer.store, writer.stored = object(), 3
    said = session._refused_after(writer, "counters-x")
    assert "3 reading(s) made before it are stored in run counters-x" in said and "kept" in said
    assert "nothing was written" not in said
