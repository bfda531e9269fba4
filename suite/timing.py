"""Timing settings: the bounds of warmup and of the adaptive stopping rule.

Defaults here; a spec's benchmark may override any of them, and the CLI overrides the spec.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any


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


# The one statement of what each timing setting may be: the spec, the CLI and the Python API all check
# here (TimingSettings checks itself when it is built).
BOUNDS: dict[str, _Bound] = {
    "warmup_ms": _Bound(False, 0.0, False, text=">= 0 (milliseconds)"),
    "warmup_calls": _Bound(True, 0, False, text="a whole number >= 0"),
    "min_samples": _Bound(True, 1, False, text="a whole number >= 1"),
    "max_samples": _Bound(True, 1, False, text="a whole number >= 1"),
    "min_time_ms": _Bound(False, 0.0, False, text=">= 0 (milliseconds)"),
    "max_time_ms": _Bound(False, 0.0, True, text="> 0 (milliseconds)"),
    "target_precision": _Bound(False, 0.0, True, 1.0, text="a fraction in (0, 1), e.g. 0.005 for 0.5 %"),
    "graph_launches": _Bound(True, 0, False, text="a whole number >= 0 (0: chosen from a probe call)"),
}
# (lower, upper): the first may not exceed the second
ORDERED = (("min_samples", "max_samples"), ("min_time_ms", "max_time_ms"))


def check_timing_value(name: str, value: Any) -> int | float:
    """`value` as the setting `name` holds it (an int for a whole-number setting given as 20.0), or
    TimingSettingError. An unknown name is a KeyError."""
    bound = BOUNDS[name]
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
