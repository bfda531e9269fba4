"""Nightly series with known changes, for the regression tests and tests/perf/bench_regressions.py.

Each generator returns the per-night medians (ms) of one series around `level_ms`, with Gaussian
noise of `noise` x level_ms (additive, so a step of +10 % at 2 % noise is five noise deviations),
drawn from numpy's default_rng(seed): the same seed gives the same series.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

NIGHTS = 60
LEVEL_MS = 1.0


class Kind(StrEnum):
    NOISE = "noise"
    STEP = "step"  # a lasting change of level (negative: an improvement)
    SPIKE = "spike"  # one night off, the rest at the old level
    DRIFT = "drift"  # a linear ramp over the newest nights
    TWO_BAND = "two_band"  # each night in one of two levels


@dataclass(frozen=True)
class Series:
    kind: Kind
    values_ms: np.ndarray
    change_at: int | None  # first night of the change (step, spike, drift start); None: none planted
    size: float  # relative size of the planted change (0 for noise)


def _noise(rng: np.random.Generator, n: int, noise: float, level_ms: float) -> np.ndarray:
    return level_ms * noise * rng.standard_normal(n)


def noise_only(*, noise: float, seed: int, nights: int = NIGHTS, level_ms: float = LEVEL_MS) -> Series:
    rng = np.random.default_rng(seed)
    return Series(Kind.NOISE, level_ms + _noise(rng, nights, noise, level_ms), None, 0.0)


def step(*, size: float, at: int, noise: float, seed: int, nights: int = NIGHTS, level_ms: float = LEVEL_MS) -> Series:
    """Level x (1 + size) from night `at` on (a negative `at` counts from the end: -2 = the newest two)."""
    rng = np.random.default_rng(seed)
    at = at % nights
    level = np.full(nights, level_ms)
    level[at:] *= 1 + size
    return Series(Kind.STEP, level + _noise(rng, nights, noise, level_ms), at, size)


def spike(*, size: float, at: int, noise: float, seed: int, nights: int = NIGHTS, level_ms: float = LEVEL_MS) -> Series:
    """One night at level x (1 + size)."""
    rng = np.random.default_rng(seed)
    at = at % nights
    level = np.full(nights, level_ms)
    level[at] *= 1 + size
    return Series(Kind.SPIKE, level + _noise(rng, nights, noise, level_ms), at, size)


def drift(*, size: float, over: int, noise: float, seed: int, nights: int = NIGHTS,
          level_ms: float = LEVEL_MS) -> Series:
    """A ramp over the newest `over` nights that ends `size` above the old level."""
    rng = np.random.default_rng(seed)
    level = np.full(nights, level_ms)
    level[nights - over:] *= 1 + size * np.arange(1, over + 1) / over
    return Series(Kind.DRIFT, level + _noise(rng, nights, noise, level_ms), nights - over, size)


def two_band(*, gap: float, upper_share: float, noise: float, seed: int, nights: int = NIGHTS,
             level_ms: float = LEVEL_MS) -> Series:
    """Each night in the lower band, or with probability `upper_share` in the band `gap` above it."""
    rng = np.random.default_rng(seed)
    upper = rng.random(nights) < upper_share
    level = np.where(upper, level_ms * (1 + gap), level_ms)
    return Series(Kind.TWO_BAND, level + _noise(rng, nights, noise, level_ms), None, gap)
