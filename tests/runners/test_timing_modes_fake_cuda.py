"""The engine's other ways of taking a GPU sample, on the simulated torch.cuda of
test_timing_fake_cuda: pace idle (one sample at a time, flushed and synchronised, the GPU left idle
after it), no hold (event pairs queued back to back, as do_bench does), and block means (a batch of
calls between one event pair, as nvbench's hot measurement; host time per block, as torch's Timer)."""
from __future__ import annotations

import pytest

from rooflab.runners.engine import timers
from rooflab.runners.engine.timing import measure
from rooflab.suite.timing import idle_after_ms
from tests.runners.test_timing_fake_cuda import (  # noqa: F401 - `cuda_fixture` is the `cuda` fixture
    GPU,
    SETTINGS,
    FakeBlockingHold,
    FakeCuda,
    FakeFlusher,
    cuda_fixture,
    small_kernel,
)


def test_pace_idle_flushes_synchronises_and_rests_around_every_held_sample(cuda: FakeCuda, monkeypatch) -> None:
    pauses: list[float] = []

    def pause(seconds: float) -> None:  # the host sleeps: its clock moves, the GPU gets nothing
        cuda.log.append("pause")
        pauses.append(seconds * 1e3)
        cuda.host_ms += seconds * 1e3

    monkeypatch.setattr(timers, "pause_s", pause)
    fn = lambda: cuda.launch("fn", 0.5, host_gap_ms=0.020)  # noqa: E731 - a named one-line lambda
    r = measure(fn, device=GPU, settings=SETTINGS.override({"pace": "idle"}), cache="cold", timing_mode="launch",
                flusher=FakeFlusher(cuda), stream_hold=FakeBlockingHold(cuda))
    assert r.method.pace == "idle" and r.method.sync_method == "blocking_kernel"
    assert r.stats.median_ms == pytest.approx(0.5)  # device time: the hold keeps the dispatch out
    sampling = " ".join(cuda.log[cuda.log.index("hold") - 2:])
    one = "flush sync hold record fn record release sync pause"
    assert sampling == " ".join([one] * r.stats.n_samples)  # nvbench's cold loop, then a rest
    assert pauses == pytest.approx([idle_after_ms(0.5)] * r.stats.n_samples)


def test_back_to_back_batches_are_not_rested(cuda: FakeCuda, monkeypatch) -> None:
    monkeypatch.setattr(timers, "pause_s", lambda seconds: cuda.log.append("pause"))
    measure(small_kernel(cuda), device=GPU, settings=SETTINGS, cache="hot", timing_mode="launch",
            stream_hold=FakeBlockingHold(cuda))
    assert "pause" not in cuda.log


def test_unheld_samples_are_queued_back_to_back_and_hold_the_dispatch(cuda: FakeCuda) -> None:
    # do_bench's way: no hold, no synchronisation between samples; the GPU, waiting for the host,
    # starts each event pair as soon as it is recorded, so a 2 us kernel behind 20 us of dispatch
    # reads the host's pace, 20 us per call (held, it reads 2 us)
    r = measure(small_kernel(cuda), device=GPU, settings=SETTINGS, cache="hot", timing_mode="launch", hold="unheld")
    assert r.method.sync_method == "unheld"
    assert r.stats.median_ms == pytest.approx(0.020)
    sampling = cuda.log[cuda.log.index("record"):]
    assert "hold" not in sampling and sampling.count("sync") < r.stats.n_samples  # one per batch
    # behind a cold flush longer than the dispatch the GPU is busy when the call is enqueued: device time
    cold = measure(small_kernel(cuda), device=GPU, settings=SETTINGS, cache="cold", timing_mode="launch",
                   hold="unheld", flusher=FakeFlusher(cuda, ms=0.5))
    assert cold.stats.median_ms == pytest.approx(0.002)


def test_sync_per_sample_is_host_sync(cuda: FakeCuda) -> None:
    r = measure(small_kernel(cuda), device=GPU, settings=SETTINGS, cache="hot", timing_mode="launch",
                hold="sync_per_sample", stream_hold=FakeBlockingHold(cuda))
    assert r.method.sync_method == "host_sync" and r.stats.median_ms == pytest.approx(0.022)
    sampling = cuda.log[cuda.log.index("record"):]
    assert "hold" not in sampling and sampling.count("sync") == r.stats.n_samples


def test_a_device_block_mean_is_one_event_pair_around_the_calls(cuda: FakeCuda) -> None:
    # nvbench's hot measurement: 10 launches between one pair, total / 10; held, so the kernels
    # run back to back and the dispatch of each (20 us) is hidden behind the hold
    r = measure(small_kernel(cuda), device=GPU, settings=SETTINGS, cache="hot", timing_mode="launch",
                calls_per_sample=10, stream_hold=FakeBlockingHold(cuda))
    assert r.method.launches_per_sample == 10 and r.stats.median_ms == pytest.approx(0.002)
    sampling = " ".join(cuda.log[cuda.log.index("hold"):])
    assert "record " + " ".join(["fn"] * 10) + " record" in sampling

