"""What the op library needs to know about the device a case runs on.

The runner fills this in from the environment it captured; ops use it to decide whether a case
can run (fp8 needs compute capability 8.9, inputs must fit in memory) and where to allocate.
"""
from __future__ import annotations

from dataclasses import dataclass

from rooflab.vocab import DeviceKind


@dataclass(frozen=True)
class DeviceInfo:
    kind: str  # a DeviceKind: "cuda" or "cpu"
    name: str  # "NVIDIA H100 80GB HBM3", or the CPU model
    torch_device: str  # "cuda:0", "cpu"
    memory_bytes: int  # total device memory (host RAM for the CPU)
    l2_bytes: int  # L2 size of a GPU; last-level cache size of a CPU
    compute_capability: tuple[int, int] | None = None  # None on a CPU
    sm_count: int = 0  # SMs of a GPU; cores of a CPU

    @property
    def is_cuda(self) -> bool:
        return self.kind == DeviceKind.CUDA
