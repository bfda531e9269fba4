"""`rooflab counters` on a CUDA GPU under the real Nsight Compute: a large copy moves its model's
bytes through DRAM (a known answer: each element read once and written once), each side apart, its
write-back caught inside the profiled range. Run by `make test-gpu`; the GPU loan's test-gpu step
puts ncu on PATH (docs/gpu-validation.md)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(shutil.which("ncu") is None, reason="Nsight Compute (ncu) is not on PATH"),
]

ROOT = Path(__file__).resolve().parents[2]
N = 1 << 26  # quick's large float32 copy: 256 MiB read and 256 MiB written, five times an H100's L2


def test_a_large_copy_moves_its_model_bytes_through_dram(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "rooflab", "counters", "quick", "-f", "benchmark=gpu_pointwise", "-f", "op=copy",
            "-f", "dtype=float32", "-f", f"n={N}", "--device", "cuda", "--db", f"sqlite:///{tmp_path / 'r.db'}",
            "--keep-reports", str(tmp_path / "kept"), "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (reading,) = json.loads(done.stdout)["readings"]
    assert reading["status"] == "ok", reading["error"]
    array_bytes = N * 4
    assert reading["model_bytes"] == 2 * array_bytes
    assert reading["kernels"] >= 1 and reading["kernel_ms"] > 0
    assert (reading["model_bytes_read"], reading["model_bytes_written"]) == (array_bytes, array_bytes)
    assert reading["dram_read_bytes"] == pytest.approx(array_bytes, rel=0.05)
    # the lines the copy wrote and the L2 still held when it ended: written back during the sweep
    # that follows the call inside the range, and counted there (less the sweep's own writes)
    l2_bytes = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 64 << 20
    assert 0 < reading["caught_write_back_bytes"] <= l2_bytes
    assert reading["dram_write_bytes"] == pytest.approx(array_bytes, rel=0.10)
    assert reading["reads"]["judged"] and reading["writes"]["judged"]
    assert not reading["bytes_differ"], (reading["reads"], reading["writes"])
    assert any((tmp_path / "kept").rglob("*.csv")), "ncu's report was not kept"
