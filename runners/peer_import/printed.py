"""Figures as a tool printed them: the value and how finely it was printed.

A figure printed as `49.74` stands for anything in [49.735, 49.745): half a unit of its last digit
is its rounding. Comparing rooflab's recomputed figure with a printed one allows that rounding and no
more (`agrees`), so a disagreement beyond it is a real one (a wrong column, a wrong model, an edited
file), never a rounding artefact. `PrintedRate` is a rate a file printed for one result, with what
it is a rate of; `PrintedTime` a time it printed.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum

_NUMBER = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$")


@dataclass(frozen=True)
class Printed:
    """A printed number: its value and half a unit of its last printed digit."""

    value: float
    half_ulp: float

    @property
    def text(self) -> str:
        return f"{self.value:g}"


def is_number(token: str) -> bool:
    return bool(_NUMBER.match(token))


def parse_printed(token: str) -> Printed:
    """`token` as a number with its printed rounding (ValueError when it is not a number)."""
    if not _NUMBER.match(token):
        raise ValueError(f"{token!r} is not a number")
    value = float(token)
    mantissa, _, exponent = token.lower().partition("e")
    decimals = len(mantissa.split(".", 1)[1]) if "." in mantissa else 0
    scale = int(exponent) if exponent else 0
    return Printed(value, 0.5 * 10.0 ** (scale - decimals))


def exact(value: float) -> Printed:
    """A figure stored at full precision (a JSON double): a rounding of a few parts in 10^15."""
    return Printed(value, abs(value) * 1e-12)


def agrees(recomputed: float, printed: Printed, relative_slack: float = 0.0) -> bool:
    """Whether `recomputed` lies within the printed rounding of `printed`, widened by
    `relative_slack` of the value (the rounding of the inputs it was recomputed from)."""
    if not math.isfinite(recomputed):
        return False
    allowed = printed.half_ulp + relative_slack * abs(recomputed) + 1e-12 * abs(printed.value)
    return abs(recomputed - printed.value) <= allowed


class StoredTime(StrEnum):
    """The statistic of a stored result that a tool divided its bytes by to print a rate."""

    MEDIAN = "median_ms"  # the result's figure (nccl-tests' time; BabelStream's fastest run)
    MEAN = "mean_ms"  # nvbench's bandwidth is from its mean GPU time


@dataclass(frozen=True)
class PrintedRate:
    """A rate the file printed for one result, and how it follows from what rooflab stores of that result:
    `scale` x its stored bytes over its stored `time`. The agreement rule (agreement.py) re-derives it
    from the stored figures and holds it against `printed` within the printed rounding, widened by
    `time_slack`, the relative rounding of the printed time the stored time was read from."""

    what: str  # as the tool names it: busbw, algbw, `Triad MBytes/sec`, ...
    printed_gbps: Printed  # the printed figure in GB/s (1e9 bytes/s), its rounding scaled with it
    where: str  # `line 31` or `results[4]`: where the file printed it
    line: int | None = None
    time: StoredTime = StoredTime.MEDIAN
    scale: float = 1.0  # the printed rate's bytes per stored byte (algbw: 1 / the bus factor)
    time_slack: float = 0.0


@dataclass(frozen=True)
class PrintedTime:
    """A time the file printed for one result, where rooflab stores a finer one read from a rate the file
    printed more finely (BabelStream's fastest run, from its bandwidth): the agreement rule holds the
    stored `time` to `printed_ms` within its printed rounding, widened by `slack` (relative)."""

    what: str
    printed_ms: Printed
    where: str
    line: int | None = None
    time: StoredTime = StoredTime.MEDIAN
    slack: float = 0.0
