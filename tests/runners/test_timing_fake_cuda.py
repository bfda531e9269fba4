"""The CUDA-event and graph paths of the engine, run against a simulated torch.cuda (no GPU needed).

The fake keeps a GPU clock that advances as work executes in program order; events read it. Eager
launches cost a host-bound gap on top of their kernel time, graph replays only the kernel time.
"""
from __future__ import annotations

import contextlib
import sys
import types

import pytest
import torch as real_torch

from runners import graphs
from runners.timing import measure
from suite.device import DeviceInfo
from suite.timing import TimingSettings

GPU = DeviceInfo(kind="cuda", name="fake", torch_device="cuda:0", memory_bytes=1 << 36, l2_bytes=1 << 20, compute_capability=(9, 0))
SETTINGS = TimingSettings(warmup_ms=0, warmup_calls=3, min_samples=10, min_time_ms=0, max_time_ms=2000, target_precision=0.01)


class FakeGraph:
    def __init__(self, cuda: "FakeCuda") -> None:
        self.cuda = cuda
        self.kernels_ms: list[float] = []

    def replay(self) -> None:
        self.cuda.log.append(f"replay{len(self.kernels_ms)}")
        self.cuda.now_ms += sum(self.kernels_ms)


class FakeEvent:
    def __init__(self, cuda: "FakeCuda") -> None:
        self.cuda = cuda
        self.t: float | None = None

    def record(self, stream=None) -> None:
        self.cuda.log.append("record")
        self.t = self.cuda.now_ms
        self.index = len(self.cuda.log)

    def elapsed_time(self, end: "FakeEvent") -> float:
        assert "sync" in self.cuda.log[end.index:], "elapsed time read before the events were synchronised"
        return end.t - self.t


class FakeCuda:
    def __init__(self) -> None:
        self.now_ms = 0.0
        self.capturing: FakeGraph | None = None
        self.log: list[str] = []
        self.captures: list[int] = []

    def launch(self, name: str, kernel_ms: float, host_gap_ms: float = 0.0) -> None:
        if self.capturing is not None:
            self.capturing.kernels_ms.append(kernel_ms)
            return
        self.log.append(name)
        self.now_ms += kernel_ms + host_gap_ms

    # the torch.cuda API the engine uses
    def is_available(self) -> bool:
        return True

    def synchronize(self, device=None) -> None:
        self.log.append("sync")

    def current_stream(self, device=None) -> types.SimpleNamespace:
        return types.SimpleNamespace(wait_stream=lambda other: None)

    def Stream(self, device=None) -> types.SimpleNamespace:
        return types.SimpleNamespace(wait_stream=lambda other: None)

    @contextlib.contextmanager
    def stream(self, s):
        yield

    @contextlib.contextmanager
    def device(self, d):
        yield

    def Event(self, enable_timing: bool = False) -> FakeEvent:
        assert enable_timing
        return FakeEvent(self)

    def CUDAGraph(self) -> FakeGraph:
        return FakeGraph(self)

    @contextlib.contextmanager
    def graph(self, g: FakeGraph):
        self.capturing = g
        try:
            yield
        finally:
            self.capturing = None
            self.captures.append(len(g.kernels_ms))


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    fake = FakeCuda()
    module = types.SimpleNamespace(cuda=fake, device=real_torch.device)
    monkeypatch.setitem(sys.modules, "torch", module)
    return fake


class FakeFlusher:
    def __init__(self, cuda: FakeCuda, ms: float = 0.5) -> None:
        self.cuda = cuda
        self.ms = ms
        self.flush_bytes = 2 * GPU.l2_bytes

    def flush(self) -> None:
        self.cuda.launch("flush", self.ms)


def test_launch_mode_orders_flush_start_fn_end_and_syncs_once_per_batch(cuda: FakeCuda) -> None:
    fn = lambda: cuda.launch("fn", 0.010, host_gap_ms=0.002)  # noqa: E731
    r = measure(fn, device=GPU, settings=SETTINGS, cache="cold", timing_mode="launch", flusher=FakeFlusher(cuda))
    assert r.clock == "cuda_events" and r.launches_per_sample == 1
    assert r.stats.median_ms == pytest.approx(0.012)  # the 0.5 ms flush is outside the events
    assert cuda.log.count("flush") == r.warmup_calls + r.stats.n_samples


def test_each_sample_is_flushed_right_before_its_start_event(cuda: FakeCuda) -> None:
    fn = lambda: cuda.launch("fn", 0.010)  # noqa: E731
    measure(fn, device=GPU, settings=SETTINGS, cache="cold", timing_mode="launch", flusher=FakeFlusher(cuda))
    log = cuda.log[cuda.log.index("record") - 1:]
    for i, word in enumerate(log):
        if word == "fn" and log[i - 1] == "record":
            assert log[i - 2] == "flush"  # flush -> start -> fn
            assert log[i + 1] == "record"  # fn -> end


def test_batches_synchronise_once_not_per_sample(cuda: FakeCuda) -> None:
    import random

    rng = random.Random(0)
    fn = lambda: cuda.launch("fn", rng.uniform(0.005, 0.015))  # noqa: E731
    settings = SETTINGS.override({"max_samples": 40, "target_precision": 1e-9})
    r = measure(fn, device=GPU, settings=settings, cache="hot", timing_mode="launch")
    first_record = cuda.log.index("record")
    syncs_while_sampling = cuda.log[first_record:].count("sync")
    assert r.stats.n_samples == 40
    assert syncs_while_sampling == 7  # one per batch: 10, 13, 17, 22, 28, 35, 40 samples


def test_graph_mode_sizes_the_graph_then_divides_replays_by_its_launches(cuda: FakeCuda) -> None:
    # eager: 2 µs kernel + 20 µs host gap -> first estimate 22 µs -> 46 launches; the replay of
    # those lasts only 92 µs, so the graph is captured again with ceil(1 ms / 2 µs) = 500 launches
    fn = lambda: cuda.launch("fn", 0.002, host_gap_ms=0.020)  # noqa: E731
    r = measure(fn, device=GPU, settings=SETTINGS, cache="cold", timing_mode="graph", flusher=FakeFlusher(cuda))
    assert cuda.captures == [graphs.launches_for(0.022), 500]
    assert r.launches_per_sample == 500
    assert r.stats.median_ms == pytest.approx(0.002)
    assert r.timing_mode == "graph" and r.flush_bytes == 2 * GPU.l2_bytes
    sampling = cuda.log[len(cuda.log) - 4 * r.stats.n_samples - 1:]
    assert "flush record replay500 record" in " ".join(sampling)


def test_graph_launches_setting_skips_the_sizing(cuda: FakeCuda) -> None:
    fn = lambda: cuda.launch("fn", 0.004, host_gap_ms=0.020)  # noqa: E731
    r = measure(fn, device=GPU, settings=SETTINGS.override({"graph_launches": 7}), cache="hot", timing_mode="graph")
    assert cuda.captures == [7] and r.launches_per_sample == 7
    assert r.stats.median_ms == pytest.approx(0.004)


def test_capture_failure_is_reported_as_graph_capture_error(cuda: FakeCuda) -> None:
    def not_capturable() -> None:
        if cuda.capturing is not None:
            raise RuntimeError("operation not permitted when stream is capturing")
        cuda.launch("fn", 0.01)

    with pytest.raises(graphs.GraphCaptureError, match="not permitted"):
        measure(not_capturable, device=GPU, settings=SETTINGS, cache="hot", timing_mode="graph")
