"""Cache flushers: evict the last-level cache before a cold sample by writing a reused buffer.

The buffer is allocated once per measurement (never per sample) and is FLUSH_FACTOR times the
cache size given by the device description (`DeviceInfo.l2_bytes`: the L2 of a GPU, the last-level
cache of a CPU), so every line the timed call could reuse is evicted by lines of the buffer.
Each flush writes the whole buffer with a value that changes from flush to flush.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from suite.device import DeviceInfo

FLUSH_FACTOR = 2
_ALIGN = 4096


class Flusher(Protocol):
    flush_bytes: int

    def flush(self) -> None:
        """Write the whole buffer (asynchronously on a GPU, on the current stream)."""


def flush_size_bytes(cache_bytes: int) -> int:
    """FLUSH_FACTOR x the cache size, rounded up to a multiple of 4096 bytes."""
    if cache_bytes <= 0:
        raise ValueError(
            "cannot size the cache flush: the device description has no cache size (l2_bytes <= 0)"
        )
    want = FLUSH_FACTOR * cache_bytes
    return -(-want // _ALIGN) * _ALIGN


class CpuFlusher:
    """Writes a host buffer of >= 2x the last-level cache with numpy (memset speed)."""

    def __init__(self, device: DeviceInfo) -> None:
        self.flush_bytes = flush_size_bytes(device.l2_bytes)
        self._buf = np.empty(self.flush_bytes // 8, dtype=np.int64)
        self._value = 0
        self.flush()  # fault the pages in now, so the first flush costs what the others cost

    def flush(self) -> None:
        self._value = (self._value + 1) & 0x7FFF_FFFF
        self._buf.fill(self._value)


class CudaFlusher:
    """Writes a device buffer of >= 2x the GPU's L2 with one fill kernel on the current stream.

    The buffer is allocated as int8 bytes and written through an int32 view (a 4-byte fill is
    several times faster than a 1-byte one; triton-lang/triton#840).
    """

    def __init__(self, device: DeviceInfo) -> None:
        import torch

        if not device.is_cuda:
            raise ValueError(f"CudaFlusher needs a CUDA device, got {device.torch_device}")
        self.flush_bytes = flush_size_bytes(device.l2_bytes)
        self._buf = torch.empty(self.flush_bytes, dtype=torch.int8, device=device.torch_device)
        self._words = self._buf.view(torch.int32)
        self._value = 0
        self.flush()

    def flush(self) -> None:
        self._value = (self._value + 1) & 0x7FFF_FFFF
        self._words.fill_(self._value)


def make_flusher(device: DeviceInfo) -> Flusher:
    """The flusher for `device`, sized from its description."""
    return CudaFlusher(device) if device.is_cuda else CpuFlusher(device)
