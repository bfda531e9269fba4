"""The one derivation of a rate from a measured time, and of the time a work takes at a rate.

TFLOP/s = flops / seconds / 1e12; GB/s = bytes / seconds / 1e9; Geval/s = elementary-function
evaluations / seconds / 1e9 (decimal units, as datasheets give them). The store writes these into
each result and every report figure uses the same functions. They take plain numbers or pandas
Series / numpy arrays alike.
"""
from __future__ import annotations

from typing import TypeVar

N = TypeVar("N")  # float, or an array-like that does arithmetic (pandas Series, numpy array)

TFLOP = 1e12
GB = 1e9
MS_PER_S = 1e3


def tflops(flops: N, median_ms: N) -> N:
    """TFLOP/s of `flops` floating-point operations done in `median_ms` milliseconds."""
    return flops / (median_ms / MS_PER_S) / TFLOP  # type: ignore[operator,return-value]  # N: a float or an array that does arithmetic


def gbps(nbytes: N, median_ms: N) -> N:
    """GB/s of `nbytes` bytes moved in `median_ms` milliseconds."""
    return nbytes / (median_ms / MS_PER_S) / GB  # type: ignore[operator,return-value]  # N: a float or an array that does arithmetic


def ms_at_tflops(flops: N, rate_tflops: N) -> N:
    """Milliseconds that `flops` take at `rate_tflops` TFLOP/s."""
    return flops / (rate_tflops * TFLOP) * MS_PER_S  # type: ignore[operator,return-value]  # N: a float or an array that does arithmetic


def ms_at_gbps(nbytes: N, rate_gbps: N) -> N:
    """Milliseconds that `nbytes` take at `rate_gbps` GB/s."""
    return nbytes / (rate_gbps * GB) * MS_PER_S  # type: ignore[operator,return-value]  # N: a float or an array that does arithmetic


GEVAL = 1e9  # elementary-function evaluations (cos, exp, erf) are counted in billions per second


def gevals(evaluations: N, median_ms: N) -> N:
    """Billions of elementary-function evaluations per second: `evaluations` in `median_ms` milliseconds."""
    return evaluations / (median_ms / MS_PER_S) / GEVAL  # type: ignore[operator,return-value]  # N: a float or an array that does arithmetic


def ms_at_gevals(evaluations: N, rate_gevals: N) -> N:
    """Milliseconds that `evaluations` take at `rate_gevals` billion evaluations per second."""
    return evaluations / (rate_gevals * GEVAL) * MS_PER_S  # type: ignore[operator,return-value]  # N: a float or an array that does arithmetic
