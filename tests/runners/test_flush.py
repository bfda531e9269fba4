"""Cache flush buffers: sized from the device description, reused, written in full (write_sweep, the
default) or read in full and never written (read_sweep); on a write-back L2 model, what each flush
charges the timed call against the steady state of a pipeline."""
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
    assert f.flush_method == "write_sweep"  # the default
    sized = make_flusher(cpu(llc), "read_sweep", flush_bytes=1000)  # a peer's own size, in whole words
    assert sized.flush_bytes == 1000 and sized.flush_method == "read_sweep"


@pytest.mark.parametrize("bad", ["none", "memset", ""])
def test_a_flusher_sweeps_by_writing_or_reading_only(bad: str) -> None:
    with pytest.raises(ValueError):
        make_flusher(cpu(64 * 1024), bad)


def test_cpu_write_flush_writes_every_word_of_the_reused_buffer() -> None:
    f = CpuFlusher(cpu(256 * 1024))
    buf = f._buf
    previous = buf.copy()
    for _ in range(3):
        f.flush()
        assert f._buf is buf  # reused, not reallocated
        assert not np.any(buf == previous)  # every word written (a new value each flush)
        previous = buf.copy()
    assert f.flush_method == "write_sweep"


def test_cpu_read_flush_reads_the_same_buffer_and_writes_nothing() -> None:
    w = CpuFlusher(cpu(256 * 1024))
    w._buf[:] = np.random.default_rng(1).integers(0, 1 << 62, w._buf.size)
    f = w.using("read_sweep")
    assert f._buf is w._buf and f.flush_bytes == w.flush_bytes  # one buffer serves both sweeps
    before = f._buf.copy()
    assert np.unique(before).size > 1000  # random words, real pages (not one shared zero page)
    for _ in range(3):
        f.flush()
        assert np.array_equal(f._buf, before)  # read, not written
    assert f.flush_method == "read_sweep" and f._sink == int(before.sum())


@pytest.mark.parametrize("method", ["write_sweep", "read_sweep"])
def test_flush_evicts_a_cache_resident_array(method: str) -> None:
    """Reading an array that fits in the caches is slower right after a flush than when warm."""
    llc = read_caches().llc_bytes
    if not llc:
        pytest.skip("this machine does not report its last-level cache size")
    f = CpuFlusher(cpu(llc), method)  # sized from this machine's LLC, as the environment capture does
    x = np.random.default_rng(0).random(512 * 1024 // 8)  # 512 KiB: cache resident when warm

    def read_ms() -> float:
        t0 = time.perf_counter_ns()
        x.sum()
        return (time.perf_counter_ns() - t0) / 1e6

    hot, cold = [], []
    for _ in range(15):
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

        self.lines: OrderedDict[int, bool] = OrderedDict()  # line -> dirty
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

    def numel(self) -> int:
        return self.nbytes // 8

    def fill_(self, value=None) -> FakeTensor:
        self.model.access(self.base, self.nbytes, write=True)
        return self

    def random_(self) -> FakeTensor:
        return self.fill_()


class FakeTorchMemory:
    """The few torch calls a GPU flusher makes, played on an L2 model instead of a GPU."""

    int64 = "int64"

    def __init__(self, model: L2Model) -> None:
        self.model = model
        self.next_base = 1 << 40  # flush buffers live far from the timed kernel's data

    def device(self, name):
        return name

    def empty(self, *shape, dtype, device):
        count = int(np.prod(shape)) if shape and shape != ((),) else 1
        t = FakeTensor(self.model, self.next_base, count * 8)
        self.next_base += -(-t.nbytes // 4096) * 4096
        return t

    def sum(self, t: FakeTensor, dim, out: FakeTensor):
        self.model.access(t.base, t.nbytes, write=False)
        out.fill_(0)
        return out


L2_BYTES = 256 * 1024
CAPACITY = L2_BYTES // LINE


@pytest.fixture
def l2(monkeypatch: pytest.MonkeyPatch):
    """(model, make): an L2 model and a factory of CudaFlusher objects whose torch calls play on it."""
    import sys
    import types

    from rooflab.runners.engine.flush import CudaFlusher

    model = L2Model(L2_BYTES)
    fake = FakeTorchMemory(model)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(
        **{n: getattr(fake, n) for n in ("int64", "device", "empty", "sum")}))
    gpu = DeviceInfo(kind="cuda", name="fake", torch_device="cuda:0", memory_bytes=1 << 34, l2_bytes=L2_BYTES)
    return model, lambda method: CudaFlusher(gpu, method)


def copy_kernel(model: L2Model, src: int, dst: int, nbytes: int) -> int:
    """A streaming copy played on the model, a line read then a line written; the write-backs it caused."""
    before = model.written_back
    for offset in range(0, nbytes, LINE):
        model.access(src + offset, LINE, write=False)
        model.access(dst + offset, LINE, write=True)
    return model.written_back - before


def fill_kernel(model: L2Model, dst: int, nbytes: int) -> int:
    """A kernel that only writes (a fill of `nbytes`); the write-backs it caused."""
    before = model.written_back
    model.access(dst, nbytes, write=True)
    return model.written_back - before


def test_read_flush_leaves_the_l2_holding_only_clean_lines(l2) -> None:
    model, make = l2
    flusher = make("read_sweep")
    for _ in range(3):
        model.access(0, L2_BYTES, write=True)  # a sample leaves the L2 full of dirty lines
        flusher.flush()
        assert model.dirty_lines() <= 1  # at most the flush's own one-word result
        assert not any(line < CAPACITY for line in model.lines)  # the kernel's lines are gone
    assert flusher.flush_method == "read_sweep"


def test_write_flush_leaves_the_l2_full_of_another_buffers_dirty_lines(l2) -> None:
    model, make = l2
    flusher = make("write_sweep")
    for _ in range(3):
        model.access(0, L2_BYTES, write=True)
        flusher.flush()
        assert model.dirty_lines() == CAPACITY  # every line dirty ...
        assert not any(line < CAPACITY for line in model.lines)  # ... and none of them the kernel's
    assert flusher.flush_method == "write_sweep"


@pytest.mark.parametrize("cache_multiples", [2, 8])
def test_the_timed_call_pays_for_the_write_flushs_dirty_lines_and_not_the_read_flushs(l2, cache_multiples) -> None:
    """What each flush charges a timed copy, against what the same copy pays in a steady pipeline.

    In a chain of calls every dirty line is written back exactly once, so a call's steady-state
    charge is the lines it writes. Behind a read flush a call pays that less the dirty lines it
    leaves at its end (a copy leaves about half a cache); behind a write flush it pays a whole cache
    more than behind a read flush: the two bracket the steady state."""
    model, make = l2
    flushers = {method: make(method) for method in ("read_sweep", "write_sweep")}
    nbytes = cache_multiples * L2_BYTES
    src, dst, other = 0, 1 << 30, 1 << 31
    written_lines = nbytes // LINE
    for _ in range(4):  # the steady state of a pipeline: the call behind a call like itself
        steady = copy_kernel(model, src, dst, nbytes)
        copy_kernel(model, src + other, dst + other, nbytes)
    assert steady == written_lines
    charged = {}
    for method, flusher in flushers.items():
        flusher.flush()
        charged[method] = copy_kernel(model, src, dst, nbytes)
    left_dirty = model.dirty_lines()  # what the copy leaves for whoever comes next
    assert 0.4 * CAPACITY <= left_dirty <= 0.6 * CAPACITY
    # (+ 1: the read flush's own one-word result is a dirty line too)
    assert charged["read_sweep"] - (written_lines - left_dirty) in (0, 1)  # under-counts the copy's write-back
    assert charged["write_sweep"] - charged["read_sweep"] in (CAPACITY - 1, CAPACITY)  # pays the flush's lines
    assert charged["read_sweep"] < steady < charged["write_sweep"]


def test_behind_a_write_flush_a_writing_kernel_pays_exactly_its_steady_state(l2) -> None:
    """A kernel that ends with the cache full of its own dirty lines (a fill of >= the cache) pays in
    steady state what it pays behind a write flush; behind a read flush it pays a cache less."""
    model, make = l2
    write, read = make("write_sweep"), make("read_sweep")
    nbytes = 4 * L2_BYTES
    for _ in range(3):
        steady = fill_kernel(model, 0, nbytes)
        fill_kernel(model, 1 << 31, nbytes)
    write.flush()
    behind_write = fill_kernel(model, 0, nbytes)
    read.flush()
    behind_read = fill_kernel(model, 0, nbytes)
    assert steady == nbytes // LINE == behind_write
    assert behind_read - (steady - CAPACITY) in (0, 1)  # (+ 1: the read flush's one-word result)
