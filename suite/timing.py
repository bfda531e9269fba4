"""Timing settings: the bounds of warmup and of the adaptive stopping rule.

Each setting is declared once, as a field of `TimingSettings` with its default, its rule and its
help: the spec's fields, the command line's options and the Python API's keywords are made from
that declaration. Defaults here; a spec's benchmark may override any of them, and the CLI overrides
the spec.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from rooflab.vocab import FlushMethod, Pace


class TimingSettingError(ValueError):
    """A timing setting breaks its rule. `name` is the setting, `reason` what is wrong and what is
    allowed; each caller puts its own place in front (a spec's line and field, a CLI flag)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.name = name
        self.reason = reason


@dataclass(frozen=True)
class Setting:
    """What one timing setting may be and what it means. The one declaration of a setting: the spec's
    `timing:` fields (suite/spec.py), the `rooflab run` options (runners/cli/timing_options.py) and
    the `rooflab.measure` keywords are made from these, and every one of them checks here."""

    text: str  # what is allowed, for messages ("a whole number >= 1")
    help: str  # what it does, for the command line's help
    low: float = 0.0
    low_open: bool = False  # value > low (else >= low)
    high_open: float | None = None  # value < high_open
    whole: bool = False  # a whole number (an int field)
    choices: tuple[str, ...] = ()  # a setting that takes one of these names (an enum's values)


# the values a choice setting may take (FlushMethod.NONE is what a hot result records, not a choice)
FLUSH_CHOICES = (FlushMethod.WRITE_SWEEP.value, FlushMethod.READ_SWEEP.value)
PACE_CHOICES = (Pace.BACK_TO_BACK.value, Pace.IDLE.value)  # Pace.BARRIER is recorded (collectives), never chosen
# pace idle: the idle time after a sample is its own duration, but at most this long (and at least
# IDLE_MIN_MS, so that a microsecond kernel still leaves the device idle for a measurable time)
IDLE_MAX_MS = 100.0
IDLE_MIN_MS = 0.05


def idle_after_ms(sample_ms: float) -> float:
    """How long pace `idle` leaves the device idle after a sample of `sample_ms`."""
    return min(max(sample_ms, IDLE_MIN_MS), IDLE_MAX_MS)


def _setting(default: Any, **setting: Any) -> Any:
    return field(default=default, metadata={"setting": Setting(**setting)})


# a timing setting's value, as its setting holds it (`check_timing_value`): a whole number, a number, or a
# named choice; what a caller's overrides map setting names to once checked
TimingValue = int | float | str


def check_timing_value(name: str, value: Any) -> TimingValue:
    """`value` as the setting `name` holds it (an int for a whole-number setting given as 20.0, the
    plain string of a named choice), or TimingSettingError. An unknown name is a KeyError."""
    bound = BOUNDS[name]
    if bound.choices:
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
    """The bounds of warmup and of the adaptive stopping rule, each declared once with its rule."""

    warmup_ms: float = _setting(25.0, text=">= 0 (milliseconds)", help="Warmup lasts at least this long (ms).")
    warmup_calls: int = _setting(3, whole=True, text="a whole number >= 0",
                                 help="... and at least this many calls (the first call is timed apart).")
    min_samples: int = _setting(10, whole=True, low=1, text="a whole number >= 1", help="Samples at least this many.")
    max_samples: int = _setting(10_000, whole=True, low=1, text="a whole number >= 1",
                                help="Samples at most this many.")
    min_time_ms: float = _setting(50.0, text=">= 0 (milliseconds)",
                                  help="Samples at least this long (ms; timed samples and overhead).")
    max_time_ms: float = _setting(3_000.0, low_open=True, text="> 0 (milliseconds)",
                                  help="Gives up converging after this long (ms).")
    target_precision: float = _setting(
        0.005, low_open=True, high_open=1.0, text="a fraction in (0, 1), e.g. 0.005 for 0.5 %",
        help="Stop when the median's 95 % CI half-width / median is below this (0, 1).")
    graph_launches: int = _setting(0, whole=True, text="a whole number >= 0 (0: chosen from a probe call)",
                                   help="Launches captured per CUDA graph in graph mode (0: sized from a probe call).")
    flush_method: str = _setting(
        FlushMethod.WRITE_SWEEP.value, choices=FLUSH_CHOICES, text="one of " + ", ".join(FLUSH_CHOICES),
        help="How a cold sample's cache is flushed: write_sweep (as after a kernel that wrote) or read_sweep.")
    pace: str = _setting(
        Pace.BACK_TO_BACK.value, choices=PACE_CHOICES, text="one of " + ", ".join(PACE_CHOICES),
        help="back_to_back, or idle: synchronise after each sample and leave the device idle as long.")

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


# The rule of each setting, by name (from its declaration above), and the pairs whose first may not
# exceed the second.
BOUNDS: dict[str, Setting] = {f.name: f.metadata["setting"] for f in fields(TimingSettings)}
CHOICE_SETTINGS = tuple(name for name, rule in BOUNDS.items() if rule.choices)
ORDERED = (("min_samples", "max_samples"), ("min_time_ms", "max_time_ms"))
