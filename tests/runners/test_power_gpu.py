"""Board power from NVML's energy counter around real GPU work (needs a GPU and NVML)."""
from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

from rooflab.runners.machine.clocks import ClockMonitor, NvmlClockSource  # noqa: E402 - after pytest.importorskip
from rooflab.runners.machine.environment import capture  # noqa: E402 - after pytest.importorskip


def test_a_busy_gpu_draws_power_and_its_counter_advances() -> None:
    _record, device = capture("cuda:0")
    source = NvmlClockSource.for_device(device)
    if source is None:
        pytest.skip("no NVML handle for cuda:0")
    try:
        start_mj = source.total_energy_mj()
    except Exception as exc:  # NVML_ERROR_NOT_SUPPORTED: boards before Volta
        pytest.skip(f"no energy counter: {exc}")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    monitor = ClockMonitor(device, source=source, poll_interval_s=0.02).start()
    until = time.perf_counter() + 1.0
    while time.perf_counter() < until:
        for _ in range(8):
            torch.mm(a, a)
        torch.cuda.synchronize()
    report = monitor.stop()
    assert source.total_energy_mj() > start_mj
    assert report.power_w is not None and 30.0 < report.power_w < 2000.0, report
    assert report.readings >= 10
