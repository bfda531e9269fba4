"""Raw samples as a compact blob: little-endian float64, 8 bytes per sample."""
from __future__ import annotations

import struct
from collections.abc import Sequence


def pack(samples_ms: Sequence[float]) -> bytes:
    return struct.pack(f"<{len(samples_ms)}d", *samples_ms)


def unpack(blob: bytes, count: int | None = None) -> tuple[float, ...]:
    n = len(blob) // 8
    if len(blob) % 8 or (count is not None and count != n):
        raise ValueError(f"sample blob of {len(blob)} bytes does not hold {count} float64 values")
    return struct.unpack(f"<{n}d", blob)
