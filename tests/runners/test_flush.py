"""Cache flush buffers: sized from the device description, reused, read in full each time, never written."""
from __future__ import annotations

import time

import numpy as np
import pytest

from rooflab.runners.engine.flush import FLUSH_FACTOR, CpuFlusher, flush_size_bytes, make_flusher
from rooflab.runners.machine.cpuinfo import read_caches
from rooflab.suite.device import DeviceInfo


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


def test_cpu_flush_reads_the_reused_buffer_and_writes_nothing() -> None:
    f = CpuFlusher(cpu(256 * 1024))
    buf = f._buf
    before = buf.copy()
    assert np.unique(before).size > 1000  # random words, real pages (not one shared zero page)
    for _ in range(3):
        f.flush()
        assert f._buf is buf  # reused, not reallocated
        assert np.array_equal(buf, before)  # read, not written
    assert f.flush_method == "read_sweep"


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


LINE = 128


class L2Model:
    """A write-back LRU cache of 128-byte lines with dirty bits; addresses are byte offsets."""

    def __init__(self, size_bytes: int) -> None:
        from collections import OrderedDict

        self.lines: "OrderedDict[int, bool]" = OrderedDict()  # line -> dirty
        self.capacity = size_bytes // LINE
        self.written_back = 0

    def access(self, start: int, nbytes: int, write: bool) -> None:
        for line in range(start // LINE, -(-(start + nbytes) // LINE)):
            dirty = self.lines.pop(line, False) or write
            self.lines[line] = dirty
            if len(self.lines) > self.capacity:
                _, evicted_dirty = self.lines.popitem(last=False)
                self.written_back += evicted_dirty

    def dirty_lines(self) -> int:
        return sum(self.lines.values())


class FakeTensor:
    def __init__(self, model: L2Model, base: int, nbytes: int) -> None:
        self.model, self.base, self.nbytes = model, base, nbytes

    def view(self, dtype) -> "FakeTensor":
        return self

    def fill_(self, value=None) -> "FakeTensor":
        self.model.access(self.base, self.nbytes, write=True)
        return self

    def random_(self) -> "FakeTensor":
        return self.fill_()


class FakeTorchMemory:
    """The few torch calls a GPU flusher makes, played on an L2 model instead of a GPU."""

    int8, int32, int64 = "int8", "int32", "int64"
    SIZES = {"int8": 1, "int32": 4, "int64": 8}

    def __init__(self, model: L2Model) -> None:
        self.model = model
        self.next_base = 1 << 40  # flush buffers live far from the timed kernel's data

    def device(self, name):
        return name

    def empty(self, *shape, dtype, device):
        count = int(np.prod(shape)) if shape and shape != ((),) else 1
        t = FakeTensor(self.model, self.next_base, count * self.SIZES[dtype])
        self.next_base += -(-t.nbytes // 4096) * 4096
        return t

    def sum(self, t: FakeTensor, dim, out: FakeTensor):
        self.model.access(t.base, t.nbytes, write=False)
        out.fill_(0)
        return out


def test_gpu_flush_leaves_the_l2_holding_only_clean_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    from rooflab.runners.engine.flush import CudaFlusher

    l2_bytes = 256 * 1024
    model = L2Model(l2_bytes)
    fake = FakeTorchMemory(model)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(**{n: getattr(fake, n) for n in ("int8", "int32", "int64", "device", "empty", "sum")}))
    gpu = DeviceInfo(kind="cuda", name="fake", torch_device="cuda:0", memory_bytes=1 << 34, l2_bytes=l2_bytes)
    flusher = CudaFlusher(gpu)
    kernel_out = 0  # the timed kernel writes an L2-sized output at address 0
    for _ in range(3):
        model.access(kernel_out, l2_bytes, write=True)  # a sample leaves the L2 full of dirty lines
        flusher.flush()
        assert model.dirty_lines() <= 1  # at most the flush's own one-word result
        assert not any(line < l2_bytes // LINE for line in model.lines)  # the kernel's lines are gone
    assert flusher.flush_method == "read_sweep"
