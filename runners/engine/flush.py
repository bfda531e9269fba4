"""Cache flushers: make the cache cold before a sample, by writing a buffer (the default) or by reading it.

The buffer is allocated once per flusher (never per sample), filled once with random words (so its
pages are real and its contents are not a constant), and is FLUSH_FACTOR times the cache size
given by the device description (`DeviceInfo.l2_bytes`: the L2 of a GPU, the last-level cache of a
CPU) unless the caller names another size (a peer's mode: a fixed 256 MiB, or exactly the L2).

- `write_sweep` (FlushMethod.WRITE_SWEEP, the default) writes every word of the buffer (a fill
  kernel on the current stream on a GPU, a numpy fill on a CPU, with a value that changes from
  flush to flush). A write-back cache ends it full of the buffer's dirty lines, as it ends a kernel
  that wrote: the timed call pays to write them back as it evicts them, as it would behind a real
  predecessor, and leaves its own dirty lines for the next flush to pay. In steady state a kernel in
  a pipeline pays for exactly as many write-backs as it causes, and so does a sample here.
- `read_sweep` reads the whole buffer (a sum into one word) and writes nothing else. The cache ends
  holding clean lines only: the timed call's misses evict them for free, and up to a cache of the
  call's own output is never written back inside the timed region. A streaming kernel reads that
  much faster than it runs in a pipeline; it stays available, recorded as such.

docs/timing.md gives the argument and the measured cost of each.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np
import numpy.typing as npt

from rooflab.suite.device import DeviceInfo
from rooflab.vocab import FlushMethod

if TYPE_CHECKING:  # torch loads when a GPU flusher is made
    import torch

FLUSH_FACTOR = 2
_ALIGN = 4096
_FILL_SEED = 0x5EED
_SWEEPS = (FlushMethod.WRITE_SWEEP, FlushMethod.READ_SWEEP)


class Flusher(Protocol):
    flush_bytes: int
    flush_method: str

    def flush(self) -> None:
        """Sweep the whole buffer (asynchronously on a GPU, on the current stream)."""


def flush_size_bytes(cache_bytes: int) -> int:
    """FLUSH_FACTOR x the cache size, rounded up to a multiple of 4096 bytes."""
    if cache_bytes <= 0:
        raise ValueError(
            "cannot size the cache flush: the device description has no cache size (l2_bytes <= 0)"
        )
    want = FLUSH_FACTOR * cache_bytes
    return -(-want // _ALIGN) * _ALIGN


def _sweep(method: str) -> FlushMethod:
    chosen = FlushMethod(method)
    if chosen not in _SWEEPS:
        raise ValueError(f"flush method {method!r}: allowed: {', '.join(m.value for m in _SWEEPS)}")
    return chosen


def _size(device: DeviceInfo, flush_bytes: int | None) -> int:
    if flush_bytes is None:
        return flush_size_bytes(device.l2_bytes)
    if flush_bytes < 8:
        raise ValueError(f"flush_bytes must be at least one 8-byte word, got {flush_bytes}")
    return -(-flush_bytes // 8) * 8


class CpuFlusher:
    """Sweeps a host buffer of 8-byte words with numpy: a fill (write_sweep) or a sum (read_sweep).

    numpy's fill is a plain store loop (not a streaming store that would bypass the cache), so the
    written lines stay in the cache, dirty."""

    def __init__(self, device: DeviceInfo, method: str = FlushMethod.WRITE_SWEEP, flush_bytes: int | None = None,
                 *, _buf: npt.NDArray[np.int64] | None = None) -> None:
        self.flush_method = _sweep(method).value
        if _buf is None:
            size = _size(device, flush_bytes)
            _buf = np.random.default_rng(_FILL_SEED).integers(0, 1 << 62, size // 8, dtype=np.int64)
        self._device = device
        self._buf = _buf
        self.flush_bytes = int(_buf.nbytes)
        self._sink = 0
        self._fills = 0
        self.flush()

    def using(self, method: str) -> CpuFlusher:
        """A flusher of `method` over the same buffer (one buffer per device serves both sweeps)."""
        return self if method == self.flush_method else CpuFlusher(self._device, method, _buf=self._buf)

    def flush(self) -> None:
        if self.flush_method == FlushMethod.WRITE_SWEEP:
            self._fills += 1
            self._buf.fill(self._fills)
        else:
            self._sink = int(self._buf.sum())


class CudaFlusher:
    """Sweeps a device buffer of 8-byte words with one kernel on the current stream: a fill
    (write_sweep; `fill_` with a value that changes per flush) or a sum into a one-word device
    tensor (read_sweep; `torch.sum(..., out=)`, which allocates nothing and writes 8 bytes)."""

    def __init__(self, device: DeviceInfo, method: str = FlushMethod.WRITE_SWEEP, flush_bytes: int | None = None,
                 *, _words: torch.Tensor | None = None) -> None:
        import torch

        if not device.is_cuda:
            raise ValueError(f"CudaFlusher needs a CUDA device, got {device.torch_device}")
        self.flush_method = _sweep(method).value
        dev = torch.device(device.torch_device)
        if _words is None:
            _words = torch.empty(_size(device, flush_bytes) // 8, dtype=torch.int64, device=dev)
            _words.random_()  # once: real pages, contents that no compression can shortcut
        self._device = device
        self._words = _words
        self.flush_bytes = int(_words.numel()) * 8
        self._sink = torch.empty((), dtype=torch.int64, device=dev)
        self._fills = 0
        self._torch = torch
        self.flush()

    def using(self, method: str) -> CudaFlusher:
        """A flusher of `method` over the same buffer (one buffer per device serves both sweeps)."""
        return self if method == self.flush_method else CudaFlusher(self._device, method, _words=self._words)

    def flush(self) -> None:
        if self.flush_method == FlushMethod.WRITE_SWEEP:
            self._fills = self._fills % 0x7FFF + 1
            self._words.fill_(self._fills)
        else:
            self._torch.sum(self._words, 0, out=self._sink)


def make_flusher(device: DeviceInfo, method: str = FlushMethod.WRITE_SWEEP,
                 flush_bytes: int | None = None) -> CpuFlusher | CudaFlusher:
    """The flusher for `device`: `method` a sweep of FlushMethod, `flush_bytes` None for
    FLUSH_FACTOR x the device's cache, else that many bytes (rounded up to whole words)."""
    cls = CudaFlusher if device.is_cuda else CpuFlusher
    return cls(device, method, flush_bytes)
