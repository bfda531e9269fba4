"""Dtype names of the suite: element sizes, torch dtypes and the tolerance policy of checks.

Names are spelled as torch spells them, plus `tf32` (float32 storage, GEMM on tensor cores with a
10-bit mantissa). torch is imported lazily so that FLOP/byte models can be used without it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

_ELEMENT_SIZE = {
    "float64": 8,
    "float32": 4,
    "tf32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int8": 1,
    "int32": 4,
}

# Unit roundoff (half an ulp at 1.0) of the values a kernel of this dtype produces or consumes.
# tf32 rounds float32 inputs to a 10-bit mantissa; float8 GEMMs write bfloat16 results.
_UNIT_ROUNDOFF = {
    "float64": 2.0**-53,
    "float32": 2.0**-24,
    "tf32": 2.0**-11,
    "float16": 2.0**-11,
    "bfloat16": 2.0**-8,
    "float8_e4m3fn": 2.0**-8,
    "float8_e5m2": 2.0**-8,
}
# Unit roundoff of the accumulator: float64 accumulates in float64, every other float dtype in float32.
_ACCUMULATOR_ROUNDOFF = {name: (2.0**-53 if name == "float64" else 2.0**-24) for name in _UNIT_ROUNDOFF}

# rtol = _ULPS * unit roundoff; float32/float64 get more ulps because transcendental functions
# (erf, exp, cos) of vectorised libraries are accurate to a few ulps only; tf32 inputs are rounded
# (or truncated) before the products, which costs about one more ulp per factor.
_ULPS = {"float64": 64.0, "float32": 32.0, "tf32": 16.0}
_DEFAULT_ULPS = 4.0


def known_dtypes() -> tuple[str, ...]:
    return tuple(_ELEMENT_SIZE)


def element_size(dtype: str) -> int:
    """Bytes per element of `dtype` (tf32 -> 4, float8_* -> 1)."""
    try:
        return _ELEMENT_SIZE[dtype]
    except KeyError:
        raise KeyError(f"unknown dtype {dtype!r}; known dtypes: {', '.join(_ELEMENT_SIZE)}") from None


# dtypes that are a way of computing on another's storage: tf32 is float32 data multiplied on the
# tensor cores with a 10-bit mantissa
_STORED_AS = {"tf32": "float32"}


def storage_dtype(dtype: str) -> str:
    """The dtype that holds `dtype`'s values (tf32 -> float32; every other dtype itself): the one
    mapping, for the tensors made (torch_dtype) and the roofs of its pointwise math (reports.roofs)."""
    return _STORED_AS.get(dtype, dtype)


def torch_dtype(dtype: str) -> Any:
    """The torch dtype that stores `dtype` (tf32 -> torch.float32)."""
    import torch

    element_size(dtype)  # raises KeyError for unknown names
    return getattr(torch, storage_dtype(dtype))


def is_float(dtype: str) -> bool:
    return dtype in _UNIT_ROUNDOFF


@dataclass(frozen=True)
class Tolerance:
    """An output element passes when |out - ref| <= atol + rtol * |ref|.

    `atol` is relative to `scale`, the root mean square of the reference values being compared,
    so one policy serves outputs of any magnitude (softmax probabilities and GEMM sums alike).
    """

    rtol: float
    atol_scale: float

    def atol(self, scale: float) -> float:
        return self.atol_scale * scale


def tolerance(dtype: str, accumulation: int = 1) -> Tolerance:
    """Tolerance for outputs of `dtype` that each sum `accumulation` terms (k of a GEMM, cols of a
    row reduction, seq_k of attention; 1 for pointwise ops).

    rtol covers the rounding of the output itself (a few ulps). The absolute part grows with the
    square root of the accumulation length times the accumulator's unit roundoff, which bounds the
    random-walk error of a long sum relative to the RMS of the result (Higham's probabilistic bound).
    """
    if dtype not in _UNIT_ROUNDOFF:
        raise KeyError(f"no tolerance for dtype {dtype!r}; float dtypes: {', '.join(_UNIT_ROUNDOFF)}")
    if accumulation < 1:
        raise ValueError(f"accumulation must be >= 1, got {accumulation}")
    rtol = _ULPS.get(dtype, _DEFAULT_ULPS) * _UNIT_ROUNDOFF[dtype]
    atol_scale = rtol + 8.0 * _ACCUMULATOR_ROUNDOFF[dtype] * math.sqrt(accumulation)
    return Tolerance(rtol=rtol, atol_scale=atol_scale)
