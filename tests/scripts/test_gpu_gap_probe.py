"""scripts/gpu_gap_probe.py off a GPU: its summary arithmetic, its write-sweep flusher through
rooflab's engine, and the skip it reports without CUDA."""
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


def test_the_write_flusher_writes_its_whole_buffer_and_the_engine_records_it(probe):
    import torch

    from rooflab.runners.engine.timing import measure
    from rooflab.runners.machine.environment import capture
    from rooflab.suite.timing import TimingSettings

    _, device = capture("cpu")
    flusher = probe.WriteFlusher(1 << 20, "cpu")
    flusher._words.random_()
    flusher.flush()
    assert int(flusher._words.count_nonzero()) == 0 and flusher._words.numel() * 8 == 1 << 20
    x = torch.randn(4096)
    settings = TimingSettings(warmup_ms=1, warmup_calls=1, min_samples=5, min_time_ms=1, max_time_ms=50)
    r = measure(lambda: x * 2, device=device, settings=settings, cache="cold", timing_mode="launch", flusher=flusher)
    assert r.method.flush_method == "write_sweep" and r.method.flush_bytes == 1 << 20 and r.stats.n_samples >= 5


def test_without_cuda_it_says_skip_and_exits_3(probe, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert probe.main([]) == 3
    assert capsys.readouterr().out.startswith("SKIP: no CUDA device")
