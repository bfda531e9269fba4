"""Timing settings: the bounds of warmup and of the adaptive stopping rule, how a cold sample's
cache is flushed and the pace of the samples.

Defaults here; a spec's benchmark may override any of them, and the CLI overrides the spec.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from typing import Any


class SampleKind(StrEnum):
    """What one sample of an op measures (an op's `sample_kind`)."""

    DEVICE_TIME = "device_time"  # GPU time of one launch (event pair), host time on a CPU
    HOST_PER_LAUNCH = "host_per_launch"  # host wall time per launch of back-to-back launches, one sync at the end


class StopReason(StrEnum):
    """Why sampling stopped (runners.engine.stopping decides; the database stores the value): the CI
    reached the target precision, the CI is no wider than the clock's resolution, the noise estimate
    settled, or a bound was hit."""

    CONVERGED = "converged"
    CLOCK_RESOLUTION = "clock_resolution"
    NOISE_SETTLED = "noise_settled"
    MAX_SAMPLES = "max_samples"
    MAX_TIME = "max_time"


class FlushMethod(StrEnum):
    """How the cache is made cold before a sample (a setting, and the measurement's `flush_method`).

    The sweep covers at least the cache (runners.engine.flush sizes it); docs/timing.md says why
    writing is the default."""

    WRITE_SWEEP = "write_sweep"  # a write of the whole buffer: the cache ends full of dirty lines
    READ_SWEEP = "read_sweep"  # a read-only pass: the cache ends holding clean lines only
    NONE = "none"  # hot mode: no flush (recorded only, never a setting)


class Pace(StrEnum):
    """How samples follow one another (a setting, and the measurement's `pace`)."""

    BACK_TO_BACK = "back_to_back"  # each sample right behind the previous one (batched behind a stream hold)
    IDLE = "idle"  # synchronise after each sample, then leave the device idle at least as long as the sample took


# the values a setting may take (FlushMethod.NONE is what a hot result records, not a choice)
FLUSH_CHOICES = (FlushMethod.WRITE_SWEEP.value, FlushMethod.READ_SWEEP.value)
PACE_CHOICES = tuple(p.value for p in Pace)
# pace idle: the idle time after a sample is its own duration, but at most this long (and at least
# IDLE_MIN_MS, so that a microsecond kernel still leaves the device idle for a measurable time)
IDLE_MAX_MS = 100.0
IDLE_MIN_MS = 0.05


def idle_after_ms(sample_ms: float) -> float:
    """How long pace `idle` leaves the device idle after a sample of `sample_ms`."""
    return min(max(sample_ms, IDLE_MIN_MS), IDLE_MAX_MS)


# stop reasons of a case that never reached its target precision: it ran out of time or samples, or
# its noise estimate settled above the target (an inherently noisy case)
UNCONVERGED_STOPS = (StopReason.MAX_TIME, StopReason.MAX_SAMPLES, StopReason.NOISE_SETTLED)


class TimingSettingError(ValueError):
    """A timing setting breaks its rule. `name` is the setting, `reason` what is wrong and what is
    allowed; each caller puts its own place in front (a spec's line and field, a CLI flag)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.name = name
        self.reason = reason


@dataclass(frozen=True)
class _Bound:
    whole: bool  # a whole number (an int field)
    low: float
    low_open: bool  # value > low (else >= low)
    high_open: float | None = None  # value < high_open
    text: str = ""


@dataclass(frozen=True)
class _Choice:
    """A setting that takes one of a few names (an enum's values)."""

    choices: tuple[str, ...]

    @property
    def text(self) -> str:
        return "one of " + ", ".join(self.choices)


# The one statement of what each timing setting may be: the spec, the CLI and the Python API all check
# here (TimingSettings checks itself when it is built).
BOUNDS: dict[str, _Bound | _Choice] = {
    "warmup_ms": _Bound(False, 0.0, False, text=">= 0 (milliseconds)"),
    "warmup_calls": _Bound(True, 0, False, text="a whole number >= 0"),
    "min_samples": _Bound(True, 1, False, text="a whole number >= 1"),
    "max_samples": _Bound(True, 1, False, text="a whole number >= 1"),
    "min_time_ms": _Bound(False, 0.0, False, text=">= 0 (milliseconds)"),
    "max_time_ms": _Bound(False, 0.0, True, text="> 0 (milliseconds)"),
    "target_precision": _Bound(False, 0.0, True, 1.0, text="a fraction in (0, 1), e.g. 0.005 for 0.5 %"),
    "graph_launches": _Bound(True, 0, False, text="a whole number >= 0 (0: chosen from a probe call)"),
    "flush_method": _Choice(FLUSH_CHOICES),
    "pace": _Choice(PACE_CHOICES),
}
CHOICE_SETTINGS = tuple(name for name, b in BOUNDS.items() if isinstance(b, _Choice))
# (lower, upper): the first may not exceed the second
ORDERED = (("min_samples", "max_samples"), ("min_time_ms", "max_time_ms"))


def check_timing_value(name: str, value: Any) -> int | float | str:
    """`value` as the setting `name` holds it (an int for a whole-number setting given as 20.0, the
    plain string of a named choice), or TimingSettingError. An unknown name is a KeyError."""
    bound = BOUNDS[name]
    if isinstance(bound, _Choice):
        if not isinstance(value, str) or value not in bound.choices:
            raise TimingSettingError(name, f"must be {bound.text}; got {value!r}")
        return str(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TimingSettingError(name, f"must be {bound.text}; got {value!r}, not a finite number")
    if bound.whole and int(value) != value:
        raise TimingSettingError(name, f"must be {bound.text}; got {value!r}")
    below = value <= bound.low if bound.low_open else value < bound.low
    above = bound.high_open is not None and value >= bound.high_open
    if below or above:
        raise TimingSettingError(name, f"must be {bound.text}; got {value!r}")
    return int(value) if bound.whole else float(value)


def check_timing_order(values: Mapping[str, Any]) -> None:
    """TimingSettingError when a lower bound exceeds its upper one among the settings given."""
    for low, high in ORDERED:
        if low in values and high in values and values[low] > values[high]:
            raise TimingSettingError(
                low, f"{low} ({values[low]}) exceeds {high} ({values[high]}); allowed: {low} <= {high}"
            )


@dataclass(frozen=True)
class TimingSettings:
    warmup_ms: float = 25.0  # warmup lasts at least this long ...
    warmup_calls: int = 3  # ... and at least this many calls (the first call is timed apart)
    min_samples: int = 10
    max_samples: int = 10_000
    min_time_ms: float = 50.0  # sample at least this long (sum of timed samples and overhead)
    max_time_ms: float = 3_000.0  # give up converging after this long per case
    target_precision: float = 0.005  # CI95 half-width of the median / median
    graph_launches: int = 0  # launches captured per CUDA graph (graph mode); 0 = chosen from a probe call
    flush_method: str = FlushMethod.WRITE_SWEEP.value  # how a cold sample's cache is flushed (a FlushMethod)
    pace: str = Pace.BACK_TO_BACK.value  # how samples follow one another (a Pace)

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, check_timing_value(f.name, getattr(self, f.name)))
        check_timing_order({f.name: getattr(self, f.name) for f in fields(self)})

    def override(self, values: Mapping[str, Any] | None) -> TimingSettings:
        """A copy with the non-None entries of `values` applied (unknown names raise KeyError)."""
        if not values:
            return self
        known = {f.name for f in fields(self)}
        unknown = set(values) - known
        if unknown:
            raise KeyError(f"unknown timing setting(s): {', '.join(sorted(unknown))}")
        return replace(self, **{k: v for k, v in values.items() if v is not None})

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))
