"""Figures as a tool printed them: the value and how finely it was printed.

A figure printed as `49.74` stands for anything in [49.735, 49.745): half a unit of its last digit
is its rounding. Comparing rooflab's recomputed figure with a printed one allows that rounding and no
more (`agrees`), so a disagreement beyond it is a real one (a wrong column, a wrong model, an edited
file), never a rounding artefact.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

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
