"""Cache flush buffers: sized from the device description, reused, fully written each time."""
from __future__ import annotations

import time

import numpy as np
import pytest

from runners.cpuinfo import read_caches
from runners.flush import FLUSH_FACTOR, CpuFlusher, flush_size_bytes, make_flusher
from suite.device import DeviceInfo


def cpu(l2_bytes: int) -> DeviceInfo:
    return DeviceInfo(kind="cpu", name="test cpu", torch_device="cpu", memory_bytes=1 << 34, l2_bytes=l2_bytes)


@pytest.mark.parametrize("cache_bytes", [1, 4096, 3 * 1024 * 1024 + 17, 50 * 1024 * 1024])
def test_flush_size_is_at_least_twice_the_cache(cache_bytes: int) -> None:
    size = flush_size_bytes(cache_bytes)
    assert FLUSH_FACTOR == 2
    assert 2 * cache_bytes <= size < 2 * cache_bytes + 4096
    assert size % 4096 == 0


@pytest.mark.parametrize("bad", [0, -1])
def test_unknown_cache_size_is_refused(bad: int) -> None:
    with pytest.raises(ValueError, match="l2_bytes"):
        flush_size_bytes(bad)


def test_cpu_flusher_buffer_comes_from_the_device_description() -> None:
    llc = 3 * 1024 * 1024 + 12345
    f = make_flusher(cpu(llc))
    assert isinstance(f, CpuFlusher)
    assert f.flush_bytes >= 2 * llc
    assert f._buf.nbytes == f.flush_bytes


def test_each_flush_writes_the_whole_reused_buffer_with_a_new_value() -> None:
    f = CpuFlusher(cpu(256 * 1024))
    buf = f._buf
    seen = set()
    for _ in range(3):
        buf[np.random.default_rng().integers(0, buf.size, 1000)] = -5  # plant stale words
        f.flush()
        assert f._buf is buf  # reused, not reallocated
        values = np.unique(buf)
        assert values.size == 1 and values[0] != -5
        seen.add(int(values[0]))
    assert len(seen) == 3


def test_flush_evicts_a_cache_resident_array() -> None:
    """Reading an array that fits in the caches is slower right after a flush than when warm."""
    llc = read_caches().llc_bytes
    if not llc:
        pytest.skip("this machine does not report its last-level cache size")
    f = CpuFlusher(cpu(llc))  # sized from this machine's LLC, as the environment capture does
    x = np.random.default_rng(0).random(512 * 1024 // 8)  # 512 KiB: cache resident when warm

    def read_ms() -> float:
        t0 = time.perf_counter_ns()
        x.sum()
        return (time.perf_counter_ns() - t0) / 1e6

    hot, cold = [], []
    for _ in range(40):
        read_ms()
        hot.append(read_ms())
        f.flush()
        cold.append(read_ms())
    assert np.median(cold) > 1.3 * np.median(hot)
