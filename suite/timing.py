"""Timing settings: the bounds of warmup and of the adaptive stopping rule.

Defaults here; a spec's benchmark may override any of them, and the CLI overrides the spec.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from enum import StrEnum
from typing import Any, Mapping


class SampleKind(StrEnum):
    """What one sample of an op measures (an op's `sample_kind`)."""

    DEVICE_TIME = "device_time"  # GPU time of one launch (event pair), host time on a CPU
    HOST_PER_LAUNCH = "host_per_launch"  # host wall time per launch of back-to-back launches, one sync at the end


class StopReason(StrEnum):
    """Why sampling stopped (runners.stopping decides; the database stores the value): the CI
    reached the target precision, the CI is no wider than the clock's resolution, the noise estimate
    settled, or a bound was hit."""

    CONVERGED = "converged"
    CLOCK_RESOLUTION = "clock_resolution"
    NOISE_SETTLED = "noise_settled"
    MAX_SAMPLES = "max_samples"
    MAX_TIME = "max_time"


# stop reasons of a case that never reached its target precision: it ran out of time or samples, or
# its noise estimate settled above the target (an inherently noisy case)
UNCONVERGED_STOPS = (StopReason.MAX_TIME, StopReason.MAX_SAMPLES, StopReason.NOISE_SETTLED)


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

    def override(self, values: Mapping[str, Any] | None) -> "TimingSettings":
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
