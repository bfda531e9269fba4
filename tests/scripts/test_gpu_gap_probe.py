"""scripts/gpu_gap_probe.py off a GPU: its summary arithmetic, its probes through rooflab's engine on
a CPU (flush by writing and by reading, pace back to back and idle), and the skip it reports
without CUDA."""
from __future__ import annotations

import pytest

from tests.scripts.load import load_script


@pytest.fixture(scope="module")
def probe():
    return load_script("gpu_gap_probe")


def test_figure_is_rooflabs_summary_in_microseconds(probe):
    import random

    values = [float(v) / 1e3 for v in range(1, 102)]  # 1..101 us in ms: median 51, p10 11, p90 91 us
    random.shuffle(values)
    f = probe.figure("x", values, [1900.0, 1980.0])
    assert (f.median_us, f.p10_us, f.p90_us, f.n, f.sm_clock_mhz) == pytest.approx((51.0, 11.0, 91.0, 101, 1940.0))
    assert probe.figure("y", [0.003]).sm_clock_mhz is None
    with pytest.raises(ValueError, match="no samples"):
        probe.figure("z", [])


def test_the_probes_run_through_the_engine_each_in_its_own_way(probe, monkeypatch):
    from rooflab.suite.device import DeviceInfo

    monkeypatch.setitem(probe.COPY_ELEMENTS, "cpu", 1 << 16)
    monkeypatch.setitem(probe.GEMM_SIZE, "cpu", 64)
    monkeypatch.setattr(probe, "PROBE_TIMING", probe.PROBE_TIMING | {"min_samples": 10, "min_time_ms": 10,
                                                                     "max_time_ms": 100})
    small = DeviceInfo(kind="cpu", name="test cpu", torch_device="cpu", memory_bytes=1 << 34, l2_bytes=256 * 1024)
    flush = probe.flush_probe(small)
    assert [f.note.split(", hold")[0] for f in flush] == ["cold, flush write_sweep, pace back_to_back",
                                                         "cold, flush read_sweep, pace back_to_back"]
    pace = probe.pace_probe(small)
    assert [f.note.split(", hold")[0] for f in pace] == ["cold, flush write_sweep, pace back_to_back",
                                                        "cold, flush write_sweep, pace idle",
                                                        "hot, flush none, pace back_to_back"]
    assert all(f.n >= 10 and f.median_us > 0 and f.sm_clock_mhz is None for f in flush + pace)
    assert "| matmul float32 64^3, cold, idle between samples |" in probe.markdown(pace, "test cpu")


def test_without_cuda_it_says_skip_and_exits_3(probe, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert probe.main([]) == 3
    assert capsys.readouterr().out.startswith("SKIP: no CUDA device")
