"""The inputs of the collective ops and the exact check of their outputs (suite/ops/collective.py).

Every rank's input is a seeded sequence of small nonzero integers, different per rank, that any
rank can regenerate a slice at a time (`values`): each rank computes the exact output it should
hold from every rank's seed and compares element for element, a chunk at a time, so the check
never needs more memory than a chunk however large the message. The magnitude shrinks with the
group (`exact_magnitude`) so that every partial sum is an integer that float32, float16 and
bfloat16 hold exactly, whatever order the backend adds in (up to EXACT_SUM_LIMIT ranks).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from rooflab.suite.lazy import torch

CHECK_CHUNK = 1 << 22  # elements generated or compared at a time
EXACT_SUM_LIMIT = 256  # |sum| up to which bfloat16 (8-bit significand) holds every integer
_MODULUS = 2_147_483_647  # 2^31 - 1, the Park-Miller generator's modulus

Expected = Callable[[int, int], "torch.Tensor"]  # (start, stop) -> float64 values of out[start:stop]


def rank_key(seed: int, rank: int) -> int:
    """The seed of one rank's input."""
    return (int(seed) * 1_000_003 + 7_919 * (int(rank) + 1)) % _MODULUS


def exact_magnitude(ranks: int) -> int:
    """Largest |value| of an input, so that a sum over `ranks` ranks stays exact in bfloat16."""
    return max(1, min(16, EXACT_SUM_LIMIT // max(1, ranks)))


def values(key: int, start: int, stop: int, magnitude: int, device: str) -> torch.Tensor:
    """Elements start..stop-1 of a seeded sequence of nonzero integers in [-magnitude, magnitude]
    (float64), computable for any slice: two Park-Miller (Lehmer) steps over a mix of the index and
    `key`. Every intermediate stays below 2^62, so int64 arithmetic never overflows."""
    i = torch.arange(start, stop, dtype=torch.int64, device=device)
    a = (i % 1_000_003) * 7919 + (i // 1_000_003) * 104_729 + int(key) % _MODULUS
    b = (a * 48_271) % _MODULUS
    c = (b * 48_271) % _MODULUS
    v = c % (2 * magnitude)  # 0 .. 2m-1 -> -m .. -1, 1 .. m
    v = torch.where(v < magnitude, v - magnitude, v - magnitude + 1)
    return v.to(torch.float64)


def fill(buffer: torch.Tensor, key: int, magnitude: int) -> None:
    """`buffer` (1-D) filled with `values(key, ...)`, a chunk at a time."""
    for start in range(0, buffer.numel(), CHECK_CHUNK):
        stop = min(buffer.numel(), start + CHECK_CHUNK)
        buffer[start:stop].copy_(values(key, start, stop, magnitude, str(buffer.device)))


def input_of(seed: int, rank: int, size: int, offset: int, device: str) -> Expected:
    """Rank `rank`'s input (in a group of `size`) from element `offset` on, as (start, stop) -> values."""
    key, magnitude = rank_key(seed, rank), exact_magnitude(size)
    return lambda start, stop: values(key, offset + start, offset + stop, magnitude, device)


def summed(parts: Sequence[Expected]) -> Expected:
    """The elementwise sum of `parts` (in float64: exact for these integers)."""
    def expected(start: int, stop: int) -> torch.Tensor:
        total = parts[0](start, stop)
        for part in parts[1:]:
            total = total + part(start, stop)
        return total

    return expected


def blocks(block: int, parts: Sequence[Expected]) -> Expected:
    """`parts` laid end to end, `block` elements each (part q covers [q·block, (q+1)·block))."""
    def expected(start: int, stop: int) -> torch.Tensor:
        pieces = []
        at = start
        while at < stop:
            q, within = divmod(at, block)
            end = min(stop, (q + 1) * block)
            pieces.append(parts[q](within, within + end - at))
            at = end
        return torch.cat(pieces)

    return expected


def check_exact(out: torch.Tensor, expected: Expected, what: str) -> str | None:
    """None when `out` (read flat) equals `expected(start, stop)` element for element; else how many
    elements differ and the first of them."""
    flat = out.reshape(-1)
    wrong, first = 0, None
    for start in range(0, flat.numel(), CHECK_CHUNK):
        stop = min(flat.numel(), start + CHECK_CHUNK)
        got = flat[start:stop].to(torch.float64)
        bad = got != expected(start, stop).to(got.device)
        count = int(bad.sum())
        if count and first is None:
            i = int(bad.nonzero()[0])
            first = (start + i, float(got[i]), float(expected(start + i, start + i + 1)[0]))
        wrong += count
    if wrong and first is not None:
        index, got_value, want_value = first
        return (f"{what}: {wrong} of {flat.numel()} elements differ from the exact values; first at index "
                f"{index}: got {got_value:g}, expected {want_value:g}")
    return None
