"""`rooflab counters` when ncu may not read the counters (ERR_NVGPUCTRPERM): nothing of the
invocation is written, not the run, not a reading, not the --keep-reports folder, even when a case
before the refused one was read first (an incorrect case never reaches a kernel, so ncu never
refuses it: it proves nothing about the permission and is held back).

The fake ncu (tests/runners/fake_ncu.py) refuses as real ncu does: only when the profiled process
reaches its timed call, the first kernel ncu would profile; it starts the profiled children as ncu
does, in a fresh interpreter. The device check is planted as in test_counters_cli.py (a description
that says CUDA over the CPU). That readings held back are written once a pass is profiled, in
order, is test_counters_cli.py's end-to-end test (its first case is incorrect)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rooflab.runners.cli.app import app
from rooflab.runners.counters import session
from rooflab.suite.spec import apply_filters, expand, load_spec
from tests.runners import fake_ncu
from tests.runners.test_counters_cli import _refused, planted_cuda

runner = CliRunner()
# an incorrect case first (the child's check fails before the NVTX range), then a case skipped
# before ncu (no CuPy here), then a correct one, which ncu refuses
SPEC = """name: refused
benchmarks:
  - {name: wrong, op: planted_wrong, params: {n: 4096}}
  - {name: copy, op: copy, backends: [cupy, eager], params: {n: 4096}}
"""


@pytest.fixture
def ncu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(session, "describe_device", planted_cuda())
    return fake_ncu.install(tmp_path, monkeypatch)


def test_a_refusal_after_an_incorrect_and_a_skipped_case_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      ncu: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    cases = apply_filters(expand(load_spec(str(spec)), "cuda"), [])
    assert [(c.op, c.backend) for c in cases] == [("planted_wrong", "eager"), ("copy", "cupy"), ("copy", "eager")]
    keep = tmp_path / "kept" / "counters"
    monkeypatch.setenv("FAKE_NCU_SCRIPT", json.dumps([{"permission": True, "csv": "copy_float32.csv"}]))
    # no database: no run, no reading, not the held-back ones
    output = _refused([str(spec), "--ncu", str(ncu), "--keep-reports", str(keep)], tmp_path, "ERR_NVGPUCTRPERM")
    assert "nothing was written" in output
    made = fake_ncu.calls(tmp_path)  # the incorrect case was profiled first; the skipped one never reached ncu
    assert len(made) == 2 and all(c["problems"] == [] for c in made)
    assert not (tmp_path / "kept").exists(), "a refused command left a --keep-reports folder behind"


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
