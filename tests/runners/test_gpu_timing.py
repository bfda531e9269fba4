"""CUDA paths of the timing engine, the flush, the clock monitor and the environment (need a GPU)."""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

from runners.clocks import ClockMonitor  # noqa: E402
from runners.environment import capture, fingerprint  # noqa: E402
from runners.flush import CudaFlusher  # noqa: E402
from runners.timing import measure  # noqa: E402
from suite.timing import TimingSettings  # noqa: E402

QUICK = TimingSettings(warmup_ms=10, warmup_calls=3, min_samples=20, min_time_ms=20, max_time_ms=1500, target_precision=0.01)


@pytest.fixture(scope="module")
def gpu():
    record, device = capture("cuda:0")
    return record, device


def test_capture_describes_the_gpu_from_torch_and_nvml(gpu) -> None:
    record, device = gpu
    props = torch.cuda.get_device_properties(0)
    assert device.kind == "cuda" and device.torch_device == "cuda:0"
    assert device.l2_bytes == props.L2_cache_size == record.l2_bytes > 0
    assert device.sm_count == props.multi_processor_count
    assert device.compute_capability == (props.major, props.minor)
    assert record.compute_capability == f"{props.major}.{props.minor}"
    assert record.cuda_version == torch.version.cuda
    assert record.identity["model"] == props.name == record.device_name
    assert record.identity["cuda_major"] == torch.version.cuda.split(".")[0]
    assert record.info["uuid"].startswith(("GPU-", "MIG-"))
    assert record.device_fingerprint == fingerprint(record.identity) == capture("cuda:0")[0].device_fingerprint
    if record.info["nvml"]:
        assert record.driver_version and record.identity["driver_major"] == record.driver_version.split(".")[0]
        assert record.info["max_sm_clock_mhz"] > 0
        assert record.info["memory_bus_width_bits"] > 0 and record.info["theoretical_memory_gbps"] > 100


def test_nvml_handle_is_the_same_gpu_as_torch(gpu) -> None:
    from runners import nvml

    record, _ = gpu
    handle = nvml.handle_for("cuda:0")
    if handle is None:
        pytest.skip("NVML not available")
    assert nvml.normalize_uuid(nvml.nvml().nvmlDeviceGetUUID(handle)) == nvml.normalize_uuid(record.info["uuid"])


def test_cuda_flush_buffer_is_sized_from_the_device_l2(gpu) -> None:
    _, device = gpu
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flusher = CudaFlusher(device)
    assert flusher.flush_bytes >= 2 * l2
    assert flusher._buf.numel() * flusher._buf.element_size() == flusher.flush_bytes
    flusher.flush()
    torch.cuda.synchronize()
    assert torch.all(flusher._words == flusher._value).item()
    r = measure(lambda: None, device=device, settings=QUICK, cache="cold", timing_mode="launch")
    assert r.flush_bytes >= 2 * l2 and r.clock == "cuda_events"


def test_events_agree_with_an_independent_timer_on_a_long_gemm(gpu) -> None:
    from torch.utils.benchmark import Timer

    _, device = gpu
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    ours = measure(lambda: a @ b, device=device, settings=QUICK, cache="hot", timing_mode="launch")
    theirs = Timer("a @ b", globals={"a": a, "b": b}).blocked_autorange(min_run_time=0.5)
    assert ours.stats.median_ms == pytest.approx(theirs.median * 1e3, rel=0.10)


def test_cold_is_slower_than_hot_for_an_l2_resident_read(gpu) -> None:
    _, device = gpu
    src = torch.randn(device.l2_bytes // 4 // 4, device="cuda")  # a quarter of the L2 (float32)
    hot = measure(lambda: src.sum(), device=device, settings=QUICK, cache="hot", timing_mode="launch")
    cold = measure(lambda: src.sum(), device=device, settings=QUICK, cache="cold", timing_mode="launch")
    assert cold.stats.median_ms > 1.15 * hot.stats.median_ms


def test_flush_is_outside_the_events(gpu) -> None:
    _, device = gpu
    flusher = CudaFlusher(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        flusher.flush()
    end.record()
    torch.cuda.synchronize()
    flush_ms = start.elapsed_time(end) / 20
    x = torch.randn(1024, device="cuda")
    r = measure(lambda: x.add_(1.0), device=device, settings=QUICK, cache="cold", timing_mode="launch", flusher=flusher)
    assert r.stats.median_ms < 0.5 * flush_ms


def test_graph_mode_removes_launch_overhead_of_a_tiny_kernel(gpu) -> None:
    _, device = gpu
    x = torch.randn(256, device="cuda")

    def tiny() -> None:
        for _ in range(5):  # five launches per call: host-bound when launched one call at a time
            x.mul_(1.0)

    launch = measure(tiny, device=device, settings=QUICK, cache="hot", timing_mode="launch")
    graph = measure(tiny, device=device, settings=QUICK, cache="hot", timing_mode="graph")
    assert graph.clock == "cuda_events" and graph.timing_mode == "graph"
    assert graph.launches_per_sample > 1
    assert graph.stats.median_ms * graph.launches_per_sample >= 0.25  # a replay lasts ~1 ms
    assert graph.stats.median_ms < launch.stats.median_ms


def test_graph_launches_setting_is_obeyed_and_cold_graph_flushes(gpu) -> None:
    _, device = gpu
    x = torch.randn(1 << 20, device="cuda")
    r = measure(lambda: x.mul_(1.0), device=device, settings=QUICK.override({"graph_launches": 7}), cache="cold", timing_mode="graph")
    assert r.launches_per_sample == 7 and r.flush_bytes >= 2 * device.l2_bytes
    assert len(r.samples_ms) == r.stats.n_samples


def test_clock_monitor_reads_the_sm_clock(gpu) -> None:
    _, device = gpu
    from runners import nvml

    if nvml.handle_for("cuda:0") is None:
        pytest.skip("NVML not available")
    a = torch.randn(4096, 4096, device="cuda")
    mon = ClockMonitor(device, poll_interval_s=0.01).start()
    for _ in range(50):
        a @ a
    torch.cuda.synchronize()
    rep = mon.stop()
    assert rep.sm_clock_max_mhz and rep.sm_clock_max_mhz > 0
    assert rep.sm_clock_start_mhz and rep.sm_clock_end_mhz and rep.readings >= 3
    assert rep.sm_clock_min_busy_mhz is None or rep.sm_clock_min_busy_mhz <= rep.sm_clock_max_mhz * 1.01


def test_respects_cuda_visible_devices_in_a_fresh_process(gpu) -> None:
    import subprocess
    import sys

    record, _ = gpu
    code = "from runners.environment import capture; print(capture('cuda:0')[0].info['uuid'])"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": record.info["uuid"]}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == record.info["uuid"]
