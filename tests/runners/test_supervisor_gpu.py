"""The supervisor on CUDA GPUs (`make test-gpu`): one pinned worker per GPU, CUDA faults isolated."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from rooflab.db.query import environments, results  # noqa: E402 - after pytest.importorskip
from rooflab.runners.orchestration.run_options import RunOptions  # noqa: E402 - after pytest.importorskip
from rooflab.runners.orchestration.session import run_suite  # noqa: E402 - after pytest.importorskip

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

PLUGIN = "tests.runners.planted_ops"

SPEC = """\
name: gpu_planted
defaults:
  timing: {warmup_ms: 2, min_samples: 10, min_time_ms: 5, max_time_ms: 100}
benchmarks:
  - name: scale
    op: planted_scale
    cache: [cold, hot]
    timing_modes: [launch]
    params: {n: [65536, 1048576]}
  - name: scale_graph
    op: planted_scale
    cache: [hot]
    timing_modes: [graph]
    params: {n: [65536, 1048576]}
"""

FAULTS = """\
name: gpu_faults
defaults:
  cache: [hot]
  timing: {warmup_ms: 2, min_samples: 10, min_time_ms: 5, max_time_ms: 100}
benchmarks:
  - name: oom
    op: planted_allocate
  - name: after_oom
    op: planted_scale
    params: {n: 4096}
  - name: exit
    op: planted_exit
  - name: after_exit
    op: planted_scale
    params: {n: 8192}
"""


@pytest.fixture
def spec_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ROOFLAB_PLUGINS", PLUGIN)
    (tmp_path / "spec.yaml").write_text(SPEC, encoding="utf-8")
    (tmp_path / "faults.yaml").write_text(FAULTS, encoding="utf-8")
    return tmp_path


def test_devices_all_runs_every_case_on_every_gpu_with_its_uuid(spec_dir: Path) -> None:
    url = f"sqlite:///{spec_dir / 'r.db'}"
    summary = run_suite(spec_dir / "spec.yaml", db=url, options=RunOptions(devices="all", quiet=True),
                        handle_signals=False)
    assert summary.status == "complete"
    gpus = torch.cuda.device_count()
    assert len(summary.devices) == gpus
    frame = results(url, run_id=summary.run_id)
    assert len(frame) == gpus * summary.selected_cases == gpus * 6  # cold + graph is refused: 4 launch + 2 graph
    assert set(frame["status"]) == {"ok"}
    uuids = {d.device_uuid for d in summary.devices}
    assert None not in uuids and len(uuids) == gpus
    assert set(frame["device_uuid"]) == uuids
    assert frame.groupby("device_uuid")["case_key"].nunique().eq(summary.selected_cases).all()
    assert set(frame["clock"]) == {"cuda_events"}
    graph = frame[frame["timing_mode"] == "graph"]
    assert (graph["launches_per_sample"] > 1).all()
    cold = frame[frame["cache"] == "cold"]
    assert (cold["flush_bytes"] >= 2 * cold["l2_bytes"]).all()
    assert len(environments(url)) >= 1


def test_cuda_out_of_memory_and_a_dead_worker_leave_the_sweep_going(spec_dir: Path) -> None:
    url = f"sqlite:///{spec_dir / 'r.db'}"
    summary = run_suite(
        spec_dir / "faults.yaml", db=url, options=RunOptions(device="cuda:0", quiet=True, case_timeout_s=120),
        handle_signals=False,
    )
    assert summary.status == "complete"
    frame = results(url, run_id=summary.run_id)
    assert len(frame) == 4
    status = {(row.op, json.loads(row.params)["n"]): row.status for row in frame.itertuples()}
    assert status == {
        ("planted_allocate", 4096): "failed",
        ("planted_scale", 4096): "ok",  # same worker, after the out-of-memory error was cleaned up
        ("planted_exit", 4096): "crashed",
        ("planted_scale", 8192): "ok",  # a fresh worker
    }
    oom = frame[frame["op"] == "planted_allocate"].iloc[0]
    assert oom["error"].startswith("OutOfMemoryError")
    assert frame[frame["op"] == "planted_exit"].iloc[0]["error"] == "worker process died: exit code 3"
    assert frame["device_uuid"].notna().all()
