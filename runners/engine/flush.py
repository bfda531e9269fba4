"""Cache flushers: evict the last-level cache before a cold sample with a read-only sweep.

The buffer is allocated once per flusher (never per sample), filled once with random words (so its
pages are real and its contents are not a constant), and is FLUSH_FACTOR times the cache size
given by the device description (`DeviceInfo.l2_bytes`: the L2 of a GPU, the last-level cache of a
CPU), so every line the timed call could reuse is evicted by lines of the buffer.

Each flush *reads* the whole buffer (a sum into one word) and writes nothing else. A write-back
cache then ends the flush holding only clean lines of the buffer: the dirty lines the previous
sample left are written back during the flush, outside the timed region, and the next sample's
misses evict clean lines for free. A flush that *wrote* its buffer would instead leave the cache
full of dirty lines (50 MiB on an H100) that the timed kernel would pay to write back.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from rooflab.suite.device import DeviceInfo
from rooflab.vocab import FlushMethod

FLUSH_FACTOR = 2
_ALIGN = 4096
_FILL_SEED = 0x5EED


class Flusher(Protocol):
    flush_bytes: int
    flush_method: str

    def flush(self) -> None:
        """Read the whole buffer (asynchronously on a GPU, on the current stream)."""


def flush_size_bytes(cache_bytes: int) -> int:
    """FLUSH_FACTOR x the cache size, rounded up to a multiple of 4096 bytes."""
    if cache_bytes <= 0:
        raise ValueError(
            "cannot size the cache flush: the device description has no cache size (l2_bytes <= 0)"
        )
    want = FLUSH_FACTOR * cache_bytes
    return -(-want // _ALIGN) * _ALIGN


class CpuFlusher:
    """Reads a host buffer of >= 2x the last-level cache with numpy (a sum of its 8-byte words)."""

    flush_method = FlushMethod.READ_SWEEP.value

    def __init__(self, device: DeviceInfo) -> None:
        self.flush_bytes = flush_size_bytes(device.l2_bytes)
        rng = np.random.default_rng(_FILL_SEED)
        self._buf = rng.integers(0, 1 << 62, self.flush_bytes // 8, dtype=np.int64)
        self._buf.flags.writeable = False  # the sweep only reads
        self._sink = 0
        self.flush()

    def flush(self) -> None:
        self._sink = int(self._buf.sum())


class CudaFlusher:
    """Reads a device buffer of >= 2x the GPU's L2 with one reduction kernel on the current stream.

    The buffer is 8-byte words summed into a one-word device tensor (`torch.sum(..., out=)`), so
    a flush allocates nothing and writes 8 bytes."""

    flush_method = FlushMethod.READ_SWEEP.value

    def __init__(self, device: DeviceInfo) -> None:
        import torch

        if not device.is_cuda:
            raise ValueError(f"CudaFlusher needs a CUDA device, got {device.torch_device}")
        self.flush_bytes = flush_size_bytes(device.l2_bytes)
        dev = torch.device(device.torch_device)
        self._words = torch.empty(self.flush_bytes // 8, dtype=torch.int64, device=dev)
        self._words.random_()  # once: real pages, contents that no compression can shortcut
        self._sink = torch.empty((), dtype=torch.int64, device=dev)
        self._torch = torch
        self.flush()

    def flush(self) -> None:
        self._torch.sum(self._words, 0, out=self._sink)


def make_flusher(device: DeviceInfo) -> Flusher:
    """The flusher for `device`, sized from its description."""
    return CudaFlusher(device) if device.is_cuda else CpuFlusher(device)
