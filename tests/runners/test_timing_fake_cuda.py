"""The CUDA-event, stream-hold and graph paths of the engine, run against a simulated torch.cuda.

The fake keeps two clocks. The host clock advances as the host works (a call's dispatch costs
`host_gap_ms` before its kernel is enqueued). The GPU runs the stream's queue in order: an item
starts when the previous one has ended and the host has enqueued it; a hold ends when the host
releases it (or at its timeout), a sleep after its cycles; an event reads the GPU clock where it
sits in the queue. Graph replays cost only their kernels' time. No GPU is needed.
"""
from __future__ import annotations

import contextlib
import sys
import types

import pytest
import torch as real_torch

from rooflab.runners.engine import graphs
from rooflab.runners.engine.stream_hold import SleepKernelHold
from rooflab.runners.engine.timers import HostLaunchSource
from rooflab.runners.engine.timing import measure
from rooflab.suite.device import DeviceInfo
from rooflab.suite.timing import TimingSettings
from rooflab.vocab import SampleKind

GPU = DeviceInfo(kind="cuda", name="fake", torch_device="cuda:0", memory_bytes=1 << 36, l2_bytes=1 << 20,
                 compute_capability=(9, 0))
SETTINGS = TimingSettings(warmup_ms=0, warmup_calls=3, min_samples=10, min_time_ms=0, max_time_ms=2000,
                          target_precision=0.01)
CYCLES_PER_MS = 1.5e6  # the fake GPU's clock: 1.5 GHz


class Item:
    def __init__(self, kind: str, enqueued_ms: float, duration_ms: float = 0.0, event=None) -> None:
        self.kind, self.enqueued_ms, self.duration_ms, self.event = kind, enqueued_ms, duration_ms, event
        self.released_ms: float | None = None
        self.timeout_ms: float | None = None
        self.timed_out = False


class FakeGraph:
    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda
        self.kernels_ms: list[float] = []

    def replay(self) -> None:
        self.cuda.log.append(f"replay{len(self.kernels_ms)}")
        self.cuda.enqueue(Item("replay", self.cuda.host_ms, sum(self.kernels_ms)))


class FakeEvent:
    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda
        self.t: float | None = None

    def record(self, stream=None) -> None:
        self.cuda.log.append("record")
        self.t = None
        self.cuda.enqueue(Item("event", self.cuda.host_ms, event=self))
        self.index = len(self.cuda.log)

    def query(self) -> bool:
        self.cuda.advance()
        return self.t is not None and self.t <= self.cuda.host_ms

    def elapsed_time(self, end: FakeEvent) -> float:
        assert "sync" in self.cuda.log[end.index:], "elapsed time read before the events were synchronised"
        assert end.t is not None and self.t is not None, "elapsed time of an event that has not completed"
        return end.t - self.t


class FakeCuda:
    def __init__(self) -> None:
        self.host_ms = 0.0
        self.gpu_ms = 0.0
        self.queue: list[Item] = []
        self.capturing: FakeGraph | None = None
        self.log: list[str] = []
        self.captures: list[int] = []

    # the simulation
    def enqueue(self, item: Item) -> None:
        self.queue.append(item)
        self.advance()

    def advance(self, *, force_timeouts: bool = False) -> None:
        """Run the queue as far as it can go (a hold waits for its release or its timeout)."""
        while self.queue:
            item = self.queue[0]
            start = max(self.gpu_ms, item.enqueued_ms)
            if item.kind == "hold":
                if item.released_ms is not None:
                    end = max(start, item.released_ms)
                elif force_timeouts and item.timeout_ms is not None:
                    end, item.timed_out = start + item.timeout_ms, True
                else:
                    return
            else:
                end = start + item.duration_ms
            if item.event is not None:
                item.event.t = start
            self.gpu_ms = end
            self.queue.pop(0)

    def launch(self, name: str, kernel_ms: float, host_gap_ms: float = 0.0) -> None:
        if self.capturing is not None:
            self.capturing.kernels_ms.append(kernel_ms)
            return
        self.log.append(name)
        self.host_ms += host_gap_ms  # the host's dispatch comes before the launch
        self.enqueue(Item(name, self.host_ms, kernel_ms))

    # the torch.cuda API the engine uses
    def is_available(self) -> bool:
        return True

    def synchronize(self, device=None) -> None:
        self.log.append("sync")
        self.advance(force_timeouts=True)
        assert not self.queue, "synchronised on a stream held forever: deadlock"
        self.host_ms = max(self.host_ms, self.gpu_ms)

    def _sleep(self, cycles: int) -> None:
        self.log.append("sleep")
        self.enqueue(Item("sleep", self.host_ms, cycles / CYCLES_PER_MS))

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


class FakeBlockingHold:
    """The blocking kernel on the fake: holds the queue until released, or until its timeout."""

    method = "blocking_kernel"

    def __init__(self, cuda: FakeCuda, timeout_ms: float = 1000.0) -> None:
        self.cuda = cuda
        self.timeout_ms = timeout_ms
        self.item: Item | None = None
        self.items: list[Item] = []

    def hold(self, stream) -> None:
        self.cuda.log.append("hold")
        self.item = Item("hold", self.cuda.host_ms)
        self.item.timeout_ms = self.timeout_ms
        self.items.append(self.item)
        self.cuda.enqueue(self.item)

    def release(self) -> bool:
        self.cuda.log.append("release")
        assert self.item is not None, "released without a hold"
        if not self.item.timed_out:
            self.item.released_ms = self.cuda.host_ms
        self.cuda.advance()
        return True

    def timed_out(self) -> bool:
        out = any(i.timed_out for i in self.items)
        self.items = []
        return out


@pytest.fixture(name="cuda")  # a name of its own, so that tests importing it can take `cuda` as their argument
def cuda_fixture(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    fake = FakeCuda()
    module = types.SimpleNamespace(cuda=fake, device=real_torch.device)
    monkeypatch.setitem(sys.modules, "torch", module)
    return fake


class FakeFlusher:
    flush_method = "read_sweep"

    def __init__(self, cuda: FakeCuda, ms: float = 0.5) -> None:
        self.cuda = cuda
        self.ms = ms
        self.flush_bytes = 2 * GPU.l2_bytes

    def flush(self) -> None:
        self.cuda.launch("flush", self.ms)


def small_kernel(cuda: FakeCuda, kernel_ms: float = 0.002, host_gap_ms: float = 0.020):
    return lambda: cuda.launch("fn", kernel_ms, host_gap_ms=host_gap_ms)


@pytest.mark.parametrize("cache", ["hot", "cold"])
def test_held_samples_are_device_time_without_the_hosts_dispatch(cuda: FakeCuda, cache: str) -> None:
    # 2 us of kernel after 20 us of host dispatch: unheld, a hot sample would read 22 us
    flusher = FakeFlusher(cuda) if cache == "cold" else None
    r = measure(small_kernel(cuda), device=GPU, settings=SETTINGS, cache=cache, timing_mode="launch",
                flusher=flusher, stream_hold=FakeBlockingHold(cuda))
    assert r.stats.median_ms == pytest.approx(0.002)
    assert r.stats.max_ms == pytest.approx(0.002)
    assert r.method.sync_method == "blocking_kernel"
    assert r.method.flush_method == ("read_sweep" if cache == "cold" else "none")


def test_hot_is_not_slower_than_cold_for_a_small_kernel(cuda: FakeCuda) -> None:
    # a cold kernel is slower on a GPU (its data comes from DRAM); here it costs the same, so the
    # two must agree: before the hold, hot read 22 us (dispatch included) and cold 2 us
    fn = small_kernel(cuda)
    hot = measure(fn, device=GPU, settings=SETTINGS, cache="hot", timing_mode="launch",
                  stream_hold=FakeBlockingHold(cuda))
    cold = measure(fn, device=GPU, settings=SETTINGS, cache="cold", timing_mode="launch",
                   flusher=FakeFlusher(cuda), stream_hold=FakeBlockingHold(cuda))
    assert hot.stats.median_ms <= cold.stats.median_ms * (1 + 1e-9)


def test_each_chunk_is_held_until_it_is_enqueued(cuda: FakeCuda) -> None:
    measure(small_kernel(cuda), device=GPU, settings=SETTINGS, cache="cold", timing_mode="launch",
            flusher=FakeFlusher(cuda), stream_hold=FakeBlockingHold(cuda))
    log = cuda.log[cuda.log.index("hold"):]
    chunk: list[str] = []
    for word in log:
        if word == "hold":
            chunk = []
        elif word == "release":
            assert chunk and chunk.count("fn") <= 8  # a bounded chunk, released after its last end event
            assert chunk[-1] == "record" and chunk[-4:] == ["flush", "record", "fn", "record"]
        else:
            chunk.append(word)
    # warmup and the first call run unheld
    assert cuda.log.index("hold") > cuda.log.index("fn")


def test_each_sample_is_flushed_right_before_its_start_event(cuda: FakeCuda) -> None:
    fn = lambda: cuda.launch("fn", 0.010)  # noqa: E731 - a named one-line lambda
    measure(fn, device=GPU, settings=SETTINGS, cache="cold", timing_mode="launch", flusher=FakeFlusher(cuda),
            stream_hold=FakeBlockingHold(cuda))
    log = cuda.log[cuda.log.index("record") - 1:]
    for i, word in enumerate(log):
        if word == "fn" and log[i - 1] == "record":
            assert log[i - 2] == "flush"  # flush -> start -> fn
            assert log[i + 1] == "record"  # fn -> end


def test_batches_synchronise_once_not_per_sample(cuda: FakeCuda) -> None:
    import random

    rng = random.Random(0)
    fn = lambda: cuda.launch("fn", rng.uniform(0.005, 0.015))  # noqa: E731 - a named one-line lambda
    settings = SETTINGS.override({"max_samples": 40, "target_precision": 1e-9})
    r = measure(fn, device=GPU, settings=settings, cache="hot", timing_mode="launch",
                stream_hold=FakeBlockingHold(cuda))
    first_record = cuda.log.index("record")
    syncs_while_sampling = cuda.log[first_record:].count("sync")
    assert r.stats.n_samples == 40
    assert syncs_while_sampling == 7  # one per batch: 10, 13, 17, 22, 28, 35, 40 samples


def test_a_call_that_waits_for_the_device_times_the_hold_out_and_falls_back_to_host_sync(cuda: FakeCuda) -> None:
    def waits() -> None:
        cuda.launch("fn", 0.002, host_gap_ms=0.020)
        cuda.synchronize()  # e.g. a .item() inside the timed call: it would wait on the held stream

    hold = FakeBlockingHold(cuda, timeout_ms=50.0)
    r = measure(waits, device=GPU, settings=SETTINGS, cache="hot", timing_mode="launch", stream_hold=hold)
    assert r.method.sync_method == "host_sync"
    assert r.stats.median_ms == pytest.approx(0.022)  # unheld: dispatch included, and labelled so


def test_sleep_kernel_hold_grows_until_it_covers_the_enqueue(cuda: FakeCuda) -> None:
    # 0.3 ms of dispatch per call: a chunk of 8 takes 2.4 ms to enqueue, longer than the first sleep
    hold = SleepKernelHold("cuda:0", clock_s=lambda: cuda.host_ms / 1e3)
    assert hold.cycles_per_ms == pytest.approx(CYCLES_PER_MS)
    fn = small_kernel(cuda, host_gap_ms=0.3)
    r = measure(fn, device=GPU, settings=SETTINGS, cache="hot", timing_mode="launch", stream_hold=hold)
    assert r.method.sync_method == "sleep_kernel"
    assert r.stats.median_ms == pytest.approx(0.002)
    assert r.stats.max_ms == pytest.approx(0.002)
    assert hold.sleep_ms >= 2.4


def test_sleep_kernel_that_never_covers_the_enqueue_falls_back_to_host_sync(cuda: FakeCuda) -> None:
    def waits() -> None:
        cuda.launch("fn", 0.002, host_gap_ms=0.020)
        cuda.synchronize()  # waits out every sleep, however long

    r = measure(waits, device=GPU, settings=SETTINGS, cache="hot", timing_mode="launch",
                stream_hold=SleepKernelHold("cuda:0", clock_s=lambda: cuda.host_ms / 1e3))
    assert r.method.sync_method == "host_sync"


def test_cold_graph_is_refused(cuda: FakeCuda) -> None:
    with pytest.raises(ValueError, match="cold cannot be timed in graph mode"):
        measure(small_kernel(cuda), device=GPU, settings=SETTINGS, cache="cold", timing_mode="graph",
                flusher=FakeFlusher(cuda), stream_hold=FakeBlockingHold(cuda))


def test_graph_mode_sizes_the_graph_then_divides_replays_by_its_launches(cuda: FakeCuda) -> None:
    # eager: 2 us kernel + 20 us host gap -> first estimate 22 us -> 46 launches; the replay of
    # those lasts only 92 us, so the graph is captured again with ceil(1 ms / 2 us) = 500 launches
    r = measure(small_kernel(cuda), device=GPU, settings=SETTINGS, cache="hot", timing_mode="graph",
                stream_hold=FakeBlockingHold(cuda))
    assert cuda.captures == [graphs.launches_for(0.022), 500]
    assert r.method.launches_per_sample == 500
    assert r.stats.median_ms == pytest.approx(0.002)
    assert r.method.timing_mode == "graph" and r.method.flush_bytes == 0 and r.method.flush_method == "none"
    assert "hold record replay500 record" in " ".join(cuda.log)


def test_graph_launches_setting_skips_the_sizing(cuda: FakeCuda) -> None:
    fn = lambda: cuda.launch("fn", 0.004, host_gap_ms=0.020)  # noqa: E731 - a named one-line lambda
    r = measure(fn, device=GPU, settings=SETTINGS.override({"graph_launches": 7}), cache="hot", timing_mode="graph",
                stream_hold=FakeBlockingHold(cuda))
    assert cuda.captures == [7] and r.method.launches_per_sample == 7
    assert r.stats.median_ms == pytest.approx(0.004)


def test_capture_failure_is_reported_as_graph_capture_error(cuda: FakeCuda) -> None:
    def not_capturable() -> None:
        if cuda.capturing is not None:
            raise RuntimeError("operation not permitted when stream is capturing")
        cuda.launch("fn", 0.01)

    with pytest.raises(graphs.GraphCaptureError, match="not permitted"):
        measure(not_capturable, device=GPU, settings=SETTINGS, cache="hot", timing_mode="graph",
                stream_hold=FakeBlockingHold(cuda))


class HostClock:
    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda

    def __call__(self) -> int:
        return int(round(self.cuda.host_ms * 1e6))


def test_host_launch_source_is_host_time_per_back_to_back_launch(cuda: FakeCuda) -> None:
    # 5 us of dispatch and 2 us of kernel per launch: back to back, the host is the bottleneck and
    # 100 launches end 2 us after the last dispatch
    source = HostLaunchSource(small_kernel(cuda, host_gap_ms=0.005), synchronize=lambda: cuda.synchronize(),
                              calls_per_sample=100, clock_ns=HostClock(cuda))
    samples = source.take_batch(5)
    assert samples == pytest.approx([(100 * 0.005 + 0.002) / 100] * 5)
    assert source.launches_per_sample == 100 and source.sync_method == "host_sync"
    # when the GPU is the bottleneck the host waits for it at the one sync: GPU time per launch
    slow = HostLaunchSource(small_kernel(cuda, kernel_ms=0.02, host_gap_ms=0.005),
                            synchronize=lambda: cuda.synchronize(),
                            calls_per_sample=100, clock_ns=HostClock(cuda))
    assert slow.take_batch(3) == pytest.approx([(0.005 + 100 * 0.02) / 100] * 3)


def test_launch_probe_in_graph_mode_is_per_launch_replay_time(cuda: FakeCuda) -> None:
    source_fn = small_kernel(cuda, kernel_ms=0.002, host_gap_ms=0.020)
    r = measure(source_fn, device=GPU, settings=SETTINGS.override({"graph_launches": 50}), cache="hot",
                timing_mode="graph", sample_kind=SampleKind.HOST_PER_LAUNCH)
    assert (r.method.launches_per_sample == 50 and r.method.clock == "perf_counter"
            and r.method.sync_method == "host_sync")
    assert cuda.log.count("replay50") >= r.stats.n_samples


def test_a_call_that_raises_while_held_still_releases_the_hold(cuda: FakeCuda) -> None:
    calls = {"n": 0}

    def flaky() -> None:
        calls["n"] += 1
        if calls["n"] > SETTINGS.warmup_calls + 3:  # fails inside the first held chunk
            raise RuntimeError("boom")
        cuda.launch("fn", 0.002)

    hold = FakeBlockingHold(cuda)
    with pytest.raises(RuntimeError, match="boom"):
        measure(flaky, device=GPU, settings=SETTINGS, cache="hot", timing_mode="launch", stream_hold=hold)
    assert hold.item is not None and hold.item.released_ms is not None
